/*
 * The caller's thread as the scheduler's guest (actors/actor.h, "guests").
 *
 * A job's SUBMIT is queued for the scheduler, and a thread waiting for
 * results polls the scheduler's queue beside the completion queue. When the
 * scheduler's turn is free, the calling thread runs the scheduler's handler
 * on what is queued itself: a lone job is placed and its EXECUTE queued for
 * the device before schedrun_submit returns, and the EXECUTED that the
 * execute actor sends back is handled by the thread waiting for the job's
 * result. A lone job then crosses no scheduler thread at all, and that
 * thread, idle, sleeps instead of spinning beside the caller for a core.
 *
 * schedrun_submit_wait goes one step further: its caller waits for the job
 * anyway, so it also takes the device's execute actor's turn and runs the
 * job there (the kernels still run where the device runs them, in its
 * worker process on host devices), and files the COMPLETE itself. Only the
 * device is left between the call and its result. A caller about to sleep
 * in a wait for a lone job whose EXECUTE is still queued (the execute
 * actor's thread was asleep, and has not woken for it yet) does the same.
 */
#include <sched.h>

#include "lib/api.h"

actor_t *api_guest_enter(schedrun_t *s) {
  /* entering, then looking: api_guests_close stores, then counts (both
   * sequentially consistent), so one of the two sees the other */
  atomic_fetch_add(&s->sched_guests, 1);
  if (atomic_load(&s->sched_open)) return s->scheduler;
  atomic_fetch_sub(&s->sched_guests, 1);
  return NULL;
}

void api_guest_leave(schedrun_t *s) { atomic_fetch_sub(&s->sched_guests, 1); }

/* Rings the actor behind `sock` for what q holds (send_lock held): a QUEUED
 * doorbell, and one that could not go is forgotten, so that the next push
 * rings again. */
static int ring_locked(void *sock, msg_queue *q, uint64_t job, schedrun_error_t *err) {
  msg bell;
  msg_init(&bell, MSG_QUEUED, job, ACTOR_CLIENT);
  int rc = mbox_send(sock, &bell, err);
  msg_free(&bell);
  if (rc) msgq_unring(q);
  return rc;
}

/* After polling q (msgq_poll_end): what came meanwhile rang nobody, so it
 * runs here, or, when the actor's turn is busy, the actor is rung through
 * `bell`: the holder (another guest, or its own thread) may have looked at
 * the queue before the push. */
static void ring_for(schedrun_t *s, msg_queue *q, void *bell) {
  if (!msgq_any(q) || !msgq_claim_ring(q)) return;
  pthread_mutex_lock(&s->send_lock);
  ring_locked(bell, q, 0, NULL);
  pthread_mutex_unlock(&s->send_lock);
}

static void settle(schedrun_t *s, actor_t *a, msg_queue *q, void *bell) {
  if (msgq_any(q) && actor_run_queue_here(a) == ACTOR_TURN_BUSY) ring_for(s, q, bell);
}

void api_guest_settle(schedrun_t *s, actor_t *sched) { settle(s, sched, &s->core.to_scheduler, s->outbox); }

void api_guests_close(schedrun_t *s) {
  atomic_store(&s->sched_open, false);
  while (atomic_load(&s->sched_guests) > 0) sched_yield();
}

/* A lone job, run here: this thread polls the scheduler's queue, every
 * device's and the completion queue while the scheduler places the job and
 * the execute actor runs it, so that neither the EXECUTE, nor the EXECUTED,
 * nor the COMPLETE rings anyone; then it runs or rings what each holds. */
static void run_here(schedrun_t *s, actor_t *sched, uint64_t until_ns) {
  msg_queue *sq = &s->core.to_scheduler, *cq = &s->core.to_client;
  int n = s->core.ndevices;
  for (int d = 0; d < n; d++) msgq_poll_begin(&s->core.to_execute[d]);
  msgq_poll_begin(cq);
  actor_run_queue_here(sched); /* placed: its EXECUTE is queued for its device */
  for (int d = 0; d < n; d++)
    if (execute_has_posted(s->execute[d])) execute_run_here(s->execute[d], until_ns); /* collected, then the queue run */
    else if (msgq_any(&s->core.to_execute[d])) actor_run_queue_here(s->execute[d]);
  for (int d = 0; d < n; d++) {
    msg_queue *q = &s->core.to_execute[d];
    msgq_poll_end(q);
    /* a device whose posted job outlasted until_ns is still that job's:
     * what is queued behind it is its thread's, not this (timed) wait's */
    if (execute_has_posted(s->execute[d])) ring_for(s, q, s->execute_bell[d]);
    else settle(s, s->execute[d], q, s->execute_bell[d]);
  }
  msgq_poll_end(sq);
  api_guest_settle(s, sched); /* the EXECUTED */
  msgq_poll_end(cq);
  if (msgq_any(cq)) api_drain_completions(s, false); /* the COMPLETE: filed for the wait */
}

/* Whether every device's queue is empty now, and nothing posted waits. */
static bool devices_idle(schedrun_t *s) {
  for (int d = 0; d < s->core.ndevices; d++)
    if (msgq_any(&s->core.to_execute[d]) || execute_has_posted(s->execute[d])) return false;
  return true;
}

/* A lone job placed here, and posted to its device by this thread
 * (execute_post_here): it runs while the caller goes on, and nobody's
 * thread is woken for it. A device that cannot post it, or whose turn is
 * busy, has its actor rung instead. */
static void place_and_post(schedrun_t *s, actor_t *sched) {
  msg_queue *sq = &s->core.to_scheduler;
  int n = s->core.ndevices;
  for (int d = 0; d < n; d++) msgq_poll_begin(&s->core.to_execute[d]);
  actor_run_queue_here(sched); /* placed: its EXECUTE is queued for its device */
  for (int d = 0; d < n; d++) {
    msg_queue *q = &s->core.to_execute[d];
    if (msgq_any(q)) execute_post_here(s->execute[d]);
    msgq_poll_end(q);
    ring_for(s, q, s->execute_bell[d]); /* what is still there (or came meanwhile) is the thread's */
  }
  msgq_poll_end(sq);
  api_guest_settle(s, sched);
}

void api_guest_hold(schedrun_t *s, guest_round *g) {
  g->sched = api_guest_enter(s);
  g->run = g->sched && devices_idle(s);
  if (!g->sched) return;
  /* ours to run: what is pushed meanwhile rings nobody */
  if (g->run) {
    for (int d = 0; d < s->core.ndevices; d++) msgq_poll_begin(&s->core.to_execute[d]);
    msgq_poll_begin(&s->core.to_client);
  }
  msgq_poll_begin(&s->core.to_scheduler);
}

void api_guest_unhold(schedrun_t *s, guest_round *g) {
  if (!g->sched) return;
  if (g->run) {
    actor_run_queue_here(g->sched); /* placed: their EXECUTEs queued */
    /* the first device with work runs it here; the others' threads are
     * rung for theirs, so that the devices still run side by side */
    int here = -1;
    for (int d = 0; d < s->core.ndevices && here < 0; d++)
      if (msgq_any(&s->core.to_execute[d]) && actor_run_queue_here(s->execute[d]) == ACTOR_TURN_RAN) here = d;
    for (int d = 0; d < s->core.ndevices; d++) {
      msg_queue *q = &s->core.to_execute[d];
      msgq_poll_end(q);
      if (d == here) settle(s, s->execute[d], q, s->execute_bell[d]);
      else ring_for(s, q, s->execute_bell[d]);
    }
  }
  msgq_poll_end(&s->core.to_scheduler);
  api_guest_settle(s, g->sched);
  if (g->run) {
    msg_queue *cq = &s->core.to_client;
    msgq_poll_end(cq);
    if (msgq_any(cq)) api_drain_completions(s, false);
  }
  api_guest_leave(s);
}

bool api_guest_run_queued(schedrun_t *s, bool queued_too, uint64_t until_ns) {
  actor_t *sched = api_guest_enter(s);
  if (!sched) return false;
  bool queued = false;
  for (int d = 0; d < s->core.ndevices && !queued; d++)
    queued = execute_has_posted(s->execute[d]) || (queued_too && msgq_any(&s->core.to_execute[d]));
  if (queued) {
    msgq_poll_begin(&s->core.to_scheduler); /* run_here ends this poll */
    run_here(s, sched, until_ns);
  }
  api_guest_leave(s);
  return queued;
}

int api_send_submit(schedrun_t *s, msg *m, submit_how how, schedrun_error_t *err) {
  bool ring = false;
  int rc = SCHEDRUN_OK;
  msg_queue *q = &s->core.to_scheduler;
  /* nothing may follow the shutdown's TERM: the scheduler reads no further */
  pthread_mutex_lock(&s->send_lock);
  if (s->term_sent) {
    pthread_mutex_unlock(&s->send_lock);
    return err_set(err, SCHEDRUN_ECLOSED, "the scheduler is shut down");
  }
  if (s->core.no_batching) {
    rc = mbox_send(s->outbox, m, err);
    pthread_mutex_unlock(&s->send_lock);
    return rc;
  }
  /* Only a lone job: with others in flight, the scheduler's thread places
   * and dispatches beside this one, in batches, while the caller goes on
   * submitting (running the scheduler here cost a third of the throughput
   * of jobs submitted one by one). */
  actor_t *sched = how != SUBMIT_QUEUE ? api_guest_enter(s) : NULL;
  if (sched) msgq_poll_begin(q); /* ours to run: the push rings nobody */
  rc = msgq_push(q, m, &ring, err);
  if (sched) {
    pthread_mutex_unlock(&s->send_lock);
    if (rc == SCHEDRUN_OK && how == SUBMIT_RUN_HERE) {
      run_here(s, sched, 0);
    } else if (rc == SCHEDRUN_OK && how == SUBMIT_POST_HERE && devices_idle(s)) {
      place_and_post(s, sched);
    } else {
      msgq_poll_end(q);
      api_guest_settle(s, sched);
    }
    api_guest_leave(s);
    return rc;
  }
  if (rc || !ring) {
    pthread_mutex_unlock(&s->send_lock);
    return rc;
  }
  rc = ring_locked(s->outbox, q, m->job, err);
  pthread_mutex_unlock(&s->send_lock);
  return rc;
}

int schedrun_submit_wait(schedrun_t *s, schedrun_program_t *p, const schedrun_job_options_t *o,
                         schedrun_job_result_t **out, schedrun_error_t *err) {
  if (out) *out = NULL;
  if (!s || !p || !out)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit_wait: %s is NULL",
                   !s ? "the scheduler" : !p ? "the program" : "out");
  if (api_on_completer(s))
    return err_set(err, SCHEDRUN_EDEADLK, "schedrun_submit_wait: called from a completion callback, whose "
                                          "thread delivers the result it would wait for");
  if (o && o->on_complete)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit_wait: the result is returned here, so on_complete "
                                         "must be NULL");
  schedrun_job_options_t d;
  schedrun_job_options_init(&d);
  schedrun_job_t id;
  int rc = api_submit(s, p, o ? o : &d, 0, false, true, &id, err);
  return rc ? rc : schedrun_wait(s, id, -1, out, err);
}
