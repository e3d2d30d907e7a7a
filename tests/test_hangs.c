/*
 * Nothing wedges sched-run: one SIGINT ends a run whose kernel never returns
 * (program and stages configs alike; the grace is bounded, then the devices
 * are abandoned); an output that is a FIFO nobody reads is an error, not a
 * hang; --timeout bounds the whole process, writing outputs included; and
 * a first signal while outputs are written ends the process at once.
 *
 * The wrong behaviour in each case is a hang (or a 600 s job deadline), so
 * the tests wait for events and give up only after TU_PATIENCE_MS.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"

#include "test_util.h"

extern char **environ;

static const char spin_yaml[] = "version: 1\n"
                                "name: spin\n"
                                "devices: host:1\n"
                                "kernels:\n"
                                "  spin:\n"
                                "    params: [ptr]\n"
                                "    source: |\n"
                                "      extern \"C\" __global__ void spin(int *o) { volatile int s = 1; while (s) {} o[0] = 1; }\n"
                                "buffers:\n"
                                "  o: {type: i32, count: 1}\n"
                                "program:\n"
                                "  - launch: {kernel: spin, grid: 1, block: 1, args: [o]}\n";

typedef struct child {
  pid_t pid;
  char out[512], err[512];
} child;

/* Starts sched-run with args (NULL-terminated), its output in files. */
static child start(const char *const *args) {
  static int n;
  child c;
  snprintf(c.out, sizeof c.out, "/tmp/schedrun-hangs-%ld-%d.out", (long)getpid(), n);
  snprintf(c.err, sizeof c.err, "/tmp/schedrun-hangs-%ld-%d.err", (long)getpid(), n++);
  char *argv[16];
  int k = 0;
  argv[k++] = (char *)tu_env("SCHEDRUN_RUN");
  for (; args[k - 1] && k < 15; k++) argv[k] = (char *)args[k - 1];
  argv[k] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, c.out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, c.err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_int_equal(posix_spawn(&c.pid, argv[0], &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return c;
}

/* Waits for the child to exit; its exit status, and its stderr in *err. */
static int finish(child *c, const char *what, char **err) {
  int status = 0;
  uint64_t t0 = tu_now_ns();
  while (waitpid(c->pid, &status, WNOHANG) == 0) {
    if (tu_now_ns() - t0 > TU_PATIENCE_NS) {
      kill(c->pid, SIGKILL);
      waitpid(c->pid, &status, 0);
      fail_msg("sched-run did not exit within %d s of %s", TU_PATIENCE_MS / 1000, what);
    }
    tu_sleep_ms(5);
  }
  *err = tu_slurp(c->err, NULL);
  assert_non_null(*err);
  unlink(c->out);
  unlink(c->err);
  if (!WIFEXITED(status)) fail_msg("%s: ended by signal %d\n%s", what, WTERMSIG(status), *err);
  return WEXITSTATUS(status);
}

/* CPU ticks used by a host worker of process `lib`, or -1 when it has none. */
static long worker_ticks(pid_t lib) {
  DIR *d = opendir("/proc");
  long best = -1;
  struct dirent *e;
  char want[32];
  snprintf(want, sizeof want, "%ld", (long)lib);
  while (d && (e = readdir(d))) {
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    size_t len = 0;
    char *cmd = tu_slurp(path, &len);
    if (!cmd) continue;
    /* argv: worker SIZE LIBRARY_PID ... */
    const char *a0 = cmd, *a1 = a0 + strlen(a0) + 1, *a2 = a1 < cmd + len ? a1 + strlen(a1) + 1 : NULL;
    bool mine = strstr(a0, "host-worker") && a2 && a2 < cmd + len && !strcmp(a2, want);
    free(cmd);
    if (!mine) continue;
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    char *stat = tu_slurp(path, NULL);
    const char *p = stat ? strrchr(stat, ')') : NULL;
    long utime = 0, stime = 0;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) == 2 &&
        utime + stime > best)
      best = utime + stime;
    free(stat);
  }
  if (d) closedir(d);
  return best;
}

/* Signals sched-run once its kernel has been spinning a while, and checks
 * that it ends as interrupted, leaving no worker. */
static void interrupt_spinning(const char *const *args, const char *what) {
  child c = start(args);
  TU_WAIT_FOR(worker_ticks(c.pid) >= 5, "the kernel to spin");
  kill(c.pid, SIGINT);
  char *err;
  int rc = finish(&c, what, &err);
  if (rc != 130 || !strstr(err, "SIGINT")) fail_msg("%s: exit %d\n%s", what, rc, err);
  free(err);
  assert_int_equal(worker_ticks(c.pid), -1);
}

static void test_sigint_ends_a_kernel_that_never_returns(void **st) {
  (void)st;
  const char *cfg = tu_write_temp(1, "spin.yaml", spin_yaml);
  const char *args[] = {"--no-cache", cfg, NULL};
  interrupt_spinning(args, "SIGINT to a program config");
}

static void test_sigint_ends_a_stage_that_never_returns(void **st) {
  (void)st;
  const char *spin = tu_write_temp(1, "spin.yaml", spin_yaml);
  char text[1024];
  snprintf(text, sizeof text,
           "version: 1\nname: stuck\ndevices: host:1\nstages:\n  first:\n    config: %s\n"
           "  second:\n    config: %s\n    after: [first]\n",
           spin, spin);
  const char *cfg = tu_write_temp(2, "stages.yaml", text);
  const char *args[] = {"--no-cache", cfg, NULL};
  interrupt_spinning(args, "SIGINT to a stages config");
}

static const char *fifo_path(void) {
  static char path[256];
  snprintf(path, sizeof path, "/tmp/schedrun-hangs-%ld.fifo", (long)getpid());
  unlink(path);
  assert_int_equal(mkfifo(path, 0600), 0);
  return path;
}

/* A trace to a FIFO that nobody opens: an error naming it, exit 4. */
static void test_fifo_without_a_reader(void **st) {
  (void)st;
  const char *fifo = fifo_path();
  char cfg[512];
  snprintf(cfg, sizeof cfg, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  const char *args[] = {"-q", "--trace", fifo, cfg, NULL};
  child c = start(args);
  char *err;
  int rc = finish(&c, "a FIFO without a reader", &err);
  if (rc != 4 || !strstr(err, fifo) || !strstr(err, "opened for reading")) fail_msg("exit %d\n%s", rc, err);
  free(err);
  unlink(fifo);
}

/* --timeout bounds the whole process: a kernel that never returns, then a
 * trace to a FIFO that nobody reads; the process ends with exit 4. */
static void test_timeout_bounds_the_process(void **st) {
  (void)st;
  const char *fifo = fifo_path();
  const char *cfg = tu_write_temp(1, "spin.yaml", spin_yaml);
  const char *args[] = {"-q", "--timeout", "2", "--trace", fifo, cfg, NULL};
  child c = start(args);
  char *err;
  int rc = finish(&c, "--timeout 2", &err);
  if (rc != 4 || !strstr(err, "--timeout 2 s ran out while")) fail_msg("exit %d\n%s", rc, err);
  free(err);
  unlink(fifo);
  assert_int_equal(worker_ticks(c.pid), -1);
}

/* Once the run is over and only outputs are written, a first signal ends
 * the process at once: here it waits for a FIFO's reader. */
static void test_first_signal_while_writing(void **st) {
  (void)st;
  const char *fifo = fifo_path();
  char cfg[512], dot[256];
  snprintf(cfg, sizeof cfg, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  snprintf(dot, sizeof dot, "/tmp/schedrun-hangs-%ld.dot", (long)getpid());
  unlink(dot);
  const char *args[] = {"-q", "--dot", dot, "--trace", fifo, cfg, NULL};
  child c = start(args);
  TU_WAIT_FOR(access(dot, F_OK) == 0, "the --dot file (written before the trace)");
  kill(c.pid, SIGINT);
  char *err;
  int rc = finish(&c, "SIGINT while writing", &err);
  if (rc != 130 || !strstr(err, "while writing outputs")) fail_msg("exit %d\n%s", rc, err);
  free(err);
  unlink(fifo);
  unlink(dot);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sigint_ends_a_kernel_that_never_returns),
      cmocka_unit_test(test_sigint_ends_a_stage_that_never_returns),
      cmocka_unit_test(test_fifo_without_a_reader),
      cmocka_unit_test(test_timeout_bounds_the_process),
      cmocka_unit_test(test_first_signal_while_writing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
