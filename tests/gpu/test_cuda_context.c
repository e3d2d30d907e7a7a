/* The application's current CUDA context is its own: with none current on
 * its thread, opening a scheduler on the GPUs, running a job, allocating and
 * freeing host memory through it, registering that memory and closing it
 * each leave none current; with device 0's primary context current, each
 * leaves that one; with it pushed on the thread's context stack, each leaves
 * the stack as it was. On a GPU (libcuda.so.1, or $SCHEDRUN_CUDA_LIBRARY: the
 * driver double in the suite); where there is none, the test reports itself
 * skipped (exit 77). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_app.h"
#include "test_util.h"

static const char job_yaml[] =
    "version: 1\nname: scale\nkernels:\n  scale:\n    params: [ptr, f32, i32]\n    source: |\n"
    "      extern \"C\" __global__ void scale(float *y, float a, int n) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) y[i] = a * (float)i;\n"
    "      }\n"
    "buffers:\n  y: {type: f32, count: 256}\n"
    "program:\n  - launch: {kernel: scale, grid: 2, block: 128, args: [y, 3.0, 256]}\n";

static void *current(cu_app *a) {
  void *c = (void *)1;
  assert_int_equal(a->current(&c), 0);
  return c;
}

/* Every call that runs on the caller's thread, each followed by a look at
 * what is current: `want`. */
static void each_call_keeps(cu_app *a, void *want) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "cuda";
  schedrun_t *s = tu_open(&o);
  assert_ptr_equal(current(a), want);
  schedrun_program_t *p = tu_load(s, job_yaml, "scale.yaml");
  schedrun_job_result_t *r = NULL;
  schedrun_error_t err = {0};
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.keep_outputs = 1;
  assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
  if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) fail_msg("the job: %s", schedrun_job_result_error(r));
  size_t n = 0;
  const float *y = schedrun_job_result_output(r, "y", &n);
  assert_int_equal(n, 256 * sizeof(float));
  for (int i = 0; i < 256; i++)
    if (y[i] != 3.0f * (float)i) fail_msg("y[%d] = %g, not %g", i, y[i], 3.0 * i);
  schedrun_job_result_free(&r);
  assert_ptr_equal(current(a), want);
  void *host = NULL;
  assert_int_equal(schedrun_host_alloc(s, 4096, &host, &err), SCHEDRUN_OK);
  assert_ptr_equal(current(a), want);
  schedrun_buffer_t *m = NULL;
  assert_int_equal(schedrun_buffer_register(s, host, 4096, &m, &err), SCHEDRUN_OK);
  assert_ptr_equal(current(a), want);
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_host_free(s, host, &err), SCHEDRUN_OK);
  assert_ptr_equal(current(a), want);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  assert_ptr_equal(current(a), want);
}

static void test_callers_context_stays(void **st) {
  (void)st;
  cu_app a;
  if (!getenv("SCHEDRUN_CUDA_LIBRARY")) setenv("SCHEDRUN_CUDA_LIBRARY", "libcuda.so.1", 1);
  if (!cu_app_try(&a) || a.init(0) != 0) {
    printf("skipped: no CUDA driver or no GPU here\n");
    exit(77);
  }
  int dev = 0;
  if (a.get(&dev, 0) != 0) {
    printf("skipped: the driver sees no GPU\n");
    exit(77);
  }
  assert_int_equal(a.set(NULL), 0);
  each_call_keeps(&a, NULL);
  void *ctx = NULL;
  assert_int_equal(a.retain(&ctx, dev), 0);
  assert_int_equal(a.set(ctx), 0);
  each_call_keeps(&a, ctx);
  assert_int_equal(a.set(NULL), 0);
  assert_null(current(&a));
  /* a context the application pushed: still the top of its stack after
   * every call, and its stack no deeper (the pop leaves none current) */
  assert_int_equal(a.push(ctx), 0);
  each_call_keeps(&a, ctx);
  void *popped = NULL;
  assert_int_equal(a.pop(&popped), 0);
  assert_ptr_equal(popped, ctx);
  assert_null(current(&a));
  assert_int_equal(a.release(dev), 0);
  dlclose(a.dl);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_callers_context_stays)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
