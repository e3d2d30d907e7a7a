/* See actor.h. Mailboxes (the sockets and the codec) are in mbox.c. */
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

#define MAX_PEERS 80

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
