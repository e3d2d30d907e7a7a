/*
 * The program builder's document (lib/api_builder.c): the builder's state
 * and the helpers that add libyaml nodes to it, each placed at the builder
 * call that made it, and that note a misuse for schedrun_builder_finish to
 * report. Private to lib/.
 */
#ifndef SCHEDRUN_BUILDER_DOC_H
#define SCHEDRUN_BUILDER_DOC_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "lib/api.h"

struct schedrun_builder {
  yaml_document_t doc;
  char *name;
  int root, kernels, buffers, steps, expect; /* node ids; 0: none yet */
  int last_buffer;                           /* the mapping of the buffer added last, 0: none */
  int last_launch;                           /* the launch's mapping when the step added last is one, else 0 */
  int last_tune, last_constants;             /* its autotune mapping (0: not autotuned), and its constants (0: none yet) */
  int seq[PROG_MAX_DEPTH + 1];               /* the step list being added to, per depth */
  uint32_t count[PROG_MAX_DEPTH + 1];        /* steps added so far, per depth */
  int depth;
  char path[64];                             /* "2.1": the index path of the open loops */
  char **what;                               /* per call: what it made ("step 2.1 (...)") */
  const char **part;                         /* per call: what its numbered parts are ("args") */
  size_t ncalls, cap;
  prog_blob *blobs;
  size_t nblobs;
  prog_hostfn *hostfns; /* host steps' functions: `host: {task: K}` runs hostfns[K] */
  size_t nhostfns;
  bool failed;    /* out of memory: finish says so */
  char *misuse;   /* the first call that could not be made (finish says so) */
};

/* Notes the first misuse (finish reports it). */
void bd_misuse(schedrun_builder_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A new builder call: its number (the place of the nodes it makes); part
 * names its numbered parts ("args"), or NULL. */
int bd_call(schedrun_builder_t *b, const char *part, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Node id's place: call `at`, part `sub` (0: the call itself). */
void bd_place(schedrun_builder_t *b, int id, int at, int sub);
/* New nodes (0 with b->failed set when out of memory): a scalar, a number
 * as text, a mapping, a sequence. */
int bd_scalar(schedrun_builder_t *b, const char *text, int at, int sub);
int bd_number(schedrun_builder_t *b, double v, bool integer, int at, int sub);
int bd_map(schedrun_builder_t *b, int at);
int bd_seq(schedrun_builder_t *b, int at);
/* key: value into mapping m; value into sequence s. */
void bd_pair(schedrun_builder_t *b, int m, const char *key, int value, int at);
void bd_item(schedrun_builder_t *b, int s, int value);
/* Whether b can take call fn: false (a misuse noted) when its `what` is NULL. */
bool bd_usable(schedrun_builder_t *b, const char *fn, const char *what, const void *p);

#endif
