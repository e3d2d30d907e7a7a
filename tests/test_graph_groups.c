/*
 * A graph's jobs sent together (lib/deps_group.c): a chain of one program's
 * steps leaves in one message and runs on one device with its buffer kept
 * there from step to step; a fork of short jobs goes together on one device;
 * a step that fails ends the rest of the chain with SCHEDRUN_EDEPEND naming
 * it, every job completing exactly once, whether it failed on the device or
 * in the library's check of its results. SCHEDRUN_DAG_DEVICES picks the
 * devices (default host:2; the driver double runs it as "cuda").
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/api.h"
#include "schedrun.h"
#include "test_util.h"

#define N 64

/* x[i] += 1; job k of a chain expects k + 1 */
static const char incr_yaml[] =
    "version: 1\nname: incr\nkernels:\n  k:\n    params: [ptr]\n    source: |\n"
    "      extern \"C\" __global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n"
    "buffers:\n  x: {type: f32, count: 64}\n"
    "program:\n  - launch: {kernel: k, grid: 1, block: 64, args: [x]}\n"
    "expect:\n  x: {at: {0: \"$job + 1\", 63: \"$job + 1\"}}\n";

/* y = 2 x + y over 64 floats, x from 0 up, y all 1 (the diamond's saxpy) */
static const char saxpy_yaml[] =
    "version: 1\nname: saxpy\nkernels:\n  k:\n    params: [ptr, ptr]\n    source: |\n"
    "      extern \"C\" __global__ void k(const float *x, float *y) { int i = threadIdx.x; y[i] = 2.0f * x[i] + y[i]; }\n"
    "buffers:\n  x: {type: f32, count: 64, init: {iota: {start: 0, step: 1}}}\n"
    "  y: {type: f32, count: 64, init: {fill: 1.0}}\n"
    "program:\n  - launch: {kernel: k, grid: 1, block: 64, args: [x, y]}\n";

/* x[i] += 1, and job 2 of a chain faults (its device is lost) */
static const char fault_at_2_yaml[] =
    "version: 1\nname: fault-at-2\nkernels:\n  k:\n    params: [ptr, i32]\n    source: |\n"
    "      extern \"C\" __global__ void k(float *x, int job) {\n"
    "        if (job == 2 && threadIdx.x == 0) *(volatile int *)0 = 1;\n"
    "        x[threadIdx.x] += 1.0f;\n      }\n"
    "buffers:\n  x: {type: f32, count: 64}\n"
    "program:\n  - launch: {kernel: k, grid: 1, block: 64, args: [x, \"$job\"]}\n";

static schedrun_t *open_devices(int n) {
  const char *devices = getenv("SCHEDRUN_DAG_DEVICES");
  char spec[16];
  snprintf(spec, sizeof spec, "host:%d", n);
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = devices && *devices ? devices : spec;
  schedrun_t *s = tu_open(&o);
  if (!devices || !*devices) assert_int_equal(schedrun_device_count(s), n);
  return s;
}

static int add_job(schedrun_graph_t *g, schedrun_program_t *p, int job, int keep) {
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.job = job;
  o.keep_outputs = keep;
  int node = -1;
  schedrun_error_t err = {0};
  if (schedrun_graph_job(g, p, &o, &node, &err)) fail_msg("%s", err.message);
  return node;
}

static void handoff(schedrun_graph_t *g, int from, const char *fb, int to, const char *tb) {
  schedrun_error_t err = {0};
  if (schedrun_graph_handoff(g, from, fb, to, tb, &err)) fail_msg("%s", err.message);
}

/* A chain of `len` steps of p, step k job k, each handing x to the next. */
static schedrun_graph_t *chain(schedrun_program_t *p, int len, int keep) {
  schedrun_graph_t *g;
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  for (int k = 0; k < len; k++) {
    int node = add_job(g, p, k, keep);
    assert_int_equal(node, k);
    if (k) handoff(g, k - 1, "x", k, "x");
  }
  return g;
}

static schedrun_job_result_t *wait_status(schedrun_t *s, schedrun_job_t id, int want) {
  schedrun_job_result_t *r = NULL;
  schedrun_error_t err = {0};
  if (schedrun_wait(s, id, TU_PATIENCE_MS, &r, &err)) fail_msg("wait %llu: %s", (unsigned long long)id, err.message);
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  if (in->status != want)
    fail_msg("job %llu: status %d (%s), wanted %d", (unsigned long long)id, in->status, schedrun_job_result_error(r),
             want);
  return r;
}

/* Nothing else completes: every job of the test was handed over once. */
static void nothing_more(schedrun_t *s) {
  schedrun_job_t id;
  schedrun_job_result_t *r = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_wait_any(s, 0, &id, &r, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
}

/* 200 steps: one SUBMIT_MANY carries all of them (no SUBMIT of their own),
 * every step runs on the first step's device, verifies its own value and
 * took its x there; 20 times over, so that every round starts from a
 * device whose table the round before left empty. */
static void a_chain_leaves_together(void **state) {
  (void)state;
  enum { LEN = 200, ROUNDS = 20 };
  schedrun_t *s = open_devices(2);
  schedrun_program_t *p = tu_load(s, incr_yaml, "incr");
  schedrun_graph_t *g = chain(p, LEN, 1);
  schedrun_job_t ids[LEN];
  for (int round = 0; round < ROUNDS; round++) {
    uint64_t one = msg_tally_jobs(MSG_SUBMIT), many = msg_tally_jobs(MSG_SUBMIT_MANY);
    schedrun_error_t err = {0};
    if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("round %d: %s", round, err.message);
    assert_int_equal(msg_tally_jobs(MSG_SUBMIT) - one, 0);
    assert_int_equal(msg_tally_jobs(MSG_SUBMIT_MANY) - many, LEN);
    int device = -1;
    for (int k = 0; k < LEN; k++) {
      schedrun_job_result_t *r = wait_status(s, ids[k], SCHEDRUN_OK);
      const schedrun_job_info_t *in = schedrun_job_result_info(r);
      assert_true(in->verified);
      if (k == 0) device = in->device;
      if (in->device != device) fail_msg("round %d: step %d ran on device %d, step 0 on %d", round, k, in->device, device);
      assert_int_equal(in->handoffs_local, k ? 1u : 0u);
      assert_int_equal(in->handoffs_copied, 0);
      size_t bytes = 0;
      const float *x = schedrun_job_result_output(r, "x", &bytes);
      assert_int_equal(bytes, N * sizeof(float));
      for (int i = 0; i < N; i++)
        if (x[i] != (float)(k + 1)) fail_msg("round %d step %d: x[%d] is %g, not %d", round, k, i, x[i], k + 1);
      schedrun_job_result_free(&r);
    }
  }
  nothing_more(s);
  schedrun_graph_free(&g);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A diamond of one program on one device: A -> B, C -> D, B and C taking A's
 * y as x, D taking B's y as x and C's as y. All four leave together; D's y
 * is checked element by element: A: y = 2i + 1; B, C: 2(2i + 1) + 1 = 4i + 3;
 * D: 2(4i + 3) + (4i + 3) = 12i + 9. */
static void a_diamond_on_one_device(void **state) {
  (void)state;
  if (getenv("SCHEDRUN_DAG_DEVICES")) skip(); /* the devices are the double's: two */
  schedrun_t *s = open_devices(1);
  schedrun_program_t *p = tu_load(s, saxpy_yaml, "saxpy");
  schedrun_graph_t *g;
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  int a = add_job(g, p, 0, 1), b = add_job(g, p, 1, 1), c = add_job(g, p, 2, 1), d = add_job(g, p, 3, 1);
  handoff(g, a, "y", b, "x");
  handoff(g, a, "y", c, "x");
  handoff(g, b, "y", d, "x");
  handoff(g, c, "y", d, "y");
  for (int round = 0; round < 10; round++) {
    uint64_t one = msg_tally_jobs(MSG_SUBMIT), many = msg_tally_jobs(MSG_SUBMIT_MANY);
    schedrun_job_t ids[4];
    schedrun_error_t err = {0};
    if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
    assert_int_equal(msg_tally_jobs(MSG_SUBMIT) - one, 0);
    assert_int_equal(msg_tally_jobs(MSG_SUBMIT_MANY) - many, 4);
    const uint32_t local[4] = {0, 1, 1, 2};
    const float slope[4] = {2, 4, 4, 12}, at0[4] = {1, 3, 3, 9};
    for (int k = 0; k < 4; k++) {
      schedrun_job_result_t *r = wait_status(s, ids[k], SCHEDRUN_OK);
      assert_int_equal(schedrun_job_result_info(r)->handoffs_local, local[k]);
      const float *y = schedrun_job_result_output(r, "y", NULL);
      assert_non_null(y);
      for (int i = 0; i < N; i++)
        if (y[i] != slope[k] * (float)i + at0[k])
          fail_msg("round %d job %c: y[%d] is %g, not %g", round, 'A' + k, i, y[i], slope[k] * i + at0[k]);
      schedrun_job_result_free(&r);
    }
  }
  nothing_more(s);
  schedrun_graph_free(&g);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* Step 3 of 8 is numbered wrongly, so its check fails in the library after it
 * ran: the steps after it, which ran on the device with its x, complete
 * with SCHEDRUN_EDEPEND naming it, and their own answers are dropped. */
static void a_step_that_fails_its_check_ends_the_chain(void **state) {
  (void)state;
  enum { LEN = 8, BAD = 3 };
  schedrun_t *s = open_devices(2);
  schedrun_program_t *p = tu_load(s, incr_yaml, "incr");
  schedrun_graph_t *g;
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  for (int k = 0; k < LEN; k++) {
    add_job(g, p, k == BAD ? 100 : k, 0);
    if (k) handoff(g, k - 1, "x", k, "x");
  }
  schedrun_job_t ids[LEN];
  schedrun_error_t err = {0};
  for (int round = 0; round < 5; round++) {
    if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
    char named[96];
    snprintf(named, sizeof named, "job %llu ('incr')", (unsigned long long)ids[BAD]);
    for (int k = 0; k < LEN; k++) {
      int want = k < BAD ? SCHEDRUN_OK : k == BAD ? SCHEDRUN_EVERIFY : SCHEDRUN_EDEPEND;
      schedrun_job_result_t *r = wait_status(s, ids[k], want);
      if (k > BAD && !strstr(schedrun_job_result_error(r), named))
        fail_msg("step %d does not name step %d (%s): %s", k, BAD, named, schedrun_job_result_error(r));
      schedrun_job_result_free(&r);
    }
  }
  nothing_more(s);
  schedrun_graph_free(&g);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* Step 2 of 6 faults on its device (which is lost): steps 0 and 1 succeed,
 * step 2 fails with the fault, 3 to 5 complete with SCHEDRUN_EDEPEND naming
 * it; a chain submitted afterwards runs whole on the other device. */
static void a_step_that_faults_ends_the_chain(void **state) {
  (void)state;
  if (getenv("SCHEDRUN_DAG_DEVICES")) skip(); /* on the double a fault ends the process */
  enum { LEN = 6 };
  schedrun_t *s = open_devices(2);
  schedrun_program_t *pf = tu_load(s, fault_at_2_yaml, "fault-at-2"), *p = tu_load(s, incr_yaml, "incr");
  schedrun_graph_t *g = chain(pf, LEN, 0);
  schedrun_job_t ids[LEN];
  schedrun_error_t err = {0};
  if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
  schedrun_graph_free(&g);
  char named[96];
  snprintf(named, sizeof named, "job %llu ('fault-at-2')", (unsigned long long)ids[2]);
  int lost = -1;
  for (int k = 0; k < LEN; k++) {
    int want = k < 2 ? SCHEDRUN_OK : k == 2 ? SCHEDRUN_EFAULT : SCHEDRUN_EDEPEND;
    schedrun_job_result_t *r = wait_status(s, ids[k], want);
    if (k == 0) lost = schedrun_job_result_info(r)->device;
    if (k > 2 && (!strstr(schedrun_job_result_error(r), named) || !strstr(schedrun_job_result_error(r), "SIGSEGV")))
      fail_msg("step %d: %s", k, schedrun_job_result_error(r));
    schedrun_job_result_free(&r);
  }
  assert_non_null(schedrun_device_lost(s, lost));
  g = chain(p, LEN, 0);
  if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
  for (int k = 0; k < LEN; k++) {
    schedrun_job_result_t *r = wait_status(s, ids[k], SCHEDRUN_OK);
    assert_int_equal(schedrun_job_result_info(r)->device, 1 - lost);
    schedrun_job_result_free(&r);
  }
  nothing_more(s);
  schedrun_graph_free(&g);
  schedrun_program_free(&pf);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_chain_leaves_together),
      cmocka_unit_test(a_diamond_on_one_device),
      cmocka_unit_test(a_step_that_fails_its_check_ends_the_chain),
      cmocka_unit_test(a_step_that_faults_ends_the_chain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
