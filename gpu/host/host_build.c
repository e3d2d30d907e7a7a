/* See host_build.h. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif
#include <time.h>
#include <unistd.h>

#include "gpu/host/host_build.h"

extern char **environ;

#define MAX_LOG (64u * 1024u)

const char *host_cxx(void) {
  const char *c = getenv("SCHEDRUN_CXX");
  return c && *c ? c : "c++";
}

char *host_cxx_path(void) {
  const char *cxx = host_cxx();
  if (strchr(cxx, '/')) return realpath(cxx, NULL);
  const char *path = getenv("PATH");
  char *copy = xstrdup(path ? path : "/usr/bin:/bin"), *found = NULL;
  for (char *save = NULL, *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir && !found;
       dir = strtok_r(NULL, ":", &save)) {
    char cand[4096];
    snprintf(cand, sizeof cand, "%s/%s", dir, cxx);
    if (access(cand, X_OK) == 0) found = realpath(cand, NULL);
  }
  free(copy);
  return found;
}

char *host_read_log(const char *path) {
  char *text = NULL;
  size_t len = 0;
  schedrun_error_t e = {0};
  if (fs_read_file(path, &text, &len, &e) == SCHEDRUN_OK && len > MAX_LOG) text[MAX_LOG] = '\0';
  schedrun_error_clear(&e);
  return text;
}

int host_run_logged(char *const argv[], const char *log_path, const _Atomic int *cancel, schedrun_error_t *err) {
  return host_run_bounded(argv, log_path, cancel, 0, "the C++ compiler", err);
}

int host_run_bounded(char *const argv[], const char *log_path, const _Atomic int *cancel, uint64_t timeout_ns,
                     const char *what, schedrun_error_t *err) {
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
    err_set(err, SCHEDRUN_ECOMPILE, "cannot run %s '%s': %s", what, argv[0], strerror(rc));
    return -1;
  }
  if (!timeout_ns) timeout_ns = HOST_COMPILE_TIMEOUT_NS;
  uint64_t deadline = now_ns() + timeout_ns;
  int status = 0;
  long wait_ns = 50000;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      err_set(err, SCHEDRUN_ECOMPILE, "lost %s: %s", what, strerror(errno));
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
      err_set(err, SCHEDRUN_ECOMPILE, "%s ran for more than the compile timeout (%.1f s) and was killed", what,
              (double)timeout_ns / 1e9);
      return -1;
    }
    /* short processes (--version) are common: start polling fast */
    struct timespec ts = {0, wait_ns};
    nanosleep(&ts, NULL);
    if (wait_ns < 4000000) wait_ns *= 2;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  err_set(err, SCHEDRUN_ECOMPILE, "%s was killed by signal %d", what, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return -1;
}


#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SCHEDRUN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SCHEDRUN_SANITIZED 1
#endif
#endif

/* The options every kernel is compiled with (the compiler, -o and the files
 * around them). -O3 with -fno-trapping-math and -fno-math-errno lets the
 * compiler turn a block's threads, a loop over threadIdx.x, into vector code:
 * a kernel's `if (i < n)` guard becomes masked loads and stores only when
 * the arithmetic under it may be executed for lanes that do not take it (a
 * GPU raises no floating-point traps and sets no errno either). In a
 * library built with ThreadSanitizer or AddressSanitizer a kernel's
 * thread-local indices use the initial-exec model: the sanitizers'
 * interceptor of __tls_get_addr (GCC 12, LLVM 14) guesses the size of a
 * module's dynamic TLS block from the bytes before it and, now and then,
 * resets the shadow of a range of hundreds of terabytes and dies (TSan), or
 * hands LeakSanitizer a range that its tracer then faults on (ASan, once
 * kernels read their indices through __tls_get_addr: see tls_flag).
 * Initial-exec TLS needs no __tls_get_addr; it takes glibc's static TLS
 * surplus, which the sanitized tests enlarge (GLIBC_TUNABLES in
 * tests/CMakeLists.txt). */
static const char *const host_flags[] = {"-std=c++17",        "-O3",         "-fno-trapping-math",
                                         "-fno-math-errno",   "-fPIC",       "-shared",
                                         "-fvisibility=hidden", "-fno-exceptions", "-fno-rtti"
#ifdef SCHEDRUN_SANITIZED
                                         , "-ftls-model=initial-exec"
#endif
};

/* A process valgrind runs: valgrind preloads its own libraries into it. */
static bool under_valgrind(void) {
  const char *pre = getenv("LD_PRELOAD");
  return pre && strstr(pre, "vgpreload");
}

/* The vector instructions kernels may use, so that a guarded `if (i < n)`
 * becomes masked loads and stores (SSE2 has none): AVX-512 (F, VL, BW, DQ)
 * where this CPU and its operating system have it, else AVX2 with FMA. With
 * AVX-512 a masked store takes a mask register; AVX2's vmaskmovps store is
 * microcoded on AMD's cores, where it made a saxpy on 4,096 floats in cache
 * 5.5 times slower (2.1 us against 0.38). Vectors stay 256 bits wide (the
 * compilers' default tuning prefers them). valgrind cannot run AVX-512, so
 * a process under valgrind builds with AVX2. The options are part of every
 * kernel's recipe, so a cache directory shared by machines (or processes)
 * of different kinds keeps one build per kind. */
static const char *const *isa_flags(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const char *const avx512[] = {"-mavx2", "-mfma", "-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", NULL};
  static const char *const avx2[] = {"-mavx2", "-mfma", NULL};
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return avx2 + 2;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && !under_valgrind())
    return avx512;
  return avx2;
#else
  static const char *const none[] = {NULL};
  return none;
#endif
}

/* Whether this process's C library gives a module loaded with dlopen the
 * right thread-local storage through TLS descriptors. glibc before 2.38 does
 * not always (its bug 29039): after modules were unloaded, a module given a
 * freed TLS module id may read and write a stale block through its
 * descriptors, and a kernel then ran on another module's threadIdx and
 * gridDim (tests/test_module_reuse.c). */
static bool tls_descriptors_sound(void) {
#if defined(__GLIBC__)
  int major = 0, minor = 0;
  return sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) == 2 && (major > 2 || (major == 2 && minor >= 38));
#else
  return false;
#endif
}

/* Kernels read threadIdx and friends, and the block runner its runtime,
 * from thread-local storage in a module loaded with dlopen: with GCC on
 * x86-64, TLS descriptors make each read a load instead of a call to
 * __tls_get_addr (a tree reduction's fiber switches cost about a third
 * less), where the C library handles them soundly. Clang 14 does not know
 * the option; the compiler is told apart by the name of the file it
 * resolves to, with no process started. */
static const char *tls_flag(void) {
#if defined(__x86_64__)
  if (!tls_descriptors_sound()) return NULL;
  char *path = host_cxx_path();
  const char *base = path ? strrchr(path, '/') : NULL;
  bool gcc = base && (strstr(base, "g++") || strstr(base, "gcc")) && !strstr(base, "clang");
  free(path);
  return gcc ? "-mtls-dialect=gnu2" : NULL;
#else
  return NULL;
#endif
}

/* Every option, in order, into opt (room for HOST_OPTIONS_MAX); returns how
 * many: what the recipe records and what the compiler is given, from one
 * list. */
enum { HOST_OPTIONS_MAX = SCHEDRUN__ARRAY_LEN(host_flags) + 7 };
static size_t host_options(const char **opt) {
  size_t n = 0;
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(host_flags); i++) opt[n++] = host_flags[i];
  for (const char *const *f = isa_flags(); *f; f++) opt[n++] = *f;
  const char *tls = tls_flag();
  if (tls) opt[n++] = tls;
  assert(n <= HOST_OPTIONS_MAX);
  return n;
}

void host_build_flags(strbuf *sb) {
  const char *opt[HOST_OPTIONS_MAX];
  size_t n = host_options(opt);
  for (size_t i = 0; i < n; i++) sb_addf(sb, "%s ", opt[i]);
}

bool host_disk_full(const char *dir) {
  struct statvfs vfs;
  return statvfs(dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < (1u << 20);
}

int host_build_so(const char *tu, size_t tu_len, const char *tmp_dir, const char *stem, const char *what,
                  const _Atomic int *cancel, uint64_t timeout_ns, uint8_t **out, size_t *out_len, char **log,
                  schedrun_error_t *err) {
  *log = NULL;
  *out = NULL;
  *out_len = 0;
  strbuf path_src, path_so, path_log;
  sb_init(&path_src);
  sb_init(&path_so);
  sb_init(&path_log);
  sb_addf(&path_src, "%s/%s.cpp", tmp_dir, stem);
  sb_addf(&path_so, "%s/%s.so", tmp_dir, stem);
  sb_addf(&path_log, "%s/%s.log", tmp_dir, stem);
  int rc = SCHEDRUN_OK;
  if (path_src.failed || path_so.failed || path_log.failed) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto out;
  }
  if ((rc = fs_write_atomic(path_src.data, tu, tu_len, err))) goto out;
  const char *opt[HOST_OPTIONS_MAX];
  size_t nopt = host_options(opt);
  char *argv[1 + HOST_OPTIONS_MAX + 4];
  size_t na = 0;
  argv[na++] = (char *)host_cxx();
  for (size_t i = 0; i < nopt; i++) argv[na++] = (char *)opt[i];
  argv[na++] = "-o";
  argv[na++] = path_so.data;
  argv[na++] = path_src.data;
  argv[na] = NULL;
  int st = host_run_bounded(argv, path_log.data, cancel, timeout_ns, "the C++ compiler", err);
  *log = host_read_log(path_log.data);
  if (st < 0) {
    rc = err ? err->code : SCHEDRUN_ECOMPILE;
    goto out;
  }
  if (st != 0) {
    /* a compiler that fails on a full disk says so only in its log ("ld
     * returned 1"): that is the disk's failure, not the kernel's */
    if (host_disk_full(tmp_dir))
      rc = err_set(err, SCHEDRUN_EIO, "the disk holding %s is full: %s could not be built there", tmp_dir, what);
    else
      rc = err_set(err, SCHEDRUN_ECOMPILE, "%s does not compile (%s exited with %d)", what, host_cxx(), st);
    goto out;
  }
  rc = fs_read_file(path_so.data, (char **)out, out_len, err);
out:
  unlink(path_src.data);
  unlink(path_so.data);
  unlink(path_log.data);
  sb_free(&path_src);
  sb_free(&path_so);
  sb_free(&path_log);
  return rc;
}
