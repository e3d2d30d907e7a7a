/*
 * The compile actor's state, shared by compile_actor.c (sessions, the cache,
 * the messages) and compile_pool.c (the worker threads that run futures).
 * Private to actors/.
 */
#ifndef SCHEDRUN_COMPILE_STATE_H
#define SCHEDRUN_COMPILE_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "actors/actor.h"
#include "actors/core.h"

#define WORKER_FROM "compile.worker"

/* Tests observe the moment a compile error leaves the actor: whether the
 * active compile mode was reset by then. Defined by test programs only (a
 * weak reference: the library itself never defines it). */
void schedrun_test_compile_error_leaves(uint64_t job, bool mode_reset) __attribute__((weak));
#define MAX_TARGETS 4

typedef struct cache_entry {
  char *path;
} cache_entry;

typedef struct waiter {
  uint64_t session;
  uint32_t index;
} waiter;

typedef struct future {
  char key[65];
  uint64_t serial; /* the actor's nth future: its worker's COMPILED carries it as the job */
  char *path; /* where the artifact goes */
  const gpu_compile_target *target;
  void *tctx;
  /* the request, owned */
  char *name, *entry, *source, *source_file, *where, *arch;
  prog_type params[64];
  uint32_t nparams, first_line;
  _Atomic int cancel; /* set by the actor: the worker kills the compiler */
  /* the result: written by a worker, read by the actor after its message */
  int rc;
  char *error, *log;
  /* sessions waiting on it */
  waiter *waiters;
  size_t nwaiters, cap;
  struct future *next; /* in the pool queue, or in the stopped list once it runs */
} future;

/* The active compile mode (as Triton's AsyncCompileMode): what the compiles
 * of one stretch of work run under, their pool and their futures. A COMPILE
 * joins the active mode, or opens one when there is none; the mode closes
 * when its last session has finished. An error tears it down, and the first
 * step of every error's teardown resets it (the actor has no active mode
 * again) before the error leaves: a mode left active after it was torn down
 * takes no one, and a COMPILE that would join it fails, which is what makes
 * the order observable. Sessions still running under a torn-down mode
 * finish in it; the next COMPILE opens a fresh one. */
typedef struct compile_mode {
  uint64_t serial;  /* the actor's nth mode, from 1 */
  size_t sessions;  /* joined and not finished */
  bool torn_down;
} compile_mode;

typedef struct session {
  uint64_t id, program;
  compile_mode *mode; /* the mode it joined */
  char reply_to[32];
  char *target;
  msg_modules modules; /* one per kernel, filled as they resolve */
  char (*keys)[65];
  bool *failed;
  size_t n, pending, failures, drained;
  int code; /* SCHEDRUN_ECOMPILE, unless a failure was of another kind (the cache, the disk) */
  bool cancelled;          /* torn down by CANCEL (a shutdown): answered with ECLOSED */
  size_t stopped, dropped; /* its compiles killed while running, or never started */
  strbuf report;
  uint32_t hits, misses;
} session;

typedef struct target_slot {
  const gpu_compile_target *target;
  void *ctx;
  char *identity;
} target_slot;

struct compile_state {
  schedrun_core *core;
  hmap cache;    /* key -> cache_entry* */
  hmap inflight; /* key -> future* */
  future *stopped; /* running, stopped, and waited for by no session: reaped when they come back */
  uint64_t futures; /* futures made so far (their serials) */
  hmap sessions; /* id -> session*: the COMPILEs being served */
  compile_mode *mode; /* the active compile mode, or NULL */
  uint64_t modes;     /* modes opened so far */
  target_slot targets[MAX_TARGETS];
  /* the pool */
  int nworkers;
  pthread_t *workers;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  future *qhead, *qtail;
  bool stopping;
  uint64_t compiles; /* futures run, over the actor's life */
};

/* ---- compile_cache.c ---- */

/* The target's slot: opened (its identity taken) on first use. NULL with
 * *err when it cannot be opened, or all MAX_TARGETS slots are taken. */
target_slot *compile_target_of(compile_state *s, const gpu_compile_target *t, schedrun_error_t *err);
/* The SHA-256 (hex) of everything that decides the kernel's artifact. */
void compile_cache_key(const gpu_compile_target *t, const char *arch, const char *identity, const msg_kernel *k,
                       char out[65]);
/* Where the artifact of key goes in the cache directory (heap), or NULL. */
char *compile_artifact_path(compile_state *s, const gpu_compile_target *t, const char *key);
/* Indexes path (taken) under key; returns it, or NULL without memory. */
const char *compile_remember(compile_state *s, const char *key, char *path);
/* Memory, then disk (verified: a bad file is a miss, and is replaced when the
 * kernel is compiled again). Returns the artifact path or NULL. */
const char *compile_cache_lookup(compile_state *s, const gpu_compile_target *t, const char *key);
/* Forgets key, and removes its file. */
void compile_evict(compile_state *s, const gpu_compile_target *t, const char *key);

/* ---- compile_pool.c ---- */

void compile_future_free(future *f);
/* Queues a future for the workers. */
void compile_pool_push(compile_state *s, future *f);
/* Takes f out of the queue: false when a worker has it already. */
bool compile_pool_unqueue(compile_state *s, future *f);
/* The actor's start and stop hooks: the worker threads. Stopping sets the
 * cancel flag of running futures, so joining the pool is quick. */
int compile_pool_start(actor_t *self, schedrun_error_t *err);
void compile_pool_stop(actor_t *self);

#endif
