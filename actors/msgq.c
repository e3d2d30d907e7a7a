/* A queue beside a mailbox, on a ZeroMQ socket pair of its own. See actor.h. */
#include <assert.h>
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
  for (int c = 0; c < MSG_SUBMIT_COLUMNS; c++) free(q->gather.cols[c]); /* its jobs go with the pipe */
  pthread_mutex_destroy(&q->lock);
  pthread_mutex_destroy(&q->take_lock);
  memset(q, 0, sizeof *q);
}

/* Sends zm (lock held) and counts it. */
static int send_locked(msg_queue *q, zmq_msg_t *zm, int type, schedrun_error_t *err) {
  /* no high-water mark, inproc: a send to the open queue never waits */
  while (zmq_msg_send(zm, q->push, 0) < 0) {
    if (zmq_errno() == EINTR) continue;
    return err_set(err, SCHEDRUN_ECLOSED, "queue %s: %s", msg_type_name(type), zmq_strerror(zmq_errno()));
  }
  /* queued, then pollers; a poller stops in the other order (both
   * sequentially consistent), so one of the two sees the other */
  atomic_fetch_add(&q->queued, 1);
  return SCHEDRUN_OK;
}

/* The gathered jobs as one SUBMIT_MANY, whose columns are the gather's
 * (the message owns nothing: not for msg_free). */
static void gathered_msg(msgq_gather *g, msg *m) {
  memset(m, 0, sizeof *m);
  m->v = MSG_VERSION;
  m->type = MSG_SUBMIT_MANY;
  m->job = g->job;
  m->from = g->from;
  msg_u64s *cols[MSG_SUBMIT_COLUMNS];
  msg_submit_columns(&m->body.submit_many, cols);
  for (int c = 0; c < MSG_SUBMIT_COLUMNS; c++) *cols[c] = (msg_u64s){g->cols[c], g->n};
}

/* Sends what was gathered as one SUBMIT_MANY (lock held, g->n > 0): an
 * error (and the jobs still gathered) when it cannot be encoded or sent. */
static int seal(msg_queue *q, schedrun_error_t *err) {
  msgq_gather *g = &q->gather;
  assert(g->n > 0 && atomic_load(&q->queued) > 0); /* a taker is coming for them */
  msg m;
  gathered_msg(g, &m);
  zmq_msg_t zm;
  int rc = mbox_encode(&m, &zm, err);
  if (rc) return rc;
  if ((rc = send_locked(q, &zm, MSG_SUBMIT_MANY, err)) != SCHEDRUN_OK) {
    zmq_msg_close(&zm);
    return rc;
  }
  msg_tally_add(MSG_SUBMIT_MANY, g->n);
  g->n = 0;
  return SCHEDRUN_OK;
}

/* Whether a SUBMIT may wait in a gather: no data, of this version, from a
 * short name. */
static bool gatherable(const msg *m) {
  const msg_submit *sb = &m->body.submit;
  return m->type == MSG_SUBMIT && m->v == MSG_VERSION && !sb->inputs.n && !sb->park.n && !sb->takes.n &&
         m->from && strlen(m->from) < sizeof ((msgq_gather *)0)->from;
}

/* Adds a SUBMIT to the gather (lock held, something queued): *added, or
 * not when there is no memory for it. What was gathered before and cannot
 * go with it (another sender, a job out of sequence, a full gather) is
 * sent first. */
static int gather_add(msg_queue *q, const msg *m, bool *added, schedrun_error_t *err) {
  msgq_gather *g = &q->gather;
  *added = false;
  if (g->n && (g->n == MSGQ_GATHER_JOBS || m->job != g->job + g->n || strcmp(m->from, g->from) != 0)) {
    int rc = seal(q, err);
    if (rc) return rc;
  }
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 64;
    for (int c = 0; c < MSG_SUBMIT_COLUMNS; c++) {
      uint64_t *p = realloc(g->cols[c], cap * sizeof *p);
      if (!p) return g->n ? seal(q, err) : SCHEDRUN_OK; /* this one then goes alone */
      g->cols[c] = p;
    }
    g->cap = cap;
  }
  if (g->n == 0) {
    g->job = m->job;
    str_copy(g->from, sizeof g->from, m->from);
  }
  uint64_t v[MSG_SUBMIT_COLUMNS];
  msg_submit_values(&m->body.submit, v);
  for (int c = 0; c < MSG_SUBMIT_COLUMNS; c++) g->cols[c][g->n] = v[c];
  g->n++;
  *added = true;
  return SCHEDRUN_OK;
}

int msgq_push(msg_queue *q, msg *m, bool *ring, schedrun_error_t *err) {
  *ring = false;
  bool may_gather = gatherable(m), gathered = false;
  zmq_msg_t zm;
  /* encoded and copied into a ZeroMQ message before the lock, unless it may
   * join a gather */
  int rc = may_gather ? SCHEDRUN_OK : mbox_encode(m, &zm, err);
  if (rc) return rc;
  bool made = !may_gather;
  pthread_mutex_lock(&q->lock);
  if (!q->push) {
    rc = err_set(err, SCHEDRUN_ECLOSED, "the queue for %s is closed", msg_type_name(m->type));
  } else if (may_gather && atomic_load(&q->queued) > 0) {
    rc = gather_add(q, m, &gathered, err);
  } else if (q->gather.n) {
    rc = seal(q, err); /* what was gathered goes first */
  }
  if (rc == SCHEDRUN_OK && !gathered && !made) made = (rc = mbox_encode(m, &zm, err)) == SCHEDRUN_OK;
  if (rc == SCHEDRUN_OK && !gathered) rc = send_locked(q, &zm, m->type, err);
  if (rc == SCHEDRUN_OK) {
    /* a gathered job rings as a sent one would: for nothing, unless the
     * doorbell of what it waits behind could not be sent (msgq_unring) */
    *ring = !q->rung && atomic_load(&q->pollers) == 0;
    if (*ring) q->rung = true;
  }
  pthread_mutex_unlock(&q->lock);
  if (rc && made) mbox_unsent(&zm, m);
  else if (!rc && !gathered) msg_tally_sent(m);
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
  msg left = {0};
  char left_from[sizeof q->gather.from];
  pthread_mutex_lock(&q->lock);
  q->rung = false;
  /* what was gathered leaves now, behind what was counted before it; when
   * there is no memory to send it, this taker hands it on itself, after them */
  if (q->gather.n && q->pull && seal(q, NULL) != SCHEDRUN_OK) {
    gathered_msg(&q->gather, &left);
    memcpy(left_from, q->gather.from, sizeof left_from);
    left.from = left_from; /* the takers copy what they keep of a message */
    memset(q->gather.cols, 0, sizeof q->gather.cols); /* left's now */
    q->gather.n = q->gather.cap = 0;
  }
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
  if (left.type) {
    if (!fn(ctx, &left)) bad++;
    left.from = NULL; /* on the stack: not freed with it */
    msg_free(&left);
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
