/*
 * The scheduler actor: owns the jobs and their state machine, and places
 * them on devices.
 *
 *   SUBMIT -> (COMPILE -> COMPILED, once per program) -> placed on a device
 *          -> RECORD -> RECORDED -> EXECUTE -> EXECUTED -> COMPLETE
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actor.h"
#include "actors/core.h"
#include "actors/exec_ctx_key.h"

#define MAX_SLOTS 64
#define EXECUTE_AHEAD 4 /* EXECUTEs out per execution context */

enum { JOB_COMPILING, JOB_PLACED_WAITING, JOB_RECORDING, JOB_EXECUTING };

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
  msg_counts counts;
  uint32_t hits, misses;
  uint64_t sequence;
  uint64_t deadline; /* CLOCK_MONOTONIC ns; 0: none */
  struct job *next;  /* in a wait queue */
} job;

typedef struct job_queue {
  job *head, *tail;
} job_queue;

/* One execution context {program, device, slot}: its buffers, what its
 * recording was made for, and the jobs waiting for it. Jobs of one slot run
 * on one device, whose execute actor takes them one at a time, so they never
 * overlap; what must not happen is a RECORD while EXECUTEs are out, since it
 * may update the sequence they replay. */
typedef struct slot_state {
  uint64_t *bindings; /* one device address per buffer; NULL until allocated */
  bool recording;     /* a RECORD is out */
  uint32_t inflight;  /* EXECUTEs out */
  bool recorded;      /* the record actor holds a recording made for: */
  uint32_t last_job, last_run;
  uint64_t sequence;
  uint32_t nodes;
  uint64_t fast_reuses; /* nodes reused without a RECORD, over the slot's life */
  job_queue queue;
} slot_state;

enum { COMPILE_NONE, COMPILE_PENDING, COMPILE_READY };

typedef struct prog_state {
  uint64_t id;
  int compile;
  msg_modules modules;
  job_queue waiting; /* for the compile */
  hmap slots;        /* {device, slot} -> slot_state* */
  uint32_t jobs;     /* not yet complete */
  char release_to[32];
  uint64_t release_job;
  bool releasing, release_sent;
} prog_state;

typedef struct slot_key {
  uint32_t device, slot;
} slot_key;

struct scheduler_state {
  schedrun_core *core;
  hmap jobs;  /* id -> job* */
  hmap progs; /* id -> prog_state* */
  uint32_t *load;
  size_t active; /* recording or executing */
  bool closing;
  char close_to[32];
  uint64_t close_job;
};

static void free_outputs(msg_outputs *o) {
  for (size_t i = 0; i < o->n; i++) free(o->v[i].data.data);
  free(o->v);
  memset(o, 0, sizeof *o);
}

static void job_free(job *j) {
  if (!j) return;
  free_outputs(&j->inputs);
  free(j);
}

static void q_push(job_queue *q, job *j) {
  j->next = NULL;
  if (q->tail) q->tail->next = j;
  else q->head = j;
  q->tail = j;
}

static job *q_pop(job_queue *q) {
  job *j = q->head;
  if (j) {
    q->head = j->next;
    if (!q->head) q->tail = NULL;
    j->next = NULL;
  }
  return j;
}

scheduler_state *scheduler_state_new(schedrun_core *core) {
  scheduler_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->core = core;
  s->load = calloc((size_t)core->ndevices, sizeof *s->load);
  if (!s->load) {
    free(s);
    return NULL;
  }
  hmap_init(&s->jobs, sizeof(uint64_t));
  hmap_init(&s->progs, sizeof(uint64_t));
  return s;
}

static void free_modules(msg_modules *mods) {
  for (size_t i = 0; i < mods->n; i++) {
    free(mods->v[i].name);
    free(mods->v[i].key);
    free(mods->v[i].path);
  }
  free(mods->v);
  memset(mods, 0, sizeof *mods);
}

static void free_slots(scheduler_state *s, prog_state *ps) {
  const prog_program *p = core_program(s->core, ps->id);
  size_t pos = 0;
  const void *k;
  void *v;
  while (hmap_next(&ps->slots, &pos, &k, &v)) {
    slot_state *ss = v;
    const slot_key *sk = k;
    for (uint32_t b = 0; ss->bindings && p && b < p->nbuffers; b++)
      if (ss->bindings[b]) s->core->backend->ops->mem_free(s->core->backend, (int)sk->device, ss->bindings[b]);
    free(ss->bindings);
    free(ss);
  }
  hmap_destroy(&ps->slots);
}

static void prog_state_free(scheduler_state *s, prog_state *ps) {
  free_slots(s, ps);
  free_modules(&ps->modules);
  free(ps);
}

void scheduler_state_free(scheduler_state *s) {
  if (!s) return;
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->jobs, &pos, NULL, &v)) job_free(v);
  hmap_destroy(&s->jobs);
  pos = 0;
  while (hmap_next(&s->progs, &pos, NULL, &v)) prog_state_free(s, v);
  hmap_destroy(&s->progs);
  free(s->load);
  free(s);
}

static prog_state *prog_get(scheduler_state *s, uint64_t id, bool create) {
  prog_state *ps = hmap_get(&s->progs, &id);
  if (ps || !create) return ps;
  ps = calloc(1, sizeof *ps);
  if (!ps) return NULL;
  ps->id = id;
  hmap_init(&ps->slots, sizeof(slot_key));
  if (hmap_put(&s->progs, &id, ps) != 0) {
    free(ps);
    return NULL;
  }
  return ps;
}

/* ---- completion ---- */

static void dispatch_slot(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss);

static void finish_release(actor_t *self, scheduler_state *s, prog_state *ps);

/* Forgets a finished job: the slot, the device's load, the program's count. */
static void retire(actor_t *self, scheduler_state *s, job *j) {
  prog_state *ps = prog_get(s, j->program, false);
  if (ps && ps->jobs) ps->jobs--;
  if (j->device >= 0 && s->load[j->device]) s->load[j->device]--;
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
    }
  }
  hmap_remove(&s->jobs, &j->id);
  job_free(j);
  if (ss) dispatch_slot(self, s, ps, ss);
  if (ps && ps->releasing && ps->jobs == 0) finish_release(self, s, ps);
}

/* Sends COMPLETE for j (taking outputs, if any) and forgets the job. */
static void complete(actor_t *self, scheduler_state *s, job *j, int status, const char *text,
                     msg_outputs *outputs) {
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
  c->text = xstrdup(text ? text : "");
  c->t_submit = j->t_submit;
  c->t_compile = j->t_compile;
  c->t_record = j->t_record;
  c->t_execute = j->t_execute;
  c->t_done = now_ns();
  actor_send(self, j->client, &m);
  msg_free(&m);
  retire(self, s, j);
}

/* ---- placement and dispatch ---- */

static int alloc_slot(scheduler_state *s, const prog_program *p, int device, slot_state *ss,
                      schedrun_error_t *err) {
  ss->bindings = calloc(p->nbuffers ? p->nbuffers : 1, sizeof(uint64_t));
  if (!ss->bindings) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    uint64_t bytes = p->buffers[b].count * prog_type_size(p->buffers[b].type);
    int rc = s->core->backend->ops->mem_alloc(s->core->backend, device, bytes, &ss->bindings[b], err);
    if (rc) {
      for (uint32_t i = 0; i < b; i++) s->core->backend->ops->mem_free(s->core->backend, device, ss->bindings[i]);
      free(ss->bindings);
      ss->bindings = NULL;
      return rc;
    }
  }
  return SCHEDRUN_OK;
}

static void start_record(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss, job *j) {
  const prog_program *p = core_program(s->core, j->program);
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
  r->modules.v = calloc(ps->modules.n ? ps->modules.n : 1, sizeof(msg_module));
  int rc = r->bindings.v && r->modules.v ? SCHEDRUN_OK : SCHEDRUN_ENOMEM;
  if (rc == SCHEDRUN_OK) {
    memcpy(r->bindings.v, ss->bindings, p->nbuffers * sizeof(uint64_t));
    r->bindings.n = p->nbuffers;
    for (size_t i = 0; i < ps->modules.n; i++) {
      r->modules.v[i].name = xstrdup(ps->modules.v[i].name);
      r->modules.v[i].key = xstrdup(ps->modules.v[i].key);
      r->modules.v[i].path = xstrdup(ps->modules.v[i].path);
      r->modules.n++;
    }
    rc = actor_send(self, ACTOR_RECORD, &m);
  }
  msg_free(&m);
  if (rc) complete(self, s, j, rc, "cannot send RECORD", NULL);
}

static void start_execute(actor_t *self, scheduler_state *s, slot_state *ss, job *j) {
  const prog_program *p = core_program(s->core, j->program);
  if (j->state != JOB_RECORDING) s->active++;
  j->state = JOB_EXECUTING;
  ss->inflight++;
  msg x;
  msg_init(&x, MSG_EXECUTE, j->id, ACTOR_SCHEDULER);
  x.body.execute.program = j->program;
  x.body.execute.device = (uint32_t)j->device;
  x.body.execute.slot = j->slot;
  x.body.execute.sequence = ss->sequence;
  x.body.execute.keep = j->keep;
  x.body.execute.inputs = j->inputs; /* handed over: needed once */
  memset(&j->inputs, 0, sizeof j->inputs);
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
    char to[32];
    snprintf(to, sizeof to, ACTOR_EXECUTE_FMT, j->device);
    rc = actor_send(self, to, &x);
  }
  msg_free(&x);
  if (rc) complete(self, s, j, rc, "cannot send EXECUTE", NULL);
}

/* Whether j's RECORD could change anything: no recording yet, or a variable
 * the program reads has another value than the recording was made with. */
static bool needs_record(const scheduler_state *s, const prog_program *p, const slot_state *ss, const job *j) {
  if (s->core->record_always || !ss->recorded) return true;
  if ((p->uses & PROG_USES_JOB) && ss->last_job != j->job_index) return true;
  if ((p->uses & PROG_USES_RUN) && ss->last_run != j->run) return true;
  return false;
}

/* Starts what can start, in order: jobs that change nothing go straight to
 * EXECUTE (the device's actor runs them in turn), a job that needs a RECORD
 * waits until nothing of this slot is executing, and holds up the ones
 * behind it. */
static void dispatch_slot(actor_t *self, scheduler_state *s, prog_state *ps, slot_state *ss) {
  job *j;
  while ((j = ss->queue.head) && !ss->recording) {
    const prog_program *p = core_program(s->core, j->program);
    if (j->deadline && now_ns() >= j->deadline) {
      q_pop(&ss->queue);
      char why[160];
      snprintf(why, sizeof why, "job %llu (run %u, job %u) reached its deadline while it waited for %s",
               (unsigned long long)j->id, j->run, j->job_index,
               s->core->backend->ops->device_name(s->core->backend, j->device));
      complete(self, s, j, SCHEDRUN_ETIMEOUT, why, NULL);
      continue;
    }
    if (p && needs_record(s, p, ss, j)) {
      if (ss->inflight) return;
      q_pop(&ss->queue);
      start_record(self, s, ps, ss, j);
      return;
    }
    /* a few EXECUTEs ahead keep the device busy; the rest wait here, where a
     * shutdown or a deadline can still reach them */
    if (ss->inflight >= EXECUTE_AHEAD) return;
    q_pop(&ss->queue);
    j->counts = (msg_counts){0, 0, ss->nodes}; /* reused as it is, without asking */
    ss->fast_reuses += ss->nodes;
    start_execute(self, s, ss, j);
  }
}

/* A pinned job goes where it is pinned. Otherwise the least loaded device,
 * except that a device already holding this program's recording for the
 * job's slot is preferred while it is at most one job busier: warm recorded
 * state is worth a little imbalance, not an idle device. */
static int pick_device(scheduler_state *s, prog_state *ps, const job *j) {
  gpu_backend *be = s->core->backend;
  if (j->pin >= 0) return be->ops->device_lost(be, j->pin) ? -1 : j->pin;
  int least = -1, warm = -1;
  for (int d = 0; d < s->core->ndevices; d++) {
    if (be->ops->device_lost(be, d)) continue; /* lost devices take no more jobs */
    if (least < 0 || s->load[d] < s->load[least]) least = d;
    slot_key sk = {(uint32_t)d, j->slot};
    if (hmap_get(&ps->slots, &sk) && (warm < 0 || s->load[d] < s->load[warm])) warm = d;
  }
  if (warm >= 0 && s->load[warm] <= s->load[least] + 1) return warm;
  return least;
}

static void place(actor_t *self, scheduler_state *s, prog_state *ps, job *j) {
  const prog_program *p = core_program(s->core, j->program);
  j->device = pick_device(s, ps, j);
  if (j->device < 0) {
    gpu_backend *be = s->core->backend;
    int d = j->pin >= 0 ? j->pin : 0;
    char why[640];
    snprintf(why, sizeof why, "%s: %s", j->pin >= 0 ? "the job's device is lost" : "every device is lost",
             be->ops->device_lost(be, d) ? be->ops->device_lost(be, d) : "?");
    complete(self, s, j, SCHEDRUN_ELOST, why, NULL);
    return;
  }
  s->load[j->device]++;
  j->state = JOB_PLACED_WAITING;
  slot_key sk = {(uint32_t)j->device, j->slot};
  slot_state *ss = hmap_get(&ps->slots, &sk);
  schedrun_error_t err = {0};
  if (!ss) {
    ss = calloc(1, sizeof *ss);
    if (!ss || hmap_put(&ps->slots, &sk, ss) != 0) {
      free(ss);
      complete(self, s, j, SCHEDRUN_ENOMEM, "out of memory", NULL);
      return;
    }
  }
  if (!ss->bindings && alloc_slot(s, p, j->device, ss, &err) != SCHEDRUN_OK) {
    complete(self, s, j, err.code, err.message, NULL);
    schedrun_error_clear(&err);
    return;
  }
  q_push(&ss->queue, j);
  dispatch_slot(self, s, ps, ss);
}

/* ---- handlers ---- */

static int send_compile(actor_t *self, scheduler_state *s, const prog_program *p, job *j) {
  gpu_backend *be = s->core->backend;
  msg m;
  msg_init(&m, MSG_COMPILE, j->id, ACTOR_SCHEDULER);
  msg_compile *c = &m.body.compile;
  c->program = j->program;
  c->target = xstrdup(be->ops->target(be, 0));
  c->arch = xstrdup(be->ops->arch(be, 0));
  c->kernels.v = calloc(p->nkernels ? p->nkernels : 1, sizeof(msg_kernel));
  int rc = c->kernels.v ? SCHEDRUN_OK : SCHEDRUN_ENOMEM;
  for (uint32_t i = 0; rc == SCHEDRUN_OK && i < p->nkernels; i++) {
    const prog_kernel *k = &p->kernels[i];
    msg_kernel *mk = &c->kernels.v[c->kernels.n++];
    char where[512];
    snprintf(where, sizeof where, "%s:%d:%d", p->path, k->loc.line, k->loc.col);
    mk->name = xstrdup(k->name);
    mk->entry = xstrdup(k->entry);
    mk->params = xstrdup(k->params_text ? k->params_text : "");
    mk->source = xstrdup(k->source ? k->source : "");
    mk->where = xstrdup(where);
    mk->source_file = xstrdup(k->source_file ? k->source_file : p->path);
    mk->first_line = k->first_line;
  }
  if (rc == SCHEDRUN_OK) rc = actor_send(self, ACTOR_COMPILE, &m);
  msg_free(&m);
  return rc;
}

static bool inputs_fit(const prog_program *p, const msg_outputs *in) {
  for (size_t i = 0; i < in->n; i++) {
    if (in->v[i].buffer >= p->nbuffers) return false;
    const prog_buffer *b = &p->buffers[in->v[i].buffer];
    if (in->v[i].data.len != b->count * prog_type_size(b->type)) return false;
  }
  return true;
}

static void handle_submit(actor_t *self, scheduler_state *s, msg *m) {
  const msg_submit *sb = &m->body.submit;
  job *j = calloc(1, sizeof *j);
  if (!j) return; /* the client's wait times out: nothing can be said without memory */
  j->id = m->job;
  j->program = sb->program;
  j->run = sb->run;
  j->job_index = sb->job_index;
  j->slot = sb->slot;
  j->keep = sb->keep;
  j->deadline = sb->deadline;
  j->device = -1;
  j->t_submit = now_ns();
  j->inputs = sb->inputs;
  memset(&m->body.submit.inputs, 0, sizeof m->body.submit.inputs);
  snprintf(j->client, sizeof j->client, "%s", m->from);
  const prog_program *p = core_program(s->core, sb->program);
  prog_state *ps = NULL;
  const char *bad = NULL;
  if (hmap_get(&s->jobs, &j->id)) bad = "a job with this id is already in flight";
  else if (!p) bad = "no such program";
  else if (!inputs_fit(p, &j->inputs)) bad = "inputs do not match the program's buffers";
  else if (sb->slot >= MAX_SLOTS) bad = "binding slot out of range (at most 64)";
  else if (sb->device >= s->core->ndevices || sb->device < -1) bad = "no such device";
  else if (s->closing) bad = "the scheduler is shutting down";
  else if (!(ps = prog_get(s, sb->program, true)) || hmap_put(&s->jobs, &j->id, j) != 0) bad = "out of memory";
  else if (ps->releasing) bad = "the program is being released";
  if (bad) {
    int code = s->closing ? SCHEDRUN_ECLOSED : SCHEDRUN_EINVAL;
    if (hmap_get(&s->jobs, &j->id) == j) hmap_remove(&s->jobs, &j->id);
    job tmp = *j;
    job_free(j);
    tmp.state = JOB_COMPILING;
    /* not registered: answer directly */
    msg r;
    msg_init(&r, MSG_COMPLETE, tmp.id, ACTOR_SCHEDULER);
    r.body.complete.status = code;
    r.body.complete.program = tmp.program;
    r.body.complete.device = -1;
    r.body.complete.run = tmp.run;
    r.body.complete.job_index = tmp.job_index;
    r.body.complete.text = xstrdup(bad);
    actor_send(self, tmp.client, &r);
    msg_free(&r);
    return;
  }
  j->pin = sb->device;
  ps->jobs++;
  if (ps->compile == COMPILE_READY) {
    place(self, s, ps, j);
    return;
  }
  j->state = JOB_COMPILING;
  q_push(&ps->waiting, j);
  if (ps->compile == COMPILE_NONE) {
    ps->compile = COMPILE_PENDING;
    j->t_compile = now_ns();
    if (send_compile(self, s, p, j) != SCHEDRUN_OK) {
      ps->compile = COMPILE_NONE;
      job *w;
      while ((w = q_pop(&ps->waiting))) complete(self, s, w, SCHEDRUN_EINTERNAL, "cannot send COMPILE", NULL);
    }
  }
}

static void release_waiting(actor_t *self, scheduler_state *s, prog_state *ps) {
  job *j;
  while ((j = q_pop(&ps->waiting))) place(self, s, ps, j);
}

static void handle_compiled(actor_t *self, scheduler_state *s, msg *m) {
  prog_state *ps = prog_get(s, m->body.compiled.program, false);
  if (!ps || ps->compile != COMPILE_PENDING) return;
  free_modules(&ps->modules);
  ps->modules = m->body.compiled.modules;
  memset(&m->body.compiled.modules, 0, sizeof m->body.compiled.modules);
  ps->compile = COMPILE_READY;
  if (s->closing) {
    /* finished before the CANCEL reached it: the jobs still do not start */
    job *w;
    while ((w = q_pop(&ps->waiting))) complete(self, s, w, SCHEDRUN_ECLOSED, "the scheduler shut down before the job started", NULL);
    return;
  }
  /* the compile is charged to the job that asked for it, once */
  job *trigger = hmap_get(&s->jobs, &m->job);
  if (trigger) {
    trigger->compile_ns = now_ns() - trigger->t_submit;
    trigger->hits = m->body.compiled.hits;
    trigger->misses = m->body.compiled.misses;
  }
  release_waiting(self, s, ps);
}

/* A device was lost: the jobs waiting in its slots' queues go to the other
 * devices (or fail, when they are pinned to it or none is left). */
static void replace_jobs_of(actor_t *self, scheduler_state *s, int device) {
  size_t n = 0, cap = 0;
  job **moving = NULL;
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->progs, &pos, NULL, &v)) {
    prog_state *ps = v;
    size_t spos = 0;
    const void *k;
    void *sv;
    while (hmap_next(&ps->slots, &spos, &k, &sv)) {
      if (((const slot_key *)k)->device != (uint32_t)device) continue;
      job *j;
      while ((j = q_pop(&((slot_state *)sv)->queue))) {
        if (n == cap) {
          cap = cap ? 2 * cap : 16;
          job **m = realloc(moving, cap * sizeof *m);
          if (!m) {
            complete(self, s, j, SCHEDRUN_ENOMEM, "out of memory", NULL);
            cap = n;
            continue;
          }
          moving = m;
        }
        moving[n++] = j;
      }
    }
  }
  /* placed after the walk: placing adds slots to the maps walked above */
  for (size_t i = 0; i < n; i++) {
    job *j = moving[i];
    if (s->load[device]) s->load[device]--;
    prog_state *ps = prog_get(s, j->program, false);
    if (ps) place(self, s, ps, j);
    else complete(self, s, j, SCHEDRUN_EINTERNAL, "the job's program is gone", NULL);
  }
  free(moving);
}

static void handle_error(actor_t *self, scheduler_state *s, msg *m) {
  const msg_error *e = &m->body.error;
  job *j = hmap_get(&s->jobs, &m->job);
  if (!j) return;
  strbuf text;
  sb_init(&text);
  sb_adds(&text, e->text ? e->text : "");
  /* the client learns what was torn down before the error reached it */
  for (size_t i = 0; i < e->teardown.n; i++) sb_addf(&text, "%s%s", i ? "; " : "\nteardown: ", e->teardown.v[i]);
  if (j->state == JOB_COMPILING) {
    /* the compile of this job's program failed: every job waiting for it fails */
    prog_state *ps = prog_get(s, j->program, false);
    if (ps) {
      ps->compile = COMPILE_NONE;
      job *w;
      while ((w = q_pop(&ps->waiting))) complete(self, s, w, e->code, text.data, NULL);
    }
  } else {
    int device = j->device;
    complete(self, s, j, e->code, text.data, NULL);
    gpu_backend *be = s->core->backend;
    if (device >= 0 && be->ops->device_lost(be, device)) replace_jobs_of(self, s, device);
  }
  sb_free(&text);
}

static void handle_recorded(actor_t *self, scheduler_state *s, msg *m) {
  job *j = hmap_get(&s->jobs, &m->job);
  if (!j || j->state != JOB_RECORDING) return;
  uint64_t now = now_ns();
  j->record_ns = now - j->t_phase;
  j->t_phase = now;
  j->counts = m->body.recorded.counts;
  prog_state *ps = prog_get(s, j->program, false);
  slot_key sk = {(uint32_t)j->device, j->slot};
  slot_state *ss = ps ? hmap_get(&ps->slots, &sk) : NULL;
  if (!ss) {
    complete(self, s, j, SCHEDRUN_EINTERNAL, "RECORDED for a slot that is gone", NULL);
    return;
  }
  ss->recording = false;
  ss->recorded = true;
  ss->last_job = j->job_index;
  ss->last_run = j->run;
  ss->sequence = m->body.recorded.sequence;
  ss->nodes = j->counts.created + j->counts.updated + j->counts.reused;
  start_execute(self, s, ss, j);
  dispatch_slot(self, s, ps, ss);
}

static void handle_executed(actor_t *self, scheduler_state *s, msg *m) {
  job *j = hmap_get(&s->jobs, &m->job);
  if (!j || j->state != JOB_EXECUTING) return;
  /* the execute actor has sent the client its COMPLETE already */
  retire(self, s, j);
}

static void reply_simple(actor_t *self, const char *to, int type, uint64_t job_id, uint64_t program) {
  msg r;
  msg_init(&r, type, job_id, ACTOR_SCHEDULER);
  if (type == MSG_RELEASE) r.body.release.program = program;
  actor_send(self, to, &r);
  msg_free(&r);
}

/* Frees the program's buffers and asks the record actor to drop its
 * recordings and modules; its answer finishes the release. */
static void finish_release(actor_t *self, scheduler_state *s, prog_state *ps) {
  if (ps->release_sent) return;
  ps->release_sent = true;
  free_slots(s, ps);
  hmap_init(&ps->slots, sizeof(slot_key));
  msg f;
  msg_init(&f, MSG_RELEASE, ps->release_job, ACTOR_SCHEDULER);
  f.body.release.program = ps->id;
  actor_send(self, ACTOR_RECORD, &f);
  msg_free(&f);
}

/* RELEASE from the client: the program's jobs finish first (new ones are
 * refused), then its buffers and recordings go, then the client hears back
 * and frees the program itself. */
static void handle_release(actor_t *self, scheduler_state *s, msg *m) {
  uint64_t id = m->body.release.program;
  prog_state *ps = prog_get(s, id, false);
  if (!strcmp(m->from, ACTOR_RECORD)) {
    /* the record actor has dropped its recordings: finish */
    if (!ps || !ps->releasing) return;
    char to[32];
    snprintf(to, sizeof to, "%s", ps->release_to);
    uint64_t job_id = ps->release_job;
    hmap_remove(&s->progs, &id);
    prog_state_free(s, ps);
    reply_simple(self, to, MSG_RELEASE, job_id, id);
    return;
  }
  if (!ps) ps = prog_get(s, id, true); /* nothing ran: the record actor is asked anyway */
  if (!ps) {
    actor_send_error(self, m->from, m->job, SCHEDRUN_ENOMEM, "out of memory", NULL, 0);
    return;
  }
  if (ps->releasing) return; /* asked twice: one answer */
  ps->releasing = true;
  snprintf(ps->release_to, sizeof ps->release_to, "%s", m->from);
  ps->release_job = m->job;
  if (ps->jobs == 0) finish_release(self, s, ps);
}

static int scheduler_handle(actor_t *self, msg *m) {
  scheduler_state *s = actor_state(self);
  switch (m->type) {
  case MSG_SUBMIT: handle_submit(self, s, m); break;
  case MSG_COMPILED: handle_compiled(self, s, m); break;
  case MSG_RECORDED: handle_recorded(self, s, m); break;
  case MSG_EXECUTED: handle_executed(self, s, m); break;
  case MSG_ERROR: handle_error(self, s, m); break;
  case MSG_RELEASE: handle_release(self, s, m); break;
  case MSG_TERM: {
    s->closing = true;
    snprintf(s->close_to, sizeof s->close_to, "%s", m->from);
    s->close_job = m->job;
    /* fail what is placed but not started; what is recording or executing
     * finishes. Jobs waiting for a compile complete when the compile actor
     * has torn its sessions down (ERROR, ECLOSED): teardown first. */
    size_t pos = 0;
    void *v;
    job **pending = calloc(s->jobs.count + 1, sizeof *pending);
    size_t n = 0;
    bool compiling = false;
    while (pending && hmap_next(&s->jobs, &pos, NULL, &v)) {
      if (((job *)v)->state == JOB_PLACED_WAITING) pending[n++] = v;
      if (((job *)v)->state == JOB_COMPILING) compiling = true;
    }
    pos = 0;
    while (hmap_next(&s->progs, &pos, NULL, &v)) {
      size_t sp = 0;
      void *sv;
      while (hmap_next(&((prog_state *)v)->slots, &sp, NULL, &sv)) ((slot_state *)sv)->queue = (job_queue){0};
    }
    for (size_t i = 0; i < n; i++) complete(self, s, pending[i], SCHEDRUN_ECLOSED, "the scheduler shut down before the job started", NULL);
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
    /* {program, device, slot} asks about one execution context */
    uint64_t program = 0;
    slot_key sk = {0, 0};
    for (size_t i = 0; i < m->body.status.items.n; i++) {
      const msg_stat *it = &m->body.status.items.v[i];
      if (!strcmp(it->name, "program")) program = (uint64_t)it->value;
      else if (!strcmp(it->name, "device")) sk.device = (uint32_t)it->value;
      else if (!strcmp(it->name, "slot")) sk.slot = (uint32_t)it->value;
    }
    prog_state *ps = program ? prog_get(s, program, false) : NULL;
    slot_state *ss = ps ? hmap_get(&ps->slots, &sk) : NULL;
    msg r;
    msg_init(&r, MSG_STATUS, m->job, ACTOR_SCHEDULER);
    r.body.status.items.v = calloc(3, sizeof(msg_stat));
    if (r.body.status.items.v) {
      r.body.status.items.v[0] = (msg_stat){xstrdup("jobs_in_flight"), (int64_t)s->jobs.count};
      r.body.status.items.v[1] = (msg_stat){xstrdup("programs"), (int64_t)s->progs.count};
      r.body.status.items.v[2] = (msg_stat){xstrdup("reused_without_record"), ss ? (int64_t)ss->fast_reuses : 0};
      r.body.status.items.n = 3;
    }
    actor_send(self, m->from, &r);
    msg_free(&r);
    break;
  }
  default: break;
  }
  if (s->closing && s->jobs.count == 0) {
    reply_simple(self, s->close_to, MSG_TERM, s->close_job, 0);
    return ACTOR_STOP;
  }
  return ACTOR_CONTINUE;
}

const actor_def scheduler_actor_def = {NULL, scheduler_handle, NULL};
