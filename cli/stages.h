/* sched-run on a stages config: a job graph (cli/stages.c). */
#ifndef SCHEDRUN_CLI_STAGES_H
#define SCHEDRUN_CLI_STAGES_H

typedef struct stages_opts {
  const char *devices; /* --devices, or NULL */
  const char *dot;     /* --dot FILE, or NULL */
  int repeat;          /* --repeat, or 0 */
  int no_cache, json, quiet, timeout_s;
  int compile_timeout_s; /* --compile-timeout, or 0 */
  int retune;            /* --retune */
} stages_opts;

/* Runs the graph `repeat` times and reports every stage of every run;
 * returns sched-run's exit status. */
int stages_run(const char *path, const stages_opts *o);

#endif
