/*
 * A CUDA driver double: the driver entry points the CUDA backend uses,
 * implemented on the CPU with the rules the real driver documents, so that
 * the backend's whole path runs where no GPU is.
 *
 * What it models: devices (count, name, compute capability), primary
 * contexts and each thread's context stack (cuCtxSetCurrent replaces its
 * top, NULL pops it; cuCtxPushCurrent, cuCtxPopCurrent), device memory (every copy,
 * fill and kernel argument range-checked against live allocations; a copy
 * between overlapping ranges, undefined on a driver, refused), pinned
 * host memory (cuMemHostAlloc: reached from every context when portable),
 * what cuPointerGetAttribute says of an address, modules
 * from NVRTC's cubins and PTX (kernel parameter sizes read from the cubin's
 * .nv.info KPARAM_INFO records or the PTX .param list), eager launches and
 * copies, streams, graphs with kernel, memcpy, memset, empty and conditional
 * WHILE nodes, instantiation, in-place updates under the rules of a 12.x or a
 * 13.x driver (per node, and whole graphs by cuGraphExecUpdate), the JIT linker, and failure injection into any call. Handles
 * are checked on every use; what is still alive at exit is reported as a leak
 * and makes the process exit with status 86.
 *
 * Kernels run for real: the double also stands in for NVRTC (forwarding to
 * the real library) and remembers the source of every cubin and PTX it
 * produced, by the SHA-256 of the image, in its state directory. Loading a
 * module builds that source for the CPU with the host backend's compiler
 * wrapper (gpu/host/host_build.h) and runs each launch as a host device does
 * (gpu/host/host_kernel_tu.h): loops over blocks and threads, or a block's
 * threads as cooperating fibers when the source uses shared memory, barriers
 * or warp operations. A block that deadlocks fails the launch
 * (CUDA_ERROR_LAUNCH_FAILED), with the reason on standard error.
 *
 * Loaded as the driver, it sets SCHEDRUN_NVRTC_LIBRARY to itself when that
 * is unset, so that `SCHEDRUN_CUDA_LIBRARY=.../libcuda-double.so sched-run
 * --devices cuda config.yaml` is all it takes (with a kernel cache that
 * another NVRTC did not fill: the double cannot run images it did not see
 * compiled).
 *
 * Work queued on a stream runs on the stream's own thread after the call
 * returns (double_stream.c): cuStreamQuery, cuStreamSynchronize and the
 * calls documented to wait for the device observe it; a kernel's fault
 * surfaces at the next call on its context and stays there. Asynchronous
 * copies and fills, and events, follow the documented synchronization rules
 * (double_async.c): pinned memory is read or written when the copy runs,
 * pageable memory before the call returns. Not modelled: a device's own
 * timing (kernels take what they take on the CPU, and an event's time is
 * when its record ran on the stream's thread) and copy engines apart from
 * the streams: streams run beside one another, each on its thread, and
 * cuStreamWaitEvent holds a stream until the event's record has run.
 *
 * Settings (environment):
 *   SCHEDRUN_CUDA_DOUBLE_DEVICES  devices (1)
 *   SCHEDRUN_CUDA_DOUBLE_ARCH     compute capability as digits (90), or one
 *                                 per device ("90,80"; the last one for the
 *                                 devices after it)
 *   SCHEDRUN_CUDA_DOUBLE_PEER     "none": no pair of devices may access each
 *                                 other's memory (cuDeviceCanAccessPeer says
 *                                 0); default every pair of distinct devices
 *   SCHEDRUN_CUDA_DOUBLE_MEM_MB   each device's memory in MiB (16384):
 *                                 cuMemAlloc refuses past it (out of
 *                                 memory), cuMemGetInfo reports it
 *   SCHEDRUN_CUDA_DOUBLE_SLOWDOWN F (1 to 1e6; default 1): every kernel takes
 *                                 F times the CPU time it ran for, its
 *                                 stream's thread waiting the rest out (a
 *                                 device slower than the host by a known
 *                                 factor; kernels never run faster than the
 *                                 CPU runs them)
 *   SCHEDRUN_CUDA_DOUBLE_DRIVER   the driver version reported and the rules
 *                                 obeyed: 13000 (default) or 12xxx; below
 *                                 12030 there are no conditional nodes
 *   SCHEDRUN_CUDA_DOUBLE_FAIL     NAME[@N][=CODE][,...]: the Nth call (1) of
 *                                 driver entry NAME fails with CODE (a
 *                                 CUresult number; 999, CUDA_ERROR_UNKNOWN)
 *   SCHEDRUN_CUDA_DOUBLE_DIR      state directory (sources and CPU builds);
 *                                 default $TMPDIR/schedrun-cuda-double-<uid>
 *   SCHEDRUN_CUDA_DOUBLE_NVRTC    the real NVRTC to forward to
 *   SCHEDRUN_CUDA_DOUBLE_NVRTC_VERSION  M.m, the version nvrtcVersion says
 *                                 (default: the real one's, but no newer
 *                                 than the driver's)
 *   SCHEDRUN_CUDA_DOUBLE_COMPILE_MS  every nvrtcCompileProgram takes this
 *                                 many milliseconds more (a big kernel)
 *   SCHEDRUN_CUDA_DOUBLE_STRICT  refusals a driver may make where the
 *                                 documentation promises nothing:
 *                                 "body-setparams": the per-node setters of
 *                                 an instantiated graph (cuGraphExec*Node-
 *                                 SetParams) refuse the nodes of a
 *                                 conditional node's body, which are not
 *                                 nodes of the graph that was instantiated
 *                                 (cuGraphExecUpdate documents them);
 *                                 "no-updates": every update of an
 *                                 instantiated graph is refused (a driver
 *                                 that updates nothing in place)
 *   SCHEDRUN_CUDA_DOUBLE_FAULT    ENTRY[=CODE],...: such a kernel faults
 *                                 its context with CODE (700, an illegal
 *                                 address), reported by the next call there
 *   SCHEDRUN_CUDA_DOUBLE_HANG     entry names, comma-separated: such a
 *                                 kernel never returns (its stream stops);
 *                                 a later call that would wait for that
 *                                 context ends the process with status 87
 *   SCHEDRUN_CUDA_DOUBLE_LOG      a file that gets one line per counted event
 *                                 ("graph-launch", "launch", "update-rejected",
 *                                 "graph-update" for a cuGraphExecUpdate,
 *                                 "fault" when a kernel faults a context,
 *                                 "hang" when a stream reaches a kernel
 *                                 that never returns,
 *                                 "memcpy-peer" over enabled peer access,
 *                                 "memcpy-peer-staged" without it,
 *                                 "copy-async-pinned" for an asynchronous
 *                                 copy queued from or to pinned memory,
 *                                 "copy-async-pageable" for one that had to
 *                                 wait, "event-record")
 */
#ifndef SCHEDRUN_CUDA_DOUBLE_H
#define SCHEDRUN_CUDA_DOUBLE_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DBL_EXPORT __attribute__((visibility("default")))

/* Every handle the double gives out starts with its kind. */
enum { K_CTX = 1, K_MOD, K_FUNC, K_STREAM, K_GRAPH, K_NODE, K_EXEC, K_LINK, K_EVENT, K_NKINDS };

typedef struct dobj {
  uint32_t kind;
} dobj;

typedef struct dctx dctx;

/* A stream: its queue of work, run by its own thread (double_stream.c).
 * Under dbl_qlock. */
typedef struct dstream {
  dobj o;
  dctx *ctx;
  struct ditem *head, *tail; /* the head runs while it is at the head */
  uint32_t pending;          /* queued or running */
  bool started, destroyed;   /* its thread; cuStreamDestroy (the thread frees it once idle) */
  pthread_cond_t more;       /* work queued, or the stream destroyed */
} dstream;

/* An event (double_async.c): each cuEventRecord queues a marker on a
 * stream; the event is complete once its latest marker has run, and has
 * the time that marker ran. Under dbl_qlock but for o and flags. */
typedef struct devent {
  dobj o;
  dctx *ctx;
  unsigned flags;    /* CU_EVENT_* */
  uint64_t issued;   /* records made */
  uint64_t done;     /* the number of the latest record that has run */
  uint64_t t_ns;     /* when it ran (CLOCK_MONOTONIC) */
  uint32_t queued;   /* its markers still on a stream */
  bool destroyed;    /* cuEventDestroy with markers queued: the last one frees it */
} devent;

struct dctx {
  dobj o;
  int ordinal;
  int retains; /* primary context references; 0: inactive */
  uint32_t peers; /* ordinals whose memory this context may access (cuCtxEnablePeerAccess) */
  dstream null_stream; /* the legacy default stream: a NULL CUstream */
  /* under dbl_qlock */
  uint32_t pending;   /* work queued or running on all its streams */
  CUresult sticky;    /* a kernel's fault, returned by every later call here */
  const char *hung;   /* the kernel that never returns (SCHEDRUN_CUDA_DOUBLE_HANG) */
};

typedef struct dfunc dfunc;
typedef struct dmod {
  dobj o;
  dctx *ctx;
  void *so;       /* the CPU build */
  dfunc **funcs;  /* handed out by cuModuleGetFunction, freed with the module */
  uint32_t nfuncs;
  char hash[65];  /* of the image */
  /* the kernels the image declares, with their parameters' sizes */
  struct dkernel {
    char *name;
    uint32_t nparams;
    uint16_t size[64];
  } *kernels;
  uint32_t nkernels;
} dmod;

/* A kernel's CPU launcher (gpu/host/host_kernel_tu.h): 0, or -1 with a text
 * naming the kernel (a block whose barrier not all its threads reach). */
typedef int (*dbl_launcher)(const uint32_t *grid, const uint32_t *block, const uint64_t *args, uint32_t shared,
                            char *text, uint32_t cap);

struct dfunc {
  dobj o;
  dmod *mod;
  const struct dkernel *k;
  dbl_launcher run;
};


/* A node's work, as the driver copied it when the node was added or set. */
typedef struct dwork {
  CUgraphNodeType type;
  dctx *ctx; /* memcpy, memset: the context they run in */
  union {
    struct {
      dfunc *f;
      uint32_t grid[3], block[3];
      uint32_t shared; /* dynamic shared memory per block */
      uint64_t args[64];
    } k;
    struct {
      uint64_t dst, src, bytes;
    } copy;
    CUDA_MEMSET_NODE_PARAMS set;
    struct {
      uint64_t handle;
      struct dgraph *body;
    } cond;
  } u;
} dwork;

typedef struct dgraph dgraph;
typedef struct dnode {
  dobj o;
  dgraph *g;
  dwork w;
  struct dnode **deps;
  uint32_t ndeps;
  CUgraph body_out[1]; /* what a conditional node's phGraph_out points to */
} dnode;

struct dgraph {
  dobj o;
  dnode **nodes;
  uint32_t n, cap;
  dnode *owner; /* the conditional node whose body this is, or NULL */
  uint64_t *handles; /* conditional handles created for this graph */
  uint32_t nhandles;
};

/* An instantiated graph: its nodes' work in launch order, each remembering
 * the node it came from. A conditional's body is an exec of its own. */
typedef struct dexec {
  dobj o;
  const dgraph *from;
  struct dstep {
    const dnode *node;
    dwork w;
    struct dexec *body; /* CU_GRAPH_NODE_TYPE_CONDITIONAL */
  } *steps;
  uint32_t n;
  uint64_t *handles; /* the conditional handles to reset at launch */
  uint32_t nhandles;
} dexec;

/* What cuGetProcAddress hands out: each file's entry points, with the
 * driver version that introduced them (a driver older than that lacks them). */
typedef struct dbl_entry {
  const char *name;
  void *fn;
  int since;
} dbl_entry;
extern const dbl_entry dbl_core_entries[], dbl_memory_entries[], dbl_module_entries[], dbl_graph_entries[],
    dbl_async_entries[];

/* ---- core (double_core.c) ---- */
extern pthread_mutex_t dbl_lock; /* recursive: held by every entry point */
extern int dbl_driver_version;
extern bool dbl_init_done;       /* cuInit ran */
extern uint64_t dbl_mem_bytes;   /* each device's memory (SCHEDRUN_CUDA_DOUBLE_MEM_MB) */
extern double dbl_slowdown;      /* kernels take this many times their CPU time (SCHEDRUN_CUDA_DOUBLE_SLOWDOWN) */
#define DBL_STRICT_BODY_SETPARAMS 1u /* cuGraphExec*NodeSetParams refuse a conditional body's nodes */
#define DBL_STRICT_NO_UPDATES 2u     /* every update of an instantiated graph is refused */
extern unsigned dbl_strict;      /* DBL_STRICT_* (SCHEDRUN_CUDA_DOUBLE_STRICT) */
extern const char *dbl_hang_list, *dbl_fault_list; /* SCHEDRUN_CUDA_DOUBLE_HANG, _FAULT, read at load */
CUresult dbl_fail_point(const char *name); /* CUDA_SUCCESS unless this call must fail */
void dbl_count(const char *event);          /* SCHEDRUN_CUDA_DOUBLE_LOG */
void *dbl_new(uint32_t kind, size_t size);  /* a zeroed, registered handle; NULL when out of memory */
void dbl_free(void *h);                     /* unregisters and frees */
void dbl_forget(void *h);                   /* unregisters (the caller frees it later) */
bool dbl_live(const void *h, uint32_t kind);
dctx *dbl_current(void);
dctx *dbl_ctx(CUcontext c);            /* a retained context, or NULL */
int dbl_device_arch(int ordinal);       /* 90 for sm_90 */
bool dbl_range(uint64_t addr, uint64_t bytes, const dctx *ctx); /* inside one live allocation of ctx */
const char *dbl_state_dir(void);

/* ---- memory (double_memory.c) ---- */
/* Live allocations, device and pinned host memory (their bytes in *bytes). */
size_t dbl_allocations(uint64_t *bytes);
/* Whether [p, p + bytes) is inside one pinned host allocation (cuMemHostAlloc). */
bool dbl_pinned(const void *p, uint64_t bytes);

/* ---- modules and kernels (double_module.c) ---- */
CUresult dbl_kernel_args(const dfunc *f, void **params, uint64_t *slots);
void dbl_set_conditional(uint64_t handle, unsigned value);

/* ---- graphs (double_graph.c) ---- */
/* A copy of what e holds now, for one launch (later updates and
 * cuGraphExecDestroy leave it alone): not a handle. */
dexec *dbl_exec_snapshot(const dexec *e);
void dbl_exec_snapshot_free(dexec *e);
/* Runs one kernel, copy, fill or empty step on a stream's thread. */
CUresult dbl_run_step(const dwork *w);
/* Runs a snapshot on a stream's thread (conditional handles reset first). */
CUresult dbl_exec_run(const dexec *e);
/* The name of e's first kernel, into *name when it has one. */
void dbl_exec_first_kernel(const dexec *e, const char **name);

/* ---- streams (double_stream.c) ---- */
#define DBL_HUNG ((CUresult)-1) /* dbl_run_kernel: a kernel that never returns */
#define DBL_HANG_STATUS 87      /* the exit status of a wait that could never end */
extern pthread_mutex_t dbl_qlock; /* queues and what contexts keep under it; taken after dbl_lock, never before */
void dbl_stream_init(dstream *st, dctx *x);
void dbl_stream_destroy(dstream *st); /* its handle already unregistered; freed once its work is done */
dstream *dbl_stream(CUstream s, dctx *x); /* s, or x's legacy default stream */
/* The stream a call names, checked against the current context: s, or
 * (NULL) its legacy default stream. */
CUresult dbl_stream_of(CUstream s, dstream **out);
/* Runs one kernel (on a stream's thread): CUDA_SUCCESS, a fault, or DBL_HUNG. */
CUresult dbl_run_kernel(const dwork *w);
CUresult dbl_enqueue_kernel(dstream *st, const dwork *w); /* a kernel, copy or fill (w->type) */
CUresult dbl_enqueue_event(dstream *st, devent *ev);      /* a record of ev; ev->issued counted by the caller */
CUresult dbl_enqueue_wait(dstream *st, devent *ev);       /* cuStreamWaitEvent: st waits for ev's latest record */
/* Waits until ev's latest record (when made) has run, dbl_lock let go
 * meanwhile; then the context's fault, or CUDA_SUCCESS. */
CUresult dbl_event_wait(devent *ev, const char *call);
/* Frees ev now, or (markers queued) once the last has run. */
void dbl_event_release(devent *ev);
CUresult dbl_enqueue_graph(dstream *st, dexec *snapshot); /* takes the snapshot */
CUresult dbl_sticky(const dctx *x);
CUresult dbl_query(const dstream *st); /* the context's fault, CUDA_ERROR_NOT_READY, or CUDA_SUCCESS */
/* Waits until st (NULL: every stream of x) has no work, dbl_lock (held once,
 * by the entry point) let go meanwhile; then x's fault, or CUDA_SUCCESS.
 * Ends the process (DBL_HANG_STATUS) when the work can never end. */
CUresult dbl_wait(dctx *x, const dstream *st, const char *call);
void dbl_ctx_reset(dctx *x); /* the context is destroyed: no fault kept */
bool dbl_any_hung(const dctx *const *ctxs, int n);

#define ENTER(name)                              \
  pthread_mutex_lock(&dbl_lock);                 \
  CUresult inj__ = dbl_fail_point(name);         \
  if (inj__ != CUDA_SUCCESS) {                   \
    pthread_mutex_unlock(&dbl_lock);             \
    return inj__;                                \
  }
#define NEED_INIT() \
  if (!dbl_init_done) LEAVE(CUDA_ERROR_NOT_INITIALIZED)
#define NEED_CTX(x)                \
  NEED_INIT();                     \
  dctx *x = dbl_current();         \
  if (!x) LEAVE(CUDA_ERROR_INVALID_CONTEXT)

#define LEAVE(rc)                  \
  do {                             \
    CUresult r__ = (rc);           \
    pthread_mutex_unlock(&dbl_lock); \
    return r__;                    \
  } while (0)

#endif
