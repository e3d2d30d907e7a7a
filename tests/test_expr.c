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

/* The operators beyond arithmetic, each against what C itself computes with
 * the same precedence (job 7, run 2, device 1, $iter 3). */
static void test_operators(void **st) {
  (void)st;
  prog_env env = {{0}};
  env.v[EXV_ITER0] = 3;
  env.v[EXV_JOB] = 7;
  env.v[EXV_DEVICE] = 1;
  env.v[EXV_RUN] = 2;
  const long long job = 7, run = 2, device = 1, iter = 3;
  struct { const char *t; long long want; } cases[] = {
      {"512 >> $job", 512 >> job},
      {"1 << $job + 1", 1LL << (job + 1)},
      {"$job << 2 >> 1", (job << 2) >> 1},
      {"$job & 3 | 8", (job & 3) | 8},
      {"$job ^ 5 & 6", job ^ (5 & 6)},
      {"$job | $run ^ $device & 3", job | (run ^ (device & 3))},
      {"~$job", ~job},
      {"~0 & 255", ~0 & 255},
      {"-$job >> 1", -job >> 1},
      {"-9 >> 1", -5},
      {"$job < 8", job < 8},
      {"$job <= 6", job <= 6},
      {"$job > $run", job > run},
      {"$job >= 7 == 1", (job >= 7) == 1},
      {"$run != 2", run != 2},
      {"1 + 2 == 3 & 5 < 6", ((1 + 2) == 3) & (5 < 6)},
      {"$job < 8 == $run < 3", (job < 8) == (run < 3)},
      {"min($job, $run)", run},
      {"max($job, 10 - $run * 2)", 7},
      {"min(max($iter, 5), 4) * 2", 8},
      {"$job > 5 ? 100 : 200", job > 5 ? 100 : 200},
      {"$job > 9 ? 100 : $run ? 30 : 40", job > 9 ? 100 : run ? 30 : 40},
      {"($job ? 1 : 2) + ($run == 0 ? 10 : 20)", 21},
      {"$device ? $iter << 4 : 0", device ? iter << 4 : 0},
      {"$job == 0 ? 0 : 700 / $job", 100}, /* the branch not taken is not evaluated */
      {"$job - 7 ? 1 / ($job - 7) : -1", -1},
      {"2.5 < 3", 1},
      {"max(1, 2.5) * 2", 5},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    prog_value v = ev(cases[i].t, 1, &env);
    if (prog_value_f(v) != (double)cases[i].want)
      fail_msg("'%s' gave %g, C gives %lld", cases[i].t, prog_value_f(v), cases[i].want);
  }
  /* evaluation errors */
  struct { const char *t; const char *needle; } bad[] = {
      {"1 << 64", "shift"}, {"1 >> -1", "shift"},          {"1 << 63", "overflow in <<"},
      {"3 << 62", "overflow"}, {"2.5 << 1", "non-integer"}, {"1 & 0.5", "non-integer"},
      {"~1.5", "non-integer"}, {"$job ? 1 / 0 : 1", "division by zero"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    prog_expr e;
    char why[400];
    assert_null(prog_expr_parse(bad[i].t, 0, &e, why, sizeof why));
    prog_value v;
    const char *wrong = prog_expr_eval(&e, &env, &v);
    if (!wrong || !strstr(wrong, bad[i].needle))
      fail_msg("'%s': %s, expected '%s'", bad[i].t, wrong ? wrong : "no error", bad[i].needle);
    prog_expr_free(&e);
  }
  /* parse errors point at the character at fault and list what is allowed */
  struct { const char *t; size_t at; const char *needle; } perr[] = {
      {"512 >>> $job", 6, "where a value was expected"}, {"1 ? 2", 5, "':'"},
      {"min(1 2)", 6, "','"},                              {"1 = 2", 2, "'='"},
      {"3 && 4", 3, "'&'"},                                {"max 1", 4, "'(' after max"},
  };
  for (size_t i = 0; i < sizeof perr / sizeof perr[0]; i++) {
    prog_expr e;
    char why[400];
    size_t at = 99;
    const char *wrong = prog_expr_parse_at(perr[i].t, 0, &e, why, sizeof why, &at);
    if (!wrong || !strstr(wrong, perr[i].needle) || at != perr[i].at)
      fail_msg("'%s': '%s' at %zu, expected '%s' at %zu", perr[i].t, wrong ? wrong : "parsed", at, perr[i].needle,
               perr[i].at);
  }
  prog_expr e;
  char why[400];
  const char *wrong = prog_expr_parse("1 +", 0, &e, why, sizeof why);
  assert_non_null(wrong);
  assert_non_null(strstr(wrong, "<< >>, < <= > >=, == !=, &, ^, |, c ? a : b"));
  assert_non_null(strstr(wrong, "min(a, b)"));
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
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_arith),
      cmocka_unit_test(test_operators), cmocka_unit_test(test_errors)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
