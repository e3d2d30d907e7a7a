/*
 * The scheduler's plumbing: completing and retiring jobs, and moving jobs
 * through their execution context once placed (scheduler_place.c): RECORD
 * when the recording may have changed, a few EXECUTEs ahead. See scheduler.c for
 * the job flow, scheduler_state.h for the state and scheduler_state.c for
 * its making and freeing.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/exec_ctx_key.h"
#include "actors/scheduler_state.h"


/* One job of the oldest EXECUTE out has come back. */
static void batch_done(slot_state *ss) {
  assert(ss->nbatches > 0 && ss->batch_left[0] > 0);
  if (--ss->batch_left[0] > 0) return;
  memmove(ss->batch_left, ss->batch_left + 1, (ss->nbatches - 1) * sizeof ss->batch_left[0]);
  ss->nbatches--;
}

/* An EXECUTE message of n jobs is going out; its jobs count as sent. */
static void batch_out(slot_state *ss, job *const *jobs, size_t n) {
  assert(ss->nbatches < BATCH_RING);
  ss->batch_left[ss->nbatches++] = (uint32_t)n;
  for (size_t k = 0; k < n; k++) jobs[k]->sent = true;
}

/* Forgets a finished job: the slot, the device's load, the program's count. */
void scheduler_retire(actor_t *self, scheduler_state *s, job *j) {
  prog_state *ps = scheduler_prog_get(s, j->program, false);
  if (ps && ps->jobs) ps->jobs--;
  if (j->device >= 0 && s->load[j->device]) s->load[j->device]--;
  if (j->by_model) scheduler_model_retire(s, ps, j);
  slot_state *ss = NULL;
  if (j->state == JOB_RECORDING || j->state == JOB_EXECUTING) {
    s->active--;
    slot_key sk = {(uint32_t)j->device, j->slot};
    ss = ps ? hmap_get(&ps->slots, &sk) : NULL;
    if (ss && j->state == JOB_RECORDING) {
      /* the RECORD failed: its recording may be gone, record afresh next time */
      ss->recording = false;
      ss->recorded = false;
    } else if (ss && ss->inflight) {
      ss->inflight--;
      if (j->sent) batch_done(ss);
    }
  }
  idmap_remove(&s->jobs, j->id);
  scheduler_job_free(s, j);
  if (ss) scheduler_dispatch_slot(self, s, ps, ss);
  if (ps && ps->moving.head) scheduler_resident_retry(self, s, ps);
  if (ps && ps->calibrating.head && !s->closing) scheduler_model_retry(self, s, ps);
  if (ps && ps->releasing && ps->jobs == 0) scheduler_finish_release(self, s, ps);
}

char *scheduler_with_teardown(const char *text, const char *steps) {
  if (!text) text = "";
  if (!steps || strstr(text, "\nteardown: ")) return xstrdup(text); /* it carries its own */
  strbuf sb;
  sb_init(&sb);
  sb_addf(&sb, "%s\nteardown: %s", text, steps);
  return sb.failed ? (sb_free(&sb), xstrdup(text)) : sb_take(&sb);
}

/* What the scheduler undoes when it fails a job in state `state`. */
static const char *teardown_in(int state) {
  switch (state) {
  case JOB_COMPILING: return "take the job out of its program's compile queue; free its inputs and the buffers handed to it";
  case JOB_PLACING: return "place the job nowhere; free its inputs and the buffers handed to it";
  case JOB_PLACED_WAITING: return "take the job off its device's queue; free its inputs and the buffers handed to it";
  default: return "release the job's execution context to the next job; free its inputs and the buffers handed to it";
  }
}

void scheduler_complete(actor_t *self, scheduler_state *s, job *j, int status, const char *text,
                     msg_outputs *outputs) {
  if (j->state != JOB_EXECUTING && j->device >= 0) {
    prog_state *ps = scheduler_prog_get(s, j->program, false);
    if (ps && ps->p && ps->p->nresident) scheduler_resident_unmoved(ps, j); /* it will not carry them */
  }
  msg m;
  msg_init(&m, MSG_COMPLETE, j->id, ACTOR_SCHEDULER);
  msg_complete *c = &m.body.complete;
  c->status = status;
  c->program = j->program;
  c->device = j->device;
  c->run = j->run;
  c->job_index = j->job_index;
  if (outputs) {
    c->outputs = *outputs;
    memset(outputs, 0, sizeof *outputs);
  }
  c->compile_ns = j->compile_ns;
  c->record_ns = j->record_ns;
  c->execute_ns = j->execute_ns;
  c->counts = j->counts;
  c->cache_hits = j->hits;
  c->cache_misses = j->misses;
  /* an error says what was undone before it left */
  c->text = status == SCHEDRUN_OK ? xstrdup(text ? text : "") : scheduler_with_teardown(text, teardown_in(j->state));
  c->t_submit = j->t_submit;
  c->t_compile = j->t_compile;
  c->t_record = j->t_record;
  c->t_execute = j->t_execute;
  c->t_done = now_ns();
  core_send_complete(self, s->core, j->client, &m);
  msg_free(&m);
  scheduler_retire(self, s, j);
}

/* ---- placement and dispatch ---- */

static void start_record(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss, job *j) {
  const prog_program *p = ps->p;
  ss->recording = true;
  j->state = JOB_RECORDING;
  s->active++;
  j->t_phase = j->t_record = now_ns();
  msg m;
  msg_init(&m, MSG_RECORD, j->id, ACTOR_SCHEDULER);
  msg_record *r = &m.body.record;
  r->program = j->program;
  r->device = (uint32_t)j->device;
  r->slot = j->slot;
  r->run = j->run;
  r->job_index = j->job_index;
  r->bindings.v = malloc((p->nbuffers ? p->nbuffers : 1) * sizeof(uint64_t));
  const msg_modules *mods = &ps->modules[s->dev_target[j->device]]; /* compiled for the device's target */
  assert(ps->usable & (1u << s->dev_target[j->device]));
  r->modules.v = calloc(mods->n ? mods->n : 1, sizeof(msg_module));
  int rc = r->bindings.v && r->modules.v ? SCHEDRUN_OK : SCHEDRUN_ENOMEM;
  if (rc == SCHEDRUN_OK) {
    memcpy(r->bindings.v, ss->bindings, p->nbuffers * sizeof(uint64_t));
    r->bindings.n = p->nbuffers;
    for (size_t i = 0; i < mods->n; i++) {
      r->modules.v[i].name = xstrdup(mods->v[i].name);
      r->modules.v[i].key = xstrdup(mods->v[i].key);
      r->modules.v[i].path = xstrdup(mods->v[i].path);
      r->modules.n++;
    }
    rc = actor_send(self, ACTOR_RECORD, &m);
  }
  msg_free(&m);
  if (rc) scheduler_complete(self, s, j, rc, "cannot send RECORD", NULL);
}

/* The EXECUTE of one job already counted as executing. */
static void send_execute(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss, job *j) {
  const prog_program *p = ps->p;
  assert(j->state == JOB_EXECUTING);
  batch_out(ss, &j, 1);
  msg x;
  msg_init(&x, MSG_EXECUTE, j->id, ACTOR_SCHEDULER);
  x.body.execute.program = j->program;
  x.body.execute.device = (uint32_t)j->device;
  x.body.execute.slot = j->slot;
  x.body.execute.sequence = ss->sequence;
  x.body.execute.keep = j->keep;
  x.body.execute.inputs = j->inputs; /* handed over: needed once */
  memset(&j->inputs, 0, sizeof j->inputs);
  x.body.execute.park = j->park; /* so are the hand-offs */
  x.body.execute.takes = j->takes;
  memset(&j->park, 0, sizeof j->park);
  memset(&j->takes, 0, sizeof j->takes);
  msg_execute *e = &x.body.execute;
  e->client = xstrdup(j->client);
  e->run = j->run;
  e->job_index = j->job_index;
  e->compile_ns = j->compile_ns;
  e->record_ns = j->record_ns;
  e->counts = j->counts;
  e->cache_hits = j->hits;
  e->cache_misses = j->misses;
  e->t_submit = j->t_submit;
  e->t_compile = j->t_compile;
  e->t_record = j->t_record;
  e->deadline = j->deadline;
  int rc = p ? SCHEDRUN_OK : SCHEDRUN_EINTERNAL;
  if (rc == SCHEDRUN_OK) {
    x.body.execute.bindings.v = malloc((p->nbuffers ? p->nbuffers : 1) * sizeof(uint64_t));
    if (!x.body.execute.bindings.v) rc = SCHEDRUN_ENOMEM;
  }
  if (rc == SCHEDRUN_OK) {
    memcpy(x.body.execute.bindings.v, ss->bindings, p->nbuffers * sizeof(uint64_t));
    x.body.execute.bindings.n = p->nbuffers;
    rc = core_send_execute(self, s->core, j->device, &x);
  }
  msg_free(&x);
  if (rc) scheduler_complete(self, s, j, rc, "cannot send EXECUTE", NULL);
}

void scheduler_start_execute(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss, job *j) {
  if (j->state != JOB_RECORDING) s->active++;
  j->state = JOB_EXECUTING;
  ss->inflight++;
  send_execute(self, s, ps, ss, j);
}

/* Whether j's RECORD could change anything: no recording yet, or a variable
 * the program reads has another value than the recording was made with. */
static bool needs_record(const scheduler_state *s, const prog_program *p, const slot_state *ss, const job *j) {
  if (s->core->record_always || !ss->recorded) return true;
  if ((p->uses & PROG_USES_JOB) && ss->last_job != j->job_index) return true;
  if ((p->uses & PROG_USES_RUN) && ss->last_run != j->run) return true;
  return false;
}

/* Sends one EXECUTE_MANY for jobs already counted as executing in ss; what
 * they carried as inputs goes with them. A batch that cannot be sent fails
 * its jobs. */
static void send_execute_many(actor_t *self, scheduler_state *s, const prog_program *p, slot_state *ss, job **batch,
                              size_t n) {
  assert(n > 0 && n <= EXECUTE_BATCH);
  batch_out(ss, batch, n);
  msg x;
  msg_init(&x, MSG_EXECUTE_MANY, batch[0]->id, ACTOR_SCHEDULER);
  msg_execute_many *e = &x.body.execute_many;
  e->program = batch[0]->program;
  e->device = (uint32_t)batch[0]->device;
  e->slot = batch[0]->slot;
  e->sequence = ss->sequence;
  e->client = xstrdup(batch[0]->client);
  e->nodes = ss->nodes;
  size_t ninputs = 0, npark = 0, ntakes = 0;
  for (size_t k = 0; k < n; k++) {
    ninputs += batch[k]->inputs.n;
    npark += batch[k]->park.n;
    ntakes += batch[k]->takes.n;
  }
  msg_u64s *cols[] = {&e->jobs, &e->runs, &e->job_indexes, &e->keeps, &e->t_submits, &e->deadlines};
  int rc = SCHEDRUN_OK;
  for (size_t c = 0; c < SCHEDRUN__ARRAY_LEN(cols); c++)
    if (!(cols[c]->v = malloc(n * sizeof(uint64_t)))) rc = SCHEDRUN_ENOMEM;
  e->bindings.v = malloc((p->nbuffers ? p->nbuffers : 1) * sizeof(uint64_t));
  e->input_jobs.v = malloc((ninputs ? ninputs : 1) * sizeof(uint64_t));
  e->inputs.v = calloc(ninputs ? ninputs : 1, sizeof(msg_output));
  if (!e->bindings.v || !e->input_jobs.v || !e->inputs.v) rc = SCHEDRUN_ENOMEM;
  /* hand-offs are copied: a job keeps its parcels (to free them if it
   * fails) until the message has left */
  e->park.v = malloc((npark ? npark : 1) * sizeof(uint64_t));
  e->park_jobs.v = malloc((npark ? npark : 1) * sizeof(uint64_t));
  e->takes.v = malloc((ntakes ? ntakes : 1) * sizeof(uint64_t));
  e->take_jobs.v = malloc((ntakes ? ntakes : 1) * sizeof(uint64_t));
  if (!e->park.v || !e->park_jobs.v || !e->takes.v || !e->take_jobs.v) rc = SCHEDRUN_ENOMEM;
  if (rc == SCHEDRUN_OK) {
    memcpy(e->bindings.v, ss->bindings, p->nbuffers * sizeof(uint64_t));
    e->bindings.n = p->nbuffers;
    for (size_t k = 0; k < n; k++) {
      const job *j = batch[k];
      /* one client per batch: jobs of one slot come from the library's one inbox */
      assert(!strcmp(j->client, e->client) && j->program == e->program && j->slot == e->slot);
      e->jobs.v[k] = j->id;
      e->runs.v[k] = j->run;
      e->job_indexes.v[k] = j->job_index;
      e->keeps.v[k] = j->keep;
      e->t_submits.v[k] = j->t_submit;
      e->deadlines.v[k] = j->deadline;
      for (size_t i = 0; i < j->inputs.n; i++) {
        e->input_jobs.v[e->inputs.n] = k;
        e->inputs.v[e->inputs.n++] = j->inputs.v[i]; /* handed over: needed once */
      }
      free(batch[k]->inputs.v);
      memset(&batch[k]->inputs, 0, sizeof batch[k]->inputs);
      for (size_t i = 0; i < j->park.n; i++) {
        e->park_jobs.v[e->park.n] = k;
        e->park.v[e->park.n++] = j->park.v[i];
      }
      for (size_t i = 0; i < j->takes.n; i++) {
        if (i % 3 == 0) e->take_jobs.v[e->take_jobs.n++] = k;
        e->takes.v[e->takes.n++] = j->takes.v[i];
      }
    }
    e->input_jobs.n = e->inputs.n;
    e->park_jobs.n = e->park.n;
    for (size_t c = 0; c < SCHEDRUN__ARRAY_LEN(cols); c++) cols[c]->n = n;
    rc = core_send_execute(self, s->core, batch[0]->device, &x);
  }
  for (size_t k = 0; rc == SCHEDRUN_OK && k < n; k++) {
    /* the execute actor owns the parcels now */
    free(batch[k]->park.v);
    free(batch[k]->takes.v);
    memset(&batch[k]->park, 0, sizeof batch[k]->park);
    memset(&batch[k]->takes, 0, sizeof batch[k]->takes);
  }
  msg_free(&x);
  if (rc) {
    /* the ids first: completing a job frees it */
    for (size_t k = 0; k < n; k++) {
      job *j = idmap_get(&s->jobs, batch[k]->id);
      if (j) scheduler_complete(self, s, j, rc, "cannot send EXECUTE_MANY", NULL);
    }
  }
}

/* Whether one more job may go out to the device now: a few EXECUTEs ahead
 * keep it busy; the rest wait here, where a shutdown or a deadline can still
 * reach them, and, batched, leave together. `open` says a batch is in hand
 * (joining it starts no new EXECUTE). A job that travels alone (its program
 * has host steps) cannot join a batch: up to BATCH_RING of them go out, the
 * batch in hand keeping its place in the ring, so that the device does not
 * wait for the scheduler between them. */
static bool room_out(const scheduler_state *s, const slot_state *ss, bool open, bool alone) {
  if (s->core->no_batching) return ss->inflight < EXECUTE_AHEAD_ALONE;
  if (alone) return ss->inflight < EXECUTE_AHEAD && ss->nbatches + (open ? 1u : 0u) < BATCH_RING;
  return ss->inflight < EXECUTE_AHEAD && (open || ss->nbatches < BATCHES_AHEAD);
}

/* Whether the jobs of program p travel in an EXECUTE of their own. */
static bool alone(const scheduler_state *s, const prog_program *p) {
  return s->core->no_batching || (p && p->nhosts);
}

/* Starts what can start, in order: jobs that change nothing go straight to
 * the device's execute actor, together in EXECUTE_MANYs (it runs them in
 * turn); a job that needs a RECORD waits until nothing of this slot is
 * executing, and holds up the ones behind it. */
static void dispatch_now(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss) {
  job *batch[EXECUTE_BATCH];
  size_t nb = 0;
  const prog_program *p = ps->p;
  job *j;
  while ((j = ss->queue.head) && !ss->recording) {
    if (j->deadline && now_ns() >= j->deadline) {
      scheduler_q_pop(&ss->queue);
      char why[160];
      snprintf(why, sizeof why, "job %llu (run %u, job %u) reached its deadline while it waited for %s",
               (unsigned long long)j->id, j->run, j->job_index,
               s->core->backend->ops->device_name(s->core->backend, j->device));
      scheduler_complete(self, s, j, SCHEDRUN_ETIMEOUT, why, NULL);
      continue;
    }
    if (p && needs_record(s, p, ss, j)) {
      if (ss->inflight) break; /* after the batch in hand, and what is out, has run */
      scheduler_q_pop(&ss->queue);
      start_record(self, s, ps, ss, j);
      break;
    }
    if (!j->record_only && !room_out(s, ss, nb > 0, alone(s, p))) break;
    scheduler_q_pop(&ss->queue);
    j->counts = (msg_counts){0, 0, ss->nodes}; /* reused as it is, without asking */
    ss->fast_reuses += ss->nodes;
    if (j->record_only) {
      scheduler_complete(self, s, j, SCHEDRUN_OK, NULL, NULL); /* its recording is there */
      continue;
    }
    if (!p) {
      scheduler_complete(self, s, j, SCHEDRUN_EINTERNAL, "the job's program is gone", NULL);
      continue;
    }
    if (alone(s, p)) {
      /* one EXECUTE per job (batches do not stop for host steps) */
      scheduler_start_execute(self, s, ps, ss, j);
      continue;
    }
    j->state = JOB_EXECUTING;
    s->active++;
    ss->inflight++;
    batch[nb++] = j;
    if (nb == EXECUTE_BATCH) {
      send_execute_many(self, s, p, ss, batch, nb);
      nb = 0;
    }
  }
  /* a batch of one (a chain's next step, a lone job) as a plain EXECUTE:
   * fewer values to pack and unpack than a batch's columns */
  if (nb == 1) send_execute(self, s, ps, ss, batch[0]);
  else if (nb) send_execute_many(self, s, p, ss, batch, nb);
}

void scheduler_dispatch_slot(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss) {
  if (ss->dirty) return;
  if (s->ndirty == s->dirty_cap) {
    size_t cap = s->dirty_cap ? 2 * s->dirty_cap : 16;
    dirty_slot *d = realloc(s->dirty, cap * sizeof *d);
    if (!d) return; /* the slot's next event dispatches it */
    s->dirty = d;
    s->dirty_cap = cap;
  }
  /* noted by key: the handler may free the slot (a release) before the flush */
  assert(hmap_get(&ps->slots, &ss->key) == ss);
  s->dirty[s->ndirty++] = (dirty_slot){ps->id, ss->key};
  ss->dirty = true;
  if (!s->defer) scheduler_flush(self, s);
}

void scheduler_flush(actor_t *self, scheduler_state *s) {
  bool was = s->defer;
  s->defer = true; /* what dispatching makes startable is noted, not recursed into */
  while (s->ndirty) {
    dirty_slot d = s->dirty[--s->ndirty];
    prog_state *ps = scheduler_prog_get(s, d.program, false);
    slot_state *ss = ps ? hmap_get(&ps->slots, &d.key) : NULL;
    if (!ss) continue;
    ss->dirty = false;
    dispatch_now(self, s, ps, ss);
  }
  s->defer = was;
}

void scheduler_reply_simple(actor_t *self, const char *to, int type, uint64_t job_id, uint64_t program) {
  msg r;
  msg_init(&r, type, job_id, ACTOR_SCHEDULER);
  if (type == MSG_RELEASE) r.body.release.program = program;
  actor_send(self, to, &r);
  msg_free(&r);
}

/* Frees the program's buffers and asks the record actor to drop its
 * recordings and modules; its answer finishes the release. */
void scheduler_finish_release(actor_t *self, scheduler_state *s, prog_state *ps) {
  if (ps->release_sent) return;
  ps->release_sent = true;
  scheduler_free_slots(s, ps);
  hmap_init(&ps->slots, sizeof(slot_key));
  msg f;
  msg_init(&f, MSG_RELEASE, ps->release_job, ACTOR_SCHEDULER);
  f.body.release.program = ps->id;
  if (actor_send(self, ACTOR_RECORD, &f) == SCHEDRUN_OK) s->releases_out++;
  msg_free(&f);
}
