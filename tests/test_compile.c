/* The compile actor driven directly by messages: sessions (the active
 * compile mode), teardown before errors, every failure reported, nothing
 * failed cached, dedup across concurrent sessions, a verified disk cache,
 * two processes sharing one cache; and NVRTC cubins for sm_80 and sm_90. */
#include <dirent.h>
#include <pthread.h>
#include <elf.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/artifact.h"
#include "compile_rig.h"

extern char **environ;


static const kdef good_a = {"good_a", "ptr", "extern \"C\" __global__ void good_a(float *p) { p[threadIdx.x] = 1; }\n"};
static const kdef good_b = {"good_b", "ptr,i32", "extern \"C\" __global__ void good_b(int *p, int v) { p[0] = v; }\n"};
static const kdef bad_x = {"bad_x", "ptr", "extern \"C\" __global__ void bad_x(float *p) {\n  p[0] = 1\n}\n"};
static const kdef bad_y = {"bad_y", "ptr", "extern \"C\" __global__ void bad_y(float *p) { nope(p); }\n"};

/* Calls fn(file, name) for every artifact under dir/target/<xx>/; returns how many. */
static int for_each_artifact(const char *dir, const char *target, void (*fn)(const char *file, const char *name)) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, target);
  DIR *d = opendir(path);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    DIR *d2 = opendir(sub);
    struct dirent *e2;
    while (d2 && (e2 = readdir(d2))) {
      if (e2->d_name[0] == '.') continue;
      if (fn) {
        char file[2048];
        snprintf(file, sizeof file, "%s/%s", sub, e2->d_name);
        fn(file, e2->d_name);
      }
      n++;
    }
    if (d2) closedir(d2);
  }
  closedir(d);
  return n;
}

static int count_artifacts(const char *dir, const char *target) { return for_each_artifact(dir, target, NULL); }

/* Fails unless the artifact verifies under the key its name carries. */
static void artifact_valid(const char *file, const char *name) {
  char key[65];
  snprintf(key, sizeof key, "%.64s", name);
  uint8_t *img;
  size_t len;
  schedrun_error_t err = {0};
  if (artifact_read(file, key, &img, &len, &err)) fail_msg("%s", err.message);
  free(img);
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}


static void test_failure_resets_mode_then_next_compiles(void **st) {
  (void)st;
  rig r;
  rig_up(&r, 2);
  kdef ks[] = {good_a, bad_x};
  rig_send_compile(&r, 1, ks, 2);
  msg m;
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_ERROR);
  assert_true(m.job == 1);
  assert_int_equal(m.body.error.code, SCHEDRUN_ECOMPILE);
  assert_string_equal(m.body.error.origin, "compile");
  assert_int_equal(m.body.error.teardown.n, 3);
  assert_string_equal(m.body.error.teardown.v[0], "reset the active compile mode");
  assert_non_null(strstr(m.body.error.teardown.v[2], "evict 1 failed"));
  assert_non_null(strstr(m.body.error.text, "kernel 'bad_x' (p1.yaml:14:3)"));
  assert_non_null(strstr(m.body.error.text, "k.cu:2"));
  assert_null(strstr(m.body.error.text, "good_a"));
  msg_free(&m);
  /* the mode was reset before the error came out */
  rig_left_after_reset(1);
  assert_int_equal(rig_stat(&r, "compile_mode_active"), 0);
  assert_int_equal(rig_stat(&r, "compile_mode"), 0);
  /* a second session compiles, on the same actor */
  kdef ok[] = {good_b};
  rig_send_compile(&r, 2, ok, 1);
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_COMPILED);
  assert_true(m.job == 2 && m.body.compiled.program == 2);
  assert_int_equal(m.body.compiled.modules.n, 1);
  assert_string_equal(m.body.compiled.modules.v[0].name, "good_b");
  assert_int_equal(m.body.compiled.misses, 1);
  uint8_t *img;
  size_t len;
  schedrun_error_t err = {0};
  assert_int_equal(artifact_read(m.body.compiled.modules.v[0].path, m.body.compiled.modules.v[0].key, &img, &len, &err),
                   SCHEDRUN_OK);
  free(img);
  msg_free(&m);
  assert_int_equal(rig_stat(&r, "compile_mode_active"), 0);
  rig_down(&r, false);
}

static void test_two_failures_reported_none_cached(void **st) {
  (void)st;
  rig r;
  rig_up(&r, 2);
  kdef ks[] = {bad_x, good_a, bad_y};
  for (int round = 0; round < 2; round++) {
    rig_send_compile(&r, 10 + (uint64_t)round, ks, 3);
    msg m;
    rig_recv(&r, &m);
    assert_int_equal(m.type, MSG_ERROR);
    assert_non_null(strstr(m.body.error.text, "kernel 'bad_x'"));
    assert_non_null(strstr(m.body.error.text, "kernel 'bad_y'"));
    assert_non_null(strstr(m.body.error.text, "nope"));
    assert_non_null(strstr(m.body.error.teardown.v[2], "evict 2 failed"));
    msg_free(&m);
    rig_left_after_reset(10 + (uint64_t)round); /* both failures, one error, after the reset */
    /* only the good kernel is cached, in memory and on disk */
    assert_int_equal(rig_stat(&r, "cache_entries"), 1);
    assert_int_equal(count_artifacts(r.dir, "host"), 1);
    assert_int_equal(rig_stat(&r, "compiles_in_flight"), 0);
  }
  /* the failures were compiled again on the second round: 3 + 2 compiles */
  assert_int_equal(rig_stat(&r, "compiles"), 5);
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s/tmp", r.dir);
  assert_int_equal(count_entries(tmp), 0); /* no temporary leftovers */
  rig_down(&r, false);
}

/* Two COMPILEs in flight at once, one failing: the failure tears the mode
 * down and resets it before its error leaves; the other finishes whichever
 * mode it ran under; a third, sent after the error, runs under a new mode
 * (the actor opened at least two), and the actor ends with none active. */
static void test_a_failure_beside_another_session(void **st) {
  (void)st;
  rig r;
  rig_up(&r, 2);
  kdef bad[] = {bad_y}, good[] = {good_a}, next[] = {good_b};
  rig_send_compile(&r, 41, bad, 1);
  rig_send_compile(&r, 42, good, 1);
  msg m[2];
  rig_recv(&r, &m[0]);
  rig_recv(&r, &m[1]);
  for (int i = 0; i < 2; i++) {
    if (m[i].job == 41) assert_int_equal(m[i].type, MSG_ERROR);
    else assert_int_equal(m[i].type, MSG_COMPILED);
    msg_free(&m[i]);
  }
  rig_left_after_reset(41);
  rig_send_compile(&r, 43, next, 1);
  msg c;
  rig_recv(&r, &c);
  assert_int_equal(c.type, MSG_COMPILED);
  assert_true(c.job == 43);
  msg_free(&c);
  assert_true(rig_stat(&r, "compile_modes") >= 2);
  assert_int_equal(rig_stat(&r, "compile_mode"), 0);
  assert_int_equal(rig_stat(&r, "compile_mode_active"), 0);
  rig_down(&r, false);
}

/* CANCEL (a shutdown) while a compile runs: the compiler is stopped, the
 * mode reset before the ECLOSED error leaves, and a COMPILE after it runs
 * under a new mode. The compiler takes four minutes over the kernel (a
 * wrapper that sleeps), so the compile cannot have finished first. */
static void test_cancel_resets_mode_then_next_compiles(void **st) {
  (void)st;
  char wdir[64];
  setenv("SCHEDRUN_CXX", rig_slow_cxx(wdir, "good_a"), 1);
  rig r;
  rig_up(&r, 1);
  kdef ks[] = {good_a};
  rig_send_compile(&r, 51, ks, 1);
  TU_WAIT_FOR(rig_slow_pid(wdir) != 0, "the compiler to start over good_a");
  pid_t cc = rig_slow_pid(wdir);
  msg c;
  msg_init(&c, MSG_CANCEL, 0, "client");
  assert_int_equal(mbox_send(r.out, &c, NULL), SCHEDRUN_OK);
  msg_free(&c);
  msg m;
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_ERROR);
  assert_int_equal(m.body.error.code, SCHEDRUN_ECLOSED);
  assert_string_equal(m.body.error.teardown.v[0], "reset the active compile mode");
  msg_free(&m);
  rig_left_after_reset(51);
  assert_true(rig_process_gone(cc)); /* drained: its worker killed and reaped it first */
  /* the next compile, of another kernel, on the same actor and pool */
  kdef ok[] = {good_b};
  rig_send_compile(&r, 52, ok, 1);
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_COMPILED);
  assert_true(m.job == 52);
  msg_free(&m);
  unsetenv("SCHEDRUN_CXX");
  rig_down(&r, false);
  fs_remove_tree(wdir);
}

static void test_dedup_across_sessions(void **st) {
  (void)st;
  rig r;
  rig_up(&r, 2);
  kdef k1[] = {good_a, good_b}, k2[] = {good_b, good_a};
  rig_send_compile(&r, 21, k1, 2);
  rig_send_compile(&r, 22, k2, 2);
  rig_send_compile(&r, 23, k1, 1);
  msg m[3];
  for (int i = 0; i < 3; i++) {
    rig_recv(&r, &m[i]);
    assert_int_equal(m[i].type, MSG_COMPILED);
  }
  /* each key compiled exactly once, whatever the order of arrival */
  assert_int_equal(rig_stat(&r, "compiles"), 2);
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++)
      for (size_t a = 0; a < m[i].body.compiled.modules.n; a++)
        for (size_t b = 0; b < m[j].body.compiled.modules.n; b++)
          if (!strcmp(m[i].body.compiled.modules.v[a].name, m[j].body.compiled.modules.v[b].name)) {
            assert_string_equal(m[i].body.compiled.modules.v[a].key, m[j].body.compiled.modules.v[b].key);
            assert_string_equal(m[i].body.compiled.modules.v[a].path, m[j].body.compiled.modules.v[b].path);
          }
    msg_free(&m[i]);
  }
  rig_down(&r, false);
}

static void corrupt(const char *path, int how) {
  char *data;
  size_t len;
  schedrun_error_t err = {0};
  assert_int_equal(fs_read_file(path, &data, &len, &err), SCHEDRUN_OK);
  FILE *f = fopen(path, "wb");
  if (how == 0) {
    data[len / 2] ^= 0x40; /* a flipped byte in the payload */
    fwrite(data, 1, len, f);
  } else if (how == 1) {
    fwrite(data, 1, len - 100, f); /* truncated */
  } else if (how == 2) {
    /* empty */
  } else {
    data[100] ^= 1; /* the header's key: a foreign entry */
    fwrite(data, 1, len, f);
  }
  fclose(f);
  free(data);
}

static void test_corrupt_entries_rebuilt(void **st) {
  (void)st;
  rig r;
  rig_up(&r, 1);
  kdef ks[] = {good_a};
  rig_send_compile(&r, 30, ks, 1);
  msg m;
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_COMPILED);
  char *path = strdup(m.body.compiled.modules.v[0].path), *key = strdup(m.body.compiled.modules.v[0].key);
  msg_free(&m);
  for (int how = 0; how < 4; how++) {
    corrupt(path, how);
    uint8_t *img;
    size_t len;
    schedrun_error_t err = {0};
    assert_int_equal(artifact_read(path, key, &img, &len, &err), SCHEDRUN_EIO);
    schedrun_error_clear(&err);
    rig_restart(&r, 1); /* forget the memory cache: the disk must be checked */
    rig_send_compile(&r, 31 + (uint64_t)how, ks, 1);
    rig_recv(&r, &m);
    assert_int_equal(m.type, MSG_COMPILED);
    assert_int_equal(m.body.compiled.misses, 1); /* detected, recompiled */
    assert_int_equal(m.body.compiled.hits, 0);
    msg_free(&m);
    assert_int_equal(artifact_read(path, key, &img, &len, &err), SCHEDRUN_OK); /* replaced */
    free(img);
    rig_restart(&r, 1);
    rig_send_compile(&r, 41 + (uint64_t)how, ks, 1);
    rig_recv(&r, &m);
    assert_int_equal(m.body.compiled.hits, 1); /* and now a disk hit */
    msg_free(&m);
  }
  free(path);
  free(key);
  rig_down(&r, false);
}

static void test_two_processes_one_cache(void **st) {
  (void)st;
  char dir[] = "/tmp/schedrun-shared-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char env_cache[128];
  snprintf(env_cache, sizeof env_cache, "SCHEDRUN_CACHE_DIR=%s", dir);
  char cfg[1024];
  snprintf(cfg, sizeof cfg, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--quiet", cfg, NULL};
  /* the environment as it is (sanitizer options included), with the cache moved */
  size_t n = 0;
  while (environ[n]) n++;
  char **envp = calloc(n + 2, sizeof *envp);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "SCHEDRUN_CACHE_DIR=", 16) != 0) envp[k++] = environ[i];
  envp[k++] = env_cache;
  pid_t pids[2];
  for (int i = 0; i < 2; i++) assert_int_equal(posix_spawn(&pids[i], argv[0], NULL, NULL, argv, envp), 0);
  for (int i = 0; i < 2; i++) {
    int status;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  free(envp);
  /* one valid entry per kernel, nothing partial */
  assert_int_equal(count_artifacts(dir, "host"), 2);
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s/tmp", dir);
  assert_int_equal(count_entries(tmp), 0);
  int valid = for_each_artifact(dir, "host", artifact_valid);
  assert_int_equal(valid, 2);
  fs_remove_tree(dir);
}

/* ---- NVRTC ---- */

static const struct {
  const char *name, *params, *source;
} cuda_kernels[] = {
    {"saxpy", "f32,ptr,ptr,i32",
     "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
     "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = a * x[i] + y[i];\n}\n"},
    {"fill_slice", "ptr,i32,f32",
     "extern \"C\" __global__ void fill_slice(float *p, int n, float v) {\n"
     "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = v;\n}\n"},
    {"histogram", "ptr,i32,ptr,i32",
     "extern \"C\" __global__ void histogram(const int *values, int n, unsigned int *buckets, int nbuckets) {\n"
     "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
     "  if (i < n) atomicAdd(&buckets[values[i] % nbuckets], 1u);\n}\n"},
    {"wide", "i64,u64,f64,u32,ptr",
     "extern \"C\" __global__ void wide(long long a, unsigned long long b, double c, unsigned d, double *o) {\n"
     "  o[0] = a + b + c + d;\n}\n"},
};

/* Every case of test_nvrtc_cubins, with NVRTC in this process (cache_dir
 * NULL) or in its compile process (built under cache_dir). */
static void nvrtc_cases(void *ctx, const char *cache_dir, const char *tmp) {
  schedrun_error_t err = {0};
  const char *archs[] = {"sm_80", "sm_90"};
  for (size_t k = 0; k < sizeof cuda_kernels / sizeof cuda_kernels[0]; k++)
    for (int a = 0; a < 2; a++) {
      prog_type params[8];
      int np = gpu_params_parse(cuda_kernels[k].params, params, 8);
      gpu_compile_req req = {cuda_kernels[k].name, cuda_kernels[k].name, cuda_kernels[k].source, "k.cu", 1,
                             params, (uint32_t)np, archs[a]};
      req.cache_dir = cache_dir;
      uint8_t *img = NULL;
      size_t len = 0;
      char *log = NULL;
      if (gpu_cuda_target.compile(ctx, &req, tmp, &img, &len, &log, &err))
        fail_msg("%s for %s: %s\n%s", cuda_kernels[k].name, archs[a], err.message, log ? log : "");
      assert_int_equal(gpu_cubin_arch(img, len), a == 0 ? 80 : 90);
      free(img);
      free(log);
    }
  /* wrong params, a missing extern "C", a missing entry, a syntax error */
  prog_type p4[] = {PT_F32, PT_PTR, PT_PTR, PT_F32};
  struct {
    const char *src, *entry, *needle_err, *needle_log;
    uint32_t np;
  } bad[] = {
      {cuda_kernels[0].source, "saxpy", "does not compile", "parameter 4 is declared f32", 4},
      {"__global__ void saxpy(float a, const float *x, float *y, float n) {}\n", "saxpy", "is not extern \"C\"", NULL, 4},
      {"extern \"C\" __global__ void other(float a, const float *x, float *y, float n) {}\n", "saxpy", "does not compile",
       "saxpy", 4},
      {"extern \"C\" __global__ void saxpy(float a, const float *x, float *y, float n) { a = }\n", "saxpy",
       "does not compile", "k.cu(1)", 4},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gpu_compile_req req = {"saxpy", bad[i].entry, bad[i].src, "k.cu", 1, p4, bad[i].np, "sm_90"};
    req.cache_dir = cache_dir;
    uint8_t *img = NULL;
    size_t len = 0;
    char *log = NULL;
    assert_int_equal(gpu_cuda_target.compile(ctx, &req, tmp, &img, &len, &log, &err), SCHEDRUN_ECOMPILE);
    assert_null(img);
    if (!strstr(err.message, bad[i].needle_err)) fail_msg("case %zu: %s", i, err.message);
    if (bad[i].needle_log && (!log || !strstr(log, bad[i].needle_log)))
      fail_msg("case %zu: log %s", i, log ? log : "(none)");
    schedrun_error_clear(&err);
    free(log);
  }
  /* an architecture NVRTC does not know is named, with the ones it does (it
   * would only say NVRTC_ERROR_INVALID_OPTION, with an empty log); one newer
   * than all of them gets PTX for the newest, for the driver to compile */
  prog_type sp[] = {PT_F32, PT_PTR, PT_PTR, PT_I32};
  gpu_compile_req old = {"saxpy", "saxpy", cuda_kernels[0].source, "k.cu", 1, sp, 4, "sm_10"};
  old.cache_dir = cache_dir;
  uint8_t *img = NULL;
  size_t len = 0;
  char *log = NULL;
  assert_int_equal(gpu_cuda_target.compile(ctx, &old, tmp, &img, &len, &log, &err), SCHEDRUN_EBACKEND);
  if (!strstr(err.message, "cannot compile for sm_10; it supports sm_") || !strstr(err.message, "sm_90"))
    fail_msg("%s", err.message);
  schedrun_error_clear(&err);
  free(log);
  log = NULL;
  gpu_compile_req future = old;
  future.arch = "sm_999";
  if (gpu_cuda_target.compile(ctx, &future, tmp, &img, &len, &log, &err)) fail_msg("sm_999: %s", err.message);
  assert_int_equal(gpu_cubin_arch(img, len), -1); /* not a cubin: PTX text */
  assert_int_equal(img[len - 1], '\0');
  assert_non_null(strstr((const char *)img, ".target sm_"));
  assert_non_null(strstr((const char *)img, ".entry saxpy("));
  free(img);
  free(log);
}

static void test_nvrtc_cubins(void **st) {
  (void)st;
  void *ctx = NULL;
  schedrun_error_t err = {0};
  if (gpu_cuda_target.open(&ctx, &err)) {
    /* the real compiler is the CUDA toolkit's, which a machine may not have:
     * then there is nothing to check it against (the CUDA path itself runs
     * on the driver double, which brings its own NVRTC) */
    if (err.message && strstr(err.message, "no libnvrtc.so found")) {
      printf("[  SKIPPED ] NVRTC is not installed here: %s\n", err.message);
      schedrun_error_clear(&err);
      skip();
    }
    fail_msg("NVRTC: %s", err.message);
  }
  char *id = NULL;
  assert_int_equal(gpu_cuda_target.identity(ctx, &id, &err), SCHEDRUN_OK);
  assert_non_null(strstr(id, "nvrtc "));
  free(id);
  char dir[] = "/tmp/schedrun-nvrtc-XXXXXX";
  assert_non_null(mkdtemp(dir));
  nvrtc_cases(ctx, NULL, dir);
  nvrtc_cases(ctx, dir, dir); /* the same, through the compile process */
  char worker[128];
  snprintf(worker, sizeof worker, "%s/nvrtc-worker", dir);
  assert_int_equal(count_entries(worker), 1);
  fs_remove_tree(dir);
  gpu_cuda_target.close(ctx);
  /* not a cubin */
  assert_int_equal(gpu_cubin_arch((const uint8_t *)"nope", 4), -1);
}

/* A second COMPILE for a job whose session is still open opens nothing: its
 * ERROR says so (and not that it reset a mode it never touched), and the
 * first session goes on to compile. */
static void test_second_session_for_a_job_refused_truthfully(void **st) {
  (void)st;
  rig r;
  rig_up(&r, 1);
  char src[256];
  snprintf(src, sizeof src, "extern \"C\" __global__ void once(int *p) { p[0] = %llu; }\n",
           (unsigned long long)(now_ns() % 1000000)); /* not in the cache: it really compiles */
  kdef k = {"once", "ptr", src};
  rig_send_compile(&r, 9, &k, 1);
  rig_send_compile(&r, 9, &k, 1);
  msg m;
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_ERROR);
  assert_int_equal(m.body.error.code, SCHEDRUN_EPROTO);
  assert_non_null(strstr(m.body.error.text, "a compile session for job 9 is already active"));
  assert_int_equal(m.body.error.teardown.n, 1);
  assert_string_equal(m.body.error.teardown.v[0], "open no compile session: the active compile mode is unchanged");
  msg_free(&m);
  rig_recv(&r, &m);
  assert_int_equal(m.type, MSG_COMPILED); /* the first session was left alone */
  assert_true(m.job == 9);
  msg_free(&m);
  assert_int_equal(rig_stat(&r, "compile_mode_active"), 0);
  rig_down(&r, false);
}

/* ---- through the API ---- */

static const char one_kernel_yaml[] = "version: 1\n"
                                      "kernels:\n"
                                      "  k:\n"
                                      "    params: [ptr]\n"
                                      "    source: |\n"
                                      "      extern \"C\" __global__ void k(int *o) { o[0] = %d; }\n"
                                      "buffers:\n"
                                      "  o: {type: i32, count: 1}\n"
                                      "program:\n"
                                      "  - launch: {kernel: k, grid: 1, block: 1, args: [o]}\n"
                                      "expect:\n"
                                      "  o: {values: [%d]}\n";

static schedrun_t *open_cached(const char *dir) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host";
  o.cache_dir = dir;
  schedrun_t *s = NULL;
  schedrun_error_t err = {0};
  if (schedrun_open(&s, &o, &err)) fail_msg("%s", err.message);
  return s;
}

static int run_value(schedrun_t *s, int v, schedrun_error_t *err) {
  char yaml[1024];
  snprintf(yaml, sizeof yaml, one_kernel_yaml, v, v);
  schedrun_program_t *p = NULL;
  schedrun_report_t *r = NULL;
  int rc = schedrun_program_load_string(s, yaml, "k.yaml", &p, err);
  if (rc == SCHEDRUN_OK) rc = schedrun_run(s, p, NULL, &r, err);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  return rc;
}

/* The cache directory emptied under a living scheduler: the kernel it knew
 * compiles again instead of failing with "cannot open". */
static void test_cache_dir_removed_while_running(void **st) {
  (void)st;
  char dir[] = "/tmp/schedrun-gone-XXXXXX";
  assert_non_null(mkdtemp(dir));
  schedrun_t *s = open_cached(dir);
  schedrun_error_t err = {0};
  if (run_value(s, 41, &err)) fail_msg("%s", err.message);
  fs_remove_tree(dir);
  if (run_value(s, 41, &err)) fail_msg("after the cache was removed: %s", err.message);
  assert_true(count_artifacts(dir, "host") >= 1); /* compiled again, into a fresh directory */
  schedrun_close(&s);
  fs_remove_tree(dir);
}

/* A cache that cannot hold artifacts is the disk's failure, not the
 * kernel's: SCHEDRUN_EIO naming the path and the cause. */
static void test_cache_failure_is_not_a_compile_error(void **st) {
  (void)st;
  char dir[] = "/tmp/schedrun-badcache-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s/tmp", dir);
  FILE *f = fopen(tmp, "w"); /* where compiles get their directories: a file */
  assert_non_null(f);
  fclose(f);
  schedrun_t *s = open_cached(dir);
  schedrun_error_t err = {0};
  int v = (int)(now_ns() % 100000) + 7;
  int rc = run_value(s, v, &err);
  if (rc != SCHEDRUN_EIO || !strstr(err.message, dir) || !strstr(err.message, "Not a directory") ||
      !strstr(err.message, "teardown: reset the active compile mode; drain 0 compiles") ||
      !strstr(err.message, "evict 1 failed cache entries"))
    fail_msg("status %d: %s", rc, err.message ? err.message : "");
  schedrun_error_clear(&err);
  /* the disk mended, the next compile (another kernel) works on the same scheduler */
  assert_int_equal(unlink(tmp), 0);
  if (run_value(s, v + 1, &err)) fail_msg("the next compile: %s", err.message);
  schedrun_close(&s);
  fs_remove_tree(dir);
}

typedef struct seen_failure {
  schedrun_t *s;
  int status, active_at_completion, status_rc;
  char text[4096];
} seen_failure;

static void on_failed(schedrun_job_t job, schedrun_job_result_t *r, void *user) {
  (void)job;
  seen_failure *sf = user;
  sf->status = schedrun_job_result_info(r)->status;
  snprintf(sf->text, sizeof sf->text, "%s", schedrun_job_result_error(r));
  sf->status_rc = schedrun_compile_status(sf->s, &sf->active_at_completion, NULL, NULL);
  schedrun_job_result_free(&r);
}

/* The teardown runs before the error leaves: when the failed compile's job
 * completes, the mode is already reset, and the error lists what ran. */
static void test_teardown_before_the_error_arrives(void **st) {
  (void)st;
  char dir[] = "/tmp/schedrun-order-XXXXXX";
  assert_non_null(mkdtemp(dir));
  schedrun_t *s = open_cached(dir);
  seen_failure sf = {.s = s, .status = 1};
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  const char *bad = "version: 1\n"
                    "kernels:\n"
                    "  k:\n"
                    "    params: [ptr]\n"
                    "    source: |\n"
                    "      extern \"C\" __global__ void k(int *o) { o[0] = nope; }\n"
                    "buffers:\n"
                    "  o: {type: i32, count: 1}\n"
                    "program:\n"
                    "  - launch: {kernel: k, grid: 1, block: 1, args: [o]}\n";
  if (schedrun_program_load_string(s, bad, "bad.yaml", &p, &err)) fail_msg("%s", err.message);
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.on_complete = on_failed;
  jo.user = &sf;
  schedrun_job_t id;
  assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait_all(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  assert_int_equal(sf.status, SCHEDRUN_ECOMPILE);
  assert_int_equal(sf.status_rc, SCHEDRUN_OK);
  assert_int_equal(sf.active_at_completion, 0);
  if (!strstr(sf.text, "teardown: reset the active compile mode; drain 0 compiles") ||
      !strstr(sf.text, "evict 1 failed cache entries"))
    fail_msg("the error does not carry its teardown: %s", sf.text);
  schedrun_program_free(&p);
  schedrun_close(&s);
  fs_remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_failure_resets_mode_then_next_compiles),
      cmocka_unit_test(test_two_failures_reported_none_cached),
      cmocka_unit_test(test_a_failure_beside_another_session),
      cmocka_unit_test(test_cancel_resets_mode_then_next_compiles),
      cmocka_unit_test(test_dedup_across_sessions),
      cmocka_unit_test(test_corrupt_entries_rebuilt),
      cmocka_unit_test(test_two_processes_one_cache),
      cmocka_unit_test(test_nvrtc_cubins),
      cmocka_unit_test(test_second_session_for_a_job_refused_truthfully),
      cmocka_unit_test(test_cache_dir_removed_while_running),
      cmocka_unit_test(test_cache_failure_is_not_a_compile_error),
      cmocka_unit_test(test_teardown_before_the_error_arrives),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
