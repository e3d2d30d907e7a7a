/*
 * Autotuned launches whose candidates include values of named kernel
 * constants (`autotune: {constants: {PER: [1, 4, 16]}}`): the loader's
 * variants (one kernel per combination, the base kernel left uncompiled),
 * the grid read per combination ($PER), the choice of the fastest
 * combination on a host device, kept in the kernel cache, the builder's way
 * to say it, and the lists it refuses, each at its place.
 *
 * Each thread handles PER elements with (16 / PER)^2 * 16 steps of work per
 * element, so PER 16 is 16 times faster than PER 4 and 256 times faster
 * than PER 1 on any machine, however busy; every combination computes the
 * same out[i] = i, which the expectations check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/program.h"
#include "test_util.h"

#define SOURCE                                                                            \
  "extern \"C\" __global__ void work(const float *in, float *out, int n) {\n"             \
  "  int t = blockIdx.x * blockDim.x + threadIdx.x;\n"                                    \
  "  unsigned r = 16u / PER, k = r * r * 16;\n"                                           \
  "  for (int e = 0; e < PER; e++) {\n"                                                   \
  "    int i = t * PER + e;\n"                                                            \
  "    if (i >= n) return;\n"                                                             \
  "    float acc = 0.0f;\n"                                                               \
  "    for (unsigned j = 0; j < k; j++) acc += in[(i + j) % n];\n"                        \
  "    out[i] = (float)i + acc;\n"                                                        \
  "  }\n"                                                                                 \
  "}\n"

static const char tuned[] =
    "version: 1\nname: per\njobs: 2\n"
    "kernels:\n"
    "  work:\n"
    "    params: [ptr, ptr, i32]\n"
    "    source: |\n"
    "      extern \"C\" __global__ void work(const float *in, float *out, int n) {\n"
    "        int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        unsigned r = 16u / PER, k = r * r * 16;\n"
    "        for (int e = 0; e < PER; e++) {\n"
    "          int i = t * PER + e;\n"
    "          if (i >= n) return;\n"
    "          float acc = 0.0f;\n"
    "          for (unsigned j = 0; j < k; j++) acc += in[(i + j) % n];\n"
    "          out[i] = (float)i + acc;\n"
    "        }\n"
    "      }\n"
    "buffers:\n"
    "  in:  {type: f32, count: 4096}\n"
    "  out: {type: f32, count: 4096}\n"
    "program:\n"
    "  - launch:\n"
    "      kernel: work\n"
    "      args: [in, out, 4096]\n"
    "      autotune:\n"
    "        block: [64, 256]\n"
    "        constants: {PER: [1, 4, 16]}\n"
    "        grid: \"(4096 / $PER + $block - 1) / $block\"\n"
    "expect:\n"
    "  out: {at: {0: 0, 1: 1, 4095: 4095}, sum: 8386560}\n";

static void test_variants_and_grids(void **st) {
  (void)st;
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  if (prog_load_string(tuned, strlen(tuned), "t.yaml", &p, &err) != SCHEDRUN_OK) fail_msg("%s", err.message);
  /* the kernel, and one variant per value, the base left to its variants */
  assert_int_equal(p->nkernels, 4);
  assert_true(p->kernels[0].variants_only);
  static const char *const names[] = {"work[PER=1]", "work[PER=4]", "work[PER=16]"};
  for (int v = 0; v < 3; v++) {
    const prog_kernel *k = &p->kernels[1 + v];
    assert_string_equal(k->name, names[v]);
    assert_string_equal(k->entry, "work");
    assert_false(k->variants_only);
    char def[32];
    snprintf(def, sizeof def, "#define PER %d\n#line 8\n", v == 0 ? 1 : v == 1 ? 4 : 16);
    if (strncmp(k->source, def, strlen(def)) != 0) fail_msg("variant %s starts: %.40s", k->name, k->source);
    assert_string_equal(k->source + strlen(def), p->kernels[0].source);
  }
  /* six candidates: each block with each value; each grid its own */
  const prog_tune *t = p->steps[0].u.launch.tune;
  assert_int_equal(t->nblocks, 6);
  assert_int_equal(t->ncombos, 3);
  static const unsigned per[] = {1, 4, 16}, block[] = {64, 256};
  for (unsigned i = 0; i < 6; i++) {
    unsigned c = i / 2, b = i % 2;
    assert_int_equal(t->blocks[i][0], block[b]);
    assert_int_equal(t->kernels[i], 1 + c);
    assert_int_equal(t->combo[i], c);
    prog_env env = {{0}};
    env.v[EXV_BLOCK] = block[b];
    prog_value v;
    assert_null(prog_expr_eval(&t->grid[c][0], &env, &v));
    assert_int_equal(v.i, (4096 / per[c] + block[b] - 1) / block[b]);
  }
  assert_string_equal(t->constants[2], "PER=16");
  prog_free(p);
}

static void load_fails(const char *autotune, const char *where, const char *needle) {
  char text[4096];
  snprintf(text, sizeof text,
           "version: 1\nname: bad\nkernels:\n  work: {params: [ptr, ptr, i32], source: 'extern \"C\" __global__ "
           "void work(const float *in, float *out, int n) {}'}\nbuffers:\n  in: {type: f32, count: 16}\n  out: "
           "{type: f32, count: 16}\nprogram:\n  - launch:\n      kernel: work\n      args: [in, out, 16]\n"
           "      autotune:\n        block: [64, 128]\n        grid: \"$PER\"\n%s",
           autotune);
  tu_config_fails(text, "c.yaml", where, needle);
}

static void test_bad_constants(void **st) {
  (void)st;
  /* line 15 is "constants:" */
  load_fails("        constants: [PER]\n", "c.yaml:15:20", "autotune constants must be a mapping");
  load_fails("        constants: {PER: []}\n", "c.yaml:15:26", "autotune constant 'PER' needs a list of 1 to 16");
  load_fails("        constants: {PER: 4}\n", "c.yaml:15:26", "autotune constant 'PER' needs a list");
  load_fails("        constants: {2PER: [1]}\n", "c.yaml:15:21", "autotune constant '2PER' is not a name");
  load_fails("        constants: {block: [1]}\n", "c.yaml:15:21", "autotune constant 'block' is not a name");
  load_fails("        constants: {PER: [1, 2, 1]}\n", "c.yaml:15:33", "autotune constant 'PER' lists 1 twice");
  load_fails("        constants: {PER: [1, x]}\n", "c.yaml:15:30", "autotune constant 'PER'");
  load_fails("        constants: {PER: [1, 2, 3, 4, 5, 6, 7, 8, 9]}\n", "c.yaml:15:20",
             "autotune has 18 candidates (2 blocks times 9 combinations of constants); at most 16");
  load_fails("        constants: {PER: [1, 2, 3, 4, 5], Q: [1, 2, 3, 4]}\n", "c.yaml:15:20",
             "autotune constants make 20 combinations of values; at most 16");
  load_fails("        constants: {PERX: [1]}\n", "c.yaml:14:16", "unknown variable $PER");
  load_fails("        constants: {A: [1], B: [1], C: [1], D: [1], E: [1]}\n", "c.yaml:15:53",
             "autotune names more than 4 constants");
}

/* Runs p (verified) on a fresh scheduler over `cache`; its one choice. */
static void run_one(const char *cache, schedrun_program_t *p, int jobs, schedrun_tune_info_t *t) {
  schedrun_t *s = tu_open_tuning(cache, 0);
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  if (schedrun_run(s, p, NULL, &r, &err) != SCHEDRUN_OK) fail_msg("run: %s", err.message);
  assert_int_equal(schedrun_report_summary(r)->verified, jobs);
  assert_int_equal(schedrun_tune_count(s), 1);
  assert_int_equal(schedrun_tune_get(s, 0, t, &err), SCHEDRUN_OK);
  schedrun_report_free(&r);
  schedrun_close(&s);
}

static void test_picks_the_fastest_value(void **st) {
  (void)st;
  char cache[512];
  snprintf(cache, sizeof cache, "%s", tu_fresh_dir("constants"));
  schedrun_t *s = tu_open_tuning(cache, 0);
  schedrun_program_t *p = tu_load(s, tuned, "per.yaml");
  schedrun_close(&s);
  schedrun_tune_info_t t;
  run_one(cache, p, 2, &t);
  assert_int_equal(t.timed, 1);
  assert_int_equal(t.ncandidates, 6);
  unsigned fastest = 0;
  for (unsigned c = 0; c < 6; c++) {
    static const char *const per[] = {"PER=1", "PER=4", "PER=16"};
    assert_string_equal(t.candidate_constants[c], per[c / 2]);
    assert_true(t.candidate_ns[c] > 0);
    if (t.candidate_ns[c] < t.candidate_ns[fastest]) fastest = c;
  }
  print_message("PER=1: %llu / %llu ns, PER=4: %llu / %llu, PER=16: %llu / %llu\n",
                (unsigned long long)t.candidate_ns[0], (unsigned long long)t.candidate_ns[1],
                (unsigned long long)t.candidate_ns[2], (unsigned long long)t.candidate_ns[3],
                (unsigned long long)t.candidate_ns[4], (unsigned long long)t.candidate_ns[5]);
  assert_true(fastest >= 4); /* PER=16, with either block */
  assert_string_equal(t.constants, "PER=16");
  assert_int_equal(t.block[0], fastest == 4 ? 64 : 256);
  assert_int_equal(t.grid[0], (256 + t.block[0] - 1) / t.block[0]);
  /* a later scheduler takes the whole choice, constants too, untimed */
  schedrun_tune_info_t again;
  run_one(cache, p, 2, &again);
  assert_int_equal(again.timed, 0);
  assert_string_equal(again.constants, "PER=16");
  assert_int_equal(again.block[0], t.block[0]);
  schedrun_program_free(&p);
}

/* The builder says the same with schedrun_builder_autotune_constant. */
static void test_builder_constants(void **st) {
  (void)st;
  char cache[512];
  snprintf(cache, sizeof cache, "%s", tu_fresh_dir("constants"));
  static const unsigned blocks[1][3] = {{128, 1, 1}};
  static const long long per[] = {1, 16};
  const char *args[] = {"in", "out", "4096"};
  schedrun_builder_t *b;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_builder_new(&b, "built", &err), SCHEDRUN_OK);
  schedrun_builder_kernel(b, "work", "ptr, ptr, i32", SOURCE, NULL);
  schedrun_builder_buffer(b, "in", "f32", 4096, NULL, 0, 0);
  schedrun_builder_buffer(b, "out", "f32", 4096, NULL, 0, 0);
  schedrun_builder_launch_autotune(b, "work", blocks, 1, "(4096 / $PER + $block - 1) / $block", NULL, 0, args, 3);
  schedrun_builder_autotune_constant(b, "PER", per, 2);
  static const uint64_t at[] = {0, 1, 4095};
  static const char *const want[] = {"0", "1", "4095"};
  schedrun_builder_expect_at(b, "out", at, want, 3, NULL, 0);
  schedrun_program_t *p = NULL;
  if (schedrun_builder_finish(b, &p, &err) != SCHEDRUN_OK) fail_msg("finish: %s", err.message);
  schedrun_builder_free(&b);
  schedrun_tune_info_t t;
  run_one(cache, p, 1, &t);
  assert_int_equal(t.ncandidates, 2);
  assert_string_equal(t.constants, "PER=16");
  schedrun_program_free(&p);

  /* a constant with no autotuned launch before it: refused, naming the call */
  assert_int_equal(schedrun_builder_new(&b, "misused", &err), SCHEDRUN_OK);
  schedrun_builder_kernel(b, "work", "ptr, ptr, i32", SOURCE, NULL);
  schedrun_builder_buffer(b, "in", "f32", 16, NULL, 0, 0);
  schedrun_builder_buffer(b, "out", "f32", 16, NULL, 0, 0);
  static const unsigned grid[3] = {1, 1, 1}, block[3] = {16, 1, 1};
  schedrun_builder_launch(b, "work", grid, block, args, 3);
  schedrun_builder_autotune_constant(b, "PER", per, 2);
  assert_int_equal(schedrun_builder_finish(b, &p, &err), SCHEDRUN_EINVAL);
  assert_non_null(
      strstr(err.message, "schedrun_builder_autotune_constant: the step added before it is not an autotuned launch"));
  schedrun_error_clear(&err);
  schedrun_builder_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_variants_and_grids),
      cmocka_unit_test(test_bad_constants),
      cmocka_unit_test(test_picks_the_fastest_value),
      cmocka_unit_test(test_builder_constants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
