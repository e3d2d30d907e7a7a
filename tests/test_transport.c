/* Every job's messages between threads go through ZeroMQ sockets: for lone
 * jobs, jobs waited for as they are submitted, bursts, schedrun_submit_many,
 * a job graph and the multi-device demo, each job's SUBMIT, EXECUTE,
 * COMPLETE and EXECUTED (alone or in a batch) is counted exactly once by a
 * sender that handed it to a socket (msg_tally_*). That the bytes are
 * msgpack-c's is test_msg_codec's to show. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "messages/msg.h"
#include "schedrun.h"
#include "test_util.h"

/* the four messages every job that runs has, each alone or in its batch */
static const int kinds[4][2] = {{MSG_SUBMIT, MSG_SUBMIT_MANY},
                                {MSG_EXECUTE, MSG_EXECUTE_MANY},
                                {MSG_COMPLETE, MSG_COMPLETE_MANY},
                                {MSG_EXECUTED, MSG_EXECUTED_MANY}};

typedef struct counts {
  uint64_t jobs[4];
} counts;

static counts now_counts(void) {
  counts c;
  for (int k = 0; k < 4; k++) c.jobs[k] = msg_tally_jobs(kinds[k][0]) + msg_tally_jobs(kinds[k][1]);
  return c;
}

/* Every job submitted so far has been closed at the scheduler: its EXECUTED
 * (which travels after its COMPLETE) has been sent too. */
static bool settled(void) {
  counts c = now_counts();
  return c.jobs[3] == c.jobs[0];
}

static counts settled_counts(void) {
  TU_WAIT_FOR(settled(), "every job's EXECUTED to be sent");
  return now_counts();
}

/* Since `before`, each kind carried exactly `jobs` jobs through ZeroMQ. */
static void expect_jobs(const counts *before, uint64_t jobs, const char *what) {
  counts after = settled_counts();
  for (int k = 0; k < 4; k++)
    if (after.jobs[k] - before->jobs[k] != jobs)
      fail_msg("%s: %llu jobs' %s went through ZeroMQ, not %llu", what,
               (unsigned long long)(after.jobs[k] - before->jobs[k]), msg_type_name(kinds[k][0]),
               (unsigned long long)jobs);
}

static schedrun_t *open_devices(const char *devices) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = devices;
  return tu_open(&o);
}

static void wait_ok(schedrun_t *s, schedrun_job_t id) {
  schedrun_job_result_t *r = NULL;
  schedrun_error_t err = {0};
  if (schedrun_wait(s, id, -1, &r, &err)) fail_msg("wait: %s", err.message);
  if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) fail_msg("job: %s", schedrun_job_result_error(r));
  schedrun_job_result_free(&r);
}

/* host:2 with the tiny program loaded and run once (its first job also
 * compiles and records). */
static schedrun_t *open_warm(schedrun_program_t **p) {
  schedrun_t *s = open_devices("host:2");
  *p = tu_load(s, tu_tiny_yaml, "tiny.yaml");
  schedrun_error_t err = {0};
  schedrun_job_t id;
  if (schedrun_submit(s, *p, NULL, &id, &err)) fail_msg("submit: %s", err.message);
  wait_ok(s, id);
  return s;
}

static void test_single_jobs(void **st) {
  (void)st;
  schedrun_program_t *p;
  schedrun_t *s = open_warm(&p);
  schedrun_error_t err = {0};
  schedrun_job_t id;

  counts c = settled_counts();
  for (int j = 0; j < 50; j++) { /* lone: submitted, then waited for */
    if (schedrun_submit(s, p, NULL, &id, &err)) fail_msg("submit: %s", err.message);
    wait_ok(s, id);
  }
  expect_jobs(&c, 50, "lone jobs");

  c = settled_counts();
  for (int j = 0; j < 50; j++) { /* run on the caller's thread where it can */
    schedrun_job_result_t *r = NULL;
    if (schedrun_submit_wait(s, p, NULL, &r, &err)) fail_msg("submit_wait: %s", err.message);
    assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
    schedrun_job_result_free(&r);
  }
  expect_jobs(&c, 50, "submit_wait");

  enum { BURST = 2000 };
  static schedrun_job_t ids[BURST];
  c = settled_counts();
  for (int j = 0; j < BURST; j++)
    if (schedrun_submit(s, p, NULL, &ids[j], &err)) fail_msg("submit: %s", err.message);
  for (int j = 0; j < BURST; j++) wait_ok(s, ids[j]);
  expect_jobs(&c, BURST, "a burst");

  static schedrun_job_options_t opts[BURST];
  static schedrun_job_result_t *res[BURST];
  for (int j = 0; j < BURST; j++) schedrun_job_options_init(&opts[j]);
  c = settled_counts();
  if (schedrun_submit_many(s, p, BURST, opts, ids, &err)) fail_msg("submit_many: %s", err.message);
  if (schedrun_wait_many(s, BURST, ids, -1, res, &err)) fail_msg("wait_many: %s", err.message);
  for (int j = 0; j < BURST; j++) {
    assert_int_equal(schedrun_job_result_info(res[j])->status, SCHEDRUN_OK);
    schedrun_job_result_free(&res[j]);
  }
  expect_jobs(&c, BURST, "submit_many");
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* Messages of every type that found no receiver so far, in this process. */
static uint64_t unsent_total(void) {
  uint64_t n = 0;
  for (int t = 1; t < MSG__END; t++) n += msg_tally_unsent_count(t);
  return n;
}

/* A program freed just before the close: the scheduler stops only once the
 * record actor has answered its RELEASE, so no answer finds the
 * scheduler's mailbox gone (a send that would wait out its timeout). Each
 * round's close races the release afresh. */
static void test_release_before_close(void **st) {
  (void)st;
  for (int round = 0; round < 20; round++) {
    uint64_t before = unsent_total();
    schedrun_program_t *p;
    schedrun_t *s = open_warm(&p);
    schedrun_program_free(&p);
    assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
    uint64_t after = unsent_total();
    if (after != before) {
      for (int t = 1; t < MSG__END; t++)
        if (msg_tally_unsent_count(t))
          fprintf(stderr, "%s: %llu unsent\n", msg_type_name(t), (unsigned long long)msg_tally_unsent_count(t));
      fail_msg("round %d: %llu messages found no receiver", round, (unsigned long long)(after - before));
    }
  }
}

/* A graph of chains: each job after the one before it, 10 chains of 20. */
static void test_graph(void **st) {
  (void)st;
  schedrun_program_t *p;
  schedrun_t *s = open_warm(&p);
  schedrun_error_t err = {0};
  schedrun_graph_t *g = NULL;
  assert_int_equal(schedrun_graph_new(&g, &err), SCHEDRUN_OK);
  enum { CHAINS = 10, LEN = 20 };
  for (int c = 0; c < CHAINS; c++)
    for (int k = 0; k < LEN; k++) {
      int node = -1;
      assert_int_equal(schedrun_graph_job(g, p, NULL, &node, &err), SCHEDRUN_OK);
      if (k) assert_int_equal(schedrun_graph_after(g, node, node - 1, &err), SCHEDRUN_OK);
    }
  static schedrun_job_t ids[CHAINS * LEN];
  counts c0 = settled_counts();
  if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("graph submit: %s", err.message);
  for (int k = 0; k < CHAINS * LEN; k++) wait_ok(s, ids[k]);
  expect_jobs(&c0, CHAINS * LEN, "a job graph");
  schedrun_graph_free(&g);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* The multi-device demo, as sched-run runs it: its jobs times its repeats. */
static void test_demo(void **st) {
  (void)st;
  schedrun_t *s = open_devices("host:4");
  char path[1024];
  snprintf(path, sizeof path, "%s/multi_device_demo.yaml", tu_env("SCHEDRUN_CONFIGS"));
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  if (schedrun_program_load_file(s, path, &p, &err)) fail_msg("load: %s", err.message);
  schedrun_run_options_t ro;
  schedrun_run_options_init(&ro);
  schedrun_report_t *r = NULL;
  counts c = settled_counts();
  if (schedrun_run(s, p, &ro, &r, &err)) fail_msg("run: %s", err.message);
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->jobs, 64 * 2);
  assert_int_equal(sum->verified, 64 * 2);
  expect_jobs(&c, 64 * 2, "the demo");
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_jobs),
      cmocka_unit_test(test_graph),
      cmocka_unit_test(test_release_before_close),
      cmocka_unit_test(test_demo),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
