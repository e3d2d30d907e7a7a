/*
 * The CUDA backend: the driver API, loaded at run time.
 *
 * libcuda.so.1 is opened with dlopen and every entry point is resolved through
 * cuGetProcAddress (CUDA 12.0 ABI, legacy default stream), so the same binary
 * runs with or without a driver; with none, gpu_backend_open("auto") falls
 * back to the host with a one-line reason. Building needs only the toolkit's
 * cuda.h. Entry points newer drivers add (conditional graph nodes) are
 * optional: an older driver still loads.
 *
 * Devices use their primary contexts and one stream each. This file holds
 * the driver, devices and modules; cuda_memory.c memory and copies,
 * cuda_graph.c the sequences.
 */
#include <assert.h>
#include <cuda.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/spin_gauge.h"
#include "gpu/arch_bundle.h"
#include "gpu/cuda/cuda_internal.h"

struct gpu_module {
  gpu_backend *owner; /* first, as in every backend (gpu_owner) */
  CUmodule mod;
  int dev;
};

/* The errors a kernel leaves on its context (an illegal address, a launch
 * timeout, a device-side assert, a hardware stack error, an illegal or
 * misaligned instruction or address, an invalid program counter, a failed
 * launch): the driver documents the context as unusable from then on, every
 * later call on it returning the same error, until the process ends. They
 * surface at whatever call comes next on the context: a launch, a copy, a
 * synchronize. */
static bool cu_sticky(CUresult r) {
  switch (r) {
  case CUDA_ERROR_ILLEGAL_ADDRESS: case CUDA_ERROR_LAUNCH_TIMEOUT: case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_HARDWARE_STACK_ERROR: case CUDA_ERROR_ILLEGAL_INSTRUCTION: case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE: case CUDA_ERROR_INVALID_PC: case CUDA_ERROR_LAUNCH_FAILED: return true;
  default: return false;
  }
}

int cu_fail(const cu_api *a, schedrun_error_t *err, CUresult r, const char *call, const char *dev) {
  const char *name = NULL, *text = NULL;
  if (a->cuGetErrorName) a->cuGetErrorName(r, &name);
  if (a->cuGetErrorString) a->cuGetErrorString(r, &text);
  /* CU_CHECK passes the call as written ("a->cuMemAlloc(&p, n)"): keep its name */
  const char *open = strchr(call, '(');
  size_t len = open ? (size_t)(open - call) : strlen(call);
  for (const char *p = call; p < call + len; p++)
    if (*p == '>' || *p == '.') {
      len -= (size_t)(p + 1 - call);
      call = p + 1;
    }
  if (dev && cu_sticky(r)) {
    /* the device is lost: it takes no more jobs, and its queued ones are
     * placed again (dev is a cu_device's name, see cuda_internal.h) */
    cu_device *d = (cu_device *)(uintptr_t)(dev - offsetof(cu_device, name));
    char why[200];
    snprintf(why, sizeof why, "%.*s: %s (%s): a kernel failed; the context is unusable", (int)len, call,
             name ? name : "CUDA_ERROR", text ? text : "unknown error");
    cu_set_lost(d, why);
    return err_set(err, SCHEDRUN_EFAULT, "%s", d->lost_why);
  }
  return err_set(err, r == CUDA_ERROR_OUT_OF_MEMORY ? SCHEDRUN_ENOMEM : SCHEDRUN_EBACKEND, "%s%s%.*s: %s (%s)",
                 dev ? dev : "", dev ? ": " : "", (int)len, call, name ? name : "CUDA_ERROR",
                 text ? text : "unknown error");
}

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
#define X(name, v)                                                                                \
  {                                                                                               \
    void *fn = NULL;                                                                              \
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;                               \
    CUresult r = g2 ? g2(#name, &fn, v, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q)                    \
                    : g1(#name, &fn, v, CU_GET_PROC_ADDRESS_LEGACY_STREAM);                       \
    if (r == CUDA_SUCCESS && fn) memcpy(&a->name, &fn, sizeof fn);                                \
  }
  CU_OPTIONAL_FUNCS(X)
#undef X
  const char *call = "cuInit";
  CUresult r = a->cuInit(0);
  int n = 0;
  if (r == CUDA_SUCCESS) {
    call = "cuDeviceGetCount";
    r = a->cuDeviceGetCount(&n);
  }
  if (r != CUDA_SUCCESS || n == 0) {
    int rc = r != CUDA_SUCCESS ? cu_fail(a, err, r, call, NULL)
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

int cu_use(cuda_backend *b, int dev, schedrun_error_t *err) {
  if (dev < 0 || dev >= b->ndevices) return err_set(err, SCHEDRUN_EINVAL, "no cuda device %d", dev);
  if (atomic_load(&b->devs[dev].stuck)) return err_set(err, SCHEDRUN_ELOST, "%s", b->devs[dev].lost_why);
  CU_CHECK(&b->api, b->api.cuCtxSetCurrent(b->devs[dev].ctx), b->devs[dev].name, err);
  return SCHEDRUN_OK;
}

/* An application's context is its own, current or not (cuda_internal.h);
 * the execute actors' threads are the backend's, and keep theirs. */
int cu_found(cuda_backend *b, CUcontext *found, schedrun_error_t *err) {
  *found = NULL;
  CU_CHECK(&b->api, b->api.cuCtxGetCurrent(found), NULL, err);
  return SCHEDRUN_OK;
}

void cu_put_back(cuda_backend *b, CUcontext found) { b->api.cuCtxSetCurrent(found); }

int cu_any(const cuda_backend *b) {
  for (int i = 0; i < b->ndevices; i++)
    if (!atomic_load(&b->devs[i].stuck)) return i;
  return -1;
}

static void c_destroy(gpu_backend *g) {
  cuda_backend *b = cb(g);
  CUcontext found = NULL;
  bool keep = cu_found(b, &found, NULL) == SCHEDRUN_OK;
  for (int i = 0; i < b->ndevices; i++) {
    if (atomic_load(&b->devs[i].stuck)) continue; /* left to the process's end (cuda_internal.h) */
    if (b->devs[i].ctx && b->api.cuCtxSetCurrent(b->devs[i].ctx) == CUDA_SUCCESS) {
      cu_own_release(b, &b->devs[i]);
      cu_batch_release(b, &b->devs[i]);
    }
    if (b->devs[i].stream) {
      b->api.cuCtxSetCurrent(b->devs[i].ctx);
      b->api.cuStreamDestroy(b->devs[i].stream);
    }
    if (b->devs[i].ctx) b->api.cuDevicePrimaryCtxRelease(b->devs[i].dev);
  }
  if (keep) cu_put_back(b, found);
  free(b->devs);
  free(b->peer);
  pthread_mutex_destroy(&b->peer_lock);
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
static const char *c_compile_arch(const gpu_backend *g) { return cb(g)->compile_arch; }

static int c_module_load(gpu_backend *g, int dev, const void *image, size_t len, gpu_module **out,
                         schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  if (arch_bundle_is(image, len)) {
    /* one image per architecture: this device's */
    char have[ARCH_BUNDLE_MAX * (ARCH_BUNDLE_NAME_MAX + 1) + 1];
    const uint8_t *mine;
    int pr = arch_bundle_pick(image, len, b->devs[dev].arch, &mine, &len, have, sizeof have);
    if (pr < 0)
      return err_set(err, SCHEDRUN_EBACKEND, "%s: the kernel's artifact of several architectures is malformed",
                     b->devs[dev].name);
    if (pr > 0)
      return err_set(err, SCHEDRUN_EBACKEND, "%s: the kernel was compiled for %s, not for this device's %s",
                     b->devs[dev].name, have, b->devs[dev].arch);
    image = mine;
  }
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  gpu_module *m = calloc(1, sizeof *m);
  if (!m) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  CUresult r = b->api.cuModuleLoadData(&m->mod, image);
  if (r != CUDA_SUCCESS) {
    free(m);
    int rc2 = cu_fail(&b->api, err, r, "cuModuleLoadData", b->devs[dev].name);
    if (err && err->message && r == CUDA_ERROR_NO_BINARY_FOR_GPU) {
      char *was = err->message;
      err->message = NULL;
      err_set(err, rc2, "%s; the kernels were compiled for %s, the device is %s", was, b->compile_arch,
              b->devs[dev].arch);
      free(was);
    } else if (err && err->message &&
               (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX)) {
      /* the usual cause: NVRTC newer than the driver */
      char *was = err->message;
      err->message = NULL;
      err_set(err, rc2,
              "%s; the driver is CUDA %d.%d, and code from a newer NVRTC needs a newer driver (set "
              "SCHEDRUN_NVRTC_LIBRARY to an NVRTC no newer than the driver)",
              was, b->driver_version / 1000, b->driver_version % 1000 / 10);
      free(was);
    }
    return rc2;
  }
  m->owner = g;
  m->dev = dev;
  *out = m;
  return SCHEDRUN_OK;
}

static void c_module_unload(gpu_backend *g, gpu_module *m) {
  cuda_backend *b = cb(g);
  if (!m) return;
  if (cu_use(b, m->dev, NULL) == SCHEDRUN_OK) b->api.cuModuleUnload(m->mod);
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
  int rc = cu_use(b, dev, err);
  if (rc) return rc;
  cu_device *d = &b->devs[dev];
  if (n->kind != GN_LAUNCH) return err_set(err, SCHEDRUN_EINVAL, "%s: only launches run on their own", d->name);
  void *params[64];
  if (n->u.launch.nargs > 64) return err_set(err, SCHEDRUN_EINVAL, "%s: more than 64 kernel arguments", d->name);
  cuda_marshal_args(n->u.launch.args, n->u.launch.nargs, params);
  CU_CHECK(&b->api,
           b->api.cuLaunchKernel((CUfunction)n->u.launch.fn, n->u.launch.grid[0], n->u.launch.grid[1],
                                 n->u.launch.grid[2], n->u.launch.block[0], n->u.launch.block[1], n->u.launch.block[2],
                                 n->u.launch.shared, d->stream, params, NULL),
           d->name, err);
  return wait ? cu_wait_stream(b, d, 0, NULL, err) : SCHEDRUN_OK;
}

/* ---- waiting and losing devices ---- */

int cu_launch_begin(cu_device *d, gpu_failure *f, schedrun_error_t *err) {
  f->tag = GPU_NO_TAG;
  f->lost = false;
  if (!atomic_load(&d->lost)) return SCHEDRUN_OK;
  f->lost = true;
  return err_set(err, SCHEDRUN_ELOST, "%s is lost: %s", d->name, d->lost_why);
}

void cu_set_lost(cu_device *d, const char *why) {
  pthread_mutex_lock(&d->lost_lock);
  if (!atomic_load(&d->lost)) {
    snprintf(d->lost_why, sizeof d->lost_why, "%s: %s", d->name, why);
    atomic_store(&d->lost, true);
  }
  pthread_mutex_unlock(&d->lost_lock);
}

int cu_wait_stream(cuda_backend *b, cu_device *d, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  return cu_wait_event(b, d, NULL, deadline_ns, f, err);
}

int cu_wait_event(cuda_backend *b, cu_device *d, CUevent ev, uint64_t deadline_ns, gpu_failure *f,
                  schedrun_error_t *err) {
  cu_api *a = &b->api;
  const char *call = ev ? "cuEventQuery" : "cuStreamQuery";
  gpu_failure ignored;
  if (!f) f = &ignored;
  uint64_t start = now_ns(), look = start, grace_until = 0;
  bool spin = b->spin_ns && spin_gauge_may_spin(&spin_gauge_process, start);
  for (;;) {
    CUresult r = ev ? a->cuEventQuery(ev) : a->cuStreamQuery(d->stream);
    if (r == CUDA_SUCCESS && grace_until) {
      /* past the deadline, but the work ended within the grace: the device goes on */
      f->lost = false;
      return atomic_load(&b->abandoned) ? err_set(err, SCHEDRUN_ELOST, "%s: abandoned when the scheduler closed", d->name)
                                        : err_set(err, SCHEDRUN_ETIMEOUT, "%s: the job ran past its deadline", d->name);
    }
    if (r == CUDA_SUCCESS) return SCHEDRUN_OK;
    if (r != CUDA_ERROR_NOT_READY) {
      /* errors from a kernel (an illegal address, a trap) are sticky: the
       * context is unusable from now on */
      const char *name = NULL, *text = NULL;
      a->cuGetErrorName(r, &name);
      a->cuGetErrorString(r, &text);
      char why[200];
      snprintf(why, sizeof why, "%s: %s (%s): a kernel failed; the context is unusable", call,
               name ? name : "CUDA_ERROR", text ? text : "unknown error");
      cu_set_lost(d, why);
      f->lost = true;
      return err_set(err, SCHEDRUN_EFAULT, "%s", d->lost_why);
    }
    uint64_t now = now_ns();
    bool over = atomic_load(&b->abandoned) || (deadline_ns && now >= deadline_ns);
    if (over && !grace_until) grace_until = now + CU_GRACE_NS;
    if (over && now >= grace_until) {
      atomic_store(&d->stuck, true); /* its work may never end: its context is left alone */
      cu_set_lost(d, atomic_load(&b->abandoned) ? "abandoned while busy when the scheduler closed"
                                             : "a job ran past its deadline");
      f->lost = true;
      return err_set(err, atomic_load(&b->abandoned) ? SCHEDRUN_ELOST : SCHEDRUN_ETIMEOUT,
                     "%s: the job ran past its deadline (the device is lost)", d->name);
    }
    uint64_t nap = cuda_wait_nap(b->spin_ns, spin, now - start);
    if (nap == 0) {
      /* a short kernel: noticed within a look, at the cost of a core while it lasts */
      look = now;
      spin = spin_gauge_yield(&spin_gauge_process, &look, now_ns);
      continue;
    }
    struct timespec ts = {0, (long)nap};
    nanosleep(&ts, NULL);
  }
}

uint64_t cuda_wait_nap(uint64_t spin_ns, bool may_spin, uint64_t waited_ns) {
  if (may_spin && waited_ns < spin_ns) return 0;
  /* a long kernel: a few wake-ups per millisecond at most */
  uint64_t nap = waited_ns / 8;
  return nap < 2000 ? 2000 : nap > 1000000 ? 1000000 : nap;
}

static const char *c_device_lost(const gpu_backend *g, int dev) {
  const cu_device *d = &cb(g)->devs[dev];
  return atomic_load(&((cu_device *)d)->lost) ? d->lost_why : NULL;
}

static void c_counters(const gpu_backend *g, int dev, gpu_counters *out) {
  cu_device *d = &cb(g)->devs[dev];
  out->launches = atomic_load(&d->launches);
  out->host_trips = atomic_load(&d->host_trips);
  out->beside = atomic_load(&d->beside);
  int loops = atomic_load(&d->loops);
  out->loops = loops == LOOPS_CONDITIONAL ? "in the graph (conditional WHILE nodes)"
               : loops == LOOPS_HOST      ? d->loops_why
                                             : "";
}

static void c_abandon(gpu_backend *g) { atomic_store(&cb(g)->abandoned, true); }

static const gpu_ops cuda_ops = {
    .name = "cuda",
    .any_thread = false, /* cu_use makes the device's context current on the calling thread */
    .destroy = c_destroy,
    .device_count = c_device_count,
    .device_name = c_device_name,
    .target = c_target,
    .arch = c_arch,
    .compile_arch = c_compile_arch,
    .mem_alloc = cu_mem_alloc,
    .mem_room = cu_mem_room,
    .mem_free = cu_mem_free,
    .mem_zero = cu_mem_zero,
    .copy_htod = cu_copy_htod,
    .copy_dtoh = cu_copy_dtoh,
    .copy_dtod = cu_copy_dtod,
    .copy_peer = cu_copy_peer,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .host_address = cu_host_address,
    .mem_reach = cu_mem_reach,
    .module_load = c_module_load,
    .module_unload = c_module_unload,
    .module_function = c_module_function,
    .launch = c_launch,
    .seq_create = cu_seq_create,
    .seq_add = cu_seq_add,
    .seq_update = cu_seq_update,
    .seq_finalize = cu_seq_finalize,
    .seq_launch = cu_seq_launch,
    .seq_launch_timed = cu_seq_launch_timed,
    .seq_destroy = cu_seq_destroy,
    .run_batch = cu_run_batch,
    .batch_begin = cu_batch_begin,
    .batch_finish = cu_batch_finish,
    .device_lost = c_device_lost,
    .abandon = c_abandon,
    .counters = c_counters,
};

int gpu_cuda_open(const int *which, int nwhich, uint64_t spin_ns, gpu_backend **out, schedrun_error_t *err) {
  *out = NULL;
  cu_api_handle h;
  int count;
  int rc = cuda_api_load(&h, &count, err);
  if (rc) return rc;
  cuda_backend *b = calloc(1, sizeof *b);
  int n = nwhich > 0 ? nwhich : count;
  if (b) b->devs = calloc((size_t)n, sizeof *b->devs);
  if (b) b->peer = calloc((size_t)n * (size_t)n + 1, 1);
  if (!b || !b->devs || !b->peer) {
    if (b) free(b->devs), free(b->peer), free(b);
    cuda_api_unload(h);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  b->base.ops = &cuda_ops;
  b->spin_ns = spin_ns;
  pthread_mutex_init(&b->peer_lock, NULL);
  b->api = *(cu_api *)h;
  free(h); /* the table is copied; the library handle now belongs to b */
  CUresult vr = b->api.cuDriverGetVersion(&b->driver_version);
  if (vr != CUDA_SUCCESS) rc = cu_fail(&b->api, err, vr, "cuDriverGetVersion", NULL);
  /* code from an NVRTC of a newer major version needs a driver of that
   * version: said here, once, not at every job's module load */
  int nv_major = 0, nv_minor = 0;
  if (rc == SCHEDRUN_OK && nvrtc_version_here(&nv_major, &nv_minor) == SCHEDRUN_OK &&
      nv_major > b->driver_version / 1000)
    rc = err_set(err, SCHEDRUN_EBACKEND,
                 "NVRTC %d.%d is newer than the driver (CUDA %d.%d): what it compiles needs a CUDA %d driver; set "
                 "SCHEDRUN_NVRTC_LIBRARY to an NVRTC %d.x, or update the driver",
                 nv_major, nv_minor, b->driver_version / 1000, b->driver_version % 1000 / 10, nv_major,
                 b->driver_version / 1000);
  CUcontext found = NULL; /* the caller's, put back at the end */
  bool keep = rc == SCHEDRUN_OK && (rc = cu_found(b, &found, err)) == SCHEDRUN_OK;
  for (int i = 0; rc == SCHEDRUN_OK && i < n; i++) {
    int ord = nwhich > 0 ? which[i] : i;
    cu_device *d = &b->devs[i];
    pthread_mutex_init(&d->lost_lock, NULL);
    snprintf(d->name, sizeof d->name, "cuda:%d", ord);
    if (ord < 0 || ord >= count) {
      rc = err_set(err, SCHEDRUN_EINVAL, "devices: there is no cuda:%d (the driver sees %d)", ord, count);
      break;
    }
    const char *call = "cuDeviceGet";
    CUresult r = b->api.cuDeviceGet(&d->dev, ord);
    int major = 0, minor = 0;
    if (r == CUDA_SUCCESS && (call = "cuDeviceGetAttribute"))
      r = b->api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
    if (r == CUDA_SUCCESS) r = b->api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
    if (r == CUDA_SUCCESS && (call = "cuDevicePrimaryCtxRetain")) r = b->api.cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
    if (r == CUDA_SUCCESS && (call = "cuCtxSetCurrent")) r = b->api.cuCtxSetCurrent(d->ctx);
    /* a blocking stream: ordered after the legacy-stream copies and memsets */
    if (r == CUDA_SUCCESS && (call = "cuStreamCreate")) r = b->api.cuStreamCreate(&d->stream, CU_STREAM_DEFAULT);
    if (r != CUDA_SUCCESS) {
      rc = cu_fail(&b->api, err, r, call, d->name);
      /* not counted yet, so destroy would not give this one back */
      if (d->stream) b->api.cuStreamDestroy(d->stream);
      if (d->ctx) b->api.cuDevicePrimaryCtxRelease(d->dev);
      d->stream = NULL;
      d->ctx = NULL;
      break;
    }
    snprintf(d->arch, sizeof d->arch, "sm_%d%d", major, minor);
    d->sm = major * 10 + minor;
    b->ndevices = i + 1;
  }
  if (keep) cu_put_back(b, found);
  if (rc) {
    c_destroy(&b->base);
    return rc;
  }
  /* every architecture present, oldest first, each once: "sm_80+sm_90" */
  size_t at = 0;
  for (int last = 0, narch = 0;; narch++) {
    int next = INT_MAX;
    for (int i = 0; i < b->ndevices; i++)
      if (b->devs[i].sm > last && b->devs[i].sm < next) next = b->devs[i].sm;
    if (next == INT_MAX) break;
    if (narch == ARCH_BUNDLE_MAX || next > 9999) {
      c_destroy(&b->base);
      return err_set(err, SCHEDRUN_EBACKEND, "the devices are of more than %d architectures", ARCH_BUNDLE_MAX);
    }
    /* 16 names of at most "+sm_9999" fit */
    assert(at + 9 <= sizeof b->compile_arch);
    at += (size_t)snprintf(b->compile_arch + at, sizeof b->compile_arch - at, "%ssm_%d", at ? "+" : "", next);
    last = next;
  }
  *out = &b->base;
  return SCHEDRUN_OK;
}
