/*
 * The cuda compile target: CUDA C to a cubin for one sm_XX, with NVRTC.
 *
 * NVRTC is loaded with dlopen, like the driver, so schedrun builds and runs
 * where the CUDA toolkit is absent; the target then fails with a clear reason.
 * NVRTC needs no GPU, so this target works (and is tested) on any machine
 * that has the library. After compiling, the cubin's ELF symbol table is read
 * to make sure the entry exists under its C name: a kernel without
 * extern "C" is reported with the C++ name it got instead.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <elf.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/arch_bundle.h"
#include "gpu/backend.h"
#include "gpu/cuda/cuda_backend.h"
#include "gpu/host/host_build.h"
#include "gpu/kernel_abi.h"

#define NVRTC_STD "-std=c++17" /* besides the architecture, the only option */

/* The NVRTC C API, as documented (nvrtc.h); declared here so that building
 * schedrun needs no CUDA headers. */
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

typedef struct nvrtc_api {
  void *dl;
  const char *(*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int *, int *);
  nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                               const char *const *);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetPTX)(nvrtcProgram, char *);
  /* optional (NVRTC 11.2 on): the architectures it compiles for, ascending */
  nvrtcResult (*GetNumSupportedArchs)(int *);
  nvrtcResult (*GetSupportedArchs)(int *);
  char lib[4096];      /* the NVRTC loaded, by path, for the compile process */
  char builtins[4200]; /* the builtins loaded beside it, or "" */
  /* the compile process (gpu/cuda/nvrtc_worker.c), built on first use */
  pthread_mutex_t lock;
  int worker_state; /* 0 not tried, 1 built, -1 not available: compiles run in this process */
  char *worker;
  int worker_fd;
} nvrtc_api;

/* gpu/cuda/nvrtc_worker.c, as text (generated) */
extern const char nvrtc_worker_text[];

/* NVRTC opens libnvrtc-builtins.so.<major>.<minor> by name when it
 * compiles. A libnvrtc loaded by path from a directory the loader does not
 * search would not find the one beside it, and every compile would fail:
 * load that one first (by path), so that the name resolves to it. */
static void preload_builtins(nvrtc_api *a) {
  Dl_info info;
  int major = 0, minor = 0;
  if (!dladdr((void *)a->Version, &info) || !info.dli_fname || !strrchr(info.dli_fname, '/') ||
      a->Version(&major, &minor) != 0)
    return;
  snprintf(a->lib, sizeof a->lib, "%s", info.dli_fname);
  char path[4200];
  int dir = (int)(strrchr(info.dli_fname, '/') - info.dli_fname);
  snprintf(path, sizeof path, "%.*s/libnvrtc-builtins.so.%d.%d", dir, info.dli_fname, major, minor);
  if (access(path, R_OK) == 0 && dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE))
    snprintf(a->builtins, sizeof a->builtins, "%s", path);
}

static int nv_open(void **ctx, schedrun_error_t *err) {
  *ctx = NULL;
  const char *env = getenv("SCHEDRUN_NVRTC_LIBRARY");
  const char *candidates[] = {env && *env ? env : "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                              "/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
                              "/usr/local/cuda/lib64/libnvrtc.so.12"};
  /* RTLD_NODELETE: NVRTC carries its own C++ runtime, whose allocations would
   * dangle (and show as leaks) if the library were unmapped */
  void *dl = NULL;
  for (size_t i = 0; !dl && i < SCHEDRUN__ARRAY_LEN(candidates); i++) dl = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!dl) return err_set(err, SCHEDRUN_ECOMPILE, "NVRTC is not available (no libnvrtc.so found; set SCHEDRUN_NVRTC_LIBRARY)");
  nvrtc_api *a = calloc(1, sizeof *a);
  if (!a) {
    dlclose(dl);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  a->dl = dl;
  struct { void **slot; const char *name; } syms[] = {
      {(void **)&a->GetErrorString, "nvrtcGetErrorString"},
      {(void **)&a->Version, "nvrtcVersion"},
      {(void **)&a->CreateProgram, "nvrtcCreateProgram"},
      {(void **)&a->DestroyProgram, "nvrtcDestroyProgram"},
      {(void **)&a->CompileProgram, "nvrtcCompileProgram"},
      {(void **)&a->GetCUBINSize, "nvrtcGetCUBINSize"},
      {(void **)&a->GetCUBIN, "nvrtcGetCUBIN"},
      {(void **)&a->GetProgramLogSize, "nvrtcGetProgramLogSize"},
      {(void **)&a->GetProgramLog, "nvrtcGetProgramLog"},
      {(void **)&a->GetPTXSize, "nvrtcGetPTXSize"},
      {(void **)&a->GetPTX, "nvrtcGetPTX"},
  };
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(syms); i++) {
    *syms[i].slot = dlsym(dl, syms[i].name);
    if (!*syms[i].slot) {
      dlclose(dl);
      free(a);
      return err_set(err, SCHEDRUN_ECOMPILE, "NVRTC lacks %s (too old?)", syms[i].name);
    }
  }
  a->GetNumSupportedArchs = (nvrtcResult(*)(int *))dlsym(dl, "nvrtcGetNumSupportedArchs");
  a->GetSupportedArchs = (nvrtcResult(*)(int *))dlsym(dl, "nvrtcGetSupportedArchs");
  preload_builtins(a);
  pthread_mutex_init(&a->lock, NULL);
  a->worker_fd = -1;
  *ctx = a;
  return SCHEDRUN_OK;
}

/* How NVRTC can build for sm_`want`: 1 a cubin for it; 2 PTX for *ptx_arch,
 * the newest it knows, when `want` is newer than all of them (the driver
 * compiles PTX for the GPU it loads on); 0 not at all (*list then names what
 * it supports). Without the query (an old NVRTC) every arch is tried as is. */
static int arch_support(const nvrtc_api *a, int want, int *ptx_arch, char *list, size_t lsize) {
  int n = 0;
  list[0] = '\0';
  if (!a->GetNumSupportedArchs || !a->GetSupportedArchs || a->GetNumSupportedArchs(&n) != 0 || n <= 0 || n > 256)
    return 1;
  int archs[256];
  if (a->GetSupportedArchs(archs) != 0) return 1;
  size_t at = 0;
  for (int i = 0; i < n && at < lsize; i++) at += (size_t)snprintf(list + at, lsize - at, "%ssm_%d", i ? " " : "", archs[i]);
  for (int i = 0; i < n; i++)
    if (archs[i] == want) return 1;
  if (want > archs[n - 1]) {
    *ptx_arch = archs[n - 1];
    return 2;
  }
  return 0;
}

static void nv_close(void *ctx) {
  nvrtc_api *a = ctx;
  if (!a) return;
  if (a->worker_fd >= 0) close(a->worker_fd);
  free(a->worker);
  pthread_mutex_destroy(&a->lock);
  dlclose(a->dl);
  free(a);
}

int nvrtc_version_here(int *major, int *minor) {
  void *ctx = NULL;
  schedrun_error_t e = {0};
  int rc = nv_open(&ctx, &e);
  schedrun_error_clear(&e);
  if (rc) return rc;
  rc = ((nvrtc_api *)ctx)->Version(major, minor) == 0 ? SCHEDRUN_OK : SCHEDRUN_ECOMPILE;
  nv_close(ctx); /* NVRTC stays mapped (RTLD_NODELETE): the compiles find it loaded */
  return rc;
}

static int nv_identity(void *ctx, char **out, schedrun_error_t *err) {
  nvrtc_api *a = ctx;
  int major = 0, minor = 0;
  if (a->Version(&major, &minor) != 0) return err_set(err, SCHEDRUN_ECOMPILE, "nvrtcVersion failed");
  char buf[64];
  snprintf(buf, sizeof buf, "nvrtc %d.%d", major, minor);
  *out = xstrdup(buf);
  return *out ? SCHEDRUN_OK : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
}

/* Looks for `entry` among the cubin's function symbols. Returns 1 when found;
 * 0 when absent, with a C++-mangled near miss copied to `mangled` if any; -1
 * when the image is not a 64-bit ELF. */
static int elf_find_entry(const uint8_t *img, size_t len, const char *entry, char *mangled, size_t mlen) {
  mangled[0] = '\0';
  if (len < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) != 0 || img[EI_CLASS] != ELFCLASS64) return -1;
  Elf64_Ehdr eh;
  memcpy(&eh, img, sizeof eh);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > len || eh.e_shnum > (len - eh.e_shoff) / sizeof(Elf64_Shdr))
    return -1;
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh, strh;
    memcpy(&sh, img + eh.e_shoff + i * sizeof sh, sizeof sh);
    if (sh.sh_type != SHT_SYMTAB || sh.sh_link >= eh.e_shnum) continue;
    memcpy(&strh, img + eh.e_shoff + sh.sh_link * sizeof strh, sizeof strh);
    if (sh.sh_offset > len || sh.sh_size > len - sh.sh_offset || strh.sh_offset > len ||
        strh.sh_size > len - strh.sh_offset)
      return -1;
    size_t n = sh.sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; k++) {
      Elf64_Sym sym;
      memcpy(&sym, img + sh.sh_offset + k * sizeof sym, sizeof sym);
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_name >= strh.sh_size) continue;
      const char *name = (const char *)img + strh.sh_offset + sym.st_name;
      size_t maxn = strh.sh_size - sym.st_name;
      if (!memchr(name, '\0', maxn)) continue;
      if (strcmp(name, entry) == 0) return 1;
      if (name[0] == '_' && name[1] == 'Z' && strstr(name, entry)) snprintf(mangled, mlen, "%s", name);
    }
  }
  return 0;
}

int gpu_cubin_arch(const uint8_t *img, size_t len) {
  if (len < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) != 0 || img[EI_CLASS] != ELFCLASS64) return -1;
  Elf64_Ehdr eh;
  memcpy(&eh, img, sizeof eh);
  if (eh.e_machine != EM_CUDA) return -1;
  /* the ELF ABI version 8 cubins (CUDA 12.8 on) keep sm in bits 8..15 */
  return (int)(img[EI_ABIVERSION] >= 8 ? (eh.e_flags >> 8) & 0xff : eh.e_flags & 0xff);
}

/* The compile process is built as the library was when the library is
 * sanitized (the NVRTC it loads may be too: the tests' driver double);
 * otherwise with the host's compiler, like the host worker. */
#ifdef SCHEDRUN_HELPER_CC
static const char *const helper_cc = SCHEDRUN_HELPER_CC;
#else
static const char *const helper_cc = NULL;
#endif
static const char *const helper_flags[] = {
#ifdef SCHEDRUN_HELPER_SANITIZE
    "-fsanitize=" SCHEDRUN_HELPER_SANITIZE,
#endif
#ifdef SCHEDRUN_HELPER_COVERAGE
    SCHEDRUN_HELPER_COVERAGE,
#endif
    NULL};

/* The compile process, built into the cache on first use: *exe names its
 * checked descriptor. False when there is none (no cache directory, no C
 * compiler, or SCHEDRUN_NVRTC_IN_PROCESS set): NVRTC then runs in this
 * process, where a compile cannot be stopped. */
static bool compile_process(nvrtc_api *a, const char *cache_dir, char *exe, size_t n) {
  pthread_mutex_lock(&a->lock);
  if (a->worker_state == 0 && cache_dir) {
    a->worker_state = -1;
    const char *inproc = getenv("SCHEDRUN_NVRTC_IN_PROCESS");
    if (a->lib[0] && !(inproc && *inproc && strcmp(inproc, "0"))) {
      schedrun_error_t e = {0};
      const host_text parts[] = {{"gpu/cuda/nvrtc_worker.c", nvrtc_worker_text}};
      if (host_helper_program(cache_dir, "nvrtc-worker", "the NVRTC compile process", parts, 1, helper_cc,
                              helper_flags, &a->worker, &a->worker_fd, &e) == SCHEDRUN_OK)
        a->worker_state = 1;
      schedrun_error_clear(&e);
    }
  }
  bool ok = cache_dir && a->worker_state == 1;
  if (ok) snprintf(exe, n, "/proc/self/fd/%d", a->worker_fd);
  pthread_mutex_unlock(&a->lock);
  return ok;
}

/* NVRTC in this process: the image (a cubin, or PTX with its NUL) and the log. */
static int image_here(nvrtc_api *a, const gpu_compile_req *r, const char *src, const char *const *opts, int nopts,
                      bool ptx, uint8_t **out, size_t *out_len, char **log, schedrun_error_t *err) {
  nvrtcProgram prog = NULL;
  nvrtcResult nr = a->CreateProgram(&prog, src, r->name, 0, NULL, NULL);
  if (nr != 0) return err_set(err, SCHEDRUN_ECOMPILE, "nvrtcCreateProgram: %s", a->GetErrorString(nr));
  nr = a->CompileProgram(prog, nopts, opts);
  size_t log_len = 0;
  if (a->GetProgramLogSize(prog, &log_len) == 0 && log_len > 1) {
    *log = malloc(log_len);
    if (*log && a->GetProgramLog(prog, *log) != 0) (*log)[0] = '\0';
  }
  int rc = SCHEDRUN_OK;
  if (nr != 0)
    rc = err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s' does not compile for %s (%s)", r->name, r->arch,
                 a->GetErrorString(nr));
  else if ((ptx ? a->GetPTXSize(prog, out_len) : a->GetCUBINSize(prog, out_len)) != 0 || *out_len == 0 ||
           !(*out = malloc(*out_len)) || (ptx ? a->GetPTX(prog, (char *)*out) : a->GetCUBIN(prog, (char *)*out)) != 0)
    rc = err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s': NVRTC produced no %s for %s", r->name, ptx ? "PTX" : "cubin",
                 r->arch);
  a->DestroyProgram(&prog);
  return rc;
}

/* NVRTC in the compile process (gpu/cuda/nvrtc_worker.c), killed when the
 * compile is stopped or runs past its timeout. */
static int image_in_worker(nvrtc_api *a, const char *exe, const gpu_compile_req *r, const char *tmp_dir,
                            const char *src, const char *const *opts, int nopts, bool ptx, uint8_t **out,
                            size_t *out_len, char **log, schedrun_error_t *err) {
  char f_src[4200], f_out[4200], f_log[4200], f_said[4200];
  snprintf(f_src, sizeof f_src, "%s/kernel.cu", tmp_dir);
  snprintf(f_out, sizeof f_out, "%s/kernel.%s", tmp_dir, ptx ? "ptx" : "cubin");
  snprintf(f_log, sizeof f_log, "%s/nvrtc.log", tmp_dir);
  snprintf(f_said, sizeof f_said, "%s/said", tmp_dir);
  int rc = fs_write_atomic(f_src, src, strlen(src), err);
  if (rc) return rc;
  char *argv[16] = {(char *)exe, a->lib, a->builtins, f_src, (char *)r->name, ptx ? "ptx" : "cubin", f_out, f_log};
  int na = 8;
  for (int i = 0; i < nopts && na < 15; i++) argv[na++] = (char *)opts[i];
  argv[na] = NULL;
  int st = host_run_bounded(argv, f_said, r->cancel, r->timeout_ns, "the NVRTC compile process", err);
  if (st == 3) {
    /* this NVRTC loads only into the library's process (one that needs
     * what the process has loaded): compiles run there from now on */
    pthread_mutex_lock(&a->lock);
    a->worker_state = -1;
    pthread_mutex_unlock(&a->lock);
    unlink(f_src);
    unlink(f_said);
    return image_here(a, r, src, opts, nopts, ptx, out, out_len, log, err);
  }
  *log = host_read_log(f_log);
  char *said = st > 0 ? host_read_log(f_said) : NULL;
  if (said) said[strcspn(said, "\n")] = '\0';
  if (st < 0) rc = err && err->code ? err->code : SCHEDRUN_ECOMPILE;
  else if (st == 1)
    rc = err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s' does not compile for %s (%s)", r->name, r->arch,
                 said ? said : "NVRTC failed");
  else if (st != 0)
    rc = err_set(err, SCHEDRUN_EBACKEND, "kernel '%s': the NVRTC compile process failed (exit %d): %s", r->name, st,
                 said ? said : "");
  else if ((rc = fs_read_file(f_out, (char **)out, out_len, err)) == SCHEDRUN_OK && *out_len == 0)
    rc = err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s': NVRTC produced no %s for %s", r->name, ptx ? "PTX" : "cubin",
                 r->arch);
  free(said);
  unlink(f_src);
  unlink(f_out);
  unlink(f_log);
  unlink(f_said);
  return rc;
}

static int nv_compile_one(void *ctx, const gpu_compile_req *r, const char *tmp_dir, uint8_t **out, size_t *out_len,
                          char **log, schedrun_error_t *err) {
  nvrtc_api *a = ctx;
  *out = NULL;
  *out_len = 0;
  *log = NULL;
  /* sm_XX: a cubin for that architecture; compute_XX: PTX for it, which the
   * driver compiles for each device (devices of several architectures) */
  bool virt = r->arch && strncmp(r->arch, "compute_", 8) == 0;
  if (!r->arch || (!virt && strncmp(r->arch, "sm_", 3) != 0))
    return err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s': the cuda target needs an sm_XX or compute_XX architecture, not '%s'",
                   r->name, r->arch ? r->arch : "");
  char *end;
  long want = strtol(r->arch + (virt ? 8 : 3), &end, 10);
  int ptx_arch = 0;
  char archs[2048];
  int how = *end == '\0' && want > 0 && want < 10000 ? arch_support(a, (int)want, &ptx_arch, archs, sizeof archs) : 0;
  if (how == 0)
    /* NVRTC would only say NVRTC_ERROR_INVALID_OPTION, with an empty log */
    return err_set(err, SCHEDRUN_EBACKEND, "kernel '%s': this NVRTC cannot compile for %s; it supports %s", r->name,
                   r->arch, archs[0] ? archs : "other architectures");
  if (virt && how == 1) {
    how = 2; /* PTX for the architecture asked for */
    ptx_arch = (int)want;
  }
  strbuf src;
  sb_init(&src);
  kernel_abi_source(&src, r);
  if (src.failed) {
    sb_free(&src);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  char arch_opt[64];
  if (how == 2) snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=compute_%d", ptx_arch);
  else snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", r->arch);
  const char *opts[] = {arch_opt, NVRTC_STD};
  bool ptx = how == 2;
  char exe[64];
  int rc = compile_process(a, r->cache_dir, exe, sizeof exe)
               ? image_in_worker(a, exe, r, tmp_dir, src.data, opts, 2, ptx, out, out_len, log, err)
               : image_here(a, r, src.data, opts, 2, ptx, out, out_len, log, err);
  sb_free(&src);
  if (rc == SCHEDRUN_OK && ptx) {
    /* PTX, NUL-terminated as cuModuleLoadData wants it */
    (*out)[*out_len - 1] = '\0';
    char entry[300];
    snprintf(entry, sizeof entry, ".entry %s(", r->entry);
    if (!strstr((const char *)*out, entry))
      rc = err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s': the PTX has no __global__ function '%s' (is it extern \"C\"?)",
                   r->name, r->entry);
  } else if (rc == SCHEDRUN_OK) {
    char mangled[256];
    int found = elf_find_entry(*out, *out_len, r->entry, mangled, sizeof mangled);
    if (found < 0)
      rc = err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s': the cubin is not a 64-bit ELF", r->name);
    else if (found == 0 && mangled[0])
      rc = err_set(err, SCHEDRUN_ECOMPILE,
                   "kernel '%s': entry '%s' is not extern \"C\" (the cubin has it as '%s'); declare it "
                   "extern \"C\" __global__",
                   r->name, r->entry, mangled);
    else if (found == 0)
      rc = err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s': the cubin has no __global__ function '%s'", r->name, r->entry);
  }
  if (rc) {
    free(*out);
    *out = NULL;
    *out_len = 0;
  }
  return rc;
}

/* "sm_80+sm_90": a cubin for each (devices of several architectures), packed
 * into one artifact (arch_bundle.h) from which the loader takes each
 * device's. Compiled one after another: the pool already runs several
 * kernels at once. The log names each architecture before its part. */
static int nv_compile(void *ctx, const gpu_compile_req *r, const char *tmp_dir, uint8_t **out, size_t *out_len,
                      char **log, schedrun_error_t *err) {
  if (!r->arch || !strchr(r->arch, '+')) return nv_compile_one(ctx, r, tmp_dir, out, out_len, log, err);
  *out = NULL;
  *out_len = 0;
  *log = NULL;
  char names[ARCH_BUNDLE_MAX][ARCH_BUNDLE_NAME_MAX + 1];
  const char *archs[ARCH_BUNDLE_MAX];
  uint8_t *imgs[ARCH_BUNDLE_MAX] = {0};
  size_t lens[ARCH_BUNDLE_MAX] = {0};
  size_t n = 0;
  int rc = SCHEDRUN_OK;
  for (const char *p = r->arch; rc == SCHEDRUN_OK;) {
    size_t k = strcspn(p, "+");
    if (k == 0 || k > ARCH_BUNDLE_NAME_MAX || n == ARCH_BUNDLE_MAX || strncmp(p, "sm_", 3) != 0)
      rc = err_set(err, SCHEDRUN_ECOMPILE,
                   "kernel '%s': the cuda target needs sm_XX architectures joined by '+' (at most %d), not '%s'",
                   r->name, ARCH_BUNDLE_MAX, r->arch);
    else {
      memcpy(names[n], p, k);
      names[n][k] = '\0';
      archs[n] = names[n];
      n++;
    }
    if (p[k] == '\0') break;
    p += k + 1;
  }
  strbuf logs;
  sb_init(&logs);
  for (size_t i = 0; rc == SCHEDRUN_OK && i < n; i++) {
    gpu_compile_req one = *r;
    one.arch = archs[i];
    char *l = NULL;
    rc = nv_compile_one(ctx, &one, tmp_dir, &imgs[i], &lens[i], &l, err);
    if (l && *l) sb_addf(&logs, "%s:\n%s%s", archs[i], l, l[strlen(l) - 1] == '\n' ? "" : "\n");
    free(l);
  }
  if (rc == SCHEDRUN_OK) {
    int pr = arch_bundle_pack(n, archs, (const uint8_t *const *)imgs, lens, out, out_len);
    if (pr == -2) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    else if (pr)
      rc = err_set(err, SCHEDRUN_ECOMPILE, "kernel '%s': '%s' names an architecture twice", r->name, r->arch);
  }
  for (size_t i = 0; i < n; i++) free(imgs[i]);
  if (!logs.failed && logs.len) *log = sb_take(&logs);
  else sb_free(&logs);
  return rc;
}

/* ---- device-linked PTX, for the backend's own kernels ---- */

/* Relabels the PTX's ".version M.m" as max_isa's when it is newer (in
 * place: both have one digit each side of the point). */
static void ptx_relabel(char *ptx, int max_isa) {
  char *v = strstr(ptx, ".version ");
  if (!v || max_isa <= 0 || max_isa > 99) return;
  v += 9;
  if (!isdigit((unsigned char)v[0]) || v[1] != '.' || !isdigit((unsigned char)v[2]) || isdigit((unsigned char)v[3]))
    return;
  if ((v[0] - '0') * 10 + (v[2] - '0') <= max_isa) return;
  v[0] = (char)('0' + max_isa / 10);
  v[2] = (char)('0' + max_isa % 10);
}

/* libcudadevrt.a for the NVRTC a has loaded: $SCHEDRUN_CUDADEVRT, beside
 * libnvrtc in a toolkit, else the usual places; "" when none is found. */
static void find_devrt(const nvrtc_api *a, char *devrt, size_t devrt_len) {
  Dl_info info;
  char dir[4096] = "";
  if (dladdr((void *)a->GetErrorString, &info) && info.dli_fname && strrchr(info.dli_fname, '/')) {
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    *strrchr(dir, '/') = '\0';
  }
  const char *env = getenv("SCHEDRUN_CUDADEVRT");
  const char *dirs[] = {dir, "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"};
  devrt[0] = '\0';
  if (env && *env && access(env, R_OK) == 0) snprintf(devrt, devrt_len, "%s", env);
  for (size_t i = 0; !devrt[0] && i < SCHEDRUN__ARRAY_LEN(dirs); i++) {
    char cand[4200];
    snprintf(cand, sizeof cand, "%s/libcudadevrt.a", dirs[i]);
    if (dirs[i][0] && access(cand, R_OK) == 0) snprintf(devrt, devrt_len, "%s", cand);
  }
}

int nvrtc_devrt_here(char *devrt, size_t devrt_len) {
  void *ctx = NULL;
  schedrun_error_t e = {0};
  int rc = nv_open(&ctx, &e);
  schedrun_error_clear(&e);
  devrt[0] = '\0';
  if (rc) return rc;
  find_devrt(ctx, devrt, devrt_len);
  nv_close(ctx);
  return devrt[0] ? SCHEDRUN_OK : SCHEDRUN_EBACKEND;
}

int nvrtc_own_ptx(const char *source, const char *name, int arch, int max_isa, char **ptx, char *devrt,
                  size_t devrt_len, schedrun_error_t *err) {
  *ptx = NULL;
  void *ctx = NULL;
  int rc = nv_open(&ctx, err);
  if (rc) return rc;
  nvrtc_api *a = ctx;
  int ptx_arch = 0;
  char archs[2048];
  int how = arch_support(a, arch, &ptx_arch, archs, sizeof archs);
  if (how == 0) {
    nv_close(ctx);
    return err_set(err, SCHEDRUN_EBACKEND, "this NVRTC cannot compile for sm_%d", arch);
  }
  bool rdc = devrt != NULL;
  if (rdc) find_devrt(a, devrt, devrt_len);
  char arch_opt[64];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=compute_%d", how == 2 ? ptx_arch : arch);
  const char *opts[] = {arch_opt, NVRTC_STD, "-rdc=true"};
  nvrtcProgram prog = NULL;
  nvrtcResult nr = a->CreateProgram(&prog, source, name, 0, NULL, NULL);
  if (nr == 0) nr = a->CompileProgram(prog, rdc ? 3 : 2, opts);
  size_t n = 0;
  if (nr == 0 && a->GetPTXSize(prog, &n) == 0 && n > 1 && (*ptx = malloc(n)) != NULL && a->GetPTX(prog, *ptx) != 0) {
    free(*ptx);
    *ptx = NULL;
  }
  if (!*ptx) rc = err_set(err, SCHEDRUN_EBACKEND, "NVRTC cannot compile %s: %s", name, nr ? a->GetErrorString(nr) : "no PTX");
  else ptx_relabel(*ptx, max_isa);
  if (prog) a->DestroyProgram(&prog);
  nv_close(ctx);
  return rc;
}

static int nv_recipe(void *ctx, char **out, schedrun_error_t *err) {
  (void)ctx;
  strbuf sb;
  sb_init(&sb);
  sb_adds(&sb, NVRTC_STD "\n");
  kernel_abi_source(&sb, &gpu_recipe_sample);
  if (sb.failed) {
    sb_free(&sb);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  *out = sb_take(&sb);
  return SCHEDRUN_OK;
}

const gpu_compile_target gpu_cuda_target = {
    .name = "cuda",
    .ext = ".cubin",
    .open = nv_open,
    .close = nv_close,
    .identity = nv_identity,
    .stamp = NULL,
    .recipe = nv_recipe,
    .compile = nv_compile,
};
