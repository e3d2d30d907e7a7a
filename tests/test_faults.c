/*
 * Kernels that misbehave are contained the way a GPU contains them: a far
 * out-of-bounds write, a null pointer, a division by zero, abort() and exit(0)
 * each fail their own job, naming the kernel, its place in the config, the job,
 * the device and the fault, while a job on the other device verifies; the
 * faulting device is lost and later jobs go elsewhere. A kernel that never
 * returns is ended by its job's deadline, and close still returns at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"

#include "test_util.h"

/* Job 0 misbehaves (mode 0), job 1 fills the first 64 elements of out (of
 * `count`) with 7 (mode 1). `body` is the misbehaviour, a statement of CUDA C. */
static char *config_of(const char *body, int count) {
  char *y = NULL;
  int n = asprintf(&y,
                   "version: 1\n"
                   "name: faults\n"
                   "kernels:\n"
                   "  k:\n"
                   "    params: [ptr, i32]\n"
                   "    source: |\n"
                   "      extern \"C\" void abort(void);\n"
                   "      extern \"C\" void exit(int);\n"
                   "      extern \"C\" void _exit(int);\n"
                   "      extern \"C\" int close(int);\n"
                   "      extern \"C\" int fork(void);\n"
                   "      extern \"C\" int setsid(void);\n"
                   "      extern \"C\" unsigned sleep(unsigned);\n"
                   "      extern \"C\" int access(const char *, int);\n"
                   "      extern \"C\" int mkdir(const char *, unsigned);\n"
                   "      extern \"C\" int kill(int, int);\n"
                   "      extern \"C\" int getpid(void);\n"
                   "      extern \"C\" __global__ void k(float *out, int mode) {\n"
                   "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "        if (mode == 0 && i == 0) { %s }\n"
                   "        if (i < 64) out[i] = 7.0f;\n"
                   "      }\n"
                   "buffers:\n"
                   "  out: {type: f32, count: %d}\n"
                   "program:\n"
                   "  - launch: {kernel: k, grid: 1, block: 64, args: [out, \"$job\"]}\n"
                   "expect:\n"
                   "  out: {sum: 448}\n",
                   body, count);
  assert_true(n > 0);
  return y;
}

static char *config(const char *body) { return config_of(body, 64); }

#define STEP_AT "faults.yaml:26:5" /* where the launch step is in config() */

typedef struct outcome {
  int status;
  char text[1024];
} outcome;

/* Runs job 0 on host:0 and job 1 on host:1; returns job 0's outcome after
 * checking that job 1 verified and that only host:0 was lost. */
static outcome run_pair_of(const char *body, int count, int timeout_ms) {
  char *yaml = config_of(body, count);
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:2";
  schedrun_t *s = tu_open(&o);
  schedrun_program_t *p = tu_load(s, yaml, "faults.yaml");
  schedrun_error_t err = {0};
  free(yaml);
  schedrun_job_t id[2];
  for (int j = 0; j < 2; j++) {
    schedrun_job_options_t jo;
    schedrun_job_options_init(&jo);
    jo.job = j;
    jo.device = j;
    jo.timeout_ms = j == 0 ? timeout_ms : 0;
    assert_int_equal(schedrun_submit(s, p, &jo, &id[j], &err), SCHEDRUN_OK);
  }
  outcome out = {0};
  for (int j = 1; j >= 0; j--) {
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_wait(s, id[j], TU_PATIENCE_MS, &r, &err), SCHEDRUN_OK);
    const schedrun_job_info_t *info = schedrun_job_result_info(r);
    if (j == 1) {
      if (info->status != SCHEDRUN_OK || !info->verified || info->device != 1)
        fail_msg("the job on host:1 did not verify: %s", schedrun_job_result_error(r));
    } else {
      out.status = info->status;
      snprintf(out.text, sizeof out.text, "%s", schedrun_job_result_error(r));
      assert_int_equal(info->device, 0);
    }
    schedrun_job_result_free(&r);
  }
  assert_non_null(schedrun_device_lost(s, 0));
  assert_null(schedrun_device_lost(s, 1));
  /* a later job goes to the device that still works, and verifies */
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.job = 1;
  schedrun_job_t later;
  schedrun_job_result_t *r;
  assert_int_equal(schedrun_submit(s, p, &jo, &later, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait(s, later, TU_PATIENCE_MS, &r, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->device, 1);
  assert_true(schedrun_job_result_info(r)->verified);
  schedrun_job_result_free(&r);
  /* one pinned to the lost device fails at once with its reason */
  jo.device = 0;
  assert_int_equal(schedrun_submit(s, p, &jo, &later, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait(s, later, TU_PATIENCE_MS, &r, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_ELOST);
  assert_non_null(strstr(schedrun_job_result_error(r), "host:0"));
  schedrun_job_result_free(&r);
  schedrun_stats_t st;
  assert_int_equal(schedrun_get_stats(s, &st, &err), SCHEDRUN_OK);
  assert_int_equal(st.devices_lost, 1);
  schedrun_program_free(&p);
  uint64_t t0 = now_ns();
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  /* close does not wait for a kernel that never returns (it would hang) */
  assert_true(now_ns() - t0 < TU_PATIENCE_NS);
  return out;
}

static outcome run_pair(const char *body, int timeout_ms) { return run_pair_of(body, 64, timeout_ms); }

static void expect_named(const outcome *o, int status, const char *fault) {
  if (o->status != status || !strstr(o->text, "kernel 'k' (" STEP_AT ")") || !strstr(o->text, "host:0") ||
      !strstr(o->text, "run 0, job 0") || !strstr(o->text, fault))
    fail_msg("status %d (wanted %d), text: %s\n(wanted the kernel, " STEP_AT ", host:0, the job and '%s')",
             o->status, status, o->text, fault);
}

static void test_out_of_bounds_write(void **st) {
  (void)st;
  outcome o = run_pair("out[1L << 40] = 1.0f;", 0);
  expect_named(&o, SCHEDRUN_EFAULT, "invalid memory access (SIGSEGV at address 0x");
}

/* 1.6 GB past a 64-element buffer: still inside the device's memory, where
 * no buffer is, so it faults as on a GPU instead of landing unnoticed. */
static void test_write_far_past_a_buffer(void **st) {
  (void)st;
  outcome o = run_pair("out[400000000L] = 1.0f;", 0);
  expect_named(&o, SCHEDRUN_EFAULT, "invalid memory access (SIGSEGV at address 0x");
}

/* One element past a buffer of exactly one page: the guard page after it. */
static void test_write_one_past_a_page_aligned_buffer(void **st) {
  (void)st;
  long page = sysconf(_SC_PAGESIZE);
  int count = (int)(page / 4);
  char body[64];
  snprintf(body, sizeof body, "out[%d] = 1.0f;", count);
  outcome o = run_pair_of(body, count, 0);
  expect_named(&o, SCHEDRUN_EFAULT, "invalid memory access (SIGSEGV at address 0x");
}

static void test_null_pointer(void **st) {
  (void)st;
  outcome o = run_pair("*(volatile float *)0 = 1.0f;", 0);
  expect_named(&o, SCHEDRUN_EFAULT, "SIGSEGV at address 0x0)");
}

static void test_division_by_zero(void **st) {
  (void)st;
  outcome o = run_pair("volatile int a = 1, z = 0; out[1] = (float)(a / z);", 0);
  expect_named(&o, SCHEDRUN_EFAULT, "integer division by zero (SIGFPE)");
}

static void test_abort(void **st) {
  (void)st;
  outcome o = run_pair("abort();", 0);
  expect_named(&o, SCHEDRUN_EFAULT, "abort() (SIGABRT)");
}

static void test_exit_cannot_fake_success(void **st) {
  (void)st;
  outcome o = run_pair("exit(0);", 0);
  expect_named(&o, SCHEDRUN_EFAULT, "ended with exit status 0");
}

/* Compiles body's kernel into the suite's disk cache by running the job that
 * behaves (job 1), so that a deadline counted from submission is spent in the
 * kernel, not in compiling it, however busy the machine is. */
static void compile_first(const char *body) {
  char *yaml = config(body);
  schedrun_t *s = tu_open(NULL);
  schedrun_program_t *p = tu_load(s, yaml, "faults.yaml");
  free(yaml);
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.job = 1;
  schedrun_job_t id;
  schedrun_job_result_t *r;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait(s, id, TU_PATIENCE_MS, &r, &err), SCHEDRUN_OK);
  assert_true(schedrun_job_result_info(r)->verified);
  schedrun_job_result_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_kernel_that_never_returns(void **st) {
  (void)st;
  const char *spin = "volatile int spin = 1; while (spin) {}";
  compile_first(spin);
  uint64_t t0 = now_ns();
  outcome o = run_pair(spin, 2000);
  uint64_t took = now_ns() - t0;
  expect_named(&o, SCHEDRUN_ETIMEOUT, "past its deadline");
  if (!strstr(o.text, "\nteardown: mark host:0 lost: later jobs go to the other devices"))
    fail_msg("the deadline's error lacks its teardown: %s", o.text);
  /* a deadline counts from submission: the job cannot end before it, and
   * ends at it rather than hanging */
  assert_true(took >= 2000000000ull && took < TU_PATIENCE_NS);
}

/* A kernel that closes every descriptor it can (the worker's among them)
 * and then never returns: the worker is alive, so nothing is taken for its
 * death; the deadline ends it, and no process of it is left. */
static void test_kernel_that_closes_descriptors(void **st) {
  (void)st;
  const char *body = "for (int fd = 3; fd < 256; fd++) close(fd); volatile int spin = 1; while (spin) {}";
  compile_first(body);
  pid_t self = getpid();
  outcome o = run_pair(body, 2000);
  expect_named(&o, SCHEDRUN_ETIMEOUT, "past its deadline");
  /* run_pair closed the scheduler: no worker of this process is left */
  assert_int_equal(tu_count_processes(tu_is_worker_of, &self), 0);
}

/* The same kernel returning: the device works on (its worker watches the
 * library's process another way), and its job verifies. */
static void test_closed_descriptors_do_not_end_the_device(void **st) {
  (void)st;
  char *yaml = config("for (int fd = 3; fd < 256; fd++) close(fd);");
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  schedrun_t *s = tu_open(&o);
  schedrun_program_t *p = tu_load(s, yaml, "faults.yaml");
  free(yaml);
  schedrun_error_t err = {0};
  for (int j = 0; j < 3; j++) {
    schedrun_job_options_t jo;
    schedrun_job_options_init(&jo);
    jo.job = j % 2;
    schedrun_job_t id;
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
    assert_int_equal(schedrun_wait(s, id, TU_PATIENCE_MS, &r, &err), SCHEDRUN_OK);
    if (schedrun_job_result_info(r)->status != SCHEDRUN_OK || !schedrun_job_result_info(r)->verified)
      fail_msg("job %d: %s", j, schedrun_job_result_error(r));
    schedrun_job_result_free(&r);
  }
  assert_null(schedrun_device_lost(s, 0));
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* A kernel cannot start a process: its fork fails, so no child of it holds
 * anything of the device's or outlives it. Had the fork worked, the child
 * would make a directory and sleep, and the kernel would wait for the
 * directory before ending its process with status 3. That the process ended
 * is seen at once (the job's deadline, 600 s, is not what ends it). */
static void test_kernel_cannot_start_processes(void **st) {
  (void)st;
  char mark[] = "/tmp/schedrun-forked-XXXXXX";
  assert_non_null(mkdtemp(mark));
  assert_int_equal(rmdir(mark), 0);
  char body[1024];
  snprintf(body, sizeof body,
           "int pid = fork(); if (pid == 0) { setsid(); mkdir(\"%s\", 0700); sleep(600); _exit(0); } "
           "if (pid > 0) while (access(\"%s\", 0) != 0) {} _exit(3);",
           mark, mark);
  outcome o = run_pair(body, 600000);
  expect_named(&o, SCHEDRUN_EFAULT, "exit status 3");
  if (access(mark, F_OK) == 0) {
    rmdir(mark);
    fail_msg("a kernel's child process ran");
  }
}

/* A worker killed from outside (SIGKILL: what the out-of-memory killer
 * sends) is named as such, not only as a signal. */
static void test_killed_from_outside(void **st) {
  (void)st;
  outcome o = run_pair("kill(getpid(), 9);", 600000);
  expect_named(&o, SCHEDRUN_EFAULT, "killed by SIGKILL, not by schedrun: the system's out-of-memory killer");
}

/* Without containment (host_in_process) the same program runs, and verifies,
 * with the kernels in this process. */
static void test_in_process_devices_run(void **st) {
  (void)st;
  char *yaml = config("/* behaves */");
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:2";
  o.host_in_process = 1;
  schedrun_t *s = tu_open(&o);
  schedrun_program_t *p = tu_load(s, yaml, "faults.yaml");
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  free(yaml);
  schedrun_run_options_t ro;
  schedrun_run_options_init(&ro);
  ro.repeat = 3;
  ro.jobs = 4;
  if (schedrun_run(s, p, &ro, &r, &err)) fail_msg("%s", err.message);
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->jobs, 12);
  assert_int_equal(sum->verified, 12);
  assert_null(schedrun_device_lost(s, 0));
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* Jobs that go to a device as one submission (run_batch): when the 21st of
 * 40 faults, the 20 before it verify, it fails naming the kernel, the job and
 * the fault, and the 19 after it, never run, fail as lost naming it. */
static void test_fault_inside_a_batch(void **st) {
  (void)st;
  const char *yaml = "version: 1\nname: batch\n"
                     "kernels:\n  k:\n    params: [ptr, ptr]\n    source: |\n"
                     "      extern \"C\" __global__ void k(float *out, int *mode) {\n"
                     "        int i = threadIdx.x;\n"
                     "        if (mode[0] == 1 && i == 0) { *(volatile int *)0 = 1; }\n"
                     "        out[i] = 7.0f;\n"
                     "      }\n"
                     "buffers:\n  out: {type: f32, count: 64}\n  mode: {type: i32, count: 1}\n"
                     "program:\n  - launch: {kernel: k, grid: 1, block: 64, args: [out, mode]}\n"
                     "expect:\n  out: {sum: 448}\n";
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  schedrun_t *s = tu_open(&o);
  schedrun_program_t *p = tu_load(s, yaml, "batch.yaml");
  schedrun_error_t err = {0};
  enum { WARM = 20, N = 40, BAD = 20 };
  schedrun_job_options_t jo[N];
  schedrun_job_t id[N];
  schedrun_job_result_t *r[N];
  /* the device's first jobs are timed node by node, and run alone: past them */
  for (int j = 0; j < WARM; j++) schedrun_job_options_init(&jo[j]);
  assert_int_equal(schedrun_submit_many(s, p, WARM, jo, id, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait_many(s, WARM, id, TU_PATIENCE_MS, r, &err), SCHEDRUN_OK);
  for (int j = 0; j < WARM; j++) {
    assert_true(schedrun_job_result_info(r[j])->verified);
    schedrun_job_result_free(&r[j]);
  }
  int32_t bad = 1;
  schedrun_input_t in = {"mode", &bad, sizeof bad};
  for (int j = 0; j < N; j++) {
    schedrun_job_options_init(&jo[j]);
    jo[j].job = j;
    if (j == BAD) {
      jo[j].inputs = &in;
      jo[j].ninputs = 1;
    }
  }
  assert_int_equal(schedrun_submit_many(s, p, N, jo, id, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait_many(s, N, id, TU_PATIENCE_MS, r, &err), SCHEDRUN_OK);
  char bad_job[64];
  snprintf(bad_job, sizeof bad_job, "job %llu failed before this one ran", (unsigned long long)id[BAD]);
  for (int j = 0; j < N; j++) {
    const schedrun_job_info_t *info = schedrun_job_result_info(r[j]);
    const char *text = schedrun_job_result_error(r[j]);
    if (j < BAD && (info->status != SCHEDRUN_OK || !info->verified))
      fail_msg("job %d: status %d: %s", j, info->status, text);
    if (j == BAD && (info->status != SCHEDRUN_EFAULT || !strstr(text, "kernel 'k' (batch.yaml:") ||
                     !strstr(text, "job 20)") || !strstr(text, "invalid memory access")))
      fail_msg("the faulting job: status %d: %s", info->status, text);
    if (j > BAD && (info->status != SCHEDRUN_ELOST || !strstr(text, bad_job) || !strstr(text, "host:0")))
      fail_msg("job %d after the fault: status %d: %s", j, info->status, text);
    schedrun_job_result_free(&r[j]);
  }
  assert_non_null(schedrun_device_lost(s, 0));
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_out_of_bounds_write), cmocka_unit_test(test_null_pointer),
      cmocka_unit_test(test_write_far_past_a_buffer), cmocka_unit_test(test_write_one_past_a_page_aligned_buffer),
      cmocka_unit_test(test_division_by_zero),    cmocka_unit_test(test_abort),
      cmocka_unit_test(test_exit_cannot_fake_success), cmocka_unit_test(test_kernel_that_never_returns),
      cmocka_unit_test(test_in_process_devices_run), cmocka_unit_test(test_kernel_that_closes_descriptors),
      cmocka_unit_test(test_closed_descriptors_do_not_end_the_device),
      cmocka_unit_test(test_kernel_cannot_start_processes), cmocka_unit_test(test_killed_from_outside),
      cmocka_unit_test(test_fault_inside_a_batch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
