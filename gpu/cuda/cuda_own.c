/*
 * The CUDA backend's own kernels, built with NVRTC once per device at the
 * first need: the condition kernel that runs a while loop inside a graph
 * (conditional WHILE nodes), and the fill kernel for fills whose size
 * changes from job to job. Where one cannot be built, the backend does
 * without it (loops driven from the host; fills as memsets), saying why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda/cuda_internal.h"
#include "gpu/cuda/cuda_seq.h"

/* ---- the condition kernel ---- */

static const char cond_source[] =
    "extern \"C\" __global__ void schedrun_while_cond(cudaGraphConditionalHandle h, unsigned long long *p,\n"
    "                                                 int first) {\n"
    "  const int *flag = (const int *)p[0];\n"
    "  unsigned max = (unsigned)p[1];\n"
    "  unsigned trips = first ? 0u : (unsigned)(p[1] >> 32) + 1u;\n"
    "  p[1] = ((unsigned long long)trips << 32) | max;\n"
    "  cudaGraphSetConditional(h, *flag != 0 && trips < max ? 1u : 0u);\n"
    "}\n";

/* The newest PTX ISA a driver reads, as 84 for 8.4 (the CUDA release notes'
 * table); 0 for a driver newer than this table. The condition kernel uses
 * nothing newer than ISA 8.3, the first with conditional nodes, so it is
 * labelled for the driver in hand. */
static int driver_ptx_isa(int driver_version) {
  int major = driver_version / 1000, minor = driver_version % 1000 / 10;
  if (major == 12) return minor <= 5 ? 80 + minor : minor == 6 ? 85 : 79 + minor; /* 12.8: 8.7, 12.9: 8.8 */
  if (major == 13) return 90 + minor;
  return 0;
}

static void loops_on_host(cu_device *d, const char *why) {
  snprintf(d->loops_why, sizeof d->loops_why, "on the host, a synchronisation per trip (%s)", why);
  atomic_store(&d->loops, LOOPS_HOST);
}

/* Settles how d runs while loops, at its first loop (d's context current). */
void cu_loops_setup(cuda_backend *b, cu_device *d) {
  if (atomic_load(&d->loops) != LOOPS_UNKNOWN) return;
  const cu_api *a = &b->api;
  if (getenv("SCHEDRUN_CUDA_HOST_LOOPS")) return loops_on_host(d, "SCHEDRUN_CUDA_HOST_LOOPS is set");
  if (b->driver_version < CUDA_ABI_COND || !a->cuGraphConditionalHandleCreate || !a->cuGraphAddNode)
    return loops_on_host(d, "the driver has no conditional graph nodes; they need CUDA 12.3");
  if (!a->cuLinkCreate || !a->cuLinkAddData || !a->cuLinkAddFile || !a->cuLinkComplete || !a->cuLinkDestroy)
    return loops_on_host(d, "the driver has no JIT linker");
  schedrun_error_t e = {0};
  char *ptx = NULL, devrt[4096];
  if (nvrtc_own_ptx(cond_source, "schedrun_while_cond", d->sm, driver_ptx_isa(b->driver_version), &ptx, devrt,
                    sizeof devrt, &e)) {
    loops_on_host(d, e.message ? e.message : "the condition kernel does not compile");
    schedrun_error_clear(&e);
    return;
  }
  CUlinkState link = NULL;
  void *image = NULL;
  size_t size = 0;
  const char *call = "cuLinkCreate";
  CUresult r = a->cuLinkCreate(0, NULL, NULL, &link);
  if (r == CUDA_SUCCESS) {
    call = "cuLinkAddData";
    r = a->cuLinkAddData(link, CU_JIT_INPUT_PTX, ptx, strlen(ptx) + 1, "schedrun_while_cond", 0, NULL, NULL);
  }
  if (r == CUDA_SUCCESS && devrt[0]) {
    /* cudaGraphSetConditional's stub; without it the driver resolves the call when the module loads */
    call = "cuLinkAddFile";
    r = a->cuLinkAddFile(link, CU_JIT_INPUT_LIBRARY, devrt, 0, NULL, NULL);
  }
  if (r == CUDA_SUCCESS) {
    call = "cuLinkComplete";
    r = a->cuLinkComplete(link, &image, &size);
  }
  if (r == CUDA_SUCCESS) {
    call = "cuModuleLoadData";
    r = a->cuModuleLoadData(&d->cond_mod, image);
  }
  if (r == CUDA_SUCCESS) {
    call = "cuModuleGetFunction";
    r = a->cuModuleGetFunction(&d->cond_fn, d->cond_mod, "schedrun_while_cond");
    if (r != CUDA_SUCCESS) {
      a->cuModuleUnload(d->cond_mod);
      d->cond_mod = NULL;
    }
  }
  if (link) a->cuLinkDestroy(link);
  free(ptx);
  if (r == CUDA_SUCCESS) {
    atomic_store(&d->loops, LOOPS_CONDITIONAL);
  } else {
    cu_fail(a, &e, r, call, NULL);
    loops_on_host(d, e.message ? e.message : call);
    schedrun_error_clear(&e);
  }
}

/* ---- the fill kernel ---- */

/* A fill whose element count changes from job to job cannot stay a memset
 * node: a 13.x driver may refuse to grow a 1-D memset in place, a 12.x one
 * any 2-D one (8-byte patterns), and an empty fill is another kind of node.
 * Such a fill is a kernel node of this kernel instead, whose arguments
 * always update in place. */
static const char fill_source[] =
    "extern \"C\" __global__ void schedrun_fill(unsigned char *dst, unsigned long long count,\n"
    "                                           unsigned long long pattern, unsigned size) {\n"
    "  unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n"
    "  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {\n"
    "    if (size == 8) ((unsigned long long *)dst)[i] = pattern;\n"
    "    else if (size == 4) ((unsigned *)dst)[i] = (unsigned)pattern;\n"
    "    else dst[i] = (unsigned char)pattern;\n"
    "  }\n"
    "}\n";

/* Settles how d runs fills that change size, at the first one (d's
 * context current): the fill kernel, or memsets where it cannot be built
 * (updates then refused now and then, and the recording rebuilt). */
bool cu_fills_by_kernel(cuda_backend *b, cu_device *d) {
  if (d->fills != FILLS_UNKNOWN) return d->fills == FILLS_KERNEL;
  d->fills = FILLS_MEMSET;
  schedrun_error_t e = {0};
  char *ptx = NULL;
  if (nvrtc_own_ptx(fill_source, "schedrun_fill", d->sm, driver_ptx_isa(b->driver_version), &ptx, NULL, 0, &e)) {
    schedrun_error_clear(&e);
    return false;
  }
  CUresult r = b->api.cuModuleLoadData(&d->fill_mod, ptx);
  free(ptx);
  if (r != CUDA_SUCCESS) return false;
  if (b->api.cuModuleGetFunction(&d->fill_fn, d->fill_mod, "schedrun_fill") != CUDA_SUCCESS) {
    b->api.cuModuleUnload(d->fill_mod);
    d->fill_mod = NULL;
    return false;
  }
  d->fills = FILLS_KERNEL;
  return true;
}

void cu_own_release(cuda_backend *b, cu_device *d) {
  if (d->cond_mod) b->api.cuModuleUnload(d->cond_mod);
  if (d->fill_mod) b->api.cuModuleUnload(d->fill_mod);
  d->cond_mod = d->fill_mod = NULL;
  d->cond_fn = d->fill_fn = NULL;
}
