/* The config loader: the reference example of docs/config.md, and every problem reported as
 * file:line:col, all of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "program/program.h"
#include "program/npy.h"
#include "test_util.h"

static prog_program *load_ok(const char *text) {
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  int rc = prog_load_string(text, strlen(text), "t.yaml", &p, &err);
  if (rc) fail_msg("load failed: %s", err.message);
  return p;
}

/* Loads text expecting failure; returns the message (caller frees). */
static char *load_bad(const char *text) {
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  int rc = prog_load_string(text, strlen(text), "t.yaml", &p, &err);
  assert_int_equal(rc, SCHEDRUN_ECONFIG);
  assert_null(p);
  assert_non_null(err.message);
  return err.message;
}

static void load_ok_free(const char *text) {
  prog_program *p = load_ok(text);
  prog_free(p);
}

static void expect_problem(const char *text, const char *where, const char *needle) {
  char *m = load_bad(text);
  if (!strstr(m, where) || !strstr(m, needle)) fail_msg("'%s' lacks '%s' or '%s'", m, where, needle);
  free(m);
}

/* Which per-job variables make a job record anew: those its steps read, not
 * those only its expectations read (checked after the job ran). */
static void test_uses_steps_not_expectations(void **st) {
  (void)st;
  static const char base[] = "version: 1\nbuffers:\n  x: {type: f32, count: 4}\n"
                             "program:\n  - fill: {buffer: x, value: %s}\n"
                             "expect:\n  x: {at: {0: %s}}\n";
  char text[512];
  snprintf(text, sizeof text, base, "1", "\"$job + $run - $job - $run + 1\"");
  prog_program *p = load_ok(text);
  assert_int_equal(p->uses, 0);
  prog_free(p);
  snprintf(text, sizeof text, base, "\"$job\"", "\"$job\"");
  p = load_ok(text);
  assert_int_equal(p->uses, PROG_USES_JOB);
  prog_free(p);
  snprintf(text, sizeof text, base, "\"$run\"", "\"$job\"");
  p = load_ok(text);
  assert_int_equal(p->uses, PROG_USES_RUN);
  prog_free(p);
}

static void test_config_md_example(void **st) {
  (void)st;
  char *text;
  size_t len;
  schedrun_error_t err = {0};
  char path[512];
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  assert_int_equal(fs_read_file(path, &text, &len, &err), SCHEDRUN_OK);
  prog_program *p = load_ok(text);
  free(text);
  assert_string_equal(p->name, "saxpy-loop");
  assert_string_equal(p->devices, "auto");
  assert_int_equal(p->repeat, 3);
  assert_int_equal(p->buffer_sets, 2);
  assert_int_equal(p->jobs, 1);
  assert_int_equal(p->nkernels, 2);
  assert_string_equal(p->kernels[0].name, "saxpy");
  assert_string_equal(p->kernels[0].entry, "saxpy");
  assert_string_equal(p->kernels[0].params_text, "f32,ptr,ptr,i32");
  assert_int_equal(p->kernels[0].first_line, 12); /* the line after "source: |" */
  assert_string_equal(p->kernels[1].entry, "fill_slice");
  assert_int_equal(p->nbuffers, 3);
  const float *x = (const float *)p->buffers[0].image;
  for (int i = 0; i < 4096; i++) assert_true(x[i] == (float)i);
  const float *y = (const float *)p->buffers[1].image;
  for (int i = 0; i < 4096; i++) assert_true(y[i] == 1.0f);
  assert_int_equal(p->buffers[2].count, 8192);
  assert_int_equal(p->nsteps, 3);
  assert_int_equal(p->steps[0].kind, ST_LAUNCH);
  assert_int_equal(p->steps[0].u.launch.grid[0], 16);
  assert_int_equal(p->steps[0].u.launch.block[0], 256);
  assert_int_equal(p->steps[0].u.launch.nargs, 4);
  assert_true(p->steps[0].u.launch.args[1].is_buffer);
  assert_int_equal(p->steps[1].kind, ST_LOOP);
  assert_int_equal(p->steps[1].u.loop.trips, 8);
  assert_int_equal(p->steps[1].u.loop.nbody, 1);
  assert_int_equal(p->steps[1].u.loop.body[0].command, 2);
  assert_int_equal(p->steps[2].kind, ST_COPY);
  assert_int_equal(p->steps[2].command, 3);
  assert_int_equal(p->ncommands, 4);
  assert_int_equal(p->nexpects, 3);
  assert_int_equal(p->expects[0].kind, EXP_AT);
  assert_int_equal(p->expects[0].n, 3);
  /* out: a sum that depends on the run, and values at four places */
  assert_int_equal(p->expects[1].kind, EXP_SUM);
  assert_true(p->expects[1].sum_expr.n > 0);
  prog_env env = {{0}};
  env.v[EXV_RUN] = 2;
  prog_value v;
  assert_null(prog_expr_eval(&p->expects[1].sum_expr, &env, &v));
  assert_true(prog_value_f(v) == 37104 + 2 * 81760);
  assert_int_equal(p->expects[2].kind, EXP_AT);
  assert_int_equal(p->expects[2].n, 4);
  assert_true(p->expects[2].values[0] == 31.0 && p->expects[2].exprs[0].n == 0);
  prog_free(p);
}

static const char five_mistakes[] =
    "version: 1\n"
    "name: five\n"
    "reapeat: 3\n"                                         /* 3:1 unknown key */
    "kernels:\n"
    "  k:\n"
    "    params: [f32, pointer]\n"                         /* 6:19 unknown type */
    "    source: 'extern \"C\" void k(float a, float *p) {}'\n"
    "buffers:\n"
    "  a: {type: f32, count: -4}\n"                        /* 9:25 count */
    "program:\n"
    "  - launch: {kernel: nope, grid: 1, block: 1, args: []}\n" /* 11:23 kernel */
    "  - copy: {from: a, to: zz, count: 1}\n";             /* 12:25 buffer */

static void test_five_mistakes(void **st) {
  (void)st;
  char *m = load_bad(five_mistakes);
  assert_int_equal(tu_count(m, "\n"), 4); /* five lines */
  assert_int_equal(tu_count(m, "t.yaml:"), 5);
  assert_non_null(strstr(m, "t.yaml:3:1: unknown key 'reapeat'"));
  assert_non_null(strstr(m, "t.yaml:6:19: unknown parameter type 'pointer'"));
  assert_non_null(strstr(m, "t.yaml:9:25: count must be between"));
  assert_non_null(strstr(m, "t.yaml:11:22: no kernel named 'nope'"));
  assert_non_null(strstr(m, "t.yaml:12:25: copy to: no buffer named 'zz'"));
  free(m);
}

#define HEAD "version: 1\n"
#define KER                                                                          \
  "kernels:\n"                                                                       \
  "  k:\n"                                                                           \
  "    params: [ptr, i32, f32]\n"                                                    \
  "    source: 'extern \"C\" void k(float *p, int n, float v) {}'\n"
#define BUF "buffers:\n  a: {type: f32, count: 16}\n  f: {type: i32, count: 2}\n"

static void test_single_problems(void **st) {
  (void)st;
  expect_problem(HEAD "program: [\n", "t.yaml:", "");
  expect_problem("version: 2\nprogram: []\n", "t.yaml:1:10", "version 2 is not supported");
  expect_problem(HEAD KER BUF "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [a, 1]}\n",
                 "t.yaml:10:50", "takes 3 arguments");
  expect_problem(HEAD KER BUF "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [a, a, 1]}\n",
                 "t.yaml:10:54", "is a scalar, but 'a' is a buffer");
  expect_problem(HEAD KER BUF "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [a, 1.5, 1]}\n",
                 "t.yaml:10:54", "does not fit i32");
  expect_problem(HEAD KER BUF
                 "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [{buffer: a, offset: 17}, 1, 1]}\n",
                 "t.yaml:10:71", "outside buffer 'a'");
  /* a buffer argument points at an element: an offset at the buffer's end leaves none */
  expect_problem(HEAD KER BUF
                 "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [{buffer: a, offset: 16}, 1, 1]}\n",
                 "t.yaml:10:71", "offset 16 is outside buffer 'a' (16 elements; a buffer argument points at one of them)");
  load_ok_free(HEAD KER BUF
               "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [{buffer: a, offset: 15}, 1, 1]}\n");
  /* tabs are no indentation */
  expect_problem(HEAD "buffers:\n\ta: {type: f32, count: 4}\nprogram: []\n", "t.yaml:3:1",
                 "(a tab character: YAML indents with spaces, never tabs)");
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: 1}\nexpect:\n  a: {sum: 16, rtol: -0.5}\n",
                 "t.yaml:8:22", "rtol must be >= 0");
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: 1}\nexpect:\n  a: {sum: 16, tol: -1}\n",
                 "t.yaml:8:21", "tol must be >= 0");
  expect_problem(HEAD KER BUF "program:\n  - launch: {kernel: k, grid: 1, block: 2048, args: [a, 1, 1]}\n",
                 "t.yaml:10:41", "at most 1024");
  /* dynamic shared memory: bytes, 0 to 48 KiB */
  expect_problem(HEAD KER BUF "program:\n  - launch: {kernel: k, grid: 1, block: 1, shared: 49153, args: [a, 1, 1]}\n",
                 "t.yaml:10:52",
                 "shared (bytes of dynamic shared memory per block, at most 48 KiB) must be between 0 and 49152, not "
                 "49153");
  expect_problem(HEAD KER BUF "program:\n  - launch: {kernel: k, grid: 1, block: 1, shared: -4, args: [a, 1, 1]}\n",
                 "t.yaml:10:52", "must be between 0 and 49152, not -4");
  expect_problem(HEAD KER BUF "program:\n  - launch: {kernel: k, grid: 1, block: 1, shared: 1k, args: [a, 1, 1]}\n",
                 "t.yaml:10:52", "must be an integer, not '1k'");
  load_ok_free(HEAD KER BUF "program:\n  - launch: {kernel: k, grid: 1, block: 1, shared: 49152, args: [a, 1, 1]}\n");
  expect_problem(HEAD KER BUF
                 "program:\n  - loop:\n      while: {buffer: f, index: 0}\n      body:\n"
                 "        - launch: {kernel: k, grid: 1, block: 1, args: [a, \"$iter\", 1]}\n",
                 "t.yaml:11:7", "needs max_trips");
  expect_problem(HEAD KER BUF
                 "program:\n  - loop:\n      while: {buffer: f, index: 0}\n      max_trips: 4\n      body:\n"
                 "        - launch: {kernel: k, grid: 1, block: 1, args: [a, \"$iter\", 1]}\n",
                 "t.yaml:14:60", "iteration of a while loop");
  expect_problem(HEAD KER BUF
                 "program:\n  - loop:\n      while: {buffer: a, index: 0}\n      max_trips: 4\n      body:\n"
                 "        - fill: {buffer: a, value: 1}\n",
                 "t.yaml:11:23", "must be i32");
  expect_problem(HEAD KER BUF "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [a, \"$iter\", 1]}\n",
                 "t.yaml:10:55", "outside of any loop"); /* at the '$', inside the quotes */
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: 1}\nexpect:\n  a: {at: {16: 1}}\n",
                 "t.yaml:8:12", "index 16 is outside");
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: 1}\nexpect:\n  a: {values: [1], at: {0: 1}}\n",
                 "t.yaml:8:6", "takes one of values, at, file");
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: 1}\nexpect:\n  a: {tol: 1}\n", "t.yaml:8:6",
                 "needs one of values, at, sum, file");
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: 1, count: 20}\n", "t.yaml:6:11",
                 "runs outside buffer 'a'");
  /* a device copies only between ranges that do not overlap */
  expect_problem(HEAD BUF "program:\n  - copy: {from: a, to: a, count: 4, from_offset: 2, to_offset: 5}\n",
                 "t.yaml:6:11", "copy within buffer 'a': elements [2, 6) and [5, 9) overlap");
  expect_problem(HEAD BUF "program:\n  - copy: {from: a, to: a, count: 1}\n", "t.yaml:6:11",
                 "elements [0, 1) and [0, 1) overlap");
  load_ok_free(HEAD BUF "program:\n  - copy: {from: a, to: a, count: 4, from_offset: 2, to_offset: 6}\n");
  load_ok_free(HEAD BUF "program:\n  - copy: {from: a, to: a, count: 0, to_offset: 6}\n");
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: 1, count: -1}\n", "t.yaml:6:11",
                 "fill count must be >= 0, not -1");
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: 1, count: 2, offset: -3}\n", "t.yaml:6:11",
                 "fill offset must be >= 0, not -3");
  expect_problem(HEAD BUF "program:\n  - jump: {}\n", "t.yaml:6:5", "unknown step 'jump'");
  /* an expression's error points at the character at fault, quoted or plain */
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: \"512 >>> $job\"}\n", "t.yaml:6:37",
                 "unexpected '>' where a value was expected (allowed: numbers");
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: 3 $ 4}\n", "t.yaml:6:32",
                 "unexpected '$' after a complete expression (operators: * / %");
  expect_problem(HEAD BUF "program:\n  - fill: {buffer: a, value: '1 ? 2'}\n", "t.yaml:6:36", "expected ':'");
  expect_problem(HEAD "kernels:\n  k:\n    params: []\n    source: x\n    file: y.cu\nprogram: []\n",
                 "t.yaml:6:11", "both source and file");
  expect_problem(HEAD "kernels:\n  k:\n    params: []\n    source: x\n    entry: 9x\nprogram:\n  - loop: {trips: 1, body: []}\n",
                 "t.yaml:6:12", "not a C function name");
  expect_problem(HEAD "devices: gpu\nprogram: []\n", "t.yaml:2:10", "devices 'gpu'");
  expect_problem(HEAD "buffers:\n  a: {type: f32, count: 2, init: {values: [1, 2, 3]}}\nprogram: []\n",
                 "t.yaml:3:43", "values lists 3");
  expect_problem(HEAD "buffers:\n  a: {type: i32, count: 2, init: {fill: 1.5}}\nprogram: []\n", "t.yaml:3:34",
                 "do not fit");
  expect_problem(HEAD "buffers:\n  a: {type: f32, count: 2, init: {file: nope.bin}}\nprogram: []\n",
                 "t.yaml:3:41", "cannot read init file");
  expect_problem(HEAD "program:\n  - loop: {trips: 100000, body: [{loop: {trips: 100000, body: [{fill: {buffer: a, value: 1}}]}}]}\nbuffers:\n  a: {type: f32, count: 2}\n",
                 "t.yaml:3:3", "unrolls to more than");
}

/* Bad NumPy files for init and expect, and a bad `output` value: each a
 * located error saying what is wrong. */
static void test_npy_and_output_mistakes(void **st) {
  (void)st;
  expect_problem(HEAD "buffers:\n  a: {type: f32, count: 2, output: maybe}\nprogram:\n  - fill: {buffer: a, value: 1}\n",
                 "t.yaml:3:36", "output of buffer 'a' is true or false, not 'maybe'");
  uint8_t good[256];
  size_t hl = npy_header(PT_F32, 0, NULL, 2, good, sizeof good);
  assert_true(hl > 0 && hl % 64 == 0); /* the data starts aligned */
  float two[2] = {1, 2};
  memcpy(good + hl, two, sizeof two);
  static const struct { const char *name, *says; size_t cut; int patch; } bad[] = {
      {"short.npy", "is a .npy file cut short in its header", 40, 0},
      {"v9.npy", "is a .npy file of version 9.0, which is not known", 0, 1},
      {"fortran.npy", "is in Fortran order; only C order is read", 0, 2},
      {"nodata.npy", "has 4 bytes of data; 2 elements of f32 take 8", 4, 0},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    uint8_t img[256];
    size_t len = hl + sizeof two;
    memcpy(img, good, len);
    if (bad[k].cut) len -= bad[k].cut;
    if (bad[k].patch == 1) img[6] = 9;
    if (bad[k].patch == 2) {
      /* a 2-D shape in Fortran order, the same number of elements */
      char dict[64];
      snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }");
      memset(img + 10, ' ', hl - 11);
      memcpy(img + 10, dict, strlen(dict));
    }
    char *text = NULL;
    const char *path = tu_write_temp(1, bad[k].name, "");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, len, f), len);
    fclose(f);
    assert_true(asprintf(&text, HEAD "buffers:\n  a: {type: f32, count: 2, init: {file: %s}}\n"
                                    "program:\n  - fill: {buffer: a, value: 1, count: 0}\n", path) > 0);
    char needle[300];
    snprintf(needle, sizeof needle, "init file '%s' %s", path, bad[k].says);
    expect_problem(text, "t.yaml:3:", needle);
    free(text);
  }
}

static void test_files_and_inits(void **st) {
  (void)st;
  const char *kpath = tu_write_temp(0, "k.cu", "extern \"C\" __global__ void k(float *p) { p[0] = 1; }\n");
  assert_non_null(kpath);
  float vals[4] = {1.5f, -2, 3, 4};
  char binpath[300];
  snprintf(binpath, sizeof binpath, "%s", kpath);
  strcpy(strrchr(binpath, '/') + 1, "v.bin");
  FILE *f = fopen(binpath, "wb");
  fwrite(vals, sizeof vals, 1, f);
  fclose(f);
  const char *cfg = tu_write_temp(0, "c.yaml",
                                  "version: 1\n"
                                  "kernels:\n  k: {params: [ptr], file: k.cu}\n"
                                  "buffers:\n"
                                  "  a: {type: f32, count: 4, init: {file: v.bin}}\n"
                                  "  b: {type: i32, count: 5, init: {values: [5, -6, 7]}}\n"
                                  "  c: {type: u8, count: 3, init: {iota: {start: 254, step: 2}}}\n"
                                  "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [a]}\n"
                                  "expect:\n  a: {file: v.bin}\n");
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  /* c's iota runs past 255: refused */
  assert_int_equal(prog_load_file(cfg, &p, &err), SCHEDRUN_ECONFIG);
  assert_non_null(strstr(err.message, "buffer 'c'"));
  schedrun_error_clear(&err);
  cfg = tu_write_temp(0, "c.yaml",
                      "version: 1\n"
                      "kernels:\n  k: {params: [ptr], file: k.cu}\n"
                      "buffers:\n"
                      "  a: {type: f32, count: 4, init: {file: v.bin}}\n"
                      "  b: {type: i32, count: 5, init: {values: [5, -6, 7]}}\n"
                      "  c: {type: u8, count: 3, init: {iota: {start: 200, step: 2}}}\n"
                      "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [a]}\n"
                      "expect:\n  a: {file: v.bin}\n");
  if (prog_load_file(cfg, &p, &err)) fail_msg("%s", err.message);
  assert_non_null(strstr(p->kernels[0].source, "p[0] = 1"));
  assert_int_equal(p->kernels[0].first_line, 1);
  assert_non_null(strstr(p->kernels[0].source_file, "k.cu"));
  assert_memory_equal(p->buffers[0].image, vals, sizeof vals);
  const int32_t *b = (const int32_t *)p->buffers[1].image;
  int32_t want_b[5] = {5, -6, 7, 0, 0};
  for (int i = 0; i < 5; i++) assert_int_equal(b[i], want_b[i]);
  assert_int_equal(p->buffers[2].image[0], 200);
  assert_int_equal(p->buffers[2].image[1], 202);
  assert_int_equal(p->buffers[2].image[2], 204);
  assert_int_equal(p->expects[0].n, 4);
  for (int i = 0; i < 4; i++) assert_true(p->expects[0].values[i] == vals[i]);
  /* verification against that expectation */
  strbuf why;
  sb_init(&why);
  prog_env env = {{0}};
  assert_true(prog_verify_buffer(p, 0, vals, sizeof vals, &env, &why));
  float wrong[4] = {1.5f, -2, 3.5f, 4};
  assert_false(prog_verify_buffer(p, 0, wrong, sizeof wrong, &env, &why));
  assert_non_null(strstr(why.data, "buffer a[2]: expected 3, got 3.5"));
  sb_free(&why);
  prog_free(p);
}

/* Expected values may depend on the job: numbers or expressions over $job,
 * $run and $device, computed for each job when it is verified. */
static void test_expect_expressions(void **st) {
  (void)st;
  const char *yaml = "version: 1\n"
                     "buffers:\n"
                     "  a: {type: i32, count: 3}\n"
                     "program:\n"
                     "  - fill: {buffer: a, value: \"$job\"}\n"
                     "expect:\n"
                     "  a: {values: [\"$job\", 7, \"$job * 2 - $job + $run - $run\"], sum: \"2 * $job + 7\"}\n";
  prog_program *p = load_ok(yaml);
  prog_env env = {{0}};
  env.v[EXV_JOB] = 5;
  env.v[EXV_RUN] = 2;
  int32_t good[3] = {5, 7, 5}, bad[3] = {5, 7, 4};
  strbuf why;
  sb_init(&why);
  assert_true(prog_verify_buffer(p, 0, good, sizeof good, &env, &why));
  sb_free(&why);
  env.v[EXV_JOB] = 6; /* another job expects other values */
  sb_init(&why);
  assert_false(prog_verify_buffer(p, 0, good, sizeof good, &env, &why));
  assert_non_null(strstr(why.data, "buffer a[0]: expected 6, got 5"));
  sb_free(&why);
  env.v[EXV_JOB] = 5;
  int32_t all5[3] = {5, 5, 5};
  sb_init(&why);
  assert_false(prog_verify_buffer(p, 0, all5, sizeof all5, &env, &why));
  assert_non_null(strstr(why.data, "buffer a[1]: expected 7, got 5"));
  sb_free(&why);
  sb_init(&why);
  assert_false(prog_verify_buffer(p, 0, bad, sizeof bad, &env, &why));
  assert_non_null(strstr(why.data, "buffer a[2]: expected 5, got 4"));
  sb_free(&why);
  prog_free(p);
  /* $iter means nothing outside a loop: refused with its place */
  expect_problem("version: 1\nbuffers:\n  a: {type: i32, count: 1}\nprogram:\n  - fill: {buffer: a, value: 1}\n"
                 "expect:\n  a: {values: [\"$iter\"]}\n",
                 "t.yaml:7:17: ", "$iter is used outside of any loop");
}

static void test_nested_and_while_ok(void **st) {
  (void)st;
  prog_program *p = load_ok(HEAD KER BUF
                            "program:\n"
                            "  - loop:\n      trips: 3\n      body:\n"
                            "        - loop:\n            trips: 4\n            body:\n"
                            "              - launch: {kernel: k, grid: 1, block: 1, args: [{buffer: a, offset: \"$iter0 * 4 + $iter1\"}, \"$iter\", 1]}\n"
                            "  - loop:\n      while: {buffer: f, index: 1}\n      max_trips: 9\n      body:\n"
                            "        - launch: {kernel: k, grid: 1, block: 1, args: [a, \"$job\", \"$run * 0.5\"]}\n");
  assert_int_equal(p->nsteps, 2);
  assert_int_equal(p->steps[0].u.loop.body[0].u.loop.trips, 4);
  assert_int_equal(p->steps[1].kind, ST_WHILE);
  assert_int_equal(p->steps[1].u.loop.index, 1);
  assert_int_equal(p->steps[1].u.loop.max_trips, 9);
  assert_int_equal(p->ncommands, 5);
  prog_free(p);
}

/* Random damage to a good config (flipped bytes, cut short, lines swapped):
 * every load either succeeds or fails with located messages; never a crash
 * (this also runs under ASan and UBSan). */
static void test_damaged_configs(void **st) {
  (void)st;
  char path[512], *text;
  size_t len;
  schedrun_error_t err = {0};
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  assert_int_equal(fs_read_file(path, &text, &len, &err), SCHEDRUN_OK);
  char *buf = malloc(len + 1);
  uint64_t x = 0x2545f4914f6cdd1dull;
  int failed = 0, loaded = 0;
  static const char junk[] = ":{}[]-#'\"|>&*!%@`\t\n 0123456789$abc";
  for (int round = 0; round < 3000; round++) {
    memcpy(buf, text, len + 1);
    size_t n = len;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int kind = (int)(x % 3);
    if (kind == 0) {
      for (int f = 0; f < 4; f++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[x % n] = junk[(x >> 32) % (sizeof junk - 1)];
      }
    } else if (kind == 1) {
      n = (size_t)(x % len);
      buf[n] = '\0';
    } else {
      /* swap two lines' first characters: breaks indentation and keys */
      size_t a = (size_t)(x % len), b = (size_t)((x >> 20) % len);
      char c = buf[a];
      buf[a] = buf[b];
      buf[b] = c;
    }
    prog_program *p = NULL;
    int rc = prog_load_string(buf, n, "t.yaml", &p, &err);
    if (rc == SCHEDRUN_OK) {
      assert_non_null(p);
      loaded++;
      prog_free(p);
    } else {
      assert_int_equal(rc, SCHEDRUN_ECONFIG);
      assert_null(p);
      assert_non_null(err.message);
      /* every line names the file and a place in it */
      for (char *line = err.message; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, "t.yaml:", 7) != 0) fail_msg("unlocated problem: %s", line);
      failed++;
      schedrun_error_clear(&err);
    }
  }
  assert_true(failed > 0 && loaded > 0);
  free(buf);
  free(text);
}

/* Buffers past any device, and sources that cannot travel in one message,
 * are refused at load, with their place. A 1.2 GB buffer loads (its bytes are
 * lent to messages, not copied into them; whether a device holds it is asked
 * when a job is placed there). */
static void test_message_limits(void **st) {
  (void)st;
  load_ok_free("version: 1\n"
               "buffers:\n"
               "  out: {type: f32, count: 300000000}\n"
               "program:\n"
               "  - fill: {buffer: out, value: 0}\n"
               "expect:\n"
               "  out: {sum: 0}\n");
  /* one buffer over 1 TiB: its count */
  expect_problem("version: 1\n"
                 "buffers:\n"
                 "  out: {type: f32, count: 300000000000}\n"
                 "program: []\n",
                 "t.yaml:3:27: ", "count");
  /* two that fit alone but not together: the second is named */
  expect_problem("version: 1\n"
                 "buffers:\n"
                 "  a: {type: u8, count: 600000000000}\n"
                 "  b: {type: u8, count: 600000000000}\n"
                 "program: []\n",
                 "t.yaml:4:24: ", "buffer 'b' brings the program's buffers to 1200000000000 bytes; at most 1024 GiB");
  /* a kernel source over 8 MiB */
  size_t big = (8u << 20) + 10;
  char *yaml = malloc(big + 200);
  assert_non_null(yaml);
  int n = sprintf(yaml, "version: 1\nkernels:\n  k:\n    params: []\n    source: \"");
  memset(yaml + n, 'x', big);
  strcpy(yaml + n + big, "\"\nprogram: []\n");
  expect_problem(yaml, "t.yaml:5:13: ", "kernel 'k' has 8388618 bytes of source; at most 8 MiB");
  free(yaml);
}

/* An alias bomb: nine steps, each a loop over ten uses of the step before
 * (10^8 steps written out, in a kilobyte). The loader counts steps as it
 * expands aliases and stops at the limit, not after building the tree. */
static void test_alias_bomb(void **st) {
  (void)st;
  char yaml[4096];
  int n = snprintf(yaml, sizeof yaml,
                   "version: 1\nkernels:\n  k:\n    params: [ptr]\n    source: \"x\"\n"
                   "buffers:\n  out: {type: i32, count: 1}\nprogram:\n"
                   "  - &s0 {launch: {kernel: k, grid: 1, block: 1, args: [out]}}\n");
  for (int i = 1; i <= 8; i++) {
    n += snprintf(yaml + n, sizeof yaml - (size_t)n, "  - &s%d {loop: {trips: 1, body: [", i);
    for (int k = 0; k < 10; k++) n += snprintf(yaml + n, sizeof yaml - (size_t)n, "%s*s%d", k ? ", " : "", i - 1);
    n += snprintf(yaml + n, sizeof yaml - (size_t)n, "]}}\n");
  }
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  char *m = load_bad(yaml);
  getrusage(RUSAGE_SELF, &after);
  char want[64];
  snprintf(want, sizeof want, "more than %u steps once YAML aliases are expanded", PROG_MAX_STEPS);
  if (!strstr(m, want)) fail_msg("%s", m);
  assert_int_equal(tu_count(m, "\n"), 0); /* that one problem, no consequences of it */
  free(m);
  /* bounded memory (the tree written out would take tens of gigabytes) */
  long grew_mb = (after.ru_maxrss - before.ru_maxrss) / 1024;
  if (grew_mb > 400) fail_msg("the load grew the process by %ld MB", grew_mb);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_damaged_configs),
      cmocka_unit_test(test_config_md_example), cmocka_unit_test(test_uses_steps_not_expectations), cmocka_unit_test(test_five_mistakes),
      cmocka_unit_test(test_single_problems),   cmocka_unit_test(test_files_and_inits),
      cmocka_unit_test(test_npy_and_output_mistakes),
      cmocka_unit_test(test_nested_and_while_ok), cmocka_unit_test(test_message_limits),
      cmocka_unit_test(test_expect_expressions), cmocka_unit_test(test_alias_bomb),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
