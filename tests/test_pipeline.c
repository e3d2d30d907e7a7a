/* End to end through the public API: SUBMIT -> COMPILE -> RECORD -> EXECUTE ->
 * COMPLETE over the actors, checking every element of every loop iteration of
 * every run, job and device, and the record counters. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedrun.h"
#include "test_util.h"

static schedrun_t *open_host(int n) {
  char spec[16];
  snprintf(spec, sizeof spec, "host:%d", n);
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = spec;
  return tu_open(&o);
}

static schedrun_program_t *load(schedrun_t *s, const char *yaml) { return tu_load(s, yaml, "t.yaml"); }

static schedrun_report_t *run_keep(schedrun_t *s, schedrun_program_t *p, int expect_rc, schedrun_error_t *err) {
  schedrun_run_options_t o;
  schedrun_run_options_init(&o);
  o.keep_outputs = 1;
  schedrun_report_t *r = NULL;
  int rc = schedrun_run(s, p, &o, &r, err);
  if (rc != expect_rc) fail_msg("run gave %d (%s), wanted %d", rc, err->message ? err->message : "", expect_rc);
  assert_non_null(r);
  return r;
}

static const float *out_f32(schedrun_report_t *r, int run, int job, const char *buf, size_t want_count) {
  size_t bytes = 0;
  const float *v = schedrun_report_output(r, run, job, buf, &bytes);
  if (!v) fail_msg("no output %s for run %d job %d", buf, run, job);
  assert_int_equal(bytes, want_count * sizeof(float));
  return v;
}

static void test_saxpy_every_run(void **st) {
  (void)st;
  schedrun_t *s = open_host(1);
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  char path[512];
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  /* without a scheduler: saxpy says devices: auto, s is one host device opened as such */
  assert_int_equal(schedrun_program_load_file(NULL, path, &p, &err), SCHEDRUN_OK);
  schedrun_report_t *r = run_keep(s, p, SCHEDRUN_OK, &err);
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->runs, 3);
  assert_int_equal(sum->jobs, 3);
  assert_int_equal(sum->verified, 3);
  assert_int_equal(sum->failed, 0);
  for (int run = 0; run < 3; run++) {
    const float *y = out_f32(r, run, 0, "y", 4096);
    const float *out = out_f32(r, run, 0, "out", 8192);
    for (int i = 0; i < 4096; i++)
      if (y[i] != 2.0f * (float)i + 1.0f) fail_msg("run %d: y[%d] = %g", run, i, y[i]);
    for (int k = 0; k < 8; k++)
      for (int t = 0; t < 1024; t++) {
        int i = k * 1024 + t;
        float want = i < 16 ? y[i] : (float)(k + 1 + 10 * run);
        if (out[i] != want) fail_msg("run %d: iteration %d: out[%d] = %g, want %g", run, k, i, out[i], want);
      }
    assert_int_equal(schedrun_report_device(r, run, 0), 0);
  }
  /* two buffer sets: runs 0 and 1 record; run 2 updates set 0's recording in
   * place, just the 8 loop launches whose values depend on $run */
  assert_int_equal(sum->nodes_created, 20);
  assert_int_equal(sum->nodes_updated, 8);
  assert_int_equal(sum->nodes_reused, 2);
  assert_int_equal(sum->cache_hits + sum->cache_misses, 2);
  schedrun_report_free(&r);
  assert_null(r);
  schedrun_program_free(&p);
  schedrun_close(&s);
  assert_null(s);
}

#define FILL_KERNEL                                                           \
  "kernels:\n"                                                                \
  "  fill_slice:\n"                                                           \
  "    params: [ptr, i32, f32]\n"                                             \
  "    source: |\n"                                                           \
  "      extern \"C\" __global__ void fill_slice(float *p, int n, float v) {\n" \
  "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"                  \
  "        if (i < n) p[i] = v;\n"                                            \
  "      }\n"

static void test_unrolled_loop_every_slice(void **st) {
  (void)st;
  schedrun_t *s = open_host(1);
  schedrun_program_t *p = load(s, "version: 1\nrepeat: 4\nbuffer_sets: 2\n" FILL_KERNEL
                               "buffers:\n  out: {type: f32, count: 512}\n"
                               "program:\n"
                               "  - fill: {buffer: out, value: -1}\n"
                               "  - loop:\n      trips: 8\n      body:\n"
                               "        - launch: {kernel: fill_slice, grid: 1, block: 64,\n"
                               "                   args: [{buffer: out, offset: \"$iter * 64\"}, 64, \"$iter * $iter + 0.5 + $run * 100\"]}\n"
                               );
  schedrun_error_t err = {0};
  schedrun_report_t *r = run_keep(s, p, SCHEDRUN_OK, &err);
  for (int run = 0; run < 4; run++) {
    const float *out = out_f32(r, run, 0, "out", 512);
    for (int it = 0; it < 8; it++)
      for (int t = 0; t < 64; t++) {
        float want = (float)(it * it) + 0.5f + 100.0f * (float)run;
        if (out[it * 64 + t] != want)
          fail_msg("run %d iteration %d: out[%d] = %g, want %g", run, it, it * 64 + t, out[it * 64 + t], want);
      }
  }
  /* runs 0, 1 create 9 nodes each (one per buffer set); runs 2, 3 update the
   * 8 launches whose scalar follows $run and reuse the fill */
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->nodes_created, 18);
  assert_int_equal(sum->nodes_updated, 16);
  assert_int_equal(sum->nodes_reused, 2);
  schedrun_report_free(&r);

  /* the same program again: every node is reused, nothing created or updated */
  schedrun_run_options_t o;
  schedrun_run_options_init(&o);
  o.repeat = 1;
  assert_int_equal(schedrun_run(s, p, &o, &r, &err), SCHEDRUN_OK);
  sum = schedrun_report_summary(r);
  assert_int_equal(sum->nodes_created, 0);
  assert_int_equal(sum->nodes_updated, 8); /* $run went from 2 back to 0 */
  assert_int_equal(sum->nodes_reused, 1);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* Every operator of the expression grammar in a config: launch arguments,
 * fill values, counts and offsets, and the expected values, for 8 jobs over
 * 2 runs; each element checked against C's own evaluation. */
static void test_expression_operators(void **st) {
  (void)st;
  schedrun_t *s = open_host(1);
  schedrun_program_t *p = load(s, "version: 1\nrepeat: 2\njobs: 8\n" FILL_KERNEL
                               "buffers:\n  out: {type: f32, count: 64}\n  bits: {type: i32, count: 16}\n"
                               "program:\n"
                               "  - fill: {buffer: bits, value: \"(512 >> $job | 3 << $run) ^ ~$job & 255\"}\n"
                               "  - fill: {buffer: bits, value: \"$job < 4 ? min($job, 2) : max($job, 6)\", count: 1,\n"
                               "           offset: \"($job <= 3) + ($run == 1) * 2 + ($job != 5) * 4\"}\n"
                               "  - launch: {kernel: fill_slice, grid: 1, block: 64,\n"
                               "             args: [out, \"$job >= 4 ? 64 : 32 >> $run\", \"$job == 0 ? -1 : 100 / $job\"]}\n"
                               "expect:\n"
                               "  out: {at: {0: \"$job == 0 ? -1 : 100 / $job\"}}\n");
  schedrun_error_t err = {0};
  schedrun_report_t *r = run_keep(s, p, SCHEDRUN_OK, &err);
  assert_int_equal(schedrun_report_summary(r)->verified, 16);
  for (int run = 0; run < 2; run++)
    for (int job = 0; job < 8; job++) {
      size_t bytes;
      const int *bits = schedrun_report_output(r, run, job, "bits", &bytes);
      const float *out = out_f32(r, run, job, "out", 64);
      assert_non_null(bits);
      int fillv = (512 >> job | 3 << run) ^ (~job & 255);
      int at = (job <= 3) + (run == 1) * 2 + (job != 5) * 4;
      int one = job < 4 ? (job < 2 ? job : 2) : (job > 6 ? job : 6);
      for (int i = 0; i < 16; i++) {
        int want = i == at ? one : fillv;
        if (bits[i] != want) fail_msg("run %d job %d: bits[%d] = %d, C gives %d", run, job, i, bits[i], want);
      }
      int n = job >= 4 ? 64 : 32 >> run;
      float v = job == 0 ? -1.0f : (float)(100 / job);
      for (int i = 0; i < 64; i++) {
        float want = i < n ? v : 0.0f;
        if (out[i] != want) fail_msg("run %d job %d: out[%d] = %g, want %g", run, job, i, out[i], want);
      }
    }
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* Progress says the phase: compiling k of n kernels while the kernels
 * compile (no job can be done then), then running d of t jobs, d never
 * going back. */
typedef struct phases {
  int compiling, recording, running;
  uint32_t last_done, kernels_total, kernels_done_max;
  bool order_broken;
} phases;

static void on_phase(const char *phase, uint32_t done, uint32_t total, uint32_t kdone, uint32_t ktotal, void *user) {
  phases *ph = user;
  if (!strcmp(phase, "compiling")) {
    if (ph->running || done != 0 || kdone > ktotal) ph->order_broken = true;
    ph->compiling++;
    ph->kernels_total = ktotal;
    if (kdone > ph->kernels_done_max) ph->kernels_done_max = kdone;
  } else if (!strcmp(phase, "recording")) {
    if (done != 0 || ph->running) ph->order_broken = true;
    ph->recording++;
  } else if (!strcmp(phase, "running")) {
    if (done < ph->last_done || done > total) ph->order_broken = true;
    ph->running++;
    ph->last_done = done;
  } else {
    ph->order_broken = true;
  }
}

static void test_progress_phases(void **st) {
  (void)st;
  schedrun_options_t so;
  schedrun_options_init(&so);
  so.devices = "host:1";
  so.no_disk_cache = 1;
  schedrun_t *s = tu_open(&so);
  char text[4096];
  /* each job spins a little, so that running lasts several reports too */
  size_t at = (size_t)snprintf(text, sizeof text, "version: 1\njobs: 10000\nkernels:\n");
  for (int k = 0; k < 4; k++)
    at += (size_t)snprintf(text + at, sizeof text - at,
                           "  k%d:\n    params: [ptr]\n    source: |\n"
                           "      extern \"C\" __global__ void k%d(int *p) {\n"
                           "        for (volatile int s = 0; s < %d; s = s + 1) {}\n"
                           "        p[%d] += %d; }\n",
                           k, k, k == 0 ? 60000 : 0, k, k + 1);
  snprintf(text + at, sizeof text - at,
           "buffers:\n  a: {type: i32, count: 4}\nprogram:\n"
           "  - launch: {kernel: k0, grid: 1, block: 1, args: [a]}\n  - launch: {kernel: k1, grid: 1, block: 1, args: [a]}\n"
           "  - launch: {kernel: k2, grid: 1, block: 1, args: [a]}\n  - launch: {kernel: k3, grid: 1, block: 1, args: [a]}\n"
           "expect:\n  a: {values: [1, 2, 3, 4]}\n");
  schedrun_program_t *p = load(s, text);
  schedrun_run_options_t o;
  schedrun_run_options_init(&o);
  phases ph = {0};
  o.progress_phase = on_phase;
  o.progress_user = &ph;
  schedrun_report_t *r;
  schedrun_error_t err = {0};
  if (schedrun_run(s, p, &o, &r, &err)) fail_msg("%s", err.message);
  assert_int_equal(schedrun_report_summary(r)->verified, 10000);
  assert_false(ph.order_broken);
  assert_true(ph.compiling > 0); /* four c++ runs take longer than the 100 ms between reports */
  assert_int_equal(ph.kernels_total, 4);
  assert_true(ph.kernels_done_max <= 4);
  assert_true(ph.running > 0);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_nested_loops(void **st) {
  (void)st;
  schedrun_t *s = open_host(1);
  schedrun_program_t *p = load(s, "version: 1\n" FILL_KERNEL
                               "buffers:\n  out: {type: f32, count: 192}\n"
                               "program:\n"
                               "  - loop:\n      trips: 3\n      body:\n"
                               "        - loop:\n            trips: 4\n            body:\n"
                               "              - launch: {kernel: fill_slice, grid: 1, block: 16,\n"
                               "                         args: [{buffer: out, offset: \"($iter0 * 4 + $iter1) * 16\"}, 16, \"$iter0 * 10 + $iter\"]}\n");
  schedrun_error_t err = {0};
  schedrun_report_t *r = run_keep(s, p, SCHEDRUN_OK, &err);
  const float *out = out_f32(r, 0, 0, "out", 192);
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 4; b++)
      for (int t = 0; t < 16; t++) {
        int i = (a * 4 + b) * 16 + t;
        if (out[i] != (float)(a * 10 + b)) fail_msg("iteration (%d, %d): out[%d] = %g", a, b, i, out[i]);
      }
  assert_int_equal(schedrun_report_summary(r)->nodes_created, 12);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

#define COUNTDOWN_KERNEL                                                                  \
  "kernels:\n"                                                                            \
  "  countdown:\n"                                                                        \
  "    params: [ptr, ptr]\n"                                                              \
  "    source: |\n"                                                                       \
  "      extern \"C\" __global__ void countdown(int *flag, float *log) {\n"               \
  "        if (threadIdx.x == 0 && blockIdx.x == 0) { log[flag[0]] = flag[0] * 10.0f; flag[0] -= 1; }\n" \
  "      }\n"

static void test_while_loop(void **st) {
  (void)st;
  schedrun_t *s = open_host(1);
  schedrun_program_t *p = load(s, "version: 1\nrepeat: 2\n" COUNTDOWN_KERNEL
                               "buffers:\n  flag: {type: i32, count: 2, init: {values: [6, 50]}}\n"
                               "  log: {type: f32, count: 64}\n"
                               "program:\n"
                               "  - loop:\n      while: {buffer: flag, index: 0}\n      max_trips: 100\n      body:\n"
                               "        - launch: {kernel: countdown, grid: 1, block: 32, args: [flag, log]}\n"
                               "expect:\n  flag: {values: [0, 50]}\n  log: {at: {0: 0, 1: 10, 6: 60, 7: 0}}\n");
  schedrun_error_t err = {0};
  schedrun_report_t *r = run_keep(s, p, SCHEDRUN_OK, &err);
  for (int run = 0; run < 2; run++) {
    const float *log = out_f32(r, run, 0, "log", 64);
    for (int i = 0; i < 64; i++) {
      float want = i >= 1 && i <= 6 ? 10.0f * (float)i : 0.0f;
      if (log[i] != want) fail_msg("run %d: log[%d] = %g, want %g", run, i, log[i], want);
    }
  }
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  /* max_trips bounds the loop */
  p = load(s, "version: 1\n" COUNTDOWN_KERNEL
              "buffers:\n  flag: {type: i32, count: 1, init: {values: [50]}}\n"
              "  log: {type: f32, count: 64}\n"
              "program:\n"
              "  - loop:\n      while: {buffer: flag, index: 0}\n      max_trips: 3\n      body:\n"
              "        - launch: {kernel: countdown, grid: 1, block: 32, args: [flag, log]}\n"
              "expect:\n  flag: {values: [47]}\n  log: {at: {47: 0, 48: 480, 49: 490, 50: 500}}\n");
  r = run_keep(s, p, SCHEDRUN_OK, &err);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_two_devices_every_job(void **st) {
  (void)st;
  schedrun_t *s = open_host(2);
  assert_int_equal(schedrun_device_count(s), 2);
  assert_string_equal(schedrun_device_name(s, 1), "host:1");
  assert_null(schedrun_device_name(s, 2));
  schedrun_program_t *p = load(s, "version: 1\njobs: 4\nrepeat: 2\nbuffer_sets: 2\n" FILL_KERNEL
                               "buffers:\n  out: {type: f32, count: 256}\n"
                               "program:\n"
                               "  - loop:\n      trips: 4\n      body:\n"
                               "        - launch: {kernel: fill_slice, grid: 1, block: 64,\n"
                               "                   args: [{buffer: out, offset: \"$iter * 64\"}, 64, \"$job * 1000 + $device * 100 + $run * 10 + $iter\"]}\n");
  schedrun_error_t err = {0};
  schedrun_report_t *r = run_keep(s, p, SCHEDRUN_OK, &err);
  int per_device[2] = {0, 0};
  for (int run = 0; run < 2; run++)
    for (int job = 0; job < 4; job++) {
      int dev = schedrun_report_device(r, run, job);
      assert_true(dev == 0 || dev == 1);
      per_device[dev]++;
      const float *out = out_f32(r, run, job, "out", 256);
      for (int it = 0; it < 4; it++)
        for (int t = 0; t < 64; t++) {
          float want = (float)(job * 1000 + dev * 100 + run * 10 + it);
          if (out[it * 64 + t] != want)
            fail_msg("run %d job %d device %d iteration %d: out[%d] = %g, want %g", run, job, dev, it,
                     it * 64 + t, out[it * 64 + t], want);
        }
    }
  assert_true(per_device[0] > 0 && per_device[1] > 0);
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->ndevices, 2);
  assert_int_equal(sum->devices[0].jobs + sum->devices[1].jobs, 8);
  assert_int_equal(sum->verified, 8);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_wrong_expect(void **st) {
  (void)st;
  schedrun_t *s = open_host(1);
  schedrun_program_t *p = load(s, "version: 1\nrepeat: 2\n" FILL_KERNEL
                               "buffers:\n  y: {type: f32, count: 8}\n"
                               "program:\n  - launch: {kernel: fill_slice, grid: 1, block: 8, args: [y, 8, 3]}\n"
                               "expect:\n  y: {at: {0: 3, 1: 4}}\n");
  schedrun_error_t err = {0};
  schedrun_report_t *r = run_keep(s, p, SCHEDRUN_EVERIFY, &err);
  assert_non_null(strstr(err.message, "run 0, job 0, device host:0: buffer y[1]: expected 4, got 3"));
  assert_int_equal(schedrun_report_failure_count(r), 2);
  assert_non_null(strstr(schedrun_report_failure(r, 1), "run 1, job 0, device host:0: buffer y[1]: expected 4, got 3"));
  assert_null(schedrun_report_failure(r, 2));
  assert_int_equal(schedrun_report_summary(r)->failed, 2);
  schedrun_error_clear(&err);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_compile_errors_then_recover(void **st) {
  (void)st;
  schedrun_t *s = open_host(1);
  schedrun_program_t *p = load(s, "version: 1\njobs: 3\n"
                               "kernels:\n"
                               "  good:\n    params: [ptr]\n    source: |\n"
                               "      extern \"C\" __global__ void good(float *p) { p[threadIdx.x] = 7; }\n"
                               "  broken_one:\n    params: [ptr]\n    source: |\n"
                               "      extern \"C\" __global__ void broken_one(float *p) {\n        p[0] = 1\n      }\n"
                               "  broken_two:\n    params: [ptr]\n    source: |\n"
                               "      extern \"C\" __global__ void broken_two(float *p) { undefined_thing(p); }\n"
                               "buffers:\n  a: {type: f32, count: 4}\n"
                               "program:\n  - launch: {kernel: good, grid: 1, block: 4, args: [a]}\n");
  schedrun_error_t err = {0};
  schedrun_report_t *r = NULL;
  assert_int_equal(schedrun_run(s, p, NULL, &r, &err), SCHEDRUN_ECOMPILE);
  /* both failures are reported, with their config locations and logs */
  assert_non_null(strstr(err.message, "kernel 'broken_one' (t.yaml:8:3)"));
  assert_non_null(strstr(err.message, "kernel 'broken_two' (t.yaml:14:3)"));
  assert_non_null(strstr(err.message, "t.yaml:12:11: error"));     /* the log points at the source line */
  assert_non_null(strstr(err.message, "undefined_thing"));
  assert_null(strstr(err.message, "kernel 'good'"));
  /* every job of the run completed, with the error */
  assert_int_equal(schedrun_report_summary(r)->failed, 3);
  assert_int_equal(schedrun_report_failure_count(r), 3);
  schedrun_error_clear(&err);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  /* the same scheduler compiles and runs a good program right after */
  p = load(s, "version: 1\n" FILL_KERNEL "buffers:\n  a: {type: f32, count: 4}\n"
              "program:\n  - launch: {kernel: fill_slice, grid: 1, block: 4, args: [a, 4, 2.5]}\n"
              "expect:\n  a: {values: [2.5, 2.5, 2.5, 2.5]}\n");
  r = run_keep(s, p, SCHEDRUN_OK, &err);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_record_error_located(void **st) {
  (void)st;
  schedrun_t *s = open_host(1);
  schedrun_program_t *p = load(s, "version: 1\njobs: 2\n" FILL_KERNEL "buffers:\n  a: {type: f32, count: 150}\n"
                               "program:\n  - launch: {kernel: fill_slice, grid: 1, block: 64,\n"
                               "               args: [{buffer: a, offset: \"$job * 200\"}, 64, 1]}\n");
  schedrun_error_t err = {0};
  schedrun_report_t *r = NULL;
  assert_int_equal(schedrun_run(s, p, NULL, &r, &err), SCHEDRUN_ECONFIG);
  assert_non_null(strstr(err.message, "t.yaml:14:5: argument 1 of 'fill_slice': offset 200 is outside buffer 'a' (150 elements; a buffer argument points at one of them)"));
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->verified, 1);
  assert_int_equal(sum->failed, 1);
  schedrun_error_clear(&err);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_api_misuse(void **st) {
  (void)st;
  schedrun_error_t err = {0};
  schedrun_report_t *r = NULL;
  assert_int_equal(schedrun_open(NULL, NULL, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:0";
  schedrun_t *bad = NULL;
  assert_int_equal(schedrun_open(&bad, &o, &err), SCHEDRUN_EINVAL);
  assert_null(bad);
  schedrun_error_clear(&err);
  schedrun_options_init(&o);
  o.devices = "host:1";
  o.compile_timeout_ms = -1;
  assert_int_equal(schedrun_open(&bad, &o, &err), SCHEDRUN_EINVAL);
  assert_null(bad);
  assert_string_equal(err.message, "schedrun_open: compile_timeout_ms must be >= 0");
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_run(NULL, NULL, NULL, &r, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "schedrun_run"));
  schedrun_error_clear(&err);
  schedrun_t *s = open_host(1), *s2 = open_host(1);
  schedrun_program_t *p = NULL;
  assert_int_equal(schedrun_program_load_string(s, NULL, NULL, &p, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_program_load_file(s, "/no/such/file.yaml", &p, &err), SCHEDRUN_ECONFIG);
  assert_non_null(strstr(err.message, "/no/such/file.yaml"));
  schedrun_error_clear(&err);
  p = load(s, "version: 1\n" FILL_KERNEL "buffers:\n  a: {type: f32, count: 4}\n"
              "program:\n  - launch: {kernel: fill_slice, grid: 1, block: 4, args: [a, 4, 1]}\n");
  assert_int_equal(schedrun_run(s, p, NULL, &r, &err), SCHEDRUN_OK);
  schedrun_report_free(&r);
  assert_int_equal(schedrun_run(s2, p, NULL, &r, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "another scheduler"));
  schedrun_error_clear(&err);
  schedrun_run_options_t ro;
  schedrun_run_options_init(&ro);
  ro.repeat = -1;
  assert_int_equal(schedrun_run(s, p, &ro, &r, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  /* report accessors on NULL and out of range */
  assert_null(schedrun_report_summary(NULL));
  assert_int_equal(schedrun_report_failure_count(NULL), 0);
  assert_null(schedrun_report_output(NULL, 0, 0, "a", NULL));
  assert_int_equal(schedrun_report_device(NULL, 0, 0), -1);
  /* a program outliving its scheduler stays usable for reading, then frees */
  schedrun_close(&s);
  assert_string_equal(schedrun_program_name(p), "t");
  schedrun_program_free(&p);
  schedrun_program_free(&p);
  schedrun_close(&s2);
  schedrun_close(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_saxpy_every_run),
      cmocka_unit_test(test_unrolled_loop_every_slice),
      cmocka_unit_test(test_expression_operators),
      cmocka_unit_test(test_progress_phases),
      cmocka_unit_test(test_nested_loops),
      cmocka_unit_test(test_while_loop),
      cmocka_unit_test(test_two_devices_every_job),
      cmocka_unit_test(test_wrong_expect),
      cmocka_unit_test(test_compile_errors_then_recover),
      cmocka_unit_test(test_record_error_located),
      cmocka_unit_test(test_api_misuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
