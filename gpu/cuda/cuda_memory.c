/*
 * The CUDA backend's memory: device allocations, copies between host and
 * device and between devices (peer access settled once per pair), pinned
 * host memory, and the checks of a caller's own memory (registered
 * buffers). See cuda_backend.c for the driver and devices.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda/cuda_internal.h"

int cu_mem_alloc(gpu_backend *g, int dev, uint64_t bytes, uint64_t *addr, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  CUdeviceptr p = 0;
  CU_CHECK(&b->api, b->api.cuMemAlloc(&p, bytes ? bytes : 1), b->devs[dev].name, err);
  *addr = (uint64_t)p;
  return SCHEDRUN_OK;
}

int cu_mem_room(gpu_backend *g, int dev, uint64_t *free_bytes, uint64_t *total, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  size_t f = 0, t = 0;
  CU_CHECK(&b->api, b->api.cuMemGetInfo(&f, &t), b->devs[dev].name, err);
  *free_bytes = f;
  *total = t;
  return SCHEDRUN_OK;
}

void cu_mem_free(gpu_backend *g, int dev, uint64_t addr) {
  cuda_backend *b = cb(g);
  if (cu_use(b, dev, NULL) == SCHEDRUN_OK) b->api.cuMemFree((CUdeviceptr)addr);
}

int cu_mem_zero(gpu_backend *g, int dev, uint64_t addr, uint64_t n, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  if (n == 0) return SCHEDRUN_OK;
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  CU_CHECK(&b->api, b->api.cuMemsetD8((CUdeviceptr)addr, 0, n), b->devs[dev].name, err);
  return SCHEDRUN_OK;
}

int cu_copy_htod(gpu_backend *g, int dev, uint64_t dst, const void *src, uint64_t n, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  if (n == 0) return SCHEDRUN_OK;
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  CU_CHECK(&b->api, b->api.cuMemcpyHtoD((CUdeviceptr)dst, src, n), b->devs[dev].name, err);
  return SCHEDRUN_OK;
}

int cu_copy_dtoh(gpu_backend *g, int dev, void *dst, uint64_t src, uint64_t n, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  if (n == 0) return SCHEDRUN_OK;
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  if ((rc = cu_wait_stream(b, &b->devs[dev], 0, NULL, err))) return rc;
  CU_CHECK(&b->api, b->api.cuMemcpyDtoH(dst, (CUdeviceptr)src, n), b->devs[dev].name, err);
  return SCHEDRUN_OK;
}

int cu_copy_dtod(gpu_backend *g, int dev, uint64_t dst, uint64_t src, uint64_t n, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  if (n == 0) return SCHEDRUN_OK;
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  if ((rc = cu_wait_stream(b, &b->devs[dev], 0, NULL, err))) return rc;
  CU_CHECK(&b->api, b->api.cuMemcpyDtoD((CUdeviceptr)dst, (CUdeviceptr)src, n), b->devs[dev].name, err);
  return SCHEDRUN_OK;
}

/* Whether device dst may read src's memory: asked once per pair
 * (cuDeviceCanAccessPeer), and turned on for dst's context when it may
 * (cuCtxEnablePeerAccess; already on counts as on). */
static int peer_state(cuda_backend *b, int dst, int src, schedrun_error_t *err) {
  pthread_mutex_lock(&b->peer_lock);
  uint8_t *st = &b->peer[dst * b->ndevices + src];
  int rc = SCHEDRUN_OK;
  if (*st == PEER_UNKNOWN) {
    int can = 0;
    CUresult r = b->api.cuDeviceCanAccessPeer(&can, b->devs[dst].dev, b->devs[src].dev);
    if (r != CUDA_SUCCESS) rc = cu_fail(&b->api, err, r, "cuDeviceCanAccessPeer", b->devs[dst].name);
    else if (!can) *st = PEER_NONE;
    else if ((rc = cu_use(b, dst, err)) == SCHEDRUN_OK) {
      r = b->api.cuCtxEnablePeerAccess(b->devs[src].ctx, 0);
      if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) *st = PEER_ON;
      else if (r == CUDA_ERROR_TOO_MANY_PEERS || r == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) *st = PEER_NONE;
      else rc = cu_fail(&b->api, err, r, "cuCtxEnablePeerAccess", b->devs[dst].name);
    }
  }
  int on = *st == PEER_ON;
  pthread_mutex_unlock(&b->peer_lock);
  return rc ? -rc : on;
}

int cu_copy_peer(gpu_backend *g, int dst_dev, uint64_t dst, int src_dev, uint64_t src, uint64_t n, bool *peer,
                       schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  *peer = false;
  if (dst_dev < 0 || dst_dev >= b->ndevices || src_dev < 0 || src_dev >= b->ndevices || dst_dev == src_dev)
    return err_set(err, SCHEDRUN_EINVAL, "no peer copy from cuda device %d to %d", src_dev, dst_dev);
  int on = peer_state(b, dst_dev, src_dev, err);
  if (on <= 0) return -on; /* an error, or no peer path: through the host */
  int rc = cu_use(b, src_dev, err);
  if (rc) return rc;
  /* the source's last work is done before it is read */
  if ((rc = cu_wait_stream(b, &b->devs[src_dev], 0, NULL, err))) return rc;
  if ((rc = cu_use(b, dst_dev, err))) return rc;
  if ((rc = cu_wait_stream(b, &b->devs[dst_dev], 0, NULL, err))) return rc;
  if (n)
    CU_CHECK(&b->api,
             b->api.cuMemcpyPeer((CUdeviceptr)dst, b->devs[dst_dev].ctx, (CUdeviceptr)src, b->devs[src_dev].ctx, n),
             b->devs[dst_dev].name, err);
  *peer = true;
  return SCHEDRUN_OK;
}

/* ---- memory the caller holds ----
 *
 * schedrun_host_alloc's memory is pinned and mapped for every device
 * (cuMemHostAlloc, PORTABLE | DEVICEMAP): under unified addressing its
 * device address is its host address, so a job bound to it runs its
 * kernels on it in place. A caller's own device memory is checked against
 * what the driver says of the pointer before any job is bound to it. */

static int host_alloc_here(cuda_backend *b, uint64_t bytes, void **data, schedrun_error_t *err) {
  int dev = cu_any(b);
  if (dev < 0) return err_set(err, SCHEDRUN_ELOST, "every cuda device is lost");
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  void *p = NULL;
  CU_CHECK(&b->api, b->api.cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
           b->devs[dev].name, err);
  memset(p, 0, bytes); /* zeroed, as the interface promises */
  *data = p;
  return SCHEDRUN_OK;
}

int cu_host_alloc(gpu_backend *g, uint64_t bytes, void **data, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  CUcontext found;
  int rc = cu_found(b, &found, err);
  if (rc) return rc;
  rc = host_alloc_here(b, bytes, data, err);
  cu_put_back(b, found);
  return rc;
}

void cu_host_free(gpu_backend *g, void *data) {
  cuda_backend *b = cb(g);
  CUcontext found;
  if (cu_found(b, &found, NULL) != SCHEDRUN_OK) return;
  /* with every device stuck, the pages stay (a kernel that never ends may use them) */
  if (cu_use(b, cu_any(b), NULL) == SCHEDRUN_OK) b->api.cuMemFreeHost(data);
  cu_put_back(b, found);
}

/* The driver's allocation holding addr: its start, size and memory type. */
static bool pointer_range(cuda_backend *b, uint64_t addr, CUdeviceptr *start, size_t *size, unsigned *type) {
  return b->api.cuPointerGetAttribute(type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)addr) == CUDA_SUCCESS &&
         b->api.cuPointerGetAttribute(start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)addr) ==
             CUDA_SUCCESS &&
         b->api.cuPointerGetAttribute(size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)addr) == CUDA_SUCCESS;
}

static bool host_address_here(cuda_backend *b, const void *host, uint64_t bytes, uint64_t *addr) {
  if (!host || bytes == 0 || b->ndevices == 0 || cu_use(b, cu_any(b), NULL) != SCHEDRUN_OK) return false;
  CUdeviceptr start = 0, dev = 0;
  size_t size = 0;
  unsigned type = 0;
  uint64_t at = (uint64_t)(uintptr_t)host;
  if (!pointer_range(b, at, &start, &size, &type) || type != CU_MEMORYTYPE_HOST || at + bytes > start + size)
    return false;
  /* the same address on every device (unified addressing): checked, not assumed */
  for (int d = 0; d < b->ndevices; d++) {
    CUdeviceptr here = 0;
    if (atomic_load(&b->devs[d].stuck)) continue; /* runs no job */
    if (cu_use(b, d, NULL) != SCHEDRUN_OK ||
        b->api.cuPointerGetAttribute(&here, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)at) != CUDA_SUCCESS ||
        (d > 0 && here != dev))
      return false;
    dev = here;
  }
  *addr = (uint64_t)dev;
  return true;
}

bool cu_host_address(gpu_backend *g, const void *host, uint64_t bytes, uint64_t *addr) {
  cuda_backend *b = cb(g);
  CUcontext found;
  if (cu_found(b, &found, NULL) != SCHEDRUN_OK) return false;
  bool ok = host_address_here(b, host, bytes, addr);
  cu_put_back(b, found);
  return ok;
}

static int mem_reach_here(cuda_backend *b, int dev, uint64_t addr, uint64_t bytes, schedrun_error_t *err) {
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned type = 0;
  int ordinal = -1;
  if (!pointer_range(b, addr, &start, &size, &type) ||
      b->api.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)addr) != CUDA_SUCCESS)
    return err_set(err, SCHEDRUN_EINVAL, "0x%llx is not memory the CUDA driver allocated", (unsigned long long)addr);
  if (type != CU_MEMORYTYPE_DEVICE)
    return err_set(err, SCHEDRUN_EINVAL, "0x%llx is host memory, not %s's (register host memory with "
                   "schedrun_buffer_register)", (unsigned long long)addr, b->devs[dev].name);
  if (ordinal != (int)b->devs[dev].dev)
    return err_set(err, SCHEDRUN_EINVAL, "0x%llx is memory of CUDA device %d, not of %s", (unsigned long long)addr,
                   ordinal, b->devs[dev].name);
  if (addr + bytes > (uint64_t)start + size)
    return err_set(err, SCHEDRUN_EINVAL, "0x%llx: the allocation holding it ends %llu bytes after it, not %llu",
                   (unsigned long long)addr, (unsigned long long)((uint64_t)start + size - addr),
                   (unsigned long long)bytes);
  return SCHEDRUN_OK;
}

int cu_mem_reach(gpu_backend *g, int dev, uint64_t addr, uint64_t bytes, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  CUcontext found;
  int rc = cu_found(b, &found, err);
  if (rc) return rc;
  rc = mem_reach_here(b, dev, addr, bytes, err);
  cu_put_back(b, found);
  return rc;
}
