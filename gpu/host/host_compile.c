/*
 * The host compile target: CUDA C kernel source to a shared object, with the
 * system C++ compiler.
 *
 * The generated translation unit is the prelude (CUDA built-ins), a #line
 * directive so that compiler messages point into the config file, the kernel
 * source, and a trampoline per kernel that unpacks the 8-byte argument slots
 * into the kernel's own parameter types and runs the grid
 * (gpu/host/host_kernel_tu.h): as plain loops over blocks and threads, or,
 * when the source uses __shared__ memory, a barrier or a warp operation,
 * with each block's threads as cooperating fibers (gpu/host/host_blocks.hpp).
 * static_asserts check the declared `params` against the kernel's signature.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/host/host_build.h"
#include "gpu/host/host_kernel_tu.h"
#include "gpu/kernel_abi.h"

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
  char *argv[] = {(char *)host_cxx(), "--version", NULL};
  int st = host_run_logged(argv, log, NULL, err);
  char *text = st == 0 ? host_read_log(log) : NULL;
  if (text) *out = xstrndup(text, strcspn(text, "\n"));
  else if (st > 0) err_set(err, SCHEDRUN_ECOMPILE, "'%s --version' failed", host_cxx());
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
  const char *cxx = host_cxx();
  char *found = host_cxx_path();
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

/* The translation unit of kernel r (gpu/host/host_kernel_tu.h): the prelude,
 * with the block runner when the source needs cooperating threads, the
 * source with its `extern __shared__` arrays made the launch's dynamic
 * shared memory, the signature checks, and the launcher that unpacks the
 * 8-byte argument slots into the kernel's own parameter types. Returns 0,
 * or the source line of an `extern __shared__` outside a function. */
static int gen_source(strbuf *sb, const gpu_compile_req *r) {
  bool blocks = host_tu_needs_blocks(r->source);
  strbuf src;
  sb_init(&src);
  int bad = host_tu_source(&src, r->source);
  if (src.failed) sb->failed = true;
  gpu_compile_req rewritten = *r;
  rewritten.source = src.failed ? "" : src.data;
  host_tu_prelude(sb, blocks);
  kernel_abi_source(sb, &rewritten);
  sb_free(&src);
  strbuf unpack, call;
  sb_init(&unpack);
  sb_init(&call);
  for (uint32_t i = 0; i < r->nparams; i++) {
    sb_addf(&unpack, "  using T%u = ", i);
    kernel_abi_param_type(&unpack, r, i);
    sb_adds(&unpack, ";\n");
    if (r->params[i] == PT_PTR) sb_addf(&unpack, "  T%u a%u = (T%u)(uintptr_t)__a[%u];\n", i, i, i, i);
    else sb_addf(&unpack, "  T%u a%u; std::memcpy(&a%u, &__a[%u], sizeof a%u);\n", i, i, i, i, i);
  }
  sb_addf(&call, "%s(", r->entry);
  for (uint32_t i = 0; i < r->nparams; i++) sb_addf(&call, "%sa%u", i ? ", " : "", i);
  sb_adds(&call, ");");
  if (unpack.failed || call.failed) sb->failed = true;
  else host_tu_launcher(sb, r->entry, r->name, unpack.data ? unpack.data : "", call.data, blocks);
  sb_free(&unpack);
  sb_free(&call);
  return bad;
}

static int host_recipe(void *ctx, char **out, schedrun_error_t *err) {
  (void)ctx;
  strbuf sb;
  sb_init(&sb);
  host_build_flags(&sb);
  sb_adds(&sb, "\n");
  gen_source(&sb, &gpu_recipe_sample);
  /* the block runner too: the sample kernel needs none, and a kernel built
   * with another one must not be found in the cache */
  host_tu_prelude(&sb, true);
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
  strbuf src, what;
  sb_init(&src);
  sb_init(&what);
  int line = gen_source(&src, r);
  if (line) {
    sb_free(&src);
    sb_free(&what);
    return err_set(err, SCHEDRUN_ECOMPILE,
                   "%s:%u: kernel '%s' declares an extern __shared__ array outside a function, which the host "
                   "backend cannot place in each block's shared memory (declare it inside the kernel)",
                   r->source_file ? r->source_file : r->name, r->first_line + (uint32_t)line - 1, r->name);
  }
  sb_addf(&what, "kernel '%s'", r->name);
  int rc = src.failed || what.failed ? err_set(err, SCHEDRUN_ENOMEM, "out of memory")
                                     : host_build_so(src.data, src.len, tmp_dir, r->entry, what.data, r->cancel,
                                                     r->timeout_ns, out, out_len, log, err);
  sb_free(&src);
  sb_free(&what);
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

/* ---- programs the library builds and runs: the host devices' worker ---- */

/* common/spin_gauge.h, gpu/host/host_worker_abi.h and gpu/host/host_worker.c,
 * as text (generated). */
extern const char spin_gauge_text[];
extern const char host_worker_abi_text[];
extern const char host_worker_text[];

/* A program is handed out as a descriptor checked as fs_open_owned checks
 * (what could be another user's is not run: it is built again in its place). */
#define HELPER_MAX_BYTES (64ull << 20)

int host_helper_program(const char *cache_dir, const char *dir_name, const char *what, const host_text *parts,
                        size_t nparts, const char *cc, const char *const *flags, char **path, int *fd,
                        schedrun_error_t *err) {
  if (!cc) cc = host_cxx();
  *path = NULL;
  *fd = -1;
  struct stat fst;
  strbuf src, log, dir, out;
  sb_init(&src);
  sb_init(&log);
  sb_init(&dir);
  sb_init(&out);
  char *stamp = NULL, *tmp = NULL, *text = NULL;
  int rc = host_stamp(NULL, &stamp, err);
  if (rc) goto done;
  sb_adds(&src, "#define _GNU_SOURCE 1\n");
  for (size_t i = 0; i < nparts; i++) sb_addf(&src, "#line 1 \"%s\"\n%s", parts[i].name, parts[i].text);
  hash_ctx *h = hash_new();
  char key[65];
  if (!h || src.failed) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto done;
  }
  hash_add_str(h, dir_name);
  hash_add_str(h, stamp);
  hash_add_str(h, cc);
  for (size_t i = 0; flags && flags[i]; i++) hash_add_str(h, flags[i]);
  hash_add_field(h, src.data, src.len);
  hash_final_hex(h, key);
  sb_addf(&dir, "%s/%s", cache_dir, dir_name);
  sb_addf(&out, "%s/%s", dir.data, key);
  if (dir.failed || out.failed) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto done;
  }
  if ((*fd = fs_open_owned(out.data, true, HELPER_MAX_BYTES, &fst, NULL)) >= 0) goto found;
  if ((rc = fs_mkdir_private(dir.data, err))) goto done;
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
  char *argv[24] = {(char *)cc, "-x", "c", "-std=gnu11", "-O2", "-pthread"};
  size_t na = 6;
  for (size_t i = 0; flags && flags[i] && na < 18; i++) argv[na++] = (char *)flags[i];
  const char *tail[] = {"-o", f_bin, f_src, "-ldl", NULL};
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(tail); i++) argv[na++] = (char *)tail[i];
  int st = host_run_logged(argv, f_log, NULL, err);
  if (st != 0) {
    text = host_read_log(f_log);
    if (st > 0 && host_disk_full(tmp))
      rc = err_set(err, SCHEDRUN_EIO, "the disk holding %s is full: %s could not be built there", tmp, what);
    else if (st > 0)
      rc = err_set(err, SCHEDRUN_EBACKEND, "cannot build %s with '%s' (exit %d):\n%s", what, cc, st, text ? text : "");
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
  if ((*fd = fs_open_owned(out.data, true, HELPER_MAX_BYTES, &fst, err)) < 0) {
    rc = err && err->code ? err->code : SCHEDRUN_EIO;
    goto done;
  }
found:
  *path = sb_take(&out);
  if (!*path) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  /* kept clear of the descriptors a worker is given (0 to 5) */
  int high = rc ? -1 : fcntl(*fd, F_DUPFD_CLOEXEC, 10);
  if (*fd >= 0) close(*fd);
  *fd = high;
  if (!rc && high < 0) rc = err_set(err, SCHEDRUN_EIO, "%s: %s", *path, strerror(errno));
  if (rc) {
    free(*path);
    *path = NULL;
  }
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

int host_worker_program(const char *cache_dir, char **path, int *fd, schedrun_error_t *err) {
  const host_text parts[] = {{"common/spin_gauge.h", spin_gauge_text},
                             {"gpu/host/host_worker_abi.h", host_worker_abi_text},
                             {"gpu/host/host_worker.c", host_worker_text}};
  /* "host-worker" names its directory and is part of its key */
  return host_helper_program(cache_dir, "host-worker", "the host devices' worker program", parts, 3, NULL, NULL, path,
                             fd, err);
}
