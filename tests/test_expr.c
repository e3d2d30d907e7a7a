/* Config expressions: parsing, precedence, integer vs float, errors. */
#include <string.h>

#include "program/program.h"
#include "test_util.h"

static prog_value ev(const char *text, int depth, const prog_env *env) {
  prog_expr e;
  char why[128];
  const char *bad = prog_expr_parse(text, depth, &e, why, sizeof why);
  if (bad) fail_msg("'%s': %s", text, bad);
  prog_value v;
  const char *eb = prog_expr_eval(&e, env, &v);
  if (eb) fail_msg("'%s': %s", text, eb);
  prog_expr_free(&e);
  return v;
}

static void test_arith(void **st) {
  (void)st;
  prog_env env = {{0}};
  env.v[EXV_ITER0] = 3;
  env.v[EXV_ITER0 + 1] = 5;
  env.v[EXV_JOB] = 7;
  env.v[EXV_DEVICE] = 1;
  env.v[EXV_RUN] = 2;
  struct { const char *t; int depth; bool is_int; double v; } cases[] = {
      {"42", 0, true, 42},
      {"1 + 2 * 3", 0, true, 7},
      {"(1 + 2) * 3", 0, true, 9},
      {"7 / 2", 0, true, 3},
      {"7 % 4", 0, true, 3},
      {"7.0 / 2", 0, false, 3.5},
      {"-3 + 1", 0, true, -2},
      {"1e-3 * 1000", 0, false, 1},
      {"$iter * 1024", 1, true, 3072},
      {"$iter + 1", 2, true, 6},
      {"$iter0 * 10 + $iter1", 2, true, 35},
      {"$job + $device * 100 + $run * 1000", 0, true, 2107},
      {"$iter * 0.5", 1, false, 1.5},
      {"--2", 0, true, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    prog_value v = ev(cases[i].t, cases[i].depth, &env);
    if (v.is_int != cases[i].is_int || prog_value_f(v) != cases[i].v)
      fail_msg("'%s' gave %s %g, expected %g", cases[i].t, v.is_int ? "int" : "float", prog_value_f(v),
               cases[i].v);
  }
}

static void test_errors(void **st) {
  (void)st;
  struct { const char *t; int depth; const char *needle; } cases[] = {
      {"$iter", 0, "outside"}, {"$iter2", 2, "$iter2"}, {"$nope", 0, "unknown variable"},
      {"1 +", 0, "ends"},      {"(1", 0, "')'"},        {"1 2", 0, "unexpected"},
      {"", 0, "ends"},         {"a", 0, "unexpected"},  {"99999999999999999999", 0, "too large"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    prog_expr e;
    char why[128];
    const char *bad = prog_expr_parse(cases[i].t, cases[i].depth, &e, why, sizeof why);
    if (!bad) fail_msg("'%s' parsed", cases[i].t);
    if (!strstr(bad, cases[i].needle)) fail_msg("'%s': '%s' lacks '%s'", cases[i].t, bad, cases[i].needle);
  }
  /* deep nesting is refused, not a stack overflow */
  char deep[600];
  memset(deep, '(', 300);
  deep[300] = '1';
  memset(deep + 301, ')', 298);
  deep[599] = '\0';
  prog_expr e;
  char why[128];
  assert_non_null(prog_expr_parse(deep, 0, &e, why, sizeof why));
  /* division by zero is an evaluation error */
  assert_null(prog_expr_parse("4 / ($job - $job)", 0, &e, why, sizeof why));
  prog_env env = {{0}};
  prog_value v;
  assert_non_null(prog_expr_eval(&e, &env, &v));
  prog_expr_free(&e);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_arith), cmocka_unit_test(test_errors)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
