/*
 * Autotuned launches: the record actor chooses an autotuned launch's block
 * when it first records the launch for a kind of device and a key (the
 * values of the arguments the config names), by timing every candidate on
 * the device on scratch copies of the launch's buffers, and remembers the
 * choice in the kernel cache directory; later recordings, and later
 * processes, take it from there without timing.
 */
#ifndef SCHEDRUN_RECORD_TUNE_H
#define SCHEDRUN_RECORD_TUNE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "gpu/backend.h"
#include "messages/msg.h"
#include "program/program.h"

struct schedrun_core;

/* One choice: what it is for, what was chosen, and how long each candidate
 * took when this process timed them (0 ns for one read from the cache
 * without times). */
typedef struct tune_entry {
  char key[65];     /* SHA-256 of what the choice depends on: its cache file's name */
  char kernel[64];  /* the kernel's name */
  char where[256];  /* the launch: file:line:col */
  char keyvals[128]; /* "n=4096", "" without a key */
  char device[64];  /* the kind of device: its target and architecture ("host", "cuda sm_90") */
  uint32_t block[3], grid[3]; /* grid: as the first launch that took the choice had it */
  uint32_t choice;   /* the candidate chosen */
  bool timed;        /* timed by this process; else read from the cache */
  uint32_t ncand;
  uint32_t cand[PROG_MAX_CANDIDATES][3];
  char constants[PROG_MAX_CANDIDATES][64]; /* each candidate's constants ("TILE=8"), "" without */
  uint64_t cand_ns[PROG_MAX_CANDIDATES]; /* median time of a launch of each */
} tune_entry;

/* The choices a process knows, shared by its record actor (which adds
 * them) and the library (which reports them): any thread. */
typedef struct tune_table {
  pthread_mutex_t lock;
  tune_entry *v;
  size_t n, cap;
} tune_table;

void tune_table_init(tune_table *t);
void tune_table_destroy(tune_table *t);
size_t tune_table_count(tune_table *t);
/* A copy of entry i; false past the end. */
bool tune_table_get(tune_table *t, size_t i, tune_entry *out);

/* What a recording gives the choice: the program, the RECORD, each kernel's
 * function and module (artifact) key. */
typedef struct tune_ctx {
  struct schedrun_core *core;
  const prog_program *p;
  const msg_record *r;
  const gpu_function *fns;
  const char *const *module_keys;
} tune_ctx;

/* The grid, block and function (the kernel, or its variant with the chosen
 * constants) of autotuned launch st, whose arguments evaluate to args
 * (device addresses of the context's buffers, scalars) under env: known,
 * read from the cache, or timed now. -1 with why (no location) when a
 * candidate does not launch or its grid is not one. */
int record_tune_choose(tune_ctx *c, const prog_step *st, const uint64_t *args, const prog_env *env, uint32_t grid[3],
                       uint32_t block[3], gpu_function *fn, strbuf *why);

#endif
