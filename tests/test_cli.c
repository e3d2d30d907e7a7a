/* sched-run as a user meets it: exit statuses and what it prints, for every
 * shipped config and for each kind of bad input. Also runs examples/embed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static int run_cli(const char *a1, const char *a2, const char *a3, char **out, char **err) {
  char *argv[] = {(char *)tu_env("SCHED_RUN"), (char *)a1, (char *)a2, (char *)a3, NULL};
  return tu_run(argv, out, err);
}

static void test_every_config_verifies(void **st) {
  (void)st;
  const char *dir = tu_env("SCHED_CONFIGS");
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".yaml")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    char *out, *err;
    int rc = run_cli(path, NULL, NULL, &out, &err);
    if (rc != 0 || !strstr(out, ": verified on ") || !strstr(out, " 0 failed"))
      fail_msg("%s: exit %d\n%s%s", e->d_name, rc, out, err);
    free(out);
    free(err);
    n++;
  }
  closedir(d);
  assert_true(n >= 3);
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
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHED_CONFIGS"));
  assert_int_equal(run_cli("--devices", "host:99", path, &out, &err), 2);
  assert_non_null(strstr(err, "host:99"));
  free(out);
  free(err);
  /* overrides: 2 runs on 3 host devices */
  char *argv[] = {(char *)tu_env("SCHED_RUN"), "--devices", "host:3", "--repeat", "5", "--stats", path, NULL};
  assert_int_equal(tu_run(argv, &out, &err), 0);
  assert_non_null(strstr(out, "runs 5, 5 jobs in all: 5 verified, 0 failed"));
  assert_non_null(strstr(out, "host:2"));
  free(out);
  free(err);
}

static void test_embed_example(void **st) {
  (void)st;
  char *argv[] = {(char *)tu_env("SCHED_EMBED"), NULL};
  char *out, *err;
  int rc = tu_run(argv, &out, &err);
  if (rc != 0) fail_msg("embed: %d\n%s%s", rc, out, err);
  assert_non_null(strstr(out, "embed: 2 runs verified; v[10] = 30"));
  free(out);
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_config_verifies), cmocka_unit_test(test_five_mistakes_exit_2),
      cmocka_unit_test(test_compile_error_exit_3),  cmocka_unit_test(test_wrong_expect_exit_1),
      cmocka_unit_test(test_usage),                 cmocka_unit_test(test_embed_example),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
