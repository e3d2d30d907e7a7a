/*
 * Hostile and careless inputs to sched-run: each gets a clear error naming
 * what and where, the right exit status, and nothing replaced or left behind.
 * Output files never replace a device, a link or a directory; input files must
 * be regular and bounded; expressions are checked 64-bit arithmetic; CUDA's
 * grid and block limits hold on every backend; nesting is bounded before
 * libyaml sees it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"

#include "test_util.h"

static int run(char **out, char **err, const char *a1, const char *a2, const char *a3, const char *a4) {
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
  return tu_run(argv, out, err);
}

/* Runs sched-run on a config text; checks the exit status and that stderr
 * holds every needle. */
static void expect_run(const char *yaml, int status, const char *n1, const char *n2) {
  const char *cfg = tu_write_temp(0, "in.yaml", yaml);
  char *out, *err;
  uint64_t t0 = now_ns();
  int rc = run(&out, &err, "-q", cfg, NULL, NULL);
  uint64_t took = now_ns() - t0;
  if (rc != status || (n1 && !strstr(err, n1)) || (n2 && !strstr(err, n2)))
    fail_msg("exit %d (wanted %d), wanted '%s' and '%s' in:\n%s%s", rc, status, n1 ? n1 : "", n2 ? n2 : "", out, err);
  assert_true(took < TU_PATIENCE_NS); /* never a hang */
  free(out);
  free(err);
}

static const char head[] = "version: 1\n"
                           "devices: host\n"
                           "kernels:\n"
                           "  k:\n"
                           "    params: [ptr, i32]\n"
                           "    source: |\n"
                           "      extern \"C\" __global__ void k(int *o, int v) { o[threadIdx.x] = v; }\n"
                           "buffers:\n"
                           "  o: {type: i32, count: 64}\n";

static char *with_program(const char *program) {
  char *y = NULL;
  assert_true(asprintf(&y, "%sprogram:\n%s", head, program) > 0);
  return y;
}

static void test_expressions_overflow(void **st) {
  (void)st;
  /* at load: located, exit 2 */
  char *y = with_program("  - launch: {kernel: k, grid: 1, block: 1, args: [o, \"-(-9223372036854775807 - 1)\"]}\n");
  expect_run(y, 2, "in.yaml:11:54: ", "integer overflow in unary -");
  free(y);
  y = with_program("  - launch: {kernel: k, grid: 1, block: 1, args: [o, \"9223372036854775807 + 1\"]}\n");
  expect_run(y, 2, "in.yaml:11:54: ", "integer overflow in +");
  free(y);
  y = with_program("  - launch: {kernel: k, grid: 1, block: 1, args: [o, \"7 / (3 - 3)\"]}\n");
  expect_run(y, 2, "in.yaml:11:54: ", "division by zero");
  free(y);
  /* at record time: the job fails with the step's place */
  y = with_program("  - launch: {kernel: k, grid: 1, block: 1, args: [o, \"-($job - 9223372036854775807 - 1)\"]}\n");
  expect_run(y, 2, "in.yaml:11:5: ", "integer overflow in unary -");
  free(y);
}

static void test_launch_limits(void **st) {
  (void)st;
  char *y = with_program("  - launch: {kernel: k, grid: [2147483647, 2147483647, 2147483647], block: 1, args: [o, 1]}\n");
  expect_run(y, 2, "in.yaml:11:31: ", "y and z at most 65535");
  free(y);
  y = with_program("  - launch: {kernel: k, grid: 1, block: [1, 1, 128], args: [o, 1]}\n");
  expect_run(y, 2, "in.yaml:11:41: ", "z at most 64");
  free(y);
  /* more than 64 params, and an entry too long to be a name */
  char params[1024] = "";
  for (int i = 0; i < 65; i++) strcat(params, i ? ", i32" : "i32");
  char *big = NULL;
  assert_true(asprintf(&big, "version: 1\nkernels:\n  k:\n    params: [%s]\n    source: \"x\"\nprogram: []\n", params) > 0);
  expect_run(big, 2, "in.yaml:4:13: ", "kernel 'k' has 65 params; at most 64");
  free(big);
  char entry[300];
  memset(entry, 'e', 299);
  entry[299] = '\0';
  assert_true(asprintf(&big, "version: 1\nkernels:\n  k:\n    params: []\n    entry: %s\n    source: \"x\"\nprogram: []\n",
                       entry) > 0);
  expect_run(big, 2, "in.yaml:5:12: ", "has 299 characters; at most 128");
  free(big);
  /* repeat x jobs past the bound is the command line's error */
  const char *cfg = tu_write_temp(1, "ok.yaml", "version: 1\nprogram:\n  - fill: {buffer: o, value: 1}\nbuffers:\n  o: {type: i32, count: 4}\n");
  char *out, *err;
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "-q", "--repeat", "100000", "--jobs", "1000", (char *)cfg, NULL};
  int rc = tu_run(argv, &out, &err);
  if (rc != 2 || !strstr(err, "at most 10,000,000 jobs")) fail_msg("exit %d\n%s%s", rc, out, err);
  free(out);
  free(err);
}

static void test_deep_nesting_refused(void **st) {
  (void)st;
  size_t n = 100000;
  char *y = malloc(n * 2 + 64);
  assert_non_null(y);
  strcpy(y, "version: 1\nprogram: ");
  size_t at = strlen(y);
  for (size_t i = 0; i < n; i++) y[at++] = '[';
  for (size_t i = 0; i < n; i++) y[at++] = ']';
  y[at++] = '\n';
  y[at] = '\0';
  expect_run(y, 2, "in.yaml:2:74: ", "collections nest more than 64 deep");
  free(y);
}

static void test_input_files(void **st) {
  (void)st;
  /* a kernel file that never ends, a directory, a FIFO: refused at once */
  const char *specials[] = {"/dev/zero", "/tmp", NULL};
  const char *why[] = {"is not a regular file", "is a directory"};
  for (int i = 0; specials[i]; i++) {
    char *y = NULL;
    assert_true(asprintf(&y, "version: 1\nkernels:\n  k:\n    params: []\n    file: %s\nprogram: []\n", specials[i]) > 0);
    expect_run(y, 2, "in.yaml:5:11: ", why[i]);
    free(y);
    assert_true(asprintf(&y, "version: 1\nbuffers:\n  b: {type: u8, count: 4, init: {file: %s}}\nprogram: []\n",
                         specials[i]) > 0);
    expect_run(y, 2, "in.yaml:3:40: ", why[i]);
    free(y);
  }
  /* a directory given as the config says so */
  char *out, *err;
  int rc = run(&out, &err, "/tmp", NULL, NULL, NULL);
  if (rc != 2 || !strstr(err, "/tmp: is a directory")) fail_msg("exit %d\n%s", rc, err);
  free(out);
  free(err);
}

static void test_trips_loop_inside_while_body(void **st) {
  (void)st;
  expect_run("version: 1\n"
             "devices: host\n"
             "kernels:\n"
             "  tick:\n"
             "    params: [ptr]\n"
             "    source: |\n"
             "      extern \"C\" __global__ void tick(int *f) { f[0] -= 1; }\n"
             "  put:\n"
             "    params: [ptr, i32]\n"
             "    source: |\n"
             "      extern \"C\" __global__ void put(int *o, int v) { o[v] += v + 1; }\n"
             "buffers:\n"
             "  flag: {type: i32, count: 1, init: {values: [3]}}\n"
             "  o: {type: i32, count: 4}\n"
             "program:\n"
             "  - loop:\n"
             "      while: {buffer: flag, index: 0}\n"
             "      max_trips: 10\n"
             "      body:\n"
             "        - loop:\n"
             "            trips: 4\n"
             "            body:\n"
             "              - launch: {kernel: put, grid: 1, block: 1, args: [o, \"$iter\"]}\n"
             "        - launch: {kernel: tick, grid: 1, block: 1, args: [flag]}\n"
             "expect:\n"
             "  o: {values: [3, 6, 9, 12]}\n"
             "  flag: {values: [0]}\n",
             0, NULL, NULL);
}

/* --trace never replaces what is at its path: a device stays a device, a
 * link stays a link (its target gets the trace), a directory is refused, and
 * "-" is standard output. */
static void test_trace_destinations(void **st) {
  (void)st;
  char cfg[512];
  snprintf(cfg, sizeof cfg, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  char *out, *err;
  struct stat sb;
  int rc = run(&out, &err, "-q", "--trace", "/dev/null", cfg);
  assert_int_equal(rc, 0);
  assert_int_equal(stat("/dev/null", &sb), 0);
  assert_true(S_ISCHR(sb.st_mode));
  free(out);
  free(err);

  const char *target = tu_write_temp(2, "target.json", "old");
  char *dir = fs_dirname(target), link[600];
  snprintf(link, sizeof link, "%s/link.json", dir);
  unlink(link);
  assert_int_equal(symlink(target, link), 0);
  rc = run(&out, &err, "-q", "--trace", link, cfg);
  assert_int_equal(rc, 0);
  assert_int_equal(lstat(link, &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));
  char *t;
  size_t len;
  schedrun_error_t e = {0};
  assert_int_equal(fs_read_file(target, &t, &len, &e), SCHEDRUN_OK);
  assert_non_null(strstr(t, "traceEvents"));
  free(t);
  free(out);
  free(err);

  rc = run(&out, &err, "-q", "--trace", dir, cfg);
  if (rc != 2 || !strstr(err, "is a directory") || !strstr(err, "nothing was run")) fail_msg("exit %d\n%s", rc, err);
  free(out);
  free(err);
  free(dir);

  rc = run(&out, &err, "-q", "--trace", "-", cfg);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "\"traceEvents\""));
  free(out);
  free(err);
}

/* Runs sched-run on saxpy with SCHEDRUN_CACHE_DIR set to dir. */
static int run_with_cache(const char *dir, char **out, char **err) {
  char cfg[512];
  snprintf(cfg, sizeof cfg, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  char *old = getenv("SCHEDRUN_CACHE_DIR") ? xstrdup(getenv("SCHEDRUN_CACHE_DIR")) : NULL;
  setenv("SCHEDRUN_CACHE_DIR", dir, 1);
  int rc = run(out, err, "-q", cfg, NULL, NULL);
  if (old) setenv("SCHEDRUN_CACHE_DIR", old, 1);
  free(old);
  return rc;
}

/* Cache and disk failures are not compile errors: exit 4, the path named. A
 * long cache path works (no fixed buffer truncates it). */
static void test_cache_paths(void **st) {
  (void)st;
  const char *file = tu_write_temp(2, "not-a-dir", "x");
  char *out, *err;
  int rc = run_with_cache(file, &out, &err);
  if (rc != 4 || !strstr(err, file) || !strstr(err, "is not a directory"))
    fail_msg("cache path that is a file: exit %d\n%s", rc, err);
  free(out);
  free(err);

  char *dir = fs_dirname(file), longp[1400];
  int n = snprintf(longp, sizeof longp, "%s/", dir);
  free(dir);
  while (n < 1200) n += snprintf(longp + n, sizeof longp - (size_t)n, "deep-directory-name-%d/", n);
  rc = run_with_cache(longp, &out, &err);
  if (rc != 0) fail_msg("a %d-character cache path: exit %d\n%s", n, rc, err);
  free(out);
  free(err);
}

/* A full disk under the cache is the disk's failure (exit 4, naming it),
 * not "kernel compile error". Needs a small tmpfs, which only root can mount. */
static void test_full_disk(void **st) {
  (void)st;
  char dir[] = "/tmp/schedrun-full-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char cmd[256];
  snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=1m,mode=0700 tmpfs %s 2>/dev/null", dir);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  char *out, *err;
  if (tu_run(argv, &out, &err) != 0) {
    free(out);
    free(err);
    rmdir(dir);
    skip(); /* not root, or no mounts here */
  }
  free(out);
  free(err);
  /* fill it up, then compile into it */
  snprintf(cmd, sizeof cmd, "dd if=/dev/zero of=%s/fill bs=64k count=100 2>/dev/null; true", dir);
  char *fill[] = {"/bin/sh", "-c", cmd, NULL};
  tu_run(fill, &out, &err);
  free(out);
  free(err);
  char yaml[512];
  snprintf(yaml, sizeof yaml, "version: 1\ndevices: host\nkernels:\n  k:\n    params: [ptr]\n    source: |\n"
                              "      extern \"C\" __global__ void k(int *o) { o[0] = %d; }\n"
                              "buffers:\n  o: {type: i32, count: 1}\nprogram:\n  - launch: {kernel: k, grid: 1, block: 1, args: [o]}\n",
           (int)(now_ns() % 100000));
  const char *cfg = tu_write_temp(0, "full.yaml", yaml);
  char *old = getenv("SCHEDRUN_CACHE_DIR") ? xstrdup(getenv("SCHEDRUN_CACHE_DIR")) : NULL;
  setenv("SCHEDRUN_CACHE_DIR", dir, 1);
  int rc = run(&out, &err, "-q", cfg, NULL, NULL);
  if (old) setenv("SCHEDRUN_CACHE_DIR", old, 1);
  free(old);
  snprintf(cmd, sizeof cmd, "umount %s; rmdir %s", dir, dir);
  char *um[] = {"/bin/sh", "-c", cmd, NULL};
  char *o2, *e2;
  tu_run(um, &o2, &e2);
  free(o2);
  free(e2);
  if (rc != 4 || !strstr(err, dir) || (!strstr(err, "is full") && !strstr(err, "No space left")) ||
      strstr(err, "kernel compile error"))
    fail_msg("full disk: exit %d\n%s", rc, err);
  free(out);
  free(err);
}

/* A byte that is not UTF-8 is placed where it is (libyaml gives only its
 * offset); a config whose YAML does not fit in memory is exit 4, memory,
 * not a mistake in the config. */
static void test_encoding_and_memory(void **st) {
  (void)st;
  char *y = with_program("  - launch: {kernel: k, grid: 1, block: 1, args: [o, 1]} # \xff\n");
  expect_run(y, 2, "in.yaml:11:60: invalid leading UTF-8 octet (byte 0xff", "a config is UTF-8 text");
  free(y);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  skip(); /* the sanitizers reserve more address space than the limit below */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  skip();
#endif
#endif
  /* 4,000,000 values: libyaml's nodes take far more than the 700 MB of
   * address space the run gets */
  size_t n = 4000000;
  strbuf sb;
  sb_init(&sb);
  sb_adds(&sb, head);
  sb_adds(&sb, "  big: {type: i32, count: 4000000, init: {values: [");
  for (size_t i = 0; i < n; i++) sb_adds(&sb, i ? ", 7" : "7");
  sb_adds(&sb, "]}}\nprogram:\n  - launch: {kernel: k, grid: 1, block: 1, args: [o, 1]}\n");
  assert_false(sb.failed);
  const char *cfg = tu_write_temp(0, "huge.yaml", sb.data);
  sb_free(&sb);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "ulimit -v 700000; exec '%s' --check '%s'", tu_env("SCHEDRUN_RUN"), cfg);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  char *out, *err;
  int rc = tu_run(argv, &out, &err);
  if (rc != 4 || !strstr(err, "out of memory parsing its")) fail_msg("exit %d\n%s%s", rc, out, err);
  free(out);
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_expressions_overflow), cmocka_unit_test(test_launch_limits),
      cmocka_unit_test(test_deep_nesting_refused), cmocka_unit_test(test_input_files),
      cmocka_unit_test(test_trips_loop_inside_while_body), cmocka_unit_test(test_trace_destinations),
      cmocka_unit_test(test_cache_paths),          cmocka_unit_test(test_full_disk),
      cmocka_unit_test(test_encoding_and_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
