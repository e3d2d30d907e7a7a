/*
 * The execute actor's state and the helpers its two files share:
 * execute_actor.c (one job: EXECUTE) and execute_many.c (EXECUTE_MANY: jobs
 * run in turn, consecutive ones as one submission to the device). Private to
 * actors/.
 */
#ifndef SCHEDRUN_EXECUTE_STATE_H
#define SCHEDRUN_EXECUTE_STATE_H

#include "actors/actor.h"
#include "actors/core.h"

/* The first jobs of a device have their replay timed node by node (for the
 * trace), when the backend can: so many jobs, so many nodes each. */
#define TIMED_JOBS 16
#define TIMED_NODES 1024

/* A buffer a job left on this device for a job after it (a local park,
 * MSG_PARK_LOCAL): still in its execution context's buffer, as long as no
 * other job of that context has run since, or else in a parcel. */
typedef struct kept_buf {
  uint64_t job;    /* the job that left it */
  uint32_t park;   /* by its park entry park (the key, with job) */
  uint32_t buffer; /* its index in that job's program */
  bool in_context; /* at is the context's buffer; else a parcel of this device */
  uint64_t at, bytes;
} kept_buf;

typedef struct kept_table {
  kept_buf *v;
  size_t n, cap;
} kept_table;

/* A program's `init` contents for one buffer, kept on the device, so that a
 * job of a batch fills that buffer with one device copy instead of staging
 * the bytes through the worker (execute_many.c). Program ids are never
 * reused, so an entry cannot stand for another program's buffer. */
typedef struct image_copy {
  uint64_t program;
  uint32_t buffer;
  uint64_t addr, bytes;
} image_copy;
#define IMAGE_COPIES 16
#define IMAGE_BYTES (16u << 20) /* at most this much device memory for them */

typedef struct execute_pending execute_pending;
typedef struct many_run many_run;
typedef struct execute_one execute_one;

struct execute_state {
  schedrun_core *core;
  int device;
  char name[32];
  uint32_t timed;  /* jobs timed so far */
  uint64_t *times; /* TIMED_NODES {tag, start, end}, while timing */
  kept_table kept; /* what jobs left here for the jobs after them */
  image_copy images[IMAGE_COPIES];
  uint32_t nimages;
  uint64_t image_bytes;
  execute_pending *pending;      /* a submission left running (execute_pipeline.c), or NULL */
  many_run *ready, *ready_tail; /* queued EXECUTE_MANYs not yet wholly run, in order */
  const many_run *last_begun;   /* whose submission was planned last (NULL: none in the list) */
  /* A lone job posted to the device by a guest (execute_posted.c): launched,
   * not yet collected. `posted` is read without the turn by guests. */
  _Atomic bool posted;
  execute_one *post; /* its halves' state, made with the state */
  msg post_msg;      /* its EXECUTE, taken */
  bool post_mode;    /* a guest that placed a lone job runs the queue: post it, defer the rest */
  msg *deferred;     /* what such a guest took and left for the actor's thread, in order */
  size_t ndeferred, deferred_cap;
};

/* What one job moved (msg_complete's traffic fields): its taken parcels by
 * how they arrived, and its bytes by where they went. */
typedef struct job_traffic {
  uint32_t local, copied, peer;
  uint64_t in, out, across;
  uint64_t inplace; /* the buffers (bit b) bound in place to registered memory, until the job ends */
  uint64_t viewed;  /* those of them the library reads or writes too (outputs, host tasks) */
} job_traffic;

/* Copies a job's traffic into its COMPLETE. */
void execute_traffic_out(const job_traffic *t, msg_complete *c);

/* One job of an EXECUTE or EXECUTE_MANY: what differs from job to job. */
typedef struct job_run {
  uint64_t id;
  uint32_t run, job_index, keep;
  uint64_t deadline;
  const msg_output *inputs;
  size_t ninputs;
  msg_u64s takes;     /* parcels to fill buffers from ({buffer, device, address}), lent */
  msg_u64s park;      /* buffers to leave for the jobs after it, lent */
  job_traffic *traffic; /* what it moved, counted as it runs (NULL: not counted) */
} job_run;

/* What the jobs of one message share: the execution context. */
typedef struct context_run {
  const prog_program *p;
  const msg_u64s *bindings;
  uint64_t sequence;
} context_run;

/* Whether job reads buffer b back: all of them when it keeps its outputs,
 * else those its program's expectations check. */
bool execute_wanted(const prog_program *p, uint32_t b, uint32_t keep);
/* Whether job jr's buffer b stays as the job before left it: a resident
 * buffer of a job that runs where its buffer set's are (MSG_KEEP_RESIDENT),
 * unless the job brings an input for it. */
bool execute_stays(const prog_program *p, const job_run *jr, uint32_t b);
/* Frees the `init` images the actor keeps on its device (execute_many.c). */
void execute_images_free(execute_state *s);
/* Checks what a message says of its execution context. */
int execute_check_context(const execute_state *s, const char *type, uint64_t program, uint32_t device,
                          const context_run *c, schedrun_error_t *err);
/* Appends one zeroed output slot to *o (growing it); NULL without memory. */
msg_output *execute_add_output(msg_outputs *o, size_t *cap);
/* Runs one job: its buffers from its inputs or the program's `init`, the
 * replay, then the buffers it wants read back, appended to *outs. Times the
 * replay node by node into s->times while the device's first jobs run
 * (*ntimed nodes). On failure err names the step and the job. */
int execute_run_job(execute_state *s, const context_run *c, const job_run *jr, msg_outputs *outs, size_t *cap,
                    uint32_t *ntimed, gpu_failure *f, schedrun_error_t *err);
/* Names the step that was running (f->tag) and the job in err. */
void execute_name_failure(const prog_program *p, const job_run *jr, const gpu_failure *f, int rc,
                          schedrun_error_t *err);
/* A job failed: the scheduler completes it with the error. */
void execute_job_failed(actor_t *self, execute_state *s, const char *scheduler, uint64_t job, int rc,
                        const gpu_failure *f, schedrun_error_t *err);
/* Hands the node times of a timed job to its COMPLETE; timing ends after
 * the device's first TIMED_JOBS jobs. */
void execute_take_times(execute_state *s, uint32_t ntimed, msg_u64s *launches);
/* Answers one job that ran from t0 to t1, alone: `complete` (a COMPLETE the
 * caller filled with the job's own fields; the device, times, node times and
 * an empty text are set here) to the client, then EXECUTED to the
 * scheduler. `complete` stays the caller's to free. */
void execute_answer(actor_t *self, execute_state *s, msg *complete, uint32_t ntimed, uint64_t t0, uint64_t t1,
                    const char *client, const char *scheduler);
/* Whether the device's next job is timed. */
bool execute_timing(const execute_state *s);

/* execute_handoff.c: buffers handed from job to job as parcels, device
 * memory a job leaves behind for exactly one later job. */
/* Fills buffers from parcels: on this device a device copy, from another
 * device straight across where the pair allows it (copy_peer), else one copy
 * through the host; counts each in the job's traffic. */
int execute_take_parcels(execute_state *s, const context_run *c, const job_run *jr, schedrun_error_t *err);
/* Writes the job's buffers bound to registered memory back into it, once
 * the job has run (those bound in place need nothing). */
int execute_write_back(execute_state *s, const context_run *c, const job_run *jr, schedrun_error_t *err);
/* The registered memory buffer b of job jr is bound to in place when the
 * library's view of the buffer was not remapped (its outputs are read from
 * there), else NULL. */
const void *execute_bound_data(execute_state *s, const job_run *jr, uint32_t b);
/* Gives the buffers bound in place their own memory back, once the job has
 * ended, however it ended. */
int execute_unbind(execute_state *s, const context_run *c, const job_run *jr, schedrun_error_t *err);
/* Leaves a parcel of each buffer in park (a copy on this device); its
 * addresses go to *parcels. On failure none is left. */
int execute_park(execute_state *s, const context_run *c, const msg_u64s *park, msg_u64s *parcels,
                 schedrun_error_t *err);
/* Frees parcels left on this device that nobody will take, and empties the list. */
void execute_drop_parcels(execute_state *s, msg_u64s *parcels);
/* Whether buffer b is filled from a parcel or from what a job left here. */
bool execute_taken(const msg_u64s *takes, uint32_t b);

/* execute_kept.c: buffers kept on this device from one job to a later one
 * (MSG_PARK_LOCAL, MSG_TAKE_LOCAL). A job's plan says what it does with
 * them, before anything runs: device copies to make before its buffers are
 * filled (buffers of its own context that a later job still wants move to
 * parcels; buffers it takes are copied in, except one left in its own
 * buffer by the job just before it in its context, which stays where it
 * is), and changes to the table, made only once it is known how far the
 * job got (kept_commit). */
typedef enum { KC_TAKE, KC_SPILL, KC_KEEP } kept_change_kind;
typedef struct kept_change {
  kept_change_kind kind;
  size_t job;   /* the job's position in its submission */
  size_t copy;  /* KC_SPILL: its copy's index among the plan's copies */
  kept_buf buf; /* TAKE: the entry taken; SPILL: the entry in its new parcel; KEEP: the new entry */
} kept_change;

typedef struct kept_plan {
  uint64_t *copies; /* {dst, src, bytes} triples, in order */
  size_t ncopies, copies_cap;
  kept_change *changes;
  size_t nchanges, changes_cap;
} kept_plan;

/* Plans job jr (at position pos) against table t, which it updates as if
 * the job ran (t is a scratch copy: the device's own table changes only at
 * kept_commit). A take of something not in t fails the job with
 * SCHEDRUN_EDEPEND; what it did find is still taken. */
int kept_plan_job(execute_state *s, kept_table *t, const context_run *c, const job_run *jr, size_t pos, kept_plan *pl,
                  schedrun_error_t *err);
/* Applies the changes of the plan's jobs before `failed` (SIZE_MAX: none
 * failed), and of the job that failed what it did before it failed (its
 * takes, and the spills among the first copies_ran copies); frees the
 * parcels of spills that did not happen and of entries taken. */
void kept_commit(execute_state *s, const kept_plan *pl, size_t failed, size_t copies_ran);
/* One EXECUTE from its first half (its buffers filled) to its last (read
 * back and answered): on the stack for a job run at once, in the state for
 * the one posted (execute_posted.c). */
struct execute_one {
  msg *m; /* the EXECUTE */
  context_run c;
  job_run jr;
  job_traffic traffic;
  kept_plan kp;
  size_t copies_ran;
  uint64_t t0;
  uint32_t ntimed;
  gpu_failure f;
  schedrun_error_t err;
  int rc; /* SCHEDRUN_OK while it may go on */
};
/* Takes a job's first half: its context checked, what it takes from jobs
 * before it, its buffers filled; o->m set, the rest filled here. */
void execute_one_begin(execute_state *s, execute_one *o);
/* The replay, waited for (o->rc OK). */
void execute_one_launch(execute_state *s, execute_one *o);
/* Its last half, after the replay (or a failure before it): the buffers it
 * wants read back, what it leaves, the answer or the error. */
void execute_one_end(actor_t *self, execute_state *s, execute_one *o);
/* execute_posted.c: collects the job posted, if any, and runs what a guest
 * deferred (the start of every turn but a posting guest's). */
void execute_settle(actor_t *self, execute_state *s);
/* While a guest posts (s->post_mode): takes m, posting it when it can. */
void execute_post_or_defer(actor_t *self, execute_state *s, msg *m);
/* A queued message, run now (execute_actor.c's queue taker). */
bool execute_take_queued(void *self, msg *m);

/* Drops what the plan holds past nchanges changes and ncopies copies
 * values (a job planned last that will not run with the others). */
void kept_plan_truncate(execute_state *s, kept_plan *pl, size_t nchanges, size_t ncopies);
/* For a job that runs alone: plans it (position 0) and makes its copies
 * now; kept_commit(s, pl, rc ? 0 : SIZE_MAX, *copies_ran) once it ran. */
int kept_before_job(execute_state *s, const context_run *c, const job_run *jr, kept_plan *pl, size_t *copies_ran,
                    schedrun_error_t *err);
/* A scratch copy of the device's table; false without memory. */
bool kept_scratch(const execute_state *s, kept_table *t);
void kept_table_free(kept_table *t);
void kept_plan_free(kept_plan *pl);
/* Whether jr's hand-offs are all kept on this device (none to or from a
 * parcel that travels in messages). */
bool kept_only(const job_run *jr);

/* execute_host.c: a program with host steps runs its segments of device
 * steps in turn (c->sequence is then gpu_seq *[nhosts + 1]), each host step
 * between them with the job's buffers in host memory. */
int execute_run_segments(execute_state *s, const context_run *c, const job_run *jr, gpu_failure *f,
                         schedrun_error_t *err);

/* execute_many.c */
/* EXECUTE_MANY (execute_many.c), run now, each submission waited for,
 * after what is ready and out (execute_flush); m is taken (left empty). */
void execute_handle_many(actor_t *self, execute_state *s, msg *m);


/* execute_answers.c: the answers of an EXECUTE_MANY's jobs, in columns
 * (COMPLETE_MANY to the client, EXECUTED_MANY to the scheduler), sent every
 * FLUSH_JOBS jobs or FLUSH_BYTES of outputs and at the end. */
#define FLUSH_JOBS 512
#define FLUSH_BYTES (64u << 20)
/* The answers of a batch being run, in columns. */
typedef struct batch_out {
  msg complete, executed;
  size_t cap;  /* of every job column */
  size_t ocap;  /* of outputs */
  size_t ojcap; /* of output_jobs */
  size_t pcap;  /* of parcels and parcel_jobs */
  uint64_t out_bytes;
  const char *client, *scheduler;
  schedrun_core *core;
} batch_out;
/* Appends the parcels a job left (its batch position `job`); false
 * without memory (the caller frees them then). */
bool batch_parcels(batch_out *b, size_t job, const msg_u64s *parcels);
void batch_begin(batch_out *b, execute_state *s, const msg_execute_many *x, const char *client, const char *scheduler);
/* Room for `more` jobs in every column; false without memory. */
bool batch_room(batch_out *b, size_t more);
/* Room in output_jobs for `need` outputs; false without memory. */
bool batch_output_jobs(batch_out *b, size_t need);
/* Room for one more output (and its entry in output_jobs). */
msg_output *batch_output(batch_out *b);
/* Drops outputs [from, n) that no job will answer with. */
void batch_drop_outputs(batch_out *b, size_t from);
/* Sends what is gathered. */
void batch_flush(actor_t *self, batch_out *b);
void batch_flush_if_full(actor_t *self, batch_out *b);
/* Sends what is left and frees the columns. */
void batch_end(actor_t *self, batch_out *b);
/* Job jr succeeded; its outputs are [outs_from, outputs.n). batch_room was
 * called for it. */
void batch_add(batch_out *b, const job_run *jr, uint64_t t_submit, uint64_t t0, uint64_t t1, size_t outs_from);
/* A timed job answers alone, with its node times; the answers before it go
 * first. Its outputs are [outs_from, outputs.n) of the batch. */
void answer_timed(actor_t *self, execute_state *s, batch_out *b, const msg_execute_many *x, const job_run *jr,
                  uint64_t t_submit, uint64_t t0, uint64_t t1, size_t outs_from, uint32_t ntimed, msg_u64s *parcels);


/* ---- an EXECUTE_MANY's jobs (execute_many.c), and submissions left
 * running while the next are queued (execute_pipeline.c) ---- */

/* Where each job's inputs, parked buffers and taken parcels start in x's
 * lists (the decoder checked they come in job order); [n] is the end. */
typedef struct job_at {
  size_t *in, *park, *take;
} job_at;

/* A submission's steps, growing. */
typedef struct ops_buf {
  gpu_batch_op *v;
  bool *kept; /* the step is a kept buffer's copy (a plan's, kept_commit counts them) */
  size_t n, cap;
} ops_buf;

/* One submission of jobs [k0, k0 + nj) of a message: its steps, and what
 * answering them needs once it ran. */
typedef struct seg_run {
  ops_buf ops;
  size_t *seq_at, *end_at; /* per job: its sequence's step, the step after its last */
  size_t *outs_end;        /* per job: the end of its outputs in the batch */
  job_traffic *hand;
  size_t outs0, k0, nj;
  kept_plan kp;
  uint64_t t0;
  bool kept_steps; /* some step is a kept buffer's copy */
} seg_run;

/* A message's jobs being run: the message (owned), its execution context,
 * where each job's lists start, its answers, and how far it got. */
struct many_run {
  msg m;
  context_run c;
  job_at at;
  batch_out b;
  size_t k;       /* its first job neither run nor out (execute_pipeline.c) */
  bool out;       /* a submission of it is the pending one */
  bool alone;     /* its job k runs alone next: its submission out ran nothing */
  many_run *next; /* in the actor's ready list */
};

/* A submission left running on the device (batch_begin) while the actor
 * plans the next, and the message it came from. */
struct execute_pending {
  many_run *mr;
  seg_run sg;
};

/* Takes m (left empty) as a message's run, its answers begun; NULL when it
 * cannot run (its jobs were failed, saying why). */
many_run *many_new(actor_t *self, execute_state *s, msg *m);
/* Its last answers, and frees it. */
void many_end(actor_t *self, many_run *mr);
/* The end of the submission that starts at job k: k when job k runs alone. */
size_t many_segment(execute_state *s, const many_run *mr, size_t k);
/* Runs mr's jobs from mr->k on, each submission waited for (nothing else
 * out on the device). */
void many_rest(actor_t *self, execute_state *s, many_run *mr);
/* Runs job k alone (nothing else out on the device). */
void many_run_alone(actor_t *self, execute_state *s, many_run *mr, size_t k);
/* Plans jobs [k0, k1) of mr as one submission into *sg (fewer when a job
 * must fail alone: sg->nj); false when it cannot (no memory). */
bool seg_plan(execute_state *s, many_run *mr, size_t k0, size_t k1, seg_run *sg);
/* Answers submission *sg of mr, which ended with rc, `done` steps done, f
 * and err: the first job of mr not answered (sg->k0 when it ran nothing).
 * Frees *sg. */
size_t seg_answer(actor_t *self, execute_state *s, many_run *mr, seg_run *sg, int rc, size_t done, gpu_failure *f,
                  schedrun_error_t *err);
void seg_free(seg_run *sg);
/* Runs submission *sg of mr (planned: seg_plan said it could) with
 * run_batch, nothing else out on the device, and answers it; when it ran
 * nothing, its first job runs alone. Returns mr's next job. Frees *sg. */
size_t seg_run_wait(actor_t *self, execute_state *s, many_run *mr, seg_run *sg, bool planned);
/* Whether planning a submission of mr would free the `init` images first. */
bool images_full(const execute_state *s, const many_run *mr);

/* execute_pipeline.c: on a device that can queue a submission while another
 * runs (batch_begin), the queued EXECUTE_MANYs wait in a ready list and are
 * run a submission at a time, taking turns between execution contexts. */
/* Adds a queued EXECUTE_MANY (m is taken) to the ready list. */
void execute_queue_many(actor_t *self, execute_state *s, msg *m);
/* Plans and starts one submission of the ready list, or finishes the one
 * out; false when there was nothing to do. */
bool execute_step(actor_t *self, execute_state *s);
/* Runs everything ready, and finishes what is out. */
void execute_flush(actor_t *self, execute_state *s);
/* Before a lone EXECUTE of context c: finishes what is out, and runs what
 * is ready of c's context (the messages of other contexts wait). */
void execute_flush_context(actor_t *self, execute_state *s, const context_run *c);

#endif
