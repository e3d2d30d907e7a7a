/* On a GPU: every shipped config and the record tests' loop run on the CUDA
 * backend and on the host backend, and their outputs are compared element
 * by element, every run and job. Where no GPU is found, the test reports
 * itself skipped (exit 77), not passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "program/program.h"
#include "schedrun.h"
#include "test_util.h"

static schedrun_t *open_spec(const char *spec) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = spec;
  schedrun_t *s = NULL;
  schedrun_error_t err = {0};
  if (schedrun_open(&s, &o, &err)) fail_msg("%s: %s", spec, err.message);
  return s;
}

static schedrun_report_t *run_all(schedrun_t *s, const char *path, schedrun_program_t **keep) {
  schedrun_error_t err = {0};
  /* loaded without a scheduler: it runs on s's devices whatever its config's devices: say */
  if (schedrun_program_load_file(NULL, path, keep, &err)) fail_msg("%s", err.message);
  schedrun_run_options_t o;
  schedrun_run_options_init(&o);
  o.keep_outputs = 1;
  schedrun_report_t *r = NULL;
  int rc = schedrun_run(s, *keep, &o, &r, &err);
  if (rc) fail_msg("%s on %s: %s", path, schedrun_device_name(s, 0), err.message);
  return r;
}

static void compare_config(const char *path, void *ctx) {
  (void)ctx;
  schedrun_t *host = open_spec("host"), *gpu = open_spec("cuda");
  schedrun_program_t *ph, *pg;
  schedrun_report_t *rh = run_all(host, path, &ph), *rg = run_all(gpu, path, &pg);
  prog_program *model;
  schedrun_error_t err = {0};
  assert_int_equal(prog_load_file(path, &model, &err), SCHEDRUN_OK);
  int runs = schedrun_report_summary(rh)->runs, jobs = (int)(schedrun_report_summary(rh)->jobs / (uint32_t)runs);
  size_t compared = 0;
  for (int r = 0; r < runs; r++)
    for (int j = 0; j < jobs; j++)
      for (uint32_t b = 0; b < model->nbuffers; b++) {
        const prog_buffer *buf = &model->buffers[b];
        size_t nh, ng;
        const void *h = schedrun_report_output(rh, r, j, buf->name, &nh), *g = schedrun_report_output(rg, r, j, buf->name, &ng);
        assert_non_null(h);
        assert_non_null(g);
        assert_int_equal(nh, ng);
        for (uint64_t i = 0; i < buf->count; i++) {
          double x = prog_element(buf->type, h, i), y = prog_element(buf->type, g, i);
          double tol = prog_type_is_float(buf->type) ? 1e-5 * fmax(1.0, fabs(x)) : 0;
          if (fabs(x - y) > tol)
            fail_msg("%s: run %d job %d buffer %s[%llu]: host %.9g, cuda %.9g", path, r, j, buf->name,
                     (unsigned long long)i, x, y);
          compared++;
        }
      }
  printf("  %s: %zu elements equal on host and %s\n", path, compared, schedrun_device_name(gpu, 0));
  prog_free(model);
  schedrun_report_free(&rh);
  schedrun_report_free(&rg);
  schedrun_program_free(&ph);
  schedrun_program_free(&pg);
  schedrun_close(&host);
  schedrun_close(&gpu);
}

static void test_configs_match_host(void **st) {
  (void)st;
  assert_true(tu_for_each_config(compare_config, NULL) >= 4);
}

/* The record tests' loop on the GPU: updates in place (CUDA graph exec
 * SetParams) must reach every unrolled iteration, every run. */
static void test_graph_updates_every_iteration(void **st) {
  (void)st;
  static const char text[] =
      "version: 1\nrepeat: 4\nbuffer_sets: 2\n"
      "kernels:\n  fill_slice:\n    params: [ptr, i32, f32]\n    source: |\n"
      "      extern \"C\" __global__ void fill_slice(float *p, int n, float v) {\n"
      "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n        if (i < n) p[i] = v;\n      }\n"
      "buffers:\n  out: {type: f32, count: 1024}\n  wide: {type: f64, count: 64}\n"
      "program:\n  - fill: {buffer: wide, value: \"$run + 0.25\"}\n"
      "  - loop:\n      trips: 8\n      body:\n"
      "        - launch: {kernel: fill_slice, grid: 2, block: 64,\n"
      "                   args: [{buffer: out, offset: \"$iter * 128\"}, 128, \"($iter + 1) * 1000 + $run\"]}\n";
  schedrun_t *s = open_spec("cuda");
  schedrun_program_t *p;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_program_load_string(s, text, "gpu-loop.yaml", &p, &err), SCHEDRUN_OK);
  schedrun_run_options_t o;
  schedrun_run_options_init(&o);
  o.keep_outputs = 1;
  schedrun_report_t *r;
  if (schedrun_run(s, p, &o, &r, &err)) fail_msg("%s", err.message);
  for (int run = 0; run < 4; run++) {
    const float *out = schedrun_report_output(r, run, 0, "out", NULL);
    const double *wide = schedrun_report_output(r, run, 0, "wide", NULL);
    for (int it = 0; it < 8; it++)
      for (int t = 0; t < 128; t++)
        if (out[it * 128 + t] != (float)((it + 1) * 1000 + run))
          fail_msg("run %d iteration %d: out[%d] = %g", run, it, it * 128 + t, out[it * 128 + t]);
    for (int i = 0; i < 64; i++) assert_true(wide[i] == run + 0.25);
  }
  /* runs 0 and 1 create the recordings of the two buffer sets (9 nodes
   * each); runs 2 and 3 update all 9 in place, or, where the driver cannot
   * update the f64 fill's 2-D memsets (before CUDA 13), re-create them */
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  if (!(sum->nodes_created == 2 * 9 && sum->nodes_updated == 2 * 9) &&
      !(sum->nodes_created == 4 * 9 && sum->nodes_updated == 0))
    fail_msg("nodes: %llu created, %llu updated", (unsigned long long)sum->nodes_created,
             (unsigned long long)sum->nodes_updated);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(void) {
  gpu_backend *b = NULL;
  schedrun_error_t err = {0};
  if (gpu_cuda_open(NULL, 0, 30000, &b, &err) != SCHEDRUN_OK) {
    printf("skipped: %s\n", err.message);
    schedrun_error_clear(&err);
    return 77;
  }
  printf("CUDA devices: %d (%s, %s)\n", b->ops->device_count(b), b->ops->device_name(b, 0), b->ops->arch(b, 0));
  gpu_backend_close(&b);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_configs_match_host),
      cmocka_unit_test(test_graph_updates_every_iteration),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
