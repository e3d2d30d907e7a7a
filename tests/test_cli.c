/* sched-run as a user meets it: exit statuses and what it prints, for every
 * shipped config and for each kind of bad input. Also runs examples/embed. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "common/common.h"

#include "test_util.h"

static int run_cli(const char *a1, const char *a2, const char *a3, char **out, char **err) {
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), (char *)a1, (char *)a2, (char *)a3, NULL};
  return tu_run(argv, out, err);
}

static void config_verifies(const char *path, void *ctx) {
  (void)ctx;
  char *out, *err;
  int rc = run_cli(path, NULL, NULL, &out, &err);
  if (rc != 0 || !strstr(out, ": verified on ") || !strstr(out, " 0 failed"))
    fail_msg("%s: exit %d\n%s%s", path, rc, out, err);
  free(out);
  free(err);
}

/* Every shipped config's expectations tell per-iteration and per-job state
 * apart: against the record actor that keeps one state per command, each one
 * fails verification (exit 1), naming the stale element. */
static void config_catches_shared_slot(const char *path, void *ctx) {
  (void)ctx;
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN_SHARED_SLOT"), "-q", (char *)path, NULL};
  char *out, *err;
  int rc = tu_run(argv, &out, &err);
  if (rc != 1 || !strstr(err, "sched-run: mismatch: run "))
    fail_msg("%s against the shared-slot record actor: exit %d (wanted 1)\n%s%s", path, rc, out, err);
  free(out);
  free(err);
}

static void test_every_config_catches_shared_state(void **st) {
  (void)st;
  assert_true(tu_for_each_config(config_catches_shared_slot, NULL) >= 5);
}

static void test_every_config_verifies(void **st) {
  (void)st;
  assert_true(tu_for_each_config(config_verifies, NULL) >= 3);
}

static void test_five_mistakes_exit_2(void **st) {
  (void)st;
  const char *cfg = tu_write_temp(0, "five.yaml",
                                  "version: 1\n"
                                  "nmae: typo\n"
                                  "kernels:\n"
                                  "  k:\n"
                                  "    params: [f16]\n"
                                  "    source: 'extern \"C\" void k(float a) {}'\n"
                                  "buffers:\n"
                                  "  a: {type: f32, count: 0}\n"
                                  "  b: {type: quad, count: 4}\n"
                                  "program:\n"
                                  "  - copy: {from: a, to: nowhere, count: 1}\n");
  char *out, *err;
  assert_int_equal(run_cli(cfg, NULL, NULL, &out, &err), 2);
  assert_int_equal(tu_count(err, "five.yaml:"), 5);
  assert_int_equal(tu_count(err, "\n"), 5);
  assert_non_null(strstr(err, "five.yaml:2:1: unknown key 'nmae'"));
  assert_non_null(strstr(err, "five.yaml:5:14: unknown parameter type 'f16'"));
  assert_non_null(strstr(err, "five.yaml:8:25: count must be between 1"));
  assert_non_null(strstr(err, "five.yaml:9:13: unknown buffer type 'quad'"));
  assert_non_null(strstr(err, "five.yaml:11:25: copy to: no buffer named 'nowhere'"));
  assert_string_equal(out, "");
  free(out);
  free(err);
}

static void test_compile_error_exit_3(void **st) {
  (void)st;
  const char *cfg = tu_write_temp(0, "broken.yaml",
                                  "version: 1\n"
                                  "kernels:\n"
                                  "  oops:\n"
                                  "    params: [ptr]\n"
                                  "    source: |\n"
                                  "      extern \"C\" __global__ void oops(float *p) {\n"
                                  "        p[0] = 1.0f +;\n"
                                  "      }\n"
                                  "buffers:\n  a: {type: f32, count: 1}\n"
                                  "program:\n  - launch: {kernel: oops, grid: 1, block: 1, args: [a]}\n");
  char *out, *err;
  assert_int_equal(run_cli("--no-cache", cfg, NULL, &out, &err), 3);
  assert_non_null(strstr(err, "kernel 'oops'"));
  assert_non_null(strstr(err, "broken.yaml:3:3"));  /* where the kernel is in the config */
  assert_non_null(strstr(err, "broken.yaml:7:"));   /* the compiler's log, pointing into it */
  assert_non_null(strstr(err, "error"));
  free(out);
  free(err);
}

static void test_wrong_expect_exit_1(void **st) {
  (void)st;
  const char *cfg = tu_write_temp(0, "wrong.yaml",
                                  "version: 1\nrepeat: 2\ndevices: host:2\n"
                                  "buffers:\n  a: {type: i32, count: 10}\n"
                                  "program:\n  - fill: {buffer: a, value: 7, offset: 2}\n"
                                  "expect:\n  a: {values: [0, 0, 7, 7, 7, 8]}\n");
  char *out, *err;
  assert_int_equal(run_cli(cfg, NULL, NULL, &out, &err), 1);
  assert_non_null(strstr(err, "run 0, job 0, device host:"));
  assert_non_null(strstr(err, "run 1, job 0, device host:"));
  assert_non_null(strstr(err, "buffer a[5]: expected 8, got 7"));
  assert_non_null(strstr(out, "NOT verified"));
  free(out);
  free(err);
}

static json_object *get(json_object *o, const char *key);

/* Whether s is valid UTF-8 (no overlong forms, surrogates or bytes past U+10FFFF). */
static bool valid_utf8(const unsigned char *s) {
  while (*s) {
    unsigned c = *s, n = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 9;
    if (n == 9 || (n == 1 && c < 0xc2) || (n == 3 && c > 0xf4)) return false;
    for (unsigned k = 1; k <= n; k++)
      if ((s[k] & 0xc0) != 0x80) return false;
    if (n == 2 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0))) return false;
    if (n == 3 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))) return false;
    s += n + 1;
  }
  return true;
}

/* sched-run --json prints one JSON object on standard output for every
 * outcome, valid UTF-8, with its exit status and structured errors. */
static void json_outcome(const char *a1, const char *a2, int want_exit, const char *want_status, json_object **out) {
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--json", (char *)a1, (char *)a2, NULL};
  char *o, *e;
  int rc = tu_run(argv, &o, &e);
  if (rc != want_exit) fail_msg("%s %s: exit %d, want %d\n%s", a1, a2 ? a2 : "", rc, want_exit, e);
  if (!valid_utf8((const unsigned char *)o)) fail_msg("%s: not UTF-8: %s", a1, o);
  json_object *j = json_tokener_parse(o);
  if (!j) fail_msg("%s: not JSON: %s", a1, o);
  assert_int_equal(json_object_get_int(get(j, "schema")), 1);
  assert_int_equal(json_object_get_int(get(j, "exit")), want_exit);
  assert_string_equal(json_object_get_string(get(j, "status")), want_status);
  assert_true(json_object_is_type(get(j, "errors"), json_type_array));
  assert_true(json_object_is_type(get(j, "devices"), json_type_array));
  get(j, "fallback"); /* present, a string or null */
  free(o);
  free(e);
  *out = j;
}

static void test_json_every_outcome(void **st) {
  (void)st;
  json_object *j;
  char path[1024];
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  json_outcome(path, NULL, 0, "verified", &j);
  assert_true(json_object_get_boolean(get(j, "verified")));
  assert_int_equal(json_object_get_int(get(j, "jobs_verified")), 3);
  assert_true(json_object_is_type(get(j, "wall_ms"), json_type_double));
  assert_true(json_object_is_type(get(j, "compile_ms_sum"), json_type_double));
  assert_string_equal(json_object_get_string(get(json_object_array_get_idx(get(j, "devices"), 0), "name")), "host:0");
  assert_int_equal(json_object_array_length(get(j, "errors")), 0);
  json_object_put(j);

  const char *wrong = tu_write_temp(0, "wrong.yaml",
                                    "version: 1\nbuffers:\n  a: {type: i32, count: 4}\n"
                                    "program:\n  - fill: {buffer: a, value: 7}\nexpect:\n  a: {values: [7, 8]}\n");
  json_outcome(wrong, NULL, 1, "not-verified", &j);
  assert_non_null(strstr(json_object_get_string(json_object_array_get_idx(get(j, "failures"), 0)),
                         "buffer a[1]: expected 8, got 7"));
  json_object_put(j);

  const char *broken = tu_write_temp(0, "broken.yaml",
                                     "version: 1\nbuffers:\n  a: {type: i32, count: 4}\n"
                                     "program:\n  - fill: {buffer: a, value: \"1 >>> 2\"}\n  - jump: {}\n");
  json_outcome(broken, NULL, 2, "config-error", &j);
  json_object *errs = get(j, "errors");
  assert_int_equal(json_object_array_length(errs), 2);
  json_object *e0 = json_object_array_get_idx(errs, 0), *e1 = json_object_array_get_idx(errs, 1);
  assert_string_equal(json_object_get_string(get(e0, "kind")), "config");
  assert_string_equal(json_object_get_string(get(e0, "file")), broken);
  assert_int_equal(json_object_get_int(get(e0, "line")), 5);
  assert_int_equal(json_object_get_int(get(e0, "column")), 35); /* the third > */
  assert_non_null(strstr(json_object_get_string(get(e0, "message")), "unexpected '>'"));
  assert_int_equal(json_object_get_int(get(e1, "line")), 6);
  json_object_put(j);

  json_outcome("--devices=host:99", path, 2, "usage-error", &j);
  assert_non_null(strstr(json_object_get_string(get(json_object_array_get_idx(get(j, "errors"), 0), "message")),
                         "host:99"));
  json_object_put(j);

  /* a compile error whose log quotes a Latin-1 byte of a kernel file */
  const char *cu = tu_write_temp(1, "latin1.cu",
                                 "extern \"C\" __global__ void bad(float *p) { const char *s = \"caf\xe9\"; p[0] = s; }\n");
  char cfgtext[1024];
  snprintf(cfgtext, sizeof cfgtext,
           "version: 1\nkernels:\n  bad:\n    params: [ptr]\n    file: %s\n"
           "buffers:\n  a: {type: f32, count: 4}\nprogram:\n  - launch: {kernel: bad, grid: 1, block: 1, args: [a]}\n",
           cu);
  const char *cfg = tu_write_temp(2, "latin1.yaml", cfgtext);
  json_outcome(cfg, NULL, 3, "compile-error", &j);
  json_object *ce = json_object_array_get_idx(get(j, "errors"), 0);
  assert_string_equal(json_object_get_string(get(ce, "kind")), "compile");
  assert_string_equal(json_object_get_string(get(ce, "kernel")), "bad");
  assert_non_null(strstr(json_object_get_string(get(ce, "file")), "latin1.cu"));
  assert_int_equal(json_object_get_int(get(ce, "line")), 1);
  assert_true(json_object_get_int(get(ce, "column")) > 0);
  const char *log = json_object_get_string(get(ce, "log"));
  assert_non_null(strstr(log, "caf\xef\xbf\xbd")); /* the byte, replaced by U+FFFD */
  assert_non_null(strstr(json_object_get_string(get(ce, "teardown")), "reset the active compile mode"));
  json_object_put(j);

  /* a failure of another kind: the CUDA driver cannot be loaded */
  setenv("SCHEDRUN_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  json_outcome("--devices=cuda", path, 4, "failed", &j);
  unsetenv("SCHEDRUN_CUDA_LIBRARY");
  json_object_put(j);
}

/* --check compiles and records every job and runs none: exit 0, 2 or 3 as
 * a run would; an expectation that would not hold is not looked at. */
static void test_check(void **st) {
  (void)st;
  char path[1024], *out, *err;
  snprintf(path, sizeof path, "%s/multi_device_demo.yaml", tu_env("SCHEDRUN_CONFIGS"));
  assert_int_equal(run_cli("--check", path, NULL, &out, &err), 0);
  assert_non_null(strstr(out, "checked: 128 jobs compiled and recorded on 4 devices"));
  assert_non_null(strstr(out, "none was run"));
  free(out);
  free(err);
  /* jobs 2 and 3 record a fill outside the buffer; nothing runs, so the
   * wrong expectation goes unnoticed */
  const char *bad = tu_write_temp(0, "check.yaml",
                                  "version: 1\njobs: 4\nbuffers:\n  a: {type: i32, count: 4}\n"
                                  "program:\n  - fill: {buffer: a, value: 1, offset: \"$job * 2\", count: 1}\n"
                                  "expect:\n  a: {values: [5]}\n");
  assert_int_equal(run_cli("--check", bad, NULL, &out, &err), 2);
  assert_non_null(strstr(err, "check.yaml:6:5: fill: 1 elements at offset 4 run outside buffer 'a'"));
  assert_null(strstr(err, "expected 5"));
  assert_non_null(strstr(out, "check FAILED"));
  assert_non_null(strstr(out, "2 verified, 2 failed"));
  free(out);
  free(err);
  /* a copy whose ranges overlap for one job only (job 2: [0, 2) to [1, 3)):
   * refused when that job is recorded, naming the elements */
  const char *overlap = tu_write_temp(2, "check-overlap.yaml",
                                      "version: 1\njobs: 3\nbuffers:\n  a: {type: i32, count: 8}\n"
                                      "program:\n  - copy: {from: a, to: a, count: 2, to_offset: \"5 - $job * 2\"}\n");
  assert_int_equal(run_cli("--check", overlap, NULL, &out, &err), 2);
  assert_non_null(strstr(err, "check-overlap.yaml:6:5: copy: elements [0, 2) of 'a' and [1, 3) of 'a' overlap"));
  assert_non_null(strstr(out, "2 verified, 1 failed"));
  free(out);
  free(err);
  const char *broken = tu_write_temp(1, "check-broken.yaml",
                                     "version: 1\nkernels:\n  k:\n    params: [ptr]\n    source: |\n"
                                     "      extern \"C\" __global__ void k(float *p) { p[0] = nope; }\n"
                                     "buffers:\n  a: {type: f32, count: 4}\n"
                                     "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [a]}\n");
  assert_int_equal(run_cli("--check", broken, NULL, &out, &err), 3);
  assert_non_null(strstr(err, "kernel 'k' does not compile"));
  free(out);
  free(err);
  const char *five = tu_write_temp(2, "check-config.yaml", "version: 1\nprogram:\n  - jump: {}\n");
  assert_int_equal(run_cli("--check", five, NULL, &out, &err), 2);
  assert_non_null(strstr(err, "unknown step 'jump'"));
  free(out);
  free(err);
}

/* Runs a Python snippet with Debian's numpy (argv: dir); its exit status. */
static int numpy(const char *code, const char *dir, char **out, char **err) {
  char *argv[] = {"/usr/bin/python3", "-c", (char *)code, (char *)dir, NULL};
  return tu_run(argv, out, err);
}

/* --output writes the output buffers as .npy files that numpy.load reads
 * back with their dtype and shape, for every run and job; --output-all
 * every buffer. .npy files serve as init and expect, their dtype and count
 * checked with a located error. */
static void test_output_npy(void **st) {
  (void)st;
  char dir[] = "/tmp/schedrun-npy-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char text[2048];
  snprintf(text, sizeof text,
           "version: 1\nrepeat: 2\njobs: 3\n"
           "buffers:\n  out: {type: i32, count: 8, output: true}\n  tmp: {type: f64, count: 4}\n"
           "  raw: {type: u8, count: 5, init: {fill: 7}}\n"
           "program:\n  - fill: {buffer: out, value: \"$run * 10 + $job\"}\n"
           "  - fill: {buffer: tmp, value: \"$job + 0.5\"}\n"
           "expect:\n  out: {sum: \"8 * ($run * 10 + $job)\"}\n");
  const char *cfg = tu_write_temp(0, "npy.yaml", text);
  char outdir[256];
  snprintf(outdir, sizeof outdir, "%s/out", dir);
  char *out, *err;
  assert_int_equal(run_cli("--output", outdir, cfg, &out, &err), 0);
  free(out);
  free(err);
  static const char check[] =
      "import sys, os, numpy as np\n"
      "d = sys.argv[1]\n"
      "for r in range(2):\n"
      "  for j in range(3):\n"
      "    a = np.load(f'{d}/run{r}/job{j}/out.npy')\n"
      "    assert a.dtype == np.int32 and a.shape == (8,), (a.dtype, a.shape)\n"
      "    assert (a == r * 10 + j).all(), (r, j, a)\n"
      "    assert not os.path.exists(f'{d}/run{r}/job{j}/tmp.npy')\n"
      "assert (np.load(f'{d}/out.npy') == np.load(f'{d}/run0/job0/out.npy')).all()\n"
      "print('ok')\n";
  if (numpy(check, outdir, &out, &err) != 0) fail_msg("numpy: %s%s", out, err);
  free(out);
  free(err);
  snprintf(outdir, sizeof outdir, "%s/all", dir);
  assert_int_equal(run_cli("--output-all", outdir, cfg, &out, &err), 0);
  free(out);
  free(err);
  static const char check_all[] =
      "import sys, numpy as np\n"
      "d = sys.argv[1]\n"
      "t = np.load(f'{d}/run1/job2/tmp.npy'); assert t.dtype == np.float64 and (t == 2.5).all(), t\n"
      "u = np.load(f'{d}/raw.npy'); assert u.dtype == np.uint8 and u.shape == (5,) and (u == 7).all(), u\n";
  if (numpy(check_all, outdir, &out, &err) != 0) fail_msg("numpy: %s%s", out, err);
  free(out);
  free(err);

  /* .npy as init and expect */
  static const char make[] =
      "import sys, numpy as np\n"
      "d = sys.argv[1]\n"
      "np.save(f'{d}/in.npy', np.arange(6, dtype=np.float32) * 1.5)\n"
      "np.save(f'{d}/want.npy', np.arange(6, dtype=np.float32) * 1.5)\n"
      "np.save(f'{d}/wide.npy', np.arange(6, dtype=np.float64))\n"
      "np.save(f'{d}/short.npy', np.arange(5, dtype=np.float32))\n"
      "np.save(f'{d}/grid.npy', np.arange(6, dtype=np.float32).reshape(2, 3))\n";
  if (numpy(make, dir, &out, &err) != 0) fail_msg("numpy: %s%s", out, err);
  free(out);
  free(err);
  static const char *const inits[] = {"in", "grid"};
  for (int k = 0; k < 2; k++) {
    snprintf(text, sizeof text,
             "version: 1\nbuffers:\n  a: {type: f32, count: 6, init: {file: %s/%s.npy}}\n  b: {type: i32, count: 1}\n"
             "program:\n  - fill: {buffer: b, value: 1}\nexpect:\n  a: {file: %s/%s.npy}\n",
             dir, inits[k], dir, k ? "grid" : "want");
    cfg = tu_write_temp(1, "npy-in.yaml", text);
    assert_int_equal(run_cli(cfg, NULL, NULL, &out, &err), 0);
    free(out);
    free(err);
  }
  static const struct { const char *file, *says; } bad[] = {
      {"wide", "holds elements of dtype '<f8'; the buffer is f32 ('<f4')"},
      {"short", "holds 5 elements; the buffer has 6"},
  };
  for (size_t k = 0; k < 2; k++) {
    snprintf(text, sizeof text,
             "version: 1\nbuffers:\n  a: {type: f32, count: 6, init: {file: %s/%s.npy}}\nprogram:\n"
             "  - fill: {buffer: a, value: 1, count: 0}\n",
             dir, bad[k].file);
    cfg = tu_write_temp(1, "npy-bad.yaml", text);
    assert_int_equal(run_cli(cfg, NULL, NULL, &out, &err), 2);
    if (!strstr(err, "npy-bad.yaml:3:41: init file") || !strstr(err, bad[k].says)) fail_msg("%s", err);
    free(out);
    free(err);
    snprintf(text, sizeof text,
             "version: 1\nbuffers:\n  a: {type: f32, count: 6}\nprogram:\n  - fill: {buffer: a, value: 1}\n"
             "expect:\n  a: {file: %s/%s.npy}\n",
             dir, bad[k].file);
    cfg = tu_write_temp(1, "npy-bad.yaml", text);
    assert_int_equal(run_cli(cfg, NULL, NULL, &out, &err), 2);
    if (!strstr(err, "npy-bad.yaml:7:13: expect file") || !strstr(err, bad[k].says)) fail_msg("%s", err);
    free(out);
    free(err);
  }
  /* shapes: a 2 x 3 buffer reads grid.npy as it is, is written back with
   * its shape, is checked by [row, col]; a file of another shape is refused
   * naming both, and so is an index outside the shape */
  snprintf(text, sizeof text,
           "version: 1\nbuffers:\n  m: {type: f32, shape: [2, 3], output: true, init: {file: %s/grid.npy}}\n"
           "kernels:\n  k:\n    params: [ptr]\n    source: |\n"
           "      extern \"C\" __global__ void k(float *m) { m[threadIdx.y * 3 + threadIdx.x] += 10 * threadIdx.y; }\n"
           "program:\n  - launch: {kernel: k, grid: 1, block: [3, 2], args: [m]}\n"
           "expect:\n  m: {at: {[0, 0]: 0, [0, 2]: 2, [1, 0]: 13, [1, 2]: 15}}\n",
           dir);
  cfg = tu_write_temp(1, "shaped.yaml", text);
  snprintf(outdir, sizeof outdir, "%s/shaped", dir);
  if (run_cli("--output", outdir, cfg, &out, &err) != 0) fail_msg("%s%s", out, err);
  free(out);
  free(err);
  static const char check_shape[] =
      "import sys, numpy as np\n"
      "m = np.load(sys.argv[1] + '/m.npy')\n"
      "assert m.shape == (2, 3) and m.dtype == np.float32, (m.shape, m.dtype)\n"
      "assert (m == np.arange(6, dtype=np.float32).reshape(2, 3) + np.array([[0], [10]])).all(), m\n";
  if (numpy(check_shape, outdir, &out, &err) != 0) fail_msg("numpy: %s%s", out, err);
  free(out);
  free(err);
  static const struct { const char *buf, *exp, *where, *says; } shape_bad[] = {
      {"{type: f32, shape: [3, 2], init: {file: %s/grid.npy}}", "{at: {0: 0}}", "shaped-bad.yaml:3:46: init file",
       "has shape (2, 3); the buffer's shape is [3, 2]"},
      {"{type: f32, shape: [6], init: {file: %s/grid.npy}}", "{at: {0: 0}}", "shaped-bad.yaml:3:43: init file",
       "has shape (2, 3); the buffer's shape is [6]"},
      {"{type: f32, shape: [2, 3], count: 5%.0s}", "{at: {0: 0}}", "shaped-bad.yaml:3:40:",
       "buffer 'm' has count 5 but shape [2, 3] holds 6 elements"},
      {"{type: f32, shape: [2, 3]%.0s}", "{at: {[2, 0]: 1}}", "shaped-bad.yaml:7:13:",
       "index 2 of dimension 0 is outside buffer 'm' (shape [2, 3])"},
      {"{type: f32, shape: [2, 3]%.0s}", "{at: {[1]: 1}}", "shaped-bad.yaml:7:12:",
       "index of buffer 'm' has 1 dimensions; its shape [2, 3] has 2"},
  };
  for (size_t k = 0; k < sizeof shape_bad / sizeof shape_bad[0]; k++) {
    char buf[512];
    snprintf(buf, sizeof buf, shape_bad[k].buf, dir);
    snprintf(text, sizeof text, "version: 1\nbuffers:\n  m: %s\nprogram:\n  - fill: {buffer: m, value: 0}\n"
             "expect:\n  m: %s\n", buf, shape_bad[k].exp);
    cfg = tu_write_temp(1, "shaped-bad.yaml", text);
    assert_int_equal(run_cli(cfg, NULL, NULL, &out, &err), 2);
    if (!strstr(err, shape_bad[k].where) || !strstr(err, shape_bad[k].says)) fail_msg("case %zu: %s", k, err);
    free(out);
    free(err);
  }
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* --dot: the program as recorded, a cluster per device and binding slot,
 * nodes in order with their record ids and values, rendered by dot. */
static void test_dot(void **st) {
  (void)st;
  char path[1024], *out, *err;
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "-q", "--dot", "-", path, NULL};
  assert_int_equal(tu_run(argv, &out, &err), 0);
  /* two buffer sets on one device: two clusters of 10 nodes */
  assert_int_equal(tu_count(out, "subgraph cluster_"), 2);
  assert_non_null(strstr(out, "label=\"device 0, binding slot 1 (as recorded for run 1, job 0)\""));
  assert_int_equal(tu_count(out, "shape=box"), 2 * 9);
  assert_int_equal(tu_count(out, "shape=cds"), 2);
  /* the unrolled loop in order: iteration i is record id i, at offset i * 1024, value i + 1 + 10 * run */
  const char *at = strstr(out, "cluster_d0s1");
  assert_non_null(at);
  for (int i = 0; i < 8; i++) {
    char want[160];
    snprintf(want, sizeof want, "(out+%d, 1024, %d)\\ncommand 2, record id %d\"", i * 1024, i + 1 + 10, i);
    const char *p = strstr(at, want);
    if (!p) fail_msg("no '%s' after the last one in:\n%s", want, at);
    at = p;
  }
  assert_non_null(strstr(at, "copy 16 elements\\ny[0] -> out[0]\\ncommand 3, record id 0"));
  /* dot renders it */
  const char *file = tu_write_temp(0, "saxpy.dot", out);
  free(out);
  free(err);
  char svg[1100];
  snprintf(svg, sizeof svg, "%s.svg", file);
  char *dot[] = {"/usr/bin/dot", "-Tsvg", (char *)file, "-o", svg, NULL};
  if (tu_run(dot, &out, &err) != 0) fail_msg("dot: %s", err);
  free(out);
  free(err);
  struct stat sb;
  assert_int_equal(stat(svg, &sb), 0);
  assert_true(sb.st_size > 1000);
  unlink(svg);
  /* a launch's dynamic shared memory is in its label, before its arguments */
  const char *shm = tu_write_temp(0, "shared.yaml",
                                  "version: 1\nname: shm\nkernels:\n  k:\n    params: [ptr]\n    source: |\n"
                                  "      extern \"C\" __global__ void k(int *x) { extern __shared__ int s[]; "
                                  "s[threadIdx.x] = 1; x[threadIdx.x] = s[threadIdx.x]; }\n"
                                  "buffers:\n  x: {type: i32, count: 64}\n"
                                  "program:\n  - launch: {kernel: k, grid: 1, block: 64, shared: 256, args: [x]}\n");
  char *shm_argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "-q", "--dot", "-", (char *)shm, NULL};
  assert_int_equal(tu_run(shm_argv, &out, &err), 0);
  if (!strstr(out, "launch k\\ngrid 1,1,1 block 64,1,1\\nshared 256 bytes\\n(x)")) fail_msg("%s", out);
  free(out);
  free(err);
  /* files that cannot be written: said with the option before anything
   * runs, exit 2 */
  static const char *const opts[] = {"--dot", "--output"};
  for (int k = 0; k < 2; k++) {
    char *bad[] = {(char *)tu_env("SCHEDRUN_RUN"), "-q", (char *)opts[k], "/proc/no/such/place", path, NULL};
    assert_int_equal(tu_run(bad, &out, &err), 2);
    assert_non_null(strstr(err, "nothing was run"));
    char want[64];
    snprintf(want, sizeof want, "sched-run: %s: ", opts[k]);
    if (!strstr(err, want) || !strstr(err, "/proc/no/such/place")) fail_msg("%s: %s", opts[k], err);
    free(out);
    free(err);
  }
}

/* What can go wrong before anything runs: a bad --rank-batch, --compile-timeout or
 * --job-timeout; a
 * sched-run started by a launcher whose sched-run-mpi is not beside it; one
 * built without MPI (the shared-slot variant) started by a launcher. */
static void test_rank_mistakes(void **st) {
  (void)st;
  char *out, *err;
  assert_int_equal(run_cli("--rank-batch", "0", "x.yaml", &out, &err), 2);
  assert_non_null(strstr(err, "--rank-batch needs a positive integer, not '0'"));
  free(out);
  free(err);
  assert_int_equal(run_cli("--rank-batch", "65537", "x.yaml", &out, &err), 2);
  assert_non_null(strstr(err, "--rank-batch is at most 65536 jobs"));
  free(out);
  free(err);
  assert_int_equal(run_cli("--compile-timeout", "0", "x.yaml", &out, &err), 2);
  assert_non_null(strstr(err, "--compile-timeout needs a positive integer, not '0'"));
  free(out);
  free(err);
  assert_int_equal(run_cli("--compile-timeout", "3000000", "x.yaml", &out, &err), 2);
  assert_non_null(strstr(err, "--compile-timeout is at most 2147483 seconds"));
  free(out);
  free(err);
  assert_int_equal(run_cli("--job-timeout", "0", "x.yaml", &out, &err), 2);
  assert_non_null(strstr(err, "--job-timeout needs a positive integer, not '0'"));
  free(out);
  free(err);
  assert_int_equal(run_cli("--job-timeout", "5s", "x.yaml", &out, &err), 2);
  assert_non_null(strstr(err, "--job-timeout needs a positive integer, not '5s'"));
  free(out);
  free(err);
  /* a launcher's variable set: sched-run hands over, or says why it cannot */
  char dir[] = "/tmp/schedrun-alone-XXXXXX", lone[600], cmd[1400];
  assert_non_null(mkdtemp(dir));
  snprintf(lone, sizeof lone, "%s/sched-run", dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", tu_env("SCHEDRUN_RUN"), lone);
  assert_int_equal(system(cmd), 0);
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  char *alone[] = {lone, "-q", "x.yaml", NULL};
  int rc = tu_run(alone, &out, &err);
  char *plain[] = {(char *)tu_env("SCHEDRUN_RUN_SHARED_SLOT"), "-q", "x.yaml", NULL};
  char *out2, *err2;
  int rc2 = tu_run(plain, &out2, &err2);
  unsetenv("OMPI_COMM_WORLD_RANK");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
  if (strstr(err, "cannot run")) { /* built with MPI: no sched-run-mpi beside the copy */
    assert_int_equal(rc, 4);
    assert_non_null(strstr(err, "sched-run-mpi cannot run: No such file or directory"));
  } else { /* built without MPI */
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "built without MPI"));
  }
  assert_int_equal(rc2, 2);
  assert_non_null(strstr(err2, "started by an MPI launcher, but built without MPI"));
  free(out);
  free(err);
  free(out2);
  free(err2);
}

static void test_usage(void **st) {
  (void)st;
  char *out, *err;
  assert_int_equal(run_cli("--help", NULL, NULL, &out, &err), 0);
  assert_non_null(strstr(out, "usage: sched-run"));
  free(out);
  free(err);
  assert_int_equal(run_cli("--version", NULL, NULL, &out, &err), 0);
  assert_non_null(strstr(out, "sched-run 0."));
  free(out);
  free(err);
  assert_int_equal(run_cli("--bogus", NULL, NULL, &out, &err), 2);
  assert_non_null(strstr(err, "unknown option '--bogus'"));
  free(out);
  free(err);
  /* each option mistake said as what it is */
  static const struct { const char *arg, *says; } wrong[] = {
      {"--repeat", "option '--repeat' requires an argument"},
      {"--trace", "option '--trace' requires an argument"},
      {"-qx", "unknown option '-x' (in '-qx')"},
      {"-x", "unknown option '-x'"},
      {"--json=1", "option '--json' takes no argument"},
  };
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
    assert_int_equal(run_cli(wrong[i].arg, NULL, NULL, &out, &err), 2);
    if (!strstr(err, wrong[i].says)) fail_msg("%s: %s", wrong[i].arg, err);
    free(out);
    free(err);
  }
  assert_int_equal(run_cli("--help", NULL, NULL, &out, &err), 0);
  assert_non_null(strstr(out, "auto, host, host:N,\n                   cuda, cuda:I,J,..., all, or both kinds as cuda+host:N"));
  assert_non_null(strstr(out, "- reads the config from standard input"));
  free(out);
  free(err);
  /* the config from standard input; its errors are placed in <stdin> */
  {
    char cmd[2048], good[1024];
    snprintf(good, sizeof good, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
    snprintf(cmd, sizeof cmd, "'%s' -q - < '%s'", tu_env("SCHEDRUN_RUN"), good);
    char *sh[] = {"/bin/sh", "-c", cmd, NULL};
    assert_int_equal(tu_run(sh, &out, &err), 0);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "printf 'version: 1\\nprogram: [\\n' | '%s' -", tu_env("SCHEDRUN_RUN"));
    assert_int_equal(tu_run(sh, &out, &err), 2);
    assert_non_null(strstr(err, "<stdin>:3:1: "));
    free(out);
    free(err);
  }
  assert_int_equal(run_cli(NULL, NULL, NULL, &out, &err), 2);
  assert_non_null(strstr(err, "no config file"));
  free(out);
  free(err);
  assert_int_equal(run_cli("/no/such.yaml", NULL, NULL, &out, &err), 2);
  assert_non_null(strstr(err, "/no/such.yaml: cannot open"));
  free(out);
  free(err);
  assert_int_equal(run_cli("--repeat", "zero", "x.yaml", &out, &err), 2);
  assert_non_null(strstr(err, "--repeat needs a positive integer"));
  free(out);
  free(err);
  char path[1024];
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  assert_int_equal(run_cli("--devices", "host:99", path, &out, &err), 2);
  assert_non_null(strstr(err, "host:99"));
  free(out);
  free(err);
  /* overrides: 2 runs on 3 host devices */
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "host:3", "--repeat", "5", "--stats", path, NULL};
  assert_int_equal(tu_run(argv, &out, &err), 0);
  assert_non_null(strstr(out, "runs 5, 5 jobs in all: 5 verified, 0 failed"));
  assert_non_null(strstr(out, "host:2"));
  free(out);
  free(err);
}

static json_object *get(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v)) fail_msg("no '%s' in JSON", key);
  return v;
}

static void test_demo_json_and_trace(void **st) {
  (void)st;
  char cfg[1024], trace[256];
  snprintf(cfg, sizeof cfg, "%s/multi_device_demo.yaml", tu_env("SCHEDRUN_CONFIGS"));
  const char *dummy = tu_write_temp(1, "x", "");
  snprintf(trace, sizeof trace, "%s", dummy);
  strcpy(strrchr(trace, '/') + 1, "trace.json");
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--json", "--trace", trace, cfg, NULL};
  char *out, *err;
  int rc = tu_run(argv, &out, &err);
  if (rc != 0) fail_msg("demo: exit %d\n%s%s", rc, out, err);
  assert_string_equal(err, ""); /* not a terminal: no progress line */
  /* the summary */
  json_object *sum = json_tokener_parse(out);
  assert_non_null(sum);
  assert_true(json_object_get_boolean(get(sum, "verified")));
  assert_int_equal(json_object_get_int(get(sum, "jobs")), 128);
  assert_int_equal(json_object_get_int(get(sum, "jobs_verified")), 128);
  json_object *devs = get(sum, "devices");
  assert_int_equal(json_object_array_length(devs), 4);
  int jobs_per_device[4];
  for (int d = 0; d < 4; d++) {
    json_object *dv = json_object_array_get_idx(devs, (size_t)d);
    char name[16];
    snprintf(name, sizeof name, "host:%d", d);
    assert_string_equal(json_object_get_string(get(dv, "name")), name);
    jobs_per_device[d] = json_object_get_int(get(dv, "jobs"));
    assert_true(jobs_per_device[d] > 0); /* every device worked */
  }
  json_object_put(sum);
  /* the trace (Trace Event Format): spans on every lane nest, each job's
   * flow goes submit -> its phases -> done, counters track the jobs */
  char *text;
  size_t len;
  schedrun_error_t e = {0};
  assert_int_equal(fs_read_file(trace, &text, &len, &e), SCHEDRUN_OK);
  json_object *tr = json_tokener_parse(text);
  free(text);
  assert_non_null(tr);
  json_object *events = get(tr, "traceEvents");
  size_t nev = json_object_array_length(events);
  char lane_name[64][64];
  memset(lane_name, 0, sizeof lane_name);
  /* X spans per lane, sorted by start below */
  typedef struct { double t0, t1; } iv;
  iv *spans = calloc(nev, sizeof *spans);
  int *span_lane = calloc(nev, sizeof *span_lane);
  size_t nspans = 0;
  int flow_s[128] = {0}, flow_t[128] = {0}, flow_f[128] = {0}, async_b = 0, async_e = 0, exec_spans[4] = {0},
      launch_spans[4] = {0};
  double last_inflight = -1;
  int inflight_samples = 0, queued_samples = 0;
  bool inflight_negative = false;
  for (size_t i = 0; i < nev; i++) {
    json_object *ev = json_object_array_get_idx(events, i);
    const char *ph = json_object_get_string(get(ev, "ph"));
    if (!strcmp(ph, "M")) {
      if (!strcmp(json_object_get_string(get(ev, "name")), "thread_name")) {
        int tid = json_object_get_int(get(ev, "tid"));
        assert_true(tid > 0 && tid < 64);
        snprintf(lane_name[tid], sizeof lane_name[tid], "%s", json_object_get_string(get(get(ev, "args"), "name")));
      }
    } else if (!strcmp(ph, "X")) {
      int tid = json_object_get_int(get(ev, "tid"));
      double ts = json_object_get_double(get(ev, "ts")), dur = json_object_get_double(get(ev, "dur"));
      assert_true(tid > 0 && tid < 64 && ts >= 0 && dur >= 0);
      spans[nspans] = (iv){ts, ts + dur};
      span_lane[nspans++] = tid;
      json_object *cat = NULL;
      if (json_object_object_get_ex(ev, "cat", &cat) && !strcmp(json_object_get_string(cat), "launch")) {
        const char *ln = lane_name[tid];
        assert_true(!strncmp(ln, "launches host:", 14));
        assert_non_null(strstr(json_object_get_string(get(ev, "name")), "kernel '"));
        launch_spans[ln[14] - '0']++;
      }
      if (!strcmp(json_object_get_string(get(ev, "name")), "execute")) {
        const char *ln = lane_name[tid];
        assert_true(!strncmp(ln, "execute host:", 13));
        exec_spans[ln[13] - '0']++;
      }
    } else if (!strcmp(ph, "s") || !strcmp(ph, "t") || !strcmp(ph, "f")) {
      int id = json_object_get_int(get(ev, "id"));
      assert_true(id >= 0 && id < 128);
      (ph[0] == 's' ? flow_s : ph[0] == 't' ? flow_t : flow_f)[id]++;
    } else if (!strcmp(ph, "b")) {
      async_b++;
    } else if (!strcmp(ph, "e")) {
      async_e++;
    } else if (!strcmp(ph, "C")) {
      const char *name = json_object_get_string(get(ev, "name"));
      double v = json_object_get_double(get(get(ev, "args"), "value"));
      if (!strcmp(name, "jobs in flight")) {
        inflight_samples++;
        last_inflight = v;
        if (v < 0) inflight_negative = true;
      } else if (!strcmp(name, "jobs waiting to execute")) {
        queued_samples++;
      }
    }
  }
  /* nesting: on each lane, a span that starts inside another ends inside it */
  for (int lane = 1; lane < 64; lane++) {
    iv stack[1024];
    int depth = 0;
    iv *mine = calloc(nspans + 1, sizeof *mine);
    size_t n = 0;
    for (size_t i = 0; i < nspans; i++)
      if (span_lane[i] == lane) mine[n++] = spans[i];
    for (size_t i = 1; i < n; i++) /* insertion sort: by start, the longer first */
      for (size_t k = i; k > 0 && (mine[k].t0 < mine[k - 1].t0 ||
                                   (mine[k].t0 == mine[k - 1].t0 && mine[k].t1 > mine[k - 1].t1)); k--) {
        iv x = mine[k];
        mine[k] = mine[k - 1];
        mine[k - 1] = x;
      }
    for (size_t i = 0; i < n; i++) {
      while (depth && stack[depth - 1].t1 <= mine[i].t0) depth--;
      if (depth && mine[i].t1 > stack[depth - 1].t1)
        fail_msg("lane %d (%s): span [%.3f, %.3f] overlaps [%.3f, %.3f] without nesting", lane, lane_name[lane],
                 mine[i].t0, mine[i].t1, stack[depth - 1].t0, stack[depth - 1].t1);
      if (depth < 1024) stack[depth++] = mine[i];
    }
    if (n) assert_true(lane_name[lane][0] != '\0'); /* every lane with spans is named */
    free(mine);
  }
  for (int j = 0; j < 128; j++) {
    assert_int_equal(flow_s[j], 1);
    assert_int_equal(flow_f[j], 1);
    assert_true(flow_t[j] >= 2); /* record and execute at least */
  }
  assert_int_equal(async_b, 128);
  assert_int_equal(async_e, 128);
  for (int d = 0; d < 4; d++) assert_int_equal(exec_spans[d], jobs_per_device[d]);
  /* the first 16 jobs of each device, node by node: 10 launches each */
  for (int d = 0; d < 4; d++)
    assert_int_equal(launch_spans[d], 10 * (jobs_per_device[d] < 16 ? jobs_per_device[d] : 16));
  assert_true(inflight_samples >= 2 && queued_samples >= 2);
  assert_false(inflight_negative);
  assert_true(last_inflight == 0);
  free(spans);
  free(span_lane);
  json_object_put(tr);
  free(out);
  free(err);
  /* a trace that cannot be written is an error, found before the run, and says where */
  char *argv2[] = {(char *)tu_env("SCHEDRUN_RUN"), "--quiet", "--trace", "/no/such/dir/t.json", cfg, NULL};
  assert_int_equal(tu_run(argv2, &out, &err), 2);
  assert_non_null(strstr(err, "/no/such/dir/t.json"));
  free(out);
  free(err);
}

static void test_embed_example(void **st) {
  (void)st;
  char *argv[] = {(char *)tu_env("SCHEDRUN_EMBED"), NULL};
  char *out, *err;
  int rc = tu_run(argv, &out, &err);
  if (rc != 0) fail_msg("embed: %d\n%s%s", rc, out, err);
  assert_non_null(strstr(out, "embed: 4 jobs done, every element verified; sum of v[0] over the jobs = 10"));
  free(out);
  free(err);
}

/* ---- signals ---- */

extern char **environ;

static const char long_run_yaml[] = "version: 1\n"
                                    "name: long-run\n"
                                    "devices: host\n"
                                    "kernels:\n"
                                    "  busy:\n"
                                    "    params: [ptr]\n"
                                    "    source: |\n"
                                    "      extern \"C\" __global__ void busy(int *out) {\n"
                                    "        volatile long i = 0;\n"
                                    "        while (i < 2000000) i = i + 1;\n"
                                    "        out[0] = 1;\n"
                                    "      }\n"
                                    "buffers:\n"
                                    "  out: {type: i32, count: 1}\n"
                                    "program:\n"
                                    "  - launch: {kernel: busy, grid: 1, block: 1, args: [out]}\n"
                                    "expect:\n"
                                    "  out: {values: [1]}\n";

/* Entries of /tmp whose name starts with prefix<pid>-. */
static int leftovers(const char *prefix, pid_t pid) {
  char want[128];
  snprintf(want, sizeof want, "%s%ld-", prefix, (long)pid);
  int n = 0;
  DIR *d = opendir("/tmp");
  struct dirent *e;
  while (d && (e = readdir(d))) n += strncmp(e->d_name, want, strlen(want)) == 0;
  if (d) closedir(d);
  return n;
}

/* Whether process pid's private cache (--no-cache) holds a compiled kernel. */
static bool compiled_into_temp_cache(pid_t pid) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "find /tmp/schedrun-cache-%ld-* -name '*.so' 2>/dev/null | head -1", (long)pid);
  FILE *f = popen(cmd, "r");
  if (!f) return false;
  char line[512];
  bool found = fgets(line, sizeof line, f) != NULL;
  pclose(f);
  return found;
}

/* Starts sched-run on the long config, signals it once the run is under
 * way, and checks what it leaves: exit 128 + sig, the summary marked, the
 * trace and the JSON, and no temporary files. The JSON (tens of thousands
 * of jobs cancelled in flight) and the trace are parsed whole when `parse`,
 * else the JSON is searched for the mark and the trace for its ends: the
 * files are written by the same code whichever signal came. */
static void interrupt_with(int sig, int want_status, const char *name, bool parse) {
  const char *cfg = tu_write_temp(3, "long.yaml", long_run_yaml);
  char trace[512], out[512], errf[512];
  char *dir = fs_dirname(cfg);
  snprintf(trace, sizeof trace, "%s/trace-%d.json", dir, sig);
  snprintf(out, sizeof out, "%s/out-%d", dir, sig);
  snprintf(errf, sizeof errf, "%s/err-%d", dir, sig);
  free(dir);
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--no-cache", "--repeat", "100000", "--json", "--trace",
                  trace, (char *)cfg, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  /* under way: its kernel compiled into its private cache (however long a
   * busy machine takes), then a moment of jobs */
  TU_WAIT_FOR(compiled_into_temp_cache(pid), "sched-run to compile its kernel");
  usleep(500000); /* jobs are likely flowing now; the checks below hold either way */
  uint64_t t0 = now_ns();
  kill(pid, sig);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (now_ns() - t0 > TU_PATIENCE_NS) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fail_msg("sched-run did not exit within %d s of %s", TU_PATIENCE_MS / 1000, name);
    }
    usleep(10000);
  }
  char *o = NULL, *e = NULL;
  size_t len;
  schedrun_error_t err = {0};
  assert_int_equal(fs_read_file(out, &o, &len, &err), SCHEDRUN_OK);
  assert_int_equal(fs_read_file(errf, &e, &len, &err), SCHEDRUN_OK);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != want_status)
    fail_msg("%s: status %d (wanted exit %d)\n%s%s", name, status, want_status, o, e);
  char msg[64];
  snprintf(msg, sizeof msg, "interrupted by %s", name);
  assert_non_null(strstr(e, msg));
  /* the JSON summary says so, and parses */
  char *t = NULL;
  size_t tlen = 0;
  assert_int_equal(fs_read_file(trace, &t, &tlen, &err), SCHEDRUN_OK);
  if (parse) {
    json_object *j = json_tokener_parse(o);
    if (!j) fail_msg("stdout is not JSON: %s", o);
    json_object *v;
    assert_true(json_object_object_get_ex(j, "interrupted", &v));
    assert_string_equal(json_object_get_string(v), name);
    json_object_put(j);
    /* the trace holds what finished and parses */
    json_object *tj = json_tokener_parse(t);
    if (!tj) fail_msg("the trace is not JSON (%zu bytes)", tlen);
    json_object_put(tj);
  } else {
    char mark[64];
    snprintf(mark, sizeof mark, "\"interrupted\":\"%s\"", name); /* json-c's plain form */
    if (o[0] != '{' || !strstr(o, mark)) fail_msg("stdout has no %s: %.200s", mark, o);
    while (tlen > 0 && (t[tlen - 1] == '\n' || t[tlen - 1] == ' ')) tlen--;
    if (strncmp(t, "{\"displayTimeUnit\"", 18) != 0 || tlen < 2 || t[tlen - 1] != '}')
      fail_msg("the trace is not whole (%zu bytes)", tlen);
  }
  /* and nothing temporary is left */
  assert_int_equal(leftovers("schedrun-cache-", pid), 0);
  assert_int_equal(leftovers("schedrun-worker-", pid), 0);
  free(t);
  free(o);
  free(e);
}

static void test_signals_stop_cleanly(void **st) {
  (void)st;
  interrupt_with(SIGINT, 130, "SIGINT", true);
  interrupt_with(SIGTERM, 143, "SIGTERM", false);
  interrupt_with(SIGHUP, 129, "SIGHUP", false);
}

static int workers_of(pid_t lib) { return tu_count_processes(tu_is_worker_of, &lib); }

/* Killed outright while a kernel never returns, sched-run leaves no worker
 * process behind: each worker's watchdog sees the library's pipe close. */
static void test_kill_9_leaves_no_worker(void **st) {
  (void)st;
  const char *cfg = tu_write_temp(3, "forever.yaml",
                                  "version: 1\n"
                                  "devices: host:2\n"
                                  "kernels:\n"
                                  "  spin:\n"
                                  "    params: [ptr]\n"
                                  "    source: |\n"
                                  "      extern \"C\" __global__ void spin(int *o) { volatile int s = 1; while (s) {} o[0] = 1; }\n"
                                  "buffers:\n"
                                  "  o: {type: i32, count: 1}\n"
                                  "program:\n"
                                  "  - launch: {kernel: spin, grid: 1, block: 1, args: [o]}\n");
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "-q", (char *)cfg, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  TU_WAIT_FOR(workers_of(pid) == 2, "both devices' workers to start");
  usleep(500000); /* one likely spins in the kernel now; no worker may stay either way */
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  TU_WAIT_FOR(workers_of(pid) == 0, "the workers of a killed sched-run to end");
}

/* tests/gpu/run.sh cannot pass by skipping: without a GPU it says SKIP and
 * exits 77; when nvidia-smi sees a GPU that schedrun cannot use (here: a fake
 * nvidia-smi, no driver) its preflight says FAIL, every other section runs
 * and fails, and it exits 1. */
static void test_gpu_script_never_passes_by_skipping(void **st) {
  (void)st;
  char *build = fs_dirname(tu_env("SCHEDRUN_RUN"));
  char script[1024];
  snprintf(script, sizeof script, "%s/../tests/gpu/run.sh", tu_env("SCHEDRUN_CONFIGS"));
  /* no nvidia-smi on the PATH */
  /* its summary and logs in a directory of the test's own */
  char outdir[1100], *tmp = fs_dirname(tu_write_temp(3, "gpu-run", ""));
  snprintf(outdir, sizeof outdir, "OUT=%s", tmp);
  free(tmp);
  char *argv[] = {"/usr/bin/env", "PATH=/usr/bin:/bin", outdir, script, "--no-build", build, NULL};
  char *out, *err;
  int rc = tu_run(argv, &out, &err);
  if (rc != 77 || strncmp(out, "SKIP: ", 6) != 0) fail_msg("no GPU: exit %d\n%s%s", rc, out, err);
  free(out);
  free(err);
  /* an nvidia-smi that sees one GPU, and no driver to run on it (or, in a
   * build without cuda.h, no CUDA backend at all) */
  const char *fake = tu_write_temp(2, "nvidia-smi", "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n");
  chmod(fake, 0755);
  char *dir = fs_dirname(fake), path[1200];
  snprintf(path, sizeof path, "PATH=%s:/usr/bin:/bin", dir);
  char *argv2[] = {"/usr/bin/env", path, outdir, "SCHEDRUN_CUDA_LIBRARY=/nonexistent/libcuda.so.1", script, "--no-build",
                   build, NULL};
  rc = tu_run(argv2, &out, &err);
  if (rc != 1 || !strstr(out, "\nFAIL preflight: nvidia-smi sees 1 GPU(s)") || !strstr(out, "\nFAIL loops: ") ||
      !strstr(out, "\ngpu: FAILED: preflight configs loops updates devices fault deadline batches overlap autotune mixed trace context ") ||
      (!strstr(out, "no CUDA driver") && !strstr(out, "built without the CUDA backend")))
    fail_msg("a GPU schedrun cannot use: exit %d\n%s%s", rc, out, err);
  free(out);
  free(err);
  free(dir);
  free(build);
}

/* What a killed process left in /tmp is swept by the next one. */
static void test_dead_process_temp_dirs_swept(void **st) {
  (void)st;
  pid_t dead;
  char *argv[] = {"true", NULL};
  assert_int_equal(posix_spawnp(&dead, "true", NULL, NULL, argv, environ), 0);
  waitpid(dead, NULL, 0); /* its pid now names no process */
  char path[256];
  snprintf(path, sizeof path, "/tmp/schedrun-cache-%ld-left", (long)dead);
  assert_int_equal(mkdir(path, 0700), 0);
  char file[300];
  snprintf(file, sizeof file, "%s/partial", path);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  char cfg[512];
  snprintf(cfg, sizeof cfg, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  char *o, *e;
  assert_int_equal(run_cli("-q", cfg, NULL, &o, &e), 0);
  free(o);
  free(e);
  struct stat sb;
  assert_int_not_equal(stat(path, &sb), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_config_verifies), cmocka_unit_test(test_every_config_catches_shared_state),
      cmocka_unit_test(test_five_mistakes_exit_2),
      cmocka_unit_test(test_compile_error_exit_3),  cmocka_unit_test(test_wrong_expect_exit_1),
      cmocka_unit_test(test_usage),
      cmocka_unit_test(test_json_every_outcome),
      cmocka_unit_test(test_check),
      cmocka_unit_test(test_output_npy),
      cmocka_unit_test(test_dot),                 cmocka_unit_test(test_embed_example),
      cmocka_unit_test(test_demo_json_and_trace),   cmocka_unit_test(test_signals_stop_cleanly),
      cmocka_unit_test(test_rank_mistakes),
      cmocka_unit_test(test_dead_process_temp_dirs_swept), cmocka_unit_test(test_kill_9_leaves_no_worker),
      cmocka_unit_test(test_gpu_script_never_passes_by_skipping),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
