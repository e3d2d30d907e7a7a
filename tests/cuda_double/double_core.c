/*
 * The double's core: entry-point lookup, errors, failure injection, the
 * handle registry and leak report, devices, primary contexts and streams.
 * Memory and the eager copies are in double_memory.c. See double.h.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "double.h"

pthread_mutex_t dbl_lock;
int dbl_driver_version = 13000;
static int g_ndev = 1, g_arch[16] = {90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90};
uint64_t dbl_mem_bytes = 16ull << 30; /* per device */
double dbl_slowdown = 1;
static bool g_no_peer;                     /* SCHEDRUN_CUDA_DOUBLE_PEER=none */
bool dbl_init_done; /* cuInit ran */
/* initial-exec: a load from the thread pointer, no __tls_get_addr, whose
 * interceptor under ThreadSanitizer now and then resets the shadow of a
 * range of hundreds of terabytes and dies (as for kernels, see
 * gpu/host/host_build.c); one pointer of the static TLS glibc keeps for
 * modules opened later */
static _Thread_local dctx *t_current __attribute__((tls_model("initial-exec")));
/* the thread's context stack below t_current (its top): cuCtxPushCurrent */
enum { DBL_STACK = 16 };
static _Thread_local struct {
  dctx *v[DBL_STACK];
  int n;
} t_below __attribute__((tls_model("initial-exec")));
static dctx *g_ctx[16];

/* ---- settings and failure injection ---- */

typedef struct inject {
  char name[64];
  unsigned nth, seen;
  CUresult code;
} inject;
static inject g_inject[32];
static unsigned g_ninject;

static void read_fail_spec(void) {
  const char *spec = getenv("SCHEDRUN_CUDA_DOUBLE_FAIL");
  if (!spec) return;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item && g_ninject < 32; item = strtok_r(NULL, ",", &save)) {
    inject *in = &g_inject[g_ninject++];
    in->nth = 1;
    in->code = CUDA_ERROR_UNKNOWN;
    char *eq = strchr(item, '=');
    if (eq) {
      *eq = '\0';
      in->code = (CUresult)atoi(eq + 1);
    }
    char *at = strchr(item, '@');
    if (at) {
      *at = '\0';
      in->nth = (unsigned)atoi(at + 1);
    }
    snprintf(in->name, sizeof in->name, "%s", item);
  }
}

CUresult dbl_fail_point(const char *name) {
  for (unsigned i = 0; i < g_ninject; i++)
    if (strcmp(g_inject[i].name, name) == 0 && ++g_inject[i].seen == g_inject[i].nth) return g_inject[i].code;
  return CUDA_SUCCESS;
}

/* For tests running in-process: arm a failure of the nth next call of name. */
DBL_EXPORT void schedrun_cuda_double_fail(const char *name, unsigned nth, CUresult code) {
  pthread_mutex_lock(&dbl_lock);
  unsigned i = 0;
  while (i < g_ninject && strcmp(g_inject[i].name, name) != 0) i++;
  if (i < 32) {
    snprintf(g_inject[i].name, sizeof g_inject[i].name, "%s", name);
    g_inject[i].seen = 0;
    g_inject[i].nth = nth;
    g_inject[i].code = code;
    if (i == g_ninject) g_ninject++;
  }
  pthread_mutex_unlock(&dbl_lock);
}

unsigned dbl_strict;
const char *dbl_hang_list, *dbl_fault_list;

/* SCHEDRUN_CUDA_DOUBLE_STRICT: refusals a driver may make where the
 * documentation promises nothing, comma-separated. */
static void read_strict(void) {
  const char *spec = getenv("SCHEDRUN_CUDA_DOUBLE_STRICT");
  if (!spec) return;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save))
    if (!strcmp(item, "body-setparams")) dbl_strict |= DBL_STRICT_BODY_SETPARAMS;
    else if (!strcmp(item, "no-updates")) dbl_strict |= DBL_STRICT_NO_UPDATES;
}

void dbl_count(const char *event) {
  const char *path = getenv("SCHEDRUN_CUDA_DOUBLE_LOG");
  if (!path || !*path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s\n", event);
  fclose(f);
}

static char g_dir[512]; /* set once, when the library loads */

const char *dbl_state_dir(void) { return g_dir; }

/* ---- handles ---- */

/* Live handles: an open-addressing set of pointers, so that a stale or
 * foreign handle is refused instead of followed. */
static void **g_set;
static size_t g_setcap, g_setn;
static size_t g_live[K_NKINDS];

static size_t slot_of(const void *p, size_t cap) { return (size_t)(((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull) & (cap - 1); }

static bool set_grow(void) {
  size_t cap = g_setcap ? g_setcap * 2 : 256;
  void **s = calloc(cap, sizeof *s);
  if (!s) return false;
  for (size_t i = 0; i < g_setcap; i++)
    if (g_set[i] && g_set[i] != (void *)1) {
      size_t k = slot_of(g_set[i], cap);
      while (s[k]) k = (k + 1) & (cap - 1);
      s[k] = g_set[i];
    }
  free(g_set);
  g_set = s;
  g_setcap = cap;
  return true;
}

void *dbl_new(uint32_t kind, size_t size) {
  if ((g_setn + 1) * 2 > g_setcap && !set_grow()) return NULL;
  dobj *o = calloc(1, size);
  if (!o) return NULL;
  o->kind = kind;
  size_t k = slot_of(o, g_setcap);
  while (g_set[k] && g_set[k] != (void *)1) k = (k + 1) & (g_setcap - 1);
  g_set[k] = o;
  g_setn++;
  g_live[kind]++;
  return o;
}

static size_t find(const void *p) {
  if (!g_setcap || !p) return SIZE_MAX;
  for (size_t k = slot_of(p, g_setcap), n = 0; g_set[k] && n < g_setcap; k = (k + 1) & (g_setcap - 1), n++)
    if (g_set[k] == p) return k;
  return SIZE_MAX;
}

bool dbl_live(const void *h, uint32_t kind) { return find(h) != SIZE_MAX && ((const dobj *)h)->kind == kind; }

void dbl_forget(void *h) {
  size_t k = find(h);
  if (k == SIZE_MAX) return;
  g_set[k] = (void *)1; /* a tombstone keeps later probes going */
  g_live[((dobj *)h)->kind]--;
}

void dbl_free(void *h) {
  if (find(h) == SIZE_MAX) return;
  dbl_forget(h);
  free(h);
}

/* ---- the leak report ---- */

static const char *const kind_names[K_NKINDS] = {"", "primary context", "module", "function", "stream", "graph",
                                                  "graph node", "graph exec", "link state", "event"};

__attribute__((destructor)) static void report_leaks(void) {
  if (!dbl_init_done) return;
  /* a context whose kernel never returns cannot be given back (every call
   * that would wait for it is refused): the process's end reclaims it */
  if (dbl_any_hung((const dctx *const *)g_ctx, g_ndev < 16 ? g_ndev : 16)) return;
  size_t n = 0;
  uint64_t bytes = 0;
  size_t nalloc = dbl_allocations(&bytes);
  for (int d = 0; d < g_ndev && d < 16; d++)
    if (g_ctx[d] && g_ctx[d]->retains) {
      fprintf(stderr, "cuda-double: leak at exit: primary context of device %d retained %d time(s)\n", d,
              g_ctx[d]->retains);
      n++;
    }
  if (nalloc) fprintf(stderr, "cuda-double: leak at exit: %zu allocation(s), %" PRIu64 " bytes\n", nalloc, bytes);
  n += nalloc;
  for (int k = K_MOD; k < K_NKINDS; k++) {
    if (k == K_FUNC || k == K_NODE) continue; /* owned by a module or graph, counted with it */
    if (g_live[k]) fprintf(stderr, "cuda-double: leak at exit: %zu %s(s)\n", g_live[k], kind_names[k]);
    n += g_live[k];
  }
  if (n) _exit(86);
}

/* ---- entry points: initialisation and devices ---- */

static CUresult d_cuInit(unsigned flags) {
  ENTER("cuInit");
  if (flags != 0) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (!dbl_init_done) {
    const char *e;
    if ((e = getenv("SCHEDRUN_CUDA_DOUBLE_DEVICES")) && *e) g_ndev = atoi(e);
    if (g_ndev < 0 || g_ndev > 16) g_ndev = 1;
    if ((e = getenv("SCHEDRUN_CUDA_DOUBLE_ARCH")) && *e) {
      /* one per device, the last one for the devices after it */
      for (int d = 0; d < 16; d++) {
        g_arch[d] = atoi(e);
        if (strchr(e, ',')) e = strchr(e, ',') + 1;
      }
    }
    if ((e = getenv("SCHEDRUN_CUDA_DOUBLE_MEM_MB")) && *e && atoll(e) > 0) dbl_mem_bytes = (uint64_t)atoll(e) << 20;
    if ((e = getenv("SCHEDRUN_CUDA_DOUBLE_SLOWDOWN")) && *e && atof(e) >= 1 && atof(e) <= 1e6) dbl_slowdown = atof(e);
    g_no_peer = (e = getenv("SCHEDRUN_CUDA_DOUBLE_PEER")) && !strcmp(e, "none");
    dbl_init_done = true;
  }
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuDriverGetVersion(int *v) {
  ENTER("cuDriverGetVersion");
  if (!v) LEAVE(CUDA_ERROR_INVALID_VALUE);
  *v = dbl_driver_version;
  LEAVE(CUDA_SUCCESS);
}


static CUresult d_cuDeviceGetCount(int *n) {
  ENTER("cuDeviceGetCount");
  NEED_INIT();
  if (!n) LEAVE(CUDA_ERROR_INVALID_VALUE);
  *n = g_ndev;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuDeviceGet(CUdevice *d, int ordinal) {
  ENTER("cuDeviceGet");
  NEED_INIT();
  if (!d) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (ordinal < 0 || ordinal >= g_ndev) LEAVE(CUDA_ERROR_INVALID_DEVICE);
  *d = ordinal;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuDeviceGetName(char *name, int len, CUdevice d) {
  ENTER("cuDeviceGetName");
  NEED_INIT();
  if (!name || len <= 0) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (d < 0 || d >= g_ndev) LEAVE(CUDA_ERROR_INVALID_DEVICE);
  snprintf(name, (size_t)len, "schedrun CUDA double %d", d);
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  ENTER("cuDeviceGetAttribute");
  NEED_INIT();
  if (!v) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (d < 0 || d >= g_ndev) LEAVE(CUDA_ERROR_INVALID_DEVICE);
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = g_arch[d] / 10; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = g_arch[d] % 10; break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 2; break;
  default: LEAVE(CUDA_ERROR_INVALID_VALUE);
  }
  LEAVE(CUDA_SUCCESS);
}

/* Whether contexts on dev may access peer's memory directly: never a
 * device itself (the driver answers 0 for the same device). */
static CUresult d_cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
  ENTER("cuDeviceCanAccessPeer");
  NEED_INIT();
  if (!can) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (dev < 0 || dev >= g_ndev || peer < 0 || peer >= g_ndev) LEAVE(CUDA_ERROR_INVALID_DEVICE);
  *can = dev != peer && !g_no_peer;
  LEAVE(CUDA_SUCCESS);
}

/* ---- primary contexts ---- */

static CUresult d_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d) {
  ENTER("cuDevicePrimaryCtxRetain");
  NEED_INIT();
  if (!pctx) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (d < 0 || d >= g_ndev) LEAVE(CUDA_ERROR_INVALID_DEVICE);
  if (!g_ctx[d]) {
    /* a primary context lives as long as the process: never freed */
    g_ctx[d] = calloc(1, sizeof *g_ctx[d]);
    if (!g_ctx[d]) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    g_ctx[d]->o.kind = K_CTX;
    g_ctx[d]->ordinal = d;
    dbl_stream_init(&g_ctx[d]->null_stream, g_ctx[d]);
  }
  g_ctx[d]->retains++;
  *pctx = (CUcontext)g_ctx[d];
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuDevicePrimaryCtxRelease(CUdevice d) {
  ENTER("cuDevicePrimaryCtxRelease");
  NEED_INIT();
  if (d < 0 || d >= g_ndev) LEAVE(CUDA_ERROR_INVALID_DEVICE);
  if (!g_ctx[d] || g_ctx[d]->retains == 0) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  /* the last release destroys the context: once its work is done (the
   * wait lets the lock go, so the count is read again after it) */
  if (g_ctx[d]->retains == 1) dbl_wait(g_ctx[d], NULL, "cuDevicePrimaryCtxRelease");
  if (g_ctx[d]->retains == 0) LEAVE(CUDA_ERROR_INVALID_CONTEXT); /* released meanwhile */
  if (--g_ctx[d]->retains == 0) {
    g_ctx[d]->peers = 0; /* its peer access goes with it, and its fault */
    dbl_ctx_reset(g_ctx[d]);
  }
  LEAVE(CUDA_SUCCESS);
}

/* A context handle that may be used: a retained primary context. */
dctx *dbl_ctx(CUcontext c) {
  for (int d = 0; d < g_ndev && d < 16; d++)
    if (g_ctx[d] && (CUcontext)g_ctx[d] == c) return g_ctx[d]->retains ? g_ctx[d] : NULL;
  return NULL;
}

/* Lets the current context access peer's memory: one way, once (again is
 * CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED), for a pair that can. */
static CUresult d_cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
  ENTER("cuCtxEnablePeerAccess");
  NEED_INIT();
  dctx *x = dbl_current();
  if (!x) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  dctx *p = dbl_ctx(peer);
  if (!p) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  if (flags != 0 || p == x) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (g_no_peer) LEAVE(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  if (x->peers & (1u << p->ordinal)) LEAVE(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  x->peers |= 1u << p->ordinal;
  LEAVE(CUDA_SUCCESS);
}

int dbl_device_arch(int ordinal) { return ordinal >= 0 && ordinal < 16 ? g_arch[ordinal] : 0; }

dctx *dbl_current(void) { return t_current && t_current->retains ? t_current : NULL; }

/* The context bound to the calling thread, or NULL: what cuCtxSetCurrent
 * (or nothing) left on it. */
static CUresult d_cuCtxGetCurrent(CUcontext *pctx) {
  ENTER("cuCtxGetCurrent");
  NEED_INIT();
  if (!pctx) LEAVE(CUDA_ERROR_INVALID_VALUE);
  *pctx = (CUcontext)t_current;
  LEAVE(CUDA_SUCCESS);
}

/* Replaces the top of the thread's context stack (an empty stack gets
 * one); NULL pops it, as the documentation says. */
static CUresult d_cuCtxSetCurrent(CUcontext c) {
  ENTER("cuCtxSetCurrent");
  NEED_INIT();
  if (!c) {
    t_current = t_below.n ? t_below.v[--t_below.n] : NULL;
    LEAVE(CUDA_SUCCESS);
  }
  dctx *x = dbl_ctx(c);
  if (!x) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  t_current = x;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuCtxPushCurrent(CUcontext c) {
  ENTER("cuCtxPushCurrent");
  NEED_INIT();
  dctx *x = dbl_ctx(c);
  if (!x) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  if (t_current) {
    if (t_below.n == DBL_STACK) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    t_below.v[t_below.n++] = t_current;
  }
  t_current = x;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuCtxPopCurrent(CUcontext *pctx) {
  ENTER("cuCtxPopCurrent");
  NEED_INIT();
  if (!t_current) LEAVE(CUDA_ERROR_INVALID_CONTEXT); /* nothing to pop */
  if (pctx) *pctx = (CUcontext)t_current;
  t_current = t_below.n ? t_below.v[--t_below.n] : NULL;
  LEAVE(CUDA_SUCCESS);
}


/* ---- streams ---- */

static CUresult d_cuStreamCreate(CUstream *s, unsigned flags) {
  ENTER("cuStreamCreate");
  NEED_CTX(x);
  if (!s || (flags & ~1u)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  dstream *st = dbl_new(K_STREAM, sizeof *st);
  if (!st) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  dbl_stream_init(st, x);
  *s = (CUstream)st;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuStreamDestroy(CUstream s) {
  ENTER("cuStreamDestroy");
  NEED_INIT();
  if (!dbl_live(s, K_STREAM)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  /* returns at once: the stream's work still runs, and then it is freed */
  dbl_forget(s);
  dbl_stream_destroy((dstream *)s);
  LEAVE(CUDA_SUCCESS);
}

/* The stream a call names, checked: s, or (NULL) the current context's
 * legacy default stream. */
CUresult dbl_stream_of(CUstream s, dstream **out) {
  if (!dbl_init_done) return CUDA_ERROR_NOT_INITIALIZED;
  dctx *x = dbl_current();
  if (!x) return CUDA_ERROR_INVALID_CONTEXT;
  if (s && !dbl_live(s, K_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
  if (s && ((dstream *)s)->ctx != x) return CUDA_ERROR_INVALID_CONTEXT;
  *out = dbl_stream(s, x);
  return CUDA_SUCCESS;
}

static CUresult d_cuStreamSynchronize(CUstream s) {
  ENTER("cuStreamSynchronize");
  dstream *st;
  CUresult r = dbl_stream_of(s, &st);
  /* the legacy default stream waits for every blocking stream of its context */
  if (r == CUDA_SUCCESS) r = dbl_wait(st->ctx, s ? st : NULL, "cuStreamSynchronize");
  LEAVE(r);
}

static CUresult d_cuStreamQuery(CUstream s) {
  ENTER("cuStreamQuery");
  dstream *st;
  CUresult r = dbl_stream_of(s, &st);
  LEAVE(r == CUDA_SUCCESS ? dbl_query(st) : r);
}

/* ---- errors ---- */

static const struct {
  CUresult r;
  const char *name, *text;
} g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult d_cuGetErrorName(CUresult r, const char **s) {
  /* no fail point: errors are named while another failure is reported */
  for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
    if (g_errors[i].r == r) {
      *s = g_errors[i].name;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult d_cuGetErrorString(CUresult r, const char **s) {
  for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
    if (g_errors[i].r == r) {
      *s = g_errors[i].text;
      return CUDA_SUCCESS;
    }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

#define E(name, since) {#name, (void *)d_##name, since}
const dbl_entry dbl_core_entries[] = {
    E(cuInit, 2000), E(cuDriverGetVersion, 2020), E(cuGetErrorName, 6000), E(cuGetErrorString, 6000),
    E(cuDeviceGetCount, 2000), E(cuDeviceGet, 2000), E(cuDeviceGetName, 2000), E(cuDeviceGetAttribute, 2000),
    E(cuDevicePrimaryCtxRetain, 7000), E(cuDevicePrimaryCtxRelease, 11000), E(cuCtxSetCurrent, 4000), E(cuCtxGetCurrent, 4000),
    E(cuCtxPushCurrent, 4000), E(cuCtxPopCurrent, 4000), E(cuDeviceCanAccessPeer, 4000), E(cuCtxEnablePeerAccess, 4000),
    E(cuStreamCreate, 2000), E(cuStreamDestroy, 4000), E(cuStreamSynchronize, 2000), E(cuStreamQuery, 2000),
    {NULL, NULL, 0}};
#undef E

/* ---- the exported symbols ---- */

static void once(void) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&dbl_lock, &a);
  pthread_mutexattr_destroy(&a);
  const char *v = getenv("SCHEDRUN_CUDA_DOUBLE_DRIVER");
  if (v && *v) dbl_driver_version = atoi(v);
  read_fail_spec();
  read_strict();
  const char *h = getenv("SCHEDRUN_CUDA_DOUBLE_HANG"), *f = getenv("SCHEDRUN_CUDA_DOUBLE_FAULT");
  dbl_hang_list = h ? strdup(h) : NULL; /* kept for the process's life */
  dbl_fault_list = f ? strdup(f) : NULL;
  /* the double needs to see every compile: it is NVRTC too, unless told otherwise */
  Dl_info self;
  if (!getenv("SCHEDRUN_NVRTC_LIBRARY") && dladdr((void *)once, &self) && self.dli_fname)
    setenv("SCHEDRUN_NVRTC_LIBRARY", self.dli_fname, 0);
  const char *d = getenv("SCHEDRUN_CUDA_DOUBLE_DIR");
  const char *tmp = getenv("TMPDIR");
  if (d && *d) snprintf(g_dir, sizeof g_dir, "%s", d);
  else snprintf(g_dir, sizeof g_dir, "%s/schedrun-cuda-double-%ld", tmp && *tmp ? tmp : "/tmp", (long)getuid());
}

__attribute__((constructor)) static void double_init(void) { once(); }

static CUresult lookup(const char *symbol, void **pfn, int version, CUdriverProcAddressQueryResult *status) {
  const dbl_entry *tables[] = {dbl_core_entries, dbl_memory_entries, dbl_module_entries, dbl_graph_entries,
                               dbl_async_entries};
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
    for (const dbl_entry *e = tables[t]; e->name; e++) {
      if (strcmp(e->name, symbol) != 0) continue;
      if (e->since > dbl_driver_version) break; /* this driver does not have it */
      if (e->since > version) {
        if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_NOT_FOUND;
      }
      *pfn = e->fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

DBL_EXPORT CUresult dbl_gpa_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                               CUdriverProcAddressQueryResult *status) __asm__("cuGetProcAddress_v2");
CUresult dbl_gpa_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *status) {
  if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    return CUDA_ERROR_INVALID_VALUE;
  return lookup(symbol, pfn, version, status);
}

DBL_EXPORT CUresult dbl_gpa_v1(const char *symbol, void **pfn, int version, cuuint64_t flags) __asm__("cuGetProcAddress");
CUresult dbl_gpa_v1(const char *symbol, void **pfn, int version, cuuint64_t flags) {
  return dbl_gpa_v2(symbol, pfn, version, flags, NULL);
}

DBL_EXPORT CUresult dbl_get_error_name(CUresult r, const char **s) __asm__("cuGetErrorName");
CUresult dbl_get_error_name(CUresult r, const char **s) { return d_cuGetErrorName(r, s); }
DBL_EXPORT CUresult dbl_init(unsigned flags) __asm__("cuInit");
CUresult dbl_init(unsigned flags) { return d_cuInit(flags); }
DBL_EXPORT CUresult dbl_driver_get_version(int *v) __asm__("cuDriverGetVersion");
CUresult dbl_driver_get_version(int *v) { return d_cuDriverGetVersion(v); }
