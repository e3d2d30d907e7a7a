/*
 * Data the size users have: a 3 GiB buffer runs and verifies, a buffer past
 * what the device can hold is refused with both numbers, and a job's bytes
 * travel lent to its messages (msg.h, "Lent bytes"): every output element
 * back, and no block left in the table once jobs are done, also when a
 * shutdown cuts them short.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "messages/msg.h"

#include "test_util.h"

static int run_cli(const char *a1, const char *a2, char **out, char **err) {
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), (char *)a1, (char *)a2, NULL};
  return tu_run(argv, out, err);
}

/* sched-run --json over cfg: its report, or the test fails unless it exited
 * 0 with the run verified. */
static json_object *verified_report(const char *cfg) {
  char *out, *err;
  int rc = run_cli("--json", cfg, &out, &err);
  json_object *j = out ? json_tokener_parse(out) : NULL, *v = NULL;
  if (rc != 0 || !j || !json_object_object_get_ex(j, "verified", &v) || !json_object_get_boolean(v))
    fail_msg("exit %d:\n%s%s", rc, out, err);
  free(out);
  free(err);
  return j;
}

/* tests/configs/three_gib.yaml: one u32 buffer of 3 GiB written by a kernel,
 * checked around the 2 GiB boundary and at its last element. */
static void test_three_gib_buffer(void **st) {
  (void)st;
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/configs/three_gib.yaml", tu_env("SCHEDRUN_SOURCE_DIR"));
  json_object *j = verified_report(path), *devs = NULL;
  /* nothing copied in (it starts zeroed on the device), 3 GiB read back for its expectations */
  assert_true(json_object_object_get_ex(j, "devices", &devs));
  json_object *d0 = json_object_array_get_idx(devs, 0), *in = NULL, *outb = NULL;
  assert_true(json_object_object_get_ex(d0, "bytes_in", &in) && json_object_object_get_ex(d0, "bytes_out", &outb));
  assert_int_equal(json_object_get_int64(in), 0);
  assert_int_equal(json_object_get_int64(outb), 3221225472ll);
  json_object_put(j);
}

/* A buffer of 2 MiB without `init` starts every job zeroed, also when the
 * job before it on the device left its pages written: each of 8 jobs adds 1
 * to every element and must find all of them 1. (A large range is zeroed
 * only where the memory file holds pages: host_dev_zero.) */
static void test_large_buffer_zeroed_every_job(void **st) {
  (void)st;
  const char *cfg = tu_write_temp(0, "zeroed.yaml",
                                  "version: 1\nname: zeroed\ndevices: host:1\njobs: 8\n"
                                  "kernels:\n  bump:\n    params: [ptr]\n    source: |\n"
                                  "      extern \"C\" __global__ void bump(unsigned *y) {\n"
                                  "        y[blockIdx.x * blockDim.x + threadIdx.x] += 1u;\n"
                                  "      }\n"
                                  "buffers:\n  y: {type: u32, count: 524288}\n"
                                  "program:\n  - launch: {kernel: bump, grid: 512, block: 1024, args: [y]}\n"
                                  "expect:\n  y: {at: {0: 1, 262144: 1, 524287: 1}, sum: 524288}\n");
  json_object *j = verified_report(cfg), *v = NULL;
  assert_true(json_object_object_get_ex(j, "jobs_verified", &v));
  assert_int_equal(json_object_get_int(v), 8);
  json_object_put(j);
}

/* 512 GiB: more than any host device's buffer zone (48 GiB) and than this
 * machine's memory. Refused before anything is allocated, with what the
 * program needs and what the device can hold; exit 4 (memory). */
static void test_beyond_the_device_refused(void **st) {
  (void)st;
  const char *cfg = tu_write_temp(0, "huge.yaml",
                                  "version: 1\nname: huge\ndevices: host:1\n"
                                  "buffers:\n  y: {type: u32, count: 137438953472}\n"
                                  "program:\n  - fill: {buffer: y, value: 1, count: 16}\n"
                                  "expect:\n  y: {at: {0: 1}}\n");
  char *out, *err;
  int rc = run_cli("-q", cfg, &out, &err);
  if (rc != 4 || !strstr(err, "program 'huge' needs 549755813888 bytes (512.0 GiB) of buffers on host:0") ||
      !strstr(err, "which can hold ") || !strstr(err, " GiB free of "))
    fail_msg("exit %d (wanted 4):\n%s%s", rc, out, err);
  /* the number it can hold is a number, and less than what was asked */
  unsigned long long room = 0;
  const char *at = strstr(err, "which can hold ");
  assert_int_equal(sscanf(at, "which can hold %llu", &room), 1);
  assert_true(room < 549755813888ull);
  free(out);
  free(err);
}

static const char copy_program[] = "version: 1\nname: lent\n"
                                   "kernels:\n  twice:\n    params: [ptr, ptr, i32]\n    source: |\n"
                                   "      extern \"C\" __global__ void twice(const int *x, int *y, int n) {\n"
                                   "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                   "        if (i < n) y[i] = 2 * x[i] + 1;\n"
                                   "      }\n"
                                   "buffers:\n  x: {type: i32, count: 1048576}\n  y: {type: i32, count: 1048576}\n"
                                   "program:\n  - launch: {kernel: twice, grid: 4096, block: 256, args: [x, y, 1048576]}\n";

enum { N = 1048576, JOBS = 12 };

/* Jobs carrying 4 MiB in and 8 MiB out each, on two devices: every element
 * of every job's output back, and nothing left lent once they are done. */
/* n host devices and the program above on them. */
static schedrun_t *open_lent(int n, schedrun_program_t **p) {
  char spec[16];
  snprintf(spec, sizeof spec, "host:%d", n);
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = spec;
  schedrun_t *s = tu_open(&o);
  *p = tu_load(s, copy_program, "lent.yaml");
  return s;
}

static void test_lent_inputs_and_outputs(void **st) {
  (void)st;
  size_t before = msg_lent_count();
  schedrun_program_t *p;
  schedrun_t *s = open_lent(2, &p);
  int *x = malloc((size_t)JOBS * N * sizeof *x);
  schedrun_job_options_t jo[JOBS];
  schedrun_input_t in[JOBS];
  schedrun_job_t ids[JOBS];
  schedrun_job_result_t *res[JOBS];
  for (int j = 0; j < JOBS; j++) {
    for (int i = 0; i < N; i++) x[(size_t)j * N + (size_t)i] = i ^ (j << 20);
    in[j] = (schedrun_input_t){"x", x + (size_t)j * N, N * sizeof *x};
    schedrun_job_options_init(&jo[j]);
    jo[j].inputs = &in[j];
    jo[j].ninputs = 1;
    jo[j].keep_outputs = 1;
    jo[j].job = j;
  }
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit_many(s, p, JOBS, jo, ids, &err), SCHEDRUN_OK);
  memset(x, 0, (size_t)JOBS * N * sizeof *x); /* inputs were copied at submit */
  assert_int_equal(schedrun_wait_many(s, JOBS, ids, -1, res, &err), SCHEDRUN_OK);
  for (int j = 0; j < JOBS; j++) {
    assert_int_equal(schedrun_job_result_info(res[j])->status, SCHEDRUN_OK);
    size_t bx = 0, by = 0;
    const int *rx = schedrun_job_result_output(res[j], "x", &bx), *ry = schedrun_job_result_output(res[j], "y", &by);
    assert_non_null(rx);
    assert_non_null(ry);
    assert_int_equal(bx, N * sizeof(int));
    assert_int_equal(by, N * sizeof(int));
    for (int i = 0; i < N; i++) {
      int v = i ^ (j << 20);
      if (rx[i] != v || ry[i] != 2 * v + 1)
        fail_msg("job %d element %d: x %d y %d (wanted %d, %d)", j, i, rx[i], ry[i], v, 2 * v + 1);
    }
    schedrun_job_result_free(&res[j]);
  }
  free(x);
  schedrun_program_free(&p);
  schedrun_close(&s);
  assert_int_equal(msg_lent_count(), before);
}

/* A shutdown while jobs carrying bytes wait: every job completes (run, or
 * ECLOSED), and every block lent to a message that was never taken goes back
 * (the table empties; ASan would name a block lost on the way). */
static void test_shutdown_returns_lent_bytes(void **st) {
  (void)st;
  size_t before = msg_lent_count();
  schedrun_program_t *p;
  schedrun_t *s = open_lent(1, &p);
  enum { MANY = 40 };
  int *x = calloc(N, sizeof *x);
  schedrun_job_t ids[MANY];
  schedrun_error_t err = {0};
  for (int j = 0; j < MANY; j++) {
    schedrun_input_t in = {"x", x, N * sizeof *x};
    schedrun_job_options_t jo;
    schedrun_job_options_init(&jo);
    jo.inputs = &in;
    jo.ninputs = 1;
    jo.keep_outputs = 1;
    assert_int_equal(schedrun_submit(s, p, &jo, &ids[j], &err), SCHEDRUN_OK);
  }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_shutdown(s, -1, &err), SCHEDRUN_OK);
  for (int j = 0; j < MANY; j++) {
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_wait(s, ids[j], -1, &r, &err), SCHEDRUN_OK);
    int status = schedrun_job_result_info(r)->status;
    if (status != SCHEDRUN_OK && status != SCHEDRUN_ECLOSED) fail_msg("job %d: %s", j, schedrun_job_result_error(r));
    schedrun_job_result_free(&r);
  }
  schedrun_close(&s);
  assert_int_equal(msg_lent_count(), before);
  free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_three_gib_buffer),
      cmocka_unit_test(test_beyond_the_device_refused),
      cmocka_unit_test(test_large_buffer_zeroed_every_job),
      cmocka_unit_test(test_lent_inputs_and_outputs),
      cmocka_unit_test(test_shutdown_returns_lent_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
