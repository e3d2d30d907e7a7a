/* A queue beside a mailbox, on a ZeroMQ socket pair of its own. See actor.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "actors/actor.h"
#include "actors/zmq_hb.h"

/* Messages up to this size are copied into a ZeroMQ message (one
 * allocation of ZeroMQ's, none at all up to its 33-byte inline size) and
 * the encoder's buffer is kept; bigger ones (outputs) hand ZeroMQ the
 * encoder's buffer itself. */
#define COPY_MAX (64u << 10)
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
  free(q->buf);
  memset(q, 0, sizeof *q);
}

static void free_buf(void *data, void *hint) {
  (void)hint;
  free(data);
}

/* The encoded message (q->buf, len bytes) as a ZeroMQ message (lock held). */
static int wrap(msg_queue *q, size_t len, zmq_msg_t *zm) {
  if (len > COPY_MAX) {
    if (zmq_msg_init_data(zm, q->buf, len, free_buf, NULL) != 0) return -1;
    q->buf = NULL; /* ZeroMQ's now: freed by whoever closes the last copy */
    q->cap = 0;
    return 0;
  }
  if (zmq_msg_init_size(zm, len) != 0) return -1;
  memcpy(zmq_msg_data(zm), q->buf, len);
  return 0;
}

int msgq_push(msg_queue *q, const msg *m, bool *ring, schedrun_error_t *err) {
  *ring = false;
  pthread_mutex_lock(&q->lock);
  size_t len = 0;
  int rc = q->push ? msg_encode_append(m, &q->buf, &len, &q->cap, err)
                   : err_set(err, SCHEDRUN_ECLOSED, "the queue for %s is closed", msg_type_name(m->type));
  zmq_msg_t zm;
  if (rc == SCHEDRUN_OK && wrap(q, len, &zm) != 0)
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory queueing %s", msg_type_name(m->type));
  if (rc == SCHEDRUN_OK) {
    HB_SEND(zmq_msg_data(&zm));
    /* no high-water mark, inproc: a send to the open queue never waits */
    while (zmq_msg_send(&zm, q->push, 0) < 0) {
      if (zmq_errno() == EINTR) continue;
      rc = err_set(err, SCHEDRUN_ECLOSED, "queue %s: %s", msg_type_name(m->type), zmq_strerror(zmq_errno()));
      zmq_msg_close(&zm);
      break;
    }
  }
  if (rc == SCHEDRUN_OK) {
    msg_tally_sent(m);
    /* queued, then pollers; a poller stops in the other order (both
     * sequentially consistent), so one of the two sees the other */
    atomic_fetch_add(&q->queued, 1);
    *ring = !q->rung && atomic_load(&q->pollers) == 0;
    if (*ring) q->rung = true;
  }
  pthread_mutex_unlock(&q->lock);
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

size_t msgq_drain(msg_queue *q, bool (*fn)(void *ctx, msg *m), void *ctx) {
  size_t bad = 0;
  pthread_mutex_lock(&q->take_lock);
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
    HB_RECV(zmq_msg_data(&zm));
    msg one;
    schedrun_error_t err = {0};
    int rc = msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), &one, &err);
    zmq_msg_close(&zm);
    schedrun_error_clear(&err);
    if (rc != SCHEDRUN_OK || !fn(ctx, &one)) bad++;
    msg_free(&one);
  }
  pthread_mutex_unlock(&q->take_lock);
  return bad;
}
