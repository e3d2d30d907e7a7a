/*
 * The CUDA backend: the driver API, loaded at run time.
 *
 * libcuda.so.1 is opened with dlopen and every entry point is resolved through
 * cuGetProcAddress for the CUDA 12.0 ABI, so the same binary runs with or
 * without a driver; with none, gpu_backend_open("auto") falls back to the
 * host with a one-line reason. Building needs only the toolkit's cuda.h.
 *
 * Devices use their primary contexts and one stream each. A sequence is a
 * list of segments run in order on the device's stream:
 *   - a graph segment: a CUDA graph whose nodes (kernel, memcpy, memset) form
 *     a chain in program order, instantiated once by seq_finalize and
 *     updated in place with the cuGraphExec*NodeSetParams calls;
 *   - a while segment: a body sequence repeated while an i32 flag in device
 *     memory is non-zero (at most max_trips), the flag read back between trips.
 * The while segment is the documented fallback for drivers without
 * conditional graph nodes; it costs one synchronisation per trip.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/backend.h"
#include "gpu/cuda/cuda_backend.h"

#define CUDA_ABI 12000 /* the API version every entry point is resolved for */

#define CU_FUNCS(X)                                                                                    \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)           \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)                \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)           \
  X(cuMemcpyDtoH) X(cuMemsetD8) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)            \
  X(cuStreamQuery)                                                                                     \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuGraphCreate)      \
  X(cuGraphDestroy) X(cuGraphAddKernelNode) X(cuGraphAddMemcpyNode) X(cuGraphAddMemsetNode)           \
  X(cuGraphInstantiateWithFlags) X(cuGraphExecDestroy) X(cuGraphLaunch) X(cuGraphExecKernelNodeSetParams)      \
  X(cuGraphExecMemcpyNodeSetParams) X(cuGraphExecMemsetNodeSetParams)

typedef struct cu_api {
  void *dl;
#define X(name) __typeof__(&name) name;
  CU_FUNCS(X)
#undef X
} cu_api;

typedef struct cu_device {
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  char name[16];
  char arch[16];
  _Atomic bool lost;
  pthread_mutex_t lost_lock;
  char lost_why[256]; /* written once, under lost_lock, before `lost` is set */
} cu_device;

typedef struct cuda_backend {
  gpu_backend base;
  cu_api api;
  int ndevices;
  cu_device *devs;
  _Atomic bool abandoned;
} cuda_backend;

struct gpu_module {
  CUmodule mod;
  int dev;
};

enum { SEG_GRAPH, SEG_WHILE };

typedef struct cu_segment {
  int kind;
  CUgraph graph;
  CUgraphExec exec;
  CUgraphNode last; /* the chain's tail */
  uint64_t flag;    /* SEG_WHILE */
  uint32_t max_trips;
  gpu_seq *body;
} cu_segment;

/* One gpu node: up to two CUDA nodes (an 8-byte fill is two 4-byte memsets
 * with a pitch of 8), and the argument slots a kernel node points into. */
typedef struct cu_node {
  uint8_t kind, ncu;
  uint16_t seg;
  CUgraphNode cu[2];
  uint64_t *args;
  void **params;
  uint32_t nargs;
} cu_node;

struct gpu_seq {
  cuda_backend *b;
  int dev;
  cu_node *nodes;
  uint32_t n, cap;
  cu_segment *segs;
  uint32_t nsegs, segcap;
  bool finalized;
};

static cuda_backend *cb(const gpu_backend *b) { return (cuda_backend *)b; }

/* "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" */
static int cu_fail(const cu_api *a, schedrun_error_t *err, CUresult r, const char *call, const char *dev) {
  const char *name = NULL, *text = NULL;
  if (a->cuGetErrorName) a->cuGetErrorName(r, &name);
  if (a->cuGetErrorString) a->cuGetErrorString(r, &text);
  return err_set(err, r == CUDA_ERROR_OUT_OF_MEMORY ? SCHEDRUN_ENOMEM : SCHEDRUN_EBACKEND, "%s%s%s: %s (%s)",
                 dev ? dev : "", dev ? ": " : "", call, name ? name : "CUDA_ERROR", text ? text : "unknown error");
}

#define CU_CHECK(a, call, dev, err)                               \
  do {                                                            \
    CUresult r__ = (call);                                        \
    if (r__ != CUDA_SUCCESS) return cu_fail(a, err, r__, #call, dev); \
  } while (0)

/* ---- loading the driver ---- */

/* Why an entry point could not be had, named by the driver when it can. */
static int missing(void *dl, const char *lib, const char *sym, CUresult r, schedrun_error_t *err) {
  __typeof__(&cuGetErrorName) get_name = (__typeof__(&cuGetErrorName))dlsym(dl, "cuGetErrorName");
  const char *name = NULL;
  if (r != CUDA_SUCCESS && get_name) get_name(r, &name);
  if (r == CUDA_SUCCESS)
    return err_set(err, SCHEDRUN_EBACKEND, "%s lacks %s for CUDA 12.0 (a driver that is too old?)", lib, sym);
  if (name) return err_set(err, SCHEDRUN_EBACKEND, "%s cannot give %s: %s", lib, sym, name);
  return err_set(err, SCHEDRUN_EBACKEND, "%s cannot give %s: CUresult %d", lib, sym, (int)r);
}

int cuda_api_load(cu_api_handle *out, int *ndevices, schedrun_error_t *err) {
  *out = NULL;
  *ndevices = 0;
  const char *lib = getenv("SCHEDRUN_CUDA_LIBRARY");
  if (!lib || !*lib) lib = "libcuda.so.1";
  /* RTLD_NODELETE: after cuInit the driver keeps threads and state that
   * must not see its code unmapped */
  void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!dl) return err_set(err, SCHEDRUN_EBACKEND, "no CUDA driver (%s cannot be loaded)", lib);
  typedef CUresult (*gpa_v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
  typedef CUresult (*gpa_v1)(const char *, void **, int, cuuint64_t);
  gpa_v2 g2 = (gpa_v2)dlsym(dl, "cuGetProcAddress_v2");
  gpa_v1 g1 = g2 ? NULL : (gpa_v1)dlsym(dl, "cuGetProcAddress");
  if (!g2 && !g1) {
    dlclose(dl);
    return err_set(err, SCHEDRUN_EBACKEND, "%s has no cuGetProcAddress (a driver older than CUDA 11.3?)", lib);
  }
  cu_api *a = calloc(1, sizeof *a);
  if (!a) {
    dlclose(dl);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  a->dl = dl;
#define X(name)                                                                                   \
  {                                                                                               \
    void *fn = NULL;                                                                              \
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;                               \
    CUresult r = g2 ? g2(#name, &fn, CUDA_ABI, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q)             \
                    : g1(#name, &fn, CUDA_ABI, CU_GET_PROC_ADDRESS_LEGACY_STREAM);                \
    if (r != CUDA_SUCCESS || !fn) {                                                               \
      int rc_ = missing(dl, lib, #name, r, err);                                                  \
      dlclose(dl);                                                                                \
      free(a);                                                                                    \
      return rc_;                                                                                 \
    }                                                                                             \
    memcpy(&a->name, &fn, sizeof fn);                                                             \
  }
  CU_FUNCS(X)
#undef X
  CUresult r = a->cuInit(0);
  int n = 0;
  if (r == CUDA_SUCCESS) r = a->cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n == 0) {
    int rc = r != CUDA_SUCCESS ? cu_fail(a, err, r, "cuInit", NULL)
                               : err_set(err, SCHEDRUN_EBACKEND, "the CUDA driver sees no device");
    dlclose(dl);
    free(a);
    return rc;
  }
  *out = a;
  *ndevices = n;
  return SCHEDRUN_OK;
}

void cuda_api_unload(cu_api_handle h) {
  cu_api *a = h;
  if (!a) return;
  dlclose(a->dl);
  free(a);
}

/* ---- marshalling ---- */

void cuda_marshal_args(const uint64_t *slots, uint32_t n, void **params) {
  /* a scalar sits in the low bytes of its slot (little-endian), a pointer is
   * the whole slot: the address of the slot is the address of the value */
  for (uint32_t i = 0; i < n; i++) params[i] = (void *)&slots[i];
}

/* ---- the backend ---- */

static int use(cuda_backend *b, int dev, schedrun_error_t *err) {
  if (dev < 0 || dev >= b->ndevices) return err_set(err, SCHEDRUN_EINVAL, "no cuda device %d", dev);
  CU_CHECK(&b->api, b->api.cuCtxSetCurrent(b->devs[dev].ctx), b->devs[dev].name, err);
  return SCHEDRUN_OK;
}

static void c_destroy(gpu_backend *g) {
  cuda_backend *b = cb(g);
  for (int i = 0; i < b->ndevices; i++) {
    if (b->devs[i].stream) {
      b->api.cuCtxSetCurrent(b->devs[i].ctx);
      b->api.cuStreamDestroy(b->devs[i].stream);
    }
    if (b->devs[i].ctx) b->api.cuDevicePrimaryCtxRelease(b->devs[i].dev);
  }
  free(b->devs);
  dlclose(b->api.dl);
  free(b);
}

static int c_device_count(const gpu_backend *g) { return cb(g)->ndevices; }
static const char *c_device_name(const gpu_backend *g, int d) {
  return d >= 0 && d < cb(g)->ndevices ? cb(g)->devs[d].name : NULL;
}
static const char *c_target(const gpu_backend *g, int d) {
  (void)g;
  (void)d;
  return "cuda";
}
static const char *c_arch(const gpu_backend *g, int d) {
  return d >= 0 && d < cb(g)->ndevices ? cb(g)->devs[d].arch : "";
}

static int c_mem_alloc(gpu_backend *g, int dev, uint64_t bytes, uint64_t *addr, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  int rc = use(b, dev, err);
  if (rc) return rc;
  CUdeviceptr p = 0;
  CU_CHECK(&b->api, b->api.cuMemAlloc(&p, bytes ? bytes : 1), b->devs[dev].name, err);
  *addr = (uint64_t)p;
  return SCHEDRUN_OK;
}

static void c_mem_free(gpu_backend *g, int dev, uint64_t addr) {
  cuda_backend *b = cb(g);
  if (use(b, dev, NULL) == SCHEDRUN_OK) b->api.cuMemFree((CUdeviceptr)addr);
}

static int c_mem_zero(gpu_backend *g, int dev, uint64_t addr, uint64_t n, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  int rc = use(b, dev, err);
  if (rc) return rc;
  CU_CHECK(&b->api, b->api.cuMemsetD8((CUdeviceptr)addr, 0, n), b->devs[dev].name, err);
  return SCHEDRUN_OK;
}

static int c_copy_htod(gpu_backend *g, int dev, uint64_t dst, const void *src, uint64_t n, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  int rc = use(b, dev, err);
  if (rc) return rc;
  CU_CHECK(&b->api, b->api.cuMemcpyHtoD((CUdeviceptr)dst, src, n), b->devs[dev].name, err);
  return SCHEDRUN_OK;
}

static int c_copy_dtoh(gpu_backend *g, int dev, void *dst, uint64_t src, uint64_t n, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  int rc = use(b, dev, err);
  if (rc) return rc;
  CU_CHECK(&b->api, b->api.cuStreamSynchronize(b->devs[dev].stream), b->devs[dev].name, err);
  CU_CHECK(&b->api, b->api.cuMemcpyDtoH(dst, (CUdeviceptr)src, n), b->devs[dev].name, err);
  return SCHEDRUN_OK;
}

static int c_module_load(gpu_backend *g, int dev, const void *image, size_t len, gpu_module **out,
                         schedrun_error_t *err) {
  (void)len;
  cuda_backend *b = cb(g);
  int rc = use(b, dev, err);
  if (rc) return rc;
  gpu_module *m = calloc(1, sizeof *m);
  if (!m) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  CUresult r = b->api.cuModuleLoadData(&m->mod, image);
  if (r != CUDA_SUCCESS) {
    free(m);
    return cu_fail(&b->api, err, r, "cuModuleLoadData", b->devs[dev].name);
  }
  m->dev = dev;
  *out = m;
  return SCHEDRUN_OK;
}

static void c_module_unload(gpu_backend *g, gpu_module *m) {
  cuda_backend *b = cb(g);
  if (!m) return;
  if (use(b, m->dev, NULL) == SCHEDRUN_OK) b->api.cuModuleUnload(m->mod);
  free(m);
}

static int c_module_function(gpu_backend *g, gpu_module *m, const char *entry, gpu_function *out,
                             schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  CUfunction f;
  CUresult r = b->api.cuModuleGetFunction(&f, m->mod, entry);
  if (r != CUDA_SUCCESS) return cu_fail(&b->api, err, r, "cuModuleGetFunction", b->devs[m->dev].name);
  *out = (gpu_function)f;
  return SCHEDRUN_OK;
}

static int c_launch(gpu_backend *g, int dev, const gpu_node *n, bool wait, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  int rc = use(b, dev, err);
  if (rc) return rc;
  cu_device *d = &b->devs[dev];
  if (n->kind != GN_LAUNCH) return err_set(err, SCHEDRUN_EINVAL, "%s: only launches run on their own", d->name);
  void *params[64];
  if (n->u.launch.nargs > 64) return err_set(err, SCHEDRUN_EINVAL, "%s: more than 64 kernel arguments", d->name);
  cuda_marshal_args(n->u.launch.args, n->u.launch.nargs, params);
  CU_CHECK(&b->api,
           b->api.cuLaunchKernel((CUfunction)n->u.launch.fn, n->u.launch.grid[0], n->u.launch.grid[1],
                                 n->u.launch.grid[2], n->u.launch.block[0], n->u.launch.block[1], n->u.launch.block[2],
                                 0, d->stream, params, NULL),
           d->name, err);
  if (wait) CU_CHECK(&b->api, b->api.cuStreamSynchronize(d->stream), d->name, err);
  return SCHEDRUN_OK;
}

/* ---- sequences ---- */

static int c_seq_create(gpu_backend *g, int dev, gpu_seq **out, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  if (dev < 0 || dev >= b->ndevices) return err_set(err, SCHEDRUN_EINVAL, "no cuda device %d", dev);
  gpu_seq *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  s->b = b;
  s->dev = dev;
  *out = s;
  return SCHEDRUN_OK;
}

static void c_seq_destroy(gpu_seq *s) {
  if (!s) return;
  cu_api *a = &s->b->api;
  use(s->b, s->dev, NULL);
  for (uint32_t i = 0; i < s->nsegs; i++) {
    cu_segment *sg = &s->segs[i];
    if (sg->exec) a->cuGraphExecDestroy(sg->exec);
    if (sg->graph) a->cuGraphDestroy(sg->graph);
    c_seq_destroy(sg->body);
  }
  for (uint32_t i = 0; i < s->n; i++) {
    free(s->nodes[i].args);
    free(s->nodes[i].params);
  }
  free(s->segs);
  free(s->nodes);
  free(s);
}

static cu_segment *push_segment(gpu_seq *s, int kind, schedrun_error_t *err) {
  if (s->nsegs == s->segcap) {
    uint32_t cap = s->segcap ? s->segcap * 2 : 4;
    cu_segment *p = realloc(s->segs, cap * sizeof *p);
    if (!p) {
      err_set(err, SCHEDRUN_ENOMEM, "out of memory");
      return NULL;
    }
    s->segs = p;
    s->segcap = cap;
  }
  cu_segment *sg = &s->segs[s->nsegs];
  memset(sg, 0, sizeof *sg);
  sg->kind = kind;
  if (kind == SEG_GRAPH) {
    CUresult r = s->b->api.cuGraphCreate(&sg->graph, 0);
    if (r != CUDA_SUCCESS) {
      cu_fail(&s->b->api, err, r, "cuGraphCreate", s->b->devs[s->dev].name);
      return NULL;
    }
  }
  s->nsegs++;
  return sg;
}

static void kernel_params(const cu_node *cn, const gpu_node *n, CUDA_KERNEL_NODE_PARAMS *kp) {
  memset(kp, 0, sizeof *kp);
  kp->func = (CUfunction)n->u.launch.fn;
  kp->gridDimX = n->u.launch.grid[0];
  kp->gridDimY = n->u.launch.grid[1];
  kp->gridDimZ = n->u.launch.grid[2];
  kp->blockDimX = n->u.launch.block[0];
  kp->blockDimY = n->u.launch.block[1];
  kp->blockDimZ = n->u.launch.block[2];
  kp->kernelParams = cn->params;
}

static void copy_params(const gpu_node *n, CUDA_MEMCPY3D *cp) {
  memset(cp, 0, sizeof *cp);
  cp->srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp->srcDevice = (CUdeviceptr)n->u.copy.src;
  cp->dstMemoryType = CU_MEMORYTYPE_DEVICE;
  cp->dstDevice = (CUdeviceptr)n->u.copy.dst;
  cp->WidthInBytes = n->u.copy.bytes;
  cp->Height = 1;
  cp->Depth = 1;
}

/* A fill as one or two memsets: 1- and 4-byte elements directly; 8-byte
 * elements as two 4-byte memsets over rows of pitch 8 (low and high halves). */
static int fill_params(const gpu_node *n, CUDA_MEMSET_NODE_PARAMS mp[2]) {
  memset(mp, 0, 2 * sizeof *mp);
  uint32_t es = n->u.fill.elem_size;
  if (es == 1 || es == 4) {
    mp[0].dst = (CUdeviceptr)n->u.fill.dst;
    mp[0].value = (unsigned)(es == 1 ? (n->u.fill.pattern & 0xff) : (uint32_t)n->u.fill.pattern);
    mp[0].elementSize = es;
    mp[0].width = n->u.fill.count;
    mp[0].height = 1;
    mp[0].pitch = 0;
    return 1;
  }
  for (int h = 0; h < 2; h++) {
    mp[h].dst = (CUdeviceptr)(n->u.fill.dst + 4u * (unsigned)h);
    mp[h].value = (unsigned)(uint32_t)(n->u.fill.pattern >> (32 * h));
    mp[h].elementSize = 4;
    mp[h].width = 1;
    mp[h].height = n->u.fill.count;
    mp[h].pitch = 8;
  }
  return 2;
}

static int c_seq_add(gpu_seq *s, gpu_node *n, uint32_t *index, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_api *a = &b->api;
  cu_device *d = &b->devs[s->dev];
  if (s->finalized) return err_set(err, SCHEDRUN_EINTERNAL, "%s: a finalized sequence takes no nodes", d->name);
  int rc = use(b, s->dev, err);
  if (rc) return rc;
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 16;
    cu_node *p = realloc(s->nodes, cap * sizeof *p);
    if (!p) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    s->nodes = p;
    s->cap = cap;
  }
  cu_node *cn = &s->nodes[s->n];
  memset(cn, 0, sizeof *cn);
  cn->kind = (uint8_t)n->kind;
  if (n->kind == GN_WHILE) {
    cu_segment *sg = push_segment(s, SEG_WHILE, err);
    if (!sg) return err ? err->code : SCHEDRUN_ENOMEM;
    sg->flag = n->u.loop.flag;
    sg->max_trips = n->u.loop.max_trips;
    if ((rc = c_seq_create(&b->base, s->dev, &sg->body, err))) {
      s->nsegs--;
      return rc;
    }
    n->u.loop.body = sg->body;
    cn->seg = (uint16_t)(s->nsegs - 1);
    *index = s->n++;
    return SCHEDRUN_OK;
  }
  cu_segment *sg = s->nsegs && s->segs[s->nsegs - 1].kind == SEG_GRAPH ? &s->segs[s->nsegs - 1]
                                                                       : push_segment(s, SEG_GRAPH, err);
  if (!sg) return err ? err->code : SCHEDRUN_ENOMEM;
  cn->seg = (uint16_t)(sg - s->segs);
  CUgraphNode dep = sg->last;
  size_t ndep = dep ? 1 : 0;
  CUresult r = CUDA_SUCCESS;
  const char *call = "";
  if (n->kind == GN_LAUNCH) {
    cn->nargs = n->u.launch.nargs;
    cn->args = malloc((cn->nargs ? cn->nargs : 1) * sizeof(uint64_t));
    cn->params = malloc((cn->nargs ? cn->nargs : 1) * sizeof(void *));
    if (!cn->args || !cn->params) {
      free(cn->args);
      free(cn->params);
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    }
    if (cn->nargs) memcpy(cn->args, n->u.launch.args, cn->nargs * sizeof(uint64_t));
    cuda_marshal_args(cn->args, cn->nargs, cn->params);
    CUDA_KERNEL_NODE_PARAMS kp;
    kernel_params(cn, n, &kp);
    call = "cuGraphAddKernelNode";
    r = a->cuGraphAddKernelNode(&cn->cu[0], sg->graph, ndep ? &dep : NULL, ndep, &kp);
    cn->ncu = 1;
  } else if (n->kind == GN_COPY) {
    CUDA_MEMCPY3D cp;
    copy_params(n, &cp);
    call = "cuGraphAddMemcpyNode";
    r = a->cuGraphAddMemcpyNode(&cn->cu[0], sg->graph, ndep ? &dep : NULL, ndep, &cp, d->ctx);
    cn->ncu = 1;
  } else if (n->kind == GN_FILL) {
    CUDA_MEMSET_NODE_PARAMS mp[2];
    int k = fill_params(n, mp);
    call = "cuGraphAddMemsetNode";
    for (int i = 0; i < k && r == CUDA_SUCCESS; i++) {
      r = a->cuGraphAddMemsetNode(&cn->cu[i], sg->graph, ndep ? &dep : NULL, ndep, &mp[i], d->ctx);
      if (r == CUDA_SUCCESS) {
        dep = cn->cu[i];
        ndep = 1;
      }
    }
    cn->ncu = (uint8_t)k;
  } else {
    return err_set(err, SCHEDRUN_EINTERNAL, "unknown node kind %d", (int)n->kind);
  }
  if (r != CUDA_SUCCESS) {
    free(cn->args);
    free(cn->params);
    return cu_fail(a, err, r, call, d->name);
  }
  sg->last = cn->cu[cn->ncu - 1];
  *index = s->n++;
  return SCHEDRUN_OK;
}

static int c_seq_finalize(gpu_seq *s, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  int rc = use(b, s->dev, err);
  if (rc) return rc;
  for (uint32_t i = 0; i < s->nsegs; i++) {
    cu_segment *sg = &s->segs[i];
    if (sg->kind == SEG_WHILE) {
      if ((rc = c_seq_finalize(sg->body, err))) return rc;
    } else if (!sg->exec) {
      CU_CHECK(&b->api, b->api.cuGraphInstantiateWithFlags(&sg->exec, sg->graph, 0), b->devs[s->dev].name, err);
    }
  }
  s->finalized = true;
  return SCHEDRUN_OK;
}

static int c_seq_update(gpu_seq *s, uint32_t index, const gpu_node *n, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_api *a = &b->api;
  cu_device *d = &b->devs[s->dev];
  if (index >= s->n || s->nodes[index].kind != n->kind)
    return err_set(err, SCHEDRUN_EINTERNAL, "update of node %u does not match the sequence", index);
  int rc = use(b, s->dev, err);
  if (rc) return rc;
  cu_node *cn = &s->nodes[index];
  cu_segment *sg = &s->segs[cn->seg];
  if (n->kind == GN_WHILE) {
    sg->flag = n->u.loop.flag;
    sg->max_trips = n->u.loop.max_trips;
    return SCHEDRUN_OK;
  }
  if (!sg->exec) return err_set(err, SCHEDRUN_EINTERNAL, "%s: update before finalize", d->name);
  if (n->kind == GN_LAUNCH) {
    if (n->u.launch.nargs != cn->nargs) return err_set(err, SCHEDRUN_EINTERNAL, "update changes a launch's arguments");
    if (cn->nargs) memcpy(cn->args, n->u.launch.args, cn->nargs * sizeof(uint64_t));
    CUDA_KERNEL_NODE_PARAMS kp;
    kernel_params(cn, n, &kp);
    CU_CHECK(a, a->cuGraphExecKernelNodeSetParams(sg->exec, cn->cu[0], &kp), d->name, err);
  } else if (n->kind == GN_COPY) {
    CUDA_MEMCPY3D cp;
    copy_params(n, &cp);
    CU_CHECK(a, a->cuGraphExecMemcpyNodeSetParams(sg->exec, cn->cu[0], &cp, d->ctx), d->name, err);
  } else {
    CUDA_MEMSET_NODE_PARAMS mp[2];
    int k = fill_params(n, mp);
    if (k != cn->ncu) return err_set(err, SCHEDRUN_EINTERNAL, "update changes a fill's element size");
    for (int i = 0; i < k; i++)
      CU_CHECK(a, a->cuGraphExecMemsetNodeSetParams(sg->exec, cn->cu[i], &mp[i], d->ctx), d->name, err);
  }
  return SCHEDRUN_OK;
}

static int run_segments(gpu_seq *s, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_api *a = &b->api;
  cu_device *d = &b->devs[s->dev];
  for (uint32_t i = 0; i < s->nsegs; i++) {
    cu_segment *sg = &s->segs[i];
    if (sg->kind == SEG_GRAPH) {
      CU_CHECK(a, a->cuGraphLaunch(sg->exec, d->stream), d->name, err);
      continue;
    }
    for (uint32_t t = 0; t < sg->max_trips; t++) {
      int32_t flag = 0;
      CU_CHECK(a, a->cuStreamSynchronize(d->stream), d->name, err);
      CU_CHECK(a, a->cuMemcpyDtoH(&flag, (CUdeviceptr)sg->flag, sizeof flag), d->name, err);
      if (flag == 0) break;
      int rc = run_segments(sg->body, err);
      if (rc) return rc;
    }
  }
  return SCHEDRUN_OK;
}

static void set_lost(cu_device *d, const char *why) {
  pthread_mutex_lock(&d->lost_lock);
  if (!atomic_load(&d->lost)) {
    snprintf(d->lost_why, sizeof d->lost_why, "%s: %s", d->name, why);
    atomic_store(&d->lost, true);
  }
  pthread_mutex_unlock(&d->lost_lock);
}

/* Waits for the device's stream by polling, so that a deadline or a close can
 * end the wait: a kernel cannot be stopped, so its device is then lost. */
static int wait_stream(cuda_backend *b, cu_device *d, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  cu_api *a = &b->api;
  long nap = 2000;
  for (;;) {
    CUresult r = a->cuStreamQuery(d->stream);
    if (r == CUDA_SUCCESS) return SCHEDRUN_OK;
    if (r != CUDA_ERROR_NOT_READY) {
      /* errors from a kernel (an illegal address, a trap) are sticky: the
       * context is unusable from now on */
      const char *name = NULL;
      a->cuGetErrorName(r, &name);
      char why[160];
      snprintf(why, sizeof why, "a kernel failed with %s; the context is unusable", name ? name : "an error");
      set_lost(d, why);
      f->lost = true;
      return err_set(err, SCHEDRUN_EFAULT, "%s", d->lost_why);
    }
    if (atomic_load(&b->abandoned) || (deadline_ns && now_ns() >= deadline_ns)) {
      set_lost(d, atomic_load(&b->abandoned) ? "abandoned while busy when the scheduler closed"
                                             : "a job ran past its deadline");
      f->lost = true;
      return err_set(err, atomic_load(&b->abandoned) ? SCHEDRUN_ELOST : SCHEDRUN_ETIMEOUT,
                     "%s: the job ran past its deadline (the device is lost)", d->name);
    }
    struct timespec ts = {0, nap};
    nanosleep(&ts, NULL);
    if (nap < 1000000) nap *= 2;
  }
}

static int c_seq_launch(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_device *d = &b->devs[s->dev];
  gpu_failure ignored;
  if (!f) f = &ignored;
  f->tag = GPU_NO_TAG;
  f->lost = false;
  if (atomic_load(&d->lost)) {
    f->lost = true;
    return err_set(err, SCHEDRUN_ELOST, "%s is lost: %s", d->name, d->lost_why);
  }
  if (!s->finalized) return err_set(err, SCHEDRUN_EINTERNAL, "%s: launch before finalize", d->name);
  int rc = use(b, s->dev, err);
  if (rc == SCHEDRUN_OK) rc = run_segments(s, err);
  if (rc == SCHEDRUN_OK) rc = wait_stream(b, d, deadline_ns, f, err);
  return rc;
}

static const char *c_device_lost(const gpu_backend *g, int dev) {
  const cu_device *d = &cb(g)->devs[dev];
  return atomic_load(&((cu_device *)d)->lost) ? d->lost_why : NULL;
}

static void c_abandon(gpu_backend *g) { atomic_store(&cb(g)->abandoned, true); }

static const gpu_ops cuda_ops = {
    .name = "cuda",
    .destroy = c_destroy,
    .device_count = c_device_count,
    .device_name = c_device_name,
    .target = c_target,
    .arch = c_arch,
    .mem_alloc = c_mem_alloc,
    .mem_free = c_mem_free,
    .mem_zero = c_mem_zero,
    .copy_htod = c_copy_htod,
    .copy_dtoh = c_copy_dtoh,
    .module_load = c_module_load,
    .module_unload = c_module_unload,
    .module_function = c_module_function,
    .launch = c_launch,
    .seq_create = c_seq_create,
    .seq_add = c_seq_add,
    .seq_update = c_seq_update,
    .seq_finalize = c_seq_finalize,
    .seq_launch = c_seq_launch,
    .seq_destroy = c_seq_destroy,
    .device_lost = c_device_lost,
    .abandon = c_abandon,
};

int gpu_cuda_open(const int *which, int nwhich, gpu_backend **out, schedrun_error_t *err) {
  *out = NULL;
  cu_api_handle h;
  int count;
  int rc = cuda_api_load(&h, &count, err);
  if (rc) return rc;
  cuda_backend *b = calloc(1, sizeof *b);
  int n = nwhich > 0 ? nwhich : count;
  if (b) b->devs = calloc((size_t)n, sizeof *b->devs);
  if (!b || !b->devs) {
    if (b) free(b);
    cuda_api_unload(h);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  b->base.ops = &cuda_ops;
  b->api = *(cu_api *)h;
  free(h); /* the table is copied; the library handle now belongs to b */
  for (int i = 0; i < n; i++) {
    int ord = nwhich > 0 ? which[i] : i;
    cu_device *d = &b->devs[i];
    pthread_mutex_init(&d->lost_lock, NULL);
    snprintf(d->name, sizeof d->name, "cuda:%d", ord);
    if (ord < 0 || ord >= count) {
      rc = err_set(err, SCHEDRUN_EINVAL, "devices: there is no cuda:%d (the driver sees %d)", ord, count);
      break;
    }
    CUresult r = b->api.cuDeviceGet(&d->dev, ord);
    int major = 0, minor = 0;
    if (r == CUDA_SUCCESS) r = b->api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
    if (r == CUDA_SUCCESS) r = b->api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
    if (r == CUDA_SUCCESS) r = b->api.cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
    if (r == CUDA_SUCCESS) r = b->api.cuCtxSetCurrent(d->ctx);
    if (r == CUDA_SUCCESS) r = b->api.cuStreamCreate(&d->stream, CU_STREAM_DEFAULT); /* ordered after the legacy-stream copies and memsets */
    if (r != CUDA_SUCCESS) {
      rc = cu_fail(&b->api, err, r, "opening the device", d->name);
      /* not counted yet, so destroy would not give this one back */
      if (d->stream) b->api.cuStreamDestroy(d->stream);
      if (d->ctx) b->api.cuDevicePrimaryCtxRelease(d->dev);
      d->stream = NULL;
      d->ctx = NULL;
      break;
    }
    snprintf(d->arch, sizeof d->arch, "sm_%d%d", major, minor);
    b->ndevices = i + 1;
  }
  if (rc) {
    c_destroy(&b->base);
    return rc;
  }
  *out = &b->base;
  return SCHEDRUN_OK;
}
