/*
 * Lone jobs posted to their device by the submitting thread
 * (actors/execute_posted.c): collected by the wait for them; by the
 * device's own thread when nobody waits (the worker announces the end on an
 * eventfd); by a wait with a timeout, which gives up on a job still running
 * and leaves it posted; and ended by the worker's death, by a shutdown, or
 * by the jobs that follow, whatever the device was doing. Every result is
 * checked element by element.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "lib/api.h"

#include "test_util.h"

/* y[0] = s[0] after spinning s[1] rounds (an int count); x[i] = s[0] * i.
 * With s[2] != 0 the kernel writes through a null pointer instead. */
static const char slow_yaml[] =
    "version: 1\n"
    "kernels:\n"
    "  slow:\n"
    "    params: [ptr, ptr, ptr]\n"
    "    source: |\n"
    "      extern \"C\" __global__ void slow(const float *s, float *y, int *rounds) {\n"
    "        if (s[2] != 0.0f) *(volatile int *)0 = 1;\n"
    "        volatile int n = 0;\n"
    "        for (int k = 0; k < (int)s[1]; k++) n = n + 1;\n"
    "        rounds[0] = n;\n"
    "        for (int i = 0; i < 16; i++) y[i] = s[0] * (float)i;\n"
    "      }\n"
    "buffers:\n"
    "  s: {type: f32, count: 3}\n"
    "  y: {type: f32, count: 16}\n"
    "  rounds: {type: i32, count: 1}\n"
    "program:\n"
    "  - launch: {kernel: slow, grid: 1, block: 1, args: [s, y, rounds]}\n";

typedef struct job_in {
  float s[3];
  schedrun_input_t in;
} job_in;

static void options(schedrun_job_options_t *jo, job_in *ji, float k, int rounds, bool fault) {
  schedrun_job_options_init(jo);
  ji->s[0] = k;
  ji->s[1] = (float)rounds;
  ji->s[2] = fault ? 1.0f : 0.0f;
  ji->in = (schedrun_input_t){"s", ji->s, sizeof ji->s};
  jo->inputs = &ji->in;
  jo->ninputs = 1;
  jo->keep_outputs = 1;
}

static void check(const schedrun_job_result_t *r, float k, int rounds) {
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  if (in->status != SCHEDRUN_OK) fail_msg("seed %g: status %d: %s", k, in->status, schedrun_job_result_error(r));
  size_t bytes = 0;
  const float *y = schedrun_job_result_output(r, "y", &bytes);
  assert_non_null(y);
  assert_int_equal(bytes, 16 * sizeof(float));
  for (int i = 0; i < 16; i++)
    if (y[i] != k * (float)i) fail_msg("seed %g: y[%d] = %g, not %g", k, i, y[i], k * (float)i);
  const int *n = schedrun_job_result_output(r, "rounds", &bytes);
  assert_non_null(n);
  assert_int_equal(bytes, sizeof(int));
  assert_int_equal(n[0], rounds);
}

static schedrun_stats_t stats(schedrun_t *s) {
  schedrun_stats_t st;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_get_stats(s, &st, &err), SCHEDRUN_OK);
  return st;
}

/* Submits a lone job and returns once one was posted by this thread: a
 * job the device's or the scheduler's thread took instead (its turn was
 * held a moment) is waited for, checked, and submitted again. */
static schedrun_job_t submit_posted(schedrun_t *s, schedrun_program_t *p, job_in *ji, float k, int rounds,
                                    bool fault) {
  schedrun_error_t err = {0};
  for (int attempt = 0; attempt < 100; attempt++) {
    uint64_t posted0 = stats(s).posted;
    schedrun_job_options_t jo;
    options(&jo, ji, k, rounds, fault);
    schedrun_job_t id;
    assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
    if (stats(s).posted == posted0 + 1) return id;
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_wait(s, id, -1, &r, &err), SCHEDRUN_OK);
    if (!fault) check(r, k, rounds);
    schedrun_job_result_free(&r);
  }
  fail_msg("100 lone jobs submitted: none was posted by the submitting thread");
  return 0;
}

/* One device with its program loaded, past the jobs it times node by node
 * (those are never posted). */
static schedrun_t *open_warm(schedrun_program_t **p) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  schedrun_t *s = tu_open(&o);
  *p = tu_load(s, slow_yaml, "slow.yaml");
  schedrun_error_t err = {0};
  for (int i = 0; i < 20; i++) {
    job_in ji;
    schedrun_job_options_t jo;
    options(&jo, &ji, (float)i, 3, false);
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_submit_wait(s, *p, &jo, &r, &err), SCHEDRUN_OK);
    check(r, (float)i, 3);
    schedrun_job_result_free(&r);
  }
  return s;
}

/* Submitted and waited for, one at a time: posted by the caller and
 * collected by its wait. */
static void waits_collect_what_their_callers_posted(void **st) {
  (void)st;
  schedrun_program_t *p;
  schedrun_t *s = open_warm(&p);
  schedrun_error_t err = {0};
  uint64_t posted0 = stats(s).posted;
  for (int i = 0; i < 100; i++) {
    job_in ji;
    schedrun_job_options_t jo;
    options(&jo, &ji, 1.5f * (float)i, i, false);
    schedrun_job_t id;
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
    assert_int_equal(schedrun_wait(s, id, -1, &r, &err), SCHEDRUN_OK);
    check(r, 1.5f * (float)i, i);
    schedrun_job_result_free(&r);
  }
  schedrun_stats_t a = stats(s);
  /* each was posted unless the device's thread held its turn then */
  print_message("  100 lone jobs: %llu posted by their callers, %llu of them collected by the device's thread\n",
                (unsigned long long)(a.posted - posted0), (unsigned long long)a.posted_late);
  if (a.posted - posted0 < 50) fail_msg("100 lone jobs: only %llu posted", (unsigned long long)(a.posted - posted0));
  assert_int_equal(a.completed, a.submitted);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* Nobody waits: the worker announces the job's end, and the device's
 * thread collects it and completes it. */
static void the_device_completes_a_job_nobody_waits_for(void **st) {
  (void)st;
  schedrun_program_t *p;
  schedrun_t *s = open_warm(&p);
  schedrun_error_t err = {0};
  for (int round = 0; round < 3; round++) {
    job_in ji;
    schedrun_job_t id = submit_posted(s, p, &ji, 7.0f + (float)round, 1000, false);
    schedrun_stats_t before = stats(s); /* read once it was posted: it may have ended already, not completed */
    before.completed = before.submitted - 1;
    TU_WAIT_FOR(stats(s).completed == before.completed + 1, "the posted job to complete with nobody waiting");
    assert_int_equal(stats(s).posted_late, before.posted_late + 1); /* collected by the device's thread */
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_wait(s, id, 0, &r, &err), SCHEDRUN_OK); /* there already */
    check(r, 7.0f + (float)round, 1000);
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* A wait with a timeout collects until its deadline, then gives up and
 * leaves the job posted; a later wait collects it, or, with nobody
 * waiting, the device's thread once the worker announces its end. Tried a
 * few times: a job of 200 million rounds outlasts the moment between
 * schedrun_submit and schedrun_wait on any machine not stopped that long. */
static void a_timed_wait_gives_up_and_a_later_one_collects(void **st) {
  (void)st;
  schedrun_program_t *p;
  schedrun_t *s = open_warm(&p);
  schedrun_error_t err = {0};
  enum { ROUNDS = 200000000 };
  int gave_up = 0;
  for (int t = 0; t < 3; t++) {
    job_in ji;
    schedrun_job_t id = submit_posted(s, p, &ji, 2.0f + (float)t, ROUNDS, false);
    schedrun_job_result_t *r = NULL;
    int rc = schedrun_wait(s, id, 1, &r, &err);
    if (rc == SCHEDRUN_ETIMEOUT) {
      gave_up++;
      schedrun_error_clear(&err);
      assert_null(r);
      if (t % 2 == 0) {
        /* nobody waits now: announced when it ends, as if never waited for */
        TU_WAIT_FOR(stats(s).completed == stats(s).submitted, "the job given up on to complete");
        rc = schedrun_wait(s, id, 0, &r, &err);
      } else {
        rc = schedrun_wait(s, id, -1, &r, &err); /* collected by this wait */
      }
    }
    assert_int_equal(rc, SCHEDRUN_OK);
    check(r, 2.0f + (float)t, ROUNDS);
    schedrun_job_result_free(&r);
  }
  print_message("  a wait of 1 ms gave up on %d of 3 jobs of %d rounds\n", gave_up, ROUNDS);
  assert_true(gave_up > 0);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* The worker dies under a posted job nobody waits for: its pidfd wakes the
 * device's thread, which completes the job with the fault; the next job
 * says the device is lost. */
static void a_fault_under_a_posted_job_completes_it(void **st) {
  (void)st;
  schedrun_program_t *p;
  schedrun_t *s = open_warm(&p);
  schedrun_error_t err = {0};
  job_in ji;
  schedrun_job_t id = submit_posted(s, p, &ji, 1.0f, 0, true);
  TU_WAIT_FOR(stats(s).completed == stats(s).submitted, "the faulting job to complete");
  schedrun_job_result_t *r;
  assert_int_equal(schedrun_wait(s, id, 0, &r, &err), SCHEDRUN_OK);
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  assert_int_equal(in->status, SCHEDRUN_EFAULT);
  const char *why = schedrun_job_result_error(r);
  if (!strstr(why, "SIGSEGV") || !strstr(why, "'slow'")) fail_msg("the fault is named as: %s", why);
  schedrun_job_result_free(&r);
  assert_non_null(schedrun_device_lost(s, 0));
  schedrun_job_options_t jo;
  options(&jo, &ji, 1.0f, 0, false);
  assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
  assert_int_not_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
  schedrun_job_result_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* Jobs that follow a posted one wait for it on the device, in order; a
 * shutdown with a posted job collects it first; nothing leaks. */
static void what_follows_a_posted_job_waits_for_it(void **st) {
  (void)st;
  schedrun_program_t *p;
  schedrun_t *s = open_warm(&p);
  schedrun_error_t err = {0};
  enum { N = 8 };
  job_in ji[N];
  schedrun_job_t ids[N];
  uint64_t posted0 = stats(s).posted;
  for (int i = 0; i < N; i++) {
    schedrun_job_options_t jo;
    options(&jo, &ji[i], 10.0f + (float)i, i == 0 ? 5000000 : i, false);
    assert_int_equal(schedrun_submit(s, p, &jo, &ids[i], &err), SCHEDRUN_OK);
  }
  assert_int_equal(stats(s).posted, posted0 + 1); /* the first, alone then */
  for (int i = N - 1; i >= 0; i--) {
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_wait(s, ids[i], -1, &r, &err), SCHEDRUN_OK);
    check(r, 10.0f + (float)i, i == 0 ? 5000000 : i);
    schedrun_job_result_free(&r);
  }
  /* posted, never waited for: the shutdown collects it */
  job_in last;
  (void)submit_posted(s, p, &last, 99.0f, 5000000, false);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(waits_collect_what_their_callers_posted),
      cmocka_unit_test(the_device_completes_a_job_nobody_waits_for),
      cmocka_unit_test(a_timed_wait_gives_up_and_a_later_one_collects),
      cmocka_unit_test(a_fault_under_a_posted_job_completes_it),
      cmocka_unit_test(what_follows_a_posted_job_waits_for_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
