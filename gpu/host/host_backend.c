/*
 * The host backend: runs CUDA C kernels on the CPU.
 *
 * A device is a name; device memory is ordinary aligned memory whose address
 * is the device address. Modules are shared objects built by host_compile.c;
 * each exports one trampoline per kernel that runs the whole grid as loops
 * over blocks and threads. A sequence is an array of prepared nodes with the
 * launch arguments packed in one array beside them, so replay is a loop over
 * nodes and an indirect call per launch, with nothing to allocate or look up.
 */
#include <dlfcn.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"

#define HOST_ALIGN 256

typedef void (*host_tramp)(const uint32_t *grid, const uint32_t *block, const uint64_t *args);

typedef struct host_backend {
  gpu_backend base;
  int ndevices;
  char (*names)[16];
} host_backend;

struct gpu_module {
  void *dl;
  int fd; /* kept open while loaded: dlopen knows modules by path name, and a
             reused descriptor number would name another module */
};

/* One node: 64 bytes plus its argument slots in the sequence's arg array. */
typedef struct host_node {
  uint8_t kind;
  uint32_t nargs;
  uint32_t arg0; /* first slot in seq->args */
  union {
    struct {
      host_tramp fn;
      uint32_t grid[3], block[3];
    } launch;
    struct {
      uint64_t dst, src, bytes;
    } copy;
    struct {
      uint64_t dst, count, pattern;
      uint32_t elem_size;
    } fill;
    struct {
      uint64_t flag;
      uint32_t max_trips;
      gpu_seq *body;
    } loop;
  } u;
} host_node;

struct gpu_seq {
  host_backend *b;
  int dev;
  host_node *nodes;
  uint32_t n, cap;
  uint64_t *args;
  uint32_t nargs, args_cap;
};

static host_backend *hb(const gpu_backend *b) { return (host_backend *)b; }

static void h_destroy(gpu_backend *b) {
  free(hb(b)->names);
  free(b);
}

static int h_device_count(const gpu_backend *b) { return hb(b)->ndevices; }

static const char *h_device_name(const gpu_backend *b, int dev) {
  return dev >= 0 && dev < hb(b)->ndevices ? hb(b)->names[dev] : NULL;
}

static const char *h_target(const gpu_backend *b, int dev) {
  (void)b;
  (void)dev;
  return "host";
}

static const char *h_arch(const gpu_backend *b, int dev) {
  (void)b;
  (void)dev;
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "cpu";
#endif
}

static int h_mem_alloc(gpu_backend *b, int dev, uint64_t bytes, uint64_t *addr,
                       schedrun_error_t *err) {
  (void)b;
  uint64_t rounded = (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
  void *p = rounded ? aligned_alloc(HOST_ALIGN, rounded) : NULL;
  if (!p)
    return err_set(err, SCHEDRUN_ENOMEM, "host:%d: cannot allocate %llu bytes", dev,
                   (unsigned long long)bytes);
  *addr = (uint64_t)(uintptr_t)p;
  return SCHEDRUN_OK;
}

static void h_mem_free(gpu_backend *b, int dev, uint64_t addr) {
  (void)b;
  (void)dev;
  free((void *)(uintptr_t)addr);
}

static int h_mem_zero(gpu_backend *b, int dev, uint64_t addr, uint64_t n, schedrun_error_t *err) {
  (void)b;
  (void)dev;
  (void)err;
  if (n) memset((void *)(uintptr_t)addr, 0, n);
  return SCHEDRUN_OK;
}

static int h_copy_htod(gpu_backend *b, int dev, uint64_t dst, const void *src, uint64_t n,
                       schedrun_error_t *err) {
  (void)b;
  (void)dev;
  (void)err;
  if (n) memcpy((void *)(uintptr_t)dst, src, n);
  return SCHEDRUN_OK;
}

static int h_copy_dtoh(gpu_backend *b, int dev, void *dst, uint64_t src, uint64_t n,
                       schedrun_error_t *err) {
  (void)b;
  (void)dev;
  (void)err;
  if (n) memcpy(dst, (const void *)(uintptr_t)src, n);
  return SCHEDRUN_OK;
}

/* The image is a shared object in memory: dlopen needs a file, so it goes
 * into an anonymous memory file, opened through /proc/self/fd. */
static int h_module_load(gpu_backend *b, int dev, const void *image, size_t len, gpu_module **out,
                         schedrun_error_t *err) {
  (void)b;
  *out = NULL;
  gpu_module *m = calloc(1, sizeof *m);
  if (!m) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  int fd = memfd_create("schedrun-module", MFD_CLOEXEC);
  if (fd < 0) {
    free(m);
    return err_set(err, SCHEDRUN_EBACKEND, "host:%d: memfd_create: %s", dev, strerror(errno));
  }
  const char *p = image;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      close(fd);
      free(m);
      return err_set(err, SCHEDRUN_EBACKEND, "host:%d: cannot stage a module: %s", dev, strerror(e));
    }
    p += w;
    left -= (size_t)w;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  m->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  m->fd = fd;
  if (!m->dl) {
    const char *why = dlerror();
    close(fd);
    free(m);
    return err_set(err, SCHEDRUN_EBACKEND, "host:%d: cannot load module: %s", dev, why ? why : "?");
  }
  *out = m;
  return SCHEDRUN_OK;
}

static void h_module_unload(gpu_backend *b, gpu_module *m) {
  (void)b;
  if (!m) return;
  dlclose(m->dl);
  close(m->fd);
  free(m);
}

static int h_module_function(gpu_backend *b, gpu_module *m, const char *entry, gpu_function *out,
                             schedrun_error_t *err) {
  (void)b;
  char sym[256];
  snprintf(sym, sizeof sym, "__sched_launch_%s", entry);
  void *f = dlsym(m->dl, sym);
  if (!f) return err_set(err, SCHEDRUN_EBACKEND, "module has no kernel entry '%s'", entry);
  *out = f;
  return SCHEDRUN_OK;
}

static int h_seq_create(gpu_backend *b, int dev, gpu_seq **out, schedrun_error_t *err) {
  gpu_seq *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  s->b = hb(b);
  s->dev = dev;
  *out = s;
  return SCHEDRUN_OK;
}

static void h_seq_destroy(gpu_seq *s);

static int set_node(gpu_seq *s, host_node *hn, const gpu_node *n, bool fresh, schedrun_error_t *err) {
  switch (n->kind) {
  case GN_LAUNCH:
    if (fresh) {
      if (s->nargs + n->u.launch.nargs > s->args_cap) {
        uint32_t cap = s->args_cap ? s->args_cap : 16;
        while (cap < s->nargs + n->u.launch.nargs) cap *= 2;
        uint64_t *a = realloc(s->args, cap * sizeof *a);
        if (!a) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
        s->args = a;
        s->args_cap = cap;
      }
      hn->arg0 = s->nargs;
      hn->nargs = n->u.launch.nargs;
      s->nargs += n->u.launch.nargs;
    } else if (hn->nargs != n->u.launch.nargs) {
      return err_set(err, SCHEDRUN_EINTERNAL, "update changes a launch's argument count");
    }
    hn->u.launch.fn = (host_tramp)n->u.launch.fn;
    memcpy(hn->u.launch.grid, n->u.launch.grid, sizeof hn->u.launch.grid);
    memcpy(hn->u.launch.block, n->u.launch.block, sizeof hn->u.launch.block);
    if (hn->nargs) memcpy(s->args + hn->arg0, n->u.launch.args, hn->nargs * sizeof(uint64_t));
    break;
  case GN_COPY:
    hn->u.copy.dst = n->u.copy.dst;
    hn->u.copy.src = n->u.copy.src;
    hn->u.copy.bytes = n->u.copy.bytes;
    break;
  case GN_FILL:
    if (n->u.fill.elem_size != 1 && n->u.fill.elem_size != 4 && n->u.fill.elem_size != 8)
      return err_set(err, SCHEDRUN_EINTERNAL, "fill element size %u", n->u.fill.elem_size);
    hn->u.fill.dst = n->u.fill.dst;
    hn->u.fill.count = n->u.fill.count;
    hn->u.fill.pattern = n->u.fill.pattern;
    hn->u.fill.elem_size = n->u.fill.elem_size;
    break;
  case GN_WHILE:
    hn->u.loop.flag = n->u.loop.flag;
    hn->u.loop.max_trips = n->u.loop.max_trips;
    if (fresh) {
      int rc = h_seq_create(&s->b->base, s->dev, &hn->u.loop.body, err);
      if (rc) return rc;
    }
    break;
  default:
    return err_set(err, SCHEDRUN_EINTERNAL, "unknown node kind %d", (int)n->kind);
  }
  hn->kind = (uint8_t)n->kind;
  return SCHEDRUN_OK;
}

static int h_seq_add(gpu_seq *s, gpu_node *n, uint32_t *index, schedrun_error_t *err) {
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 16;
    host_node *p = realloc(s->nodes, cap * sizeof *p);
    if (!p) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    s->nodes = p;
    s->cap = cap;
  }
  host_node *hn = &s->nodes[s->n];
  memset(hn, 0, sizeof *hn);
  int rc = set_node(s, hn, n, true, err);
  if (rc) return rc;
  if (n->kind == GN_WHILE) n->u.loop.body = hn->u.loop.body;
  *index = s->n++;
  return SCHEDRUN_OK;
}

static int h_seq_update(gpu_seq *s, uint32_t index, const gpu_node *n, schedrun_error_t *err) {
  if (index >= s->n || s->nodes[index].kind != n->kind)
    return err_set(err, SCHEDRUN_EINTERNAL, "update of node %u does not match the sequence", index);
  return set_node(s, &s->nodes[index], n, false, err);
}

static void run_fill(const host_node *n) {
  uint64_t c = n->u.fill.count;
  switch (n->u.fill.elem_size) {
  case 1: memset((void *)(uintptr_t)n->u.fill.dst, (int)(n->u.fill.pattern & 0xff), c); break;
  case 4: {
    uint32_t v = (uint32_t)n->u.fill.pattern, *d = (uint32_t *)(uintptr_t)n->u.fill.dst;
    for (uint64_t i = 0; i < c; i++) d[i] = v;
    break;
  }
  default: {
    uint64_t v = n->u.fill.pattern, *d = (uint64_t *)(uintptr_t)n->u.fill.dst;
    for (uint64_t i = 0; i < c; i++) d[i] = v;
  }
  }
}

static void run_seq(const gpu_seq *s) {
  const host_node *n = s->nodes, *end = s->nodes + s->n;
  const uint64_t *args = s->args;
  for (; n < end; n++) {
    switch (n->kind) {
    case GN_LAUNCH: n->u.launch.fn(n->u.launch.grid, n->u.launch.block, args + n->arg0); break;
    case GN_COPY:
      memmove((void *)(uintptr_t)n->u.copy.dst, (const void *)(uintptr_t)n->u.copy.src,
              n->u.copy.bytes);
      break;
    case GN_FILL: run_fill(n); break;
    case GN_WHILE: {
      const volatile int32_t *flag = (const int32_t *)(uintptr_t)n->u.loop.flag;
      for (uint32_t t = 0; t < n->u.loop.max_trips && *flag != 0; t++) run_seq(n->u.loop.body);
      break;
    }
    }
  }
}

static int h_seq_finalize(gpu_seq *s, schedrun_error_t *err) {
  (void)err;
  /* give back what doubling reserved: a recording lives long */
  if (s->n && s->n < s->cap) {
    host_node *p = realloc(s->nodes, s->n * sizeof *p);
    if (p) {
      s->nodes = p;
      s->cap = s->n;
    }
  }
  if (s->nargs && s->nargs < s->args_cap) {
    uint64_t *a = realloc(s->args, s->nargs * sizeof *a);
    if (a) {
      s->args = a;
      s->args_cap = s->nargs;
    }
  }
  for (uint32_t i = 0; i < s->n; i++)
    if (s->nodes[i].kind == GN_WHILE) h_seq_finalize(s->nodes[i].u.loop.body, err);
  return SCHEDRUN_OK;
}

static int h_launch(gpu_backend *b, int dev, const gpu_node *n, bool wait, schedrun_error_t *err) {
  (void)b;
  (void)wait; /* the host runs everything before returning */
  switch (n->kind) {
  case GN_LAUNCH:
    ((host_tramp)n->u.launch.fn)(n->u.launch.grid, n->u.launch.block, n->u.launch.args);
    return SCHEDRUN_OK;
  case GN_COPY:
    memmove((void *)(uintptr_t)n->u.copy.dst, (const void *)(uintptr_t)n->u.copy.src, n->u.copy.bytes);
    return SCHEDRUN_OK;
  case GN_FILL: {
    host_node hn = {.kind = GN_FILL};
    hn.u.fill.dst = n->u.fill.dst;
    hn.u.fill.count = n->u.fill.count;
    hn.u.fill.pattern = n->u.fill.pattern;
    hn.u.fill.elem_size = n->u.fill.elem_size;
    run_fill(&hn);
    return SCHEDRUN_OK;
  }
  default:
    return err_set(err, SCHEDRUN_EINVAL, "host:%d: a %s node cannot run on its own", dev, "while");
  }
}

static int h_seq_launch(gpu_seq *s, schedrun_error_t *err) {
  (void)err;
  run_seq(s);
  return SCHEDRUN_OK;
}

static void h_seq_destroy(gpu_seq *s) {
  if (!s) return;
  for (uint32_t i = 0; i < s->n; i++)
    if (s->nodes[i].kind == GN_WHILE) h_seq_destroy(s->nodes[i].u.loop.body);
  free(s->nodes);
  free(s->args);
  free(s);
}

static const gpu_ops host_ops = {
    .name = "host",
    .destroy = h_destroy,
    .device_count = h_device_count,
    .device_name = h_device_name,
    .target = h_target,
    .arch = h_arch,
    .mem_alloc = h_mem_alloc,
    .mem_free = h_mem_free,
    .mem_zero = h_mem_zero,
    .copy_htod = h_copy_htod,
    .copy_dtoh = h_copy_dtoh,
    .module_load = h_module_load,
    .module_unload = h_module_unload,
    .module_function = h_module_function,
    .launch = h_launch,
    .seq_create = h_seq_create,
    .seq_add = h_seq_add,
    .seq_update = h_seq_update,
    .seq_finalize = h_seq_finalize,
    .seq_launch = h_seq_launch,
    .seq_destroy = h_seq_destroy,
};

int gpu_host_open(int ndevices, gpu_backend **out, schedrun_error_t *err) {
  *out = NULL;
  if (ndevices < 1 || ndevices > SCHEDRUN_MAX_DEVICES)
    return err_set(err, SCHEDRUN_EINVAL, "host backend: %d devices (1 to %d)", ndevices,
                   SCHEDRUN_MAX_DEVICES);
  host_backend *b = calloc(1, sizeof *b);
  if (b) b->names = calloc((size_t)ndevices, sizeof *b->names);
  if (!b || !b->names) {
    free(b);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  b->base.ops = &host_ops;
  b->ndevices = ndevices;
  for (int i = 0; i < ndevices; i++) snprintf(b->names[i], sizeof b->names[i], "host:%d", i);
  *out = &b->base;
  return SCHEDRUN_OK;
}
