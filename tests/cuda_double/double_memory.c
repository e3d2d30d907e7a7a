/*
 * The double's memory: device allocations, pinned host memory, what
 * cuPointerGetAttribute says of an address, and the eager copies and
 * fills, each range-checked against live allocations. See double.h.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "double.h"

/* ---- memory ---- */

typedef struct alloc {
  uint64_t addr, bytes;
  const dctx *ctx; /* the context it was allocated in */
  void *base;
  unsigned host;   /* 0: device memory; else cuMemHostAlloc's flags | HOST_ALLOC */
} alloc;
#define HOST_ALLOC 0x100u
static alloc *g_allocs; /* under dbl_lock */
static size_t g_nalloc, g_alloccap;

bool dbl_range(uint64_t addr, uint64_t bytes, const dctx *ctx) {
  for (size_t i = 0; i < g_nalloc; i++) {
    const alloc *a = &g_allocs[i];
    if (addr >= a->addr && addr - a->addr <= a->bytes && bytes <= a->bytes - (addr - a->addr))
      return !ctx || a->ctx == ctx || (a->host & CU_MEMHOSTALLOC_PORTABLE);
  }
  return false;
}

bool dbl_pinned(const void *p, uint64_t bytes) {
  uint64_t addr = (uint64_t)(uintptr_t)p;
  for (size_t i = 0; i < g_nalloc; i++) {
    const alloc *a = &g_allocs[i];
    if (a->host && addr >= a->addr && addr - a->addr <= a->bytes && bytes <= a->bytes - (addr - a->addr)) return true;
  }
  return false;
}

/* Room in g_allocs for one more allocation. Under dbl_lock. */
static bool alloc_room(void) {
  if (g_nalloc < g_alloccap) return true;
  size_t cap = g_alloccap ? g_alloccap * 2 : 64;
  alloc *a = realloc(g_allocs, cap * sizeof *a);
  if (!a) return false;
  g_allocs = a;
  g_alloccap = cap;
  return true;
}

size_t dbl_allocations(uint64_t *bytes) {
  *bytes = 0;
  for (size_t i = 0; i < g_nalloc; i++) *bytes += g_allocs[i].bytes;
  return g_nalloc;
}

/* ---- memory ---- */

/* Bytes allocated on device `ordinal` (each rounded to 256). Under dbl_lock. */
static uint64_t dev_used(int ordinal) {
  uint64_t used = 0;
  for (size_t i = 0; i < g_nalloc; i++)
    if (!g_allocs[i].host && g_allocs[i].ctx->ordinal == ordinal) used += (g_allocs[i].bytes + 255) & ~(uint64_t)255;
  return used;
}

/* Free and total memory of the current context's device: what cuMemAlloc
 * can still give. */
static CUresult d_cuMemGetInfo(size_t *free_bytes, size_t *total) {
  ENTER("cuMemGetInfo");
  NEED_CTX(x);
  if (!free_bytes || !total) LEAVE(CUDA_ERROR_INVALID_VALUE);
  uint64_t used = dev_used(x->ordinal);
  *free_bytes = (size_t)(used < dbl_mem_bytes ? dbl_mem_bytes - used : 0);
  *total = (size_t)dbl_mem_bytes;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  ENTER("cuMemAlloc");
  NEED_CTX(x);
  if (!p || bytes == 0) LEAVE(CUDA_ERROR_INVALID_VALUE);
  /* the device's memory, rounded as allocations are */
  if (bytes > dbl_mem_bytes || dev_used(x->ordinal) > dbl_mem_bytes - ((bytes + 255) & ~(size_t)255))
    LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  if (!alloc_room()) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  /* 256-byte aligned like cudaMalloc; filled with a pattern, since device
   * memory does not start zeroed */
  size_t rounded = (bytes + 255) & ~(size_t)255;
  void *m = aligned_alloc(256, rounded);
  if (!m) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  memset(m, 0xa5, rounded);
  g_allocs[g_nalloc++] = (alloc){(uint64_t)(uintptr_t)m, bytes, x, m, 0};
  *p = (CUdeviceptr)(uintptr_t)m;
  LEAVE(CUDA_SUCCESS);
}

/* Page-locked host memory (cuMemHostAlloc): under unified addressing every
 * context's kernels reach it at its host address, a PORTABLE allocation
 * from every context, another only from the one it was made in. Its
 * contents are undefined, like device memory's. */
static CUresult d_cuMemHostAlloc(void **pp, size_t bytes, unsigned flags) {
  ENTER("cuMemHostAlloc");
  NEED_CTX(x);
  if (!pp || bytes == 0 ||
      (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)))
    LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (!alloc_room()) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  /* no more than the machine has can be pinned (a driver refuses it too) */
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && bytes > (uint64_t)pages * (uint64_t)page) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  size_t rounded = (bytes + 4095) & ~(size_t)4095;
  void *m = aligned_alloc(4096, rounded);
  if (!m) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  memset(m, 0xa5, rounded);
  g_allocs[g_nalloc++] = (alloc){(uint64_t)(uintptr_t)m, bytes, x, m, flags | HOST_ALLOC};
  *pp = m;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemFreeHost(void *p) {
  ENTER("cuMemFreeHost");
  NEED_INIT();
  dctx *x = dbl_current();
  if (x) dbl_wait(x, NULL, "cuMemFreeHost"); /* its pages may be in the context's queued work */
  for (size_t i = 0; i < g_nalloc; i++)
    if (g_allocs[i].addr == (uint64_t)(uintptr_t)p && g_allocs[i].host) {
      free(g_allocs[i].base);
      g_allocs[i] = g_allocs[--g_nalloc];
      LEAVE(CUDA_SUCCESS);
    }
  LEAVE(CUDA_ERROR_INVALID_VALUE);
}

/* What the driver knows of the allocation holding ptr, for the attributes
 * the CUDA documentation lists with their types; an address of no
 * allocation is CUDA_ERROR_INVALID_VALUE, as for memory the driver never
 * saw. Attributes the double does not model are CUDA_ERROR_NOT_SUPPORTED. */
static CUresult d_cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr) {
  ENTER("cuPointerGetAttribute");
  NEED_INIT();
  if (!data) LEAVE(CUDA_ERROR_INVALID_VALUE);
  const alloc *a = NULL;
  for (size_t i = 0; i < g_nalloc && !a; i++)
    if ((uint64_t)ptr >= g_allocs[i].addr && (uint64_t)ptr - g_allocs[i].addr < g_allocs[i].bytes) a = &g_allocs[i];
  if (!a) LEAVE(CUDA_ERROR_INVALID_VALUE);
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
    *(CUcontext *)data = (CUcontext)a->ctx;
    break;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned *)data = a->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    break;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: {
    dctx *x = dbl_current();
    if (!x) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    /* reached from this context: its own, portable host memory, or a peer's with access on */
    if (a->ctx != x && !(a->host & CU_MEMHOSTALLOC_PORTABLE) && !(!a->host && (x->peers & (1u << a->ctx->ordinal))))
      LEAVE(CUDA_ERROR_INVALID_VALUE);
    *(CUdeviceptr *)data = ptr;
    break;
  }
  case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    if (!a->host) LEAVE(CUDA_ERROR_INVALID_VALUE);
    *(void **)data = (void *)(uintptr_t)ptr;
    break;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    *(int *)data = a->ctx->ordinal;
    break;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    *(CUdeviceptr *)data = (CUdeviceptr)a->addr;
    break;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    *(size_t *)data = (size_t)a->bytes;
    break;
  default:
    LEAVE(CUDA_ERROR_NOT_SUPPORTED);
  }
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemFree(CUdeviceptr p) {
  ENTER("cuMemFree");
  NEED_CTX(x);
  dbl_wait(x, NULL, "cuMemFree"); /* "may perform implicit synchronization" */
  for (size_t i = 0; i < g_nalloc; i++)
    if (g_allocs[i].addr == (uint64_t)p && !g_allocs[i].host) {
      free(g_allocs[i].base);
      g_allocs[i] = g_allocs[--g_nalloc];
      LEAVE(CUDA_SUCCESS);
    }
  LEAVE(CUDA_ERROR_INVALID_VALUE);
}

static CUresult d_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  ENTER("cuMemcpyHtoD");
  NEED_CTX(x);
  /* on the legacy default stream: after the context's work */
  CUresult st = dbl_wait(x, NULL, "cuMemcpyHtoD");
  if (st != CUDA_SUCCESS) LEAVE(st);
  if (n == 0) LEAVE(CUDA_SUCCESS);
  if (!src || !dbl_range(dst, n, NULL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  memcpy((void *)(uintptr_t)dst, src, n);
  dbl_count("copy-sync-htod");
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  ENTER("cuMemcpyDtoH");
  NEED_CTX(x);
  /* on the legacy default stream: after the context's work */
  CUresult st = dbl_wait(x, NULL, "cuMemcpyDtoH");
  if (st != CUDA_SUCCESS) LEAVE(st);
  if (n == 0) LEAVE(CUDA_SUCCESS);
  if (!dst || !dbl_range(src, n, NULL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  memcpy(dst, (const void *)(uintptr_t)src, n);
  dbl_count("copy-sync-dtoh");
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  ENTER("cuMemcpyDtoD");
  NEED_CTX(x);
  /* on the legacy default stream: after the context's work */
  CUresult st = dbl_wait(x, NULL, "cuMemcpyDtoD");
  if (st != CUDA_SUCCESS) LEAVE(st);
  if (n == 0) LEAVE(CUDA_SUCCESS);
  if (!dbl_range(dst, n, NULL) || !dbl_range(src, n, NULL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  /* a driver copies between ranges that do not overlap (what it does with
   * ranges that do is undefined): refused here, so that a caller relying on
   * it is caught */
  if (dst < src + n && src < dst + n) LEAVE(CUDA_ERROR_INVALID_VALUE);
  memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  LEAVE(CUDA_SUCCESS);
}

/* A copy between two contexts' memory: each range inside an allocation of
 * its own context. With the destination's peer access to the source turned
 * on it goes straight across; without, the driver stages it (counted
 * apart, so that a test sees which path was taken). */
static CUresult d_cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) {
  ENTER("cuMemcpyPeer");
  NEED_INIT();
  dctx *dx = dbl_ctx(dst_ctx), *sx = dbl_ctx(src_ctx);
  if (!dx || !sx) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  CUresult st = dbl_wait(sx, NULL, "cuMemcpyPeer");
  if (st == CUDA_SUCCESS) st = dbl_wait(dx, NULL, "cuMemcpyPeer");
  if (st != CUDA_SUCCESS) LEAVE(st);
  if (n == 0) LEAVE(CUDA_SUCCESS);
  if (!dbl_range(dst, n, dx) || !dbl_range(src, n, sx)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  dbl_count(dx->peers & (1u << sx->ordinal) ? "memcpy-peer" : "memcpy-peer-staged");
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n) {
  ENTER("cuMemsetD8");
  NEED_CTX(x);
  /* on the legacy default stream: after the context's work */
  CUresult st = dbl_wait(x, NULL, "cuMemsetD8");
  if (st != CUDA_SUCCESS) LEAVE(st);
  if (n == 0) LEAVE(CUDA_SUCCESS);
  if (!dbl_range(dst, n, NULL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  memset((void *)(uintptr_t)dst, v, n);
  LEAVE(CUDA_SUCCESS);
}

#define E(name, since) {#name, (void *)d_##name, since}
const dbl_entry dbl_memory_entries[] = {
    E(cuMemAlloc, 3020),   E(cuMemFree, 3020),    E(cuMemHostAlloc, 2020), E(cuMemFreeHost, 2000),
    E(cuPointerGetAttribute, 4000), E(cuMemGetInfo, 3020), E(cuMemcpyHtoD, 3020), E(cuMemcpyDtoH, 3020),
    E(cuMemcpyDtoD, 3020), E(cuMemcpyPeer, 4000), E(cuMemsetD8, 3020), {NULL, NULL, 0}};
#undef E
