/*
 * 64-bit integers stay exact: init values, fills and iotas of i64 and u64
 * buffers, expectations and integer kernel arguments at the ends of their
 * ranges and at 2^53 + 1 (where a double would round) go through a run and
 * come back bit for bit; expectations that differ only below a double's
 * precision fail; and values that do not fit their type are refused at load
 * with their place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/program.h"
#include "test_util.h"

static const char yaml_fmt[] =
    "version: 1\nname: ints\n"
    "kernels:\n  k:\n    params: [ptr, ptr, ptr, ptr, i64]\n    source: |\n"
    "      extern \"C\" __global__ void k(const long long *a, long long *b, const unsigned long long *c,\n"
    "                                   unsigned long long *d, long long x) {\n"
    "        for (int i = 0; i < 3; i++) { b[i] = a[i]; d[i] = c[i]; }\n"
    "        b[3] = x;\n"
    "        d[3] = c[3] + 1;\n"
    "      }\n"
    "buffers:\n"
    "  a: {type: i64, count: 3, init: {values: [9007199254740993, -9223372036854775808, 9223372036854775807]}}\n"
    "  b: {type: i64, count: 4, output: true}\n"
    "  c: {type: u64, count: 4, init: {values: [18446744073709551615, 9007199254740993, 0, 18446744073709551614]}}\n"
    "  d: {type: u64, count: 4, output: true}\n"
    "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [a, b, c, d, %s]}\n"
    "expect:\n"
    "  b: {values: [%s, -9223372036854775808, 9223372036854775807, %s]}\n"
    "  d: {values: [18446744073709551615, 9007199254740993, 0, 18446744073709551615]}\n";

/* Runs the program with argument `arg`, expecting b as `b0` and `b3`; returns
 * the job's status, with its outputs checked when it verified. */
static int run_with(const char *arg, const char *b0, const char *b3, char *why, size_t n) {
  char yaml[4096];
  snprintf(yaml, sizeof yaml, yaml_fmt, arg, b0, b3);
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  schedrun_t *s = tu_open(&o);
  schedrun_program_t *p = tu_load(s, yaml, "ints.yaml");
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.keep_outputs = 1;
  schedrun_job_t id;
  schedrun_job_result_t *r;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait(s, id, TU_PATIENCE_MS, &r, &err), SCHEDRUN_OK);
  int status = schedrun_job_result_info(r)->status;
  snprintf(why, n, "%s", schedrun_job_result_error(r));
  size_t bytes = 0;
  const int64_t *b = schedrun_job_result_output(r, "b", &bytes);
  assert_non_null(b);
  assert_int_equal(bytes, 4 * sizeof(int64_t));
  const uint64_t *d = schedrun_job_result_output(r, "d", &bytes);
  assert_non_null(d);
  /* whatever was expected, what ran is exact */
  assert_true(b[0] == 9007199254740993LL);
  assert_true(b[1] == INT64_MIN);
  assert_true(b[2] == INT64_MAX);
  assert_true(d[0] == UINT64_MAX);
  assert_true(d[1] == 9007199254740993ULL);
  assert_true(d[2] == 0);
  assert_true(d[3] == UINT64_MAX);
  if (!strcmp(arg, "9223372036854775807")) assert_true(b[3] == INT64_MAX);
  if (!strcmp(arg, "-9223372036854775808")) assert_true(b[3] == INT64_MIN);
  schedrun_job_result_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
  return status;
}

static void test_extremes_round_trip(void **st) {
  (void)st;
  char why[1024];
  int rc = run_with("9223372036854775807", "9007199254740993", "9223372036854775807", why, sizeof why);
  if (rc != SCHEDRUN_OK) fail_msg("%s", why);
  rc = run_with("-9223372036854775808", "9007199254740993", "-9223372036854775808", why, sizeof why);
  if (rc != SCHEDRUN_OK) fail_msg("%s", why);
}

/* 2^53 + 1 and 2^53 are the same double: an expectation of the one fails
 * against the other, and the message shows both exactly. */
static void test_below_double_precision_fails(void **st) {
  (void)st;
  char why[1024];
  int rc = run_with("1", "9007199254740992", "1", why, sizeof why);
  assert_int_equal(rc, SCHEDRUN_EVERIFY);
  if (!strstr(why, "expected 9007199254740992, got 9007199254740993")) fail_msg("%s", why);
}

static void expect_refused(const char *yaml, const char *where, const char *what) {
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(prog_load_string(yaml, strlen(yaml), "t.yaml", &p, &err), SCHEDRUN_ECONFIG);
  if (!strstr(err.message, where) || !strstr(err.message, what)) fail_msg("'%s' lacks '%s' or '%s'", err.message, where, what);
  schedrun_error_clear(&err);
}

#define ONE_BUFFER(B) \
  "version: 1\nkernels:\n  k:\n    params: [ptr, f32]\n    source: \"x\"\nbuffers:\n" B \
  "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [o, 1]}\n"

static void test_what_does_not_fit_is_refused(void **st) {
  (void)st;
  expect_refused(ONE_BUFFER("  o: {type: f32, count: 2, init: {fill: 1e40}}\n"), "t.yaml:7:",
                 "init values of buffer 'o' do not fit its type f32");
  expect_refused(ONE_BUFFER("  o: {type: f32, count: 2, init: {values: [1, 1e39]}}\n"), "t.yaml:7:",
                 "1e39 does not fit buffer 'o' of type f32");
  expect_refused(ONE_BUFFER("  o: {type: f64, count: 2, init: {values: [1e400]}}\n"), "t.yaml:7:",
                 "1e400 does not fit a double");
  expect_refused(ONE_BUFFER("  o: {type: i64, count: 2, init: {values: [9223372036854775808]}}\n"), "t.yaml:7:",
                 "9223372036854775808 does not fit buffer 'o' of type i64");
  expect_refused(ONE_BUFFER("  o: {type: u64, count: 2, init: {values: [18446744073709551616]}}\n"), "t.yaml:7:",
                 "above the largest 64-bit integer");
  expect_refused(ONE_BUFFER("  o: {type: u64, count: 2, init: {values: [-1]}}\n"), "t.yaml:7:",
                 "-1 does not fit buffer 'o' of type u64");
  expect_refused(ONE_BUFFER("  o: {type: i32, count: 2}\n") "expect:\n  o: {values: [1, 2147483648]}\n", "t.yaml:11:",
                 "2147483648 does not fit the buffer's type i32");
  expect_refused("version: 1\nkernels:\n  k:\n    params: [f32]\n    source: \"x\"\n"
                 "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [1e39]}\n",
                 "t.yaml:7:", "1e39 does not fit f32");
  /* an integer too large for 64 bits is out of range, not "not an integer" */
  expect_refused("version: 1\nrepeat: 99999999999999999999999\nkernels: {}\nprogram: []\n", "t.yaml:2:9:",
                 "repeat must be between 1 and 1000000, not 99999999999999999999999");
  /* an exact iota at the top of u64 */
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  const char *ok = ONE_BUFFER("  o: {type: u64, count: 3, init: {iota: {start: 18446744073709551613}}}\n");
  if (prog_load_string(ok, strlen(ok), "t.yaml", &p, &err)) fail_msg("%s", err.message);
  const uint64_t *v = (const uint64_t *)p->buffers[0].image;
  assert_true(v[0] == UINT64_MAX - 2 && v[1] == UINT64_MAX - 1 && v[2] == UINT64_MAX);
  prog_free(p);
  const char *over = ONE_BUFFER("  o: {type: u64, count: 4, init: {iota: {start: 18446744073709551613}}}\n");
  expect_refused(over, "t.yaml:7:", "init values of buffer 'o' do not fit its type u64");
}

/* A u64 argument takes the whole u64 range; a literal above INT64_MAX
 * stands alone (expressions compute in i64), only where a u64 is taken. */
static void test_u64_arguments(void **st) {
  (void)st;
  const char *yaml = "version: 1\nname: u64arg\n"
                     "kernels:\n  k:\n    params: [ptr, u64]\n    source: |\n"
                     "      extern \"C\" __global__ void k(unsigned long long *o, unsigned long long x) { o[0] = x; o[1] = x - 1; }\n"
                     "buffers:\n  o: {type: u64, count: 2}\n"
                     "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [o, 18446744073709551615]}\n"
                     "expect:\n  o: {values: [18446744073709551615, 18446744073709551614]}\n";
  tu_run_once(NULL, yaml, "u64.yaml", 1);
#define U64_PROGRAM(PARAM, ARG) \
  "version: 1\nkernels:\n  k:\n    params: [ptr, " PARAM "]\n    source: \"x\"\nbuffers:\n  o: {type: u64, count: 1}\n" \
  "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [o, " ARG "]}\n"
  expect_refused(U64_PROGRAM("i64", "18446744073709551615"), "t.yaml:9:",
                 "18446744073709551615 is above 9223372036854775807; only a u64 kernel argument can be");
  expect_refused(U64_PROGRAM("u64", "\"18446744073709551615 - 1\""), "t.yaml:9:",
                 "a larger literal can only stand alone");
  expect_refused(U64_PROGRAM("u64", "18446744073709551616"), "t.yaml:9:", "at most 18446744073709551615");
  expect_refused("version: 1\nkernels: {}\nbuffers:\n  o: {type: u64, count: 1}\n"
                 "program:\n  - fill: {buffer: o, value: 18446744073709551615}\n",
                 "t.yaml:6:", "only a u64 kernel argument can be");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_extremes_round_trip),
      cmocka_unit_test(test_below_double_precision_fails),
      cmocka_unit_test(test_what_does_not_fit_is_refused), cmocka_unit_test(test_u64_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
