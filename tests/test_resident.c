/*
 * Resident buffers (`resident: true`, SCHEDRUN_BUFFER_RESIDENT): a buffer
 * set's resident buffers stay on their device between its jobs, each job
 * starting from what the last one left, with no byte copied in or out unless
 * the job asks for its outputs; a job pinned to another device takes them
 * there, copied once, device to device (counted in bytes_peer), and the
 * set's later jobs follow them, in the order they were submitted. Every
 * element of every result is checked. SCHEDRUN_RESIDENT_DEVICES picks the
 * two devices (default host:2; "cuda" on the driver double).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/program.h"
#include "test_util.h"

enum { N = 1024 };

/* acc (resident) += 1 + $run % 2 * 1000 each job; x, not resident, is
 * filled from init every job and doubled. */
static const char counter_yaml[] =
    "version: 1\nname: counter\nbuffer_sets: 2\n"
    "kernels:\n  bump:\n    params: [ptr, ptr, i32, i32]\n    source: |\n"
    "      extern \"C\" __global__ void bump(int *acc, int *x, int n, int by) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) { acc[i] += by; x[i] *= 2; }\n"
    "      }\n"
    "buffers:\n"
    "  acc: {type: i32, count: 1024, resident: true, init: {iota: {start: 0, step: 0}}}\n"
    "  x: {type: i32, count: 1024, init: {iota: {start: 0, step: 1}}}\n"
    "program:\n  - launch: {kernel: bump, grid: 4, block: 256, args: [acc, x, 1024, \"1 + $run % 2 * 1000\"]}\n";

static schedrun_t *open_two(void) { return tu_open_devices("SCHEDRUN_RESIDENT_DEVICES", "host:2", 2, NULL); }

static schedrun_job_options_t job(int run, int device, int keep) {
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.run = run;
  o.device = device;
  o.keep_outputs = keep;
  return o;
}

/* Every element of acc is `want` and of x twice its index. */
static void check_outputs(schedrun_job_result_t *r, int want, const char *what) {
  size_t bytes = 0;
  const int *acc = schedrun_job_result_output(r, "acc", &bytes), *x = schedrun_job_result_output(r, "x", NULL);
  if (!acc || !x || bytes != N * sizeof(int)) fail_msg("%s: no outputs", what);
  for (int i = 0; i < N; i++)
    if (acc[i] != want || x[i] != 2 * i) fail_msg("%s: element %d: acc %d x %d (wanted %d, %d)", what, i, acc[i], x[i], want, 2 * i);
}

static void wait_all(schedrun_t *s, size_t n, const schedrun_job_t *ids, schedrun_job_result_t **res) {
  schedrun_error_t err = {0};
  if (schedrun_wait_many(s, n, ids, -1, res, &err)) fail_msg("%s", err.message);
  for (size_t k = 0; k < n; k++)
    if (schedrun_job_result_info(res[k])->status != SCHEDRUN_OK)
      fail_msg("job %zu: %s", k, schedrun_job_result_error(res[k]));
}

/* 100 jobs of buffer set 0 in a row: each starts from what the one before
 * left, none copies a byte in or out but the first (its init) and the last
 * (it asks for its outputs); all on the device the first ran on. */
static void test_hundred_jobs_in_a_row(void **st) {
  (void)st;
  schedrun_t *s = open_two();
  schedrun_program_t *p = tu_load(s, counter_yaml, "counter.yaml");
  enum { JOBS = 100 };
  schedrun_job_options_t o[JOBS];
  for (int k = 0; k < JOBS; k++) o[k] = job(0, -1, k == JOBS - 1);
  schedrun_job_t ids[JOBS];
  schedrun_job_result_t *res[JOBS];
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit_many(s, p, JOBS, o, ids, &err), SCHEDRUN_OK);
  wait_all(s, JOBS, ids, res);
  int dev = schedrun_job_result_info(res[0])->device;
  for (int k = 0; k < JOBS; k++) {
    const schedrun_job_info_t *in = schedrun_job_result_info(res[k]);
    assert_int_equal(in->device, dev);
    assert_int_equal(in->bytes_peer, 0);
    /* x is filled every job (from a copy of its init kept on the device, or
     * through the host); acc only by the first */
    if (k > 0 && k < JOBS - 1 && in->bytes_out != 0) fail_msg("job %d read %llu bytes back", k, (unsigned long long)in->bytes_out);
    if (k > 0 && in->bytes_in > N * sizeof(int)) fail_msg("job %d copied %llu bytes in", k, (unsigned long long)in->bytes_in);
  }
  const schedrun_job_info_t *last = schedrun_job_result_info(res[JOBS - 1]);
  assert_int_equal(last->bytes_out, 2 * N * sizeof(int)); /* acc and x, asked for */
  check_outputs(res[JOBS - 1], JOBS, "the 100th job");
  for (int k = 0; k < JOBS; k++) schedrun_job_result_free(&res[k]);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A job pinned to the other device takes the set's resident buffers there,
 * copied once device to device; the set's later jobs follow them, in order,
 * even when submitted together with the ones before the move. Buffer set 1
 * (runs 1, 3, ...) counts by 1001 on its own. */
static void test_moved_once_then_followed(void **st) {
  (void)st;
  schedrun_t *s = open_two();
  schedrun_program_t *p = tu_load(s, counter_yaml, "counter.yaml");
  enum { BEFORE = 10, AFTER = 10, JOBS = BEFORE + 1 + AFTER + 2 };
  schedrun_job_options_t o[JOBS];
  size_t k = 0;
  o[k++] = job(0, 0, 1); /* set 0 starts on device 0 */
  for (int i = 1; i < BEFORE; i++) o[k++] = job(0, -1, 1);
  o[k++] = job(0, 1, 1); /* moves set 0 to device 1 */
  for (int i = 0; i < AFTER; i++) o[k++] = job(0, -1, 1);
  o[k++] = job(1, 0, 1); /* set 1: its own, on device 0 */
  o[k++] = job(1, -1, 1);
  assert_int_equal(k, JOBS);
  schedrun_job_t ids[JOBS];
  schedrun_job_result_t *res[JOBS];
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit_many(s, p, JOBS, o, ids, &err), SCHEDRUN_OK);
  wait_all(s, JOBS, ids, res);
  for (size_t i = 0; i < BEFORE + 1 + AFTER; i++) {
    const schedrun_job_info_t *in = schedrun_job_result_info(res[i]);
    char what[64];
    snprintf(what, sizeof what, "set 0, job %zu", i);
    check_outputs(res[i], (int)i + 1, what); /* each after the one before, wherever it ran */
    assert_int_equal(in->device, i < BEFORE ? 0 : 1);
    assert_int_equal(in->bytes_peer, i == BEFORE ? N * sizeof(int) : 0); /* copied once */
  }
  check_outputs(res[JOBS - 2], 1001, "set 1, first job");
  check_outputs(res[JOBS - 1], 2002, "set 1, second job");
  assert_int_equal(schedrun_job_result_info(res[JOBS - 1])->device, 0);
  for (size_t i = 0; i < JOBS; i++) schedrun_job_result_free(&res[i]);
  /* and back, job by job */
  for (int i = 0; i < 2; i++) {
    schedrun_job_options_t jo = job(0, i == 0 ? 0 : -1, 1);
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
    assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
    assert_int_equal(schedrun_job_result_info(r)->device, 0);
    assert_int_equal(schedrun_job_result_info(r)->bytes_peer, i == 0 ? N * sizeof(int) : 0);
    check_outputs(r, BEFORE + 1 + AFTER + 1 + i, "set 0, back on device 0");
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* The builder's SCHEDRUN_BUFFER_RESIDENT is `resident: true`; a record-only
 * job leaves the set where it was; a value other than true or false is
 * refused naming the buffer. */
static void test_builder_flag_and_mistakes(void **st) {
  (void)st;
  schedrun_t *s = open_two();
  schedrun_builder_t *b;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_builder_new(&b, "built", &err), SCHEDRUN_OK);
  schedrun_builder_kernel(b, "inc", "ptr",
                          "extern \"C\" __global__ void inc(int *a) { a[threadIdx.x] += threadIdx.x + 1; }", NULL);
  schedrun_builder_buffer(b, "a", "i32", 32, NULL, 0, SCHEDRUN_BUFFER_RESIDENT);
  const unsigned one[3] = {1, 1, 1}, block[3] = {32, 1, 1};
  const char *args[] = {"a"};
  schedrun_builder_launch(b, "inc", one, block, args, 1);
  schedrun_program_t *p;
  assert_int_equal(schedrun_builder_finish(b, &p, &err), SCHEDRUN_OK);
  schedrun_builder_free(&b);
  schedrun_job_options_t ro = job(0, 1, 0);
  ro.record_only = 1;
  schedrun_job_result_t *r;
  assert_int_equal(schedrun_submit_wait(s, p, &ro, &r, &err), SCHEDRUN_OK);
  schedrun_job_result_free(&r);
  for (int k = 1; k <= 3; k++) {
    schedrun_job_options_t jo = job(0, -1, 1);
    assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
    const int *a = schedrun_job_result_output(r, "a", NULL);
    assert_non_null(a);
    for (int i = 0; i < 32; i++)
      if (a[i] != k * (i + 1)) fail_msg("job %d: a[%d] is %d", k, i, a[i]);
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  prog_program *bad = NULL;
  const char *yaml = "version: 1\nbuffers:\n  a: {type: i32, count: 4, resident: yes}\nprogram:\n"
                     "  - fill: {buffer: a, value: 1}\n";
  assert_int_equal(prog_load_string(yaml, strlen(yaml), "r.yaml", &bad, &err), SCHEDRUN_ECONFIG);
  if (!strstr(err.message, "r.yaml:3:38: resident of buffer 'a' is true or false, not 'yes'")) fail_msg("%s", err.message);
  schedrun_error_clear(&err);
}

/* A job that waits for its set's resident buffers to leave a device still
 * busy with the set completes at its deadline, saying what it waited for
 * (the busy job is held by a host step until then); the set then moves with
 * the next job, carrying what the busy job left. */
static void test_deadline_while_waiting_to_move(void **st) {
  (void)st;
  schedrun_t *s = open_two();
  tu_gate g = TU_GATE_INIT;
  schedrun_builder_t *b;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_builder_new(&b, "held", &err), SCHEDRUN_OK);
  schedrun_builder_buffer(b, "a", "i32", 256, NULL, 0, SCHEDRUN_BUFFER_RESIDENT);
  schedrun_builder_fill(b, "a", "9", NULL, NULL);
  schedrun_builder_host(b, "hold", tu_gate_hold, &g);
  schedrun_program_t *p;
  assert_int_equal(schedrun_builder_finish(b, &p, &err), SCHEDRUN_OK);
  schedrun_builder_free(&b);
  schedrun_job_options_t oa = job(0, 0, 0), ob = job(0, 1, 0);
  ob.timeout_ms = 100;
  schedrun_job_t ia, ib;
  assert_int_equal(schedrun_submit(s, p, &oa, &ia, &err), SCHEDRUN_OK);
  tu_gate_wait_entered(&g); /* A holds device 0, and the set */
  assert_int_equal(schedrun_submit(s, p, &ob, &ib, &err), SCHEDRUN_OK);
  schedrun_job_result_t *r;
  /* it comes by its deadline, not by A (held until then) */
  if (schedrun_wait(s, ib, TU_PATIENCE_MS, &r, &err) != SCHEDRUN_OK) fail_msg("job B never completed: %s", err.message);
  assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_ETIMEOUT);
  if (!strstr(schedrun_job_result_error(r), "while it waited for the resident buffers of buffer set 0 to leave"))
    fail_msg("%s", schedrun_job_result_error(r));
  schedrun_job_result_free(&r);
  tu_gate_open(&g);
  assert_int_equal(schedrun_wait(s, ia, -1, &r, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
  schedrun_job_result_free(&r);
  schedrun_job_options_t oc = job(0, 1, 1);
  assert_int_equal(schedrun_submit_wait(s, p, &oc, &r, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->device, 1);
  assert_int_equal(schedrun_job_result_info(r)->bytes_peer, 256 * sizeof(int));
  const int *a = schedrun_job_result_output(r, "a", NULL);
  for (int i = 0; a && i < 256; i++) assert_int_equal(a[i], 9);
  assert_non_null(a);
  schedrun_job_result_free(&r);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hundred_jobs_in_a_row),
      cmocka_unit_test(test_moved_once_then_followed),
      cmocka_unit_test(test_builder_flag_and_mistakes),
      cmocka_unit_test(test_deadline_while_waiting_to_move),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
