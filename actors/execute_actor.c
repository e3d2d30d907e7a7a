/*
 * An execute actor: one per device. It owns the device's queue (on the host
 * backend, its own thread) and runs one job at a time on it: re-initialise the
 * job's buffers from the program's `init`, replay the recorded sequence, read
 * back the buffers the job needs, answer EXECUTED. The per-launch path is the
 * replay inside the backend; no message is sent per kernel.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/execute_state.h"

_Static_assert(PROG_MAX_SOURCE_BYTES <= MSG_MAX_STRING, "a kernel's source fits one string of a message");

execute_state *execute_state_new(schedrun_core *core, int device) {
  execute_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  if (!(s->post = calloc(1, sizeof *s->post))) {
    free(s);
    return NULL;
  }
  s->core = core;
  s->device = device;
  snprintf(s->name, sizeof s->name, ACTOR_EXECUTE_FMT, device);
  return s;
}

void execute_state_free(execute_state *s) {
  if (s) {
    assert(!atomic_load(&s->posted) && !s->ndeferred); /* collected and run before the actor stopped */
    free(s->post);
    free(s->deferred);
    free(s->times);
    kept_table_free(&s->kept); /* empty once the actor stopped (execute_stop) */
  }
  free(s);
}

bool execute_stays(const prog_program *p, const job_run *jr, uint32_t b) {
  if (!(jr->keep & MSG_KEEP_RESIDENT) || !p->buffers[b].resident) return false;
  for (size_t i = 0; i < jr->ninputs; i++)
    if (jr->inputs[i].buffer == b) return false;
  return true;
}

bool execute_wanted(const prog_program *p, uint32_t b, uint32_t keep) {
  if (keep & MSG_KEEP_OUTPUTS) return true;
  for (uint32_t i = 0; i < p->nexpects; i++)
    if (p->expects[i].buffer == b) return true;
  return false;
}

int execute_check_context(const execute_state *s, const char *type, uint64_t program, uint32_t device,
                         const context_run *c, schedrun_error_t *err) {
  if (!c->p) return err_set(err, SCHEDRUN_EPROTO, "%s names unknown program %llu", type, (unsigned long long)program);
  if (device != (uint32_t)s->device) return err_set(err, SCHEDRUN_EPROTO, "%s for device %u reached %s", type, device, s->name);
  if (c->bindings->n != c->p->nbuffers || c->sequence == 0)
    return err_set(err, SCHEDRUN_EPROTO, "%s binds %zu buffers (program has %u) or has no sequence", type,
                   c->bindings->n, c->p->nbuffers);
  return SCHEDRUN_OK;
}

void execute_traffic_out(const job_traffic *t, msg_complete *c) {
  c->handoffs_local = t->local;
  c->handoffs_copied = t->copied;
  c->handoffs_peer = t->peer;
  c->bytes_in = t->in;
  c->bytes_out = t->out;
  c->bytes_peer = t->across;
}

msg_output *execute_add_output(msg_outputs *o, size_t *cap) {
  if (o->n == *cap) {
    size_t n = *cap ? 2 * *cap : 4;
    msg_output *v = realloc(o->v, n * sizeof *v);
    if (!v) return NULL;
    o->v = v;
    *cap = n;
  }
  msg_output *out = &o->v[o->n];
  memset(out, 0, sizeof *out);
  return out;
}

void execute_name_failure(const prog_program *p, const job_run *jr, const gpu_failure *f, int rc,
                          schedrun_error_t *err) {
  char what[512];
  if (f->tag != GPU_NO_TAG) prog_describe_command(p, f->tag, what, sizeof what);
  else snprintf(what, sizeof what, "'%s'", p->name);
  schedrun_error_t named = {0};
  err_set(&named, rc, "%s, in %s, job %llu (run %u, job %u)", err->message ? err->message : "launch failed", what,
          (unsigned long long)jr->id, jr->run, jr->job_index);
  err_move(err, &named);
}

bool execute_timing(const execute_state *s) {
  return s->core->time_nodes && s->timed < TIMED_JOBS && s->core->backend->ops->seq_launch_timed;
}

/* A job's buffers from its inputs, the program's `init` or what it takes;
 * then whether it may still start. */
static int job_before(execute_state *s, const context_run *c, const job_run *jr, schedrun_error_t *err) {
  const prog_program *p = c->p;
  gpu_backend *be = s->core->backend;
  int rc = SCHEDRUN_OK;
  for (uint32_t b = 0; rc == SCHEDRUN_OK && b < p->nbuffers; b++) {
    if (execute_taken(&jr->takes, b)) continue; /* filled from its parcel below */
    if (execute_stays(p, jr, b)) continue;       /* as the last job here left it */
    const prog_buffer *buf = &p->buffers[b];
    uint64_t bytes = buf->count * prog_type_size(buf->type);
    const uint8_t *src = buf->image;
    for (size_t i = 0; i < jr->ninputs; i++)
      if (jr->inputs[i].buffer == b) {
        if (jr->inputs[i].data.len != bytes)
          return err_set(err, SCHEDRUN_EPROTO, "EXECUTE input for buffer '%s' has %zu bytes, not %llu", buf->name,
                         jr->inputs[i].data.len, (unsigned long long)bytes);
        src = jr->inputs[i].data.data;
      }
    rc = src ? be->ops->copy_htod(be, s->device, c->bindings->v[b], src, bytes, err)
             : be->ops->mem_zero(be, s->device, c->bindings->v[b], bytes, err);
    if (src && jr->traffic) jr->traffic->in += bytes;
  }
  if (rc == SCHEDRUN_OK && jr->takes.n) rc = execute_take_parcels(s, c, jr, err);
  if (rc) return rc;
  if (jr->deadline && now_ns() >= jr->deadline)
    return err_set(err, SCHEDRUN_ETIMEOUT, "job %llu (run %u, job %u) reached its deadline before it started on %s",
                   (unsigned long long)jr->id, jr->run, jr->job_index, be->ops->device_name(be, s->device));
  return SCHEDRUN_OK;
}

/* The replay, waited for; a failure names its step. */
static int job_launch(execute_state *s, const context_run *c, const job_run *jr, uint32_t *ntimed, gpu_failure *f,
                      schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  gpu_seq *seq = (gpu_seq *)(uintptr_t)c->sequence;
  int rc;
  if (execute_timing(s) && !s->times)
    s->times = malloc(TIMED_NODES * 3 * sizeof *s->times); /* freed once the last timed job is answered */
  if (c->p->nhosts) {
    rc = execute_run_segments(s, c, jr, f, err);
  } else if (execute_timing(s) && s->times) {
    s->timed++;
    rc = be->ops->seq_launch_timed(seq, jr->deadline, f, s->times, TIMED_NODES, ntimed, err);
  } else {
    rc = be->ops->seq_launch(seq, jr->deadline, f, err);
  }
  if (rc) execute_name_failure(c->p, jr, f, rc, err);
  return rc;
}

/* What the job wrote back into registered memory, and the buffers it wants
 * read back, appended to *outs. */
static int job_after(execute_state *s, const context_run *c, const job_run *jr, msg_outputs *outs, size_t *cap,
                     schedrun_error_t *err) {
  const prog_program *p = c->p;
  gpu_backend *be = s->core->backend;
  int rc = SCHEDRUN_OK;
  if (jr->takes.n && (rc = execute_write_back(s, c, jr, err))) return rc;
  for (uint32_t b = 0; rc == SCHEDRUN_OK && b < p->nbuffers; b++) {
    if (!execute_wanted(p, b, jr->keep)) continue;
    const prog_buffer *buf = &p->buffers[b];
    uint64_t bytes = buf->count * prog_type_size(buf->type);
    msg_output *o = execute_add_output(outs, cap);
    if (!o || !(o->data.data = msg_bytes_alloc(bytes))) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    o->buffer = b;
    o->data.len = bytes;
    outs->n++;
    const void *bound = execute_bound_data(s, jr, b);
    if (bound) memcpy(o->data.data, bound, bytes);
    else rc = be->ops->copy_dtoh(be, s->device, o->data.data, c->bindings->v[b], bytes, err);
    if (jr->traffic) jr->traffic->out += bytes;
  }
  return rc;
}

/* Buffers bound in place stay bound until the outputs are read: then they
 * get their own memory back, however the job ended. */
static int job_unbind(execute_state *s, const context_run *c, const job_run *jr, int rc, schedrun_error_t *err) {
  if (!jr->traffic || !jr->traffic->inplace) return rc;
  schedrun_error_t e = {0};
  int r = execute_unbind(s, c, jr, &e);
  if (rc == SCHEDRUN_OK && r) err_move(err, &e);
  if (rc == SCHEDRUN_OK) rc = r;
  schedrun_error_clear(&e);
  return rc;
}

int execute_run_job(execute_state *s, const context_run *c, const job_run *jr, msg_outputs *outs, size_t *cap,
                    uint32_t *ntimed, gpu_failure *f, schedrun_error_t *err) {
  *ntimed = 0;
  f->tag = GPU_NO_TAG;
  f->lost = false;
  int rc = job_before(s, c, jr, err);
  if (rc == SCHEDRUN_OK) rc = job_launch(s, c, jr, ntimed, f, err);
  if (rc == SCHEDRUN_OK) rc = job_after(s, c, jr, outs, cap, err);
  return job_unbind(s, c, jr, rc, err);
}

void execute_job_failed(actor_t *self, execute_state *s, const char *scheduler, uint64_t job, int rc,
                       const gpu_failure *f, schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  char lost[64];
  snprintf(lost, sizeof lost, "mark %s lost: later jobs go to the other devices", be->ops->device_name(be, s->device));
  const char *steps[] = {f->lost ? lost : "leave the device idle for the next job"};
  actor_send_error(self, scheduler, job, rc, err->message ? err->message : "execute failed", steps, 1);
}

void execute_take_times(execute_state *s, uint32_t ntimed, msg_u64s *launches) {
  if (ntimed && (launches->v = malloc((size_t)ntimed * 3 * sizeof(uint64_t)))) {
    memcpy(launches->v, s->times, (size_t)ntimed * 3 * sizeof(uint64_t));
    launches->n = (size_t)ntimed * 3;
  }
  if (s->timed == TIMED_JOBS && s->times) {
    free(s->times); /* timing is over for this device */
    s->times = NULL;
  }
}

void execute_answer(actor_t *self, execute_state *s, msg *complete, uint32_t ntimed, uint64_t t0, uint64_t t1,
                    const char *client, const char *scheduler) {
  msg_complete *cp = &complete->body.complete;
  cp->device = s->device;
  cp->execute_ns = t1 - t0;
  cp->t_execute = t0;
  cp->t_done = t1;
  if (!cp->text) cp->text = xstrdup("");
  execute_take_times(s, ntimed, &cp->launches);
  /* the answer goes straight to the client, one hop sooner; the scheduler
   * hears EXECUTED, without the outputs, after it */
  core_send_complete(self, s->core, client, complete);
  msg done;
  msg_init(&done, MSG_EXECUTED, complete->job, s->name);
  done.body.executed.program = cp->program;
  done.body.executed.device = (uint32_t)s->device;
  done.body.executed.exec_start = t0;
  done.body.executed.exec_ns = t1 - t0;
  core_send_executed(self, s->core, scheduler, &done);
  msg_free(&done);
}

void execute_one_begin(execute_state *s, execute_one *o) {
  msg *m = o->m;
  msg_execute *x = &m->body.execute;
  o->c = (context_run){core_program(s->core, x->program), &x->bindings, x->sequence};
  o->traffic = (job_traffic){0};
  o->jr = (job_run){m->job, x->run, x->job_index, x->keep, x->deadline, x->inputs.v, x->inputs.n, x->takes, x->park, &o->traffic};
  o->kp = (kept_plan){0};
  o->copies_ran = 0;
  o->ntimed = 0;
  o->f = (gpu_failure){GPU_NO_TAG, false};
  o->err = (schedrun_error_t){0};
  o->t0 = now_ns();
  o->rc = execute_check_context(s, "EXECUTE", x->program, x->device, &o->c, &o->err);
  if (o->rc == SCHEDRUN_OK) o->rc = kept_before_job(s, &o->c, &o->jr, &o->kp, &o->copies_ran, &o->err);
  if (o->rc == SCHEDRUN_OK) o->rc = job_before(s, &o->c, &o->jr, &o->err);
}

void execute_one_launch(execute_state *s, execute_one *o) {
  assert(o->rc == SCHEDRUN_OK);
  o->rc = job_launch(s, &o->c, &o->jr, &o->ntimed, &o->f, &o->err);
}

void execute_one_end(actor_t *self, execute_state *s, execute_one *o) {
  msg *m = o->m;
  msg_execute *x = &m->body.execute;
  msg c_msg;
  msg_init(&c_msg, MSG_COMPLETE, m->job, s->name);
  msg_complete *cp = &c_msg.body.complete;
  size_t cap = 0;
  int rc = o->rc;
  if (rc == SCHEDRUN_OK) rc = job_after(s, &o->c, &o->jr, &cp->outputs, &cap, &o->err);
  if (o->c.p) rc = job_unbind(s, &o->c, &o->jr, rc, &o->err);
  core_free_parcels(s->core, &x->takes);
  if (rc == SCHEDRUN_OK && x->park.n) rc = execute_park(s, &o->c, &x->park, &cp->parcels, &o->err);
  kept_commit(s, &o->kp, rc ? 0 : SIZE_MAX, o->copies_ran);
  kept_plan_free(&o->kp);
  if (rc) {
    execute_job_failed(self, s, m->from, m->job, rc, &o->f, &o->err);
  } else {
    cp->status = SCHEDRUN_OK;
    cp->program = x->program;
    cp->run = x->run;
    cp->job_index = x->job_index;
    cp->compile_ns = x->compile_ns;
    cp->record_ns = x->record_ns;
    cp->counts = x->counts;
    cp->cache_hits = x->cache_hits;
    cp->cache_misses = x->cache_misses;
    cp->t_submit = x->t_submit;
    cp->t_compile = x->t_compile;
    cp->t_record = x->t_record;
    execute_traffic_out(&o->traffic, cp);
    execute_answer(self, s, &c_msg, o->ntimed, o->t0, now_ns(), x->client && *x->client ? x->client : ACTOR_CLIENT,
                   m->from);
  }
  msg_free(&c_msg);
  schedrun_error_clear(&o->err);
}

static void handle_execute(actor_t *self, execute_state *s, msg *m) {
  execute_one o = {.m = m};
  execute_one_begin(s, &o);
  if (o.rc == SCHEDRUN_OK) execute_one_launch(s, &o);
  execute_one_end(self, s, &o);
}

static int execute_handle(actor_t *self, msg *m);

/* A queued message: only EXECUTEs are queued for an execute actor. On a
 * device that can queue a submission while another runs, an EXECUTE_MANY
 * joins the ready list (execute_pipeline.c), run once the queue is taken;
 * elsewhere it runs now. */
bool execute_take_queued(void *self, msg *m) {
  execute_state *s = actor_state(self);
  gpu_backend *be = s->core->backend;
  if (s->post_mode) {
    execute_post_or_defer(self, s, m);
    return true;
  }
  if (m->type == MSG_EXECUTE_MANY) {
    if (be->ops->batch_begin) execute_queue_many(self, s, m);
    else execute_handle_many(self, s, m);
    return true;
  }
  if (m->type != MSG_EXECUTE) return false;
  /* what came before it of its context runs first; all of it when it takes
   * what a job before it left on the device */
  msg_execute *x = &m->body.execute;
  context_run c = {core_program(s->core, x->program), &x->bindings, x->sequence};
  if (x->takes.n || !c.p || x->bindings.n < c.p->nbuffers) execute_flush(self, s);
  else execute_flush_context(self, s, &c);
  handle_execute(self, s, m);
  return true;
}

static int execute_handle(actor_t *self, msg *m) {
  execute_state *s = actor_state(self);
  msg_queue *q = &s->core->to_execute[s->device];
  if (!s->post_mode) execute_settle(self, s); /* a posted job first: the device is its until collected */
  switch (m->type) {
  case MSG_TICK: return ACTOR_CONTINUE; /* a wake descriptor was readable: settled above */
  case MSG_QUEUED: /* the scheduler has queued EXECUTEs (core->to_execute[device]) */
    /* takes the queue, then runs what is ready a submission at a time,
     * taking what arrives meanwhile; returns with nothing ready or out */
    for (bool more = true; more;) {
      for (size_t bad = msgq_drain(q, execute_take_queued, self); bad; bad--) actor_count_malformed(self);
      do more = execute_step(self, s);
      while (more && !msgq_any(q));
    }
    return ACTOR_CONTINUE;
  case MSG_EXECUTE:
    /* nothing is ready or out between messages: the queue's turn ran it all */
    assert(!s->ready && !s->pending);
    handle_execute(self, s, m);
    return ACTOR_CONTINUE;
  case MSG_EXECUTE_MANY: execute_handle_many(self, s, m); return ACTOR_CONTINUE;
  case MSG_TERM: return ACTOR_STOP;
  default: return ACTOR_CONTINUE;
  }
}

/* On the actor's thread (a CUDA device's context is current there), after
 * the last message: the device memory the actor holds for itself goes
 * back — the kept `init` images, and parcels nobody came for. */
static void execute_stop(actor_t *self) {
  execute_state *s = actor_state(self);
  gpu_backend *be = s->core->backend;
  execute_settle(self, s); /* a job posted, or left by a guest, ends before the device does */
  assert(!s->pending && !s->ready); /* run and finished when the queue was last taken */
  execute_images_free(s);
  for (size_t i = 0; i < s->kept.n; i++)
    if (!s->kept.v[i].in_context) be->ops->mem_free(be, s->device, s->kept.v[i].at);
  kept_table_free(&s->kept);
}

/* The device's: the thread wakes when a posted job ends, or its worker does. */
static int execute_wake_fds(actor_t *self, int *fds) {
  execute_state *s = actor_state(self);
  gpu_backend *be = s->core->backend;
  return be->ops->device_wake_fds ? be->ops->device_wake_fds(be, s->device, fds) : 0;
}

/* Without the turn: the device's eventfd emptied, its worker's end noted. */
static void execute_woken(actor_t *self) {
  execute_state *s = actor_state(self);
  gpu_backend *be = s->core->backend;
  if (be->ops->device_woken) be->ops->device_woken(be, s->device);
}

const actor_def execute_actor_def = {NULL, execute_handle, execute_stop, execute_wake_fds, execute_woken};
