/*
 * What the actors of one scheduler share, read-only after start: the ZeroMQ
 * context, the backend (whose objects are safe to use from any thread), the
 * cache directory, and the registry of loaded programs.
 *
 * Programs are immutable once loaded and are looked up by id; a program stays
 * registered until every actor has released what it holds for it (RELEASE),
 * so a pointer from core_program is valid for as long as the message that
 * named the program is being handled.
 */
#ifndef SCHEDRUN_CORE_H
#define SCHEDRUN_CORE_H

#include <pthread.h>
#include <stdbool.h>

#include "actors/actor.h"
#include "actors/record_tune.h"
#include "common/hmap.h"
#include "gpu/backend.h"
#include "program/program.h"

/* Mailbox names. */
#define ACTOR_SCHEDULER "scheduler"
#define ACTOR_COMPILE "compile"
#define ACTOR_RECORD "record"
#define ACTOR_CLIENT "client"
#define ACTOR_EXECUTE_FMT "execute.%d"

/* Placement (schedrun_options_t.placement). */
enum { SCHEDRUN__PLACE_AUTO, SCHEDRUN__PLACE_MODEL, SCHEDRUN__PLACE_LEAST_LOADED };

/* What the scheduler placed on a device, for schedrun_get_stats: written
 * by the scheduler actor alone, read from any thread. */
typedef struct core_placement {
  _Atomic uint64_t placed;    /* jobs placed there */
  _Atomic uint64_t by_model;  /* of them, by the performance model */
  _Atomic uint64_t predicted; /* jobs that ran there with an expected time */
  _Atomic uint64_t error_ppm; /* the sum of their |actual - expected| / expected, in millionths */
} core_placement;

/* Adds n to a counter that one thread writes and any thread reads. */
static inline void core_count(_Atomic uint64_t *c, uint64_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

typedef struct schedrun_core {
  void *zctx;
  gpu_backend *backend;
  int ndevices;
  char *cache_dir;
  int compile_workers;
  uint64_t compile_timeout_ns; /* 0: the targets' default */
  bool record_always;
  bool record_whole_program; /* every RECORD walks the whole program (measurements) */
  bool no_batching;          /* one message per job per hop (measurements) */
  bool time_nodes;           /* the first jobs of each device are timed node by node */
  bool retune;               /* autotuned launches are timed again, not taken from the cache */
  int placement;             /* SCHEDRUN__PLACE_* */
  core_placement placement_stats[SCHEDRUN_MAX_DEVICES];
  /* lone jobs posted to their device by the submitting thread, and those of
   * them the device's own thread collected (nobody waited in time) */
  _Atomic uint64_t posted, posted_late;
  tune_table tunes;          /* the autotuned launches' choices (actors/record_tune.h) */
  pthread_mutex_t reg_lock;
  hmap programs; /* uint64_t id -> prog_program* */
  hmap buffers;  /* uint64_t id -> core_buffer*: the caller's memory jobs bind (lib/api_buffers.c) */
  /* Queues beside mailboxes (actor.h), each rung with QUEUED when idle:
   * SUBMITs from the library and EXECUTEDs from the execute actors to the
   * scheduler; EXECUTEs from the scheduler to each device's execute actor;
   * COMPLETEs from the actors to the library (when queue_completions), which
   * a caller waiting for a job also takes itself while it polls. */
  msg_queue to_scheduler;
  msg_queue to_execute[SCHEDRUN_MAX_DEVICES];
  msg_queue to_client;
  bool queue_completions;
  char execute_names[SCHEDRUN_MAX_DEVICES][24]; /* ACTOR_EXECUTE_FMT of each device */
} schedrun_core;

/* Names each device's execute actor (c->ndevices set). */
void core_name_devices(schedrun_core *c);

const prog_program *core_program(schedrun_core *c, uint64_t id);

/* Memory registered by the caller. Host memory (schedrun_buffer_register;
 * addr 0): a job bound to it starts its buffer from these bytes and writes
 * the buffer back into them once it has run. Memory devices reach at `addr`
 * (addr not 0): that of `device`, or of every device when device is -1
 * (pinned host memory); a job bound to it runs in an execution context
 * whose buffer is that memory, so nothing is copied. Registered while a job
 * is bound to it. */
typedef struct core_buffer {
  uint64_t id;
  void *data;    /* host memory, or NULL for a device's own */
  size_t bytes;
  uint64_t addr; /* where devices reach it; 0: they do not */
  int device;    /* the device whose memory it is; -1: every device's */
} core_buffer;
/* A copy of the registered memory `id`, or false when there is none. Any
 * thread. */
bool core_buffer_get(schedrun_core *c, uint64_t id, core_buffer *out);

/* Frees a parcel (device memory a job left for the one job that takes it,
 * actors/execute_handoff.c) on its device; one on no device of c is
 * ignored. core_free_parcels frees those of a takes list ({buffer, device,
 * address} triples). Any thread. */
void core_free_parcel(schedrun_core *c, uint64_t device, uint64_t addr);
void core_free_parcels(schedrun_core *c, const msg_u64s *takes);

/* Sends m to actor `to` through queue q, ringing `to` when q was idle.
 * From an actor's thread. */
int core_send_queued(actor_t *self, msg_queue *q, const char *to, msg *m);
/* Sends a COMPLETE or COMPLETE_MANY to `to`: to the library through its
 * completion queue, to any other mailbox directly. */
int core_send_complete(actor_t *self, schedrun_core *c, const char *to, msg *m);
/* Sends an EXECUTE or EXECUTE_MANY to device dev's execute actor. */
int core_send_execute(actor_t *self, schedrun_core *c, int dev, msg *m);
/* Sends an EXECUTED or EXECUTED_MANY to `to`: to the scheduler through its
 * queue, to any other mailbox directly. */
int core_send_executed(actor_t *self, schedrun_core *c, const char *to, msg *m);

/* Actor definitions; each actor's state is created by its *_new and freed by
 * its *_free after the actor has been joined. */
typedef struct compile_state compile_state;
typedef struct record_state record_state;
typedef struct execute_state execute_state;
typedef struct scheduler_state scheduler_state;

extern const struct actor_def compile_actor_def;
extern const struct actor_def record_actor_def;
extern const struct actor_def execute_actor_def;
extern const struct actor_def scheduler_actor_def;

compile_state *compile_state_new(schedrun_core *core);
void compile_state_free(compile_state *s);
record_state *record_state_new(schedrun_core *core);
void record_state_free(record_state *s);
execute_state *execute_state_new(schedrun_core *core, int device);
void execute_state_free(execute_state *s);
/* Guests of an execute actor (actors/execute_posted.c). A thread that
 * placed a lone job takes the device's queue and posts the job to the
 * device, returning while it runs (ACTOR_TURN_BUSY: the turn is held, or
 * the device cannot post; the caller rings the actor then). */
actor_turn execute_post_here(actor_t *a);
/* Whether a job posted so is still to be collected (any thread). */
bool execute_has_posted(actor_t *a);
/* Collects the job posted, waiting for it until until_ns at most (0: no
 * limit), then runs what is queued; nothing more when it had not ended. */
actor_turn execute_run_here(actor_t *a, uint64_t until_ns);
scheduler_state *scheduler_state_new(schedrun_core *core);
void scheduler_state_free(scheduler_state *s);


#endif
