/*
 * Kernels whose threads cooperate within a block: __shared__ memory,
 * __syncthreads() and its counting forms, warp shuffles and votes, atomics
 * on shared memory, blocks of up to 1024 threads in one, two and three
 * dimensions. Every output is checked element by element against what the
 * CUDA programming guide says each thread computes, on every device, with
 * two buffer sets so that a stale binding shows. A barrier some threads of
 * a block never reach, and a warp operation waiting for lanes that
 * returned, fail their job naming the kernel and the block, instead of
 * hanging. SCHEDRUN_BLOCKS_DEVICES picks the devices (default host:2;
 * "cuda" on the driver double).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static schedrun_t *open_here(void) { return tu_open_devices("SCHEDRUN_BLOCKS_DEVICES", "host:2", 2, NULL); }

static const void *output(const schedrun_job_result_t *r, const char *buffer, size_t want) {
  size_t bytes = 0;
  const void *v = schedrun_job_result_output(r, buffer, &bytes);
  if (!v || bytes != want) fail_msg("buffer %s: %zu bytes, wanted %zu", buffer, bytes, want);
  return v;
}

/* ---- block reductions in shared memory ---- */

/* Each block of 1024 threads sums its 1024 values (x[i] + $run, x[i] = i)
 * by a tree in shared memory, a barrier between levels; a second kernel
 * counts with __syncthreads_count and decides with _and / _or. */
static const char reduce_yaml[] =
    "version: 1\nname: reduce\nbuffer_sets: 2\n"
    "kernels:\n"
    "  block_sum:\n    params: [ptr, ptr, i64]\n    source: |\n"
    "      extern \"C\" __global__ void block_sum(const long long *x, long long *out, long long run) {\n"
    "        __shared__ long long tile[1024];\n"
    "        unsigned t = threadIdx.x;\n"
    "        tile[t] = x[blockIdx.x * blockDim.x + t] + run;\n"
    "        __syncthreads();\n"
    "        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
    "          if (t < s) tile[t] += tile[t + s];\n"
    "          __syncthreads();\n"
    "        }\n"
    "        if (t == 0) out[blockIdx.x] = tile[0];\n"
    "      }\n"
    "  counts:\n    params: [ptr, ptr, i64]\n    source: |\n"
    "      extern \"C\" __global__ void counts(const long long *x, int *out, long long run) {\n"
    "        long long v = x[blockIdx.x * blockDim.x + threadIdx.x] + run;\n"
    "        int c = __syncthreads_count(v % 3 == 0);\n"
    "        int all = __syncthreads_and(v >= 0);\n"
    "        int any = __syncthreads_or(v == 5);\n"
    "        if (threadIdx.x == 0) { out[3 * blockIdx.x] = c; out[3 * blockIdx.x + 1] = all;\n"
    "                                out[3 * blockIdx.x + 2] = any; }\n"
    "      }\n"
    "buffers:\n"
    "  x: {type: i64, count: 4096, init: {iota: {start: 0, step: 1}}}\n"
    "  sums: {type: i64, count: 4}\n"
    "  c: {type: i32, count: 12}\n"
    "program:\n"
    "  - launch: {kernel: block_sum, grid: 4, block: 1024, args: [x, sums, $run]}\n"
    "  - launch: {kernel: counts, grid: 4, block: 1024, args: [x, c, $run]}\n";

static void test_block_reductions(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  schedrun_program_t *p = tu_load(s, reduce_yaml, "reduce.yaml");
  for (int dev = 0; dev < schedrun_device_count(s); dev++)
    for (int run = 0; run < 4; run++) {
      schedrun_job_result_t *r = tu_job_on(s, p, dev, run);
      const long long *sums = output(r, "sums", 4 * sizeof(long long));
      const int *c = output(r, "c", 12 * sizeof(int));
      for (int b = 0; b < 4; b++) {
        long long want = 0;
        int div3 = 0, has5 = 0;
        for (long long i = b * 1024; i < (b + 1) * 1024; i++) {
          long long v = i + run;
          want += v;
          div3 += v % 3 == 0;
          has5 |= v == 5;
        }
        if (sums[b] != want) fail_msg("device %d, run %d: block %d sums to %lld, wanted %lld", dev, run, b, sums[b], want);
        if (c[3 * b] != div3 || c[3 * b + 1] != 1 || c[3 * b + 2] != has5)
          fail_msg("device %d, run %d, block %d: count %d and %d or %d, wanted %d and 1 or %d", dev, run, b, c[3 * b],
                   c[3 * b + 1], c[3 * b + 2], div3, has5);
      }
      schedrun_job_result_free(&r);
    }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* ---- warps ---- */

/* Per thread of two blocks of 96 (three warps each): the shuffles of its
 * value v = 1000 * block + thread, the votes on whether its lane is odd
 * and on v > 0, and a warp sum by __shfl_down_sync; widths of 8 too. */
static const char warp_yaml[] =
    "version: 1\nname: warp\n"
    "kernels:\n  w:\n    params: [ptr]\n    source: |\n"
    "      extern \"C\" __global__ void w(int *o) {\n"
    "        int t = threadIdx.x, i = blockIdx.x * blockDim.x + t, v = 1000 * blockIdx.x + t;\n"
    "        unsigned all = 0xffffffffu;\n"
    "        int *r = o + 12 * i;\n"
    "        r[0] = __shfl_sync(all, v, 3);\n"
    "        r[1] = __shfl_up_sync(all, v, 1);\n"
    "        r[2] = __shfl_down_sync(all, v, 2);\n"
    "        r[3] = __shfl_xor_sync(all, v, 5);\n"
    "        r[4] = __shfl_sync(all, v, 1, 8);\n"
    "        r[5] = __shfl_down_sync(all, v, 3, 8);\n"
    "        r[6] = (int)__ballot_sync(all, t & 1);\n"
    "        r[7] = __any_sync(all, t == 40);\n"
    "        r[8] = __all_sync(all, v > 0);\n"
    "        int sum = v;\n"
    "        for (int d = 16; d > 0; d /= 2) sum += __shfl_down_sync(all, sum, d);\n"
    "        r[9] = sum;\n"
    "        __syncwarp();\n"
    "        r[10] = (int)__activemask();\n"
    "        r[11] = __shfl_xor_sync(all, 2.5f * v, 1) == 2.5f * (v ^ 1) ? 1 : 0;\n"
    "      }\n"
    "buffers:\n  o: {type: i32, count: 2304}\n"
    "program:\n  - launch: {kernel: w, grid: 2, block: 96, args: [o]}\n";

static void test_warp_operations(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  schedrun_program_t *p = tu_load(s, warp_yaml, "warp.yaml");
  for (int dev = 0; dev < schedrun_device_count(s); dev++) {
    schedrun_job_result_t *r = tu_job_on(s, p, dev, 0);
    const int *o = output(r, "o", 2304 * sizeof(int));
    for (int b = 0; b < 2; b++)
      for (int t = 0; t < 96; t++) {
        int lane = t % 32, base = t - lane, v0 = 1000 * b; /* v of thread u is v0 + u */
        int want[12];
        want[0] = v0 + base + 3;
        want[1] = v0 + (lane >= 1 ? t - 1 : t);
        want[2] = v0 + (lane + 2 < 32 ? t + 2 : t);
        want[3] = v0 + base + (lane ^ 5);
        want[4] = v0 + base + lane / 8 * 8 + 1;
        want[5] = v0 + (lane % 8 + 3 < 8 ? t + 3 : t);
        want[6] = (int)0xaaaaaaaau;
        want[7] = base == 32 ? 1 : 0; /* thread 40 is in the second warp */
        want[8] = b > 0 || base > 0 ? 1 : 0; /* v = 0 for thread 0 of block 0 */
        /* a tree by __shfl_down_sync: lane l ends with the sum over lanes
         * l, l + 1, ... as far as each step reached within the warp */
        int acc[32];
        for (int l = 0; l < 32; l++) acc[l] = v0 + base + l;
        for (int d = 16; d > 0; d /= 2) {
          int next[32];
          for (int l = 0; l < 32; l++) next[l] = acc[l] + (l + d < 32 ? acc[l + d] : acc[l]);
          memcpy(acc, next, sizeof acc);
        }
        want[9] = acc[lane];
        want[10] = -1; /* all 32 lanes */
        want[11] = 1;
        const int *got = o + 12 * (b * 96 + t);
        for (int k = 0; k < 12; k++)
          if (got[k] != want[k])
            fail_msg("device %d, block %d, thread %d: result %d is %d, wanted %d", dev, b, t, k, got[k], want[k]);
      }
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* ---- shared atomics, two-dimensional blocks ---- */

/* A histogram of 16 bins per block in shared memory (atomicAdd there),
 * added into the global one (atomicAdd there); and a 64 x 64 matrix
 * transposed through 16 x 16 tiles in shared memory, blocks of 16 x 16
 * threads; and a block of 8 x 4 x 2 threads numbering itself. */
static const char tiles_yaml[] =
    "version: 1\nname: tiles\n"
    "kernels:\n"
    "  hist:\n    params: [ptr, ptr]\n    source: |\n"
    "      extern \"C\" __global__ void hist(const int *x, unsigned *bins) {\n"
    "        __shared__ unsigned local[16];\n"
    "        if (threadIdx.x < 16) local[threadIdx.x] = 0;\n"
    "        __syncthreads();\n"
    "        atomicAdd(&local[x[blockIdx.x * blockDim.x + threadIdx.x] & 15], 1u);\n"
    "        __syncthreads();\n"
    "        if (threadIdx.x < 16) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);\n"
    "      }\n"
    "  transpose:\n    params: [ptr, ptr]\n    source: |\n"
    "      extern \"C\" __global__ void transpose(const float *in, float *out) {\n"
    "        __shared__ float tile[16][17];\n"
    "        int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;\n"
    "        tile[threadIdx.y][threadIdx.x] = in[y * 64 + x];\n"
    "        __syncthreads();\n"
    "        x = blockIdx.y * 16 + threadIdx.x; y = blockIdx.x * 16 + threadIdx.y;\n"
    "        out[y * 64 + x] = tile[threadIdx.x][threadIdx.y];\n"
    "      }\n"
    "  ids:\n    params: [ptr]\n    source: |\n"
    "      extern \"C\" __global__ void ids(int *o) {\n"
    "        __shared__ int seen[64];\n"
    "        int t = threadIdx.x + 8 * (threadIdx.y + 4 * threadIdx.z);\n"
    "        seen[63 - t] = t;\n"
    "        __syncthreads();\n"
    "        o[t] = seen[t] * 100 + (int)(threadIdx.z * 16 + threadIdx.y * 4 + threadIdx.x % 4);\n"
    "      }\n"
    "buffers:\n"
    "  x: {type: i32, count: 2048, init: {iota: {start: 0, step: 7}}}\n"
    "  bins: {type: u32, count: 16}\n"
    "  m: {type: f32, count: 4096, init: {iota: {start: 0, step: 1}}}\n"
    "  mt: {type: f32, count: 4096}\n"
    "  o: {type: i32, count: 64}\n"
    "program:\n"
    "  - launch: {kernel: hist, grid: 8, block: 256, args: [x, bins]}\n"
    "  - launch: {kernel: transpose, grid: [4, 4], block: [16, 16], args: [m, mt]}\n"
    "  - launch: {kernel: ids, grid: 1, block: [8, 4, 2], args: [o]}\n";

static void test_shared_atomics_and_tiles(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  schedrun_program_t *p = tu_load(s, tiles_yaml, "tiles.yaml");
  for (int dev = 0; dev < schedrun_device_count(s); dev++) {
    schedrun_job_result_t *r = tu_job_on(s, p, dev, 0);
    const unsigned *bins = output(r, "bins", 16 * sizeof(unsigned));
    unsigned want[16] = {0};
    for (int i = 0; i < 2048; i++) want[(7 * i) & 15]++;
    for (int k = 0; k < 16; k++)
      if (bins[k] != want[k]) fail_msg("device %d: bin %d holds %u, wanted %u", dev, k, bins[k], want[k]);
    const float *mt = output(r, "mt", 4096 * sizeof(float));
    for (int y = 0; y < 64; y++)
      for (int x = 0; x < 64; x++)
        if (mt[y * 64 + x] != (float)(x * 64 + y))
          fail_msg("device %d: mt[%d][%d] is %g, wanted %d", dev, y, x, mt[y * 64 + x], x * 64 + y);
    const int *o = output(r, "o", 64 * sizeof(int));
    for (int t = 0; t < 64; t++) {
      int tx = t % 8, ty = t / 8 % 4, tz = t / 32;
      int w = (63 - t) * 100 + tz * 16 + ty * 4 + tx % 4;
      if (o[t] != w) fail_msg("device %d: thread %d wrote %d, wanted %d", dev, t, o[t], w);
    }
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* ---- dynamic shared memory ---- */

/* `extern __shared__` holds what each launch's `shared:` gives it: two
 * arrays of blockDim.x sums laid end to end, for blocks of 256 threads with
 * 4 KiB and of 512 threads with 8 KiB, in one program. */
static const char dyn_yaml[] =
    "version: 1\nname: dyn\n"
    "kernels:\n"
    "  sums:\n    params: [ptr, ptr, i64]\n    source: |\n"
    "      extern \"C\" __global__ void sums(const long long *x, long long *out, long long run) {\n"
    "        extern __shared__ long long part[];\n"
    "        long long *sq = part + blockDim.x;\n"
    "        unsigned t = threadIdx.x;\n"
    "        long long v = x[blockIdx.x * blockDim.x + t] + run;\n"
    "        part[t] = v;\n"
    "        sq[t] = v * v;\n"
    "        __syncthreads();\n"
    "        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {\n"
    "          if (t < s) { part[t] += part[t + s]; sq[t] += sq[t + s]; }\n"
    "          __syncthreads();\n"
    "        }\n"
    "        if (t == 0) { out[2 * blockIdx.x] = part[0]; out[2 * blockIdx.x + 1] = sq[0]; }\n"
    "      }\n"
    "buffers:\n"
    "  x: {type: i64, count: 1024, init: {iota: {start: 0, step: 1}}}\n"
    "  small: {type: i64, count: 8}\n"
    "  large: {type: i64, count: 4}\n"
    "program:\n"
    "  - launch: {kernel: sums, grid: 4, block: 256, shared: 4096, args: [x, small, $run]}\n"
    "  - launch: {kernel: sums, grid: 2, block: 512, shared: 8192, args: [x, large, $run]}\n";

static void test_dynamic_shared_memory(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  schedrun_program_t *p = tu_load(s, dyn_yaml, "dyn.yaml");
  for (int dev = 0; dev < schedrun_device_count(s); dev++)
    for (int run = 0; run < 3; run++) {
      schedrun_job_result_t *r = tu_job_on(s, p, dev, run);
      const long long *small = output(r, "small", 8 * sizeof(long long));
      const long long *large = output(r, "large", 4 * sizeof(long long));
      for (int width = 256; width <= 512; width *= 2)
        for (int b = 0; b < 1024 / width; b++) {
          long long sum = 0, sq = 0;
          for (int i = b * width; i < (b + 1) * width; i++) {
            sum += i + run;
            sq += (long long)(i + run) * (i + run);
          }
          const long long *got = (width == 256 ? small : large) + 2 * b;
          if (got[0] != sum || got[1] != sq)
            fail_msg("device %d, run %d, blocks of %d, block %d: sums %lld, %lld (wanted %lld, %lld)", dev, run, width,
                     b, got[0], got[1], sum, sq);
        }
      schedrun_job_result_free(&r);
    }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* ---- threads that cannot all meet ---- */

/* A job whose kernel deadlocks its block completes with an error naming the
 * kernel and the block; a host device runs the next job, and a CUDA device
 * is lost (`lost`): a driver leaves a context whose kernel failed unusable. */
static void expect_failure(schedrun_t *s, const char *kernel, const char *says, bool lost) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "version: 1\nname: %s\nkernels:\n  half:\n    params: [ptr]\n    source: |\n"
           "      extern \"C\" __global__ void half(int *x) {\n"
           "        __shared__ int t[64];\n"
           "        if (threadIdx.x < 32) return;\n"
           "        t[threadIdx.x] = 1;\n"
           "        __syncthreads();\n"
           "        x[threadIdx.x] = t[63 - threadIdx.x];\n"
           "      }\n"
           "  lanes:\n    params: [ptr]\n    source: |\n"
           "      extern \"C\" __global__ void lanes(int *x) {\n"
           "        if (threadIdx.x %% 2) return;\n"
           "        x[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);\n"
           "      }\n"
           "buffers:\n  x: {type: i32, count: 64}\n"
           "program:\n  - launch: {kernel: %s, grid: 2, block: 64, args: [x]}\n",
           kernel, kernel);
  schedrun_program_t *p = tu_load(s, yaml, "diverge.yaml");
  schedrun_program_t *ok = tu_load(s, warp_yaml, "warp.yaml");
  for (int dev = 0; dev < schedrun_device_count(s); dev++) {
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.device = dev;
    o.timeout_ms = 600000; /* a hang would be a failure of its own, not this one */
    schedrun_job_result_t *r;
    schedrun_error_t err = {0};
    assert_int_equal(schedrun_submit_wait(s, p, &o, &r, &err), SCHEDRUN_OK);
    const schedrun_job_info_t *in = schedrun_job_result_info(r);
    const char *text = schedrun_job_result_error(r);
    if (in->status == SCHEDRUN_OK || !strstr(text, says)) fail_msg("device %d: status %d: %s", dev, in->status, text);
    schedrun_job_result_free(&r);
    if (lost) {
      const char *why = schedrun_device_lost(s, dev);
      if (!why || !strstr(why, "the context is unusable")) fail_msg("device %d is not lost: %s", dev, why ? why : "");
      continue;
    }
    r = tu_job_on(s, ok, dev, 0); /* the device goes on */
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&ok);
  schedrun_program_free(&p);
}

static void test_threads_that_cannot_meet(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  bool host = !strncmp(schedrun_device_name(s, 0), "host:", 5);
  /* host devices name the kernel and the block; the driver double fails
   * the launch, as a driver reports a kernel that could not run, the
   * sequence's one kernel is named, and the device is lost */
  expect_failure(s, "half",
                 host ? "kernel 'half', block (0,0,0): __syncthreads() was reached by 32 of its 64 threads; 32 had "
                        "returned"
                      : "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure): a kernel failed; the context is "
                        "unusable, in kernel 'half' (diverge.yaml:",
                 !host);
  if (!host) { /* its devices are lost: new ones */
    assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
    s = open_here();
  }
  expect_failure(s, "lanes",
                 host ? "kernel 'lanes', block (0,0,0): a warp operation of thread 0 names lanes of warp 0 that have "
                        "returned"
                      : "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure): a kernel failed; the context is "
                        "unusable, in kernel 'lanes' (diverge.yaml:",
                 !host);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* Programs whose kernels use the block runner, loaded, run and freed one
 * after another on the same devices: each module is unloaded with its
 * program, so the next, loaded under the same descriptor, is itself (a
 * module kept loaded would be found again by its path name, without the
 * next program's kernels). */
static void test_modules_in_turn(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  for (int round = 0; round < 3; round++) {
    const char *yaml[] = {reduce_yaml, warp_yaml, tiles_yaml};
    const char *name[] = {"reduce.yaml", "warp.yaml", "tiles.yaml"};
    for (int k = 0; k < 3; k++) {
      schedrun_program_t *p = tu_load(s, yaml[k], name[k]);
      for (int dev = 0; dev < schedrun_device_count(s); dev++) {
        schedrun_job_result_t *r = tu_job_on(s, p, dev, round);
        schedrun_job_result_free(&r);
      }
      schedrun_program_free(&p);
    }
  }
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* The same kernels on host devices that run in the library's own process
 * (schedrun_options_t.host_in_process): the fibers run on the devices'
 * threads there, beside the library's. */
static void test_in_process(void **st) {
  (void)st;
  if (getenv("SCHEDRUN_BLOCKS_DEVICES")) return; /* in-process devices are host devices */
  schedrun_options_t opt;
  schedrun_options_init(&opt);
  opt.host_in_process = 1;
  schedrun_t *s = tu_open_devices("SCHEDRUN_BLOCKS_DEVICES", "host:2", 2, &opt);
  schedrun_program_t *p = tu_load(s, reduce_yaml, "reduce.yaml");
  for (int dev = 0; dev < schedrun_device_count(s); dev++) {
    schedrun_job_result_t *r = tu_job_on(s, p, dev, 1);
    const long long *sums = output(r, "sums", 4 * sizeof(long long));
    for (int b = 0; b < 4; b++) {
      long long want = 1024LL * (b * 1024) + 1023LL * 1024 / 2 + 1024; /* sum of i + 1 over the block */
      if (sums[b] != want) fail_msg("in process, device %d: block %d sums to %lld, wanted %lld", dev, b, sums[b], want);
    }
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  expect_failure(s, "half", "kernel 'half', block (0,0,0): __syncthreads() was reached by 32 of its 64 threads", false);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_block_reductions),
      cmocka_unit_test(test_warp_operations),
      cmocka_unit_test(test_shared_atomics_and_tiles),
      cmocka_unit_test(test_dynamic_shared_memory),
      cmocka_unit_test(test_threads_that_cannot_meet),
      cmocka_unit_test(test_modules_in_turn),
      cmocka_unit_test(test_in_process),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
