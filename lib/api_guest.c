/*
 * The caller's thread as the scheduler's guest (actors/actor.h, "guests").
 *
 * A job's SUBMIT is queued for the scheduler, and a thread waiting for
 * results polls the scheduler's queue beside the completion queue. When the
 * scheduler's turn is free, the calling thread runs the scheduler's handler
 * on what is queued itself: the job is placed and its EXECUTE queued for the
 * device before schedrun_submit returns, and the EXECUTED that the execute
 * actor sends back is handled by the thread waiting for the job's result.
 * A lone job then crosses no scheduler thread at all, and that thread, idle,
 * sleeps instead of spinning beside the caller for a core.
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

void api_guest_settle(schedrun_t *s, actor_t *sched) {
  msg_queue *q = &s->core.to_scheduler;
  if (!msgq_any(q) || actor_run_queue_here(sched) != ACTOR_TURN_BUSY) return;
  /* another guest or the scheduler's thread holds the turn and may have
   * looked at the queue before what came while we polled: ring */
  if (!msgq_claim_ring(q)) return;
  msg bell;
  msg_init(&bell, MSG_QUEUED, 0, ACTOR_CLIENT);
  pthread_mutex_lock(&s->send_lock);
  int rc = mbox_send(s->outbox, &bell, NULL);
  pthread_mutex_unlock(&s->send_lock);
  msg_free(&bell);
  if (rc) msgq_unring(q);
}

void api_guests_close(schedrun_t *s) {
  atomic_store(&s->sched_open, false);
  while (atomic_load(&s->sched_guests) > 0) sched_yield();
}
