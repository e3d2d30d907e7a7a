/*
 * The double's modules: reading NVRTC's cubins and PTX, the sources behind
 * them, building those for the CPU, functions, eager launches, the JIT
 * linker, and the NVRTC stand-in that records each image's source.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "double.h"
#include "gpu/backend.h"
#include "gpu/host/host_build.h"
#include "gpu/host/host_kernel_tu.h"

#define LINKED_MAGIC "SRDBLLNK" /* what cuLinkComplete gives: the magic, then the linked PTX */

/* ---- images ---- */

/* The bytes an image handed over as a bare pointer occupies: an ELF's
 * extent from its headers, a PTX's text, a linked image's. 0 if unknown. */
static size_t image_size(const uint8_t *img) {
  if (memcmp(img, ELFMAG, SELFMAG) == 0) {
    Elf64_Ehdr eh;
    memcpy(&eh, img, sizeof eh);
    if (img[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr)) return 0;
    size_t end = eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr);
    for (unsigned i = 0; i < eh.e_shnum; i++) {
      Elf64_Shdr sh;
      memcpy(&sh, img + eh.e_shoff + i * sizeof sh, sizeof sh);
      if (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > end) end = sh.sh_offset + sh.sh_size;
    }
    if (eh.e_phoff + (size_t)eh.e_phnum * eh.e_phentsize > end) end = eh.e_phoff + (size_t)eh.e_phnum * eh.e_phentsize;
    return end;
  }
  if (memcmp(img, LINKED_MAGIC, 8) == 0) return 8 + strlen((const char *)img + 8);
  return strlen((const char *)img);
}

/* The key an image's source is kept under. PTX is hashed without its
 * ".version" line, so that PTX relabelled for an older driver (the
 * backend's condition kernel) still finds the source it was compiled from. */
static void image_hash(const void *p, size_t n, char out[65]) {
  hash_ctx *h = hash_new();
  const char *t = p, *v = n > SELFMAG && memcmp(p, ELFMAG, SELFMAG) != 0 ? memmem(t, n, ".version ", 9) : NULL;
  const char *eol = v ? memchr(v, '\n', n - (size_t)(v - t)) : NULL;
  if (eol) {
    hash_add(h, t, (size_t)(v - t));
    hash_add(h, eol, n - (size_t)(eol - t));
  } else {
    hash_add(h, p, n);
  }
  hash_final_hex(h, out);
}

static int add_kernel(dmod *m, const char *name, size_t len) {
  struct dkernel *k = realloc(m->kernels, (m->nkernels + 1) * sizeof *k);
  if (!k) return -1;
  m->kernels = k;
  k = &k[m->nkernels];
  memset(k, 0, sizeof *k);
  k->name = xstrndup(name, len);
  if (!k->name) return -1;
  m->nkernels++;
  return 0;
}

/* Kernels and their parameter sizes from a cubin: one .nv.info.<kernel>
 * section per kernel, holding an EIATTR_KPARAM_INFO record per parameter. */
static CUresult parse_cubin(dmod *m, const uint8_t *img, size_t len, int arch) {
  Elf64_Ehdr eh;
  memcpy(&eh, img, sizeof eh);
  if (eh.e_machine != EM_CUDA || eh.e_shstrndx >= eh.e_shnum) return CUDA_ERROR_INVALID_IMAGE;
  int sm = gpu_cubin_arch(img, len);
  if (sm / 10 != arch / 10 || sm % 10 > arch % 10) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  Elf64_Shdr strs;
  memcpy(&strs, img + eh.e_shoff + eh.e_shstrndx * sizeof strs, sizeof strs);
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh;
    memcpy(&sh, img + eh.e_shoff + i * sizeof sh, sizeof sh);
    /* a NOBITS section (.nv.shared.<kernel>: a kernel's static shared memory) has no bytes in the file */
    if (sh.sh_name >= strs.sh_size || (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > len))
      return CUDA_ERROR_INVALID_IMAGE;
    const char *name = (const char *)img + strs.sh_offset + sh.sh_name;
    if (strncmp(name, ".nv.info.", 9) != 0) continue;
    if (add_kernel(m, name + 9, strlen(name + 9))) return CUDA_ERROR_OUT_OF_MEMORY;
    struct dkernel *k = &m->kernels[m->nkernels - 1];
    const uint8_t *p = img + sh.sh_offset, *end = p + sh.sh_size;
    while (p + 4 <= end) {
      uint8_t fmt = p[0], attr = p[1];
      if (fmt == 4) { /* a sized value */
        uint16_t size;
        memcpy(&size, p + 2, 2);
        if (p + 4 + size > end) return CUDA_ERROR_INVALID_IMAGE;
        if (attr == 0x17 && size >= 12) { /* EIATTR_KPARAM_INFO */
          uint16_t ordinal;
          uint32_t packed;
          memcpy(&ordinal, p + 8, 2);
          memcpy(&packed, p + 12, 4);
          if (ordinal >= 64) return CUDA_ERROR_INVALID_IMAGE;
          k->size[ordinal] = (uint16_t)(packed >> 18);
          if (ordinal + 1u > k->nparams) k->nparams = ordinal + 1u;
        }
        p += 4 + size;
      } else if (fmt == 1 || fmt == 2 || fmt == 3) {
        p += 4;
      } else {
        return CUDA_ERROR_INVALID_IMAGE;
      }
    }
    for (uint32_t j = 0; j < k->nparams; j++)
      if (!k->size[j]) return CUDA_ERROR_INVALID_IMAGE;
  }
  return CUDA_SUCCESS;
}

static unsigned ptx_type_size(const char *t) {
  if (!strncmp(t, "u64", 3) || !strncmp(t, "b64", 3) || !strncmp(t, "s64", 3) || !strncmp(t, "f64", 3)) return 8;
  if (!strncmp(t, "u32", 3) || !strncmp(t, "b32", 3) || !strncmp(t, "s32", 3) || !strncmp(t, "f32", 3)) return 4;
  if (!strncmp(t, "u16", 3) || !strncmp(t, "b16", 3) || !strncmp(t, "s16", 3) || !strncmp(t, "f16", 3)) return 2;
  if (!strncmp(t, "u8", 2) || !strncmp(t, "b8", 2) || !strncmp(t, "s8", 2)) return 1;
  return 0;
}

/* Kernels from PTX: each ".entry name(" and its ".param .type name" list. */
static CUresult parse_ptx(dmod *m, const char *ptx, int arch, bool linked) {
  const char *v = strstr(ptx, ".version ");
  const char *t = strstr(ptx, ".target sm_");
  if (!v || !t) return CUDA_ERROR_INVALID_PTX;
  int isa = atoi(v + 9) * 10 + (strchr(v, '.') && v[9] && v[10] == '.' ? atoi(v + 11) % 10 : 0), target = atoi(t + 11);
  /* the newest ISA each driver reads: CUDA 12.0-12.5 read 8.0-8.5, 12.6
   * 8.5, 12.8 8.7, 12.9 8.8, 13.m 9.m (release notes) */
  int dmajor = dbl_driver_version / 1000, dminor = dbl_driver_version % 1000 / 10;
  int newest = dmajor >= 13 ? 90 + dminor : dminor <= 5 ? 80 + dminor : dminor == 6 ? 85 : 79 + dminor;
  if (isa > newest) return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  if (target > arch) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  if (!linked && strstr(ptx, ".extern .func")) return CUDA_ERROR_INVALID_PTX; /* unresolved: needs cuLink* */
  for (const char *p = ptx; (p = strstr(p, ".entry ")) != NULL;) {
    p += 7;
    size_t n = strcspn(p, "( \t\n");
    if (add_kernel(m, p, n)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct dkernel *k = &m->kernels[m->nkernels - 1];
    const char *close = strchr(p, ')');
    if (!close) return CUDA_ERROR_INVALID_PTX;
    for (const char *q = p; (q = strstr(q, ".param ")) != NULL && q < close; q += 7) {
      const char *ty = q + 7;
      unsigned size;
      if (!strncmp(ty, ".align ", 7)) { /* .param .align A .b8 name[N] */
        const char *br = strchr(ty, '[');
        size = br && br < close ? (unsigned)atoi(br + 1) : 0;
      } else {
        size = ty[0] == '.' ? ptx_type_size(ty + 1) : 0;
      }
      if (!size || k->nparams >= 64) return CUDA_ERROR_INVALID_PTX;
      k->size[k->nparams++] = (uint16_t)size;
    }
  }
  return m->nkernels ? CUDA_SUCCESS : CUDA_ERROR_INVALID_PTX;
}

/* ---- sources and CPU builds ---- */

static int write_file(const char *path, const void *data, size_t len) {
  schedrun_error_t e = {0};
  fs_mkdir_p(dbl_state_dir(), &e);
  schedrun_error_clear(&e);
  int rc = fs_write_atomic(path, data, len, &e);
  schedrun_error_clear(&e);
  return rc;
}

static void register_source(const void *img, size_t len, const char *src) {
  char h[65], path[700];
  image_hash(img, len, h);
  snprintf(path, sizeof path, "%s/src-%s.cu", dbl_state_dir(), h);
  write_file(path, src, strlen(src));
}

/* After the host prelude's headers: the source was compiled by NVRTC, which
 * defines __CUDACC__ and __CUDACC_RTC__, and a kernel may ask for them. */
static const char dbl_prelude[] =
    "#include <utility>\n"
    "#define __CUDACC__ 1\n"
    "#define __CUDACC_RTC__ 1\n"
    "typedef unsigned long long cudaGraphConditionalHandle;\n"
    "extern \"C\" { __attribute__((visibility(\"default\"))) void (*__dbl_set_conditional)(uint64_t, unsigned); }\n"
    "static inline void cudaGraphSetConditional(cudaGraphConditionalHandle h, unsigned v) { __dbl_set_conditional((uint64_t)h, v); }\n"
    "template <class T> static inline T __dbl_arg(const uint64_t *s) { T v; std::memcpy(&v, s, sizeof v); return v; }\n"
    "template <class... A, std::size_t... I>\n"
    "static inline void __dbl_call2(void (*f)(A...), const uint64_t *a, std::index_sequence<I...>) {\n"
    "  f(__dbl_arg<A>(&a[I])...); }\n"
    "template <class... A> static inline void __dbl_call(void (*f)(A...), const uint64_t *a) {\n"
    "  __dbl_call2(f, a, std::index_sequence_for<A...>{}); }\n";

/* Builds (or finds built) the CPU version of a module's source and opens it. */
static CUresult build(dmod *m) {
  char path[700];
  snprintf(path, sizeof path, "%s/src-%s.cu", dbl_state_dir(), m->hash);
  char *src = NULL;
  size_t len = 0;
  schedrun_error_t e = {0};
  if (fs_read_file(path, &src, &len, &e) != SCHEDRUN_OK) {
    schedrun_error_clear(&e);
    fprintf(stderr,
            "cuda-double: no source is recorded for image %.12s: it was not compiled through the double's NVRTC "
            "(a kernel cache filled by another NVRTC? use a cache of its own)\n",
            m->hash);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  strbuf tu;
  sb_init(&tu);
  bool blocks = host_tu_needs_blocks(src);
  host_tu_prelude(&tu, blocks);
  sb_adds(&tu, dbl_prelude);
  int bad = host_tu_source(&tu, src);
  sb_adds(&tu, "\n");
  free(src);
  if (bad) {
    fprintf(stderr, "cuda-double: module %.12s line %d: an extern __shared__ array outside a function\n", m->hash, bad);
    sb_free(&tu);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  for (uint32_t i = 0; i < m->nkernels; i++) {
    char call[400];
    snprintf(call, sizeof call, "__dbl_call(%s, __a);", m->kernels[i].name);
    host_tu_launcher(&tu, m->kernels[i].name, m->kernels[i].name, "", call, blocks);
  }
  if (tu.failed) {
    sb_free(&tu);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  /* the built module is known by its source and the options it is built with */
  strbuf key;
  sb_init(&key);
  host_build_flags(&key);
  sb_adds(&key, "\n");
  sb_add(&key, tu.data, tu.len);
  char th[65], so[700];
  image_hash(key.failed ? tu.data : key.data, key.failed ? tu.len : key.len, th);
  sb_free(&key);
  snprintf(so, sizeof so, "%s/cpu-%s.so", dbl_state_dir(), th);
  CUresult r = CUDA_SUCCESS;
  if (access(so, R_OK) != 0) {
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s/build-%ld-XXXXXX", dbl_state_dir(), (long)getpid());
    fs_mkdir_p(dbl_state_dir(), &e);
    schedrun_error_clear(&e);
    uint8_t *out = NULL;
    size_t out_len = 0;
    char *log = NULL;
    if (!mkdtemp(tmp)) {
      r = CUDA_ERROR_OPERATING_SYSTEM;
    } else if (host_build_so(tu.data, tu.len, tmp, "module", "a module", NULL, 0, &out, &out_len, &log, &e) != 0) {
      fprintf(stderr, "cuda-double: cannot build a module for the CPU: %s\n%s\n", e.message, log ? log : "");
      r = CUDA_ERROR_INVALID_IMAGE;
    } else if (write_file(so, out, out_len) != 0) {
      r = CUDA_ERROR_OPERATING_SYSTEM;
    }
    schedrun_error_clear(&e);
    fs_remove_tree(tmp);
    free(out);
    free(log);
  }
  sb_free(&tu);
  if (r != CUDA_SUCCESS) return r;
  m->so = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!m->so) return CUDA_ERROR_INVALID_IMAGE;
  void (**set)(uint64_t, unsigned) = (void (**)(uint64_t, unsigned))dlsym(m->so, "__dbl_set_conditional");
  if (set) *set = dbl_set_conditional;
  return CUDA_SUCCESS;
}

static void mod_free(dmod *m) {
  for (uint32_t i = 0; i < m->nfuncs; i++) dbl_free(m->funcs[i]);
  for (uint32_t i = 0; i < m->nkernels; i++) free(m->kernels[i].name);
  free(m->funcs);
  free(m->kernels);
  if (m->so) dlclose(m->so);
  dbl_free(m);
}

/* ---- entry points: modules ---- */

static CUresult d_cuModuleLoadData(CUmodule *out, const void *image) {
  ENTER("cuModuleLoadData");
  dctx *x = dbl_current();
  if (!x) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  if (!out || !image) LEAVE(CUDA_ERROR_INVALID_VALUE);
  const uint8_t *img = image;
  size_t len = image_size(img);
  if (!len) LEAVE(CUDA_ERROR_INVALID_IMAGE);
  dmod *m = dbl_new(K_MOD, sizeof *m);
  if (!m) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  m->ctx = x;
  int arch = dbl_device_arch(x->ordinal);
  CUresult r;
  if (memcmp(img, ELFMAG, SELFMAG) == 0) {
    r = parse_cubin(m, img, len, arch);
    image_hash(img, len, m->hash);
  } else if (memcmp(img, LINKED_MAGIC, 8) == 0) {
    r = parse_ptx(m, (const char *)img + 8, arch, true);
    image_hash(img + 8, len - 8, m->hash);
  } else {
    r = parse_ptx(m, (const char *)img, arch, false);
    image_hash(img, len, m->hash);
  }
  if (r == CUDA_SUCCESS) r = build(m);
  if (r != CUDA_SUCCESS) {
    mod_free(m);
    LEAVE(r);
  }
  *out = (CUmodule)m;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuModuleUnload(CUmodule mod) {
  ENTER("cuModuleUnload");
  if (!dbl_live(mod, K_MOD)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  /* its kernels may still be queued: unloading waits for the context's work */
  dbl_wait(((dmod *)mod)->ctx, NULL, "cuModuleUnload");
  if (!dbl_live(mod, K_MOD)) LEAVE(CUDA_ERROR_INVALID_HANDLE); /* unloaded meanwhile */
  mod_free((dmod *)mod);
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuModuleGetFunction(CUfunction *out, CUmodule mod, const char *name) {
  ENTER("cuModuleGetFunction");
  if (!out || !name) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (!dbl_live(mod, K_MOD)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  dmod *m = (dmod *)mod;
  for (uint32_t i = 0; i < m->nfuncs; i++)
    if (strcmp(m->funcs[i]->k->name, name) == 0) {
      *out = (CUfunction)m->funcs[i];
      LEAVE(CUDA_SUCCESS);
    }
  for (uint32_t i = 0; i < m->nkernels; i++) {
    if (strcmp(m->kernels[i].name, name) != 0) continue;
    char sym[300];
    snprintf(sym, sizeof sym, "__sched_launch_%s", name);
    dbl_launcher run;
    *(void **)&run = dlsym(m->so, sym);
    dfunc **fs = realloc(m->funcs, (m->nfuncs + 1) * sizeof *fs);
    if (!fs) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    m->funcs = fs;
    dfunc *f = run ? dbl_new(K_FUNC, sizeof *f) : NULL;
    if (!f) LEAVE(run ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_FOUND);
    f->mod = m;
    f->k = &m->kernels[i];
    f->run = run;
    m->funcs[m->nfuncs++] = f;
    *out = (CUfunction)f;
    LEAVE(CUDA_SUCCESS);
  }
  LEAVE(CUDA_ERROR_NOT_FOUND);
}

/* ---- kernels ---- */

CUresult dbl_kernel_args(const dfunc *f, void **params, uint64_t *slots) {
  /* the driver copies each parameter, as many bytes as the kernel declares */
  if (f->k->nparams && !params) return CUDA_ERROR_INVALID_VALUE;
  for (uint32_t i = 0; i < f->k->nparams; i++) {
    if (!params[i]) return CUDA_ERROR_INVALID_VALUE;
    slots[i] = 0;
    memcpy(&slots[i], params[i], f->k->size[i] <= 8 ? f->k->size[i] : 8);
  }
  return CUDA_SUCCESS;
}

static bool dims_ok(const uint32_t g[3], const uint32_t b[3]) {
  for (int i = 0; i < 3; i++)
    if (!g[i] || !b[i]) return false;
  return (uint64_t)b[0] * b[1] * b[2] <= 1024 && b[2] <= 64 && g[1] <= 65535 && g[2] <= 65535;
}


static CUresult d_cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  ENTER("cuLaunchKernel");
  dctx *x = dbl_current();
  if (!x) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  if (!dbl_live(fn, K_FUNC) || (s && !dbl_live(s, K_STREAM))) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  dfunc *f = (dfunc *)fn;
  if (f->mod->ctx != x || (s && ((dstream *)s)->ctx != x)) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  if (extra || shmem > 48 * 1024) LEAVE(CUDA_ERROR_INVALID_VALUE);
  dwork w = {.type = CU_GRAPH_NODE_TYPE_KERNEL};
  w.u.k.f = f;
  uint32_t g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  memcpy(w.u.k.grid, g, sizeof g);
  memcpy(w.u.k.block, b, sizeof b);
  w.u.k.shared = shmem;
  if (!dims_ok(w.u.k.grid, w.u.k.block)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  CUresult r = dbl_sticky(x); /* a fault before it: the context takes no more work */
  if (r == CUDA_SUCCESS) r = dbl_kernel_args(f, params, w.u.k.args);
  if (r == CUDA_SUCCESS) r = dbl_enqueue_kernel(dbl_stream(s, x), &w);
  if (r == CUDA_SUCCESS) dbl_count("launch");
  LEAVE(r);
}

/* ---- the JIT linker: PTX plus libcudadevrt.a into one image ---- */

typedef struct dlink {
  dobj o;
  char *ptx;       /* the one PTX input */
  bool devrt;      /* libcudadevrt.a was added */
  uint8_t *out;    /* the image cuLinkComplete gave, until cuLinkDestroy */
} dlink;

static CUresult d_cuLinkCreate(unsigned nopt, CUjit_option *opts, void **vals, CUlinkState *out) {
  ENTER("cuLinkCreate");
  if (!dbl_current()) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  if (!out || (nopt && (!opts || !vals))) LEAVE(CUDA_ERROR_INVALID_VALUE);
  dlink *l = dbl_new(K_LINK, sizeof *l);
  if (!l) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  *out = (CUlinkState)l;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuLinkAddData(CUlinkState st, CUjitInputType type, void *data, size_t size, const char *name,
                                unsigned nopt, CUjit_option *opts, void **vals) {
  ENTER("cuLinkAddData");
  (void)name;
  (void)opts;
  (void)vals;
  (void)nopt;
  if (!dbl_live(st, K_LINK)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  dlink *l = (dlink *)st;
  if (type != CU_JIT_INPUT_PTX || !data || !size) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (l->ptx) LEAVE(CUDA_ERROR_NOT_SUPPORTED); /* the double links one PTX */
  l->ptx = xstrndup(data, strnlen(data, size));
  LEAVE(l->ptx ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

static CUresult d_cuLinkAddFile(CUlinkState st, CUjitInputType type, const char *path, unsigned nopt,
                                CUjit_option *opts, void **vals) {
  ENTER("cuLinkAddFile");
  (void)nopt;
  (void)opts;
  (void)vals;
  if (!dbl_live(st, K_LINK)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  if (!path) LEAVE(CUDA_ERROR_INVALID_VALUE);
  struct stat sb;
  if (stat(path, &sb) != 0) LEAVE(CUDA_ERROR_FILE_NOT_FOUND);
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (type != CU_JIT_INPUT_LIBRARY || strcmp(base, "libcudadevrt.a") != 0) LEAVE(CUDA_ERROR_NOT_SUPPORTED);
  ((dlink *)st)->devrt = true;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuLinkComplete(CUlinkState st, void **cubin, size_t *size) {
  ENTER("cuLinkComplete");
  if (!dbl_live(st, K_LINK)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  dlink *l = (dlink *)st;
  if (!cubin || !size || !l->ptx || l->out) LEAVE(CUDA_ERROR_INVALID_VALUE);
  /* cudaGraphSetConditional and the other device-runtime calls come from
   * libcudadevrt.a: without it they stay unresolved */
  if (strstr(l->ptx, ".extern .func") && !l->devrt) LEAVE(CUDA_ERROR_INVALID_PTX);
  size_t n = strlen(l->ptx);
  l->out = malloc(8 + n + 1);
  if (!l->out) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  memcpy(l->out, LINKED_MAGIC, 8);
  memcpy(l->out + 8, l->ptx, n + 1);
  *cubin = l->out;
  *size = 8 + n + 1;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuLinkDestroy(CUlinkState st) {
  ENTER("cuLinkDestroy");
  if (!dbl_live(st, K_LINK)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  dlink *l = (dlink *)st;
  free(l->ptx);
  free(l->out);
  dbl_free(l);
  LEAVE(CUDA_SUCCESS);
}

#define E(name, since) {#name, (void *)d_##name, since}
const dbl_entry dbl_module_entries[] = {
    E(cuModuleLoadData, 2000), E(cuModuleUnload, 2000), E(cuModuleGetFunction, 2000), E(cuLaunchKernel, 4000),
    E(cuLinkCreate, 6050), E(cuLinkAddData, 6050), E(cuLinkAddFile, 6050), E(cuLinkComplete, 5050),
    E(cuLinkDestroy, 5050), {NULL, NULL, 0}};
#undef E

/* ---- NVRTC, forwarded: every image it gives is remembered with its source ---- */

typedef int nvres;
typedef struct dprog {
  void *real;
  char *src;
} dprog;

static struct {
  void *dl;
  const char *(*GetErrorString)(nvres);
  nvres (*Version)(int *, int *);
  nvres (*CreateProgram)(void **, const char *, const char *, int, const char *const *, const char *const *);
  nvres (*DestroyProgram)(void **);
  nvres (*CompileProgram)(void *, int, const char *const *);
  nvres (*GetCUBINSize)(void *, size_t *);
  nvres (*GetCUBIN)(void *, char *);
  nvres (*GetPTXSize)(void *, size_t *);
  nvres (*GetPTX)(void *, char *);
  nvres (*GetProgramLogSize)(void *, size_t *);
  nvres (*GetProgramLog)(void *, char *);
  nvres (*GetNumSupportedArchs)(int *);
  nvres (*GetSupportedArchs)(int *);
} nv;

static bool nv_ok;

/* NVRTC is called from several compile threads: loaded once. */
static void nv_load_once(void) {
  const char *env = getenv("SCHEDRUN_CUDA_DOUBLE_NVRTC");
  const char *c[] = {env && *env ? env : "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                     "/usr/local/cuda/lib64/libnvrtc.so"};
  for (size_t i = 0; !nv.dl && i < sizeof c / sizeof c[0]; i++) nv.dl = dlopen(c[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!nv.dl) return;
#define S(f) *(void **)&nv.f = dlsym(nv.dl, "nvrtc" #f)
  S(GetErrorString); S(Version); S(CreateProgram); S(DestroyProgram); S(CompileProgram); S(GetCUBINSize);
  S(GetCUBIN); S(GetPTXSize); S(GetPTX); S(GetProgramLogSize); S(GetProgramLog); S(GetNumSupportedArchs);
  S(GetSupportedArchs);
#undef S
  nv_ok = nv.GetErrorString && nv.Version && nv.CreateProgram && nv.DestroyProgram && nv.CompileProgram &&
          nv.GetCUBINSize && nv.GetCUBIN && nv.GetPTXSize && nv.GetPTX && nv.GetProgramLogSize && nv.GetProgramLog;
}

static bool nv_load(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, nv_load_once);
  return nv_ok;
}

#define NV_EXPORT(ret, name, args) DBL_EXPORT ret dbl_##name args __asm__(#name); ret dbl_##name args
#define NVRTC_ERROR_OUT_OF_MEMORY 1
#define NVRTC_ERROR_INVALID_INPUT 3

NV_EXPORT(const char *, nvrtcGetErrorString, (nvres r)) { return nv_load() ? nv.GetErrorString(r) : "NVRTC is not available"; }
/* The NVRTC that matches the double's driver: the real one's version, but
 * no newer than the driver's (the double runs what any NVRTC compiles);
 * SCHEDRUN_CUDA_DOUBLE_NVRTC_VERSION (M.m) says another. */
NV_EXPORT(nvres, nvrtcVersion, (int *a, int *b)) {
  if (!nv_load()) return NVRTC_ERROR_INVALID_INPUT;
  nvres r = nv.Version(a, b);
  const char *v = getenv("SCHEDRUN_CUDA_DOUBLE_NVRTC_VERSION");
  if (r == 0 && v && *v && strchr(v, '.')) {
    *a = atoi(v);
    *b = atoi(strchr(v, '.') + 1);
  } else if (r == 0 && *a * 1000 + *b * 10 > dbl_driver_version) {
    *a = dbl_driver_version / 1000;
    *b = dbl_driver_version % 1000 / 10;
  }
  return r;
}
NV_EXPORT(nvres, nvrtcGetNumSupportedArchs, (int *n)) {
  return nv_load() && nv.GetNumSupportedArchs ? nv.GetNumSupportedArchs(n) : NVRTC_ERROR_INVALID_INPUT;
}
NV_EXPORT(nvres, nvrtcGetSupportedArchs, (int *a)) {
  return nv_load() && nv.GetSupportedArchs ? nv.GetSupportedArchs(a) : NVRTC_ERROR_INVALID_INPUT;
}
NV_EXPORT(nvres, nvrtcCreateProgram, (dprog **p, const char *src, const char *name, int nh, const char *const *h,
                                      const char *const *hn)) {
  if (!nv_load()) return NVRTC_ERROR_INVALID_INPUT;
  dprog *d = calloc(1, sizeof *d);
  if (!d || !(d->src = xstrdup(src ? src : ""))) {
    free(d);
    return NVRTC_ERROR_OUT_OF_MEMORY;
  }
  nvres r = nv.CreateProgram(&d->real, src, name, nh, h, hn);
  if (r != 0) {
    free(d->src);
    free(d);
    return r;
  }
  *p = d;
  return 0;
}
NV_EXPORT(nvres, nvrtcDestroyProgram, (dprog **p)) {
  if (!p || !*p) return NVRTC_ERROR_INVALID_INPUT;
  nvres r = nv.DestroyProgram(&(*p)->real);
  free((*p)->src);
  free(*p);
  *p = NULL;
  return r;
}
NV_EXPORT(nvres, nvrtcCompileProgram, (dprog *p, int n, const char *const *o)) {
  /* a kernel that takes long to compile (big ones take seconds, or minutes) */
  const char *ms = getenv("SCHEDRUN_CUDA_DOUBLE_COMPILE_MS");
  long long left = ms && *ms ? atoll(ms) : 0;
  for (struct timespec t; left > 0; left -= 100) {
    t = (struct timespec){0, (left < 100 ? left : 100) * 1000000L};
    nanosleep(&t, NULL);
  }
  return nv.CompileProgram(p->real, n, o);
}
NV_EXPORT(nvres, nvrtcGetCUBINSize, (dprog *p, size_t *n)) { return nv.GetCUBINSize(p->real, n); }
NV_EXPORT(nvres, nvrtcGetPTXSize, (dprog *p, size_t *n)) { return nv.GetPTXSize(p->real, n); }
NV_EXPORT(nvres, nvrtcGetProgramLogSize, (dprog *p, size_t *n)) { return nv.GetProgramLogSize(p->real, n); }
NV_EXPORT(nvres, nvrtcGetProgramLog, (dprog *p, char *s)) { return nv.GetProgramLog(p->real, s); }
NV_EXPORT(nvres, nvrtcGetCUBIN, (dprog *p, char *out)) {
  size_t n = 0;
  nvres r = nv.GetCUBINSize(p->real, &n);
  if (r == 0) r = nv.GetCUBIN(p->real, out);
  if (r == 0) register_source(out, image_size((const uint8_t *)out), p->src);
  return r;
}
NV_EXPORT(nvres, nvrtcGetPTX, (dprog *p, char *out)) {
  nvres r = nv.GetPTX(p->real, out);
  if (r == 0) register_source(out, strlen(out), p->src);
  return r;
}
