/*
 * A barrier-free kernel on a host device against the same loop as plain C:
 * saxpy (y = a x + y) over 4,194,304 floats, blocks of 256 threads. Each
 * block's threads run as one loop over threadIdx.x that the compiler turns
 * into vector code (docs/design.md, "Host kernels as vector code"). The plain C is the loop
 * itself, compiled with -O3 for the baseline x86-64 (bench/CMakeLists: this
 * file), on one thread.
 *
 * The kernel's time per element is the difference between a job of 11
 * launches and one of 1, over 10 launches of N elements, so that the job's
 * fills of x and y cancel out; medians of ROUNDS.
 *
 *   build/kernel_bench                prints saxpy_schedrun_ns_per_element=...
 *                                     and saxpy_plain_c_ns_per_element=...
 *   build/kernel_bench --in-process N T   a job of T launches over N elements,
 *                                     run in this process, for callgrind:
 *                                     with --toggle-collect=hw_handle (the
 *                                     device's side of every request), the
 *                                     difference between T = 11 and T = 1,
 *                                     over 10 N, is the kernel's instructions
 *                                     per element
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"

#define N (1 << 22)
#define ROUNDS 7

static const char saxpy_src[] =
    "      extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) y[i] = a * x[i] + y[i];\n"
    "      }\n";

/* A program of `trips` launches of saxpy over n elements. */
static schedrun_program_t *load(schedrun_t *s, int n, int trips) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "version: 1\nname: saxpy%d\n"
           "kernels:\n  saxpy:\n    params: [f32, ptr, ptr, i32]\n    source: |\n%s"
           "buffers:\n"
           "  x: {type: f32, count: %d, init: {iota: {start: 0, step: 1}}}\n"
           "  y: {type: f32, count: %d, init: {fill: 1.0}}\n"
           "program:\n"
           "  - loop:\n      trips: %d\n      body:\n"
           "        - launch: {kernel: saxpy, grid: %d, block: 256, args: [0.5, x, y, %d]}\n",
           trips, saxpy_src, n, n, trips, (n + 255) / 256, n);
  schedrun_error_t err = {0};
  schedrun_program_t *p;
  if (schedrun_program_load_string(s, yaml, "saxpy", &p, &err)) bench_die("load", &err);
  return p;
}

/* Runs p once; checks y against `trips` passes of the same arithmetic;
 * returns the job's execute time. */
static uint64_t run(schedrun_t *s, schedrun_program_t *p, int n, int trips) {
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.keep_outputs = 1;
  schedrun_job_result_t *res;
  schedrun_error_t err = {0};
  if (schedrun_submit_wait(s, p, &o, &res, &err)) bench_die("submit", &err);
  const schedrun_job_info_t *in = schedrun_job_result_info(res);
  if (in->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(res), NULL);
  const float *y = schedrun_job_result_output(res, "y", NULL);
  if (!y) bench_die("the job kept no y", NULL);
  for (int i = 0; i < n; i++) {
    float want = 1.0f;
    for (int t = 0; t < trips; t++) want = 0.5f * (float)i + want;
    if (y[i] != want) {
      fprintf(stderr, "saxpy: y[%d] is %g, want %g\n", i, y[i], want);
      exit(1);
    }
  }
  uint64_t ns = in->execute_ns;
  schedrun_job_result_free(&res);
  return ns;
}

static void plain_saxpy(float a, const float *x, float *y, int n) {
  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--in-process") == 0) {
    int n = atoi(argv[2]), trips = atoi(argv[3]);
    if (n <= 0 || trips <= 0) bench_die("--in-process takes a number of elements and of launches", NULL);
    schedrun_options_t o;
    schedrun_options_init(&o);
    o.host_in_process = 1;
    schedrun_t *s = bench_open_host(1, &o);
    schedrun_program_t *p = load(s, n, trips);
    run(s, p, n, trips);
    printf("elements=%d\n", n);
    schedrun_program_free(&p);
    schedrun_close(&s);
    return 0;
  }
  schedrun_t *s = bench_open_host(1, NULL);
  schedrun_program_t *one = load(s, N, 1), *eleven = load(s, N, 11);
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  if (!x || !y) bench_die("out of memory", NULL);
  for (int i = 0; i < N; i++) x[i] = (float)i, y[i] = 1.0f;
  double ours[ROUNDS], plain[ROUNDS];
  for (int r = -1; r < ROUNDS; r++) { /* one to compile and record */
    uint64_t t1 = run(s, one, N, 1), t11 = run(s, eleven, N, 11);
    uint64_t c0 = bench_ns();
    for (int t = 0; t < 10; t++) plain_saxpy(0.5f, x, y, N);
    uint64_t c1 = bench_ns();
    if (r >= 0) {
      ours[r] = t11 > t1 ? (double)(t11 - t1) / (10.0 * N) : 0.0;
      plain[r] = (double)(c1 - c0) / (10.0 * N);
    }
  }
  /* the plain loop did 80 passes of the same arithmetic: check one element */
  float want = 1.0f;
  for (int t = 0; t < 10 * (ROUNDS + 1); t++) want = 0.5f * (float)(N - 1) + want;
  if (y[N - 1] != want) bench_die("the plain loop computed something else", NULL);
  printf("saxpy_schedrun_ns_per_element=%.3f\n", bench_median(ours, ROUNDS));
  printf("saxpy_plain_c_ns_per_element=%.3f\n", bench_median(plain, ROUNDS));
  free(x);
  free(y);
  schedrun_program_free(&one);
  schedrun_program_free(&eleven);
  schedrun_close(&s);
  return 0;
}
