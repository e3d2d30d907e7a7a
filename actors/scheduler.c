/*
 * The scheduler actor: owns the jobs and their state machine, and places
 * them on devices.
 *
 *   SUBMIT -> (COMPILE -> COMPILED, once per program) -> placed on a device
 *          -> RECORD -> RECORDED -> EXECUTE -> EXECUTED -> COMPLETE
 *
 * Jobs that can replay their context's recording as it is skip the RECORD
 * and go, as many as are ready, in one EXECUTE_MANY; the execute actor answers
 * the client with COMPLETE_MANY and the scheduler with EXECUTED_MANY.
 * Dispatch waits until the message at hand has been handled, so a
 * SUBMIT_MANY, or the EXECUTED_MANY that makes room, starts its jobs in as
 * few messages as it can; a lone job still leaves at once.
 *
 * An ERROR from any actor completes the job it names with that error (a
 * compile ERROR completes every job waiting for that compile). Buffers are
 * allocated per {program, device, slot} the first time a job needs them; jobs
 * that share a slot on a device run one after another, so a recorded sequence
 * is never re-recorded while it executes and two jobs never share buffers.
 *
 * TERM starts a drain: new and waiting jobs complete with SCHEDRUN_ECLOSED, jobs
 * already recording or executing finish, then the scheduler frees the buffers,
 * answers TERM, and stops. Every job completes exactly once.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler_state.h"


/* ---- handlers ---- */

static bool inputs_fit(const prog_program *p, const msg_outputs *in) {
  for (size_t i = 0; i < in->n; i++) {
    if (in->v[i].buffer >= p->nbuffers) return false;
    const prog_buffer *b = &p->buffers[in->v[i].buffer];
    if (in->v[i].data.len != b->count * prog_type_size(b->type)) return false;
  }
  return true;
}

/* Parcels to leave or take name buffers of the program and devices there are. */
static bool handoffs_fit(const scheduler_state *s, const prog_program *p, const job *j) {
  for (size_t i = 0; i < j->park.n; i++)
    if ((j->park.v[i] & ~MSG_PARK_LOCAL) >= p->nbuffers) return false;
  for (size_t i = 0; i + 2 < j->takes.n; i += 3) {
    if (j->takes.v[i] & MSG_TAKE_BOUND) { /* registered memory: the execute actor finds it by id; */
      /* the third value is where devices reach it, or 0 */
      if ((j->takes.v[i] & ~MSG_TAKE_BOUND) >= p->nbuffers || j->takes.v[i + 1] == 0) return false;
      continue;
    }
    bool kept = j->takes.v[i + 1] == MSG_TAKE_LOCAL;
    if ((kept ? MSG_TAKE_BUFFER(j->takes.v[i]) : j->takes.v[i]) >= p->nbuffers) return false;
    if (!kept && j->takes.v[i + 1] >= (uint64_t)s->core->ndevices) return false;
    if (kept && (j->takes.v[i + 2] == 0 || j->takes.v[i + 2] == j->id)) return false;
  }
  return true;
}

/* The first job j takes a kept buffer from, or 0. */
static uint64_t kept_from(const job *j) {
  for (size_t i = 0; i + 2 < j->takes.n; i += 3)
    if (j->takes.v[i + 1] == MSG_TAKE_LOCAL) return j->takes.v[i + 2];
  return 0;
}

/* Answers a SUBMIT whose job the scheduler did not register, from the
 * message alone, to `to`. */
static void answer_unregistered(actor_t *self, scheduler_state *s, const msg *m, const char *to, int code,
                                const char *text) {
  const msg_submit *sb = &m->body.submit;
  msg r;
  if (msg_init(&r, MSG_COMPLETE, m->job, ACTOR_SCHEDULER) != SCHEDRUN_OK) {
    msg_free(&r);
    return; /* not even the answer fits: nothing can be said */
  }
  r.body.complete.status = code;
  r.body.complete.program = sb->program;
  r.body.complete.device = -1;
  r.body.complete.run = sb->run;
  r.body.complete.job_index = sb->job_index;
  r.body.complete.text = scheduler_with_teardown(text, "keep nothing of the job (it was never taken): free its inputs "
                                                       "and the buffers handed to it");
  core_send_complete(self, s->core, to, &r);
  msg_free(&r);
}

/* A job the scheduler has no memory to take is answered, not dropped: its
 * client would wait for it for good. */
static void refuse_without_memory(actor_t *self, scheduler_state *s, const msg *m) {
  char text[160];
  snprintf(text, sizeof text,
           "out of memory: the scheduler could not take job %llu (run %u, job %u); nothing of it was kept",
           (unsigned long long)m->job, m->body.submit.run, m->body.submit.job_index);
  answer_unregistered(self, s, m, m->from, SCHEDRUN_ENOMEM, text);
}

/* A SUBMIT; `refused` (or NULL) says why it cannot be taken before it is looked at. */
static void handle_submit(actor_t *self, scheduler_state *s, msg *m, const char *refused) {
  const msg_submit *sb = &m->body.submit;
  job *j = calloc(1, sizeof *j);
  if (!j) {
    refuse_without_memory(self, s, m);
    return;
  }
  j->id = m->job;
  j->program = sb->program;
  j->run = sb->run;
  j->job_index = sb->job_index;
  j->slot = sb->slot;
  j->keep = sb->keep & MSG_KEEP_OUTPUTS; /* what stays on the device is the scheduler's to say */
  j->deadline = sb->deadline;
  j->record_only = sb->record_only != 0;
  j->device = -1;
  j->t_submit = now_ns();
  j->inputs = sb->inputs;
  memset(&m->body.submit.inputs, 0, sizeof m->body.submit.inputs);
  j->park = sb->park;
  j->takes = sb->takes;
  memset(&m->body.submit.park, 0, sizeof m->body.submit.park);
  memset(&m->body.submit.takes, 0, sizeof m->body.submit.takes);
  str_copy(j->client, sizeof j->client, m->from);
  prog_state *ps = scheduler_prog_get(s, sb->program, false);
  const prog_program *p = ps ? ps->p : core_program(s->core, sb->program);
  const char *bad = NULL;
  if (refused) bad = refused;
  else if (idmap_get(&s->jobs, j->id)) bad = "a job with this id is already in flight";
  else if (!p) bad = "no such program";
  else if (!inputs_fit(p, &j->inputs)) bad = "inputs do not match the program's buffers";
  else if (!handoffs_fit(s, p, j)) bad = "hand-offs name buffers or devices that are not there";
  else if (sb->slot >= MAX_SLOTS) bad = "binding slot out of range (at most 64)";
  else if (sb->device >= s->core->ndevices || sb->device < -1) bad = "no such device";
  else if (s->closing) bad = "the scheduler is shutting down";
  else if ((!ps && !(ps = scheduler_prog_get(s, sb->program, true))) || idmap_put(&s->jobs, j->id, j) != 0)
    bad = "out of memory";
  else if (ps->releasing) bad = "the program is being released";
  else bad = scheduler_bound_slot(ps, j);
  if (bad) {
    int code = s->closing ? SCHEDRUN_ECLOSED : !strcmp(bad, "out of memory") ? SCHEDRUN_ENOMEM : SCHEDRUN_EINVAL;
    if (idmap_get(&s->jobs, j->id) == j) idmap_remove(&s->jobs, j->id);
    answer_unregistered(self, s, m, j->client, code, bad); /* not registered: answer directly */
    scheduler_job_free(s, j);
    return;
  }
  j->pin = sb->device;
  j->kept_from = kept_from(j);
  ps->jobs++;
  if (ps->compile == COMPILE_READY) scheduler_place(self, s, ps, j);
  else scheduler_compile_wait(self, s, ps, j);
}

/* Copies job k's items of a batch list (width values each; owners names
 * each item's job, in job order: the decoder checked) from item *at on into
 * *out, and moves *at past them; false when there were some and no memory
 * for them. */
static bool job_items(const msg_u64s *v, const msg_u64s *owners, size_t width, size_t k, size_t *at, msg_u64s *out) {
  size_t first = *at;
  while (*at < owners->n && owners->v[*at] == k) ++*at;
  size_t n = width * (*at - first);
  if (!n) return true;
  if (!(out->v = malloc(n * sizeof *out->v))) return false;
  memcpy(out->v, &v->v[width * first], n * sizeof *out->v);
  out->n = n;
  return true;
}

/* SUBMIT_MANY: each job as its own SUBMIT, ids from the envelope's on, its
 * inputs moved out of the batch's list. */
static void handle_submit_many(actor_t *self, scheduler_state *s, msg *m) {
  msg_submit_many *b = &m->body.submit_many;
  size_t in = 0, pk = 0, tk = 0; /* the next input, park entry and take, in job order */
  for (size_t k = 0; k < b->programs.n; k++) {
    msg one = {.v = m->v, .type = MSG_SUBMIT, .job = m->job + k, .from = m->from};
    msg_submit_many_get(b, k, &one.body.submit);
    size_t first = in;
    while (in < b->input_jobs.n && b->input_jobs.v[in] == k) in++;
    msg_outputs *ins = &one.body.submit.inputs;
    if (in > first && (ins->v = malloc((in - first) * sizeof *ins->v))) {
      ins->n = in - first;
      memcpy(ins->v, &b->inputs.v[first], ins->n * sizeof *ins->v);
      memset(&b->inputs.v[first], 0, ins->n * sizeof *ins->v); /* the job's now */
    }
    /* its hand-offs, copied out of the batch's lists */
    bool nomem = in > first && !ins->v;
    msg_u64s *park = &one.body.submit.park, *takes = &one.body.submit.takes;
    size_t t0 = tk;
    bool park_ok = job_items(&b->park, &b->park_jobs, 1, k, &pk, park);
    if (!job_items(&b->takes, &b->take_jobs, 3, k, &tk, takes)) {
      /* refused below: nobody else will free the parcels it was to take */
      msg_u64s mine = {&b->takes.v[3 * t0], 3 * (tk - t0)};
      core_free_parcels(s->core, &mine);
      nomem = true;
    }
    nomem = nomem || !park_ok;
    /* without memory for its lists the job is refused; its inputs are freed
     * with the batch */
    handle_submit(self, s, &one, nomem ? "out of memory" : NULL);
    for (size_t i = 0; i < ins->n; i++) msg_bytes_free(ins->v[i].data.data, ins->v[i].data.len); /* not taken: no job */
    free(ins->v);
    free(park->v);
    free(takes->v);
  }
}

static void handle_executed(actor_t *self, scheduler_state *s, msg *m);
static void handle_executed_many(actor_t *self, scheduler_state *s, msg *m);

/* A queued message: SUBMITs from the library and EXECUTEDs from the execute
 * actors are queued for the scheduler (core->to_scheduler). */
static bool take_queued(void *ctx, msg *m) {
  actor_t *self = ctx;
  scheduler_state *s = actor_state(self);
  switch (m->type) {
  case MSG_SUBMIT: handle_submit(self, s, m, NULL); return true;
  case MSG_SUBMIT_MANY: handle_submit_many(self, s, m); return true;
  case MSG_EXECUTED: handle_executed(self, s, m); return true;
  case MSG_EXECUTED_MANY: handle_executed_many(self, s, m); return true;
  default: return false;
  }
}

static void handle_error(actor_t *self, scheduler_state *s, msg *m) {
  const msg_error *e = &m->body.error;
  job *j = idmap_get(&s->jobs, m->job);
  prog_state *ps = scheduler_compile_of(s, m->job); /* the job asked for a compile */
  if (!j && !ps) return;
  strbuf text;
  sb_init(&text);
  sb_adds(&text, e->text ? e->text : "");
  /* the client learns what was torn down before the error reached it */
  for (size_t i = 0; i < e->teardown.n; i++) sb_addf(&text, "%s%s", i ? "; " : "\nteardown: ", e->teardown.v[i]);
  if (ps) {
    /* the compile this job asked for failed: the jobs waiting for it fail */
    scheduler_compile_failed(self, s, ps, e->code, text.data);
  } else if (j->state != JOB_COMPILING) {
    int device = j->device;
    scheduler_complete(self, s, j, e->code, text.data, NULL);
    gpu_backend *be = s->core->backend;
    if (device >= 0 && be->ops->device_lost(be, device)) scheduler_replace_jobs_of(self, s, device);
  }
  sb_free(&text);
}

static void handle_recorded(actor_t *self, scheduler_state *s, msg *m) {
  job *j = idmap_get(&s->jobs, m->job);
  if (!j || j->state != JOB_RECORDING) return;
  uint64_t now = now_ns();
  j->record_ns = now - j->t_phase;
  j->t_phase = now;
  j->counts = m->body.recorded.counts;
  prog_state *ps = scheduler_prog_get(s, j->program, false);
  slot_key sk = {(uint32_t)j->device, j->slot};
  slot_state *ss = ps ? hmap_get(&ps->slots, &sk) : NULL;
  if (!ss) {
    scheduler_complete(self, s, j, SCHEDRUN_EINTERNAL, "RECORDED for a slot that is gone", NULL);
    return;
  }
  ss->recording = false;
  ss->recorded = true;
  ss->last_job = j->job_index;
  ss->last_run = j->run;
  ss->sequence = m->body.recorded.sequence;
  ss->nodes = j->counts.created + j->counts.updated + j->counts.reused;
  if (j->record_only) {
    /* recorded is all it asked: done, and the recording stays (the slot
     * counts it as an EXECUTE that finished at once) */
    j->state = JOB_EXECUTING;
    ss->inflight++;
    scheduler_complete(self, s, j, SCHEDRUN_OK, NULL, NULL);
    return;
  }
  scheduler_start_execute(self, s, ps, ss, j);
  scheduler_dispatch_slot(self, s, ps, ss);
}

static void handle_executed(actor_t *self, scheduler_state *s, msg *m) {
  job *j = idmap_get(&s->jobs, m->job);
  if (!j || j->state != JOB_EXECUTING) return;
  /* the execute actor has sent the client its COMPLETE already */
  if (j->by_model) scheduler_model_sample(s, scheduler_prog_get(s, j->program, false), j, m->body.executed.exec_ns);
  scheduler_retire(self, s, j);
}

static void handle_executed_many(actor_t *self, scheduler_state *s, msg *m) {
  const msg_u64s *ids = &m->body.executed_many.jobs;
  const msg_u64s *ns = &m->body.executed_many.exec_ns;
  assert(ns->n == ids->n); /* the codec checks the columns */
  for (size_t k = 0; k < ids->n; k++) {
    job *j = idmap_get(&s->jobs, ids->v[k]);
    if (!j || j->state != JOB_EXECUTING) continue;
    if (j->by_model) scheduler_model_sample(s, scheduler_prog_get(s, j->program, false), j, ns->v[k]);
    scheduler_retire(self, s, j);
  }
}

/* RELEASE from the client: the program's jobs finish first (new ones are
 * refused), then its buffers and recordings go, then the client hears back
 * and frees the program itself. */
static void handle_release(actor_t *self, scheduler_state *s, msg *m) {
  uint64_t id = m->body.release.program;
  prog_state *ps = scheduler_prog_get(s, id, false);
  if (!strcmp(m->from, ACTOR_RECORD)) {
    /* the record actor has dropped its recordings: finish */
    assert(s->releases_out > 0); /* it answers the scheduler's own RELEASEs only */
    if (s->releases_out) s->releases_out--;
    if (!ps || !ps->releasing) return;
    char to[32];
    str_copy(to, sizeof to, ps->release_to);
    uint64_t job_id = ps->release_job;
    hmap_remove(&s->progs, &id);
    scheduler_prog_state_free(s, ps);
    scheduler_reply_simple(self, to, MSG_RELEASE, job_id, id);
    return;
  }
  if (!ps) ps = scheduler_prog_get(s, id, true); /* nothing ran: the record actor is asked anyway */
  if (!ps) {
    const char *steps[] = {"release nothing: the program's state is as it was"};
    actor_send_error(self, m->from, m->job, SCHEDRUN_ENOMEM, "out of memory", steps, 1);
    return;
  }
  if (ps->releasing) return; /* asked twice: one answer */
  ps->releasing = true;
  str_copy(ps->release_to, sizeof ps->release_to, m->from);
  ps->release_job = m->job;
  if (ps->jobs == 0) scheduler_finish_release(self, s, ps);
}

static int scheduler_handle(actor_t *self, msg *m) {
  scheduler_state *s = actor_state(self);
  s->defer = true;
  switch (m->type) {
  case MSG_SUBMIT: handle_submit(self, s, m, NULL); break;
  case MSG_SUBMIT_MANY: handle_submit_many(self, s, m); break;
  case MSG_QUEUED:
    for (size_t bad = msgq_drain(&s->core->to_scheduler, take_queued, self); bad; bad--) actor_count_malformed(self);
    break;
  case MSG_COMPILED: scheduler_compiled(self, s, m); break;
  case MSG_TICK:
    scheduler_compile_tick(self, s);
    scheduler_resident_tick(self, s);
    break;
  case MSG_RECORDED: handle_recorded(self, s, m); break;
  case MSG_EXECUTED: handle_executed(self, s, m); break;
  case MSG_EXECUTED_MANY: handle_executed_many(self, s, m); break;
  case MSG_ERROR: handle_error(self, s, m); break;
  case MSG_RELEASE: handle_release(self, s, m); break;
  case MSG_TERM: {
    s->closing = true;
    str_copy(s->close_to, sizeof s->close_to, m->from);
    s->close_job = m->job;
    /* fail what is placed but not started; what is recording or executing
     * finishes. Jobs waiting for a compile complete when the compile actor
     * has torn its sessions down (ERROR, ECLOSED): teardown first. */
    size_t pos = 0;
    void *v;
    job **pending = calloc(s->jobs.count + 1, sizeof *pending);
    size_t n = 0;
    bool compiling = false;
    while (pending && idmap_next(&s->jobs, &pos, NULL, &v)) {
      if (((job *)v)->state == JOB_PLACED_WAITING) pending[n++] = v;
      if (((job *)v)->state == JOB_COMPILING) compiling = true;
    }
    pos = 0;
    while (hmap_next(&s->progs, &pos, NULL, &v)) {
      size_t sp = 0;
      void *sv;
      while (hmap_next(&((prog_state *)v)->slots, &sp, NULL, &sv)) ((slot_state *)sv)->queue = (job_queue){0};
      ((prog_state *)v)->moving = (job_queue){0}; /* PLACED_WAITING too: completed below */
      ((prog_state *)v)->calibrating = (job_queue){0}; /* and these */
    }
    for (size_t i = 0; i < n; i++) scheduler_complete(self, s, pending[i], SCHEDRUN_ECLOSED, "the scheduler shut down before the job started", NULL);
    free(pending);
    if (compiling) {
      msg c;
      msg_init(&c, MSG_CANCEL, 0, ACTOR_SCHEDULER);
      actor_send(self, ACTOR_COMPILE, &c);
      msg_free(&c);
    }
    break;
  }
  case MSG_STATUS: {
    /* {program, device, slot} asks about one execution context; with
     * "modules", the program's compiled kernels come back as one item per
     * artifact, named by its path in the cache */
    uint64_t program = 0;
    slot_key sk = {0, 0};
    bool modules = false;
    for (size_t i = 0; i < m->body.status.items.n; i++) {
      const msg_stat *it = &m->body.status.items.v[i];
      if (!strcmp(it->name, "program")) program = (uint64_t)it->value;
      else if (!strcmp(it->name, "device")) sk.device = (uint32_t)it->value;
      else if (!strcmp(it->name, "slot")) sk.slot = (uint32_t)it->value;
      else if (!strcmp(it->name, "modules")) modules = it->value != 0;
    }
    prog_state *ps = program ? scheduler_prog_get(s, program, false) : NULL;
    slot_state *ss = ps ? hmap_get(&ps->slots, &sk) : NULL;
    size_t nmod = modules && ps ? ps->modules[0].n : 0;
    msg r;
    msg_init(&r, MSG_STATUS, m->job, ACTOR_SCHEDULER);
    r.body.status.items.v = calloc(4 + nmod, sizeof(msg_stat));
    if (r.body.status.items.v) {
      r.body.status.items.v[0] = (msg_stat){xstrdup("jobs_in_flight"), (int64_t)s->jobs.count};
      r.body.status.items.v[1] = (msg_stat){xstrdup("programs"), (int64_t)s->progs.count};
      r.body.status.items.v[2] = (msg_stat){xstrdup("reused_without_record"), ss ? (int64_t)ss->fast_reuses : 0};
      r.body.status.items.v[3] = (msg_stat){xstrdup("compiled"), ps && ps->usable ? 1 : 0};
      r.body.status.items.n = 4;
      for (size_t i = 0; i < nmod; i++)
        r.body.status.items.v[r.body.status.items.n++] = (msg_stat){xstrdup(ps->modules[0].v[i].path), (int64_t)i};
    }
    actor_send(self, m->from, &r);
    msg_free(&r);
    break;
  }
  default: break;
  }
  s->defer = false;
  scheduler_flush(self, s);
  /* a release in flight is answered first: the record actor's answer must
   * find the scheduler's mailbox open */
  if (s->closing && s->jobs.count == 0 && s->releases_out == 0) {
    scheduler_reply_simple(self, s->close_to, MSG_TERM, s->close_job, 0);
    return ACTOR_STOP;
  }
  return ACTOR_CONTINUE;
}

const actor_def scheduler_actor_def = {NULL, scheduler_handle, NULL};
