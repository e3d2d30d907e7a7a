/* The actor runtime: start handshake, messages in order, malformed bytes
 * dropped and counted, a failing start reported, clean stop and join, a
 * late message to a stopped actor sent at once. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "actors/actor.h"
#include "test_util.h"

typedef struct echo_state {
  int handled;
  int started, stopped;
} echo_state;

static int echo_start(actor_t *self, schedrun_error_t *err) {
  (void)err;
  ((echo_state *)actor_state(self))->started++;
  return SCHEDRUN_OK;
}

static void echo_stop(actor_t *self) { ((echo_state *)actor_state(self))->stopped++; }

static int echo_handle(actor_t *self, msg *m) {
  echo_state *s = actor_state(self);
  if (m->type == MSG_TERM) return ACTOR_STOP;
  s->handled++;
  msg r;
  msg_init(&r, MSG_STATUS, m->job, actor_name(self));
  r.body.status.items.v = calloc(1, sizeof(msg_stat));
  r.body.status.items.n = 1;
  r.body.status.items.v[0].name = strdup("handled");
  r.body.status.items.v[0].value = s->handled;
  actor_send(self, m->from, &r);
  msg_free(&r);
  return ACTOR_CONTINUE;
}

static const actor_def echo_def = {echo_start, echo_handle, echo_stop};

static int failing_start(actor_t *self, schedrun_error_t *err) {
  (void)self;
  return err_set(err, SCHEDRUN_EBACKEND, "no device here");
}

static const actor_def failing_def = {failing_start, echo_handle, NULL};

/* Sends a message of `type` with no body to the socket `out`, as "client". */
static void send_plain(void *out, int type, uint64_t job) {
  schedrun_error_t err = {0};
  msg m;
  msg_init(&m, type, job, "client");
  assert_int_equal(mbox_send(out, &m, &err), SCHEDRUN_OK);
  msg_free(&m);
}

static void test_round_trips_in_order(void **st) {
  (void)st;
  void *z = zmq_ctx_new();
  schedrun_error_t err = {0};
  void *inbox = mbox_bind(z, "client", &err);
  assert_non_null(inbox);
  echo_state es = {0};
  actor_t *a;
  assert_int_equal(actor_start(z, &echo_def, "echo", &es, &a, &err), SCHEDRUN_OK);
  assert_int_equal(es.started, 1); /* the start hook ran before actor_start returned */
  void *out = mbox_connect(z, "echo", &err);
  assert_non_null(out);
  enum { N = 1000 };
  for (int i = 0; i < N; i++) {
    msg m;
    msg_init(&m, MSG_STATUS, (uint64_t)i, "client");
    assert_int_equal(mbox_send(out, &m, &err), SCHEDRUN_OK);
    msg_free(&m);
  }
  for (int i = 0; i < N; i++) {
    msg r;
    assert_int_equal(mbox_recv(inbox, TU_PATIENCE_MS, &r, NULL, &err), SCHEDRUN_OK);
    assert_int_equal(r.type, MSG_STATUS);
    assert_true(r.job == (uint64_t)i);
    assert_string_equal(r.from, "echo");
    assert_true(r.body.status.items.v[0].value == i + 1);
    msg_free(&r);
  }
  /* nothing more arrives: the wait ends */
  msg r;
  assert_int_equal(mbox_recv(inbox, 50, &r, NULL, &err), SCHEDRUN_ETIMEOUT);
  schedrun_error_clear(&err);

  /* malformed bytes are dropped and counted; the actor keeps serving */
  const char *junk[] = {"", "\xc1", "\x93\x01\x02", "\xdd\xff\xff\xff\xff"};
  for (int i = 0; i < 4; i++) assert_true(zmq_send(out, junk[i], strlen(junk[i]) + (i == 0), 0) >= 0);
  msg m;
  msg_init(&m, MSG_STATUS, 7, "client");
  assert_int_equal(mbox_send(out, &m, &err), SCHEDRUN_OK);
  msg_free(&m);
  assert_int_equal(mbox_recv(inbox, TU_PATIENCE_MS, &r, NULL, &err), SCHEDRUN_OK);
  assert_true(r.job == 7);
  assert_true(r.body.status.items.v[0].value == N + 1);
  msg_free(&r);

  send_plain(out, MSG_TERM, 0);
  assert_int_equal(actor_join(&a), 4);
  assert_null(a);
  assert_int_equal(es.stopped, 1);
  assert_int_equal(es.handled, N + 1);
  mbox_close(out);
  mbox_close(inbox);
  zmq_ctx_term(z);
}

static void test_malformed_counted(void **st) {
  (void)st;
  void *z = zmq_ctx_new();
  schedrun_error_t err = {0};
  echo_state es = {0};
  actor_t *a;
  assert_int_equal(actor_start(z, &echo_def, "echo2", &es, &a, &err), SCHEDRUN_OK);
  void *out = mbox_connect(z, "echo2", &err);
  for (int i = 0; i < 25; i++) assert_true(zmq_send(out, "\xc1\xc1", 2, 0) == 2);
  send_plain(out, MSG_TERM, 0);
  /* TERM came after the junk, in order: all 25 were seen and dropped */
  assert_int_equal(actor_join(&a), 25);
  assert_int_equal(es.handled, 0);
  mbox_close(out);
  zmq_ctx_term(z);
}

static void test_failing_start(void **st) {
  (void)st;
  void *z = zmq_ctx_new();
  schedrun_error_t err = {0};
  actor_t *a = (actor_t *)0x1;
  assert_int_equal(actor_start(z, &failing_def, "broken", NULL, &a, &err), SCHEDRUN_EBACKEND);
  assert_null(a);
  assert_non_null(strstr(err.message, "actor broken did not start: no device here"));
  schedrun_error_clear(&err);
  /* the name is free again: a working actor can take it */
  echo_state es = {0};
  assert_int_equal(actor_start(z, &echo_def, "broken", &es, &a, &err), SCHEDRUN_OK);
  void *out = mbox_connect(z, "broken", &err);
  send_plain(out, MSG_TERM, 0);
  actor_join(&a);
  mbox_close(out);
  zmq_ctx_term(z);
}

/* A peer's message that comes after the actor stopped (a doorbell for a
 * queue someone already took) finds the mailbox still bound until
 * actor_join: it is sent at once, instead of waiting out the send timeout
 * on a closed name and being counted as unsent. After actor_join the name
 * is free again. */
static void test_late_message_after_stop(void **st) {
  (void)st;
  void *z = zmq_ctx_new();
  schedrun_error_t err = {0};
  echo_state es = {0};
  actor_t *a;
  assert_int_equal(actor_start(z, &echo_def, "late", &es, &a, &err), SCHEDRUN_OK);
  void *out = mbox_connect(z, "late", &err);
  assert_non_null(out);
  send_plain(out, MSG_TERM, 0);
  actor_wait(a); /* its thread has ended */
  actor_wait(a); /* once is enough */
  assert_int_equal(es.stopped, 1);
  /* the name is still the actor's */
  void *other = zmq_socket(z, ZMQ_PULL);
  assert_int_equal(zmq_bind(other, "inproc://late"), -1);
  assert_int_equal(zmq_errno(), EADDRINUSE);
  zmq_close(other);
  uint64_t unsent = msg_tally_unsent_count(MSG_QUEUED);
  for (int i = 0; i < 3; i++) send_plain(out, MSG_QUEUED, 5);
  assert_true(msg_tally_unsent_count(MSG_QUEUED) == unsent);
  assert_int_equal(es.handled, 0); /* nobody handled them: they go with the mailbox */
  assert_int_equal(actor_join(&a), 0);
  mbox_close(out);
  /* the name is bindable again */
  assert_int_equal(actor_start(z, &echo_def, "late", &es, &a, &err), SCHEDRUN_OK);
  out = mbox_connect(z, "late", &err);
  send_plain(out, MSG_TERM, 0);
  actor_join(&a);
  mbox_close(out);
  zmq_ctx_term(z);
}

/* The queue beside a mailbox, on its own ZeroMQ pair: the first push of an
 * idle queue rings, later ones do not until the receiver takes, nor while a
 * receiver polls; what was pushed comes back in order, every field, the
 * bytes of a big message too (sent without a copy); every push is counted
 * as gone through ZeroMQ. */
typedef struct collected {
  msg m[600];
  int n;
} collected;

/* The jobs of a SUBMIT or of a SUBMIT_MANY, one by one. */
static size_t submits_in(const msg *m) {
  return m->type == MSG_SUBMIT_MANY ? m->body.submit_many.programs.n : m->type == MSG_SUBMIT;
}
static msg_submit submit_at(const msg *m, size_t e) {
  msg_submit sb = m->body.submit;
  if (m->type == MSG_SUBMIT_MANY) msg_submit_many_get(&m->body.submit_many, e, &sb);
  return sb;
}
static uint64_t submit_job(const msg *m, size_t e) { return m->job + e; }

static bool collect(void *ctx, msg *m) {
  collected *c = ctx;
  c->m[c->n++] = *m;
  memset(m, 0, sizeof *m); /* ours now */
  return true;
}

static void collected_free(collected *c) {
  for (int k = 0; k < c->n; k++) msg_free(&c->m[k]);
  c->n = 0;
}

static void test_queue(void **st) {
  (void)st;
  void *z = zmq_ctx_new();
  msg_queue q;
  msgq_init(&q);
  schedrun_error_t err = {0};
  assert_int_equal(msgq_open(&q, z, "test", &err), SCHEDRUN_OK);
  bool ring = false;
  static collected c;
  assert_int_equal(msgq_drain(&q, collect, &c), 0);
  assert_int_equal(c.n, 0);
  uint64_t sent = msg_tally_jobs(MSG_SUBMIT), sent_many = msg_tally_jobs(MSG_SUBMIT_MANY);
  enum { BIG = 200000 };
  for (uint32_t k = 0; k < 500; k++) {
    msg m;
    msg_init(&m, MSG_SUBMIT, 1000 + k, "client");
    m.body.submit.program = 7;
    m.body.submit.job_index = k;
    m.body.submit.device = -1;
    if (k == 250) { /* past the copy limit: ZeroMQ takes the encoder's buffer */
      m.body.submit.inputs.v = calloc(1, sizeof(msg_output));
      m.body.submit.inputs.n = 1;
      m.body.submit.inputs.v[0].buffer = 3;
      m.body.submit.inputs.v[0].data.data = malloc(BIG);
      m.body.submit.inputs.v[0].data.len = BIG;
      for (size_t i = 0; i < BIG; i++) m.body.submit.inputs.v[0].data.data[i] = (uint8_t)(i * 7 + 1);
    }
    assert_int_equal(msgq_push(&q, &m, &ring, &err), SCHEDRUN_OK);
    assert_int_equal(ring, k == 0); /* one doorbell for the burst */
    msg_free(&m);
  }
  assert_true(msgq_any(&q));
  assert_int_equal(msgq_drain(&q, collect, &c), 0);
  /* the first alone (the queue was empty), the next ones gathered behind
   * it, the one with data alone (the gather goes before it), the rest
   * gathered */
  assert_int_equal(msg_tally_jobs(MSG_SUBMIT) - sent, 2);
  assert_int_equal(msg_tally_jobs(MSG_SUBMIT_MANY) - sent_many, 498);
  assert_int_equal(c.n, 4);
  const int types[4] = {MSG_SUBMIT, MSG_SUBMIT_MANY, MSG_SUBMIT, MSG_SUBMIT_MANY};
  for (int i = 0; i < 4; i++) assert_int_equal(c.m[i].type, types[i]);
  assert_int_equal(submits_in(&c.m[1]), 249);
  assert_int_equal(submits_in(&c.m[3]), 249);
  uint32_t k = 0;
  for (int i = 0; i < c.n; i++)
    for (size_t e = 0; e < submits_in(&c.m[i]); e++, k++) {
      msg_submit sb = submit_at(&c.m[i], e);
      assert_int_equal(submit_job(&c.m[i], e), 1000 + k);
      assert_true(sb.program == 7 && sb.job_index == k && sb.device == -1);
      assert_int_equal(sb.inputs.n, k == 250 ? 1 : 0);
      assert_string_equal(c.m[i].from, "client");
    }
  assert_int_equal(k, 500);
  const msg_bytes *big = &c.m[2].body.submit.inputs.v[0].data;
  assert_int_equal(big->len, BIG);
  for (size_t i = 0; i < BIG; i++) assert_int_equal(big->data[i], (uint8_t)(i * 7 + 1));
  collected_free(&c);
  assert_false(msgq_any(&q));
  /* taken: the next push rings again; a doorbell that could not go is forgotten */
  msg m;
  msg_init(&m, MSG_TERM, 1, "client");
  assert_int_equal(msgq_push(&q, &m, &ring, &err), SCHEDRUN_OK);
  assert_true(ring);
  msgq_unring(&q);
  assert_int_equal(msgq_push(&q, &m, &ring, &err), SCHEDRUN_OK);
  assert_true(ring);
  assert_int_equal(msgq_push(&q, &m, &ring, &err), SCHEDRUN_OK);
  assert_false(ring);
  assert_int_equal(msgq_drain(&q, collect, &c), 0);
  assert_int_equal(c.n, 3);
  collected_free(&c);
  /* while a receiver polls, pushes ring nobody; once it stops, they ring */
  msgq_poll_begin(&q);
  assert_false(msgq_any(&q));
  assert_int_equal(msgq_push(&q, &m, &ring, &err), SCHEDRUN_OK);
  assert_false(ring);
  assert_true(msgq_any(&q));
  msgq_poll_end(&q);
  assert_true(msgq_any(&q)); /* the look after polling finds it */
  assert_int_equal(msgq_drain(&q, collect, &c), 0);
  assert_int_equal(c.n, 1);
  collected_free(&c);
  assert_false(msgq_any(&q));
  assert_int_equal(msgq_push(&q, &m, &ring, &err), SCHEDRUN_OK);
  assert_true(ring);
  /* closed: what is left goes with it, and a push says the queue is closed */
  msgq_close(&q);
  assert_int_equal(msgq_push(&q, &m, &ring, &err), SCHEDRUN_ECLOSED);
  assert_non_null(strstr(err.message, "closed"));
  schedrun_error_clear(&err);
  msg_free(&m);
  msgq_destroy(&q);
  zmq_ctx_term(z);
}

/* SUBMITs pushed while the queue holds others wait in its gather and leave
 * as one SUBMIT_MANY when the queue is taken; what cannot join them (a job
 * out of sequence, another sender, another type, a full gather) sends them
 * first, so the receiver sees every job once, in push order. */
static void push_from(msg_queue *q, int type, uint64_t job, const char *from, bool *ring) {
  msg m;
  schedrun_error_t err = {0};
  msg_init(&m, type, job, from);
  m.body.submit.job_index = (uint32_t)job * 3;
  assert_int_equal(msgq_push(q, &m, ring, &err), SCHEDRUN_OK);
  msg_free(&m);
}

static void test_queue_gather(void **st) {
  (void)st;
  void *z = zmq_ctx_new();
  msg_queue q;
  msgq_init(&q);
  schedrun_error_t err = {0};
  assert_int_equal(msgq_open(&q, z, "gather", &err), SCHEDRUN_OK);
  bool ring;
  uint64_t one = msg_tally_jobs(MSG_SUBMIT), many = msg_tally_jobs(MSG_SUBMIT_MANY);
  push_from(&q, MSG_SUBMIT, 1, "client", &ring);
  assert_true(ring);
  for (uint64_t j = 2; j <= 3; j++) {
    push_from(&q, MSG_SUBMIT, j, "client", &ring);
    assert_false(ring);
  }
  assert_int_equal(msg_tally_jobs(MSG_SUBMIT_MANY) - many, 0); /* still gathered */
  push_from(&q, MSG_SUBMIT, 5, "client", &ring); /* out of sequence */
  push_from(&q, MSG_SUBMIT, 6, "other", &ring);  /* another sender */
  push_from(&q, MSG_TERM, 0, "client", &ring);   /* another type */
  push_from(&q, MSG_SUBMIT, 7, "client", &ring);
  assert_false(ring);
  static collected c;
  assert_int_equal(msgq_drain(&q, collect, &c), 0);
  const int types[] = {MSG_SUBMIT, MSG_SUBMIT_MANY, MSG_SUBMIT_MANY, MSG_SUBMIT_MANY, MSG_TERM, MSG_SUBMIT_MANY};
  const uint64_t first[] = {1, 2, 5, 6, 0, 7};
  const size_t n[] = {1, 2, 1, 1, 0, 1};
  const char *from[] = {"client", "client", "client", "other", "client", "client"};
  assert_int_equal(c.n, 6);
  for (int i = 0; i < 6; i++) {
    assert_int_equal(c.m[i].type, types[i]);
    assert_int_equal(c.m[i].job, first[i]);
    assert_int_equal(submits_in(&c.m[i]), n[i]);
    assert_string_equal(c.m[i].from, from[i]);
    for (size_t e = 0; e < n[i]; e++) assert_int_equal(submit_at(&c.m[i], e).job_index, (first[i] + e) * 3);
  }
  collected_free(&c);
  assert_int_equal(msg_tally_jobs(MSG_SUBMIT) - one, 1);
  assert_int_equal(msg_tally_jobs(MSG_SUBMIT_MANY) - many, 5);
  /* taken: the next SUBMIT leaves alone and rings */
  push_from(&q, MSG_SUBMIT, 8, "client", &ring);
  assert_true(ring);
  /* a full gather leaves, and the next job starts another */
  for (uint64_t j = 9; j < 9 + MSGQ_GATHER_JOBS + 1; j++) push_from(&q, MSG_SUBMIT, j, "client", &ring);
  assert_int_equal(msgq_drain(&q, collect, &c), 0);
  assert_int_equal(c.n, 3);
  assert_int_equal(submits_in(&c.m[0]), 1);
  assert_int_equal(submits_in(&c.m[1]), MSGQ_GATHER_JOBS);
  assert_int_equal(c.m[2].job, 9 + MSGQ_GATHER_JOBS);
  assert_int_equal(submits_in(&c.m[2]), 1);
  for (size_t e = 0; e < MSGQ_GATHER_JOBS; e++) assert_int_equal(submit_at(&c.m[1], e).job_index, (9 + e) * 3);
  collected_free(&c);
  /* polled: the pushes ring nobody, and the poller's look finds them */
  msgq_poll_begin(&q);
  push_from(&q, MSG_SUBMIT, 20, "client", &ring);
  assert_false(ring);
  push_from(&q, MSG_SUBMIT, 21, "client", &ring);
  assert_false(ring);
  msgq_poll_end(&q);
  assert_true(msgq_any(&q));
  assert_int_equal(msgq_drain(&q, collect, &c), 0);
  assert_int_equal(c.n, 2);
  assert_int_equal(c.m[1].job, 21);
  collected_free(&c);
  /* closed with jobs gathered: they go with the pipe, and nothing leaks */
  push_from(&q, MSG_SUBMIT, 30, "client", &ring);
  push_from(&q, MSG_SUBMIT, 31, "client", &ring);
  msgq_close(&q);
  assert_int_equal(msgq_drain(&q, collect, &c), 0);
  assert_int_equal(c.n, 0);
  msgq_destroy(&q);
  zmq_ctx_term(z);
}

/* msgq_drain hands each queued message to its taker in order and counts
 * those the taker refuses (a type that is not queued for it). */
typedef struct taken {
  uint64_t jobs[4];
  int n;
} taken;

static bool take_submits(void *ctx, msg *m) {
  taken *t = ctx;
  if (!submits_in(m)) return false;
  for (size_t e = 0; e < submits_in(m); e++) t->jobs[t->n++] = submit_job(m, e);
  return true;
}

static void test_queue_drain(void **st) {
  (void)st;
  void *z = zmq_ctx_new();
  msg_queue q;
  msgq_init(&q);
  schedrun_error_t err = {0};
  assert_int_equal(msgq_open(&q, z, "drain", &err), SCHEDRUN_OK);
  bool ring;
  const int types[] = {MSG_SUBMIT, MSG_TERM, MSG_SUBMIT};
  for (int k = 0; k < 3; k++) {
    msg m;
    msg_init(&m, types[k], 10 + (uint64_t)k, "client");
    assert_int_equal(msgq_push(&q, &m, &ring, &err), SCHEDRUN_OK);
    msg_free(&m);
  }
  taken t = {{0}, 0};
  assert_int_equal(msgq_drain(&q, take_submits, &t), 1);
  assert_int_equal(t.n, 2);
  assert_true(t.jobs[0] == 10 && t.jobs[1] == 12);
  assert_false(msgq_any(&q));
  assert_int_equal(msgq_drain(&q, take_submits, &t), 0); /* empty: nothing, nobody called */
  assert_int_equal(t.n, 2);
  msgq_destroy(&q);
  zmq_ctx_term(z);
}

/* Guests: a thread that takes an idle actor's turn runs its handler on
 * what is queued, in order, on the guest's own thread; a busy turn is said
 * so (and a doorbell then gets the queue to the actor's thread); a handler
 * that stops on a guest still ends the actor's thread. */
typedef struct turn_state {
  pthread_t by[8];
  uint64_t jobs[8];
  _Atomic int n;          /* queued messages handled */
  _Atomic int inside;     /* the mailbox handler holds the turn */
  _Atomic int let_go;     /* ... until this is set */
  bool stop_now;          /* a SUBMIT for job 999 was handled */
  int stopped;
} turn_state;

static bool take_turn_submit(void *ctx, msg *m) {
  turn_state *t = actor_state(ctx);
  if (!submits_in(m)) return false;
  for (size_t e = 0; e < submits_in(m); e++) {
    int k = atomic_load(&t->n);
    t->by[k] = pthread_self();
    t->jobs[k] = submit_job(m, e);
    if (t->jobs[k] == 999) t->stop_now = true;
    atomic_store(&t->n, k + 1);
  }
  return true;
}

static msg_queue turn_q;

static int turn_handle(actor_t *self, msg *m) {
  turn_state *t = actor_state(self);
  if (m->type == MSG_QUEUED) msgq_drain(&turn_q, take_turn_submit, self);
  if (m->type == MSG_STATUS) {
    atomic_store(&t->inside, 1);
    while (!atomic_load(&t->let_go)) sched_yield();
  }
  return t->stop_now || m->type == MSG_TERM ? ACTOR_STOP : ACTOR_CONTINUE;
}

static void turn_stop(actor_t *self) { ((turn_state *)actor_state(self))->stopped++; }

static const actor_def turn_def = {NULL, turn_handle, turn_stop};

static void push_submit(uint64_t job) {
  msg m;
  bool ring;
  schedrun_error_t err = {0};
  msg_init(&m, MSG_SUBMIT, job, "client");
  assert_int_equal(msgq_push(&turn_q, &m, &ring, &err), SCHEDRUN_OK);
  msg_free(&m);
}

static void test_guest_turn(void **st) {
  (void)st;
  void *z = zmq_ctx_new();
  schedrun_error_t err = {0};
  msgq_init(&turn_q);
  assert_int_equal(msgq_open(&turn_q, z, "turn", &err), SCHEDRUN_OK);
  turn_state ts = {0};
  actor_t *a;
  /* no spin: the actor's thread sleeps on its mailbox at once */
  assert_int_equal(actor_start_spin(z, &turn_def, "turn", &ts, 0, &turn_q, &a, &err), SCHEDRUN_OK);
  void *out = mbox_connect(z, "turn", &err);
  assert_non_null(out);
  /* polled by this thread: the pushes ring nobody, and run here */
  msgq_poll_begin(&turn_q);
  for (uint64_t j = 1; j <= 3; j++) push_submit(j);
  msgq_poll_end(&turn_q);
  assert_int_equal(actor_run_queue_here(a), ACTOR_TURN_RAN);
  assert_int_equal(atomic_load(&ts.n), 3);
  for (int k = 0; k < 3; k++) {
    assert_int_equal(ts.jobs[k], (uint64_t)k + 1);
    assert_true(pthread_equal(ts.by[k], pthread_self()));
  }
  assert_false(msgq_any(&turn_q));
  /* the actor's thread holds the turn: a guest is told, and a doorbell gets
   * the queue to that thread once it lets go */
  msg busy;
  msg_init(&busy, MSG_STATUS, 50, "client");
  assert_int_equal(mbox_send(out, &busy, &err), SCHEDRUN_OK);
  msg_free(&busy);
  while (!atomic_load(&ts.inside)) sched_yield();
  msgq_poll_begin(&turn_q);
  push_submit(4);
  msgq_poll_end(&turn_q);
  assert_int_equal(actor_run_queue_here(a), ACTOR_TURN_BUSY);
  assert_int_equal(atomic_load(&ts.n), 3);
  assert_true(msgq_claim_ring(&turn_q));
  assert_false(msgq_claim_ring(&turn_q)); /* one doorbell */
  msg bell;
  msg_init(&bell, MSG_QUEUED, 0, "client");
  assert_int_equal(mbox_send(out, &bell, &err), SCHEDRUN_OK);
  msg_free(&bell);
  atomic_store(&ts.let_go, 1);
  TU_WAIT_FOR(atomic_load(&ts.n) >= 4, "the actor's thread to run the queued message");
  assert_int_equal(atomic_load(&ts.n), 4);
  assert_int_equal(ts.jobs[3], 4);
  assert_false(pthread_equal(ts.by[3], pthread_self())); /* the actor's own thread */
  /* a handler that stops on a guest: the actor's thread, asleep, still ends */
  msgq_poll_begin(&turn_q);
  push_submit(999);
  msgq_poll_end(&turn_q);
  /* The actor's thread may still hold the turn for a moment after handling
   * job 4 (or take 999 itself, while still draining): a guest waits for the
   * turn to come free, it never blocks on it. */
  actor_turn r;
  while ((r = actor_run_queue_here(a)) == ACTOR_TURN_BUSY) sched_yield();
  assert_true(r == ACTOR_TURN_RAN || r == ACTOR_TURN_STOPPED);
  assert_int_equal(ts.jobs[4], 999);
  /* the stop's doorbell wakes the actor's thread, which holds the turn while it
   * ends; once it lets go, nothing runs after the stop */
  while ((r = actor_run_queue_here(a)) == ACTOR_TURN_BUSY) sched_yield();
  assert_int_equal(r, ACTOR_TURN_STOPPED);
  assert_int_equal(actor_join(&a), 0);
  assert_int_equal(ts.stopped, 1);
  assert_int_equal(atomic_load(&ts.n), 5);
  mbox_close(out);
  msgq_destroy(&turn_q);
  zmq_ctx_term(z);
}

/* A COMPLETE carrying one output of `len` bytes, byte k being k * 13. */
static void complete_carrying(msg *m, size_t len) {
  msg_init(m, MSG_COMPLETE, 7, "lender");
  m->body.complete.text = strdup("");
  m->body.complete.outputs.v = calloc(1, sizeof(msg_output));
  m->body.complete.outputs.n = 1;
  msg_bytes *b = &m->body.complete.outputs.v[0].data;
  b->len = len;
  b->data = malloc(len);
  for (size_t k = 0; k < len; k++) b->data[k] = (uint8_t)(k * 13);
}

/* Lent bytes between mailboxes: the receiver gets the sender's very block
 * (no copy) with every byte; a message encoded and dropped unsent frees its
 * block (ZeroMQ's free); one taken back with mbox_unsent returns it to the
 * message, which can then be sent. The table of lent blocks ends as it began. */
static void test_lent_over_mailboxes(void **st) {
  (void)st;
  size_t before = msg_lent_count();
  void *z = zmq_ctx_new();
  schedrun_error_t err = {0};
  void *inbox = mbox_bind(z, "lent-in", &err);
  void *out = mbox_connect(z, "lent-in", &err);
  assert_non_null(inbox);
  assert_non_null(out);
  msg m, r;
  complete_carrying(&m, 1u << 20);
  const uint8_t *block = m.body.complete.outputs.v[0].data.data;
  assert_int_equal(mbox_send(out, &m, &err), SCHEDRUN_OK);
  assert_null(m.body.complete.outputs.v[0].data.data); /* it left with the message */
  assert_int_equal(msg_lent_count(), before + 1);
  assert_int_equal(mbox_recv(inbox, TU_PATIENCE_MS, &r, NULL, &err), SCHEDRUN_OK);
  assert_int_equal(msg_lent_count(), before);
  const msg_bytes *got = &r.body.complete.outputs.v[0].data;
  assert_ptr_equal(got->data, block);
  assert_int_equal(got->len, 1u << 20);
  for (size_t k = 0; k < got->len; k++)
    if (got->data[k] != (uint8_t)(k * 13)) fail_msg("byte %zu is %u", k, got->data[k]);
  msg_free(&r);
  msg_free(&m);
  /* dropped unsent: the block is freed with the ZeroMQ message */
  complete_carrying(&m, 100000);
  zmq_msg_t zm;
  assert_int_equal(mbox_encode(&m, &zm, &err), SCHEDRUN_OK);
  assert_int_equal(msg_lent_count(), before + 1);
  zmq_msg_close(&zm);
  assert_int_equal(msg_lent_count(), before);
  msg_free(&m);
  /* taken back: the same block in the message again, and it can go */
  complete_carrying(&m, 100000);
  block = m.body.complete.outputs.v[0].data.data;
  assert_int_equal(mbox_encode(&m, &zm, &err), SCHEDRUN_OK);
  mbox_unsent(&zm, &m);
  assert_ptr_equal(m.body.complete.outputs.v[0].data.data, block);
  assert_int_equal(msg_lent_count(), before);
  assert_int_equal(mbox_send(out, &m, &err), SCHEDRUN_OK);
  assert_int_equal(mbox_recv(inbox, TU_PATIENCE_MS, &r, NULL, &err), SCHEDRUN_OK);
  assert_ptr_equal(r.body.complete.outputs.v[0].data.data, block);
  msg_free(&r);
  msg_free(&m);
  assert_int_equal(msg_lent_count(), before);
  mbox_close(out);
  mbox_close(inbox);
  zmq_ctx_term(z);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trips_in_order),
      cmocka_unit_test(test_lent_over_mailboxes),
      cmocka_unit_test(test_malformed_counted),
      cmocka_unit_test(test_late_message_after_stop),
      cmocka_unit_test(test_failing_start),
      cmocka_unit_test(test_queue),
      cmocka_unit_test(test_queue_gather),
      cmocka_unit_test(test_queue_drain),
      cmocka_unit_test(test_guest_turn),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
