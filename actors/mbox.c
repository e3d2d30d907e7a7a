/*
 * Mailboxes: the inproc ZeroMQ sockets actors and the library talk on, and
 * the msgpack encoding of the messages they carry (see actor.h). actor.c
 * runs actors over them.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "actors/actor.h"
#include "common/spin_gauge.h"

/* ThreadSanitizer cannot see inside libzmq (not instrumented), so it misses
 * the happens-before edge a message carries from sender to receiver and
 * reports the receiver's reads of the message's bytes, and of what the
 * sender wrote before sending, as races. These annotations state that edge
 * twice: on the message's bytes (a heap buffer both sides see at one
 * address), and on a token per message type, because ZeroMQ keeps a small
 * message inside the zmq_msg_t itself, a different address on each side.
 * They compile to nothing in other builds. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char hb_token[MSG__END];
#define HB_SEND(p) __tsan_release(p)
#define HB_RECV(p) __tsan_acquire(p)
/* t: a type the codec accepted (an encoded or a decoded message's) */
#define HB_SEND_TYPE(t) __tsan_release(&hb_token[t])
#define HB_RECV_TYPE(t) __tsan_acquire(&hb_token[t])
#else
#define HB_SEND(p) ((void)(p))
#define HB_RECV(p) ((void)(p))
#define HB_SEND_TYPE(t) ((void)(t))
#define HB_RECV_TYPE(t) ((void)(t))
#endif

#define LINGER_MS 1000
#define SEND_TIMEOUT_MS 200

static void *new_socket(void *zctx, int type, schedrun_error_t *err) {
  void *s = zmq_socket(zctx, type);
  if (!s) {
    err_set(err, SCHEDRUN_EINTERNAL, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    return NULL;
  }
  int zero = 0, linger = LINGER_MS;
  /* No high-water mark: a full pipe between two actors that send to each
   * other would block both. Memory bounds the queues instead. */
  zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof zero);
  zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof zero);
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  return s;
}

static void endpoint(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "inproc://%s", name);
}

void *mbox_bind(void *zctx, const char *name, schedrun_error_t *err) {
  void *s = new_socket(zctx, ZMQ_PULL, err);
  if (!s) return NULL;
  char ep[64];
  endpoint(ep, sizeof ep, name);
  /* a socket that had this name and was just closed releases it
   * asynchronously (ZeroMQ's reaper thread): give it a moment */
  int rc;
  for (int tries = 0; (rc = zmq_bind(s, ep)) != 0 && zmq_errno() == EADDRINUSE && tries < 2000; tries++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (rc != 0) {
    err_set(err, SCHEDRUN_EINTERNAL, "zmq_bind %s: %s", ep, zmq_strerror(zmq_errno()));
    zmq_close(s);
    return NULL;
  }
  return s;
}

void *mbox_connect(void *zctx, const char *name, schedrun_error_t *err) {
  void *s = new_socket(zctx, ZMQ_PUSH, err);
  if (!s) return NULL;
  /* A send never blocks for long: with no high-water mark and inproc pipes a
   * send to a live peer is immediate, and a peer that has already stopped (an
   * answer racing a shutdown) must not hold the sender forever. */
  int timeout = SEND_TIMEOUT_MS;
  zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
  char ep[64];
  endpoint(ep, sizeof ep, name);
  if (zmq_connect(s, ep) != 0) {
    err_set(err, SCHEDRUN_EINTERNAL, "zmq_connect %s: %s", ep, zmq_strerror(zmq_errno()));
    zmq_close(s);
    return NULL;
  }
  return s;
}

void mbox_close(void *sock) {
  if (sock) zmq_close(sock);
}

static void free_buf(void *data, void *hint) {
  (void)hint;
  free(data);
}

/* The tickets a message's bytes lent (msg.h, "Lent bytes"), kept with the
 * ZeroMQ message: when ZeroMQ lets go of it (after the receiver decoded it,
 * or undelivered), blocks nobody claimed are freed. */
typedef struct lent_hint {
  size_t n;
  uint64_t tickets[];
} lent_hint;

static void free_lent(void *data, void *hint) {
  lent_hint *h = hint;
  for (size_t i = 0; i < h->n; i++) msg_reclaim(h->tickets[i]);
  free(h);
  free(data);
}

/* ---- the encoder's buffer: the calling thread's, kept from message to
 * message ---- */

typedef struct scratch {
  uint8_t *buf;
  size_t cap;
  msg_lending lent;
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p) {
  scratch *sc = p;
  free(sc->buf);
  free(sc->lent.v);
  free(sc);
}

static void scratch_key_init(void) {
  if (pthread_key_create(&scratch_key, scratch_free) != 0) scratch_key = (pthread_key_t)-1;
}

static scratch *thread_scratch(void) {
  pthread_once(&scratch_once, scratch_key_init);
  if (scratch_key == (pthread_key_t)-1) return NULL;
  scratch *sc = pthread_getspecific(scratch_key);
  if (!sc && (sc = calloc(1, sizeof *sc)) && pthread_setspecific(scratch_key, sc) != 0) {
    free(sc);
    sc = NULL;
  }
  return sc;
}

int mbox_encode(msg *m, zmq_msg_t *zm, schedrun_error_t *err) {
  scratch *sc = thread_scratch();
  if (!sc) return err_set(err, SCHEDRUN_ENOMEM, "out of memory sending %s", msg_type_name(m->type));
  size_t len = 0;
  int rc = msg_encode_append(m, &sc->buf, &len, &sc->cap, &sc->lent, err);
  if (rc) return rc;
  if (sc->lent.n) {
    /* the bytes carry tickets: a copy of its own, with them as its hint */
    lent_hint *h = malloc(sizeof *h + sc->lent.n * sizeof h->tickets[0]);
    uint8_t *copy = h ? malloc(len) : NULL;
    if (copy) {
      h->n = sc->lent.n;
      for (size_t i = 0; i < h->n; i++) h->tickets[i] = sc->lent.v[i].ticket;
      memcpy(copy, sc->buf, len);
    }
    if (!copy || zmq_msg_init_data(zm, copy, len, free_lent, h) != 0) {
      free(copy);
      free(h);
      msg_lending_return(&sc->lent); /* back into m, as if never encoded */
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory sending %s", msg_type_name(m->type));
    }
  } else if (len > MBOX_COPY_MAX) {
    if (zmq_msg_init_data(zm, sc->buf, len, free_buf, NULL) != 0)
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory sending %s", msg_type_name(m->type));
    /* ZeroMQ's now: freed by whoever closes the last copy. The next message
     * of this thread is likely as big: its buffer starts at this size rather
     * than growing from nothing again, unless that is more than a batch's */
    sc->buf = sc->cap <= MBOX_KEEP_MAX ? malloc(sc->cap) : NULL;
    if (!sc->buf) sc->cap = 0;
  } else {
    if (zmq_msg_init_size(zm, len) != 0)
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory sending %s", msg_type_name(m->type));
    memcpy(zmq_msg_data(zm), sc->buf, len);
  }
  HB_SEND(zmq_msg_data(zm));
  HB_SEND_TYPE(m->type);
  return SCHEDRUN_OK;
}

void mbox_unsent(zmq_msg_t *zm, msg *m) {
  msg_unlend(m, zmq_msg_data(zm), zmq_msg_size(zm));
  zmq_msg_close(zm);
}

int mbox_decode(zmq_msg_t *zm, msg *m) {
  HB_RECV(zmq_msg_data(zm));
  schedrun_error_t e = {0};
  int rc = msg_decode_local(zmq_msg_data(zm), zmq_msg_size(zm), m, &e);
  if (rc == SCHEDRUN_OK) HB_RECV_TYPE(m->type);
  zmq_msg_close(zm);
  schedrun_error_clear(&e);
  return rc;
}

int mbox_send(void *sock, msg *m, schedrun_error_t *err) {
  zmq_msg_t zm;
  int rc = mbox_encode(m, &zm, err);
  if (rc) return rc;
  for (;;) {
    if (zmq_msg_send(&zm, sock, 0) >= 0) {
      msg_tally_sent(m);
      return SCHEDRUN_OK;
    }
    if (zmq_errno() == EINTR) continue;
    int e = zmq_errno();
    msg_tally_unsent(m->type);
    mbox_unsent(&zm, m);
    if (e == EAGAIN)
      return err_set(err, SCHEDRUN_ECLOSED, "send %s: no one is receiving (the peer has stopped)",
                     msg_type_name(m->type));
    return err_set(err, e == ETERM ? SCHEDRUN_ECLOSED : SCHEDRUN_EINTERNAL, "send %s: %s",
                   msg_type_name(m->type), zmq_strerror(e));
  }
}

/* Takes one message if there is one now: 1 taken, 0 none, -1 failed. */
static int take_now(void *sock, zmq_msg_t *zm) {
  if (zmq_msg_recv(zm, sock, ZMQ_DONTWAIT) >= 0) return 1;
  return zmq_errno() == EAGAIN || zmq_errno() == EINTR ? 0 : -1;
}

int mbox_recv(void *sock, int timeout_ms, msg *m, uint64_t *malformed, schedrun_error_t *err) {
  return mbox_recv_spin(sock, timeout_ms, 0, NULL, NULL, 0, m, malformed, err);
}

int mbox_recv_spin(void *sock, int timeout_ms, uint64_t spin_ns, msg_queue *q, const int *fds, int nfds, msg *m,
                   uint64_t *malformed, schedrun_error_t *err) {
  assert(nfds >= 0 && nfds <= ACTOR_WAKE_FDS);
  uint64_t start = now_ns();
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000ull;
  for (;;) {
    zmq_msg_t zm;
    zmq_msg_init(&zm);
    /* Spin a moment before sleeping: in a pipeline the next message is often
     * microseconds away, and waking a sleeping thread costs more than that.
     * Meanwhile the queue is ours to watch: pushes to it do not ring. */
    if (q && msgq_any(q)) {
      zmq_msg_close(&zm);
      return SCHEDRUN_EAGAIN;
    }
    int got = take_now(sock, &zm);
    uint64_t look = now_ns();
    bool spin = spin_ns && spin_gauge_may_spin(&spin_gauge_process, look);
    bool polling = got == 0 && spin && q;
    if (polling) msgq_poll_begin(q);
    while (got == 0 && spin && look - start < spin_ns && look < deadline) {
      if (q && msgq_any(q)) break;
      spin = spin_gauge_yield(&spin_gauge_process, &look, now_ns); /* false: the core went elsewhere */
      got = take_now(sock, &zm);
    }
    /* no longer watching: a push now rings, and one that came before this
     * saw the watch and rang nobody, so look once more */
    if (polling) msgq_poll_end(q);
    if (got == 0 && q && msgq_any(q)) {
      zmq_msg_close(&zm);
      return SCHEDRUN_EAGAIN;
    }
    while (got == 0) {
      uint64_t now = now_ns();
      if (now >= deadline) {
        zmq_msg_close(&zm);
        return err_set(err, SCHEDRUN_ETIMEOUT, "no message within %d ms", timeout_ms);
      }
      long wait = timeout_ms < 0 ? -1 : (long)((deadline - now + 999999) / 1000000);
      zmq_pollitem_t it[1 + ACTOR_WAKE_FDS] = {{sock, 0, ZMQ_POLLIN, 0}};
      for (int i = 0; i < nfds; i++) it[1 + i] = (zmq_pollitem_t){NULL, fds[i], ZMQ_POLLIN, 0};
      int n = zmq_poll(it, 1 + nfds, wait);
      if (n < 0 && zmq_errno() != EINTR) {
        zmq_msg_close(&zm);
        return err_set(err, SCHEDRUN_EINTERNAL, "zmq_poll: %s", zmq_strerror(zmq_errno()));
      }
      got = take_now(sock, &zm);
      for (int i = 0; got == 0 && n > 0 && i < nfds; i++)
        if (it[1 + i].revents) {
          zmq_msg_close(&zm);
          return SCHEDRUN_EAGAIN;
        }
    }
    if (got < 0) {
      int e = zmq_errno();
      zmq_msg_close(&zm);
      return err_set(err, SCHEDRUN_ECLOSED, "receive: %s", zmq_strerror(e));
    }
    if (mbox_decode(&zm, m) == SCHEDRUN_OK) return SCHEDRUN_OK;
    if (malformed) (*malformed)++;
    start = now_ns();
  }
}
