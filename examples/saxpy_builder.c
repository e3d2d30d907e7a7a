/*
 * configs/saxpy.yaml written with the program builder: the same kernels,
 * buffers, steps and expectations, made by calls (a program that computes
 * its sizes or trip counts would pass them here instead of printing YAML).
 * Runs the program like `sched-run configs/saxpy.yaml` (argv[1]: a devices
 * spec, default auto) and prints the outcome; a mistake in a call is
 * reported naming the step it belongs to.
 */
#include <stdio.h>
#include <stdlib.h>

#include "schedrun.h"

#define N 4096

int main(int argc, char **argv) {
  schedrun_builder_t *b = NULL;
  schedrun_error_t err = {0};
  if (schedrun_builder_new(&b, "saxpy-loop", &err) != SCHEDRUN_OK) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  schedrun_builder_runs(b, 3, 2, 1); /* repeat 3, buffer sets 2, 1 job */
  schedrun_builder_kernel(b, "saxpy", "f32, ptr, ptr, i32",
                          "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
                          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "  if (i < n) y[i] = a * x[i] + y[i];\n"
                          "}\n",
                          NULL);
  schedrun_builder_kernel(b, "fill_slice", "ptr, i32, f32",
                          "extern \"C\" __global__ void fill_slice(float *p, int n, float v) {\n"
                          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "  if (i < n) p[i] = v;\n"
                          "}\n",
                          NULL);
  static float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = (float)i, y[i] = 1.0f;
  schedrun_builder_buffer(b, "x", "f32", N, x, sizeof x, 0);
  schedrun_builder_buffer(b, "y", "f32", N, y, sizeof y, 0);
  schedrun_builder_buffer(b, "out", "f32", 2 * N, NULL, 0, 0); /* zeroed */

  const unsigned grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
  schedrun_builder_launch(b, "saxpy", grid, block, (const char *[]){"2.0", "x", "y", "4096"}, 4);
  schedrun_builder_loop(b, 8); /* unrolled when recorded: 8 launches, each with its own arguments */
  schedrun_builder_launch(b, "fill_slice", (const unsigned[3]){4, 1, 1}, block,
                          (const char *[]){"out[$iter * 1024]", "1024", "$iter + 1 + 10 * $run"}, 3);
  schedrun_builder_end(b);
  schedrun_builder_copy(b, "y", "out", "16", NULL, NULL);

  schedrun_builder_expect_at(b, "y", (const uint64_t[]){0, 1, 4095}, (const char *[]){"1.0", "3.0", "8191.0"}, 3, NULL,
                             0);
  schedrun_builder_expect_at(b, "out", (const uint64_t[]){15, 16, 1024, 8191},
                             (const char *[]){"31.0", "1 + 10 * $run", "2 + 10 * $run", "8 + 10 * $run"}, 4,
                             "37104 + 81760 * $run", 1e-3);

  schedrun_program_t *p = NULL;
  int rc = schedrun_builder_finish(b, &p, &err);
  schedrun_builder_free(&b);
  schedrun_t *s = NULL;
  schedrun_report_t *rep = NULL;
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = argc > 1 ? argv[1] : "auto"; /* as `devices:` in the config */
  if (rc == SCHEDRUN_OK) rc = schedrun_open(&s, &o, &err);
  if (rc == SCHEDRUN_OK) rc = schedrun_run(s, p, NULL, &rep, &err);
  const schedrun_summary_t *sum = schedrun_report_summary(rep);
  if (sum)
    printf("%s: %u of %u jobs verified; nodes %llu created, %llu updated, %llu reused\n", schedrun_program_name(p),
           sum->verified, sum->jobs, (unsigned long long)sum->nodes_created, (unsigned long long)sum->nodes_updated,
           (unsigned long long)sum->nodes_reused);
  if (rc != SCHEDRUN_OK) fprintf(stderr, "%s\n", err.message ? err.message : schedrun_strerror(rc));
  schedrun_error_clear(&err);
  schedrun_report_free(&rep);
  schedrun_program_free(&p);
  schedrun_close(&s);
  return rc == SCHEDRUN_OK ? 0 : 1;
}
