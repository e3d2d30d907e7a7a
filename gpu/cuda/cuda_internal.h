/*
 * What the CUDA backend's files share: the driver's entry points, the
 * backend and device objects, and the error helpers. Internal to gpu/cuda/.
 */
#ifndef SCHEDRUN_CUDA_INTERNAL_H
#define SCHEDRUN_CUDA_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "gpu/backend.h"
#include "gpu/cuda/cuda_backend.h"

#define CUDA_ABI 12000      /* the API version the required entry points are resolved for */
#define CUDA_ABI_COND 12030
/* After a deadline (or a close's abandon), how long a wait still gives the
 * device's work to end before the device is lost and stuck. */
#define CU_GRACE_NS 500000000ull /* conditional nodes: cuGraphConditionalHandleCreate, cuGraphAddNode */

#define CU_FUNCS(X)                                                                                    \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)           \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)                \
  X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemcpyHtoD)           \
  X(cuMemHostAlloc) X(cuMemFreeHost) X(cuPointerGetAttribute) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyPeer) X(cuMemsetD8) X(cuStreamCreate) X(cuStreamDestroy)            \
  X(cuStreamQuery)                                                                                     \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuGraphCreate)      \
  X(cuGraphDestroy) X(cuGraphAddKernelNode) X(cuGraphAddMemcpyNode) X(cuGraphAddMemsetNode)           \
  X(cuGraphAddEmptyNode) X(cuGraphInstantiateWithFlags) X(cuGraphExecDestroy) X(cuGraphLaunch)         \
  X(cuGraphExecKernelNodeSetParams) X(cuGraphExecMemcpyNodeSetParams) X(cuGraphExecMemsetNodeSetParams)     \
  X(cuGraphKernelNodeSetParams) X(cuGraphMemcpyNodeSetParams) X(cuGraphMemsetNodeSetParams)              \
  X(cuGraphExecUpdate) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuMemsetD2D32Async) \
  X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventRecord) X(cuEventQuery) X(cuEventElapsedTime) X(cuEventDestroy)

/* Entry points a driver may lack; NULL then. The JIT linker and conditional
 * nodes together run a while loop inside one graph launch. */
#define CU_OPTIONAL_FUNCS(X)                                                                           \
  X(cuLinkCreate, CUDA_ABI) X(cuLinkAddData, CUDA_ABI) X(cuLinkAddFile, CUDA_ABI)                     \
  X(cuLinkComplete, CUDA_ABI) X(cuLinkDestroy, CUDA_ABI)                                              \
  X(cuGraphConditionalHandleCreate, CUDA_ABI_COND) X(cuGraphAddNode, CUDA_ABI_COND)

typedef struct cu_api {
  void *dl;
#define X(name) __typeof__(&name) name;
  CU_FUNCS(X)
#undef X
#define X(name, v) __typeof__(&name) name;
  CU_OPTIONAL_FUNCS(X)
#undef X
} cu_api;

enum { LOOPS_UNKNOWN, LOOPS_CONDITIONAL, LOOPS_HOST };
enum { FILLS_UNKNOWN, FILLS_KERNEL, FILLS_MEMSET };

/* One batch out on a device (cuda_batch.c): pinned staging for the bytes
 * it fills and reads back, its events (evs[0] ends it, then one per
 * sequence, then one per boundary between jobs), and what batch_finish
 * needs to say how it went. */
typedef struct cu_lane {
  void *stage;
  uint64_t stage_cap;
  CUevent *evs;
  uint32_t nevs;
  CUevent copied; /* recorded on the copy stream after fills queued beside */
  size_t *bound;  /* where each job after the first starts */
  size_t bound_cap;
  gpu_batch_op *ops; /* the caller's, until batch_finish */
  size_t n, queued;
  uint32_t nseq, nbound;
  uint64_t deadline_ns, t_begin;
  bool timed;            /* evs[0] was recorded at its end */
  int rc;                /* queueing failed at ops[queued] */
  schedrun_error_t err;  /* why, when rc */
  gpu_failure f;
} cu_lane;

typedef struct cu_device {
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  char name[16];
  char arch[16];
  int sm; /* 90 for sm_90 */
  _Atomic bool lost;
  /* lost while its work may still run (a deadline passed, or a close
   * abandoned it): no driver call that may wait is made on its context
 * again (cuEventQuery, which never waits, tells a batch how far it got). Each of
   * cuMemFree, cuModuleUnload, a synchronous copy, a synchronize and the
   * context's release may wait for that work, which may never end; what
   * the context holds is left to the process's end. A device lost to a
   * kernel's fault is not stuck: calls there fail at once. */
  _Atomic bool stuck;
  pthread_mutex_t lost_lock;
  char lost_why[256]; /* written once, under lost_lock, before `lost` is set */
  /* how while loops run: conditional nodes with the condition kernel, or
   * host-driven segments (loops_why says why); settled at the first loop */
  _Atomic int loops; /* LOOPS_*; loops_why is written before it is set */
  char loops_why[200];
  CUmodule cond_mod;
  CUfunction cond_fn;
  /* fills whose size changes from job to job: kernel nodes of the fill
   * kernel (FILLS_KERNEL), or memsets where it cannot be built; settled at
   * the first such fill */
  int fills;
  CUmodule fill_mod;
  CUfunction fill_fn;
  _Atomic uint64_t launches, host_trips;
  /* batches (cuda_batch.c), on the device's execute thread: two lanes, so
   * that one batch may be queued while the one before still runs, finished
   * in the order begun (lanes[first] first); lanes[0] also times nodes
   * (cuda_timed.c) when no batch is out */
  cu_lane lanes[2];
  uint32_t first, out;
  /* where a batch's first fills run beside the batch before it */
  CUstream copy_stream;
  _Atomic uint64_t beside; /* batches whose fills were queued there */
} cu_device;

enum { PEER_UNKNOWN, PEER_ON, PEER_NONE };

typedef struct cuda_backend {
  gpu_backend base;
  cu_api api;
  int driver_version;
  int ndevices;
  cu_device *devs;
  /* peer access from device i to device j's memory, settled at the first
   * copy between them: peer[i * ndevices + j], PEER_* (under peer_lock) */
  uint8_t *peer;
  pthread_mutex_t peer_lock;
  _Atomic bool abandoned;
  uint64_t spin_ns; /* how long cu_wait_stream polls before it sleeps */
  /* what kernels are compiled for: the devices' sm_XX when they share one,
   * else each architecture present, oldest first, joined by '+'
   * ("sm_80+sm_90"): one cubin per architecture in one artifact
   * (arch_bundle.h), each device loading its own */
  char compile_arch[128];
} cuda_backend;

static inline cuda_backend *cb(const gpu_backend *b) { return (cuda_backend *)b; }

/* "cuda:0: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)". dev, when
 * not NULL, is a cu_device's `name`: an error a kernel leaves on its context
 * (an illegal address, a trap, ...) marks that device lost (SCHEDRUN_EFAULT). */
int cu_fail(const cu_api *a, schedrun_error_t *err, CUresult r, const char *call, const char *dev);
/* Makes device dev's context current on this thread. */
int cu_use(cuda_backend *b, int dev, schedrun_error_t *err);
void cu_set_lost(cu_device *d, const char *why);
/* The start of every launch: f (not NULL) says nothing yet; a lost device
 * refuses (SCHEDRUN_ELOST, f->lost set). */
int cu_launch_begin(cu_device *d, gpu_failure *f, schedrun_error_t *err);
/* Every wait for a device's stream: polls cuStreamQuery, spinning for the
 * backend's spin_ns while the process's spin gauge allows (yielding between
 * looks), then sleeping between looks, so that a deadline (0: none) or a
 * close can end the wait: SCHEDRUN_ETIMEOUT (SCHEDRUN_ELOST), the device
 * going on if its work ends within CU_GRACE_NS, else lost and stuck. A
 * kernel's fault is named (the device lost). f may be NULL. */
int cu_wait_stream(cuda_backend *b, cu_device *d, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err);
/* The same wait, until event ev has run (what was queued before its record). */
int cu_wait_event(cuda_backend *b, cu_device *d, CUevent ev, uint64_t deadline_ns, gpu_failure *f,
                  schedrun_error_t *err);

/* Calls that run on the caller's thread (open, close, host memory, the
 * checks of the caller's own memory) make a device's context current there
 * as they go, and put back the one they found: cu_found, then cu_put_back. */
int cu_found(cuda_backend *b, CUcontext *found, schedrun_error_t *err);
void cu_put_back(cuda_backend *b, CUcontext found);
/* A device whose context may be used for what any context can do (host
 * memory): the first not stuck, or -1. */
int cu_any(const cuda_backend *b);

/* Memory (cuda_memory.c): the gpu_ops entries of the same names. */
int cu_mem_alloc(gpu_backend *g, int dev, uint64_t bytes, uint64_t *addr, schedrun_error_t *err);
int cu_mem_room(gpu_backend *g, int dev, uint64_t *free_bytes, uint64_t *total, schedrun_error_t *err);
void cu_mem_free(gpu_backend *g, int dev, uint64_t addr);
int cu_mem_zero(gpu_backend *g, int dev, uint64_t addr, uint64_t n, schedrun_error_t *err);
int cu_copy_htod(gpu_backend *g, int dev, uint64_t dst, const void *src, uint64_t n, schedrun_error_t *err);
int cu_copy_dtoh(gpu_backend *g, int dev, void *dst, uint64_t src, uint64_t n, schedrun_error_t *err);
int cu_copy_dtod(gpu_backend *g, int dev, uint64_t dst, uint64_t src, uint64_t n, schedrun_error_t *err);
int cu_copy_peer(gpu_backend *g, int dst_dev, uint64_t dst, int src_dev, uint64_t src, uint64_t n, bool *peer,
                 schedrun_error_t *err);
int cu_host_alloc(gpu_backend *g, uint64_t bytes, void **data, schedrun_error_t *err);
void cu_host_free(gpu_backend *g, void *data);
bool cu_host_address(gpu_backend *g, const void *host, uint64_t bytes, uint64_t *addr);
int cu_mem_reach(gpu_backend *g, int dev, uint64_t addr, uint64_t bytes, schedrun_error_t *err);

#define CU_CHECK(a, call, dev, err)                               \
  do {                                                            \
    CUresult r__ = (call);                                        \
    if (r__ != CUDA_SUCCESS) return cu_fail(a, err, r__, #call, dev); \
  } while (0)

/* Batches (cuda_batch.c): gpu_ops.run_batch, and what a device keeps for
 * them, given back at close (not on a stuck device). */
int cu_run_batch(gpu_backend *g, int dev, gpu_batch_op *ops, size_t n, uint64_t deadline_ns, size_t *done,
                 gpu_failure *f, schedrun_error_t *err);
void cu_batch_release(cuda_backend *b, cu_device *d);
int cu_batch_begin(gpu_backend *g, int dev, gpu_batch_op *ops, size_t n, uint64_t deadline_ns, bool beside,
                   schedrun_error_t *err);
int cu_batch_finish(gpu_backend *g, int dev, size_t *done, gpu_failure *f, schedrun_error_t *err);
/* Room for `bytes` of lane l's staging and `nevs` of its events (the
 * device's context current; nothing queued with them is still out). */
int cu_batch_room(cuda_backend *b, cu_device *d, cu_lane *l, uint64_t bytes, uint32_t nevs, schedrun_error_t *err);
/* seq_launch_timed (cuda_timed.c): the nodes one by one, timed with events. */
int cu_seq_launch_timed(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, uint64_t *times, uint32_t max, uint32_t *n,
                        schedrun_error_t *err);

/* Sequences (cuda_graph.c). */
int cu_seq_create(gpu_backend *g, int dev, gpu_seq **out, schedrun_error_t *err);
int cu_seq_add(gpu_seq *s, gpu_node *n, uint32_t *index, schedrun_error_t *err);
int cu_seq_update(gpu_seq *s, uint32_t index, const gpu_node *n, schedrun_error_t *err);
int cu_seq_finalize(gpu_seq *s, schedrun_error_t *err);
/* Queues the sequence on its device's stream without waiting for it (a
 * host-driven loop still waits at each trip); the caller made the device's
 * context current. */
int cu_seq_enqueue(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err);
int cu_seq_device(const gpu_seq *s); /* the device it was recorded for */
int cu_seq_launch(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err);
void cu_seq_destroy(gpu_seq *s);
/* Unloads the backend's own kernels on d (the condition kernel, the fill kernel). */
void cu_own_release(cuda_backend *b, cu_device *d);

#endif
