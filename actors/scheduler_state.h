/*
 * The scheduler actor's state, shared by its files: scheduler.c (the
 * message handlers), scheduler_state.c (the state made and freed),
 * scheduler_place.c (placement), scheduler_model.c (placement by model),
 * scheduler_compile.c, scheduler_resident.c and scheduler_dispatch.c
 * (completion and dispatch). Private to actors/.
 */
#ifndef SCHEDRUN_SCHEDULER_STATE_H
#define SCHEDRUN_SCHEDULER_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/actor.h"
#include "actors/core.h"
#include "actors/perf_model.h"
#include "common/idmap.h"

#define MAX_SLOTS 64
/* Jobs out to the execute actor per execution context: two full batches, so
 * the device has the next batch while the scheduler hears about the last. */
#define EXECUTE_BATCH 1024
#define EXECUTE_AHEAD (2 * EXECUTE_BATCH)
/* EXECUTE messages out per context: while the device has one to run and one
 * queued, the jobs that come meanwhile wait here and leave together. */
#define BATCHES_AHEAD 2
#define BATCH_RING 8 /* room for BATCHES_AHEAD, or EXECUTE_AHEAD_ALONE single EXECUTEs */
#define EXECUTE_AHEAD_ALONE 4 /* EXECUTEs out per context without batches */

enum { JOB_COMPILING, JOB_PLACED_WAITING, JOB_RECORDING, JOB_EXECUTING, JOB_PLACING };

typedef struct job {
  uint64_t id, program;
  uint32_t run, job_index, slot, keep;
  int32_t device; /* -1 until placed */
  int32_t pin;    /* the device asked for, or -1 */
  int state;
  char client[32];
  uint64_t t_submit, t_phase, compile_ns, record_ns, execute_ns;
  uint64_t t_compile, t_record, t_execute; /* phase starts, for traces */
  msg_outputs inputs; /* the submitter's buffer contents, until EXECUTE */
  msg_u64s park, takes; /* hand-offs (msg_submit), until EXECUTE; parcels still
                           in takes when the job is freed are freed with it */
  uint64_t kept_from;   /* the first job it takes a kept buffer from (MSG_TAKE_LOCAL), or 0:
                           it goes to that job's device */
  msg_counts counts;
  uint32_t hits, misses;
  uint64_t sequence;
  uint64_t deadline; /* CLOCK_MONOTONIC ns; 0: none */
  bool record_only;  /* complete once recorded, without running */
  bool sent;         /* in an EXECUTE or EXECUTE_MANY (slot_state.batch_left) */
  bool by_model;     /* placed by the performance model, and counted in its queues */
  double expect_ns;  /* its expected execute time there (0: unknown) */
  struct job *next;  /* in a wait queue */
} job;

typedef struct job_queue {
  job *head, *tail;
} job_queue;

typedef struct slot_key {
  uint32_t device, slot;
} slot_key;

/* One execution context {program, device, slot}: its buffers, what its
 * recording was made for, and the jobs waiting for it. Jobs of one slot run
 * on one device, whose execute actor takes them one at a time, so they never
 * overlap; what must not happen is a RECORD while EXECUTEs are out, since it
 * may update the sequence they replay. */
typedef struct slot_state {
  slot_key key;       /* its key in its program's slots */
  uint64_t *bindings; /* one device address per buffer; NULL until allocated */
  const uint64_t *borrowed; /* a bound context's (bound_ctx.addr): per buffer, the
                               caller's memory it is, never allocated or freed
                               here, or 0; NULL for a buffer set's context */
  bool recording;     /* a RECORD is out */
  uint32_t inflight;  /* EXECUTEs out */
  bool recorded;      /* the record actor holds a recording made for: */
  uint32_t last_job, last_run;
  uint64_t sequence;
  uint32_t nodes;
  uint64_t fast_reuses; /* nodes reused without a RECORD, over the slot's life */
  bool dirty;           /* on the scheduler's dirty list */
  /* the EXECUTE messages out, oldest first: how many of each one's jobs have
   * not come back (the device runs them, and answers, in order) */
  uint32_t batch_left[BATCH_RING];
  uint32_t nbatches;
  job_queue queue;
} slot_state;

/* An execution context for jobs of buffer set `base` whose bound buffers
 * are memory the caller registered and devices reach (a device pointer,
 * pinned host memory): recorded with that memory as those buffers, so that
 * jobs bound to it replay one recording and nothing is copied. Its slot is
 * MAX_SLOTS + its index in prog_state.bound, the same on every device. */
typedef struct bound_ctx {
  uint32_t base;
  uint64_t *addr; /* per buffer: the memory's device address, or 0 for the context's own */
} bound_ctx;
/* Bound contexts a program may have: each holds memory for the program's
 * other buffers on every device it ran on, until the program is released. */
#define MAX_BOUND 1024

enum { COMPILE_NONE, COMPILE_PENDING, COMPILE_STOPPING, COMPILE_READY }; /* scheduler_compile.c */

typedef struct prog_state {
  uint64_t id;
  /* the registered program: registered until the scheduler answers its
   * RELEASE, which frees this state first (looked up once, not per job
   * under the registry's lock) */
  const prog_program *p;
  int compile;
  uint64_t compile_job; /* the compile session (the job that asked), while PENDING or STOPPING */
  uint64_t compile_t0;  /* when it was asked for */
  /* Compiled once per target its devices need (one, or a host and a CUDA
   * one on devices of both kinds), one after the other: */
  msg_modules modules[GPU_MAX_TARGETS]; /* per target (scheduler_state.dev_target) */
  int ctarget;      /* the target compiling, while PENDING */
  unsigned usable;  /* bit t: target t compiled, so its devices may run the program */
  char *unusable[GPU_MAX_TARGETS]; /* why target t did not (when another did), or NULL */
  uint32_t hits, misses; /* the kernel cache's, over the targets compiled so far */
  /* placement by model (scheduler_model.c): the program's model (NULL
   * until its first job), the size its jobs are kept under, its jobs out
   * per device kind, and the jobs waiting for calibration times */
  perf_model *model;
  uint64_t footprint;
  uint32_t out[SCHEDRUN_MAX_DEVICES];
  job_queue calibrating;
  job_queue waiting; /* for the compile */
  /* resident buffers (scheduler_resident.c): the device each buffer set's
   * resident buffers are on (-1: not made yet), and the jobs waiting for
   * theirs to leave a device that still runs jobs of the set, in order */
  int8_t home[MAX_SLOTS];
  job_queue moving;
  bool retrying; /* in scheduler_resident_retry */
  hmap slots;        /* {device, slot} -> slot_state* */
  bound_ctx *bound;  /* slots MAX_SLOTS + i (scheduler_bound_slot) */
  uint32_t nbound, bound_cap;
  uint32_t jobs;     /* not yet complete */
  char release_to[32];
  uint64_t release_job;
  bool releasing, release_sent;
} prog_state;

/* An execution context whose queue may have work that can start. */
typedef struct dirty_slot {
  uint64_t program;
  slot_key key;
} dirty_slot;

struct scheduler_state {
  schedrun_core *core;
  int ntargets;                              /* compile targets the devices need */
  uint8_t dev_target[SCHEDRUN_MAX_DEVICES]; /* each device's */
  /* placement by model (scheduler_model.c): on or not, the device kinds
   * ("host", "cuda sm_90"), each device's, and the work placed on each
   * device and not done, as expected (ns) */
  bool by_model;
  int nkinds;
  char kinds[SCHEDRUN_MAX_DEVICES][PERF_KIND_MAX];
  uint8_t dev_kind[SCHEDRUN_MAX_DEVICES];
  double queued_ns[SCHEDRUN_MAX_DEVICES];
  idmap jobs; /* id -> job* */
  hmap progs; /* id -> prog_state* */
  prog_state *last_prog; /* the one scheduler_prog_get found last, or NULL */
  uint32_t *load;
  size_t active; /* recording or executing */
  bool closing;
  uint32_t releases_out; /* RELEASEs sent to the record actor, not answered yet */
  char close_to[32];
  uint64_t close_job;
  /* Dispatch waits until the message being handled is done with, so that
   * what it made startable leaves in as few EXECUTE_MANYs as possible. */
  bool defer;
  dirty_slot *dirty;
  size_t ndirty, dirty_cap;
};

/* ---- scheduler_state.c ---- */

/* Whether device d may run ps's jobs: its target's compile succeeded. */
static inline bool scheduler_runs_on(const scheduler_state *s, const prog_state *ps, int d) {
  return (ps->usable >> s->dev_target[d]) & 1u;
}

/* Frees the program's execution contexts, their buffers on their devices
 * included (the slots table is destroyed: init it to use it again). */
void scheduler_free_slots(scheduler_state *s, prog_state *ps);

void scheduler_free_outputs(msg_outputs *o);
void scheduler_job_free(scheduler_state *s, job *j);
void scheduler_free_modules(msg_modules *mods);
void scheduler_prog_state_free(scheduler_state *s, prog_state *ps);
void scheduler_q_push(job_queue *q, job *j);
job *scheduler_q_pop(job_queue *q);
/* The program's state, created on first use when `create`. */
prog_state *scheduler_prog_get(scheduler_state *s, uint64_t id, bool create);
/* Sends j to the bound context of its buffer set and bound memory when it
 * is bound to memory devices reach (j->slot changes; made on first use).
 * NULL, or why j cannot be taken. */
const char *scheduler_bound_slot(prog_state *ps, job *j);

/* ---- scheduler_compile.c ---- */

/* j waits for its program's compile (sent now if none is out). */
void scheduler_compile_wait(actor_t *self, scheduler_state *s, prog_state *ps, job *j);
/* The program whose compile session is `session` (PENDING or STOPPING), or NULL. */
prog_state *scheduler_compile_of(scheduler_state *s, uint64_t session);
/* COMPILED: the waiting jobs are placed. */
void scheduler_compiled(actor_t *self, scheduler_state *s, msg *m);
/* The compile's ERROR (its text with the teardown): the waiting jobs fail. */
void scheduler_compile_failed(actor_t *self, scheduler_state *s, prog_state *ps, int code, const char *text);
/* TICK: the deadlines of jobs waiting for compiles. */
void scheduler_compile_tick(actor_t *self, scheduler_state *s);

/* ---- scheduler_resident.c ---- */

/* Where j must run for its buffer set's resident buffers, once pick_device
 * chose `device` (the caller's pin, or its choice): the device they are
 * on, unless j is pinned elsewhere. Returns the device, or -1 when j waits
 * (queued in ps->moving until they can move) or failed (completed here). A
 * job that stays with them keeps them as they are (MSG_KEEP_RESIDENT); one
 * that goes elsewhere takes them from where they are (MSG_TAKE_RESIDENT). */
int scheduler_resident_place(actor_t *self, scheduler_state *s, prog_state *ps, job *j, int device);
/* j, placed on a device, completes without reaching it: when it was to take
 * its set's resident buffers there, the next job of the set queued there
 * takes them instead, or they stay where they were. */
void scheduler_resident_unmoved(prog_state *ps, job *j);
/* TICK: jobs waiting to move whose deadlines passed complete with
 * SCHEDRUN_ETIMEOUT saying what they waited for. */
void scheduler_resident_tick(actor_t *self, scheduler_state *s);
/* A job of ps finished: those waiting to move go on, in order, while they can. */
void scheduler_resident_retry(actor_t *self, scheduler_state *s, prog_state *ps);

/* ---- scheduler_model.c ---- */

/* Sets the device kinds up, and whether jobs are placed by model
 * (SCHEDRUN__PLACE_*: auto is by model on devices of several kinds). */
void scheduler_model_setup(scheduler_state *s, int placement);
/* The device the model chooses for j (j->expect_ns set), -1 when no device
 * can run it, -2 when it waits for calibration times (the caller queues it
 * in ps->calibrating). */
int scheduler_model_pick(scheduler_state *s, prog_state *ps, job *j);
/* j, placed by model, is queued on its device: the queues count it. */
void scheduler_model_placed(scheduler_state *s, prog_state *ps, job *j);
/* j ran for exec_ns: one more sample of its program's model. */
void scheduler_model_sample(scheduler_state *s, prog_state *ps, job *j, uint64_t exec_ns);
/* j is done (or failed): the queues no longer count it. */
void scheduler_model_retire(scheduler_state *s, prog_state *ps, job *j);
/* The jobs waiting for calibration times are placed again. */
void scheduler_model_retry(actor_t *self, scheduler_state *s, prog_state *ps);
/* Writes the program's model back to the cache, when it changed, and frees it. */
void scheduler_model_free(scheduler_state *s, prog_state *ps);

/* ---- scheduler_place.c ---- */

/* Puts j on a device (or fails it when none is left) and queues it there. */
void scheduler_place(actor_t *self, scheduler_state *s, prog_state *ps, job *j);
/* A device was lost: its queued jobs go elsewhere (or fail). */
void scheduler_replace_jobs_of(actor_t *self, scheduler_state *s, int device);

/* ---- scheduler_dispatch.c ---- */

/* text, then "\nteardown: " and steps, unless it has a teardown already
 * (heap; text alone without memory for more). */
char *scheduler_with_teardown(const char *text, const char *steps);
/* Sends COMPLETE for j (taking outputs, if any) and forgets the job; an
 * error's text gets the teardown the scheduler ran for the job's state. */
void scheduler_complete(actor_t *self, scheduler_state *s, job *j, int status, const char *text,
                        msg_outputs *outputs);
/* Forgets a finished job: its slot, the device's load, the program's count. */
void scheduler_retire(actor_t *self, scheduler_state *s, job *j);
/* Starts what can start in an execution context: a RECORD, or EXECUTEs.
 * While a message is being handled this only notes the context; the handler
 * then calls scheduler_flush. */
void scheduler_dispatch_slot(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss);
/* Dispatches every noted execution context, until none is left. */
void scheduler_flush(actor_t *self, scheduler_state *s);
void scheduler_start_execute(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss, job *j);
void scheduler_reply_simple(actor_t *self, const char *to, int type, uint64_t job_id, uint64_t program);
void scheduler_finish_release(actor_t *self, scheduler_state *s, prog_state *ps);

#endif
