/*
 * Jobs sent ahead, at the scheduler alone (actors/scheduler_then.c), in raw
 * messages: a follower waits for every job that names it, whichever of its
 * SUBMIT and their completions comes first; it is answered after them, in
 * order, and fails with SCHEDRUN_EDEPEND when one of them failed; at
 * shutdown one that waits for a job never submitted fails with
 * SCHEDRUN_ECLOSED instead of holding the scheduler up. The jobs here name
 * a program the scheduler does not know, so each is refused: what is
 * checked is who hears what, and when. Running followers, with their
 * parcels, are tests/test_dag.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler_state.h"
#include "actor_rig.h"

/* A SUBMIT of job `id` (of no known program) that releases the jobs in
 * `then` (ids; order-only edges) and waits for `waits` triples. */
static void submit(rig *r, uint64_t id, const uint64_t *then, size_t nthen, uint32_t waits) {
  msg m;
  msg_init(&m, MSG_SUBMIT, id, "client");
  m.body.submit.program = 42;
  m.body.submit.device = -1;
  m.body.submit.waits = waits;
  if (nthen) {
    m.body.submit.then.v = malloc(3 * nthen * sizeof(uint64_t));
    assert_non_null(m.body.submit.then.v);
    for (size_t k = 0; k < nthen; k++) {
      m.body.submit.then.v[3 * k] = then[k];
      m.body.submit.then.v[3 * k + 1] = UINT64_MAX;
      m.body.submit.then.v[3 * k + 2] = 0;
    }
    m.body.submit.then.n = 3 * nthen;
  }
  assert_int_equal(mbox_send(r->out, &m, NULL), SCHEDRUN_OK);
  msg_free(&m);
}

/* The next message is job id's COMPLETE, with status and text containing
 * `says`. */
static void expect_complete(rig *r, uint64_t id, int status, const char *says) {
  msg m;
  rig_recv(r, &m);
  if (m.type != MSG_COMPLETE || m.job != id)
    fail_msg("expected job %llu's COMPLETE, got a %s for job %llu", (unsigned long long)id, msg_type_name(m.type),
             (unsigned long long)m.job);
  if (m.body.complete.status != status || !strstr(m.body.complete.text, says))
    fail_msg("job %llu: status %d ('%s'), wanted %d with '%s'", (unsigned long long)id, m.body.complete.status,
             m.body.complete.text, status, says);
  assert_int_equal(m.body.complete.device, -1); /* it never ran */
  msg_free(&m);
}

/* Nothing was answered before this: a STATUS's answer comes next (the
 * scheduler answers in order, on one pipe). */
static void expect_nothing_yet(rig *r) {
  msg m, reply;
  msg_init(&m, MSG_STATUS, 99, "client");
  send_recv(r, &m, &reply);
  msg_free(&m);
  if (reply.type != MSG_STATUS) fail_msg("a %s for job %llu came first", msg_type_name(reply.type), (unsigned long long)reply.job);
  msg_free(&reply);
}

static void start(rig *r, scheduler_state **ss) {
  rig_up(r, ACTOR_SCHEDULER);
  *ss = scheduler_state_new(&r->core);
  assert_non_null(*ss);
  schedrun_error_t err = {0};
  assert_int_equal(actor_start(r->core.zctx, &scheduler_actor_def, ACTOR_SCHEDULER, *ss, &r->actor, &err), SCHEDRUN_OK);
}

static void finish(rig *r, scheduler_state *ss) {
  msg t, reply;
  msg_init(&t, MSG_TERM, 7, "client");
  send_recv(r, &t, &reply); /* answered: nothing is held */
  assert_int_equal(reply.type, MSG_TERM);
  msg_free(&reply);
  msg_free(&t);
  actor_join(&r->actor);
  scheduler_state_free(ss);
  rig_down(r);
}

/* The follower's SUBMIT first: it waits, and is answered right after the
 * job it runs after, naming it. */
static void a_follower_waits_for_its_job(void **st) {
  (void)st;
  rig r;
  scheduler_state *ss;
  start(&r, &ss);
  submit(&r, 11, NULL, 0, 1);
  expect_nothing_yet(&r);
  const uint64_t then[] = {11};
  submit(&r, 10, then, 1, 0);
  expect_complete(&r, 10, SCHEDRUN_EINVAL, "no such program");
  expect_complete(&r, 11, SCHEDRUN_EDEPEND, "runs after job 10, which failed");
  finish(&r, ss);
}

/* The job first, done before its follower's SUBMIT comes: the follower is
 * answered as soon as it does. */
static void a_follower_after_its_job_is_done(void **st) {
  (void)st;
  rig r;
  scheduler_state *ss;
  start(&r, &ss);
  const uint64_t then[] = {21};
  submit(&r, 20, then, 1, 0);
  expect_complete(&r, 20, SCHEDRUN_EINVAL, "no such program");
  expect_nothing_yet(&r);
  submit(&r, 21, NULL, 0, 1);
  expect_complete(&r, 21, SCHEDRUN_EDEPEND, "runs after job 20");
  finish(&r, ss);
}

/* Two jobs before it, and a job after it: it waits for both, then fails,
 * and the one after it hears that it did not run. */
static void every_job_before_it_counts(void **st) {
  (void)st;
  rig r;
  scheduler_state *ss;
  start(&r, &ss);
  const uint64_t to_c[] = {32}, to_d[] = {33};
  submit(&r, 32, to_d, 1, 2); /* C waits for A and B; D for C */
  submit(&r, 33, NULL, 0, 1);
  submit(&r, 30, to_c, 1, 0);
  expect_complete(&r, 30, SCHEDRUN_EINVAL, "no such program");
  expect_nothing_yet(&r); /* C still waits for B */
  submit(&r, 31, to_c, 1, 0);
  expect_complete(&r, 31, SCHEDRUN_EINVAL, "no such program");
  expect_complete(&r, 32, SCHEDRUN_EDEPEND, "runs after job 30, which failed"); /* the first reason */
  expect_complete(&r, 33, SCHEDRUN_EDEPEND, "runs after job 32, which did not run");
  finish(&r, ss);
}

/* A follower whose job never comes: TERM fails it and is answered. */
static void shutdown_ends_a_follower_that_waits(void **st) {
  (void)st;
  rig r;
  scheduler_state *ss;
  start(&r, &ss);
  submit(&r, 41, NULL, 0, 1);
  expect_nothing_yet(&r);
  msg t, reply;
  msg_init(&t, MSG_TERM, 7, "client");
  assert_int_equal(mbox_send(r.out, &t, NULL), SCHEDRUN_OK);
  msg_free(&t);
  expect_complete(&r, 41, SCHEDRUN_ECLOSED, "shut down before every job that job 41 runs after was submitted");
  rig_recv(&r, &reply);
  assert_int_equal(reply.type, MSG_TERM);
  msg_free(&reply);
  actor_join(&r.actor);
  scheduler_state_free(ss);
  rig_down(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_follower_waits_for_its_job),
      cmocka_unit_test(a_follower_after_its_job_is_done),
      cmocka_unit_test(every_job_before_it_counts),
      cmocka_unit_test(shutdown_ends_a_follower_that_waits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
