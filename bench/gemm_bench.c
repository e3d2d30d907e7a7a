/*
 * GEMM on a host device against the same computation as plain C: C = A B
 * with M = N = K = 512 in single precision. schedrun runs the tiled kernel
 * of examples/workloads/gemm.yaml (16 x 16 tiles in shared memory, two
 * barriers per tile step, so each block's 256 threads run as fibers); the
 * plain C is the same tiling as loops over tiles, rows and columns, compiled
 * with -O3 (bench/CMakeLists: this file), on one thread. The figure is
 * GFLOP/s (2 M N K floating-point operations), the median of ROUNDS.
 *
 *   build/gemm_bench        prints gemm_schedrun_gflops=... gemm_plain_c_gflops=...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"

#define N 512
#define TILE 16
#define ROUNDS 5

static const char gemm_yaml[] =
    "version: 1\nname: gemm\n"
    "kernels:\n  sgemm:\n    params: [ptr, ptr, ptr, i32]\n    source: |\n"
    "      #define TILE 16\n"
    "      extern \"C\" __global__ void sgemm(const float *A, const float *B, float *C, int n) {\n"
    "        __shared__ float As[TILE][TILE], Bs[TILE][TILE];\n"
    "        int tx = threadIdx.x, ty = threadIdx.y;\n"
    "        int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;\n"
    "        float acc = 0.0f;\n"
    "        for (int t = 0; t < n; t += TILE) {\n"
    "          As[ty][tx] = A[row * n + t + tx];\n"
    "          Bs[ty][tx] = B[(t + ty) * n + col];\n"
    "          __syncthreads();\n"
    "          for (int k = 0; k < TILE; k++) acc += As[ty][k] * Bs[k][tx];\n"
    "          __syncthreads();\n"
    "        }\n"
    "        C[row * n + col] = acc;\n"
    "      }\n"
    "buffers:\n"
    "  a: {type: f32, count: 262144, init: {iota: {start: 0, step: 1}}}\n"
    "  b: {type: f32, count: 262144, init: {fill: 0.5}}\n"
    "  c: {type: f32, count: 262144}\n"
    "program:\n  - launch: {kernel: sgemm, grid: [32, 32], block: [16, 16], args: [a, b, c, 512]}\n";

/* The kernel's tiling as plain loops: per tile of C, per step along K. */
static void plain_gemm(const float *A, const float *B, float *C) {
  for (int by = 0; by < N; by += TILE)
    for (int bx = 0; bx < N; bx += TILE) {
      float acc[TILE][TILE] = {{0}};
      for (int t = 0; t < N; t += TILE)
        for (int ty = 0; ty < TILE; ty++)
          for (int k = 0; k < TILE; k++) {
            float a = A[(by + ty) * N + t + k];
            for (int tx = 0; tx < TILE; tx++) acc[ty][tx] += a * B[(t + k) * N + bx + tx];
          }
      for (int ty = 0; ty < TILE; ty++) memcpy(&C[(by + ty) * N + bx], acc[ty], sizeof acc[ty]);
    }
}

int main(void) {
  const double flop = 2.0 * N * N * N;
  schedrun_t *s = bench_open_host(1, NULL);
  schedrun_error_t err = {0};
  schedrun_program_t *p;
  if (schedrun_program_load_string(s, gemm_yaml, "gemm", &p, &err)) bench_die("load", &err);
  double ours[ROUNDS], plain[ROUNDS];
  float *A = malloc(N * N * sizeof *A), *B = malloc(N * N * sizeof *B), *C = malloc(N * N * sizeof *C);
  if (!A || !B || !C) bench_die("out of memory", NULL);
  for (int i = 0; i < N * N; i++) A[i] = (float)i, B[i] = 0.5f;
  for (int r = -1; r < ROUNDS; r++) { /* one to compile and record */
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.keep_outputs = 1;
    schedrun_job_result_t *res;
    if (schedrun_submit_wait(s, p, &o, &res, &err)) bench_die("submit", &err);
    const schedrun_job_info_t *in = schedrun_job_result_info(res);
    if (in->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(res), NULL);
    uint64_t t0 = bench_ns();
    plain_gemm(A, B, C);
    uint64_t t1 = bench_ns();
    const float *c = schedrun_job_result_output(res, "c", NULL);
    for (int i = 0; c && i < N * N; i += 4099) /* both computed the same products in the same order */
      if (c[i] != C[i]) {
        fprintf(stderr, "gemm: c[%d] is %g from the kernel, %g from plain C\n", i, c[i], C[i]);
        return 1;
      }
    if (r >= 0) {
      ours[r] = flop / (double)in->execute_ns;
      plain[r] = flop / (double)(t1 - t0);
    }
    schedrun_job_result_free(&res);
  }
  printf("gemm_schedrun_gflops=%.2f\n", bench_median(ours, ROUNDS));
  printf("gemm_plain_c_gflops=%.2f\n", bench_median(plain, ROUNDS));
  free(A);
  free(B);
  free(C);
  schedrun_program_free(&p);
  schedrun_close(&s);
  return 0;
}
