/*
 * The host compile target: CUDA C kernel source to a shared object, with the
 * system C++ compiler.
 *
 * The generated translation unit is the prelude (CUDA built-ins), a #line
 * directive so that compiler messages point into the config file, the kernel
 * source, and a trampoline per kernel that unpacks the 8-byte argument slots
 * into the kernel's own parameter types and runs the grid as loops over blocks
 * and threads. static_asserts check the declared `params` against the kernel's
 * signature. Kernels that need __syncthreads or __shared__ are refused before
 * compiling: a block's threads run one after another here, so a barrier
 * cannot be honoured.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/host/host_prelude.h"
#include "gpu/kernel_abi.h"

extern char **environ;

#define COMPILE_TIMEOUT_NS (300ull * 1000000000ull)
#define MAX_LOG (64u * 1024u)

static const char *compiler(void) {
  const char *c = getenv("SCHEDRUN_CXX");
  return c && *c ? c : "c++";
}

/* What a command wrote to its log, cut at MAX_LOG bytes; NULL when there is
 * nothing to read. */
static char *read_log(const char *path) {
  char *text = NULL;
  size_t len = 0;
  schedrun_error_t e = {0};
  if (fs_read_file(path, &text, &len, &e) == SCHEDRUN_OK && len > MAX_LOG) text[MAX_LOG] = '\0';
  schedrun_error_clear(&e);
  return text;
}

/* Runs argv with stdout and stderr into log_path; returns the exit status,
 * or -1 when it could not run, ran out of time or was cancelled (*cancel set:
 * the compiler is killed at once). */
static int run_logged(char *const argv[], const char *log_path, const _Atomic int *cancel, schedrun_error_t *err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  /* a process group of its own: a stopped or timed-out compile is ended with
   * everything it started (cc1plus, as, ld) */
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) {
    err_set(err, SCHEDRUN_ECOMPILE, "cannot run the C++ compiler '%s': %s", argv[0], strerror(rc));
    return -1;
  }
  uint64_t deadline = now_ns() + COMPILE_TIMEOUT_NS;
  int status = 0;
  long wait_ns = 50000;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      err_set(err, SCHEDRUN_ECOMPILE, "lost the C++ compiler process: %s", strerror(errno));
      return -1;
    }
    if (cancel && atomic_load(cancel)) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      err_set(err, SCHEDRUN_ECLOSED, "the compile was stopped (its compiler process was killed)");
      return -1;
    }
    if (now_ns() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      err_set(err, SCHEDRUN_ECOMPILE, "the C++ compiler ran for more than %llu s",
              COMPILE_TIMEOUT_NS / 1000000000ull);
      return -1;
    }
    /* short processes (--version) are common: start polling fast */
    struct timespec ts = {0, wait_ns};
    nanosleep(&ts, NULL);
    if (wait_ns < 4000000) wait_ns *= 2;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  err_set(err, SCHEDRUN_ECOMPILE, "the C++ compiler was killed by signal %d",
          WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return -1;
}

static int host_open(void **ctx, schedrun_error_t *err) {
  (void)err;
  *ctx = NULL;
  return SCHEDRUN_OK;
}

static void host_close(void *ctx) { (void)ctx; }

static int host_identity(void *ctx, char **out, schedrun_error_t *err) {
  (void)ctx;
  *out = NULL;
  char dir[256];
  if (fs_temp_dir(dir, sizeof dir, "/tmp", "schedrun-cxx-") != 0) return err_set(err, SCHEDRUN_EIO, "cannot create a temporary directory");
  char log[320];
  snprintf(log, sizeof log, "%s/version", dir);
  char *argv[] = {(char *)compiler(), "--version", NULL};
  int st = run_logged(argv, log, NULL, err);
  char *text = st == 0 ? read_log(log) : NULL;
  if (text) *out = xstrndup(text, strcspn(text, "\n"));
  else if (st > 0) err_set(err, SCHEDRUN_ECOMPILE, "'%s --version' failed", compiler());
  free(text);
  unlink(log);
  rmdir(dir);
  if (!*out) return err && err->code ? err->code : SCHEDRUN_ECOMPILE;
  return SCHEDRUN_OK;
}

/* The compiler's resolved file, size and modification time: when any of them
 * changes, the identity is asked again. */
static int host_stamp(void *ctx, char **out, schedrun_error_t *err) {
  (void)ctx;
  *out = NULL;
  const char *cxx = compiler();
  char *found = NULL;
  if (strchr(cxx, '/')) {
    found = realpath(cxx, NULL);
  } else {
    const char *path = getenv("PATH");
    char *copy = xstrdup(path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir && !found;
         dir = strtok_r(NULL, ":", &save)) {
      char cand[4096];
      snprintf(cand, sizeof cand, "%s/%s", dir, cxx);
      if (access(cand, X_OK) == 0) found = realpath(cand, NULL);
    }
    free(copy);
  }
  struct stat st;
  if (!found || stat(found, &st) != 0) {
    free(found);
    return err_set(err, SCHEDRUN_ECOMPILE, "cannot find the C++ compiler '%s' (set SCHEDRUN_CXX)", cxx);
  }
  strbuf sb;
  sb_init(&sb);
  sb_addf(&sb, "%s|%lld|%lld.%09ld|%llu", found, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
          st.st_mtim.tv_nsec, (unsigned long long)st.st_ino);
  free(found);
  *out = sb_take(&sb);
  return SCHEDRUN_OK;
}

/* Finds an identifier in C/C++ source, outside comments, strings and
 * characters. Returns its 1-based line, or 0. */
static int find_ident(const char *src, const char *ident) {
  size_t il = strlen(ident);
  int line = 1;
  for (const char *p = src; *p;) {
    if (*p == '\n') {
      line++;
      p++;
    } else if (p[0] == '/' && p[1] == '/') {
      while (*p && *p != '\n') p++;
    } else if (p[0] == '/' && p[1] == '*') {
      p += 2;
      while (*p && !(p[0] == '*' && p[1] == '/')) line += *p++ == '\n';
      if (*p) p += 2;
    } else if (*p == '"' || *p == '\'') {
      char q = *p++;
      while (*p && *p != q && *p != '\n') p += (p[0] == '\\' && p[1]) ? 2 : 1;
      if (*p == q) p++;
    } else if (*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) {
      const char *s = p;
      while (*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
             (*p >= '0' && *p <= '9'))
        p++;
      if ((size_t)(p - s) == il && memcmp(s, ident, il) == 0) return line;
    } else {
      p++;
    }
  }
  return 0;
}

static void gen_source(strbuf *sb, const gpu_compile_req *r) {
  sb_adds(sb, host_prelude);
  kernel_abi_source(sb, r);
  sb_addf(sb,
          "extern \"C\" __attribute__((visibility(\"default\"))) void __sched_launch_%s("
          "const unsigned *__g, const unsigned *__b, const uint64_t *__a) {\n",
          r->entry);
  for (uint32_t i = 0; i < r->nparams; i++) {
    sb_addf(sb, "  using T%u = ", i);
    kernel_abi_param_type(sb, r, i);
    sb_adds(sb, ";\n");
    if (r->params[i] == PT_PTR) sb_addf(sb, "  T%u a%u = (T%u)(uintptr_t)__a[%u];\n", i, i, i, i);
    else sb_addf(sb, "  T%u a%u; std::memcpy(&a%u, &__a[%u], sizeof a%u);\n", i, i, i, i, i);
  }
  sb_adds(sb,
          "  gridDim = dim3(__g[0], __g[1], __g[2]);\n"
          "  blockDim = dim3(__b[0], __b[1], __b[2]);\n"
          "  for (unsigned bz = 0; bz < __g[2]; bz++)\n"
          "  for (unsigned by = 0; by < __g[1]; by++)\n"
          "  for (unsigned bx = 0; bx < __g[0]; bx++) {\n"
          "    blockIdx = uint3{bx, by, bz};\n"
          "    for (unsigned tz = 0; tz < __b[2]; tz++)\n"
          "    for (unsigned ty = 0; ty < __b[1]; ty++)\n"
          "    for (unsigned tx = 0; tx < __b[0]; tx++) {\n"
          "      threadIdx = uint3{tx, ty, tz};\n");
  sb_addf(sb, "      %s(", r->entry);
  for (uint32_t i = 0; i < r->nparams; i++) sb_addf(sb, "%sa%u", i ? ", " : "", i);
  sb_adds(sb, ");\n    }\n  }\n}\n");
}

/* The options every kernel is compiled with (the compiler, -o and the files
 * around them). */
static const char *const host_flags[] = {"-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
                                         "-fno-exceptions", "-fno-rtti"};

static int host_recipe(void *ctx, char **out, schedrun_error_t *err) {
  (void)ctx;
  strbuf sb;
  sb_init(&sb);
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(host_flags); i++) sb_addf(&sb, "%s ", host_flags[i]);
  sb_adds(&sb, "\n");
  gen_source(&sb, &gpu_recipe_sample);
  if (sb.failed) {
    sb_free(&sb);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  *out = sb_take(&sb);
  return SCHEDRUN_OK;
}

static int host_compile(void *ctx, const gpu_compile_req *r, const char *tmp_dir, uint8_t **out,
                        size_t *out_len, char **log, schedrun_error_t *err) {
  (void)ctx;
  *log = NULL;
  *out = NULL;
  *out_len = 0;
  static const char *const refused[] = {"__syncthreads", "__shared__", "__syncwarp"};
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(refused); i++) {
    int line = find_ident(r->source, refused[i]);
    if (line)
      return err_set(err, SCHEDRUN_ECOMPILE,
                     "%s:%u: kernel '%s' uses %s, which the host backend cannot run (it runs a "
                     "block's threads one after another, so there is no shared memory or barrier)",
                     r->source_file ? r->source_file : r->name, r->first_line + (uint32_t)line - 1,
                     r->name, refused[i]);
  }
  strbuf src, path_src, path_so, path_log;
  sb_init(&src);
  sb_init(&path_src);
  sb_init(&path_so);
  sb_init(&path_log);
  gen_source(&src, r);
  sb_addf(&path_src, "%s/%s.cpp", tmp_dir, r->entry);
  sb_addf(&path_so, "%s/%s.so", tmp_dir, r->entry);
  sb_addf(&path_log, "%s/%s.log", tmp_dir, r->entry);
  int rc = SCHEDRUN_OK;
  if (src.failed || path_src.failed || path_so.failed || path_log.failed) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto out;
  }
  if ((rc = fs_write_atomic(path_src.data, src.data, src.len, err))) goto out;
  char *argv[SCHEDRUN__ARRAY_LEN(host_flags) + 5];
  size_t na = 0;
  argv[na++] = (char *)compiler();
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(host_flags); i++) argv[na++] = (char *)host_flags[i];
  argv[na++] = "-o";
  argv[na++] = path_so.data;
  argv[na++] = path_src.data;
  argv[na] = NULL;
  int st = run_logged(argv, path_log.data, r->cancel, err);
  *log = read_log(path_log.data);
  if (st < 0) {
    rc = err ? err->code : SCHEDRUN_ECOMPILE;
    goto out;
  }
  if (st != 0) {
    /* a compiler that fails on a full disk says so only in its log ("ld
     * returned 1"): that is the disk's failure, not the kernel's */
    struct statvfs vfs;
    if (statvfs(tmp_dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < (1u << 20))
      rc = err_set(err, SCHEDRUN_EIO, "the disk holding %s is full: kernel '%s' could not be built there", tmp_dir,
                   r->name);
    else
      rc = err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s' does not compile (%s exited with %d)", r->name, compiler(),
                   st);
    goto out;
  }
  rc = fs_read_file(path_so.data, (char **)out, out_len, err);
out:
  unlink(path_src.data);
  unlink(path_so.data);
  unlink(path_log.data);
  sb_free(&src);
  sb_free(&path_src);
  sb_free(&path_so);
  sb_free(&path_log);
  return rc;
}

const gpu_compile_target gpu_host_target = {
    .name = "host",
    .ext = ".so",
    .open = host_open,
    .close = host_close,
    .identity = host_identity,
    .stamp = host_stamp,
    .recipe = host_recipe,
    .compile = host_compile,
};

/* ---- the worker program of host devices ---- */

/* gpu/host/host_worker_abi.h and gpu/host/host_worker.c, as text (generated). */
extern const char host_worker_abi_text[];
extern const char host_worker_text[];

int host_worker_program(const char *cache_dir, char **path, schedrun_error_t *err) {
  *path = NULL;
  strbuf src, log, dir, out;
  sb_init(&src);
  sb_init(&log);
  sb_init(&dir);
  sb_init(&out);
  char *stamp = NULL, *tmp = NULL, *text = NULL;
  int rc = host_stamp(NULL, &stamp, err);
  if (rc) goto done;
  sb_adds(&src, "#define _GNU_SOURCE 1\n");
  sb_adds(&src, host_worker_abi_text);
  sb_adds(&src, "#line 1 \"gpu/host/host_worker.c\"\n");
  sb_adds(&src, host_worker_text);
  hash_ctx *h = hash_new();
  char key[65];
  if (!h || src.failed) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto done;
  }
  hash_add_str(h, "schedrun host worker v1");
  hash_add_str(h, stamp);
  hash_add_field(h, src.data, src.len);
  hash_final_hex(h, key);
  sb_addf(&dir, "%s/host-worker", cache_dir);
  sb_addf(&out, "%s/%s", dir.data, key);
  if (dir.failed || out.failed) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto done;
  }
  if (access(out.data, X_OK) == 0) goto found;
  if ((rc = fs_mkdir_p(dir.data, err))) goto done;
  sb_addf(&log, "%s/.build-%ld-XXXXXX", dir.data, (long)getpid());
  tmp = sb_take(&log);
  if (!tmp || !mkdtemp(tmp)) {
    rc = err_set(err, SCHEDRUN_EIO, "cannot create a build directory in %s: %s", dir.data, strerror(errno));
    goto done;
  }
  char f_src[4200], f_bin[4200], f_log[4200];
  snprintf(f_src, sizeof f_src, "%s/worker.c", tmp);
  snprintf(f_bin, sizeof f_bin, "%s/worker", tmp);
  snprintf(f_log, sizeof f_log, "%s/log", tmp);
  if ((rc = fs_write_atomic(f_src, src.data, src.len, err))) goto done;
  char *argv[] = {(char *)compiler(), "-x", "c", "-std=gnu11", "-O2", "-pthread", "-o", f_bin, f_src, "-ldl", NULL};
  int st = run_logged(argv, f_log, NULL, err);
  if (st != 0) {
    text = read_log(f_log);
    if (st > 0)
      rc = err_set(err, SCHEDRUN_EBACKEND, "cannot build the host devices' worker program with '%s' (exit %d):\n%s",
                   compiler(), st, text ? text : "");
    else
      rc = err && err->code ? err->code : SCHEDRUN_EBACKEND;
    goto done;
  }
  /* published by rename: another process building the same program at the
   * same time publishes the same bytes */
  if (rename(f_bin, out.data) != 0) {
    rc = err_set(err, SCHEDRUN_EIO, "cannot publish %s: %s", out.data, strerror(errno));
    goto done;
  }
found:
  *path = sb_take(&out);
  if (!*path) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
done:
  if (tmp) fs_remove_tree(tmp);
  free(tmp);
  free(text);
  free(stamp);
  sb_free(&src);
  sb_free(&log);
  sb_free(&dir);
  sb_free(&out);
  return rc;
}
