#include "gpu/backend.h"
#include "test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char dirs[8][64];
static char paths[8][256];

const char *tu_write_temp(int slot, const char *name, const char *text) {
  if (!dirs[slot][0]) {
    snprintf(dirs[slot], sizeof dirs[slot], "/tmp/schedrun-test-XXXXXX");
    if (!mkdtemp(dirs[slot])) return NULL;
  }
  snprintf(paths[slot], sizeof paths[slot], "%s/%s", dirs[slot], name);
  FILE *f = fopen(paths[slot], "w");
  if (!f) return NULL;
  fputs(text, f);
  fclose(f);
  return paths[slot];
}

schedrun_t *tu_open_tuning(const char *cache, int retune) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  o.cache_dir = cache;
  o.retune = retune;
  return tu_open(&o);
}

void tu_config_fails(const char *text, const char *origin, const char *where, const char *needle) {
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(prog_load_string(text, strlen(text), origin, &p, &err), SCHEDRUN_ECONFIG);
  assert_null(p);
  if ((where && !strstr(err.message, where)) || !strstr(err.message, needle))
    fail_msg("expected '%s' at %s, got: %s", needle, where ? where : "any place", err.message);
  schedrun_error_clear(&err);
}

const char *tu_fresh_dir(const char *prefix) {
  static char dir[512];
  static int fresh;
  const char *any = tu_write_temp(0, "x", "");
  if (!any) return NULL;
  snprintf(dir, sizeof dir, "%s", any);
  *strrchr(dir, '/') = '\0';
  snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s%d", prefix, fresh++);
  return dir;
}

char *tu_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *s = malloc(cap + 1);
  for (size_t got; s && (got = fread(s + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) { /* files under /proc have no size: read until the end */
      char *t = realloc(s, cap * 2 + 1);
      if (!t) break;
      s = t;
      cap *= 2;
    }
  }
  fclose(f);
  if (!s) return NULL;
  s[n] = '\0';
  if (len) *len = n;
  return s;
}

static char *slurp(const char *path) {
  char *s = tu_slurp(path, NULL);
  return s ? s : strdup("");
}

int tu_run(char *const argv[], char **out, char **err) {
  char dir[] = "/tmp/sched-run-XXXXXX";
  if (!mkdtemp(dir)) return -1;
  char po[128], pe[128];
  snprintf(po, sizeof po, "%s/out", dir);
  snprintf(pe, sizeof pe, "%s/err", dir);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, po, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  int status = -1;
  if (rc == 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) status = WEXITSTATUS(status);
  else status = -1;
  *out = slurp(po);
  *err = slurp(pe);
  unlink(po);
  unlink(pe);
  rmdir(dir);
  return status;
}

const char *tu_env(const char *name) {
  const char *v = getenv(name);
  if (!v) {
    fprintf(stderr, "test environment lacks %s\n", name);
    abort();
  }
  return v;
}

int tu_count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

int tu_for_each_config(void (*fn)(const char *path, void *ctx), void *ctx) {
  const char *dir = tu_env("SCHEDRUN_CONFIGS");
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".yaml")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    fn(path, ctx);
    n++;
  }
  closedir(d);
  return n;
}

const struct gpu_open_opts *tu_gpu_opts(void) {
  static gpu_open_opts o;
  o.cache_dir = getenv("SCHEDRUN_CACHE_DIR");
  o.spin_ns = 30000;
  return &o;
}

int tu_count_processes(int (*match)(int argc, char *const *argv, void *ctx), void *ctx) {
  int n = 0;
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char path[300], cmd[4096];
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t len = fread(cmd, 1, sizeof cmd - 1, f);
    fclose(f);
    cmd[len] = '\0';
    char *argv[64];
    int argc = 0;
    for (size_t i = 0; i < len && argc < 63; i += strlen(cmd + i) + 1) argv[argc++] = cmd + i;
    argv[argc] = NULL;
    n += argc > 0 && match(argc, argv, ctx);
  }
  if (d) closedir(d);
  return n;
}

schedrun_t *tu_open(const schedrun_options_t *o) {
  schedrun_t *s = NULL;
  schedrun_error_t err = {0};
  if (schedrun_open(&s, o, &err)) fail_msg("open: %s", err.message);
  return s;
}

int tu_gate_hold(schedrun_host_task_t *t, void *user) {
  (void)t;
  tu_gate *g = user;
  pthread_mutex_lock(&g->lock);
  g->entered = 1;
  pthread_cond_broadcast(&g->cond);
  while (!g->open) pthread_cond_wait(&g->cond, &g->lock);
  pthread_mutex_unlock(&g->lock);
  return 0;
}

void tu_gate_wait_entered(tu_gate *g) {
  pthread_mutex_lock(&g->lock);
  while (!g->entered) pthread_cond_wait(&g->cond, &g->lock);
  pthread_mutex_unlock(&g->lock);
}

void tu_gate_open(tu_gate *g) {
  pthread_mutex_lock(&g->lock);
  g->open = 1;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
}

schedrun_t *tu_open_devices(const char *env, const char *fallback, int want, const schedrun_options_t *base) {
  const char *devices = getenv(env);
  schedrun_options_t o;
  if (base) o = *base;
  else schedrun_options_init(&o);
  o.devices = devices && *devices ? devices : fallback;
  schedrun_t *s = tu_open(&o);
  if (want) assert_int_equal(schedrun_device_count(s), want);
  for (int d = 0; d < schedrun_device_count(s); d++) /* the devices asked for, never a fallback */
    if (strncmp(schedrun_device_name(s, d), o.devices, 4) != 0)
      fail_msg("asked for %s, got %s", o.devices, schedrun_device_name(s, d));
  return s;
}

const char tu_tiny_yaml[] =
    "version: 1\n"
    "kernels:\n"
    "  one:\n"
    "    params: [ptr]\n"
    "    source: |\n"
    "      extern \"C\" __global__ void one(int *out) { out[0] = 1; }\n"
    "buffers:\n"
    "  out: {type: i32, count: 1}\n"
    "program:\n"
    "  - launch: {kernel: one, grid: 1, block: 1, args: [out]}\n"
    "expect:\n"
    "  out: {values: [1]}\n";

void tu_run_once(const char *cache_dir, const char *yaml, const char *origin, int verify) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  o.cache_dir = cache_dir;
  schedrun_t *s = tu_open(&o);
  schedrun_program_t *p = tu_load(s, yaml, origin);
  schedrun_run_options_t ro;
  schedrun_run_options_init(&ro);
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  int rc = schedrun_run(s, p, &ro, &r, &err);
  if (verify) {
    if (rc != SCHEDRUN_OK) fail_msg("%s: %s", origin, err.message);
    const schedrun_summary_t *sum = schedrun_report_summary(r);
    assert_int_equal(sum->jobs, 1);
    assert_int_equal(sum->verified, 1);
  }
  schedrun_error_clear(&err);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

schedrun_program_t *tu_load(schedrun_t *s, const char *yaml, const char *origin) {
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  if (schedrun_program_load_string(s, yaml, origin, &p, &err)) fail_msg("load %s: %s", origin, err.message);
  return p;
}

schedrun_job_result_t *tu_job_on(schedrun_t *s, schedrun_program_t *p, int dev, int run) {
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.device = dev;
  o.run = run;
  o.keep_outputs = 1;
  schedrun_job_result_t *r;
  schedrun_error_t err = {0};
  if (schedrun_submit_wait(s, p, &o, &r, &err) != SCHEDRUN_OK) fail_msg("submit: %s", err.message);
  if (schedrun_job_result_info(r)->status != SCHEDRUN_OK)
    fail_msg("device %d, run %d: %s", dev, run, schedrun_job_result_error(r));
  return r;
}

bool tu_timeout_ran_out_early(int rc, const char *err) {
  return rc == 4 && err && strstr(err, "ran out while loading the config") != NULL;
}

uint64_t tu_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void tu_sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

int tu_is_worker_of(int argc, char *const *argv, void *ctx) {
  char want[32];
  snprintf(want, sizeof want, "%ld", (long)*(pid_t *)ctx);
  return argc >= 3 && strstr(argv[0], "host-worker") && !strcmp(argv[2], want);
}
