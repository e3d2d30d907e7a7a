/*
 * The program builder: every shipped config rebuilt with it gives the same
 * results, element by element for every buffer of every job, and the same
 * recording counters as the config; builder mistakes are reported naming
 * the call (step index path, kernel, argument) they come from.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/api.h"
#include "test_util.h"

static const unsigned ONE[3] = {1, 1, 1};
#define DIMS(x, y) ((const unsigned[3]){x, y, 1})

static schedrun_builder_t *start(const char *name) {
  schedrun_builder_t *b = NULL;
  assert_int_equal(schedrun_builder_new(&b, name, NULL), SCHEDRUN_OK);
  return b;
}

static void *iota(const char *type, size_t n, double start, double step) {
  size_t es = !strcmp(type, "f32") || !strcmp(type, "i32") ? 4 : 8;
  char *d = calloc(n, es);
  for (size_t i = 0; i < n; i++) {
    double v = start + step * (double)i;
    if (!strcmp(type, "f32")) ((float *)d)[i] = (float)v;
    else if (!strcmp(type, "i32")) ((int32_t *)d)[i] = (int32_t)v;
    else ((double *)d)[i] = v;
  }
  return d;
}

static void buffer_iota(schedrun_builder_t *b, const char *name, const char *type, size_t n, double start,
                        double step) {
  void *d = iota(type, n, start, step);
  schedrun_builder_buffer(b, name, type, n, d, n * 4, 0);
  free(d);
}

/* ---- the twins of configs/ ---- */

static schedrun_builder_t *saxpy(void) {
  schedrun_builder_t *b = start("saxpy-loop");
  schedrun_builder_devices(b, "auto");
  schedrun_builder_runs(b, 3, 2, 1);
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
                          "fill_slice");
  buffer_iota(b, "x", "f32", 4096, 0, 1);
  buffer_iota(b, "y", "f32", 4096, 1, 0);
  schedrun_builder_buffer(b, "out", "f32", 8192, NULL, 0, 0);
  schedrun_builder_launch(b, "saxpy", DIMS(16, 1), DIMS(256, 1), (const char *[]){"2.0", "x", "y", "4096"}, 4);
  schedrun_builder_loop(b, 8);
  schedrun_builder_launch(b, "fill_slice", DIMS(4, 1), DIMS(256, 1),
                          (const char *[]){"out[$iter * 1024]", "1024", "$iter + 1 + 10 * $run"}, 3);
  schedrun_builder_end(b);
  schedrun_builder_copy(b, "y", "out", "16", NULL, NULL);
  schedrun_builder_expect_at(b, "y", (const uint64_t[]){0, 1, 4095}, (const char *[]){"1.0", "3.0", "8191.0"}, 3, NULL,
                             0);
  schedrun_builder_expect_at(b, "out", (const uint64_t[]){15, 16, 1024, 8191},
                             (const char *[]){"31.0", "1 + 10 * $run", "2 + 10 * $run", "8 + 10 * $run"}, 4,
                             "37104 + 81760 * $run", 1e-3);
  return b;
}

static schedrun_builder_t *histogram(void) {
  schedrun_builder_t *b = start("histogram");
  schedrun_builder_devices(b, "host:2");
  schedrun_builder_runs(b, 0, 1, 4);
  char path[512];
  snprintf(path, sizeof path, "%s/kernels/histogram.cu", tu_env("SCHEDRUN_CONFIGS"));
  schedrun_builder_kernel_file(b, "histogram", "ptr, i32, ptr, i32", path, NULL);
  schedrun_builder_kernel(b, "shift", "ptr, i32, i32",
                          "extern \"C\" __global__ void shift(int *v, int n, int by) {\n"
                          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "  if (i < n) v[i] += by;\n"
                          "}\n",
                          NULL);
  buffer_iota(b, "values", "i32", 4096, 0, 1);
  schedrun_builder_buffer(b, "buckets", "u32", 16, NULL, 0, 0);
  schedrun_builder_buffer(b, "shifts", "i32", 4, NULL, 0, 0);
  schedrun_builder_loop(b, 4);
  schedrun_builder_launch(b, "shift", DIMS(4, 1), DIMS(256, 1),
                          (const char *[]){"values[$iter * 1024]", "1024", "4096 * $job + 16 * $iter"}, 3);
  schedrun_builder_fill(b, "shifts", "4096 * $job + 16 * $iter", "1", "$iter");
  schedrun_builder_end(b);
  schedrun_builder_launch(b, "histogram", DIMS(16, 1), DIMS(256, 1), (const char *[]){"values", "4096", "buckets", "16"},
                          4);
  const char *v256[16];
  for (int i = 0; i < 16; i++) v256[i] = "256";
  schedrun_builder_expect_values(b, "buckets", v256, 16, NULL, 0);
  schedrun_builder_expect_values(b, "shifts",
                                 (const char *[]){"4096 * $job", "4096 * $job + 16", "4096 * $job + 32",
                                                  "4096 * $job + 48"},
                                 4, NULL, 0);
  return b;
}

static schedrun_builder_t *demo(void) {
  schedrun_builder_t *b = start("multi-device-demo");
  schedrun_builder_devices(b, "host:4");
  schedrun_builder_runs(b, 2, 2, 64);
  schedrun_builder_kernel(b, "add_scaled", "ptr, ptr, f32, i32",
                          "extern \"C\" __global__ void add_scaled(float *acc, const float *x, float w, int n) {\n"
                          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "  if (i < n) acc[i] += w * x[i];\n"
                          "}\n",
                          NULL);
  schedrun_builder_kernel(b, "shift", "ptr, f32, i32",
                          "extern \"C\" __global__ void shift(float *acc, float by, int n) {\n"
                          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "  if (i < n) acc[i] += by;\n"
                          "}\n",
                          NULL);
  buffer_iota(b, "x", "f32", 4096, 0, 1);
  schedrun_builder_buffer(b, "acc", "f32", 4096, NULL, 0, 0);
  schedrun_builder_loop(b, 8);
  schedrun_builder_launch(b, "add_scaled", DIMS(16, 1), DIMS(256, 1),
                          (const char *[]){"acc", "x", "$iter + 1 + $job", "4096"}, 4);
  schedrun_builder_end(b);
  schedrun_builder_launch(b, "shift", DIMS(16, 1), DIMS(256, 1), (const char *[]){"acc", "$job", "4096"}, 3);
  schedrun_builder_launch(b, "shift", DIMS(16, 1), DIMS(256, 1), (const char *[]){"acc", "-$job", "4096"}, 3);
  schedrun_builder_expect_at(b, "acc", (const uint64_t[]){0, 1, 2048, 4095},
                             (const char *[]){"0", "36 + 8 * $job", "2048 * (36 + 8 * $job)", "4095 * (36 + 8 * $job)"},
                             4, "8386560 * (36 + 8 * $job)", 0);
  return b;
}

static schedrun_builder_t *nested(void) {
  schedrun_builder_t *b = start("nested-tiles");
  schedrun_builder_devices(b, "host");
  schedrun_builder_runs(b, 3, 2, 0);
  schedrun_builder_kernel(b, "fill_tile", "ptr, i32, i32, f32",
                          "extern \"C\" __global__ void fill_tile(float *grid, int row_pitch, int tile, float v) {\n"
                          "  int r = threadIdx.y, c = threadIdx.x;\n"
                          "  grid[r * row_pitch + c] = v;\n"
                          "}\n",
                          NULL);
  schedrun_builder_buffer(b, "grid", "f32", 768, NULL, 0, 0);
  schedrun_builder_loop(b, 4);
  schedrun_builder_loop(b, 3);
  schedrun_builder_launch(b, "fill_tile", ONE, DIMS(8, 8),
                          (const char *[]){"grid[$iter0 * 8 * 24 + $iter1 * 8]", "24", "8", "10 * $iter0 + $iter1 + 100 * $run"},
                          4);
  schedrun_builder_end(b);
  schedrun_builder_end(b);
  schedrun_builder_expect_at(b, "grid", (const uint64_t[]){77, 85, 93, 269, 277, 285, 461, 469, 477, 653, 661, 669},
                             (const char *[]){"100 * $run", "1 + 100 * $run", "2 + 100 * $run", "10 + 100 * $run",
                                              "11 + 100 * $run", "12 + 100 * $run", "20 + 100 * $run", "21 + 100 * $run",
                                              "22 + 100 * $run", "30 + 100 * $run", "31 + 100 * $run", "32 + 100 * $run"},
                             12, "64 * (192 + 1200 * $run)", 0);
  return b;
}

static schedrun_builder_t *countdown(void) {
  schedrun_builder_t *b = start("while-countdown");
  schedrun_builder_devices(b, "host");
  schedrun_builder_runs(b, 3, 2, 0);
  schedrun_builder_kernel(b, "step", "ptr, ptr, f32",
                          "extern \"C\" __global__ void step(int *flag, float *trace, float scale) {\n"
                          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "  if (i == 0) {\n"
                          "    trace[flag[0]] = flag[0] * scale;\n"
                          "    flag[0] = flag[0] - 1;\n"
                          "  }\n"
                          "}\n",
                          NULL);
  int32_t ten = 10;
  schedrun_builder_buffer(b, "flag", "i32", 1, &ten, sizeof ten, 0);
  schedrun_builder_buffer(b, "trace", "f32", 16, NULL, 0, 0);
  schedrun_builder_fill(b, "trace", "-1", NULL, NULL);
  schedrun_builder_while(b, "flag", 0, 64);
  schedrun_builder_launch(b, "step", ONE, DIMS(32, 1), (const char *[]){"flag", "trace", "1.5"}, 3);
  schedrun_builder_end(b);
  schedrun_builder_loop(b, 4);
  schedrun_builder_fill(b, "trace", "($iter + 1) * 100 + $run", "1", "11 + $iter");
  schedrun_builder_end(b);
  schedrun_builder_expect_values(b, "flag", (const char *[]){"0"}, 1, NULL, 0);
  schedrun_builder_expect_values(b, "trace",
                                 (const char *[]){"-1", "1.5", "3", "4.5", "6", "7.5", "9", "10.5", "12", "13.5", "15",
                                                  "100 + $run", "200 + $run", "300 + $run", "400 + $run", "-1"},
                                 16, NULL, 0);
  return b;
}

static schedrun_builder_t *autotuned(void) {
  schedrun_builder_t *b = start("autotune");
  schedrun_builder_devices(b, "auto");
  schedrun_builder_runs(b, 1, 1, 4);
  schedrun_builder_kernel(b, "saxpy", "f32, ptr, ptr, i32",
                          "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
                          "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
                          "    y[i] = a * x[i] + y[i];\n"
                          "}\n",
                          NULL);
  buffer_iota(b, "x", "f32", 65536, 0, 1);
  buffer_iota(b, "y", "f32", 65536, 1, 0);
  schedrun_builder_loop(b, 2);
  static const unsigned blocks[4][3] = {{64, 1, 1}, {128, 1, 1}, {256, 1, 1}, {512, 1, 1}};
  schedrun_builder_launch_autotune(b, "saxpy", blocks, 4, "min(32768 / $block, 128)", (const char *[]){"n"}, 1,
                                   (const char *[]){"2.0 + $job", "x[$iter * 32768]", "y[$iter * 32768]", "32768"}, 4);
  schedrun_builder_end(b);
  schedrun_builder_expect_at(b, "y", (const uint64_t[]){0, 1, 32767, 32768, 65535},
                             (const char *[]){"1.0", "3 + $job", "32767 * (2 + $job) + 1", "32768 * (2 + $job) + 1",
                                              "65535 * (2 + $job) + 1"},
                             5, NULL, 0);
  return b;
}

typedef struct twin {
  const char *config;
  schedrun_builder_t *(*build)(void);
  const char *buffers[4];
} twin;

static const twin twins[] = {
    {"saxpy.yaml", saxpy, {"x", "y", "out", NULL}},
    {"histogram.yaml", histogram, {"values", "buckets", "shifts", NULL}},
    {"multi_device_demo.yaml", demo, {"x", "acc", NULL}},
    {"nested_loops.yaml", nested, {"grid", NULL}},
    {"while_countdown.yaml", countdown, {"flag", "trace", NULL}},
    {"autotune.yaml", autotuned, {"x", "y", NULL}},
};

static schedrun_report_t *run(schedrun_t *s, schedrun_program_t *p) {
  schedrun_run_options_t ro;
  schedrun_run_options_init(&ro);
  ro.keep_outputs = 1;
  schedrun_report_t *rep = NULL;
  schedrun_error_t err = {0};
  int rc = schedrun_run(s, p, &ro, &rep, &err);
  if (rc != SCHEDRUN_OK) fail_msg("%s: %s", schedrun_program_name(p), err.message);
  return rep;
}

static void count_config(const char *path, void *ctx) {
  (void)path;
  ++*(int *)ctx;
}

static void test_every_config_has_a_twin(void **st) {
  (void)st;
  int n = 0;
  tu_for_each_config(count_config, &n);
  assert_int_equal(n, (int)(sizeof twins / sizeof twins[0])); /* a new config needs its twin here */
}

static void test_twins_give_the_same_results(void **st) {
  (void)st;
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host"; /* one device: every context is the same in both runs, so the counters compare */
  schedrun_t *s = tu_open(&o);
  for (size_t t = 0; t < sizeof twins / sizeof twins[0]; t++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tu_env("SCHEDRUN_CONFIGS"), twins[t].config);
    schedrun_program_t *py = NULL, *pb = NULL;
    schedrun_error_t err = {0};
    /* without a scheduler: the config's devices: is not s's, the twin has none */
    if (schedrun_program_load_file(NULL, path, &py, &err) != SCHEDRUN_OK) fail_msg("%s", err.message);
    schedrun_builder_t *b = twins[t].build();
    if (schedrun_builder_finish(b, &pb, &err) != SCHEDRUN_OK) fail_msg("%s twin: %s", twins[t].config, err.message);
    schedrun_builder_free(&b);
    assert_string_equal(schedrun_program_name(pb), schedrun_program_name(py));
    assert_int_equal(schedrun_program_repeat(pb), schedrun_program_repeat(py));
    assert_int_equal(schedrun_program_jobs(pb), schedrun_program_jobs(py));
    assert_int_equal(schedrun_program_buffer_sets(pb), schedrun_program_buffer_sets(py));
    assert_string_equal(schedrun_program_devices(pb), schedrun_program_devices(py));
    schedrun_report_t *ry = run(s, py), *rb = run(s, pb);
    const schedrun_summary_t *sy = schedrun_report_summary(ry), *sb = schedrun_report_summary(rb);
    assert_int_equal(sb->jobs, sy->jobs);
    assert_int_equal(sb->verified, sy->jobs);
    assert_int_equal(sb->nodes_created, sy->nodes_created);
    assert_int_equal(sb->nodes_updated, sy->nodes_updated);
    assert_int_equal(sb->nodes_reused, sy->nodes_reused);
    int repeat = schedrun_program_repeat(py), jobs = schedrun_program_jobs(py);
    for (int r = 0; r < repeat; r++)
      for (int j = 0; j < jobs; j++)
        for (const char *const *name = twins[t].buffers; *name; name++) {
          size_t ly = 0, lb = 0;
          const uint8_t *dy = schedrun_report_output(ry, r, j, *name, &ly);
          const uint8_t *db = schedrun_report_output(rb, r, j, *name, &lb);
          assert_non_null(dy);
          assert_non_null(db);
          assert_int_equal(lb, ly);
          for (size_t i = 0; i < ly; i++)
            if (dy[i] != db[i])
              fail_msg("%s: run %d job %d buffer %s: byte %zu differs", twins[t].config, r, j, *name, i);
        }
    for (int slot = 0; slot < schedrun_program_buffer_sets(py); slot++) {
      schedrun_counters_t cy, cb;
      assert_int_equal(schedrun_record_counters(s, py, 0, slot, &cy, NULL), SCHEDRUN_OK);
      assert_int_equal(schedrun_record_counters(s, pb, 0, slot, &cb, NULL), SCHEDRUN_OK);
      assert_int_equal(cb.nodes, cy.nodes);
      assert_int_equal(cb.created, cy.created);
      assert_int_equal(cb.updated, cy.updated);
      assert_int_equal(cb.reused, cy.reused);
    }
    schedrun_report_free(&ry);
    schedrun_report_free(&rb);
    schedrun_program_free(&py);
    schedrun_program_free(&pb);
  }
  schedrun_close(&s);
}

/* The error of finishing b, which must fail with code. */
static char *finish_fails(schedrun_builder_t *b, int code) {
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_builder_finish(b, &p, &err), code);
  assert_null(p);
  schedrun_builder_free(&b);
  return err.message;
}

static void test_errors_name_the_call(void **st) {
  (void)st;
  /* a launch two loops deep, of a kernel that does not exist, and a bad argument expression */
  schedrun_builder_t *b = saxpy();
  schedrun_builder_loop(b, 2);
  schedrun_builder_loop(b, 3);
  schedrun_builder_launch(b, "nope", ONE, ONE, (const char *[]){"x"}, 1);
  schedrun_builder_launch(b, "saxpy", ONE, ONE, (const char *[]){"2.0 *", "x", "y", "16"}, 4);
  schedrun_builder_end(b);
  schedrun_builder_end(b);
  char *e = finish_fails(b, SCHEDRUN_ECONFIG);
  assert_non_null(strstr(e, "saxpy-loop: step 4.1.1 (launch of kernel 'nope'): no kernel named 'nope'"));
  assert_non_null(strstr(e, "saxpy-loop: step 4.1.2 (launch of kernel 'saxpy'), args[0]: "));
  assert_null(strstr(e, ".yaml")); /* no file, line or column of a text nobody wrote */
  free(e);

  /* the wrong number of arguments; a buffer whose contents do not fit */
  b = saxpy();
  schedrun_builder_launch(b, "saxpy", ONE, ONE, (const char *[]){"2.0", "x"}, 2);
  float three[3] = {1, 2, 3};
  schedrun_builder_buffer(b, "small", "f32", 4, three, sizeof three, 0);
  e = finish_fails(b, SCHEDRUN_ECONFIG);
  assert_non_null(strstr(e, "step 4 (launch of kernel 'saxpy'): kernel 'saxpy' takes 4 arguments"));
  assert_non_null(strstr(e, "buffer 'small': init of buffer 'small' has 12 bytes; the buffer needs 16"));
  free(e);

  /* a kernel with an unknown parameter type; an expectation on no buffer */
  b = start("t");
  schedrun_builder_kernel(b, "k", "ptr, f16", "extern \"C\" __global__ void k(float *p, float v) {}", NULL);
  schedrun_builder_fill(b, "nowhere", "0", NULL, NULL);
  schedrun_builder_expect_values(b, "ghost", (const char *[]){"1"}, 1, NULL, 0);
  e = finish_fails(b, SCHEDRUN_ECONFIG);
  assert_non_null(strstr(e, "t: kernel 'k': unknown parameter type 'f16'"));
  assert_non_null(strstr(e, "t: step 1 (fill of 'nowhere'): "));
  assert_non_null(strstr(e, "t: the expectation on 'ghost': "));
  free(e);

  /* loops that do not close, or close twice; NULL arguments */
  b = start("t");
  schedrun_builder_loop(b, 2);
  e = finish_fails(b, SCHEDRUN_EINVAL);
  assert_non_null(strstr(e, "loop step 1 is not closed"));
  free(e);
  b = start("t");
  schedrun_builder_end(b);
  e = finish_fails(b, SCHEDRUN_EINVAL);
  assert_non_null(strstr(e, "schedrun_builder_end: no loop is open"));
  free(e);
  b = start("t");
  schedrun_builder_kernel(b, NULL, "ptr", "", NULL);
  e = finish_fails(b, SCHEDRUN_EINVAL);
  assert_non_null(strstr(e, "schedrun_builder_kernel: name is NULL"));
  free(e);
  b = start("t");
  for (int i = 0; i < 9; i++) schedrun_builder_loop(b, 1);
  e = finish_fails(b, SCHEDRUN_EINVAL);
  assert_non_null(strstr(e, "loops nest at most 8 deep"));
  free(e);

  /* a builder is spent once finished */
  b = saxpy();
  schedrun_program_t *p = NULL;
  assert_int_equal(schedrun_builder_finish(b, &p, NULL), SCHEDRUN_OK);
  schedrun_error_t err = {0};
  schedrun_program_t *again = NULL;
  assert_int_equal(schedrun_builder_finish(b, &again, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "called already"));
  schedrun_error_clear(&err);
  schedrun_builder_free(&b);
  schedrun_program_free(&p);
}

/* The memory a builder's buffer starts from is not reachable from YAML. */
static void test_memory_init_is_not_yaml(void **st) {
  (void)st;
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  const char *yaml = "version: 1\nbuffers:\n  a: {type: f32, count: 4, init: {memory: 0}}\n"
                     "program:\n  - fill: {buffer: a, value: 1}\n";
  assert_int_equal(schedrun_program_load_string(NULL, yaml, "m.yaml", &p, &err), SCHEDRUN_ECONFIG);
  assert_non_null(strstr(err.message, "m.yaml:3:"));
  assert_non_null(strstr(err.message, "init memory is for programs made with the builder"));
  schedrun_error_clear(&err);
}

/* examples/saxpy_builder.c runs configs/saxpy.yaml's twin: every job
 * verified, the same recording counts as the config gives (one device). */
static void test_saxpy_example(void **st) {
  (void)st;
  char *out, *err;
  char *argv[] = {(char *)tu_env("SCHEDRUN_SAXPY_BUILDER"), "host", NULL};
  int rc = tu_run(argv, &out, &err);
  if (rc != 0) fail_msg("exit %d: %s", rc, err);
  assert_string_equal(out, "saxpy-loop: 3 of 3 jobs verified; nodes 20 created, 8 updated, 2 reused\n");
  free(out);
  free(err);
}

/* schedrun_builder_shape gives the buffer before it its shape: the
 * program's buffer has it, and a count that is not the shape's product is
 * refused naming the call. */
static void test_shape_call(void **st) {
  (void)st;
  schedrun_error_t err = {0};
  for (int bad = 0; bad < 2; bad++) {
    schedrun_builder_t *b;
    assert_int_equal(schedrun_builder_new(&b, "shaped", &err), SCHEDRUN_OK);
    schedrun_builder_buffer(b, "m", "i32", bad ? 5 : 6, NULL, 0, 0);
    const uint64_t dims[] = {2, 3};
    schedrun_builder_shape(b, dims, 2);
    schedrun_builder_fill(b, "m", "4", NULL, NULL);
    schedrun_program_t *p = NULL;
    int rc = schedrun_builder_finish(b, &p, &err);
    schedrun_builder_free(&b);
    if (bad) {
      assert_int_equal(rc, SCHEDRUN_ECONFIG);
      if (!strstr(err.message, "buffer 'm' has count 5 but shape [2, 3] holds 6 elements")) fail_msg("%s", err.message);
      schedrun_error_clear(&err);
      continue;
    }
    assert_int_equal(rc, SCHEDRUN_OK);
    const prog_program *pp = p->p;
    assert_int_equal(pp->buffers[0].ndims, 2);
    assert_true(pp->buffers[0].dims[0] == 2 && pp->buffers[0].dims[1] == 3 && pp->buffers[0].count == 6);
    /* the same through the public description of a program's buffers */
    assert_int_equal(schedrun_program_buffer_count(p), 1);
    schedrun_buffer_info_t bi;
    assert_int_equal(schedrun_program_buffer(p, 0, &bi), SCHEDRUN_OK);
    assert_string_equal(bi.name, "m");
    assert_string_equal(bi.type, "i32");
    assert_int_equal(bi.elem_size, 4);
    assert_int_equal(bi.count, 6);
    assert_int_equal(bi.ndims, 2);
    assert_true(bi.dims[0] == 2 && bi.dims[1] == 3);
    assert_int_equal(schedrun_program_buffer(p, 1, &bi), SCHEDRUN_EINVAL);
    assert_int_equal(schedrun_program_buffer(p, -1, &bi), SCHEDRUN_EINVAL);
    assert_int_equal(schedrun_program_buffer(p, 0, NULL), SCHEDRUN_EINVAL);
    assert_int_equal(schedrun_program_buffer(NULL, 0, &bi), SCHEDRUN_EINVAL);
    assert_int_equal(schedrun_program_buffer_count(NULL), 0);
    schedrun_program_free(&p);
  }
  /* a shape before any buffer, dims NULL, and flags the builder does not know */
  schedrun_builder_t *b = start("t");
  const uint64_t two[] = {2};
  schedrun_builder_shape(b, two, 1);
  char *e = finish_fails(b, SCHEDRUN_EINVAL);
  if (!strstr(e, "schedrun_builder_shape: no buffer was added before it")) fail_msg("%s", e);
  free(e);
  b = start("t");
  schedrun_builder_buffer(b, "m", "i32", 2, NULL, 0, 0);
  schedrun_builder_shape(b, NULL, 1);
  e = finish_fails(b, SCHEDRUN_EINVAL);
  if (!strstr(e, "schedrun_builder_shape: dims is NULL with 1 dimensions")) fail_msg("%s", e);
  free(e);
  b = start("t");
  schedrun_builder_buffer(b, "m", "i32", 2, NULL, 0, 8);
  e = finish_fails(b, SCHEDRUN_EINVAL);
  if (!strstr(e, "buffer 'm': unknown flags 0x8")) fail_msg("%s", e);
  free(e);
}

/* schedrun_builder_shared gives the launch before it its dynamic shared
 * memory; anywhere else, or past 48 KiB, is refused naming the call. */
static void test_shared_call(void **st) {
  (void)st;
  schedrun_error_t err = {0};
  const unsigned one[3] = {1, 1, 1};
  const char *args[] = {"m"};
  for (int bad = 0; bad < 2; bad++) {
    schedrun_builder_t *b = start("t");
    schedrun_builder_kernel(b, "k", "ptr", "extern \"C\" __global__ void k(int *m) { extern __shared__ int s[]; *m = 1; }",
                            NULL);
    schedrun_builder_buffer(b, "m", "i32", 2, NULL, 0, 0);
    schedrun_builder_launch(b, "k", one, one, args, 1);
    schedrun_builder_shared(b, bad ? 49153 : 4096);
    schedrun_program_t *p = NULL;
    int rc = schedrun_builder_finish(b, &p, &err);
    schedrun_builder_free(&b);
    if (bad) {
      assert_int_equal(rc, SCHEDRUN_ECONFIG);
      if (!strstr(err.message, "the dynamic shared memory of the launch before it") ||
          !strstr(err.message, "must be between 0 and 49152, not 49153"))
        fail_msg("%s", err.message);
      schedrun_error_clear(&err);
      continue;
    }
    assert_int_equal(rc, SCHEDRUN_OK);
    assert_int_equal(p->p->steps[0].u.launch.shared, 4096);
    schedrun_program_free(&p);
  }
  schedrun_builder_t *b = start("t");
  schedrun_builder_buffer(b, "m", "i32", 2, NULL, 0, 0);
  schedrun_builder_fill(b, "m", "4", NULL, NULL);
  schedrun_builder_shared(b, 16);
  char *e = finish_fails(b, SCHEDRUN_EINVAL);
  if (!strstr(e, "schedrun_builder_shared: the step added before it is not a launch")) fail_msg("%s", e);
  free(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_config_has_a_twin),
      cmocka_unit_test(test_twins_give_the_same_results),
      cmocka_unit_test(test_errors_name_the_call),
      cmocka_unit_test(test_memory_init_is_not_yaml),
      cmocka_unit_test(test_saxpy_example),
      cmocka_unit_test(test_shape_call),
      cmocka_unit_test(test_shared_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
