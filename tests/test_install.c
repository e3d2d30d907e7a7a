/*
 * libschedrun as a user installs and embeds it: `cmake --install` into a
 * temporary prefix, then programs built outside the source tree against what
 * was installed (pkg-config shared and static, a C++17 CMake project), each run
 * on a shipped config. Also what the installed tree holds and exports.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"

#include "test_util.h"

static char work[256];        /* scratch directory of this test program */
static char prefix[512];      /* where the build is installed */
static char config[PATH_MAX]; /* the config every consumer runs */

/* Runs a shell command (printf-style); fails the test with its output unless
 * it exits with `want`. Returns its standard output (heap). */
static char *sh_expect(int want, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *sh_expect(int want, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *cmd = NULL;
  if (vasprintf(&cmd, fmt, ap) < 0) cmd = NULL;
  va_end(ap);
  assert_non_null(cmd);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  char *out = NULL, *err = NULL;
  int rc = tu_run(argv, &out, &err);
  if (rc != want) fail_msg("exit %d (wanted %d): %s\n--- stdout\n%s--- stderr\n%s", rc, want, cmd, out, err);
  free(err);
  free(cmd);
  return out;
}
#define sh(...) sh_expect(0, __VA_ARGS__)

static int setup(void **st) {
  (void)st;
  snprintf(work, sizeof work, "/tmp/schedrun-install-XXXXXX");
  if (!mkdtemp(work)) return -1;
  snprintf(prefix, sizeof prefix, "%s/prefix", work);
  snprintf(config, sizeof config, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  free(sh("cmake --install '%s' --prefix '%s' >/dev/null", tu_env("SCHEDRUN_BUILD_DIR"), prefix));
  return 0;
}

static int teardown(void **st) {
  (void)st;
  fs_remove_tree(work);
  return 0;
}

static void expect_file(const char *rel) {
  char p[PATH_MAX];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", prefix, rel);
  if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) fail_msg("not installed: %s", p);
}

static void test_installed_tree(void **st) {
  (void)st;
  expect_file("include/schedrun.h");
  expect_file("lib/libschedrun.so");
  expect_file("lib/libschedrun.so.0");
  expect_file("lib/libschedrun.a");
  expect_file("lib/pkgconfig/schedrun.pc");
  expect_file("lib/cmake/schedrun/schedrunConfig.cmake");
  expect_file("lib/cmake/schedrun/schedrunConfigVersion.cmake");
  expect_file("lib/cmake/schedrun/schedrunTargets.cmake");
  expect_file("bin/sched-run");
  expect_file("share/man/man1/sched-run.1");
  /* the documents the man page points to, the licence, the changes */
  static const char *const docs[] = {"README.md", "LICENSE", "CHANGELOG.md", "config.md", "design.md",
                                     "cluster.md", "configs/saxpy.yaml"};
  for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
    char rel[128];
    snprintf(rel, sizeof rel, "share/doc/schedrun/%s", docs[i]);
    expect_file(rel);
  }
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/include/sched.h", prefix);
  assert_int_not_equal(access(p, F_OK), 0); /* never shadow the C library's <sched.h> */

  char *so = sh("readelf -d '%s/lib/libschedrun.so' | grep SONAME", prefix);
  assert_non_null(strstr(so, "[libschedrun.so.0]"));
  free(so);
  /* msgpack-c, the one codec, is a library it needs (its unpacker reads the
   * kernel cache's autotune entries; the messages use its templates) */
  char *needed = sh("readelf -d '%s/lib/libschedrun.so' | grep NEEDED", prefix);
  if (!strstr(needed, "[libmsgpackc.so")) fail_msg("libschedrun.so does not need libmsgpackc:\n%s", needed);
  free(needed);
  char *real = sh("readlink -f '%s/lib/libschedrun.so.0'", prefix);
  char want[64];
  snprintf(want, sizeof want, "libschedrun.so.%s\n", tu_env("SCHEDRUN_VERSION"));
  assert_non_null(strstr(real, want));
  free(real);

  /* the Python package, imported from the installed prefix with nothing
   * else to find the library by (no build tree beside it) */
  const char *pydir = getenv("SCHEDRUN_PYTHON_DIR");
  if (pydir && *pydir) {
    char *py = sh("cd / && env -u SCHEDRUN_LIBRARY PYTHONPATH='%s/%s' /usr/bin/python3 -c "
                  "'import schedrun, schedrun._lib as l; print(schedrun.version(), l.lib._name)'",
                  prefix, pydir);
    char want_py[PATH_MAX + 64];
    snprintf(want_py, sizeof want_py, "%s %s/lib/libschedrun.so.0\n", tu_env("SCHEDRUN_VERSION"), prefix);
    if (strcmp(py, want_py) != 0) fail_msg("import schedrun from %s/%s said '%s', not '%s'", prefix, pydir, py, want_py);
    free(py);
  }
  char *man = sh("cat '%s/share/man/man1/sched-run.1'", prefix);
  assert_non_null(strstr(man, ".TH SCHED-RUN 1"));
  /* it names where the documents are installed (for the configured prefix) */
  const char *docdir = tu_env("SCHEDRUN_DOCDIR");
  if (!strstr(man, docdir)) fail_msg("the man page does not name %s", docdir);
  free(man);
}

/* Every line of nm's output names a schedrun_ symbol; returns how many. */
static int only_public(const char *nm_out, const char *what) {
  int n = 0;
  for (const char *line = nm_out; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)len, line);
    /* "ADDRESS TYPE NAME"; an archive adds "member.o:" headers and blank lines */
    char *name = strrchr(buf, ' ');
    if (len > 0 && buf[len - 1] != ':') {
      if (!name || strncmp(name + 1, "schedrun_", 9) != 0) fail_msg("%s exports '%s'", what, buf);
      n++;
    }
    line = end ? end + 1 : line + len;
  }
  return n;
}

static void test_exports_only_the_api(void **st) {
  (void)st;
  char *dyn = sh("nm -D --defined-only '%s/lib/libschedrun.so'", prefix);
  assert_true(only_public(dyn, "libschedrun.so") >= 40);
  assert_non_null(strstr(dyn, " schedrun_open\n"));
  assert_non_null(strstr(dyn, " schedrun_version\n"));
  free(dyn);
  char *ar = sh("nm --defined-only --extern-only '%s/lib/libschedrun.a'", prefix);
  assert_true(only_public(ar, "libschedrun.a") >= 40);
  free(ar);
  /* the static library is position-independent: it links into a shared object */
  free(sh("cd '%s' && printf 'int f(void);\\n' > f.c && %s -shared -fPIC -o libf.so f.c "
          "-Wl,--whole-archive '%s/lib/libschedrun.a' -Wl,--no-whole-archive",
          work, tu_env("SCHEDRUN_CC"), prefix));
}

/* Builds tests/install/consumer.c as `name` with the flags pkg-config gives
 * (a shell fragment), checks how it links to libschedrun, and runs it. */
static void pkgconfig_consumer(const char *name, const char *flags, bool shared) {
  free(sh("cd '%s' && export PKG_CONFIG_PATH='%s/lib/pkgconfig' && "
          "%s -std=c11 -Wall -Werror -o %s '%s/tests/install/consumer.c' %s",
          work, prefix, tu_env("SCHEDRUN_CC"), name, tu_env("SCHEDRUN_SOURCE_DIR"), flags));
  char *ldd = sh("ldd '%s/%s'", work, name);
  if (shared) assert_non_null(strstr(ldd, "libschedrun.so.0 => "));
  else assert_null(strstr(ldd, "libschedrun"));
  free(ldd);
  char *out = sh("'%s/%s' '%s'", work, name, config);
  assert_non_null(strstr(out, "consumer: 3 of 3 jobs verified"));
  free(out);
}

static void test_pkgconfig_shared(void **st) {
  (void)st;
  pkgconfig_consumer("c_shared",
                     "$(pkg-config --cflags --libs schedrun) -Wl,-rpath,\"$(pkg-config --variable=libdir schedrun)\"",
                     true);
}

static void test_pkgconfig_static(void **st) {
  (void)st;
  /* -l:libschedrun.a takes the archive where the shared library lies beside it */
  pkgconfig_consumer("c_static",
                     "$(pkg-config --cflags schedrun) "
                     "$(pkg-config --static --libs schedrun | sed 's/-lschedrun\\b/-l:libschedrun.a/')",
                     false);
}

static void test_cmake_package_cxx(void **st) {
  (void)st;
  free(sh("cmake -S '%s/tests/install/cxx' -B '%s/cxx' -DCMAKE_PREFIX_PATH='%s' >/dev/null && "
          "cmake --build '%s/cxx' >/dev/null",
          tu_env("SCHEDRUN_SOURCE_DIR"), work, prefix, work));
  const char *names[] = {"consumer_shared", "consumer_static"};
  for (int i = 0; i < 2; i++) {
    char *out = sh("'%s/cxx/%s' '%s'", work, names[i], config);
    assert_non_null(strstr(out, ": 3 of 3 jobs verified"));
    free(out);
  }
  char *ldd = sh("ldd '%s/cxx/consumer_static'", work);
  assert_null(strstr(ldd, "libschedrun"));
  free(ldd);
}

/* The installed header, first or last beside the C library's headers, in C11
 * and in C++17, with every warning an error. */
static void test_header_in_any_order(void **st) {
  (void)st;
  const char *c_sys = "#include <pthread.h>\n#include <sched.h>\n";
  const char *cxx_sys = "#include <pthread.h>\n#include <sched.h>\n#include <thread>\n";
  const char *use = "int main(void) { schedrun_options_t o; schedrun_options_init(&o); "
                    "cpu_set_t set; CPU_ZERO(&set); sched_yield(); return schedrun_version() ? 0 : 1; }\n";
  for (int cxx = 0; cxx < 2; cxx++)
    for (int first = 0; first < 2; first++) {
      const char *sys = cxx ? cxx_sys : c_sys;
      char name[32];
      snprintf(name, sizeof name, "h%d%d.%s", cxx, first, cxx ? "cpp" : "c");
      char src[1024];
      snprintf(src, sizeof src, "#define _GNU_SOURCE 1\n%s%s%s%s", first ? "#include <schedrun.h>\n" : "", sys,
               first ? "" : "#include <schedrun.h>\n", use);
      char path[PATH_MAX];
      snprintf(path, sizeof path, "%s/%s", work, name);
      FILE *f = fopen(path, "w");
      assert_non_null(f);
      fputs(src, f);
      fclose(f);
      free(sh("%s %s -Wall -Wextra -pedantic -Werror -fsyntax-only -I '%s/include' '%s'", cxx ? "c++" : tu_env("SCHEDRUN_CC"),
              cxx ? "-std=c++17" : "-std=c11", prefix, path));
    }
}

/* Built as a subproject: only the libraries and sched-run, prefixed targets
 * and aliases, no test dependencies, no -Werror for the parent's code. */
static void test_as_subproject(void **st) {
  (void)st;
  free(sh("cmake -S '%s/tests/install/subproject' -B '%s/sub' -DSCHEDRUN_SOURCE_DIR='%s' >/dev/null && "
          "cmake --build '%s/sub' -j 2 >/dev/null",
          tu_env("SCHEDRUN_SOURCE_DIR"), work, tu_env("SCHEDRUN_SOURCE_DIR"), work));
  char *targets = sh("cmake --build '%s/sub' --target help", work);
  const char *absent[] = {"test_", "_bench", "schedrun_embed", "schedrun_internal", "schedrun_shared_slot"};
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(absent); i++)
    if (strstr(targets, absent[i])) fail_msg("the subproject builds '%s' targets:\n%s", absent[i], targets);
  assert_non_null(strstr(targets, "... schedrun\n"));
  assert_non_null(strstr(targets, "... schedrun_static\n"));
  free(targets);
  char *cache = sh("grep -E '^(SCHEDRUN_BUILD_TESTS|SCHEDRUN_WERROR|SCHEDRUN_INSTALL):' '%s/sub/CMakeCache.txt'", work);
  assert_non_null(strstr(cache, "SCHEDRUN_BUILD_TESTS:BOOL=OFF"));
  assert_non_null(strstr(cache, "SCHEDRUN_WERROR:BOOL=OFF"));
  assert_non_null(strstr(cache, "SCHEDRUN_INSTALL:BOOL=OFF"));
  free(cache);
  const char *apps[] = {"app", "app_static"};
  for (int i = 0; i < 2; i++) {
    char *out = sh("'%s/sub/%s' '%s'", work, apps[i], config);
    assert_non_null(strstr(out, "consumer: 3 of 3 jobs verified"));
    free(out);
  }
}

/* libschedrun_mpi, where the build found MPI: its header and library are
 * installed, it exports the API and schedrun_mpi_* only, and
 * examples/embed_mpi.c built with pkg-config schedrun-mpi runs a config on
 * 2 ranks. */
static void test_pkgconfig_mpi(void **st) {
  (void)st;
  const char *mpirun = getenv("SCHEDRUN_MPIRUN");
  if (!mpirun) skip(); /* built without MPI */
  expect_file("include/schedrun_mpi.h");
  expect_file("lib/libschedrun_mpi.so.0");
  expect_file("lib/pkgconfig/schedrun-mpi.pc");
  /* MPI by its own pkg-config module, not by absolute paths of this machine */
  char *pc = sh("cat '%s/lib/pkgconfig/schedrun-mpi.pc'", prefix);
  assert_non_null(strstr(pc, "\nRequires: "));
  assert_null(strstr(pc, "-I/"));
  assert_null(strstr(pc, " /usr/"));
  free(pc);
  char *dyn = sh("nm -D --defined-only '%s/lib/libschedrun_mpi.so'", prefix);
  only_public(dyn, "libschedrun_mpi.so");
  assert_non_null(strstr(dyn, " schedrun_mpi_open\n"));
  assert_non_null(strstr(dyn, " schedrun_open\n"));
  free(dyn);
  free(sh("cd '%s' && export PKG_CONFIG_PATH='%s/lib/pkgconfig' && "
          "%s -std=c11 -Wall -Werror -o embed_mpi '%s/examples/embed_mpi.c' $(pkg-config --cflags --libs schedrun-mpi) "
          "-Wl,-rpath,\"$(pkg-config --variable=libdir schedrun-mpi)\"",
          work, prefix, tu_env("SCHEDRUN_CC"), tu_env("SCHEDRUN_SOURCE_DIR")));
  char *ldd = sh("ldd '%s/embed_mpi'", work);
  assert_non_null(strstr(ldd, "libschedrun_mpi.so.0 => "));
  assert_null(strstr(ldd, "libschedrun.so.0")); /* the whole library is in libschedrun_mpi */
  free(ldd);
  char *out = sh("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 '%s' -n 2 --oversubscribe --mca btl self,tcp "
                 "-x LSAN_OPTIONS=detect_leaks=0 '%s/embed_mpi' '%s'",
                 mpirun, work, config);
  assert_non_null(strstr(out, "embed_mpi: 3 of 3 jobs verified on 2 ranks"));
  assert_non_null(strstr(out, "rank 1 on "));
  free(out);
  /* the installed sched-run hands over to sched-run-mpi (libexec/: an
   * internal program) under a launcher, and loads no MPI itself */
  expect_file("libexec/sched-run-mpi");
  char bin_mpi[PATH_MAX];
  snprintf(bin_mpi, sizeof bin_mpi, "%s/bin/sched-run-mpi", prefix);
  assert_int_not_equal(access(bin_mpi, F_OK), 0);
  ldd = sh("ldd '%s/bin/sched-run'", prefix);
  assert_null(strstr(ldd, "libmpi"));
  free(ldd);
  out = sh("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 '%s' -n 2 --oversubscribe --mca btl self,tcp "
           "-x LSAN_OPTIONS=detect_leaks=0 '%s/bin/sched-run' --devices host '%s'",
           mpirun, prefix, config);
  assert_non_null(strstr(out, "saxpy-loop: verified on 2 devices (r0/host:0, ...)"));
  assert_non_null(strstr(out, "  rank 1 "));
  free(out);
}

static void test_installed_cli(void **st) {
  (void)st;
  char *v = sh("'%s/bin/sched-run' --version", prefix);
  char want[64];
  snprintf(want, sizeof want, "sched-run %s\n", tu_env("SCHEDRUN_VERSION"));
  assert_string_equal(v, want);
  free(v);
  char *out = sh("'%s/bin/sched-run' --devices host '%s'", prefix, config);
  assert_non_null(strstr(out, "saxpy-loop: verified on 1 device"));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_installed_tree),    cmocka_unit_test(test_exports_only_the_api),
      cmocka_unit_test(test_pkgconfig_shared),  cmocka_unit_test(test_pkgconfig_static),
      cmocka_unit_test(test_cmake_package_cxx), cmocka_unit_test(test_header_in_any_order),
      cmocka_unit_test(test_as_subproject),     cmocka_unit_test(test_installed_cli),
      cmocka_unit_test(test_pkgconfig_mpi),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
