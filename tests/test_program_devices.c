/* A program loaded into a scheduler runs where its config says, or is
 * refused: a host:2 config loaded after schedrun_open(NULL) names both specs;
 * loaded without a scheduler it runs wherever it is submitted; into a
 * scheduler of two host devices it runs on both. And a buffer argument whose
 * offset, computed per job, reaches the buffer's end fails that job with the
 * offset's value, while the jobs before it verify. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const char two_devices_yaml[] =
    "version: 1\n"
    "name: two\n"
    "devices: host:2\n"
    "jobs: 8\n"
    "kernels:\n"
    "  k:\n"
    "    params: [ptr, i32]\n"
    "    source: |\n"
    "      extern \"C\" __global__ void k(int *o, int j) { o[threadIdx.x] = j; }\n"
    "buffers:\n"
    "  o: {type: i32, count: 4}\n"
    "program:\n"
    "  - launch: {kernel: k, grid: 1, block: 4, args: [o, \"$job\"]}\n"
    "expect:\n"
    "  o: {values: [\"$job\", \"$job\", \"$job\", \"$job\"]}\n";

static void test_other_devices_refused(void **st) {
  (void)st;
  schedrun_t *s = tu_open(NULL); /* auto: one host device here */
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_program_load_string(s, two_devices_yaml, "two.yaml", &p, &err), SCHEDRUN_ECONFIG);
  assert_null(p);
  if (!strstr(err.message, "two.yaml:3:10: devices 'host:2' are not this scheduler's: it was opened with devices "
                           "'auto' (host:0)"))
    fail_msg("%s", err.message);
  schedrun_error_clear(&err);
  /* loaded without a scheduler, it runs on the one it is submitted to */
  assert_int_equal(schedrun_program_load_string(NULL, two_devices_yaml, "two.yaml", &p, &err), SCHEDRUN_OK);
  schedrun_report_t *r = NULL;
  if (schedrun_run(s, p, NULL, &r, &err)) fail_msg("%s", err.message);
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->ndevices, 1);
  assert_int_equal(sum->verified, 8);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_its_devices_run_it(void **st) {
  (void)st;
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:2";
  schedrun_t *s = tu_open(&o);
  schedrun_program_t *p = tu_load(s, two_devices_yaml, "two.yaml");
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  schedrun_run_options_t ro;
  schedrun_run_options_init(&ro);
  ro.keep_outputs = 1;
  if (schedrun_run(s, p, &ro, &r, &err)) fail_msg("%s", err.message);
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->ndevices, 2);
  assert_int_equal(sum->verified, 8);
  assert_int_equal(sum->devices[0].jobs + sum->devices[1].jobs, 8);
  /* every job verified its own $job, on whichever device ran it */
  for (int j = 0; j < 8; j++) {
    size_t bytes = 0;
    const int32_t *v = schedrun_report_output(r, 0, j, "o", &bytes);
    assert_non_null(v);
    assert_int_equal(bytes, 16);
    for (int i = 0; i < 4; i++) assert_int_equal(v[i], j);
  }
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  /* devices: auto (the default written out) fits any scheduler; host (one
   * host device) does not fit two */
  char *yaml = strdup(two_devices_yaml);
  memcpy(strstr(yaml, "host:2"), "auto  ", 6);
  schedrun_program_t *q = tu_load(s, yaml, "auto.yaml");
  schedrun_program_free(&q);
  memcpy(strstr(yaml, "auto  "), "host  ", 6);
  assert_int_equal(schedrun_program_load_string(s, yaml, "host.yaml", &q, &err), SCHEDRUN_ECONFIG);
  assert_non_null(strstr(err.message, "host.yaml:3:10: devices 'host' are not this scheduler's: it was opened with "
                                      "devices 'host:2' (host:0, host:1)"));
  schedrun_error_clear(&err);
  free(yaml);
  schedrun_close(&s);
}

/* offset "$job" into a 4-element buffer: jobs 0-3 point at an element, job 4
 * at the end, which it may not */
static void test_offset_at_the_end_refused(void **st) {
  (void)st;
  schedrun_t *s = tu_open(NULL);
  schedrun_program_t *p = tu_load(s,
                                  "version: 1\njobs: 5\n"
                                  "kernels:\n  k:\n    params: [ptr]\n    source: |\n"
                                  "      extern \"C\" __global__ void k(int *o) { o[0] = 1; }\n"
                                  "buffers:\n  o: {type: i32, count: 4}\n"
                                  "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [{buffer: o, offset: \"$job\"}]}\n",
                                  "end.yaml");
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_run(s, p, NULL, &r, &err), SCHEDRUN_ECONFIG);
  if (!strstr(err.message, "end.yaml:11:5: argument 1 of 'k': offset 4 is outside buffer 'o' (4 elements; a buffer "
                           "argument points at one of them)"))
    fail_msg("%s", err.message);
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->verified, 4);
  assert_int_equal(sum->failed, 1);
  for (int j = 0; j < 5; j++) {
    schedrun_job_info_t info;
    assert_int_equal(schedrun_report_job(r, 0, j, &info), SCHEDRUN_OK);
    assert_int_equal(info.status, j < 4 ? SCHEDRUN_OK : SCHEDRUN_ECONFIG);
  }
  schedrun_error_clear(&err);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_other_devices_refused),
      cmocka_unit_test(test_its_devices_run_it),
      cmocka_unit_test(test_offset_at_the_end_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
