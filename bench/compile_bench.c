/*
 * Compile benchmarks:
 *   1. 16 distinct kernels compiled with a pool of 1 worker, then of 2
 *      (cold private caches both times): the speed-up.
 *   2. The CPU time of a cold compile per kernel (the compiler processes'),
 *      for those 16 kernels and for a small one (saxpy), with 1 worker.
 *   3. A program whose kernels are all in the memory cache: the COMPILE ->
 *      COMPILED round trip through the scheduler.
 * Each figure is the median of several rounds measured in this one run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench/bench_util.h"
#include "schedrun.h"

#define KERNELS 16

static double now_ms(void) { return bench_ns() / 1e6; }


/* 16 kernels that differ in a constant (so each is its own cache key) and do
 * enough work that the compiler has something to chew on. */
static char *program_text(int salt) {
  size_t cap = 1 << 16, len = 0;
  char *s = malloc(cap);
  len += (size_t)snprintf(s + len, cap - len, "version: 1\nname: bench%d\nkernels:\n", salt);
  for (int k = 0; k < KERNELS; k++)
    len += (size_t)snprintf(s + len, cap - len,
                            "  k%d:\n    params: [ptr, i32]\n    source: |\n"
                            "      template <int N> __device__ float poly(float x) { return poly<N - 1>(x) * x + N; }\n"
                            "      template <> __device__ float poly<0>(float x) { return x; }\n"
                            "      extern \"C\" __global__ void k%d(float *p, int n) {\n"
                            "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                            "        if (i < n) p[i] = poly<%d>(p[i]) + %d.0f;\n"
                            "      }\n",
                            k, k, 40 + k, salt * 100 + k);
  len += (size_t)snprintf(s + len, cap - len, "buffers:\n  a: {type: f32, count: 64}\nprogram:\n");
  for (int k = 0; k < KERNELS; k++)
    len += (size_t)snprintf(s + len, cap - len, "  - launch: {kernel: k%d, grid: 1, block: 64, args: [a, 64]}\n", k);
  return s;
}

static const char small_text[] =
    "version: 1\nname: small\nkernels:\n  saxpy:\n    params: [f32, ptr, ptr, i32]\n    source: |\n"
    "      extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) y[i] = a * x[i] + y[i];\n"
    "      }\n"
    "buffers:\n  x: {type: f32, count: 64}\n  y: {type: f32, count: 64}\n"
    "program:\n  - launch: {kernel: saxpy, grid: 1, block: 64, args: [2.0, x, y, 64]}\n";

/* The CPU time of the processes this one has waited for, in ms. */
static double children_cpu_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

typedef struct compile_cost {
  double wall_ms, cpu_ms; /* the run's wall time; the compilers' CPU time */
} compile_cost;

/* Runs `text` (whose `kernels` kernels all miss: no disk cache, a new
 * memory cache) with a pool of `workers`. */
static compile_cost compile_once(int workers, const char *text, uint64_t kernels) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host";
  o.no_disk_cache = 1;
  o.compile_workers = workers;
  schedrun_t *s;
  schedrun_error_t err = {0};
  if (schedrun_open(&s, &o, &err)) {
    fprintf(stderr, "%s\n", err.message);
    exit(1);
  }
  schedrun_program_t *p;
  if (schedrun_program_load_string(s, text, "bench.yaml", &p, &err)) {
    fprintf(stderr, "%s\n", err.message);
    exit(1);
  }
  schedrun_report_t *r;
  double c0 = children_cpu_ms(), t0 = now_ms();
  if (schedrun_run(s, p, NULL, &r, &err)) {
    fprintf(stderr, "%s\n", err.message);
    exit(1);
  }
  compile_cost cost = {now_ms() - t0, children_cpu_ms() - c0};
  if (schedrun_report_summary(r)->cache_misses != kernels) {
    fprintf(stderr, "expected %llu misses\n", (unsigned long long)kernels);
    exit(1);
  }
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
  return cost;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--print-config")) {
    char *text = program_text(12345);
    fputs(text, stdout);
    free(text);
    return 0;
  }
  int rounds = argc > 1 ? atoi(argv[1]) : 3;
  if (rounds < 1) rounds = 1;
  if (rounds > 16) rounds = 16;
  double one[16], two[16], cpu[16], small[16];
  for (int i = 0; i < rounds; i++) {
    char *text = program_text(2 * i);
    compile_cost c = compile_once(1, text, KERNELS);
    free(text);
    one[i] = c.wall_ms;
    cpu[i] = c.cpu_ms / KERNELS;
    text = program_text(2 * i + 1);
    two[i] = compile_once(2, text, KERNELS).wall_ms;
    free(text);
    small[i] = compile_once(1, small_text, 1).cpu_ms;
  }
  double m1 = bench_median(one, rounds), m2 = bench_median(two, rounds);
  printf("compile_pool_1_ms=%.1f\ncompile_pool_2_ms=%.1f\ncompile_pool_speedup=%.2f\n", m1, m2, m1 / m2);
  printf("compile_cpu_per_kernel_ms=%.1f\ncompile_small_kernel_cpu_ms=%.1f\n", bench_median(cpu, rounds),
         bench_median(small, rounds));

  /* memory-cache hits: a second program with the same kernels */
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host";
  o.no_disk_cache = 1;
  schedrun_t *s;
  schedrun_error_t err = {0};
  schedrun_open(&s, &o, &err);
  char *text = program_text(999);
  double hits[64];
  int n = 0;
  for (int i = 0; i < 41; i++) {
    schedrun_program_t *p;
    schedrun_report_t *r;
    schedrun_program_load_string(s, text, "bench.yaml", &p, &err);
    if (schedrun_run(s, p, NULL, &r, &err)) {
      fprintf(stderr, "%s\n", err.message);
      return 1;
    }
    const schedrun_summary_t *sum = schedrun_report_summary(r);
    if (i > 0) {
      if (sum->cache_hits != KERNELS) {
        fprintf(stderr, "expected memory hits\n");
        return 1;
      }
      hits[n++] = sum->compile_ns / 1e3;
    }
    schedrun_report_free(&r);
    schedrun_program_free(&p);
  }
  free(text);
  schedrun_close(&s);
  double mh = bench_median(hits, n);
  printf("memory_hit_program_us=%.1f\nmemory_hit_per_kernel_us=%.2f\n", mh, mh / KERNELS);
  return 0;
}
