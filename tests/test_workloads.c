/*
 * The real workloads of examples/workloads: a tiled GEMM in shared memory, a
 * dot product of 16M floats reduced by warp shuffles and shared memory in
 * two passes, a histogram with per-block bins in shared memory, and the
 * Jacobi stencil of examples/jacobi.c over two devices. For
 * each, NumPy writes the inputs and what it computes from them
 * (examples/workloads/data.py), and one job pinned to each device must
 * verify against it: every element of the output, within the tolerances
 * the config states. SCHEDRUN_WORKLOADS_DEVICES picks the devices (default
 * host:2; "cuda" on the driver double).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "test_util.h"

static void run_example(const char *name) {
  char dir[] = "/tmp/schedrun-workload-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char script[4096], config[4200];
  snprintf(script, sizeof script, "%s/workloads/data.py", tu_env("SCHEDRUN_EXAMPLES"));
  char *argv[] = {"/usr/bin/python3", script, (char *)name, dir, NULL};
  char *out = NULL, *err_text = NULL;
  if (tu_run(argv, &out, &err_text) != 0) fail_msg("data.py %s: %s", name, err_text ? err_text : "");
  free(out);
  free(err_text);
  snprintf(config, sizeof config, "%s/%s.yaml", dir, name);
  schedrun_t *s = tu_open_devices("SCHEDRUN_WORKLOADS_DEVICES", "host:2", 2, NULL);
  schedrun_program_t *p;
  schedrun_error_t err = {0};
  if (schedrun_program_load_file(s, config, &p, &err) != SCHEDRUN_OK) fail_msg("%s: %s", config, err.message);
  for (int dev = 0; dev < schedrun_device_count(s); dev++) {
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.device = dev;
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_submit_wait(s, p, &o, &r, &err), SCHEDRUN_OK);
    const schedrun_job_info_t *in = schedrun_job_result_info(r);
    if (in->status != SCHEDRUN_OK || !in->verified || in->device != dev)
      fail_msg("%s on device %d: status %d, verified %d: %s", name, dev, in->status, in->verified,
               schedrun_job_result_error(r));
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  fs_remove_tree(dir);
}

static void test_gemm(void **st) {
  (void)st;
  run_example("gemm");
}

static void test_dot(void **st) {
  (void)st;
  run_example("dot");
}

static void test_histogram(void **st) {
  (void)st;
  run_example("histogram");
}

/* examples/jacobi.c: the grid split across two devices, 100 steps of two
 * jobs, halo rows handed across every step (device to device: 198 of them),
 * checked element by element against NumPy's. */
static void test_jacobi(void **st) {
  (void)st;
  char dir[] = "/tmp/schedrun-workload-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char script[4096], expected[4200];
  snprintf(script, sizeof script, "%s/workloads/data.py", tu_env("SCHEDRUN_EXAMPLES"));
  char *py[] = {"/usr/bin/python3", script, "jacobi", dir, NULL};
  char *out = NULL, *err = NULL;
  if (tu_run(py, &out, &err) != 0) fail_msg("data.py jacobi: %s", err ? err : "");
  free(out);
  free(err);
  snprintf(expected, sizeof expected, "%s/jacobi_expected.npy", dir);
  const char *devices = getenv("SCHEDRUN_WORKLOADS_DEVICES");
  char *run[] = {(char *)tu_env("SCHEDRUN_JACOBI"), (char *)(devices ? devices : "host:2"), expected, NULL};
  out = err = NULL;
  int rc = tu_run(run, &out, &err);
  if (rc != 0 || !strstr(out, "every element matches") || !strstr(out, "on two devices, 198 hand-offs from device to device"))
    fail_msg("jacobi exited %d:\n%s%s", rc, out ? out : "", err ? err : "");
  free(out);
  free(err);
  fs_remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_dot),
      cmocka_unit_test(test_histogram),
      cmocka_unit_test(test_jacobi),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
