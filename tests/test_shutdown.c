/*
 * Shutdown and close while a kernel compiles for 5 seconds: the compile
 * session is torn down first (the mode is reset, the compiler killed), then
 * the jobs complete with SCHEDRUN_ECLOSED carrying those teardown steps; both
 * return within 2 seconds, no compiler process is left, and afterwards every
 * query answers SCHEDRUN_ECLOSED at once.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"

#include "test_util.h"

static char wrapper[512];

/* A C++ compiler that takes SLOW_COMPILE_S over every kernel (they are built
 * -shared): so long that a shutdown or close that waited for it could not be
 * mistaken for one slowed down by a busy machine. */
#define SLOW_COMPILE_S 240
#define SLOW_COMPILE_NS (SLOW_COMPILE_S * 1000000000ull)
static int setup(void **st) {
  (void)st;
  char dir[] = "/tmp/schedrun-slowcxx-XXXXXX";
  if (!mkdtemp(dir)) return -1;
  snprintf(wrapper, sizeof wrapper, "%s/slow-c++", dir);
  FILE *f = fopen(wrapper, "w");
  if (!f) return -1;
  fprintf(f, "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -shared ] && sleep %d; done\nexec c++ \"$@\"\n", SLOW_COMPILE_S);
  fclose(f);
  chmod(wrapper, 0755);
  setenv("SCHEDRUN_CXX", wrapper, 1);
  return 0;
}

static int teardown(void **st) {
  (void)st;
  unsetenv("SCHEDRUN_CXX");
  char *dir = fs_dirname(wrapper);
  fs_remove_tree(dir);
  free(dir);
  return 0;
}

/* Processes whose arguments mention the wrapper (the shell, its sleep). */
static int runs_wrapper(int argc, char *const *argv, void *ctx) {
  (void)ctx;
  for (int i = 0; i < argc; i++)
    if (strstr(argv[i], "slow-c++")) return !strstr(argv[0], "test_shutdown");
  return 0;
}

static int wrapper_processes(void) { return tu_count_processes(runs_wrapper, NULL); }

typedef struct seen {
  schedrun_t *s;
  _Atomic int completed;
  int status[3], active_at_completion[3], status_rc[3];
  char text[3][1024];
} seen;

static void on_done(schedrun_job_t job, schedrun_job_result_t *r, void *user) {
  (void)job;
  seen *sn = user;
  int i = schedrun_job_result_info(r)->job;
  sn->status[i] = schedrun_job_result_info(r)->status;
  snprintf(sn->text[i], sizeof sn->text[i], "%s", schedrun_job_result_error(r));
  /* is the compile mode still active when the ECLOSED arrives? */
  sn->status_rc[i] = schedrun_compile_status(sn->s, &sn->active_at_completion[i], NULL, NULL);
  schedrun_job_result_free(&r);
  atomic_fetch_add(&sn->completed, 1);
}

static schedrun_t *start_compile(seen *sn, schedrun_program_t **p) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host";
  o.no_disk_cache = 1; /* nothing cached: the kernel really compiles */
  schedrun_error_t err = {0};
  schedrun_t *s = tu_open(&o);
  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           "version: 1\n"
           "kernels:\n"
           "  k:\n"
           "    params: [ptr]\n"
           "    source: |\n"
           "      // %llu\n"
           "      extern \"C\" __global__ void k(int *out) { out[0] = 1; }\n"
           "buffers:\n"
           "  out: {type: i32, count: 1}\n"
           "program:\n"
           "  - launch: {kernel: k, grid: 1, block: 1, args: [out]}\n",
           (unsigned long long)now_ns());
  *p = tu_load(s, yaml, "slow.yaml");
  sn->s = s;
  for (int i = 0; i < 3; i++) {
    schedrun_job_options_t jo;
    schedrun_job_options_init(&jo);
    jo.job = i;
    jo.on_complete = on_done;
    jo.user = sn;
    schedrun_job_t id;
    assert_int_equal(schedrun_submit(s, *p, &jo, &id, &err), SCHEDRUN_OK);
  }
  /* the compile is under way: the mode is active */
  int active = 0;
  TU_WAIT_FOR((assert_int_equal(schedrun_compile_status(s, &active, NULL, &err), SCHEDRUN_OK), active == 1),
              "the compile mode to become active");
  TU_WAIT_FOR(wrapper_processes() > 0, "the compiler to start");
  return s;
}

static void check_closed_jobs(seen *sn) {
  assert_int_equal(atomic_load(&sn->completed), 3);
  for (int i = 0; i < 3; i++) {
    if (sn->status[i] != SCHEDRUN_ECLOSED || !strstr(sn->text[i], "teardown: reset the active compile mode") ||
        !strstr(sn->text[i], "stop 1 running compiles (their compiler processes killed)"))
      fail_msg("job %d: status %d: %s", i, sn->status[i], sn->text[i]);
    /* the teardown ran before the ECLOSED reached the client */
    assert_int_equal(sn->status_rc[i], SCHEDRUN_OK);
    assert_int_equal(sn->active_at_completion[i], 0);
  }
}

static void no_compiler_left(void) {
  TU_WAIT_FOR(wrapper_processes() == 0, "the stopped compiles' processes to end");
}

static void test_shutdown_during_compile(void **st) {
  (void)st;
  seen sn = {0};
  schedrun_program_t *p = NULL;
  schedrun_t *s = start_compile(&sn, &p);
  schedrun_error_t err = {0};
  uint64_t t0 = now_ns();
  assert_int_equal(schedrun_shutdown(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  assert_true(now_ns() - t0 < SLOW_COMPILE_NS / 2); /* it did not wait for the compile */
  check_closed_jobs(&sn);
  no_compiler_left();
  /* after shutdown every query answers at once */
  t0 = now_ns();
  int active;
  schedrun_counters_t c;
  schedrun_job_t id;
  assert_int_equal(schedrun_compile_status(s, &active, NULL, &err), SCHEDRUN_ECLOSED);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_record_counters(s, p, 0, 0, &c, &err), SCHEDRUN_ECLOSED);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_submit(s, p, NULL, &id, &err), SCHEDRUN_ECLOSED);
  schedrun_error_clear(&err);
  assert_true(now_ns() - t0 < SLOW_COMPILE_NS / 2); /* nothing waited */
  schedrun_program_free(&p);
  t0 = now_ns();
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  assert_true(now_ns() - t0 < SLOW_COMPILE_NS / 2); /* it did not wait for the compile */
}

static void test_close_during_compile(void **st) {
  (void)st;
  seen sn = {0};
  schedrun_program_t *p = NULL;
  schedrun_t *s = start_compile(&sn, &p);
  uint64_t t0 = now_ns();
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  assert_true(now_ns() - t0 < SLOW_COMPILE_NS / 2); /* it did not wait for the compile */
  assert_null(s);
  check_closed_jobs(&sn);
  no_compiler_left();
  schedrun_program_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shutdown_during_compile),
      cmocka_unit_test(test_close_during_compile),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
