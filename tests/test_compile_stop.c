/* Compiles that deadlines and shutdowns stop: the compile actor's CANCEL of
 * one session (stops what nobody else waits for, leaves the rest, resets
 * the mode before the error leaves); a job whose deadline passes while its
 * kernel compiles completes SCHEDRUN_ETIMEOUT naming the kernel, its
 * compiler killed, and the next compile works; a late job beside others
 * that still wait leaves the compile running for them; `sched-run
 * --timeout 1` over a compile that hangs exits 4 and leaves no compiler,
 * and `--compile-timeout 1` kills it as a compile error (exit 3).
 * The compiler is a wrapper that hangs over one marked kernel
 * (compile_rig.h): nothing here waits for a guess of the machine's speed. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "compile_rig.h"

static const kdef hang_k = {"hang_k", "ptr", "extern \"C\" __global__ void hang_k(float *p) { p[0] = 1; } // HANG_HERE\n"};
static const kdef good_b = {"good_b", "ptr,i32", "extern \"C\" __global__ void good_b(int *p, int v) { p[0] = v; }\n"};
static const kdef good_c = {"good_c", "ptr", "extern \"C\" __global__ void good_c(int *p) { p[0] = 3; }\n"};

static void send_cancel_one(rig *r, uint64_t job, uint64_t waited_ms) {
  msg c;
  msg_init(&c, MSG_CANCEL, job, "client");
  c.body.cancel.program = job;
  c.body.cancel.code = SCHEDRUN_ETIMEOUT;
  c.body.cancel.waited_ms = waited_ms;
  assert_int_equal(mbox_send(r->out, &c, NULL), SCHEDRUN_OK);
  msg_free(&c);
}

static void expect_steps(const msg *m, const char *const *want, size_t n) {
  assert_int_equal(m->body.error.teardown.n, n);
  for (size_t i = 0; i < n; i++) assert_string_equal(m->body.error.teardown.v[i], want[i]);
}

/* One worker: hang_k runs (its compiler hangs), good_b waits in the queue.
 * CANCEL of the session answers at once: mode reset, the running compile
 * stopped, the queued one dropped; the compiler is then killed, and the
 * one worker compiles a different kernel for the next session. */
static void test_cancel_one_session_stops_its_compiles(void **st) {
  (void)st;
  char wdir[64];
  setenv("SCHEDRUN_CXX", rig_slow_cxx(wdir, "HANG_HERE"), 1);
  rig r;
  rig_up(&r, 1);
  kdef ks[] = {hang_k, good_b};
  rig_send_compile(&r, 61, ks, 2);
  TU_WAIT_FOR(rig_slow_pid(wdir) != 0, "the compiler to start over hang_k");
  pid_t cc = rig_slow_pid(wdir);
  send_cancel_one(&r, 61, 500);
  msg m;
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_ERROR);
  assert_true(m.job == 61);
  assert_int_equal(m.body.error.code, SCHEDRUN_ETIMEOUT);
  assert_string_equal(m.body.error.text,
                      "still compiling kernels 'hang_k' (p61.yaml:4:3), 'good_b' (p61.yaml:14:3) after 500 ms");
  const char *steps[] = {"reset the active compile mode",
                         "stop 1 running compiles no other job waits for (their compiler processes killed)",
                         "drop 1 compiles not started", "leave 0 compiles running for the other jobs that wait for them",
                         "evict 0 failed cache entries"};
  expect_steps(&m, steps, 5);
  msg_free(&m);
  rig_left_after_reset(61);
  assert_int_equal(rig_stat(&r, "compile_mode"), 0);
  TU_WAIT_FOR(rig_process_gone(cc), "the stopped compiler to be killed");
  /* the next compile: another kernel, the same actor, its one worker */
  kdef next[] = {good_c};
  rig_send_compile(&r, 62, next, 1);
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_COMPILED);
  assert_true(m.job == 62);
  assert_int_equal(m.body.compiled.modules.n, 1);
  msg_free(&m);
  assert_int_equal(rig_stat(&r, "compile_mode"), 0);
  unsetenv("SCHEDRUN_CXX");
  rig_down(&r, false);
  fs_remove_tree(wdir);
}

/* Two sessions wait for one compile of hang_k: CANCEL of the first leaves
 * it running for the second (the compiler lives on); a shutdown then stops
 * it, and the second is answered ECLOSED once its compiler was killed. */
static void test_cancel_one_leaves_a_shared_compile(void **st) {
  (void)st;
  char wdir[64];
  setenv("SCHEDRUN_CXX", rig_slow_cxx(wdir, "HANG_HERE"), 1);
  rig r;
  rig_up(&r, 2);
  kdef one[] = {hang_k};
  rig_send_compile(&r, 71, one, 1);
  TU_WAIT_FOR(rig_slow_pid(wdir) != 0, "the compiler to start over hang_k");
  pid_t cc = rig_slow_pid(wdir);
  rig_send_compile(&r, 72, one, 1);
  TU_WAIT_FOR(rig_stat(&r, "session_kernels") == 2, "the second session to join the compile");
  send_cancel_one(&r, 71, 800);
  msg m;
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_ERROR);
  assert_true(m.job == 71);
  assert_int_equal(m.body.error.code, SCHEDRUN_ETIMEOUT);
  assert_string_equal(m.body.error.text, "still compiling kernel 'hang_k' (p71.yaml:4:3) after 800 ms");
  const char *steps[] = {"reset the active compile mode",
                         "stop 0 running compiles no other job waits for (their compiler processes killed)",
                         "drop 0 compiles not started", "leave 1 compiles running for the other jobs that wait for them",
                         "evict 0 failed cache entries"};
  expect_steps(&m, steps, 5);
  msg_free(&m);
  rig_left_after_reset(71);
  assert_false(rig_process_gone(cc)); /* still compiling, for session 72 */
  assert_int_equal(rig_stat(&r, "compiles_in_flight"), 1);
  assert_int_equal(rig_stat(&r, "session_pending"), 1);
  /* a CANCEL for a session that is gone is not answered */
  send_cancel_one(&r, 71, 900);
  msg c;
  msg_init(&c, MSG_CANCEL, 0, "client");
  assert_int_equal(mbox_send(r.out, &c, NULL), SCHEDRUN_OK);
  msg_free(&c);
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_ERROR);
  assert_true(m.job == 72);
  assert_int_equal(m.body.error.code, SCHEDRUN_ECLOSED);
  msg_free(&m);
  rig_left_after_reset(72);
  assert_true(rig_process_gone(cc));
  unsetenv("SCHEDRUN_CXX");
  rig_down(&r, false);
  fs_remove_tree(wdir);
}

/* ---- through the library ---- */

static const char hang_yaml[] = "version: 1\n"
                                "kernels:\n"
                                "  k:\n"
                                "    params: [ptr]\n"
                                "    source: |\n"
                                "      extern \"C\" __global__ void k(int *o) { o[0] = 7; } // HANG_HERE\n"
                                "buffers:\n"
                                "  o: {type: i32, count: 1}\n"
                                "program:\n"
                                "  - launch: {kernel: k, grid: 1, block: 1, args: [o]}\n";

static const char next_yaml[] = "version: 1\n"
                                "kernels:\n"
                                "  n:\n"
                                "    params: [ptr]\n"
                                "    source: |\n"
                                "      extern \"C\" __global__ void n(int *o) { o[0] = 5; }\n"
                                "buffers:\n"
                                "  o: {type: i32, count: 1}\n"
                                "program:\n"
                                "  - launch: {kernel: n, grid: 1, block: 1, args: [o]}\n"
                                "expect:\n"
                                "  o: {values: [5]}\n";


static schedrun_job_t submit(schedrun_t *s, schedrun_program_t *p, int timeout_ms) {
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.timeout_ms = timeout_ms;
  schedrun_job_t id;
  schedrun_error_t err = {0};
  if (schedrun_submit(s, p, &jo, &id, &err)) fail_msg("%s", err.message);
  return id;
}

/* A result of job id: its status, and its text in out. */
static int result_of(schedrun_t *s, schedrun_job_t id, char *out, size_t n) {
  schedrun_job_result_t *r = NULL;
  schedrun_error_t err = {0};
  if (schedrun_wait(s, id, TU_PATIENCE_MS, &r, &err)) fail_msg("job %llu: %s", (unsigned long long)id, err.message);
  int status = schedrun_job_result_info(r)->status;
  snprintf(out, n, "%s", schedrun_job_result_error(r));
  schedrun_job_result_free(&r);
  return status;
}

/* A scheduler on host devices over a fresh cache directory, with the C++
 * compiler that hangs over the kernel of hang_yaml, and that program
 * loaded. */
typedef struct hang_bench {
  char wdir[64], dir[32];
  schedrun_t *s;
  schedrun_program_t *p;
} hang_bench;

/* compile_timeout_ms as schedrun_options_t has it (0: the default); warm
 * (or NULL): a config run first, into the cache, with the real compiler. */
static void hang_up(hang_bench *h, int compile_timeout_ms, const char *warm) {
  snprintf(h->dir, sizeof h->dir, "/tmp/schedrun-dl-XXXXXX");
  assert_non_null(mkdtemp(h->dir));
  if (warm) tu_run_once(h->dir, warm, "warm.yaml", 1);
  setenv("SCHEDRUN_CXX", rig_slow_cxx(h->wdir, "HANG_HERE"), 1);
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host";
  o.cache_dir = h->dir;
  o.compile_timeout_ms = compile_timeout_ms;
  h->s = tu_open(&o);
  rig_left_forget(); /* its jobs are numbered from 1, as earlier schedulers' were */
  h->p = tu_load(h->s, hang_yaml, "dl.yaml");
}

static void hang_down(hang_bench *h) {
  schedrun_program_free(&h->p);
  schedrun_close(&h->s);
  unsetenv("SCHEDRUN_CXX");
  fs_remove_tree(h->dir);
  fs_remove_tree(h->wdir);
}

/* The next compile, of another program, on the same scheduler: it verifies. */
static void next_compiles(hang_bench *h) {
  char text[2048];
  schedrun_program_t *q = tu_load(h->s, next_yaml, "next.yaml");
  int rc = result_of(h->s, submit(h->s, q, 0), text, sizeof text);
  if (rc != SCHEDRUN_OK) fail_msg("the next compile: status %d: %s", rc, text);
  schedrun_program_free(&q);
}

/* A job with a 500 ms deadline whose kernel never finishes compiling
 * completes SCHEDRUN_ETIMEOUT naming the kernel and its place, with the
 * teardown run (the mode reset before the error left, the compiler
 * killed); a job of another program then compiles and verifies. */
static void test_deadline_stops_the_compile(void **st) {
  (void)st;
  hang_bench h;
  hang_up(&h, 0, NULL);
  schedrun_job_t id = submit(h.s, h.p, 500);
  char text[2048];
  assert_int_equal(result_of(h.s, id, text, sizeof text), SCHEDRUN_ETIMEOUT);
  /* on a busy machine the compile may not have started by the deadline:
   * then it was dropped, and no compiler ever ran */
  bool ran = strstr(text, "; stop 1 running compiles") != NULL;
  if (!strstr(text, "still compiling kernel 'k' (dl.yaml:3:3) after ") ||
      !strstr(text, "teardown: reset the active compile mode; ") ||
      (!ran && !strstr(text, "; drop 1 compiles not started")))
    fail_msg("the timeout does not name the compile and its teardown: %s", text);
  rig_left_after_reset(id);
  pid_t cc = rig_slow_pid(h.wdir);
  if (cc) TU_WAIT_FOR(rig_process_gone(cc), "the compiler to be killed");
  next_compiles(&h);
  hang_down(&h);
}

/* Two jobs wait for one compile: the one with a deadline completes at it,
 * alone, and the compile goes on for the other (its compiler alive); the
 * shutdown then stops it and the other completes SCHEDRUN_ECLOSED. */
static void test_late_job_leaves_the_compile_to_the_others(void **st) {
  (void)st;
  hang_bench h;
  hang_up(&h, 0, NULL);
  schedrun_job_t patient = submit(h.s, h.p, 0), hurried = submit(h.s, h.p, 300);
  char text[2048];
  assert_int_equal(result_of(h.s, hurried, text, sizeof text), SCHEDRUN_ETIMEOUT);
  if (!strstr(text, "still compiling kernel 'k' (dl.yaml:3:3) after ") ||
      !strstr(text, "teardown: leave the compile running for the 1 other jobs that wait for it"))
    fail_msg("the late job's error: %s", text);
  TU_WAIT_FOR(rig_slow_pid(h.wdir) != 0, "the compiler to start over k");
  pid_t cc = rig_slow_pid(h.wdir);
  assert_false(rig_process_gone(cc));
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_shutdown(h.s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  assert_int_equal(result_of(h.s, patient, text, sizeof text), SCHEDRUN_ECLOSED);
  if (!strstr(text, "teardown: reset the active compile mode")) fail_msg("the shut-down job's error: %s", text);
  rig_left_after_reset(patient); /* the first job asked for the compile: the session is its */
  assert_true(rig_process_gone(cc));
  hang_down(&h);
}

/* A compiler that hangs past the compile timeout is killed and the job
 * fails as a compile, with the teardown; the next COMPILE (another
 * program) works on the same scheduler. That program's kernel is in the
 * cache beforehand, and the timeout is long beside a compile of it. */
static void test_compile_timeout_kills_a_hung_compiler(void **st) {
  (void)st;
  hang_bench h;
  hang_up(&h, 5000, next_yaml); /* 5 s: long beside a tiny kernel's compile, even on a busy machine */
  char text[4096];
  schedrun_job_t id = submit(h.s, h.p, 0);
  assert_int_equal(result_of(h.s, id, text, sizeof text), SCHEDRUN_ECOMPILE);
  if (!strstr(text, "kernel 'k' (dl.yaml:3:3): the C++ compiler ran for more than the compile timeout (5.0 s)") ||
      !strstr(text, "teardown: reset the active compile mode; drain 0 compiles") ||
      !strstr(text, "evict 1 failed cache entries"))
    fail_msg("the compile past its timeout: %s", text);
  rig_left_after_reset(id);
  pid_t cc = rig_slow_pid(h.wdir); /* 0: killed before it got to hang (a busy machine) */
  if (cc) assert_true(rig_process_gone(cc));
  next_compiles(&h);
  hang_down(&h);
}

/* sched-run OPT SECS over the config whose kernel never finishes
 * compiling: exit `want`, stderr naming `text`, and no compiler left once
 * sched-run has exited (one it started and did not reap would still be
 * there, another process's orphan). `--timeout` counts from the start, so
 * on a busy machine a second can run out before the compile has begun
 * (building the worker program for this compiler, starting the devices):
 * that outcome names its phase and is retried with twice the seconds, as
 * long as the compile (which never ends) is not reached. */
static void cli_over_a_hung_compile(const char *opt, int want, const char *text) {
  char wdir[64];
  setenv("SCHEDRUN_CXX", rig_slow_cxx(wdir, "HANG_HERE"), 1);
  /* the compiler takes longer than the first --timeout to say its version:
   * asking is part of opening the scheduler (an early outcome, retried), not
   * a wait inside the compile actor that a deadline's CANCEL queues behind */
  setenv("RIG_VERSION_DELAY", "1.5", 1);
  const char *cfg = tu_write_temp(0, "hang.yaml", hang_yaml);
  char *out = NULL, *errs = NULL;
  int rc = 0;
  for (int secs = 1;; secs *= 2) {
    char value[16];
    snprintf(value, sizeof value, "%d", secs);
    char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), (char *)opt, value, (char *)cfg, NULL};
    free(out);
    free(errs);
    rc = tu_run(argv, &out, &errs);
    if (!tu_timeout_ran_out_early(rc, errs) || secs >= 64) break;
    pid_t early_cc = rig_slow_pid(wdir);
    if (early_cc) assert_true(rig_process_gone(early_cc));
  }
  if (rc != want || !strstr(errs, text)) fail_msg("sched-run %s exited %d:\n%s%s", opt, rc, out, errs);
  pid_t cc = rig_slow_pid(wdir);
  if (cc) assert_true(rig_process_gone(cc));
  free(out);
  free(errs);
  unsetenv("SCHEDRUN_CXX");
  unsetenv("RIG_VERSION_DELAY");
  fs_remove_tree(wdir);
}

/* `sched-run --timeout 1`: exit 4, saying which kernel was still compiling. */
static void test_cli_timeout_over_a_compile(void **st) {
  (void)st;
  cli_over_a_hung_compile("--timeout", 4, "still compiling kernel 'k' (");
}

/* `sched-run --compile-timeout 1`: the compiler is killed after a second
 * and the run fails as a compile (exit 3), naming the bound. */
static void test_cli_compile_timeout(void **st) {
  (void)st;
  cli_over_a_hung_compile("--compile-timeout", 3,
                          "the C++ compiler ran for more than the compile timeout (1.0 s) and was killed");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cancel_one_session_stops_its_compiles),
      cmocka_unit_test(test_cancel_one_leaves_a_shared_compile),
      cmocka_unit_test(test_deadline_stops_the_compile),
      cmocka_unit_test(test_late_job_leaves_the_compile_to_the_others),
      cmocka_unit_test(test_compile_timeout_kills_a_hung_compiler),
      cmocka_unit_test(test_cli_timeout_over_a_compile),
      cmocka_unit_test(test_cli_compile_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
