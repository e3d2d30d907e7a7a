/*
 * CUDA devices (the driver double) and a host device in one scheduler:
 * `devices: [cuda, host:1]` as the loader reads it (and the lists it
 * refuses, with their places), jobs verified on both kinds, a kernel that
 * compiles only for CUDA running only there (a job pinned to the host device
 * failing with why), and placement by performance model: with the double's
 * kernels 50 times slower than the CPU runs them, most of the first 50 jobs
 * go to the host device, every one verified, and a second scheduler on the
 * same cache starts from the saved model, without calibrating.
 *
 * The slowdown is the double's CPU time times 50, so the host stays the
 * faster kind however busy the machine is: its jobs' wall time would have
 * to grow 50-fold before the choice could turn.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "program/program.h"
#include "test_util.h"

#define SLOWDOWN "50"

/* ---- the loader ---- */

#define BODY                                                                     \
  "kernels:\n  k: {params: [ptr], source: 'extern \"C\" __global__ void k(int *p) {}'}\n" \
  "buffers:\n  b: {type: i32, count: 1}\n"                                             \
  "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [b]}\n"

static void load_fails(const char *devices, const char *needle) {
  char yaml[512];
  snprintf(yaml, sizeof yaml, "version: 1\ndevices: %s\n" BODY, devices);
  tu_config_fails(yaml, "d.yaml", NULL, needle);
}

static void test_devices_list(void **st) {
  (void)st;
  static const char yaml[] = "version: 1\ndevices: [cuda, host:1]\n" BODY;
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  if (prog_load_string(yaml, strlen(yaml), "d.yaml", &p, &err) != SCHEDRUN_OK) fail_msg("%s", err.message);
  assert_string_equal(p->devices, "cuda+host:1");
  assert_int_equal(p->devices_at.line, 2);
  prog_free(p);
  static const char joined[] = "version: 1\ndevices: host:2+cuda:0\n" BODY;
  assert_int_equal(prog_load_string(joined, strlen(joined), "d.yaml", &p, &err), SCHEDRUN_OK);
  assert_string_equal(p->devices, "host:2+cuda:0");
  prog_free(p);
  load_fails("[cuda]", "d.yaml:2:10: devices lists 1 kind; a list names two, one host and one CUDA");
  load_fails("[cuda, host:1, cuda:0]", "d.yaml:2:10: devices lists 3 kinds");
  load_fails("[host, host:2]", "d.yaml:2:10: devices 'host+host:2' is not one of");
  load_fails("[cuda, host:0]", "devices 'cuda+host:0' is not one of");
  load_fails("[cuda, auto]", "devices 'cuda+auto' is not one of");
  load_fails("[cuda, {a: 1}]", "d.yaml:2:17: an item of devices");
  load_fails("cuda+host+host", "devices 'cuda+host+host' is not one of");
}

/* ---- on the double ---- */

static char cache[256];

static void fresh_cache(void) { snprintf(cache, sizeof cache, "%s", tu_fresh_dir("mixed")); }

static schedrun_t *open_mixed(const char *placement) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "cuda+host:1";
  o.cache_dir = cache;
  o.placement = placement;
  schedrun_t *s = tu_open(&o);
  assert_int_equal(schedrun_device_count(s), 2);
  assert_string_equal(schedrun_device_name(s, 0), "cuda:0");
  assert_string_equal(schedrun_device_name(s, 1), "host:0");
  return s;
}

/* The client hears of a job before the scheduler does: once shut down, the
 * scheduler has heard of every job, and its counts are final. */
static void finish(schedrun_t *s) {
  schedrun_error_t err = {0};
  if (schedrun_shutdown(s, 60000, &err) != SCHEDRUN_OK) fail_msg("shutdown: %s", err.message);
}

/* Runs yaml's jobs; each must verify. Returns how many ran on each device. */
static void run_all(schedrun_t *s, const char *yaml, int jobs, int per_device[2]) {
  schedrun_program_t *p = tu_load(s, yaml, "mixed.yaml");
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  if (schedrun_run(s, p, NULL, &r, &err) != SCHEDRUN_OK) fail_msg("run: %s", err.message);
  assert_int_equal(schedrun_report_summary(r)->verified, jobs);
  per_device[0] = per_device[1] = 0;
  for (int j = 0; j < jobs; j++) {
    schedrun_job_info_t info;
    assert_int_equal(schedrun_report_job(r, 0, j, &info), SCHEDRUN_OK);
    assert_int_equal(info.verified, 1);
    assert_true(info.device == 0 || info.device == 1);
    per_device[info.device]++;
  }
  schedrun_report_free(&r);
  schedrun_program_free(&p);
}

/* out[i] = i * (job + 1), checked at both ends and summed */
static const char scale[] =
    "version: 1\nname: scale\ndevices: [cuda, host:1]\njobs: 8\n"
    "kernels:\n"
    "  scale:\n"
    "    params: [ptr, i32, f32]\n"
    "    source: |\n"
    "      extern \"C\" __global__ void scale(float *out, int n, float f) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) out[i] = (float)i * f;\n"
    "      }\n"
    "buffers:\n"
    "  out: {type: f32, count: 1024}\n"
    "program:\n"
    "  - launch: {kernel: scale, grid: 4, block: 256, args: [out, 1024, \"$job + 1\"]}\n"
    "expect:\n"
    "  out: {at: {0: 0, 1: \"$job + 1\", 1023: \"1023 * ($job + 1)\"}, sum: \"523776 * ($job + 1)\"}\n";

static void test_jobs_on_both_kinds(void **st) {
  (void)st;
  fresh_cache();
  schedrun_t *s = open_mixed("least-loaded");
  assert_non_null(strstr(schedrun_compile_target(s), "cuda sm_"));
  assert_non_null(strstr(schedrun_compile_target(s), " + host"));
  int per[2];
  run_all(s, scale, 8, per);
  assert_true(per[0] > 0 && per[1] > 0);
  finish(s);
  schedrun_stats_t stats;
  assert_int_equal(schedrun_get_stats(s, &stats, NULL), SCHEDRUN_OK);
  for (int d = 0; d < 2; d++) {
    assert_int_equal(stats.placement[d].placed, per[d]);
    assert_int_equal(stats.placement[d].by_model, 0); /* least-loaded, as asked */
  }
  schedrun_close(&s);
  /* a placement that is none of them */
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  o.cache_dir = cache;
  o.placement = "fastest";
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_open(&s, &o, &err), SCHEDRUN_EINVAL);
  assert_string_equal(err.message, "placement 'fastest' is not one of auto, model, least-loaded");
  schedrun_error_clear(&err);
  /* specs of two kinds that are not: each refused before anything opens */
  static const char *const bad[][2] = {
      {"cuda+bogus", "devices 'cuda+bogus': 'bogus' is not one of host, host:N, cuda, cuda:I,J"},
      {"host+host:2", "devices 'host+host:2' names host devices twice"},
      {"cuda:0+cuda", "devices 'cuda:0+cuda' names CUDA devices twice"},
      {"host+", "devices 'host+': '' is not one of host, host:N, cuda, cuda:I,J"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    o.devices = bad[i][0];
    o.placement = NULL;
    assert_int_equal(schedrun_open(&s, &o, &err), SCHEDRUN_EINVAL);
    assert_string_equal(err.message, bad[i][1]);
    schedrun_error_clear(&err);
  }
}

/* v[i] = v[i] * 2 + 1, from init i */
static const char step_cfg[] =
    "version: 1\nname: step\n"
    "kernels:\n"
    "  step:\n"
    "    params: [ptr, i32]\n"
    "    source: |\n"
    "      extern \"C\" __global__ void step(float *v, int n) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) v[i] = v[i] * 2.0f + 1.0f;\n"
    "      }\n"
    "buffers:\n"
    "  v: {type: f32, count: 1024, init: {iota: {start: 0, step: 1}}}\n"
    "program:\n"
    "  - launch: {kernel: step, grid: 4, block: 256, args: [v, 1024]}\n";

/* A buffer handed from a job on the GPU to a job on the host device and back
 * goes through the host (the kinds share no memory): three steps, each
 * result element by element. */
static void test_handoffs_across_kinds(void **st) {
  (void)st;
  fresh_cache();
  schedrun_t *s = open_mixed(NULL);
  schedrun_program_t *p = tu_load(s, step_cfg, "step.yaml");
  schedrun_graph_t *g = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_graph_new(&g, &err), SCHEDRUN_OK);
  int node[3];
  for (int k = 0; k < 3; k++) {
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.device = k % 2 == 0 ? 0 : 1; /* cuda:0, host:0, cuda:0 */
    o.keep_outputs = 1;
    if (schedrun_graph_job(g, p, &o, &node[k], &err)) fail_msg("%s", err.message);
    if (k && schedrun_graph_handoff(g, node[k - 1], "v", node[k], "v", &err)) fail_msg("%s", err.message);
  }
  schedrun_job_t ids[3];
  if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
  for (int k = 0; k < 3; k++) {
    schedrun_job_result_t *r = NULL;
    assert_int_equal(schedrun_wait(s, ids[k], -1, &r, &err), SCHEDRUN_OK);
    const schedrun_job_info_t *info = schedrun_job_result_info(r);
    if (info->status != SCHEDRUN_OK) fail_msg("step %d: %s", k, schedrun_job_result_error(r));
    assert_int_equal(info->device, k % 2 == 0 ? 0 : 1);
    if (k) assert_int_equal(info->handoffs_copied, 1); /* through the host */
    size_t bytes = 0;
    const float *v = schedrun_job_result_output(r, "v", &bytes);
    assert_int_equal(bytes, 1024 * sizeof(float));
    for (int i = 0; i < 1024; i++) {
      float want = (float)i;
      for (int j = 0; j <= k; j++) want = want * 2 + 1;
      if (v[i] != want) fail_msg("step %d, v[%d] = %g, not %g", k, i, (double)v[i], (double)want);
    }
    schedrun_job_result_free(&r);
  }
  schedrun_graph_free(&g);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* A kernel that only the CUDA compiler takes (NVRTC defines __CUDACC__). */
static const char cuda_only[] =
    "version: 1\nname: cuda-only\njobs: 4\n"
    "kernels:\n"
    "  k:\n"
    "    params: [ptr]\n"
    "    source: |\n"
    "      #ifndef __CUDACC__\n"
    "      #error this kernel needs the CUDA compiler\n"
    "      #endif\n"
    "      extern \"C\" __global__ void k(int *out) { out[threadIdx.x] = 7 * threadIdx.x; }\n"
    "buffers:\n"
    "  out: {type: i32, count: 32}\n"
    "program:\n"
    "  - launch: {kernel: k, grid: 1, block: 32, args: [out]}\n"
    "expect:\n"
    "  out: {at: {0: 0, 1: 7, 31: 217}, sum: 3472}\n";

static void test_cuda_only_kernel(void **st) {
  (void)st;
  fresh_cache();
  schedrun_t *s = open_mixed(NULL);
  int per[2];
  run_all(s, cuda_only, 4, per);
  assert_int_equal(per[0], 4); /* it runs wherever it can: on the GPU */
  assert_int_equal(per[1], 0);
  /* a job pinned to the host device fails, saying why */
  schedrun_program_t *p = tu_load(s, cuda_only, "cuda-only.yaml");
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.device = 1;
  schedrun_job_result_t *r = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit_wait(s, p, &o, &r, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_ECOMPILE);
  const char *why = schedrun_job_result_error(r);
  if (!strstr(why, "the program's kernels do not compile for host devices") ||
      !strstr(why, "this kernel needs the CUDA compiler"))
    fail_msg("%s", why);
  schedrun_job_result_free(&r);
  /* and one pinned to the GPU runs there */
  o.device = 0;
  o.keep_outputs = 1;
  assert_int_equal(schedrun_submit_wait(s, p, &o, &r, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
  size_t bytes = 0;
  const int *out = schedrun_job_result_output(r, "out", &bytes);
  assert_int_equal(bytes, 32 * sizeof(int));
  for (int i = 0; i < 32; i++) assert_int_equal(out[i], 7 * i);
  schedrun_job_result_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* About a millisecond of work per job on a CPU: x[i] 200 times through
 * v = v * 0.5 + 1, which stays 2 from 2. */
static char heavy[1024];

static void make_heavy(int jobs) {
  snprintf(heavy, sizeof heavy,
           "version: 1\nname: heavy\njobs: %d\n"
           "kernels:\n"
           "  work:\n"
           "    params: [ptr, i32]\n"
           "    source: |\n"
           "      extern \"C\" __global__ void work(float *x, int n) {\n"
           "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "        if (i >= n) return;\n"
           "        float v = x[i];\n"
           "        for (int k = 0; k < 200; k++) v = v * 0.5f + 1.0f;\n"
           "        x[i] = v + (float)i;\n"
           "      }\n"
           "buffers:\n"
           "  x: {type: f32, count: 32768, init: {fill: 2.0}}\n"
           "program:\n"
           "  - launch: {kernel: work, grid: 128, block: 256, args: [x, 32768]}\n"
           "expect:\n"
           "  x: {at: {0: 2, 1: 3, 32767: 32769}, sum: 536920064}\n",
           jobs);
}

static void test_model_prefers_the_faster_kind(void **st) {
  (void)st;
  fresh_cache();
  make_heavy(50);
  schedrun_t *s = open_mixed(NULL); /* auto: by model, as the kinds differ */
  int per[2];
  run_all(s, heavy, 50, per);
  /* the double is 50 times slower: after calibrating it, the host takes most */
  if (per[1] <= 25) fail_msg("host %d, cuda %d of the first 50 jobs", per[1], per[0]);
  assert_true(per[0] >= 3); /* the GPU was calibrated */
  finish(s);
  schedrun_stats_t stats;
  assert_int_equal(schedrun_get_stats(s, &stats, NULL), SCHEDRUN_OK);
  for (int d = 0; d < 2; d++) {
    assert_int_equal(stats.placement[d].placed, per[d]);
    assert_int_equal(stats.placement[d].by_model, per[d]);
  }
  assert_true(stats.placement[1].predicted > 0);
  schedrun_close(&s);
  /* the model survives: a new scheduler predicts from its first job */
  char dir[400];
  snprintf(dir, sizeof dir, "%s/models", cache);
  struct stat sb;
  assert_int_equal(stat(dir, &sb), 0);
  make_heavy(10);
  s = open_mixed("model");
  run_all(s, heavy, 10, per);
  assert_int_equal(per[0], 0); /* nothing to calibrate: the GPU is known to be slow */
  assert_int_equal(per[1], 10);
  finish(s);
  assert_int_equal(schedrun_get_stats(s, &stats, NULL), SCHEDRUN_OK);
  assert_int_equal(stats.placement[1].predicted, 10);
  assert_true(stats.placement[1].model_error >= 0);
  schedrun_close(&s);
}

int main(void) {
  setenv("SCHEDRUN_CUDA_DOUBLE_SLOWDOWN", SLOWDOWN, 1); /* read at the double's cuInit */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_devices_list),
      cmocka_unit_test(test_jobs_on_both_kinds),
      cmocka_unit_test(test_cuda_only_kernel),
      cmocka_unit_test(test_handoffs_across_kinds),
      cmocka_unit_test(test_model_prefers_the_faster_kind),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
