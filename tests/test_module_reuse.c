/*
 * Programs loaded, run and freed one after another on two host devices:
 * each kernel's module is loaded into the devices' workers and unloaded
 * again, so the dynamic linker hands the thread-local storage module ids of
 * the modules that went to the ones that come. Every program must still run its
 * own kernel on its own threadIdx, blockDim and gridDim. (glibc before 2.38
 * gives a module built with TLS descriptors a stale block after such a
 * reuse, its bug 29039: a launch then wrote half of its elements, or none.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { N = 65536, PROGRAMS = 12 };

static void test_each_program_runs_its_own_kernel(void **st) {
  (void)st;
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:2";
  schedrun_t *s = tu_open(&o);
  /* the shipped saxpy config first, five times: its modules come and go
   * (the sequence that showed the fault) */
  char path[512];
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  for (int k = 0; k < 5; k++) {
    schedrun_program_t *p = NULL;
    schedrun_report_t *r = NULL;
    schedrun_error_t err = {0};
    schedrun_run_options_t ro;
    schedrun_run_options_init(&ro);
    ro.keep_outputs = 1;
    if (schedrun_program_load_file(s, path, &p, &err) != SCHEDRUN_OK || schedrun_run(s, p, &ro, &r, &err) != SCHEDRUN_OK)
      fail_msg("saxpy.yaml, time %d: %s", k, err.message);
    assert_int_equal(schedrun_report_summary(r)->verified, schedrun_report_summary(r)->jobs);
    schedrun_report_free(&r);
    schedrun_program_free(&p);
  }
  for (int k = 0; k < PROGRAMS; k++) {
    /* a grid-stride loop over two halves of out: every thread reads
     * gridDim and blockDim, each program its own kernel (its own module) */
    /* saxpy again, another kernel of the same name: a grid-stride loop
     * over two halves, so every thread reads gridDim and blockDim */
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "version: 1\nname: reuse%d\n"
             "kernels:\n"
             "  saxpy:\n"
             "    params: [f32, ptr, ptr, i32]\n"
             "    source: |\n"
             "      extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
             "        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
             "          y[i] = a * x[i] + y[i] + %d.0f;\n"
             "      }\n"
             "buffers:\n"
             "  x: {type: f32, count: %d, init: {iota: {start: 0, step: 1}}}\n"
             "  y: {type: f32, count: %d, init: {fill: 1.0}}\n"
             "program:\n"
             "  - loop:\n"
             "      trips: 2\n"
             "      body:\n"
             "        - launch: {kernel: saxpy, grid: 128, block: 64,\n"
             "                   args: [2.0, {buffer: x, offset: \"$iter * %d\"}, {buffer: y, offset: \"$iter * %d\"}, %d]}\n",
             k, k, N, N, N / 2, N / 2, N / 2);
    schedrun_program_t *p = tu_load(s, yaml, "reuse.yaml");
    schedrun_run_options_t ro;
    schedrun_run_options_init(&ro);
    ro.keep_outputs = 1;
    schedrun_report_t *r = NULL;
    schedrun_error_t err = {0};
    if (schedrun_run(s, p, &ro, &r, &err) != SCHEDRUN_OK) fail_msg("program %d: %s", k, err.message);
    size_t bytes = 0;
    const float *out = schedrun_report_output(r, 0, 0, "y", &bytes);
    assert_non_null(out);
    assert_int_equal(bytes, N * sizeof(float));
    for (int i = 0; i < N; i++) { /* y = 2 x + 1 + k, exact in floats */
      float want = 2.0f * (float)i + 1.0f + (float)k;
      if (out[i] != want) fail_msg("program %d: y[%d] is %g, not %g", k, i, (double)out[i], (double)want);
    }
    schedrun_report_free(&r);
    schedrun_program_free(&p);
  }
  schedrun_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_each_program_runs_its_own_kernel)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
