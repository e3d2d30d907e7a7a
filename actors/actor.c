/* See actor.h. */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

#define MAX_PEERS 80
#define LINGER_MS 1000
#define SEND_TIMEOUT_MS 200


typedef struct peer {
  char name[32];
  void *sock;
} peer;

struct actor {
  void *zctx;
  const actor_def *def;
  char name[32];
  void *state;
  pthread_t thread;
  bool joined; /* actor_wait has joined the thread (the caller's) */
  void *mailbox;
  peer peers[MAX_PEERS];
  int npeers;
  _Atomic uint64_t malformed; /* read by other threads (schedrun_get_stats) */
  uint64_t spin_ns;
  msg_queue *queue; /* beside the mailbox, or NULL */
  /* The actor's turn: held while its handler runs, on its own thread or on
   * a guest's (actor_run_queue_here). Its state, its sockets and `stopped`
   * are touched only by the holder. */
  pthread_mutex_t turn;
  bool stopped; /* the handler said ACTOR_STOP: no message is handled again */
  _Atomic uint64_t guest_rounds; /* queue takes run by guests */
  _Atomic uint64_t wake_ns;      /* a TICK is due then (now_ns clock); 0: none */
  /* start handshake */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int started; /* 0 waiting, 1 running, -1 failed */
  schedrun_error_t start_err;
};

/* The actor whose own thread this is (NULL on other threads). */
static _Thread_local actor_t *own_thread_of;

void *actor_state(const actor_t *a) { return a->state; }
bool actor_on_own_thread(const actor_t *a) { return own_thread_of == a; }

void actor_wake_at(actor_t *self, uint64_t at_ns) {
  assert(at_ns != 0); /* 0 means no wake is due */
  uint64_t cur = atomic_load(&self->wake_ns);
  while ((cur == 0 || at_ns < cur) && !atomic_compare_exchange_weak(&self->wake_ns, &cur, at_ns)) {
  }
  if (cur != 0 && cur <= at_ns) return; /* an earlier TICK is due already */
  if (own_thread_of == self) return;    /* the thread reads it before it sleeps again */
  /* a guest: the thread may sleep on its mailbox with a later (or no) timeout */
  msg bell;
  msg_init(&bell, MSG_TICK, 0, self->name);
  actor_send(self, self->name, &bell);
  msg_free(&bell);
}

/* The TICK due now, if one is: taken (cleared) into *m. */
static bool take_tick(actor_t *a, msg *m, int *timeout_ms) {
  uint64_t wake = atomic_load(&a->wake_ns);
  *timeout_ms = -1;
  if (!wake) return false;
  uint64_t now = now_ns();
  if (now < wake) {
    uint64_t ms = (wake - now + 999999) / 1000000;
    *timeout_ms = ms > 3600000 ? 3600000 : (int)ms;
    return false;
  }
  /* one asked for meanwhile (earlier still) is due too: it stays, for the next look */
  atomic_compare_exchange_strong(&a->wake_ns, &wake, 0);
  msg_init(m, MSG_TICK, 0, a->name);
  return true;
}
const char *actor_name(const actor_t *a) { return a->name; }
uint64_t actor_malformed(const actor_t *a) { return atomic_load(&((actor_t *)a)->malformed); }
uint64_t actor_guest_rounds(const actor_t *a) { return atomic_load(&((actor_t *)a)->guest_rounds); }
void actor_count_malformed(actor_t *a) { atomic_fetch_add(&a->malformed, 1); }

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
    sc->buf = NULL; /* ZeroMQ's now: freed by whoever closes the last copy */
    sc->cap = 0;
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

int actor_send_error(actor_t *self, const char *to, uint64_t job, int code, const char *text,
                     const char *const *teardown, size_t nteardown) {
  msg m;
  msg_init(&m, MSG_ERROR, job, actor_name(self));
  msg_error *e = &m.body.error;
  e->code = code;
  e->origin = xstrdup(actor_name(self));
  e->job = job;
  e->text = xstrdup(text ? text : "");
  e->teardown.v = calloc(nteardown ? nteardown : 1, sizeof(char *));
  for (size_t i = 0; e->teardown.v && i < nteardown; i++) e->teardown.v[e->teardown.n++] = xstrdup(teardown[i]);
  int rc = actor_send(self, to, &m);
  msg_free(&m);
  return rc;
}

/* A message for a job could not be sent: the job still completes, with the
 * cause. A COMPLETE goes again without its outputs; a request the actor made
 * comes back to it as an ERROR (the scheduler then completes the job); a reply
 * goes to its recipient as an ERROR. */
static void undeliverable(actor_t *self, const char *to, const msg *m, int code, const char *why) {
  atomic_fetch_add(&self->malformed, 1);
  if (m->type == MSG_COMPLETE) {
    msg c;
    msg_init(&c, MSG_COMPLETE, m->job, self->name);
    c.body.complete = m->body.complete;
    memset(&c.body.complete.outputs, 0, sizeof c.body.complete.outputs);
    c.body.complete.status = code;
    c.body.complete.text = (char *)why;
    actor_send(self, to, &c);
    c.body.complete.text = NULL;
    msg_free(&c);
    return;
  }
  if (m->type == MSG_COMPLETE_MANY) {
    /* each job of the batch completes alone, with the cause */
    const msg_complete_many *b = &m->body.complete_many;
    for (size_t k = 0; k < b->jobs.n; k++) {
      msg c;
      msg_init(&c, MSG_COMPLETE, b->jobs.v[k], self->name);
      c.body.complete.status = code;
      c.body.complete.program = b->program;
      c.body.complete.device = b->device;
      c.body.complete.run = (uint32_t)b->runs.v[k];
      c.body.complete.job_index = (uint32_t)b->job_indexes.v[k];
      c.body.complete.text = (char *)why;
      actor_send(self, to, &c);
      c.body.complete.text = NULL;
      msg_free(&c);
    }
    return;
  }
  bool request = m->type == MSG_COMPILE || m->type == MSG_RECORD || m->type == MSG_EXECUTE || m->type == MSG_SUBMIT ||
                 m->type == MSG_SUBMIT_MANY || m->type == MSG_EXECUTE_MANY;
  char step[96];
  snprintf(step, sizeof step, "drop the %s that could not be sent", msg_type_name(m->type));
  const char *steps[] = {step};
  actor_send_error(self, request ? self->name : to, m->job, code, why, steps, 1);
}

int actor_send(actor_t *self, const char *to, msg *m) {
  peer *p = NULL;
  for (int i = 0; i < self->npeers; i++)
    if (strcmp(self->peers[i].name, to) == 0) p = &self->peers[i];
  if (!p) {
    if (self->npeers == MAX_PEERS) return SCHEDRUN_EINTERNAL;
    void *s = mbox_connect(self->zctx, to, NULL);
    if (!s) return SCHEDRUN_EINTERNAL;
    p = &self->peers[self->npeers++];
    str_copy(p->name, sizeof p->name, to);
    p->sock = s;
  }
  schedrun_error_t err = {0};
  int rc = mbox_send(p->sock, m, &err);
  if (rc && m->job && m->type != MSG_ERROR) undeliverable(self, to, m, rc, err.message ? err.message : "send failed");
  schedrun_error_clear(&err);
  return rc;
}

static void *actor_main(void *arg) {
  actor_t *a = arg;
  char title[16]; /* the thread's name in ps, top and debuggers: the actor's, cut to the kernel's 15 bytes */
  str_copy(title, sizeof title, a->name);
  pthread_setname_np(pthread_self(), title);
  schedrun_error_t err = {0};
  int rc = SCHEDRUN_OK;
  a->mailbox = mbox_bind(a->zctx, a->name, &err);
  if (!a->mailbox) rc = err.code ? err.code : SCHEDRUN_EINTERNAL;
  else if (a->def->start) rc = a->def->start(a, &err);
  pthread_mutex_lock(&a->lock);
  a->started = rc == SCHEDRUN_OK ? 1 : -1;
  if (rc) err_move(&a->start_err, &err);
  pthread_cond_signal(&a->cond);
  pthread_mutex_unlock(&a->lock);
  if (rc == SCHEDRUN_OK) {
    own_thread_of = a;
    bool spin = true; /* no spin after a wake descriptor's TICK: no message is on its way */
    for (;;) {
      msg m;
      uint64_t dropped = 0;
      int timeout_ms, got = SCHEDRUN_OK;
      if (!take_tick(a, &m, &timeout_ms)) {
        int fds[ACTOR_WAKE_FDS];
        int nfds = a->def->wake_fds ? a->def->wake_fds(a, fds) : 0;
        got = mbox_recv_spin(a->mailbox, timeout_ms, spin ? a->spin_ns : 0, a->queue, fds, nfds, &m, &dropped, NULL);
        if (got == SCHEDRUN_ETIMEOUT) continue; /* the TICK is due: the next look takes it */
      }
      if (dropped) atomic_fetch_add(&a->malformed, dropped);
      bool fd_tick = false;
      if (got == SCHEDRUN_EAGAIN) {
        /* the queue has messages: as if its doorbell had rung; or a wake
         * descriptor is readable: a TICK */
        fd_tick = !(a->queue && msgq_any(a->queue));
        msg_init(&m, fd_tick ? MSG_TICK : MSG_QUEUED, 0, a->name);
        got = SCHEDRUN_OK;
      }
      if (got != SCHEDRUN_OK) break;
      spin = !fd_tick;
      if (fd_tick && a->def->woken) a->def->woken(a);
      if (fd_tick && pthread_mutex_trylock(&a->turn) != 0) {
        /* a guest holds the turn (and sees to it): waiting behind guests
         * that take it job after job would wake this thread at each */
        msg_free(&m);
        continue;
      }
      if (!fd_tick) pthread_mutex_lock(&a->turn);
      if (!a->stopped && a->queue && m.type != MSG_QUEUED && msgq_any(a->queue)) {
        /* what a sender queued before it sent m comes first */
        msg bell;
        msg_init(&bell, MSG_QUEUED, 0, a->name);
        a->stopped = a->def->handle(a, &bell) == ACTOR_STOP;
        msg_free(&bell);
      }
      if (!a->stopped) a->stopped = a->def->handle(a, &m) == ACTOR_STOP;
      bool stop = a->stopped;
      pthread_mutex_unlock(&a->turn);
      msg_free(&m);
      if (stop) break;
    }
  }
  /* a guest may still try the turn: it finds the actor stopped */
  pthread_mutex_lock(&a->turn);
  a->stopped = true;
  if (rc == SCHEDRUN_OK && a->def->stop) a->def->stop(a);
  for (int i = 0; i < a->npeers; i++) mbox_close(a->peers[i].sock);
  a->npeers = 0;
  /* the mailbox stays bound until actor_join: a peer's late message (a
   * doorbell for a queue a guest already took) goes into an open pipe
   * instead of waiting out its send timeout */
  pthread_mutex_unlock(&a->turn);
  schedrun_error_clear(&err);
  return NULL;
}

actor_turn actor_run_queue_here(actor_t *a) {
  assert(a->queue); /* only an actor with a queue has work a guest can take */
  if (pthread_mutex_trylock(&a->turn) != 0) return ACTOR_TURN_BUSY;
  actor_turn r = a->stopped ? ACTOR_TURN_STOPPED : ACTOR_TURN_RAN;
  while (!a->stopped && msgq_any(a->queue)) {
    msg bell;
    msg_init(&bell, MSG_QUEUED, 0, a->name);
    atomic_fetch_add(&a->guest_rounds, 1);
    if (a->def->handle(a, &bell) == ACTOR_STOP) {
      a->stopped = true;
      /* its thread may be asleep on the mailbox: a doorbell wakes it to end */
      actor_send(a, a->name, &bell);
    }
    msg_free(&bell);
  }
  pthread_mutex_unlock(&a->turn);
  return r;
}

actor_turn actor_run_here(actor_t *a, void (*fn)(actor_t *self, void *arg), void *arg) {
  if (pthread_mutex_trylock(&a->turn) != 0) return ACTOR_TURN_BUSY;
  actor_turn r = a->stopped ? ACTOR_TURN_STOPPED : ACTOR_TURN_RAN;
  if (!a->stopped) {
    atomic_fetch_add(&a->guest_rounds, 1);
    fn(a, arg);
  }
  pthread_mutex_unlock(&a->turn);
  return r;
}

int actor_start(void *zctx, const actor_def *def, const char *name, void *state, actor_t **out,
                schedrun_error_t *err) {
  return actor_start_spin(zctx, def, name, state, ACTOR_SPIN_NS, NULL, out, err);
}

int actor_start_spin(void *zctx, const actor_def *def, const char *name, void *state, uint64_t spin_ns,
                     msg_queue *queue, actor_t **out, schedrun_error_t *err) {
  *out = NULL;
  actor_t *a = calloc(1, sizeof *a);
  if (!a) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  a->spin_ns = spin_ns;
  a->queue = queue;
  a->zctx = zctx;
  a->def = def;
  a->state = state;
  str_copy(a->name, sizeof a->name, name);
  pthread_mutex_init(&a->lock, NULL);
  pthread_mutex_init(&a->turn, NULL);
  pthread_cond_init(&a->cond, NULL);
  int rc = pthread_create(&a->thread, NULL, actor_main, a);
  if (rc != 0) {
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    free(a);
    return err_set(err, SCHEDRUN_EINTERNAL, "cannot start actor %s: %s", name, strerror(rc));
  }
  pthread_mutex_lock(&a->lock);
  while (a->started == 0) pthread_cond_wait(&a->cond, &a->lock);
  int started = a->started;
  pthread_mutex_unlock(&a->lock);
  if (started < 0) {
    pthread_join(a->thread, NULL);
    mbox_close(a->mailbox); /* bound before a failed start hook, or NULL */
    pthread_mutex_destroy(&a->turn);
    rc = a->start_err.code ? a->start_err.code : SCHEDRUN_EINTERNAL;
    err_set(err, rc, "actor %s did not start: %s", name,
            a->start_err.message ? a->start_err.message : schedrun_strerror(rc));
    schedrun_error_clear(&a->start_err);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->cond);
    free(a);
    return rc;
  }
  *out = a;
  return SCHEDRUN_OK;
}

void actor_wait(actor_t *a) {
  if (!a || a->joined) return;
  pthread_join(a->thread, NULL);
  a->joined = true;
}

uint64_t actor_join(actor_t **pa) {
  if (!pa || !*pa) return 0;
  actor_t *a = *pa;
  actor_wait(a);
  /* the thread has ended (pthread_join is the full barrier ZeroMQ asks for
   * before another thread closes a socket): what came after it stopped is
   * dropped with the mailbox */
  mbox_close(a->mailbox);
  a->mailbox = NULL;
  uint64_t malformed = atomic_load(&a->malformed);
  pthread_mutex_destroy(&a->turn);
  pthread_mutex_destroy(&a->lock);
  pthread_cond_destroy(&a->cond);
  schedrun_error_clear(&a->start_err);
  free(a);
  *pa = NULL;
  return malformed;
}
