/* Verification exactly as docs/config.md states it: an element (or the sum)
 * passes when |got - want| <= tol + rtol * |want|, with tol and rtol as
 * given, 1e-5 each for floating-point buffers that give neither, exact for
 * integer ones. Each bound is checked at its edge and just past it, on
 * values that floating point holds exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "program/program.h"
#include "test_util.h"

/* A program with buffer x of 4 `type` elements and the expectation `expect`
 * on it (a flow mapping's contents). */
static prog_program *with_expect(const char *type, const char *expect) {
  char text[512];
  snprintf(text, sizeof text,
           "version: 1\nbuffers:\n  x: {type: %s, count: 4}\nprogram:\n  - fill: {buffer: x, value: 0}\n"
           "expect:\n  x: {%s}\n",
           type, expect);
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  if (prog_load_string(text, strlen(text), "t.yaml", &p, &err)) fail_msg("%s\n%s", text, err.message);
  return p;
}

/* Whether f32 contents v[4] pass `expect`. */
static bool passes_f32(const char *expect, const float v[4]) {
  prog_program *p = with_expect("f32", expect);
  prog_env env = {{0}};
  strbuf why;
  sb_init(&why);
  bool ok = prog_verify_buffer(p, 0, v, 4 * sizeof(float), &env, &why);
  if (ok != (why.len == 0)) fail_msg("%s: verified %d but said '%s'", expect, ok, why.data ? why.data : "");
  sb_free(&why);
  prog_free(p);
  return ok;
}

static bool sum_passes(const char *expect, float total) {
  const float v[4] = {total, 0, 0, 0};
  return passes_f32(expect, v);
}

/* tol is absolute: the example the old relative check let through fails */
static void test_tol_is_absolute(void **st) {
  (void)st;
  assert_false(sum_passes("sum: 1009, tol: 0.01", 1000.0f));
  assert_true(sum_passes("sum: 1009, tol: 9", 1000.0f));        /* at the bound */
  assert_false(sum_passes("sum: 1009, tol: 8.9990234375", 1000.0f)); /* just under the difference: 9 - 2^-10 */
  assert_true(sum_passes("sum: 1000, tol: 0", 1000.0f));
  assert_false(sum_passes("sum: 1000, tol: 0", 1000.0625f));
}

/* rtol is relative to |want|: 2^-7 of 1024 is 8 */
static void test_rtol_is_relative(void **st) {
  (void)st;
  assert_true(sum_passes("sum: 1024, rtol: 0.0078125", 1032.0f));
  assert_false(sum_passes("sum: 1024, rtol: 0.0078125", 1032.0625f));
  assert_true(sum_passes("sum: 1024, rtol: 0.0078125", 1016.0f));
  assert_false(sum_passes("sum: 1024, rtol: 0.0078125", 1015.9375f));
  /* relative to want, not to max(1, |want|): near zero it allows almost nothing */
  assert_false(sum_passes("sum: 0.0078125, rtol: 0.5", 0.015625f));
  assert_true(sum_passes("sum: 0.0078125, rtol: 1", 0.015625f));
}

/* both together add up: 1 + 2^-7 * 1024 = 9 */
static void test_tol_and_rtol_add(void **st) {
  (void)st;
  assert_true(sum_passes("sum: 1024, tol: 1, rtol: 0.0078125", 1033.0f));
  assert_false(sum_passes("sum: 1024, tol: 1, rtol: 0.0078125", 1033.0625f));
  /* either alone leaves the other at 0 */
  assert_false(sum_passes("sum: 1024, tol: 1", 1033.0f));
  assert_false(sum_passes("sum: 1024, rtol: 0.0078125", 1033.0f));
}

/* every element by the same rule, the first bad one named */
static void test_elements(void **st) {
  (void)st;
  const float v[4] = {1.0f, 2.0f, 3.25f, 4.0f};
  assert_true(passes_f32("values: [1, 2, 3, 4], tol: 0.25", v));
  assert_false(passes_f32("values: [1, 2, 3, 4], tol: 0.125", v));
  assert_true(passes_f32("at: {3: 4.5}, rtol: 0.125", v)); /* 0.5 <= 0.5625 */
  assert_false(passes_f32("at: {3: 4.5}, rtol: 0.0625", v)); /* 0.5 > 0.28125 */
  prog_program *p = with_expect("f32", "values: [1, 2, 3, 4], tol: 0.125");
  prog_env env = {{0}};
  strbuf why;
  sb_init(&why);
  assert_false(prog_verify_buffer(p, 0, v, sizeof v, &env, &why));
  assert_non_null(strstr(why.data, "buffer x[2]: expected 3, got 3.25"));
  sb_free(&why);
  prog_free(p);
}

/* the defaults: 1e-5 absolute and 1e-5 relative for floats, exact for integers */
static void test_defaults(void **st) {
  (void)st;
  assert_true(sum_passes("sum: 100000", 100001.0f));  /* 1e-5 + 1e-5 * 1e5 = 1.00001 */
  assert_false(sum_passes("sum: 100000", 100002.0f));
  assert_true(sum_passes("sum: 0", 0.0000095f));
  assert_false(sum_passes("sum: 0", 0.0000105f));
  prog_program *p = with_expect("i32", "values: [7, 7, 7, 7]");
  const int32_t iv[4] = {7, 7, 7, 8};
  prog_env env = {{0}};
  strbuf why;
  sb_init(&why);
  assert_false(prog_verify_buffer(p, 0, iv, sizeof iv, &env, &why));
  sb_free(&why);
  prog_free(p);
  /* NaN matches nothing, however loose */
  const float nan4[4] = {NAN, 0, 0, 0};
  assert_false(passes_f32("at: {0: 0}, tol: 1000000", nan4));
}

/* A buffer with a shape names a bad element by its index in every
 * dimension, an integer one and a floating-point one alike; a flat index
 * and a [row, col] one name the same element. */
static void test_shaped_mismatch_named(void **st) {
  (void)st;
  static const char *const types[] = {"i32", "f32"};
  for (int t = 0; t < 2; t++) {
    char text[512];
    snprintf(text, sizeof text,
             "version: 1\nbuffers:\n  m: {type: %s, shape: [2, 3, 4]}\nprogram:\n  - fill: {buffer: m, value: 0}\n"
             "expect:\n  m: {at: {[1, 2, 3]: 7, 3: 0}}\n",
             types[t]);
    prog_program *p = NULL;
    schedrun_error_t err = {0};
    if (prog_load_string(text, strlen(text), "t.yaml", &p, &err)) fail_msg("%s", err.message);
    assert_int_equal(p->buffers[0].count, 24);
    assert_int_equal(p->buffers[0].ndims, 3);
    int32_t iv[24] = {0};
    float fv[24] = {0};
    iv[23] = 7;
    fv[23] = 7;
    prog_env env = {{0}};
    strbuf why;
    sb_init(&why);
    assert_true(prog_verify_buffer(p, 0, t ? (const void *)fv : iv, sizeof iv, &env, &why)); /* [1, 2, 3] is 23 */
    iv[23] = 6;
    fv[23] = 6;
    iv[3] = fv[3] = 0;
    assert_false(prog_verify_buffer(p, 0, t ? (const void *)fv : iv, sizeof iv, &env, &why));
    if (!strstr(why.data, "buffer m[1, 2, 3]: expected 7, got 6")) fail_msg("%s: %s", types[t], why.data);
    sb_free(&why);
    prog_free(p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shaped_mismatch_named),
      cmocka_unit_test(test_tol_is_absolute), cmocka_unit_test(test_rtol_is_relative),
      cmocka_unit_test(test_tol_and_rtol_add), cmocka_unit_test(test_elements),
      cmocka_unit_test(test_defaults),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
