/*
 * What blocks of cooperating threads cost on a host device: a tree
 * reduction in shared memory (blocks of 256, nine barriers per thread, so
 * each block's threads run as fibers switched at every barrier) against a
 * kernel that reads the same 4,194,304 floats with no barrier (plain loops).
 * Each is its own program; the figure is the median over ROUNDS jobs of the
 * job's execute time per element (both fill the same input first, so the
 * difference is what the barriers cost).
 *
 *   build/blocks_bench        prints blocks_<kernel>_ns_per_element=<median>
 */
#include <stdio.h>

#include "bench/bench_util.h"

#define N 4194304
#define ROUNDS 7

static const char head[] = "version: 1\nname: %s\nkernels:\n  k:\n    params: [ptr, ptr]\n    source: |\n%s"
                           "buffers:\n  x: {type: f32, count: 4194304, init: {fill: 1}}\n"
                           "  o: {type: f32, count: 16384}\n"
                           "program:\n  - launch: {kernel: k, grid: 16384, block: 256, args: [x, o]}\n"
                           "expect:\n  o: {at: {0: 256, 16383: 256}}\n";

static const char tree_src[] = "      extern \"C\" __global__ void k(const float *x, float *out) {\n"
                               "        __shared__ float tile[256];\n"
                               "        int t = threadIdx.x;\n"
                               "        tile[t] = x[blockIdx.x * 256 + t];\n"
                               "        __syncthreads();\n"
                               "        for (int s = 128; s > 0; s >>= 1) {\n"
                               "          if (t < s) tile[t] += tile[t + s];\n"
                               "          __syncthreads();\n"
                               "        }\n"
                               "        if (t == 0) out[blockIdx.x] = tile[0];\n"
                               "      }\n";

static const char plain_src[] = "      extern \"C\" __global__ void k(const float *x, float *out) {\n"
                                "        if (threadIdx.x == 0) {\n"
                                "          float s = 0;\n"
                                "          for (int i = 0; i < 256; i++) s += x[blockIdx.x * 256 + i];\n"
                                "          out[blockIdx.x] = s;\n"
                                "        }\n"
                                "      }\n";

static double per_element(schedrun_t *s, const char *name, const char *src) {
  char yaml[4096];
  snprintf(yaml, sizeof yaml, head, name, src);
  schedrun_error_t err = {0};
  schedrun_program_t *p;
  if (schedrun_program_load_string(s, yaml, name, &p, &err)) bench_die("load", &err);
  double ns[ROUNDS];
  for (int r = -1; r < ROUNDS; r++) { /* one to compile and record */
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    schedrun_job_result_t *res;
    if (schedrun_submit_wait(s, p, &o, &res, &err)) bench_die("submit", &err);
    const schedrun_job_info_t *in = schedrun_job_result_info(res);
    if (in->status != SCHEDRUN_OK || !in->verified) bench_die(schedrun_job_result_error(res), NULL);
    if (r >= 0) ns[r] = (double)in->execute_ns / N;
    schedrun_job_result_free(&res);
  }
  schedrun_program_free(&p);
  return bench_median(ns, ROUNDS);
}

int main(void) {
  schedrun_t *s = bench_open_host(1, NULL);
  double tree = per_element(s, "tree", tree_src), plain = per_element(s, "plain", plain_src);
  printf("blocks_tree_ns_per_element=%.1f\n", tree);
  printf("blocks_plain_ns_per_element=%.1f\n", plain);
  schedrun_close(&s);
  return 0;
}
