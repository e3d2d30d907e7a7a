/* sched-run --json: one JSON object on standard output for every outcome. */
#ifndef SCHEDRUN_CLI_JSON_OUT_H
#define SCHEDRUN_CLI_JSON_OUT_H

#include <json-c/json.h>

#include "schedrun.h"

typedef struct cli_outcome {
  int exit_status;
  const char *status;   /* verified, not-verified, usage-error, config-error, compile-error, failed, interrupted */
  const char *config;   /* the config's path ("-": standard input) */
  const char *signal;   /* the signal that stopped the run, or NULL */
  const char *message;  /* the error, as printed; NULL when none */
  const schedrun_t *s;  /* NULL when it did not open */
  const schedrun_program_t *prog;
  const schedrun_report_t *rep;
  json_object *ranks;   /* across MPI ranks: one entry per rank (taken over); NULL otherwise */
  const char *name;     /* a stages config's name (its `program` key), or NULL */
  json_object *stages;  /* a stages config's stage runs (taken over), or NULL */
  json_object *failures; /* without a report: the failures (taken over), or NULL for none */
} cli_outcome;

/* Prints the outcome as one line of JSON; every string valid UTF-8 (bytes
 * that are not become U+FFFD). Returns -1 when it could not be written. */
int json_print_outcome(const cli_outcome *o);

#endif
