/*
 * Jobs through the public API: submit (bounded by max_inflight), and the
 * waits. A job's result is handed over exactly once: to its callback, or to
 * the one waiter that takes it; other threads waiting on it get
 * SCHEDRUN_EALREADY. Waits from the completion thread (a callback) that would
 * need that thread to make progress answer SCHEDRUN_EDEADLK instead.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/spin_gauge.h"
#include "lib/deps.h"

void schedrun_job_options_init(schedrun_job_options_t *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->device = -1;
  o->submit_timeout_ms = -1;
}

/* Waits for the next completion or hand-over: first a short spin without the
 * lock (a job's answer is often microseconds away, and waking a sleeping
 * thread costs more), taking what arrives in the completion queue itself,
 * then on the condition variable. Called and returns with
 * the lock held; false when the deadline passed. */
static bool wait_completion(schedrun_t *s, const struct timespec *deadline, bool forever) {
  uint64_t seen = atomic_load(&s->completions);
  bool lone = s->incomplete == 1;
  pthread_mutex_unlock(&s->lock);
  uint64_t t0 = now_ns(), look = t0;
  msg_queue *q = &s->core.to_client, *sq = &s->core.to_scheduler;
  bool spin = s->spin_ns && spin_gauge_may_spin(&spin_gauge_process, t0);
  /* A lone job posted to its device by the thread that submitted it is
   * collected here, until the wait's deadline at most: this thread waits
   * for it anyway. Not spinning (the cores are shared, or spinning is off),
   * the execute actor's thread sleeps too, and a lone job's EXECUTE still
   * queued waits for it to wake: this thread, about to sleep anyway, runs it
   * instead, unless the wait has a deadline that the job's run could
   * overstay. */
  uint64_t until = forever ? 0 : t0 + api_ns_until(deadline);
  if (lone && api_guest_run_queued(s, !spin && forever, until)) {
    pthread_mutex_lock(&s->lock);
    if (atomic_load(&s->completions) != seen) return true;
    pthread_mutex_unlock(&s->lock);
  }
  /* and the scheduler's queue: the EXECUTED of the job waited for is run
   * here, as the scheduler's guest (lib/api_guest.c) */
  actor_t *sched = spin ? api_guest_enter(s) : NULL;
  if (spin) msgq_poll_begin(q); /* what arrives meanwhile rings nobody: it is ours to file */
  if (sched) msgq_poll_begin(sq);
  bool polled = spin;
  while (spin && atomic_load(&s->completions) == seen && look - t0 < s->spin_ns) {
    /* a COMPLETE waiting in the queue is filed here, without a hop through
     * the completion thread */
    if (msgq_any(q)) api_drain_completions(s, false);
    else if (!sched || !msgq_any(sq) || actor_run_queue_here(sched) != ACTOR_TURN_RAN) {
      spin = spin_gauge_yield(&spin_gauge_process, &look, now_ns); /* false: the core went elsewhere */
      continue;
    }
    look = now_ns();
  }
  if (sched) {
    msgq_poll_end(sq);
    api_guest_settle(s, sched);
    api_guest_leave(s);
  }
  if (polled) {
    msgq_poll_end(q);
    if (msgq_any(q)) api_drain_completions(s, false);
  }
  pthread_mutex_lock(&s->lock);
  if (atomic_load(&s->completions) != seen) return true;
  if (forever) return pthread_cond_wait(&s->cond, &s->lock) == 0;
  return pthread_cond_timedwait(&s->cond, &s->lock, deadline) == 0;
}

/* The arguments of one job that can be checked without the lock; `fn`
 * names the call (and the job, for a batch) in the error. */
int api_check_options(const schedrun_t *s, const char *fn, const schedrun_job_options_t *o, schedrun_error_t *err) {
  if (o->run < 0 || o->job < 0 || o->timeout_ms < 0)
    return err_set(err, SCHEDRUN_EINVAL, "%s: run, job and timeout_ms must be >= 0", fn);
  if (o->device < -1 || o->device >= s->core.ndevices)
    return err_set(err, SCHEDRUN_EINVAL, "%s: no device %d (there are %d)", fn, o->device, s->core.ndevices);
  if (o->ninputs && !o->inputs) return err_set(err, SCHEDRUN_EINVAL, "%s: inputs is NULL", fn);
  if (o->nbinds && !o->binds) return err_set(err, SCHEDRUN_EINVAL, "%s: binds is NULL", fn);
  return SCHEDRUN_OK;
}

/* Fills the SUBMIT body for one job (the program id is set later); on
 * failure what was filled is freed with its message. */
int api_fill_submit(const prog_program *p, const char *fn, const schedrun_job_options_t *o, uint64_t deadline_ns,
                    msg_submit *sb, schedrun_error_t *err) {
  *sb = (msg_submit){0, (uint32_t)o->run, (uint32_t)o->job, (uint32_t)(o->run % p->buffer_sets),
                     o->device, o->keep_outputs ? 1u : 0u, {NULL, 0}, 0, o->record_only ? 1u : 0u};
  if (deadline_ns) sb->deadline = deadline_ns;
  else if (o->timeout_ms > 0) sb->deadline = now_ns() + (uint64_t)o->timeout_ms * 1000000ull;
  if (o->ninputs) {
    sb->inputs.v = calloc(o->ninputs, sizeof(msg_output));
    if (!sb->inputs.v) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < o->ninputs; i++) {
    const schedrun_input_t *in = &o->inputs[i];
    int b = in->buffer ? prog_find_buffer(p, in->buffer) : -1;
    if (b < 0)
      return err_set(err, SCHEDRUN_EINVAL, "%s: input %zu names no buffer of '%s' (%s)", fn, i, p->name,
                     in->buffer ? in->buffer : "NULL");
    uint64_t want = p->buffers[b].count * prog_type_size(p->buffers[b].type);
    if (in->bytes != want || !in->data)
      return err_set(err, SCHEDRUN_EINVAL, "%s: input for buffer '%s' has %zu bytes; it holds %llu", fn, in->buffer,
                     in->bytes, (unsigned long long)want);
    msg_output *mo = &sb->inputs.v[sb->inputs.n++];
    mo->buffer = (uint32_t)b;
    mo->data.data = msg_bytes_alloc(in->bytes);
    if (!mo->data.data) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    memcpy(mo->data.data, in->data, in->bytes);
    mo->data.len = in->bytes;
  }
  return SCHEDRUN_OK;
}

/* Waits (lock held) until fewer than max_inflight jobs are in flight (not
 * yet complete), as the job options allow. Completions make room without the
 * caller's help, so a thread that submits many jobs before it collects any
 * cannot wait for itself; only the completion thread could, so it never waits. */
int api_wait_for_room(schedrun_t *s, size_t need, const schedrun_job_options_t *o, schedrun_error_t *err) {
  if (s->incomplete + need <= s->max_inflight) return SCHEDRUN_OK;
  int timeout = api_on_completer(s) ? 0 : o->submit_timeout_ms;
  struct timespec ts = api_deadline_in(timeout < 0 ? 0 : timeout);
  while (s->incomplete + need > s->max_inflight && !s->closing) {
    if (timeout == 0 || (timeout > 0 && pthread_cond_timedwait(&s->cond, &s->lock, &ts) != 0 &&
                         s->incomplete + need > s->max_inflight))
      return err_set(err, SCHEDRUN_EAGAIN, "schedrun_submit: %zu jobs are in flight (max_inflight)%s", s->incomplete,
                     timeout == 0 ? "" : " for the whole submit_timeout_ms");
    if (timeout < 0) pthread_cond_wait(&s->cond, &s->lock);
  }
  return SCHEDRUN_OK;
}

/* Registers a job about to be submitted (lock held): its id, its entry. */
int api_register_job(schedrun_t *s, const prog_program *p, const schedrun_job_options_t *o, bool hidden,
                     pending_job *pj, schedrun_error_t *err) {
  pj->id = ++s->next_id;
  pj->run = (uint32_t)o->run;
  pj->job_index = (uint32_t)o->job;
  pj->prog = p;
  pj->keep = o->keep_outputs != 0;
  pj->hidden = hidden;
  pj->cb = o->on_complete;
  pj->user = o->user;
  if (idmap_put(&s->jobs, pj->id, pj) != 0) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  if (!pj->cb && !hidden) s->waitable++;
  s->incomplete++;
  s->submitted++;
  return SCHEDRUN_OK;
}

/* Forgets a registered job that was never sent (lock held). */
void api_unregister_job(schedrun_t *s, pending_job *pj) {
  api_unbind(s, pj);
  idmap_remove(&s->jobs, pj->id);
  if (!pj->cb && !pj->hidden) s->waitable--;
  s->incomplete--;
  s->submitted--;
  pthread_cond_broadcast(&s->cond);
}

int api_after_check(schedrun_t *s, const char *fn, const schedrun_job_t *after, size_t nafter, schedrun_error_t *err) {
  if (nafter && !after) return err_set(err, SCHEDRUN_EINVAL, "%s: after is NULL", fn);
  for (size_t i = 0; i < nafter; i++) {
    pending_job *x = idmap_get(&s->jobs, after[i]);
    if (!x)
      return after[i] == 0 || after[i] > s->next_id
                 ? err_set(err, SCHEDRUN_EINVAL, "%s: after[%zu]: no job %llu was submitted", fn, i,
                           (unsigned long long)after[i])
                 : err_set(err, SCHEDRUN_EINVAL,
                           "%s: after[%zu]: job %llu's result was already handed over (a job can run after jobs "
                           "whose results are still held here)",
                           fn, i, (unsigned long long)after[i]);
  }
  return SCHEDRUN_OK;
}

int api_submit(schedrun_t *s, schedrun_program_t *h, const schedrun_job_options_t *o, uint64_t deadline_ns, bool hidden,
               bool run_here, schedrun_job_t *out, schedrun_error_t *err) {
  const prog_program *p = h->p;
  int rc = api_check_options(s, "schedrun_submit", o, err);
  if (rc) return rc;
  msg m;
  msg_init(&m, MSG_SUBMIT, 0, ACTOR_CLIENT);
  rc = api_fill_submit(p, "schedrun_submit", o, deadline_ns, &m.body.submit, err);
  pending_job *pj = rc ? NULL : calloc(1, sizeof *pj);
  dep_node *dn = rc || !o->nafter ? NULL : deps_node_new();
  if (rc || !pj || (o->nafter && !dn)) {
    msg_free(&m);
    free(pj);
    free(dn);
    return rc ? rc : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  pthread_mutex_lock(&s->lock);
  rc = api_wait_for_room(s, 1, o, err);
  if (rc == SCHEDRUN_OK && s->closing) rc = err_set(err, SCHEDRUN_ECLOSED, "schedrun_submit: the scheduler is shut down");
  if (rc == SCHEDRUN_OK) rc = api_attach(s, h, err);
  if (rc == SCHEDRUN_OK) rc = api_after_check(s, "schedrun_submit", o->after, o->nafter, err);
  if (rc == SCHEDRUN_OK) rc = api_bind_check(s, p, "schedrun_submit", o, &m.body.submit, err);
  if (rc == SCHEDRUN_OK && (rc = api_register_job(s, p, o, hidden, pj, err)) == SCHEDRUN_OK &&
      (rc = api_bind(s, pj, o, err)) != SCHEDRUN_OK)
    api_unregister_job(s, pj);
  /* a lone job (nothing else in flight) may be placed, or run, here; or
   * posted to its device, to be collected by its wait (not a job whose
   * callback takes its answer, whenever it comes; not one with a deadline
   * or host steps, which the device cannot run alone) */
  bool postable = !o->on_complete && !m.body.submit.deadline && !p->nhosts;
  submit_how how = s->incomplete != 1 ? SUBMIT_QUEUE
                   : run_here       ? SUBMIT_RUN_HERE
                   : postable       ? SUBMIT_POST_HERE
                                    : SUBMIT_PLACE_HERE;
  if (rc == SCHEDRUN_OK && dn) {
    pj->dep = dn; /* nothing can run after it before its id is out */
    deps_after(s, pj, o->after, o->nafter);
  }
  schedrun_job_t id = pj->id; /* pj may complete (and go) as soon as it is sent */
  m.job = id;
  m.body.submit.program = h->id;
  if (rc == SCHEDRUN_OK && dn && dn->waiting > 0) {
    /* held here until the jobs it runs after complete */
    dn->held = dn->is_job = true;
    dn->submit = m;
    pthread_mutex_unlock(&s->lock);
    *out = id;
    return SCHEDRUN_OK;
  }
  if (dn) pj->dep = NULL;
  pthread_mutex_unlock(&s->lock);
  char *why = dn ? dn->fail_why : NULL; /* a job it runs after failed already */
  if (dn) dn->fail_why = NULL;
  deps_node_free(s, dn, false);
  if (rc) {
    free(why);
    free(pj);
    msg_free(&m);
    return rc;
  }
  if (why) {
    /* a job it runs after failed already: it completes now */
    msg_free(&m);
    schedrun_job_result_t *r = deps_result(pj, SCHEDRUN_EDEPEND, why);
    free(why);
    *out = id;
    api_file_results(s, &pj, &r, 1, api_on_completer(s));
    return SCHEDRUN_OK;
  }
  rc = api_send_submit(s, &m, how, err);
  msg_free(&m);
  if (rc) {
    pthread_mutex_lock(&s->lock);
    api_unregister_job(s, pj);
    pthread_mutex_unlock(&s->lock);
    free(pj);
    return rc;
  }
  *out = id;
  return SCHEDRUN_OK;
}

int schedrun_submit(schedrun_t *s, schedrun_program_t *p, const schedrun_job_options_t *o, schedrun_job_t *out,
                    schedrun_error_t *err) {
  if (out) *out = 0;
  if (!s || !p || !out)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit: %s is NULL", !s ? "the scheduler" : !p ? "the program" : "out");
  schedrun_job_options_t d;
  schedrun_job_options_init(&d);
  return api_submit(s, p, o ? o : &d, 0, false, false, out, err);
}

/* Hands pj's result over (under lock): the job is forgotten; pj itself goes
 * when no other thread is still waiting on it. */
static schedrun_job_result_t *take(schedrun_t *s, pending_job *pj) {
  assert(pj->result && !pj->taken);
  schedrun_job_result_t *r = pj->result;
  pj->result = NULL;
  pj->taken = true;
  idmap_remove(&s->jobs, pj->id);
  if (!pj->cb && !pj->hidden) s->waitable--;
  /* unlink from the done list (schedrun_run's hidden jobs are not on it) */
  if (pj->prev_done || s->done_head == pj) {
    if (pj->prev_done) pj->prev_done->next_done = pj->next_done;
    else s->done_head = pj->next_done;
    if (pj->next_done) pj->next_done->prev_done = pj->prev_done;
    else s->done_tail = pj->prev_done;
    pj->next_done = pj->prev_done = NULL;
  }
  if (pj->waiters == 0) free(pj);
  /* other waiters of pj leave with EALREADY; submitters may have room */
  atomic_fetch_add(&s->completions, 1);
  pthread_cond_broadcast(&s->cond);
  return r;
}

static int deadlock(schedrun_error_t *err, const char *fn) {
  return err_set(err, SCHEDRUN_EDEADLK,
                 "%s: called with a timeout from a completion callback, whose thread delivers the completions it "
                 "would wait for; use timeout 0 there, or wait from another thread",
                 fn);
}

int schedrun_wait(schedrun_t *s, schedrun_job_t job, int timeout_ms, schedrun_job_result_t **out, schedrun_error_t *err) {
  if (out) *out = NULL;
  if (!s || !out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_wait: %s is NULL", !s ? "the scheduler" : "out");
  if (timeout_ms != 0 && api_on_completer(s)) return deadlock(err, "schedrun_wait");
  pthread_mutex_lock(&s->lock);
  pending_job *pj = idmap_get(&s->jobs, job);
  int rc = SCHEDRUN_OK;
  if (!pj) {
    rc = job == 0 || job > s->next_id
             ? err_set(err, SCHEDRUN_EINVAL, "schedrun_wait: no job %llu", (unsigned long long)job)
             : err_set(err, SCHEDRUN_EINVAL, "schedrun_wait: job %llu was already handed over", (unsigned long long)job);
  } else if (pj->cb) {
    rc = err_set(err, SCHEDRUN_EINVAL, "schedrun_wait: job %llu reports to its callback", (unsigned long long)job);
  } else {
    struct timespec ts = api_deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
    pj->waiters++;
    while (!pj->result && !pj->taken && rc == SCHEDRUN_OK) {
      if (timeout_ms == 0 || (!wait_completion(s, &ts, timeout_ms < 0) && !pj->result && !pj->taken))
        rc = err_set(err, SCHEDRUN_ETIMEOUT, "schedrun_wait: job %llu not done within %d ms", (unsigned long long)job,
                     timeout_ms);
    }
    pj->waiters--;
    if (pj->taken) {
      rc = err_set(err, SCHEDRUN_EALREADY, "schedrun_wait: job %llu was handed to another waiting thread",
                   (unsigned long long)job);
      if (pj->waiters == 0) free(pj);
    } else if (rc == SCHEDRUN_OK) {
      *out = take(s, pj);
    }
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int schedrun_wait_any(schedrun_t *s, int timeout_ms, schedrun_job_t *job, schedrun_job_result_t **out,
                      schedrun_error_t *err) {
  if (out) *out = NULL;
  if (job) *job = 0;
  if (!s || !out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_any: %s is NULL", !s ? "the scheduler" : "out");
  if (timeout_ms != 0 && api_on_completer(s)) return deadlock(err, "schedrun_wait_any");
  pthread_mutex_lock(&s->lock);
  struct timespec ts = api_deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
  int rc = SCHEDRUN_OK;
  while (!s->done_head && rc == SCHEDRUN_OK) {
    if (s->waitable == 0) rc = err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_any: no job to wait for");
    else if (timeout_ms == 0 || (!wait_completion(s, &ts, timeout_ms < 0) && !s->done_head))
      rc = err_set(err, SCHEDRUN_ETIMEOUT, "schedrun_wait_any: nothing completed within %d ms", timeout_ms);
  }
  if (rc == SCHEDRUN_OK) {
    pending_job *pj = s->done_head;
    if (job) *job = pj->id;
    *out = take(s, pj);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int schedrun_wait_all(schedrun_t *s, int timeout_ms, schedrun_error_t *err) {
  if (!s) return err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_all: the scheduler is NULL");
  pthread_mutex_lock(&s->lock);
  int rc = SCHEDRUN_OK;
  if (s->incomplete && timeout_ms != 0 && api_on_completer(s)) rc = deadlock(err, "schedrun_wait_all");
  struct timespec ts = api_deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
  while (s->incomplete && rc == SCHEDRUN_OK) {
    if (timeout_ms < 0) pthread_cond_wait(&s->cond, &s->lock);
    else if (timeout_ms == 0 || (pthread_cond_timedwait(&s->cond, &s->lock, &ts) != 0 && s->incomplete))
      rc = err_set(err, SCHEDRUN_ETIMEOUT, "schedrun_wait_all: %zu jobs still running after %d ms", s->incomplete,
                   timeout_ms);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* ---- many jobs at once ---- */

#define SUBMIT_BATCH 1024 /* jobs per SUBMIT_MANY message */

int api_name_error(schedrun_error_t *err, int rc, const char *fn, const char *where) {
  size_t n = strlen(fn);
  if (err && err->message && !strncmp(err->message, fn, n)) {
    schedrun_error_t named = {0};
    err_set(&named, rc, "%s: %s%s", fn, where, err->message + n);
    err_move(err, &named);
  }
  return rc;
}

/* Names job i of a schedrun_submit_many in the error its checks left. */
static int name_job(schedrun_error_t *err, int rc, size_t i) {
  char where[32];
  snprintf(where, sizeof where, "job %zu", i);
  return api_name_error(err, rc, "schedrun_submit_many", where);
}

int schedrun_submit_many(schedrun_t *s, schedrun_program_t *h, size_t n, const schedrun_job_options_t *opts,
                         schedrun_job_t *out, schedrun_error_t *err) {
  if (!s || !h || (n && !out))
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit_many: %s is NULL",
                   !s ? "the scheduler" : !h ? "the program" : "out");
  for (size_t i = 0; i < n; i++) out[i] = 0;
  schedrun_job_options_t d;
  schedrun_job_options_init(&d);
  static const char fn[] = "schedrun_submit_many";
  for (size_t i = 0; i < n; i++) {
    int rc = api_check_options(s, fn, opts ? &opts[i] : &d, err);
    if (rc) return name_job(err, rc, i);
  }
  for (size_t i = 0; opts && i < n; i++)
    if (opts[i].nafter || opts[i].nbinds) {
      /* jobs that run after jobs are held one by one, and jobs bound to
       * registered memory bound one by one: submitted as such */
      for (size_t k = 0; k < n; k++) {
        int rc = schedrun_submit(s, h, &opts[k], &out[k], err);
        if (rc) return name_job(err, rc, k);
      }
      return SCHEDRUN_OK;
    }
  const prog_program *p = h->p;
  int rc = SCHEDRUN_OK;
  for (size_t at = 0; at < n && rc == SCHEDRUN_OK;) {
    const schedrun_job_options_t *o0 = opts ? &opts[at] : &d;
    /* room first: how many of the next jobs may go now */
    pthread_mutex_lock(&s->lock);
    rc = api_wait_for_room(s, 1, o0, err);
    if (rc == SCHEDRUN_OK && s->closing) rc = err_set(err, SCHEDRUN_ECLOSED, "schedrun_submit_many: the scheduler is shut down");
    if (rc == SCHEDRUN_OK) rc = api_attach(s, h, err);
    size_t k = 0, room = s->max_inflight > s->incomplete ? s->max_inflight - s->incomplete : 0;
    pending_job **pjs = NULL;
    if (rc == SCHEDRUN_OK) {
      k = n - at < SUBMIT_BATCH ? n - at : SUBMIT_BATCH;
      if (k > room) k = room;
      assert(k > 0); /* api_wait_for_room made room */
      pjs = calloc(k, sizeof *pjs);
      if (!pjs) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    }
    size_t reg = 0;
    for (; rc == SCHEDRUN_OK && reg < k; reg++) {
      pjs[reg] = calloc(1, sizeof **pjs);
      rc = pjs[reg] ? api_register_job(s, p, opts ? &opts[at + reg] : &d, false, pjs[reg], err)
                    : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
      if (rc) free(pjs[reg]);
    }
    schedrun_job_t first = reg ? pjs[0]->id : 0;
    pthread_mutex_unlock(&s->lock);
    /* the message, outside the lock: ids first .. first + k - 1 */
    msg m;
    msg_init(&m, MSG_SUBMIT_MANY, first, ACTOR_CLIENT);
    size_t nin = 0;
    for (size_t j = 0; opts && j < k; j++) nin += opts[at + j].ninputs;
    if (rc == SCHEDRUN_OK && msg_submit_many_reserve(&m.body.submit_many, k, nin) != SCHEDRUN_OK)
      rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    for (size_t j = 0; rc == SCHEDRUN_OK && j < k; j++) {
      msg one = {.type = MSG_SUBMIT};
      rc = api_fill_submit(p, fn, opts ? &opts[at + j] : &d, 0, &one.body.submit, err);
      if (rc) name_job(err, rc, at + j);
      one.body.submit.program = h->id;
      if (rc == SCHEDRUN_OK) msg_submit_many_add(&m.body.submit_many, &one.body.submit);
      msg_free(&one); /* what a failed fill had made */
    }
    if (rc == SCHEDRUN_OK) rc = api_send_submit(s, &m, SUBMIT_QUEUE, err);
    msg_free(&m);
    if (rc == SCHEDRUN_OK) {
      for (size_t j = 0; j < k; j++) out[at + j] = first + j; /* the pending jobs may be gone already */
      at += k;
    } else if (reg) {
      /* nothing of this batch was sent */
      pthread_mutex_lock(&s->lock);
      for (size_t j = 0; j < reg; j++) {
        if (!pjs[j]) continue;
        if (idmap_get(&s->jobs, pjs[j]->id) == pjs[j]) api_unregister_job(s, pjs[j]);
        free(pjs[j]);
      }
      pthread_mutex_unlock(&s->lock);
    }
    free(pjs);
  }
  return rc;
}

/* Few jobs are found by looking through the list; more through an index
 * by id (want), which costs a table to allocate and clear. */
#define WAIT_SCAN 16

/* Where id is in jobs[0..n), plus one, or 0. */
static size_t wanted(const idmap *want, const schedrun_job_t *jobs, size_t n, uint64_t id) {
  if (n > WAIT_SCAN) return (uintptr_t)idmap_get(want, id);
  for (size_t i = 0; i < n; i++)
    if (jobs[i] == id) return i + 1;
  return 0;
}

int schedrun_wait_many(schedrun_t *s, size_t n, const schedrun_job_t *jobs, int timeout_ms,
                       schedrun_job_result_t **results, schedrun_error_t *err) {
  if (!s || (n && (!jobs || !results)))
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_many: %s is NULL",
                   !s ? "the scheduler" : !jobs ? "jobs" : "results");
  for (size_t i = 0; i < n; i++) results[i] = NULL;
  if (n && timeout_ms != 0 && api_on_completer(s)) return deadlock(err, "schedrun_wait_many");
  /* the jobs, and which of them each completed one is (an index by id) */
  pending_job **pjs = calloc(n ? n : 1, sizeof *pjs);
  idmap want;
  idmap_init(&want);
  int rc = pjs ? SCHEDRUN_OK : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < n && rc == SCHEDRUN_OK; i++) {
    pending_job *pj = idmap_get(&s->jobs, jobs[i]);
    if (!pj)
      rc = err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_many: job %llu (at %zu) is %s", (unsigned long long)jobs[i], i,
                   jobs[i] == 0 || jobs[i] > s->next_id ? "unknown" : "already handed over");
    else if (pj->cb || pj->hidden)
      rc = err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_many: job %llu reports to its callback",
                   (unsigned long long)jobs[i]);
    else if (wanted(&want, jobs, n > WAIT_SCAN ? n : i, jobs[i]))
      rc = err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_many: job %llu is listed twice", (unsigned long long)jobs[i]);
    else if (n > WAIT_SCAN && idmap_put(&want, jobs[i], (void *)(uintptr_t)(i + 1)) != 0)
      rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    else
      pjs[i] = pj;
  }
  size_t left = 0;
  if (rc == SCHEDRUN_OK) {
    left = n;
    for (size_t i = 0; i < n; i++) pjs[i]->waiters++; /* none can be freed under us */
  }
  struct timespec ts = api_deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
  while (left > 0) {
    /* take ours from the done list, in completion order */
    size_t was = left;
    for (pending_job *pj = s->done_head, *next; pj; pj = next) {
      next = pj->next_done;
      size_t at = wanted(&want, jobs, n, pj->id);
      if (!at || results[at - 1]) continue;
      results[at - 1] = take(s, pj);
      left--;
    }
    if (left == 0) break;
    if (left == was) {
      /* a wake that brought none of ours: was one handed to another thread? */
      for (size_t i = 0; i < n && rc == SCHEDRUN_OK; i++)
        if (!results[i] && pjs[i]->taken)
          rc = err_set(err, SCHEDRUN_EALREADY, "schedrun_wait_many: job %llu was handed to another waiting thread",
                       (unsigned long long)jobs[i]);
      if (rc) break;
    }
    if (timeout_ms == 0 || (!wait_completion(s, &ts, timeout_ms < 0) && !s->done_head)) {
      rc = err_set(err, SCHEDRUN_ETIMEOUT, "schedrun_wait_many: %zu of %zu jobs not done within %d ms", left, n,
                   timeout_ms);
      break;
    }
  }
  /* let go of every job this call waited for */
  for (size_t i = 0; rc != SCHEDRUN_EINVAL && rc != SCHEDRUN_ENOMEM && i < n; i++) {
    pending_job *pj = pjs[i];
    pj->waiters--;
    if (pj->taken && pj->waiters == 0) free(pj); /* handed over: the last waiter frees it */
  }
  pthread_mutex_unlock(&s->lock);
  idmap_destroy(&want);
  free(pjs);
  return rc;
}
