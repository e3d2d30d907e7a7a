/*
 * What the library does with a job's completion: the result made from its
 * COMPLETE (verified against `expect`), handed to its callback or filed for
 * the waits, and passed on to the jobs after it (lib/api_deps.c). The
 * completion thread (lib/api_open.c) and waiting threads that take
 * completions from the queue themselves both come here.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "lib/deps.h"

/* Frees released programs that no pending job refers to any more. Called by
 * the completion thread, with the lock held. */
static void free_doomed(schedrun_t *s) {
  for (size_t i = 0; i < s->ndoomed;) {
    bool used = false;
    size_t pos = 0;
    void *v;
    while (!used && idmap_next(&s->jobs, &pos, NULL, &v))
      used = ((pending_job *)v)->prog == s->doomed[i] && !((pending_job *)v)->result;
    if (used) {
      i++;
      continue;
    }
    pthread_mutex_lock(&s->core.reg_lock);
    hmap_remove(&s->core.programs, &s->doomed_ids[i]);
    pthread_mutex_unlock(&s->core.reg_lock);
    prog_free(s->doomed[i]);
    s->doomed[i] = s->doomed[s->ndoomed - 1];
    s->doomed_ids[i] = s->doomed_ids[s->ndoomed - 1];
    s->ndoomed--;
  }
}

/* The actors have dropped what they held for a program: free it once no
 * COMPLETE still on its way needs it (one may come by another pipe). */
void api_released(schedrun_t *s, uint64_t id) {
  pthread_mutex_lock(&s->core.reg_lock);
  prog_program *p = hmap_get(&s->core.programs, &id);
  pthread_mutex_unlock(&s->core.reg_lock);
  if (!p) return;
  pthread_mutex_lock(&s->lock);
  if (s->ndoomed == s->doomed_cap) {
    size_t cap = s->doomed_cap ? 2 * s->doomed_cap : 8;
    prog_program **d = realloc(s->doomed, cap * sizeof *d);
    if (d) s->doomed = d;
    uint64_t *di = realloc(s->doomed_ids, cap * sizeof *di);
    if (di) s->doomed_ids = di;
    if (d && di) s->doomed_cap = cap;
  }
  if (s->ndoomed < s->doomed_cap) {
    s->doomed[s->ndoomed] = p;
    s->doomed_ids[s->ndoomed++] = id;
  } /* else it stays registered and is freed at close */
  free_doomed(s);
  pthread_mutex_unlock(&s->lock);
}

/* Leaves a callback for the completion thread (lock held); false without
 * memory. */
static bool defer_callback(schedrun_t *s, pending_job *pj, schedrun_job_result_t *r) {
  if (s->ndeferred == s->deferred_cap) {
    size_t cap = s->deferred_cap ? 2 * s->deferred_cap : 16;
    pending_job **d = realloc(s->deferred, cap * sizeof *d);
    if (d) s->deferred = d;
    schedrun_job_result_t **dr = realloc(s->deferred_results, cap * sizeof *dr);
    if (dr) s->deferred_results = dr;
    if (!d || !dr) return false;
    s->deferred_cap = cap;
  }
  s->deferred[s->ndeferred] = pj;
  s->deferred_results[s->ndeferred++] = r;
  return true;
}

/* Runs n jobs' callbacks, in order, outside the lock (held on entry and on
 * return), then counts the jobs complete: a job completes only once its
 * callback has returned (schedrun_wait_all means it). */
static void run_callbacks(schedrun_t *s, pending_job **pjs, schedrun_job_result_t **rs, size_t n) {
  pthread_mutex_unlock(&s->lock);
  for (size_t k = 0; k < n; k++) {
    pjs[k]->cb(pjs[k]->id, rs[k], pjs[k]->user);
    free(pjs[k]);
  }
  pthread_mutex_lock(&s->lock);
  assert(s->incomplete >= n);
  s->incomplete -= n;
  s->completed += n;
}

/* Files one result (lock held): to its callback (run later, in order, from
 * cbs) or for waiters; true when the job counts as complete now. */
static bool file_one(schedrun_t *s, pending_job *pj, schedrun_job_result_t *r, bool on_completer, pending_job **cbs,
                     schedrun_job_result_t **cbrs, size_t *ncb) {
  api_unbind(s, pj); /* it has written its bound memory back: the memory is the caller's again */
  if (pj->cb) {
    idmap_remove(&s->jobs, pj->id);
    /* callbacks run on the completion thread, which is rung after */
    if (!on_completer && defer_callback(s, pj, r)) return false;
    /* no memory to defer it: it runs here, as a last resort */
    cbs[*ncb] = pj; /* callbacks run after, in order, outside the lock */
    cbrs[(*ncb)++] = r;
    return false;
  }
  pj->result = r;
  if (!pj->hidden) {
    pj->prev_done = s->done_tail;
    if (s->done_tail) s->done_tail->next_done = pj;
    else s->done_head = pj;
    s->done_tail = pj;
  }
  return true;
}

/* Files results (lock held on entry, released on return): pjs' and those
 * decided in w, then sends what w released. */
static void file_locked(schedrun_t *s, pending_job **pjs, schedrun_job_result_t **rs, size_t n, deps_work *w,
                        bool on_completer) {
  size_t total = n + w->ndone, ncb = 0, done = 0;
  pending_job *cb1;
  schedrun_job_result_t *cbr1;
  pending_job **cbs = total <= 1 ? &cb1 : calloc(total, sizeof *cbs);
  schedrun_job_result_t **cbrs = total <= 1 ? &cbr1 : calloc(total, sizeof *cbrs);
  bool here = on_completer && cbs && cbrs; /* without memory callbacks are deferred */
  for (size_t k = 0; k < total; k++) {
    pending_job *pj = k < n ? pjs[k] : w->done[k - n];
    schedrun_job_result_t *r = k < n ? rs[k] : w->results[k - n];
    if (pj && file_one(s, pj, r, here, cbs, cbrs, &ncb)) done++;
  }
  if (ncb) run_callbacks(s, cbs, cbrs, ncb);
  assert(s->incomplete >= done);
  s->incomplete -= done;
  s->completed += done;
  atomic_fetch_add(&s->completions, 1);
  if (s->ndoomed) free_doomed(s);
  bool ring = !here && (s->ndeferred > 0 || s->nhost_ready > 0);
  bool late = s->nlate > 0; /* programs whose RELEASE waits for held jobs */
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  if (total > 1) {
    free(cbs);
    free(cbrs);
  }
  deps_send(s, w, on_completer);
  deps_work_free(w);
  if (late) deps_late_releases(s); /* a later round sees any added meanwhile */
  if (on_completer) deps_run_host_tasks(s);
  else if (ring) api_ring_completer(s);
}

void api_file_work(schedrun_t *s, deps_work *w, bool on_completer) { file_locked(s, NULL, NULL, 0, w, on_completer); }

void api_file_results(schedrun_t *s, pending_job **pjs, schedrun_job_result_t **rs, size_t n, bool on_completer) {
  deps_work w = {0};
  pthread_mutex_lock(&s->lock);
  /* the jobs after these learn of them first: what fails for that completes
   * in this same round (w.done) */
  for (size_t k = 0; k < n; k++) {
    if (pjs[k] && rs[k]) rs[k]->info.handoffs_copied += pjs[k]->host_handoffs;
    if (pjs[k] && rs[k] && pjs[k]->prog) deps_note_run(s, pjs[k]->prog, rs[k]->info.execute_ns);
    if (pjs[k] && pjs[k]->dep && pjs[k]->dep->ahead && deps_early(s, pjs[k], rs[k])) {
      pjs[k] = NULL; /* kept for, or decided by, the jobs before it */
      rs[k] = NULL;
      continue;
    }
    if (pjs[k] && pjs[k]->dep) deps_completed(s, pjs[k], rs[k], &w);
  }
  deps_settle(s, &w);
  file_locked(s, pjs, rs, n, &w, on_completer);
}

/* Completed jobs, as many as one message brings: each result goes to its
 * job's callback, or is filed for a waiter. Verification runs outside the
 * lock; waiters are woken once. */
void api_completed(schedrun_t *s, const uint64_t *ids, msg_complete *cs, size_t n, bool on_completer) {
  pending_job *pj1 = NULL;
  schedrun_job_result_t *r1 = NULL;
  pending_job **pjs = n == 1 ? &pj1 : calloc(n, sizeof *pjs);
  schedrun_job_result_t **rs = n == 1 ? &r1 : calloc(n, sizeof *rs);
  if (!pjs || !rs) {
    /* without memory for the batch: one at a time */
    free(pjs);
    free(rs);
    for (size_t k = 0; k < n; k++) api_completed(s, &ids[k], &cs[k], 1, on_completer);
    return;
  }
  pthread_mutex_lock(&s->lock);
  for (size_t k = 0; k < n; k++) {
    pending_job *pj = idmap_get(&s->jobs, ids[k]);
    /* not ours, a duplicate (a job completes once), or one still held for
     * the jobs it runs after (its id cannot have reached an actor) */
    pjs[k] = pj && !pj->result && !(pj->dep && pj->dep->held) ? pj : NULL;
  }
  pthread_mutex_unlock(&s->lock);
  for (size_t k = 0; k < n; k++)
    if (pjs[k]) rs[k] = result_from_complete(ids[k], &cs[k], pjs[k]->prog, pjs[k]->keep);
  api_file_results(s, pjs, rs, n, on_completer);
  if (n > 1) {
    free(pjs);
    free(rs);
  }
}

/* COMPLETE_MANY: each job's COMPLETE, from the columns (outputs are lent to
 * the results, which take them). */
void api_completed_many(schedrun_t *s, msg *m, bool on_completer) {
  msg_complete_many *b = &m->body.complete_many;
  size_t n = b->jobs.n;
  msg_complete *cs = calloc(n, sizeof *cs);
  if (!cs) return; /* the waits time out: nothing can be said without memory */
  size_t o = 0, pc = 0;
  for (size_t k = 0; k < n; k++) {
    msg_complete *c = &cs[k];
    c->status = SCHEDRUN_OK;
    c->program = b->program;
    c->device = b->device;
    c->run = (uint32_t)b->runs.v[k];
    c->job_index = (uint32_t)b->job_indexes.v[k];
    c->execute_ns = b->execute_ns.v[k];
    c->counts = (msg_counts){0, 0, b->nodes};
    c->text = "";
    c->t_submit = b->t_submits.v[k];
    c->t_execute = b->t_executes.v[k];
    c->t_done = b->t_dones.v[k];
    c->handoffs_local = (uint32_t)b->handoffs_local.v[k];
    c->handoffs_copied = (uint32_t)b->handoffs_copied.v[k];
    c->handoffs_peer = (uint32_t)b->handoffs_peer.v[k];
    c->bytes_in = b->bytes_in.v[k];
    c->bytes_out = b->bytes_out.v[k];
    c->bytes_peer = b->bytes_peer.v[k];
    size_t first = o;
    while (o < b->outputs.n && b->output_jobs.v[o] == k) o++;
    c->outputs.v = o > first ? b->outputs.v + first : NULL;
    c->outputs.n = o - first;
    /* the parcels it left: its own copy, which its result takes */
    size_t p0 = pc;
    while (pc < b->parcels.n && b->parcel_jobs.v[pc] == k) pc++;
    if (pc > p0 && (c->parcels.v = malloc((pc - p0) * sizeof *c->parcels.v))) {
      memcpy(c->parcels.v, b->parcels.v + p0, (pc - p0) * sizeof *c->parcels.v);
      c->parcels.n = pc - p0;
    }
  }
  api_completed(s, b->jobs.v, cs, n, on_completer);
  for (size_t k = 0; k < n; k++) free(cs[k].parcels.v); /* those no result took */
  free(cs);
}

/* Runs the callbacks a waiting thread left (completion thread only). */
static void run_deferred(schedrun_t *s) {
  pthread_mutex_lock(&s->lock);
  while (s->ndeferred) {
    pending_job **pjs = s->deferred;
    schedrun_job_result_t **rs = s->deferred_results;
    size_t n = s->ndeferred;
    s->deferred = NULL;
    s->deferred_results = NULL;
    s->ndeferred = s->deferred_cap = 0;
    run_callbacks(s, pjs, rs, n);
    free(pjs);
    free(rs);
    atomic_fetch_add(&s->completions, 1);
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&s->lock);
}

/* A queued message: only COMPLETEs are queued for the library. */
typedef struct drain_ctx {
  schedrun_t *s;
  bool on_completer;
} drain_ctx;

static bool take_completion(void *ctx, msg *m) {
  drain_ctx *d = ctx;
  if (m->type == MSG_COMPLETE) api_completed(d->s, &m->job, &m->body.complete, 1, d->on_completer);
  else if (m->type == MSG_COMPLETE_MANY) api_completed_many(d->s, m, d->on_completer);
  else return false;
  return true;
}

void api_drain_completions(schedrun_t *s, bool on_completer) {
  drain_ctx d = {s, on_completer};
  size_t bad = msgq_drain(&s->core.to_client, take_completion, &d);
  if (bad) atomic_fetch_add(&s->malformed, bad);
  if (on_completer) {
    run_deferred(s);
    deps_run_host_tasks(s);
    return;
  }
  pthread_mutex_lock(&s->lock);
  bool deferred = s->ndeferred > 0 || s->nhost_ready > 0;
  pthread_mutex_unlock(&s->lock);
  if (deferred) api_ring_completer(s); /* the completion thread runs them */
}

void api_ring_completer(schedrun_t *s) {
  msg bell;
  msg_init(&bell, MSG_QUEUED, 0, ACTOR_CLIENT);
  pthread_mutex_lock(&s->bell_lock);
  mbox_send(s->bell, &bell, NULL);
  pthread_mutex_unlock(&s->bell_lock);
  msg_free(&bell);
}

