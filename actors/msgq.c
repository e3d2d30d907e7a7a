/* A queue beside a mailbox, on a ZeroMQ socket pair of its own. See actor.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "actors/actor.h"

/* A taker asks for a message the count says is there; if the socket has
 * not shown it yet (it never has), it waits this long for it. */
#define TAKE_WAIT_MS 1000

void msgq_init(msg_queue *q) {
  memset(q, 0, sizeof *q);
  pthread_mutex_init(&q->lock, NULL);
  pthread_mutex_init(&q->take_lock, NULL);
}

int msgq_open(msg_queue *q, void *zctx, const char *name, schedrun_error_t *err) {
  char ep[48];
  snprintf(ep, sizeof ep, "q.%s", name);
  q->pull = mbox_bind(zctx, ep, err);
  q->push = q->pull ? mbox_connect(zctx, ep, err) : NULL;
  if (!q->push) {
    msgq_close(q);
    return err && err->code ? err->code : SCHEDRUN_EINTERNAL;
  }
  return SCHEDRUN_OK;
}

static void close_now(void *sock) {
  if (!sock) return;
  int zero = 0;
  zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
  zmq_close(sock);
}

void msgq_close(msg_queue *q) {
  /* the receiving end first: what is left in the pipe goes with it */
  close_now(q->pull);
  close_now(q->push);
  q->pull = q->push = NULL;
}

void msgq_destroy(msg_queue *q) {
  msgq_close(q);
  pthread_mutex_destroy(&q->lock);
  pthread_mutex_destroy(&q->take_lock);
  memset(q, 0, sizeof *q);
}

int msgq_push(msg_queue *q, const msg *m, bool *ring, schedrun_error_t *err) {
  *ring = false;
  zmq_msg_t zm;
  int rc = mbox_encode(m, &zm, err);
  if (rc) return rc;
  pthread_mutex_lock(&q->lock);
  if (!q->push) {
    rc = err_set(err, SCHEDRUN_ECLOSED, "the queue for %s is closed", msg_type_name(m->type));
  } else {
    /* no high-water mark, inproc: a send to the open queue never waits */
    while (zmq_msg_send(&zm, q->push, 0) < 0) {
      if (zmq_errno() == EINTR) continue;
      rc = err_set(err, SCHEDRUN_ECLOSED, "queue %s: %s", msg_type_name(m->type), zmq_strerror(zmq_errno()));
      break;
    }
  }
  if (rc == SCHEDRUN_OK) {
    /* queued, then pollers; a poller stops in the other order (both
     * sequentially consistent), so one of the two sees the other */
    atomic_fetch_add(&q->queued, 1);
    *ring = !q->rung && atomic_load(&q->pollers) == 0;
    if (*ring) q->rung = true;
  }
  pthread_mutex_unlock(&q->lock);
  if (rc) zmq_msg_close(&zm);
  else msg_tally_sent(m);
  return rc;
}

bool msgq_any(msg_queue *q) { return atomic_load(&q->queued) != 0; }
void msgq_poll_begin(msg_queue *q) { atomic_fetch_add(&q->pollers, 1); }
void msgq_poll_end(msg_queue *q) { atomic_fetch_sub(&q->pollers, 1); }

bool msgq_claim_ring(msg_queue *q) {
  pthread_mutex_lock(&q->lock);
  bool ring = atomic_load(&q->queued) && !q->rung;
  if (ring) q->rung = true;
  pthread_mutex_unlock(&q->lock);
  return ring;
}

void msgq_unring(msg_queue *q) {
  pthread_mutex_lock(&q->lock);
  q->rung = false;
  pthread_mutex_unlock(&q->lock);
}

/* One message the count says was sent (take_lock held): 0, or -1 when the
 * socket does not give it. */
static int take_one(msg_queue *q, zmq_msg_t *zm) {
  for (;;) {
    if (zmq_msg_recv(zm, q->pull, ZMQ_DONTWAIT) >= 0) return 0;
    if (zmq_errno() == EINTR) continue;
    if (zmq_errno() != EAGAIN) return -1;
    zmq_pollitem_t it = {q->pull, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, TAKE_WAIT_MS) == 0) return -1;
  }
}

/* Takes what is counted now (take_lock held). */
static size_t take_counted(msg_queue *q, bool (*fn)(void *ctx, msg *m), void *ctx) {
  size_t bad = 0;
  pthread_mutex_lock(&q->lock);
  q->rung = false;
  /* what was counted was sent before (both under lock): it is in the pipe,
   * in order, ahead of anything sent after */
  size_t n = q->pull ? atomic_exchange(&q->queued, 0) : 0;
  pthread_mutex_unlock(&q->lock);
  for (size_t k = 0; k < n; k++) {
    zmq_msg_t zm;
    zmq_msg_init(&zm);
    if (take_one(q, &zm) != 0) {
      zmq_msg_close(&zm);
      bad += n - k;
      break;
    }
    msg one;
    if (mbox_decode(&zm, &one) != SCHEDRUN_OK || !fn(ctx, &one)) bad++;
    msg_free(&one);
  }
  return bad;
}

/* One taker at a time takes; one that finds another taking leaves its
 * wish in `again` and returns at once, and the holder, after it lets go,
 * takes again for it (the holder's look at `again` follows its unlock, and
 * the other's trylock follows its store: one of the two sees the other).
 * A waiting caller and the completion thread both take completions: neither
 * sleeps on the other's lock while it files. */
size_t msgq_drain(msg_queue *q, bool (*fn)(void *ctx, msg *m), void *ctx) {
  size_t bad = 0;
  atomic_store(&q->again, true);
  while (atomic_load(&q->again)) {
    if (pthread_mutex_trylock(&q->take_lock) != 0) return bad;
    atomic_store(&q->again, false);
    bad += take_counted(q, fn, ctx);
    pthread_mutex_unlock(&q->take_lock);
  }
  return bad;
}
