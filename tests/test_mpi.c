/*
 * sched-run across MPI ranks: 3 ranks on this machine over MPI's TCP
 * transport (oversubscribed) give the same outputs, element by element, as
 * one process; the kernels are compiled by one rank per compile target and
 * taken by the others; a rank that stops answering or is killed ends the run
 * with a non-zero status, naming the rank, and never hangs; a Slurm job of several
 * tasks started without MPI is refused.
 */
#include <dirent.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

extern char **environ;

#define RANKS "3"

static char *mpirun_argv[40];

/* mpirun -n 3 over TCP, then sched-run and its arguments (NULL-ended). */
static char **mpirun(const char *const *args) {
  size_t n = 0;
  /* In the sanitized build the ranks run with ASan and UBSan but without the
   * leak check at exit: Open MPI unloads its plugins before it runs, so what
   * they keep cannot be told from a leak of ours (no module to suppress). */
  const char *head[] = {tu_env("SCHEDRUN_MPIRUN"), "-n", RANKS, "--oversubscribe", "--mca", "btl", "self,tcp",
                        "-x", "LSAN_OPTIONS=detect_leaks=0"};
  for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) mpirun_argv[n++] = (char *)head[i];
  /* mpirun passes on only the variables it is told to */
  const char *pass[] = {"TSAN_OPTIONS", "GLIBC_TUNABLES", "SCHEDRUN_CACHE_DIR"};
  for (size_t i = 0; i < sizeof pass / sizeof pass[0]; i++)
    if (getenv(pass[i])) {
      mpirun_argv[n++] = "-x";
      mpirun_argv[n++] = (char *)pass[i];
    }
  mpirun_argv[n++] = (char *)tu_env("SCHEDRUN_RUN");
  for (size_t i = 0; args[i] && n < 39; i++) mpirun_argv[n++] = (char *)args[i];
  mpirun_argv[n] = NULL;
  return mpirun_argv;
}

/* Every .npy under `a` (relative path rel) equals its twin under `b`, byte
 * for byte after the same header; a difference names the element. Returns
 * how many files were compared. */
static int compare_tree(const char *a, const char *b, const char *rel) {
  char da[1024];
  snprintf(da, sizeof da, "%s/%s", a, rel);
  DIR *d = opendir(da);
  assert_non_null(d);
  int files = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char sub[512], pa[1024], pb[1024];
    snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
    snprintf(pa, sizeof pa, "%s/%s", a, sub);
    snprintf(pb, sizeof pb, "%s/%s", b, sub);
    struct stat st;
    assert_int_equal(stat(pa, &st), 0);
    if (S_ISDIR(st.st_mode)) {
      files += compare_tree(a, b, sub);
      continue;
    }
    size_t la = 0, lb = 0;
    char *xa = tu_slurp(pa, &la), *xb = tu_slurp(pb, &lb);
    if (!xb) fail_msg("%s is missing from the MPI run's output", sub);
    assert_int_equal(la, lb);
    /* NumPy v1 header: magic, version, 2-byte header length */
    size_t header = 10 + (size_t)(unsigned char)xa[8] + 256u * (unsigned char)xa[9];
    assert_true(header <= la);
    assert_memory_equal(xa, xb, header);
    const char *descr = strstr(xa, "'descr': '");
    size_t elem = descr ? (size_t)atoi(descr + 12) : 1;
    if (elem == 0) elem = 1;
    for (size_t i = header; i < la; i++)
      if (xa[i] != xb[i]) fail_msg("%s: element %zu differs between one process and 3 ranks", sub, (i - header) / elem);
    free(xa);
    free(xb);
    files++;
  }
  closedir(d);
  return files;
}

static json_object *json_of(const char *out) {
  json_object *j = json_tokener_parse(out);
  if (!j) fail_msg("not JSON: %s", out);
  return j;
}

static int64_t geti(json_object *o, const char *key) {
  json_object *v;
  assert_true(json_object_object_get_ex(o, key, &v));
  return json_object_get_int64(v);
}

/* Runs config in one process and on 3 ranks, with every buffer written;
 * compares the outputs and checks the ranks' counters. */
static void same_as_one_process(const char *config, int kernels, const char *repeat, bool everyone) {
  char path[512], one[] = "/tmp/schedrun-mpi-one-XXXXXX", many[] = "/tmp/schedrun-mpi-many-XXXXXX";
  snprintf(path, sizeof path, "%s/%s", tu_env("SCHEDRUN_CONFIGS"), config);
  assert_non_null(mkdtemp(one));
  assert_non_null(mkdtemp(many));
  char *out, *err;
  char *single[] = {(char *)tu_env("SCHEDRUN_RUN"), "-q", "--repeat", (char *)repeat, "--output-all", one, path, NULL};
  int rc = tu_run(single, &out, &err);
  if (rc != 0) fail_msg("one process: exit %d: %s", rc, err);
  free(out);
  free(err);
  /* a private cache per rank: what a rank did not compile it must have taken */
  const char *args[] = {"--no-cache", "--json", "--repeat", repeat, "--output-all", many, path, NULL};
  rc = tu_run(mpirun(args), &out, &err);
  if (rc != 0) fail_msg("3 ranks: exit %d\n%s\n%s", rc, out, err);
  json_object *j = json_of(out);
  assert_string_equal(json_object_get_string(json_object_object_get(j, "status")), "verified");
  json_object *ranks;
  assert_true(json_object_object_get_ex(j, "ranks", &ranks));
  assert_int_equal(json_object_array_length(ranks), 3);
  int64_t jobs = 0;
  for (size_t r = 0; r < 3; r++) {
    json_object *rk = json_object_array_get_idx(ranks, r);
    assert_int_equal(geti(rk, "rank"), (int64_t)r);
    /* least loaded first: with many jobs at once every rank gets some (with
     * few, a buffer set's jobs stay with the rank holding its recording) */
    if (everyone) assert_true(geti(rk, "jobs") > 0);
    jobs += geti(rk, "jobs");
    json_object *devs;
    assert_true(json_object_object_get_ex(rk, "devices", &devs));
    assert_true(json_object_array_length(devs) > 0);
    char want[32];
    snprintf(want, sizeof want, "r%zu/", r);
    assert_non_null(strstr(json_object_get_string(json_object_array_get_idx(devs, 0)), want));
    /* rank 0 compiles for the one target they share; 1 and 2 take its artifacts */
    assert_int_equal(geti(rk, "kernels_compiled"), r == 0 ? kernels : 0);
    assert_int_equal(geti(rk, "artifacts_received"), r == 0 ? 0 : kernels);
  }
  assert_int_equal(jobs, geti(j, "jobs"));
  assert_int_equal(geti(j, "jobs_verified"), geti(j, "jobs"));
  json_object_put(j);
  int files = compare_tree(one, many, "");
  assert_true(files >= 2);
  free(out);
  free(err);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", one, many);
  assert_int_equal(system(cmd), 0);
}

static void test_demo_same_as_one_process(void **st) {
  (void)st;
  same_as_one_process("multi_device_demo.yaml", 2, "2", true);
}

static void test_loops_same_as_one_process(void **st) {
  (void)st;
  same_as_one_process("nested_loops.yaml", 1, "24", false);
}

static void test_while_same_as_one_process(void **st) {
  (void)st;
  same_as_one_process("while_countdown.yaml", 1, "24", false);
}

/* The parent of process pid, or 0. */
static pid_t parent_of(const char *pid) {
  char p[300];
  snprintf(p, sizeof p, "/proc/%s/stat", pid);
  char *stat = tu_slurp(p, NULL);
  const char *after = stat ? strrchr(stat, ')') : NULL; /* the command name may hold spaces */
  int ppid = 0;
  if (after && sscanf(after + 2, "%*c %d", &ppid) != 1) ppid = 0;
  free(stat);
  return (pid_t)ppid;
}

/* The pid of rank `rank`'s sched-run (its environment says so) started by
 * launcher `mpirun` (a rank of an earlier run may still be ending), or 0. */
static pid_t find_rank(int rank, pid_t mpirun) {
  char want[64];
  snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
  DIR *d = opendir("/proc");
  pid_t found = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) && !found) {
    if (parent_of(e->d_name) != mpirun) continue;
    char p[300];
    snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
    size_t n = 0;
    char *cmd = tu_slurp(p, &n);
    const char *base = cmd ? strrchr(cmd, '/') : NULL; /* argv[0]: sched-run itself, not a worker it started */
    bool ours = base && n > 0 && !strcmp(base, "/sched-run");
    free(cmd);
    if (!ours) continue;
    snprintf(p, sizeof p, "/proc/%s/environ", e->d_name);
    char *env = tu_slurp(p, &n);
    for (size_t i = 0; env && i < n; i += strlen(env + i) + 1)
      if (!strcmp(env + i, want)) found = (pid_t)atoi(e->d_name);
    free(env);
  }
  if (d) closedir(d);
  return found;
}

/* The CPU time (clock ticks) that the workers of process lib have used:
 * more than none once kernels run there. */
static long worker_ticks(pid_t lib) {
  long ticks = 0;
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char p[300];
    snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
    size_t n = 0;
    char *cmd = tu_slurp(p, &n);
    bool worker = false;
    if (cmd && n) {
      char *argv[4] = {cmd, NULL, NULL, NULL};
      int argc = 1;
      for (size_t i = strlen(cmd) + 1; i < n && argc < 3; i += strlen(cmd + i) + 1) argv[argc++] = cmd + i;
      worker = tu_is_worker_of(argc, argv, &lib);
    }
    free(cmd);
    if (!worker) continue;
    snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
    char *stat = tu_slurp(p, &n);
    const char *after = stat ? strrchr(stat, ')') : NULL; /* the command name may hold spaces */
    unsigned long ut = 0, st = 0;
    if (after && sscanf(after + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
      ticks += (long)(ut + st);
    free(stat);
  }
  if (d) closedir(d);
  return ticks;
}

/* A long run on 3 ranks; once rank 1's (or rank 2's) devices have run
 * kernels (its workers used 5 clock ticks of CPU: jobs are flowing), `sig`
 * goes to it. The run must end non-zero, naming that rank:
 * a stopped rank is found by rank 0's heartbeats (nothing heard for
 * lost_after_ms), a killed one by mpirun. Only a hang fails on time. */
static void rank_fails(int sig, bool rank0) {
  char path[512], outp[] = "/tmp/schedrun-mpi-kill-XXXXXX";
  snprintf(path, sizeof path, "%s/multi_device_demo.yaml", tu_env("SCHEDRUN_CONFIGS"));
  int fd = mkstemp(outp);
  assert_true(fd >= 0);
  /* a stopped rank 1 or 2: rank 0 reports the run, with the jobs never
   * started in one failure line of the JSON report */
  bool report = sig == SIGSTOP && !rank0;
  const char *args[] = {"--no-cache", "--repeat", "100000", report ? "--json" : path, report ? path : NULL, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, tu_env("SCHEDRUN_MPIRUN"), &fa, NULL, mpirun(args), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  pid_t rank_pid[3] = {0, 0, 0};
  TU_WAIT_FOR((rank_pid[1] = find_rank(1, pid)) > 0 && (rank_pid[2] = find_rank(2, pid)) > 0, "ranks 1 and 2 to start");
  /* the victim: the first of ranks 1 and 2 whose devices run jobs (their
   * workers used CPU time). On a machine so busy that a rank went unheard
   * past rank 0's limit it is lost already and gets no jobs: the other one
   * is taken then. */
  int status = 0, vr = 0;
  uint64_t t_wait = tu_now_ns();
  while (!vr) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      char *early = tu_slurp(outp, NULL);
      fail_msg("the run ended before ranks 1 and 2 ran jobs:\n%s", early ? early : "");
    }
    for (int r = 1; r <= 2 && !vr; r++)
      if (worker_ticks(rank_pid[r]) >= 5) vr = r;
    if (!vr && tu_now_ns() - t_wait > TU_PATIENCE_NS) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      char *none = tu_slurp(outp, NULL);
      fail_msg("waited %d s for rank 1 or 2 to run jobs:\n%s", TU_PATIENCE_MS / 1000, none ? none : "");
    }
    usleep(10000);
  }
  if (rank0) TU_WAIT_FOR((rank_pid[0] = find_rank(0, pid)) > 0, "rank 0 to be found");
  if (rank0) vr = 0;
  pid_t victim = rank_pid[vr];
  assert_int_equal(kill(victim, sig), 0);
  uint64_t t0 = tu_now_ns();
  pid_t w = 0;
  while ((w = waitpid(pid, &status, WNOHANG)) == 0 && tu_now_ns() - t0 < TU_PATIENCE_NS) usleep(100000);
  double took = (double)(tu_now_ns() - t0) / 1e9;
  if (w == 0) { /* it hung: end it, then fail */
    kill(victim, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    fail_msg("the run did not end within %d s of the signal", TU_PATIENCE_MS / 1000);
  }
  assert_int_equal(w, pid);
  size_t n = 0;
  char *out = tu_slurp(outp, &n);
  unlink(outp);
  close(fd);
  if (kill(victim, 0) == 0) kill(victim, SIGKILL); /* never left behind */
  assert_true(WIFEXITED(status) || WIFSIGNALED(status));
  assert_true(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
  char named[16];
  snprintf(named, sizeof named, "rank %d", vr);
  if (!strstr(out, named)) fail_msg("the output does not name %s (it ended %.1f s after the signal):\n%s", named, took, out);
  char range[160];
  snprintf(range, sizeof range, "to run 99999, job 63, device -: %s: not started: rank %d (host ",
           schedrun_strerror(SCHEDRUN_ELOST), vr);
  if (report && !strstr(out, range)) fail_msg("no failure line for the jobs never started (%s):\n%s", range, out);
  /* rank 0 cannot say it was lost: a serving rank does, in its own words */
  if (rank0 && (!strstr(out, "rank 0 (host ") || !strstr(out, "lost: nothing heard from it")))
    fail_msg("no rank says that rank 0 was lost:\n%s", out);
  free(out);
}

/* Stopped, it answers nothing: rank 0's heartbeats find it lost. */
static void test_stopped_rank(void **st) {
  (void)st;
  rank_fails(SIGSTOP, false);
}

/* Rank 0 stopped: the serving ranks find it lost, and one of them says so
 * (their output is otherwise silenced). */
static void test_stopped_rank_0(void **st) {
  (void)st;
  rank_fails(SIGSTOP, true);
}

/* Killed: mpirun sees it exit and ends the job, naming it. */
static void test_killed_rank(void **st) {
  (void)st;
  rank_fails(SIGKILL, false);
}

/* A rank that cannot load the program (its kernel file is not there: the
 * ranks run in different directories and read a config from standard input,
 * whose files are relative to the current directory) ends the run with
 * exit 2, naming the rank, the place in the config and the file. */
static void test_rank_cannot_load(void **st) {
  (void)st;
  char a[] = "/tmp/schedrun-mpi-a-XXXXXX", b[] = "/tmp/schedrun-mpi-b-XXXXXX", cmd[2048];
  assert_non_null(mkdtemp(a));
  assert_non_null(mkdtemp(b));
  snprintf(cmd, sizeof cmd,
           "mkdir '%s/kernels' && cp '%s/kernels/histogram.cu' '%s/kernels/' && "
           "'%s' --oversubscribe --mca btl self,tcp -x LSAN_OPTIONS=detect_leaks=0 "
           "-n 1 -wdir '%s' '%s' --no-cache - : -n 2 -wdir '%s' '%s' --no-cache - < '%s/histogram.yaml'",
           a, tu_env("SCHEDRUN_CONFIGS"), a, tu_env("SCHEDRUN_MPIRUN"), a, tu_env("SCHEDRUN_RUN"), b,
           tu_env("SCHEDRUN_RUN"), tu_env("SCHEDRUN_CONFIGS"));
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  char *out, *err;
  int rc = tu_run(argv, &out, &err);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", a, b);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(rc, 2);
  if (!strstr(err, "cannot load the program: <stdin>:") || !strstr(err, "kernels/histogram.cu") ||
      (!strstr(err, "rank 1 (host ") && !strstr(err, "rank 2 (host ")))
    fail_msg("not named:\n%s%s", out, err);
  free(out);
  free(err);
}

/* A rank of another compile target (rank 1 on CUDA devices, the driver
 * double; rank 0 on host ones) whose kernel does not compile there: the
 * error reaches rank 0 whole, with the kernel, its place, NVRTC's log and
 * the teardown, and the run ends with exit 3 before any job is placed. */
static void test_rank_compile_error_reaches_rank_0(void **st) {
  (void)st;
  const char *dbl = getenv("SCHEDRUN_CUDA_DOUBLE_LIB");
  if (!dbl || !*dbl) {
    printf("[  SKIPPED ] no CUDA driver double in this build\n");
    skip();
  }
  char state[] = "/tmp/schedrun-mpi-dbl-XXXXXX", cmd[4096];
  assert_non_null(mkdtemp(state));
  const char *cfg = tu_write_temp(0, "nvbad.yaml",
                                  "version: 1\n"
                                  "kernels:\n"
                                  "  k:\n"
                                  "    params: [ptr]\n"
                                  "    source: |\n"
                                  "      extern \"C\" __global__ void k(int *o) {\n"
                                  "      #ifdef __CUDACC_RTC__\n"
                                  "        o[0] = not_on_cuda;\n"
                                  "      #else\n"
                                  "        o[0] = 7;\n"
                                  "      #endif\n"
                                  "      }\n"
                                  "buffers:\n"
                                  "  o: {type: i32, count: 1}\n"
                                  "program:\n"
                                  "  - launch: {kernel: k, grid: 1, block: 1, args: [o]}\n"
                                  "expect:\n"
                                  "  o: {values: [7]}\n");
  snprintf(cmd, sizeof cmd,
           "'%s' --oversubscribe --mca btl self,tcp -x LSAN_OPTIONS=detect_leaks=0 -x SCHEDRUN_CACHE_DIR "
           "-n 1 '%s' --jobs 4 '%s' : -n 1 -x SCHEDRUN_CUDA_LIBRARY='%s' -x SCHEDRUN_NVRTC_LIBRARY='%s' "
           "-x SCHEDRUN_CUDA_DOUBLE_DIR='%s' '%s' --jobs 4 '%s'",
           tu_env("SCHEDRUN_MPIRUN"), tu_env("SCHEDRUN_RUN"), cfg, dbl, dbl, state, tu_env("SCHEDRUN_RUN"), cfg);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  char *out, *err;
  int rc = tu_run(argv, &out, &err);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", state);
  assert_int_equal(system(cmd), 0);
  if (rc != 3 || !strstr(err, "rank 1 (host ") || !strstr(err, "cannot compile the program: kernel 'k' (") ||
      !strstr(err, "nvbad.yaml:3:3): kernel 'k' does not compile for sm_") || !strstr(err, "not_on_cuda") ||
      !strstr(err, "teardown: reset the active compile mode"))
    fail_msg("exit %d:\n%s%s", rc, out, err);
  free(out);
  free(err);
}

/* srun without --mpi=pmix starts N singletons: each refuses. */
static void test_singleton_refused(void **st) {
  (void)st;
  char path[512];
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  setenv("SLURM_NTASKS", "4", 1);
  char *out, *err;
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "-q", path, NULL};
  int rc = tu_run(argv, &out, &err);
  unsetenv("SLURM_NTASKS");
  assert_int_equal(rc, 2);
  assert_non_null(strstr(err, "SLURM_NTASKS is 4"));
  assert_non_null(strstr(err, "srun --mpi=pmix"));
  assert_string_equal(out, "");
  free(out);
  free(err);
  setenv("SLURM_NTASKS", "1", 1); /* one task is one process: fine */
  rc = tu_run(argv, &out, &err);
  unsetenv("SLURM_NTASKS");
  assert_int_equal(rc, 0);
  free(out);
  free(err);
}

int main(void) {
  /* children are waited for here: a SIGCHLD ignored by whoever started the
   * suite would have them reaped before waitpid sees them */
  signal(SIGCHLD, SIG_DFL);
  if (geteuid() == 0) { /* Open MPI refuses root unless told */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_singleton_refused),       cmocka_unit_test(test_rank_compile_error_reaches_rank_0),
      cmocka_unit_test(test_demo_same_as_one_process),
      cmocka_unit_test(test_loops_same_as_one_process), cmocka_unit_test(test_while_same_as_one_process),
      cmocka_unit_test(test_stopped_rank),            cmocka_unit_test(test_killed_rank),
      cmocka_unit_test(test_stopped_rank_0),
      cmocka_unit_test(test_rank_cannot_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
