/*
 * What the public API's files share: the scheduler handle and the client
 * side's bookkeeping. Private to lib/.
 *
 * A schedrun_t holds the shared core, the actors, and the client's mailboxes:
 * an inbox every actor can answer to ("client"), read by the completion
 * thread; an outbox to the scheduler; and a control inbox ("client.ctl") that
 * a thread asking an actor for its status reads itself, so queries work from
 * any thread, the completion thread included.
 *
 * Jobs: a pending_job lives from submit until its result is handed over (to a
 * waiter or a callback). `waiters` counts the threads waiting on it by id; the
 * one that takes the result marks it taken and the last waiter to leave frees
 * it, so a job is handed over exactly once however many threads wait.
 */
#ifndef SCHEDRUN_LIB_API_H
#define SCHEDRUN_LIB_API_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "actors/actor.h"
#include "actors/core.h"
#include "common/idmap.h"
#include "lib/result.h"

#define ACTOR_CONTROL "client.ctl"
#define CLOSE_TIMEOUT_MS 120000
#define DRAIN_TIMEOUT_MS 5000
#define QUERY_TIMEOUT_MS 10000
#define DEFAULT_MAX_INFLIGHT 65536

struct schedrun_program {
  schedrun_t *s; /* the scheduler it is registered with, or NULL */
  uint64_t id;
  prog_program *p;
  struct schedrun_program *next; /* in s->programs */
};

typedef struct dep_node dep_node; /* lib/deps.h */

typedef struct pending_job {
  schedrun_job_t id;
  const prog_program *prog; /* registered, so alive until the job completes */
  bool keep, hidden;        /* hidden: a schedrun_run job, not for schedrun_wait_any */
  bool taken;               /* its result was handed over; freed when waiters is 0 */
  uint32_t waiters;         /* threads in schedrun_wait for this job */
  schedrun_job_callback cb;
  void *user;
  schedrun_job_result_t *result; /* set on completion, unless cb */
  struct pending_job *next_done, *prev_done; /* the done list: completed, not handed over */
  dep_node *dep;            /* jobs before or after it (lib/deps.h), or NULL */
  uint32_t run, job_index;  /* its numbers, for a result made without running it */
  uint32_t host_handoffs;   /* buffers handed to it from host tasks (inputs): copies */
  struct schedrun_buffer **binds; /* registered memory it is bound to (lib/api_buffers.c), until it completes */
  uint32_t nbinds;
} pending_job;

struct schedrun {
  schedrun_core core;
  actor_t *scheduler, *compile, *record;
  actor_t *sched_stopped; /* the scheduler after schedrun_shutdown: its thread ended, its mailbox still bound */
  actor_t *execute[SCHEDRUN_MAX_DEVICES];
  scheduler_state *scheduler_st;
  compile_state *compile_st;
  record_state *record_st;
  execute_state *execute_st[SCHEDRUN_MAX_DEVICES];
  /* the outbox to the scheduler, and doorbells to the execute actors, used
   * under send_lock */
  void *outbox;
  void *execute_bell[SCHEDRUN_MAX_DEVICES];
  pthread_mutex_t send_lock;
  bool term_sent; /* under send_lock: the shutdown's TERM left, nothing follows it */
  /* threads running the scheduler's queue as its guests (lib/api_guest.c):
   * none enters once sched_open is false, and the scheduler is joined only
   * when none is left */
  _Atomic int sched_guests;
  _Atomic bool sched_open;
  /* the completion thread owns the inbox and files what arrives */
  void *inbox;
  pthread_t completer;
  _Atomic bool completer_running; /* read by any thread (api_on_completer) */
  /* under lock: jobs, completions, control replies */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  idmap jobs; /* id -> pending_job* until handed over */
  size_t waitable; /* of them, those schedrun_wait_any may hand over (no callback, not hidden) */
  pending_job *done_head, *done_tail;
  size_t incomplete; /* submitted, not yet complete */
  size_t max_inflight;
  _Atomic uint64_t completions; /* bumped on every completion, for spinning waiters */
  uint64_t submitted, completed;
  uint64_t next_id; /* jobs and control requests share the id space */
  uint64_t next_program;
  bool closing, closed;
  /* the shutdown's TERM, answered through the inbox after every COMPLETE */
  uint64_t term_id;
  msg term_reply;
  bool term_ready;
  /* status queries: one at a time, each reading ctl_inbox itself */
  pthread_mutex_t ctl_lock;
  void *ctl_inbox;
  _Atomic uint64_t malformed; /* client side: dropped on the inbox or ctl_inbox */
  uint64_t dropped_by_joined; /* under lock: what actors joined early had dropped */
  /* released programs whose last COMPLETEs have not been read yet */
  prog_program **doomed;
  uint64_t *doomed_ids;
  size_t ndoomed, doomed_cap;
  schedrun_program_t *programs;
  struct schedrun_buffer *buffers; /* registered host memory (lib/api_buffers.c) */
  struct api_host_mem *host_mem;   /* schedrun_host_alloc's (lib/api_buffers.c) */
  uint64_t next_buffer;
  char *temp_cache; /* removed at close */
  char *fallback;   /* why auto/all runs on the host */
  char *opened_devices; /* the devices spec it was opened with ("auto" for NULL) */
  char target[160]; /* what kernels compile for: "host", "cuda sm_90", "cuda sm_80+sm_90" */
  uint64_t spin_ns; /* how long waiting threads poll before they sleep */
  /* callbacks of jobs whose COMPLETE a waiting thread took from the
   * completion queue: they run on the completion thread (under lock) */
  pending_job **deferred;
  schedrun_job_result_t **deferred_results;
  size_t ndeferred, deferred_cap;
  /* programs freed while jobs of theirs were still held for the jobs they
   * run after: their RELEASE leaves once none is held (under lock) */
  uint64_t *late_release;
  size_t nlate, late_cap;
  /* host tasks released, for the completion thread to run (under lock) */
  pending_job **host_ready;
  size_t nhost_ready, host_ready_cap;
  bool running_host; /* the completion thread is running them */
  /* how long the jobs of a few programs ran on their device, a moving
   * average (under lock), for deciding whether a graph's branches go
   * together (lib/deps_group.c) */
  struct {
    const prog_program *p;
    uint64_t ns;
  } last_run[8];
  unsigned last_run_next;
  /* a doorbell to the completion thread from any thread (under bell_lock) */
  void *bell;
  pthread_mutex_t bell_lock;
};

/* ---- the caller's thread as the scheduler's guest (lib/api_guest.c) ---- */

/* Enters as a guest of the scheduler and the execute actors: the scheduler
 * actor, or NULL once it is shutting down (then the thread must not touch
 * them). api_guest_leave after. */
actor_t *api_guest_enter(schedrun_t *s);
void api_guest_leave(schedrun_t *s);
/* After a guest polled the scheduler's queue (msgq_poll_end): runs what is
 * queued here, or rings the scheduler when its turn is busy. */
void api_guest_settle(schedrun_t *s, actor_t *sched);

/* Stops guests from entering and waits for those inside to leave. */
void api_guests_close(schedrun_t *s);
/* Several SUBMITs placed on the calling thread in one round of the
 * scheduler's handler: api_guest_hold, then the SUBMITs queued
 * (api_send_submit, SUBMIT_QUEUE: they ring nobody), then
 * api_guest_unhold, which places them here, or rings the scheduler when its
 * turn is busy. When no device had work queued at the hold (`run`), the
 * unhold also runs the first device's new jobs here, as for a lone job,
 * and rings the other devices for theirs. Nothing when guests may not
 * enter (`sched` NULL). */
typedef struct guest_round {
  actor_t *sched;
  bool run;
} guest_round;
void api_guest_hold(schedrun_t *s, guest_round *g);
void api_guest_unhold(schedrun_t *s, guest_round *g);
/* Places an error that a check of call `fn` left ("fn: what") at `where`
 * ("fn: where: what"), formatted only when there is one; returns rc. */
int api_name_error(schedrun_error_t *err, int rc, const char *fn, const char *where);
/* For a caller about to wait until a lone job completes (no lock held):
 * when a device has a job posted (actors/execute_posted.c), or (with
 * queued_too) an EXECUTE still queued, takes the scheduler's and that
 * device's turns and collects (waiting until until_ns at most, 0: no limit)
 * or runs it here, filing the COMPLETE; true when it found one. */
bool api_guest_run_queued(schedrun_t *s, bool queued_too, uint64_t until_ns);

/* How a SUBMIT reaches the scheduler: queued for its thread; or, for a lone
 * job, placed on the caller's thread; or placed and posted to its device
 * there, to be collected by whoever waits for it (a job without a callback:
 * actors/execute_posted.c); or also run there on its device, for a caller
 * that waits for it next (schedrun_submit_wait). */
typedef enum { SUBMIT_QUEUE, SUBMIT_PLACE_HERE, SUBMIT_POST_HERE, SUBMIT_RUN_HERE } submit_how;
/* Hands a SUBMIT or SUBMIT_MANY to the scheduler; SCHEDRUN_ECLOSED once the
 * shutdown's TERM has gone before it. */
int api_send_submit(schedrun_t *s, msg *m, submit_how how, schedrun_error_t *err);

/* Whether the calling thread is s's completion thread (where callbacks run).
 * Takes no lock; the answer cannot change under the caller. */
bool api_on_completer(schedrun_t *s);
/* A loaded program as the API hands it out (taking p; freed on failure). */
int api_wrap_program(prog_program *p, schedrun_program_t **out, schedrun_error_t *err);

/* lib/api_buffers.c: registered host memory. Checks o's binds against p and
 * what they are bound to now (lock held); adds their takes to sb. */
int api_bind_check(schedrun_t *s, const prog_program *p, const char *fn, const schedrun_job_options_t *o,
                   msg_submit *sb, schedrun_error_t *err);
/* Binds pj to o's registrations (lock held, after api_bind_check): they
 * stay registered until it completes. */
int api_bind(schedrun_t *s, pending_job *pj, const schedrun_job_options_t *o, schedrun_error_t *err);
/* pj completed (lock held): its registrations are free of it. */
void api_unbind(schedrun_t *s, pending_job *pj);
/* At close: registrations still there are detached from s (their handles
 * stay for schedrun_buffer_unregister to free). */
void api_buffers_close(schedrun_t *s);
/* SCHEDRUN_ECLOSED, naming fn, once s is shut down. */
int api_closed(schedrun_t *s, const char *fn, schedrun_error_t *err);
/* Sends a STATUS (with `query` items) to one actor and reads its answer
 * into *reply (the caller frees it). */
int api_ask_status(schedrun_t *s, const char *actor, const msg_stat *query, size_t nquery, msg *reply,
                   schedrun_error_t *err);
/* The value of the answer's item `name`; 0 when absent. */
int64_t api_stat_value(const msg *m, const char *name);
/* A CLOCK_REALTIME deadline timeout_ms from now, for pthread_cond_timedwait. */
struct timespec api_deadline_in(int timeout_ms);
/* How many ns are left until such a deadline (0 once it has passed). */
uint64_t api_ns_until(const struct timespec *deadline);
/* Registers program h with s on its first job (under s->lock). */
int api_attach(schedrun_t *s, schedrun_program_t *h, schedrun_error_t *err);
/* Takes what is in the completion queue and files it; from a thread other
 * than the completion thread the callbacks it meets are left to that thread. */
void api_drain_completions(schedrun_t *s, bool on_completer);
/* lib/api_complete.c: the jobs of one COMPLETE (n = 1) or of a batch's
 * columns; a COMPLETE_MANY; a program the actors have dropped. */
void api_completed(schedrun_t *s, const uint64_t *ids, msg_complete *cs, size_t n, bool on_completer);
void api_completed_many(schedrun_t *s, msg *m, bool on_completer);
void api_released(schedrun_t *s, uint64_t id);
/* Files completed jobs' results (rs[k] for pjs[k]): to callbacks or for
 * waiters, and on to the jobs after them (lib/deps.h). */
void api_file_results(schedrun_t *s, pending_job **pjs, schedrun_job_result_t **rs, size_t n, bool on_completer);
/* Asks the actors to drop what they hold for a program once its jobs are done. */
void api_send_release(schedrun_t *s, uint64_t program);
/* Rings the completion thread (from another thread): it has work left. */
void api_ring_completer(schedrun_t *s);
/* The checks of one job's options that need no lock; fn names the call. */
int api_check_options(const schedrun_t *s, const char *fn, const schedrun_job_options_t *o, schedrun_error_t *err);
/* Fills a SUBMIT body from job options (the program id is set later); its
 * deadline is deadline_ns when not 0, else o->timeout_ms from now. */
int api_fill_submit(const prog_program *p, const char *fn, const schedrun_job_options_t *o, uint64_t deadline_ns,
                    msg_submit *sb, schedrun_error_t *err);
/* Waits (lock held) until `need` more jobs fit under max_inflight. */
int api_wait_for_room(schedrun_t *s, size_t need, const schedrun_job_options_t *o, schedrun_error_t *err);
/* Registers a job about to be submitted (lock held), and forgets one never sent. */
int api_register_job(schedrun_t *s, const prog_program *p, const schedrun_job_options_t *o, bool hidden,
                     pending_job *pj, schedrun_error_t *err);
void api_unregister_job(schedrun_t *s, pending_job *pj);
/* Makes pj run after the jobs of o->after (lock held): SCHEDRUN_EINVAL
 * naming an id that is not a job still held here. */
int api_after_check(schedrun_t *s, const char *fn, const schedrun_job_t *after, size_t nafter, schedrun_error_t *err);
/* Submits a job (deadline_ns as for api_fill_submit); `hidden` ones
 * (schedrun_run's) are not for schedrun_wait_any.
 * run_here: the caller waits for it next, so when it is the only job in
 * flight this thread runs it on its device itself (SUBMIT_RUN_HERE). */
int api_submit(schedrun_t *s, schedrun_program_t *h, const schedrun_job_options_t *o, uint64_t deadline_ns, bool hidden,
               bool run_here, schedrun_job_t *out, schedrun_error_t *err);

#endif
