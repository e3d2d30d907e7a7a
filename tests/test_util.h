/* Helpers shared by the tests. */
#ifndef SCHEDRUN_TEST_UTIL_H
#define SCHEDRUN_TEST_UTIL_H

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "schedrun.h"

/* How long a test waits for something that must happen (a job, a process, a
 * file) before it calls it a hang. Tests wait for events, never for a guess of
 * how fast the machine is: this bound is only for a real hang, so it is
 * generous enough for a machine that is busy with other work. */
#define TU_PATIENCE_MS 180000
#define TU_PATIENCE_NS ((uint64_t)TU_PATIENCE_MS * 1000000ull)

/* CLOCK_MONOTONIC, in nanoseconds. */
uint64_t tu_now_ns(void);
/* Waits until `cond` holds, looking every millisecond; fails the test naming
 * `what` if it has not held within TU_PATIENCE_MS. */
#define TU_WAIT_FOR(cond, what)                                                        \
  do {                                                                                 \
    uint64_t tu_t0_ = tu_now_ns();                                                     \
    while (!(cond)) {                                                                  \
      if (tu_now_ns() - tu_t0_ > TU_PATIENCE_NS)                                       \
        fail_msg("waited %d s for %s: it never happened", TU_PATIENCE_MS / 1000, what); \
      tu_sleep_ms(1);                                                                  \
    }                                                                                  \
  } while (0)
void tu_sleep_ms(int ms);

/* Writes text to a fresh file under a temporary directory; returns its path
 * (static storage, overwritten by the next call with the same slot). */
const char *tu_write_temp(int slot, const char *name, const char *text);
/* Runs argv, capturing stdout and stderr (heap strings). Returns the exit
 * status, or -1. */
int tu_run(char *const argv[], char **out, char **err);
/* A whole file, NUL-terminated (heap; *len its length, may be NULL); NULL
 * when it cannot be read. */
char *tu_slurp(const char *path, size_t *len);
/* One host device over the kernel cache `cache`, timing autotuned launches
 * again when `retune`; the test fails if it does not open. */
schedrun_t *tu_open_tuning(const char *cache, int retune);
/* Loading config `text` (named origin) fails with SCHEDRUN_ECONFIG, and its
 * message has `where` ("file:line:col"; NULL: anywhere) and `needle`, or the
 * test fails saying what it got. */
void tu_config_fails(const char *text, const char *origin, const char *where, const char *needle);
/* A path no test of this process has used yet, in the test's temporary
 * directory ("<dir>/<prefix><n>"; not made): until the next call. */
const char *tu_fresh_dir(const char *prefix);
/* The environment variable, which the test setup must provide. */
const char *tu_env(const char *name);
/* Calls fn with the path of every *.yaml in $SCHEDRUN_CONFIGS; returns how many. */
int tu_for_each_config(void (*fn)(const char *path, void *ctx), void *ctx);
/* Backend options for tests: the suite's shared cache ($SCHEDRUN_CACHE_DIR),
 * so that the host devices' worker program is built once. */
struct gpu_open_opts;
const struct gpu_open_opts *tu_gpu_opts(void);
/* Counts the processes whose arguments `match` accepts (argv as in main). */
int tu_count_processes(int (*match)(int argc, char *const *argv, void *ctx), void *ctx);
/* For tu_count_processes: a host device's worker started by the library in
 * process *(pid_t *)ctx (the worker's second argument). */
int tu_is_worker_of(int argc, char *const *argv, void *ctx);
/* A scheduler opened with o, or the test fails with the error. */
schedrun_t *tu_open(const schedrun_options_t *o);

/* A host step (schedrun_builder_host with tu_gate_hold and the gate) that
 * waits until the test lets it go, so that its job is certainly running
 * and incomplete meanwhile: tu_gate_wait_entered waits until it is in it,
 * tu_gate_open lets it return. */
typedef struct tu_gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int entered, open;
} tu_gate;
#define TU_GATE_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0}
int tu_gate_hold(schedrun_host_task_t *t, void *user);
void tu_gate_wait_entered(tu_gate *g);
void tu_gate_open(tu_gate *g);
/* Opens the devices $env names (fallback when unset), with base's other
 * options (NULL: the defaults), and fails unless it got them (want of them,
 * when not 0), never a fallback. */
schedrun_t *tu_open_devices(const char *env, const char *fallback, int want, const schedrun_options_t *base);
/* A program loaded from yaml (named origin in errors) into s, or the test
 * fails with the error. */
schedrun_program_t *tu_load(schedrun_t *s, const char *yaml, const char *origin);
/* One job of p on device dev as run `run`, its outputs kept: its result,
 * or the test fails naming the device and the error. */
schedrun_job_result_t *tu_job_on(schedrun_t *s, schedrun_program_t *p, int dev, int run);
/* Whether sched-run's exit `rc` and stderr `err` say that --timeout ran out
 * before the run began (while loading the config and starting the devices):
 * on a busy machine a short bound can, and a test tries again with more. */
bool tu_timeout_ran_out_early(int rc, const char *err);
/* Runs yaml (named origin) once on host:1, with cache_dir when not NULL;
 * when `verify`, the test fails unless its one job verified. */
void tu_run_once(const char *cache_dir, const char *yaml, const char *origin, int verify);
/* A program of one launch that writes 1 into `out`, and expects it. */
extern const char tu_tiny_yaml[];
/* Counts occurrences of needle in hay. */
int tu_count(const char *hay, const char *needle);

#endif
