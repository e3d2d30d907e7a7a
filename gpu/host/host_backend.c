/*
 * The host backend: runs CUDA C kernels on the CPU, each device in a worker
 * process of its own (gpu/host/host_device.c), the way a GPU runs kernels
 * apart from the program that launches them.
 *
 * Why processes: a kernel is user code with raw pointers. On a GPU a wild
 * write, a division by zero or a trap stays on the device: the launch fails,
 * the context is lost, the program lives on. In-process, the same kernel could
 * corrupt the library's heap, kill the process with a signal, or call exit()
 * and make a run look successful. A worker process contains all of that: the
 * library sees the worker end, names the fault and the kernel, and loses the
 * device; other devices keep running. A kernel that never returns is ended
 * the same way, when its job's deadline passes.
 *
 * Device memory is the device's arena, mapped by both processes, so buffers
 * are read and written by the library directly, with no copy through the
 * worker. Buffers lie in the arena's buffer zone, in whole pages each with a
 * guard page after it, open to the worker only while they live: a kernel
 * that writes past a buffer's pages or into free memory faults. Modules are shared objects built by host_compile.c, loaded by the
 * worker; each exports one launcher per kernel that runs the grid as loops
 * over blocks and threads. A sequence is an array of prepared 48-byte nodes
 * with the launch arguments in one array beside them, both in the arena:
 * built and updated in place by the library, replayed by the worker as a loop
 * over nodes with one indirect call per launch.
 */
#define _GNU_SOURCE 1
#include <assert.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/host/host_device.h"
#include "gpu/host/host_shared.h"

#define MODULE_TIMEOUT_NS (60ull * 1000000000ull)

typedef struct host_backend {
  gpu_backend base;
  int ndevices;
  host_device *devs;
  host_shared shared; /* schedrun_host_alloc's memory */
} host_backend;

struct gpu_module {
  gpu_backend *owner; /* first, as in every backend (gpu_owner) */
  host_device *d;
  uint64_t handle; /* the worker's */
};

struct gpu_seq {
  gpu_backend *owner; /* first, as in every backend (gpu_owner) */
  host_backend *b;
  int dev;
  uint64_t hdr;        /* device address of its hw_seq */
  uint64_t nodes_addr; /* hw_node[cap], 0 while empty */
  uint64_t args_addr;  /* uint64_t[args_cap], 0 while empty */
  uint32_t n, cap, nargs, args_cap;
  gpu_seq **bodies; /* the while loops' bodies, owned */
  uint32_t nbodies, bodies_cap;
};

static host_backend *hb(const gpu_backend *b) { return (host_backend *)b; }
static host_device *dev_of(const gpu_backend *b, int dev) { return &hb(b)->devs[dev]; }

static void h_destroy(gpu_backend *b) {
  for (int i = 0; i < hb(b)->ndevices; i++) host_device_stop(&hb(b)->devs[i]);
  host_shared_close(&hb(b)->shared); /* after the workers, which map it */
  free(hb(b)->devs);
  free(b);
}

static int h_device_count(const gpu_backend *b) { return hb(b)->ndevices; }

static const char *h_device_name(const gpu_backend *b, int dev) {
  return dev >= 0 && dev < hb(b)->ndevices ? hb(b)->devs[dev].name : NULL;
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

static int h_mem_room(gpu_backend *b, int dev, uint64_t *free_bytes, uint64_t *total, schedrun_error_t *err) {
  (void)err;
  host_device_room(dev_of(b, dev), free_bytes, total);
  return SCHEDRUN_OK;
}

/* Allocations this large first check that the machine has the memory: the
 * arena's pages are only taken when touched, too late to refuse. */
#define ROOM_CHECK_BYTES (64ull << 20)

static int h_mem_alloc(gpu_backend *b, int dev, uint64_t bytes, uint64_t *addr, schedrun_error_t *err) {
  host_device *d = dev_of(b, dev);
  uint64_t room, total;
  if (bytes >= ROOM_CHECK_BYTES && h_mem_room(b, dev, &room, &total, err) == SCHEDRUN_OK && bytes > room)
    return err_set(err, SCHEDRUN_ENOMEM, "%s: cannot allocate %llu bytes (%.1f GiB): it can hold %llu more (%.1f GiB, of %.1f GiB)",
                   d->name, (unsigned long long)bytes, bytes / 1073741824.0, (unsigned long long)room,
                   room / 1073741824.0, total / 1073741824.0);
  if (host_buf_alloc(d, bytes, addr))
    return err_set(err, SCHEDRUN_ENOMEM, "%s: cannot allocate %llu bytes (%llu of %llu bytes of buffer memory in use)",
                   d->name, (unsigned long long)bytes, (unsigned long long)d->bufs.in_use,
                   (unsigned long long)(d->size - d->zone));
  return SCHEDRUN_OK;
}

static void h_mem_free(gpu_backend *b, int dev, uint64_t addr) { host_dev_free(dev_of(b, dev), addr); }

static int h_mem_zero(gpu_backend *b, int dev, uint64_t addr, uint64_t n, schedrun_error_t *err) {
  (void)err;
  if (n) host_dev_zero(dev_of(b, dev), addr, n);
  return SCHEDRUN_OK;
}

static int h_copy_htod(gpu_backend *b, int dev, uint64_t dst, const void *src, uint64_t n, schedrun_error_t *err) {
  (void)err;
  if (n) host_dev_write(dev_of(b, dev), dst, src, n);
  return SCHEDRUN_OK;
}

static int h_copy_dtoh(gpu_backend *b, int dev, void *dst, uint64_t src, uint64_t n, schedrun_error_t *err) {
  (void)err;
  if (n) host_dev_read(dev_of(b, dev), dst, src, n);
  return SCHEDRUN_OK;
}

static int h_copy_dtod(gpu_backend *b, int dev, uint64_t dst, uint64_t src, uint64_t n, schedrun_error_t *err) {
  (void)err;
  host_device *d = dev_of(b, dev);
  if (n) memmove(host_dev_range(d, dst, n), host_dev_range(d, src, n), n);
  return SCHEDRUN_OK;
}

/* Both arenas are mapped here: one copy from one to the other. */
static int h_copy_peer(gpu_backend *b, int dst_dev, uint64_t dst, int src_dev, uint64_t src, uint64_t n, bool *peer,
                       schedrun_error_t *err) {
  (void)err;
  if (n) memcpy(host_dev_range(dev_of(b, dst_dev), dst, n), host_dev_range(dev_of(b, src_dev), src, n), n);
  *peer = true;
  return SCHEDRUN_OK;
}

/* ---- the caller's memory, in place (host_shared.h) ---- */

static int h_host_alloc(gpu_backend *b, uint64_t bytes, void **data, schedrun_error_t *err) {
  return host_shared_alloc(&hb(b)->shared, bytes, data, err);
}

static void h_host_free(gpu_backend *b, void *data) {
  bool ok = host_shared_free(&hb(b)->shared, data);
  assert(ok); /* the library frees only what it allocated here */
  (void)ok;
}

static int h_mem_bind(gpu_backend *b, int dev, uint64_t addr, const void *host, uint64_t bytes, bool viewed,
                      bool *inplace, schedrun_error_t *err) {
  host_device *d = dev_of(b, dev);
  uint64_t offset, len = (bytes + d->page - 1) / d->page * d->page;
  *inplace = false;
  if (!bytes || !host_shared_find(&hb(b)->shared, host, bytes, &offset)) return SCHEDRUN_OK;
  int rc = host_device_bind(d, addr, len, hb(b)->shared.fd, offset, viewed, err);
  *inplace = rc == SCHEDRUN_OK;
  return rc;
}

static int h_mem_unbind(gpu_backend *b, int dev, uint64_t addr, uint64_t bytes, bool viewed, schedrun_error_t *err) {
  host_device *d = dev_of(b, dev);
  return host_device_unbind(d, addr, (bytes + d->page - 1) / d->page * d->page, viewed, err);
}

/* ---- modules, loaded by the worker ---- */

static int h_module_load(gpu_backend *b, int dev, const void *image, size_t len, gpu_module **out,
                         schedrun_error_t *err) {
  *out = NULL;
  host_device *d = dev_of(b, dev);
  gpu_module *m = calloc(1, sizeof *m);
  uint64_t staged = 0;
  if (!m || host_dev_alloc(d, len, &staged)) {
    free(m);
    return err_set(err, SCHEDRUN_ENOMEM, "%s: no room to stage a module of %zu bytes", d->name, len);
  }
  memcpy(host_device_ptr(d, staged), image, len);
  gpu_failure f;
  host_device_lock(d);
  d->ctl->a[0] = staged;
  d->ctl->a[1] = len;
  int rc = host_device_request(d, HW_OP_LOAD, now_ns() + MODULE_TIMEOUT_NS, &f, err);
  m->handle = d->ctl->a[0];
  pthread_mutex_unlock(&d->lock);
  host_dev_free(d, staged);
  if (rc) {
    free(m);
    return rc;
  }
  m->owner = b;
  m->d = d;
  *out = m;
  return SCHEDRUN_OK;
}

static void h_module_unload(gpu_backend *b, gpu_module *m) {
  (void)b;
  if (!m) return;
  host_device *d = m->d;
  gpu_failure f;
  host_device_lock(d);
  d->ctl->a[0] = m->handle;
  /* a lost device has no worker to ask; its modules went with it */
  if (!atomic_load(&d->lost)) host_device_request(d, HW_OP_UNLOAD, now_ns() + MODULE_TIMEOUT_NS, &f, NULL);
  pthread_mutex_unlock(&d->lock);
  free(m);
}

static int h_module_function(gpu_backend *b, gpu_module *m, const char *entry, gpu_function *out,
                             schedrun_error_t *err) {
  (void)b;
  host_device *d = m->d;
  gpu_failure f;
  host_device_lock(d);
  d->ctl->a[0] = m->handle;
  snprintf(d->ctl->text, HW_TEXT, "__sched_launch_%s", entry);
  int rc = host_device_request(d, HW_OP_SYM, now_ns() + MODULE_TIMEOUT_NS, &f, NULL);
  *out = (gpu_function)(uintptr_t)d->ctl->a[0];
  pthread_mutex_unlock(&d->lock);
  if (rc == SCHEDRUN_EBACKEND) return err_set(err, SCHEDRUN_EBACKEND, "module has no kernel entry '%s'", entry);
  if (rc) return err_set(err, rc, "%s: cannot look up kernel entry '%s'", d->name, entry);
  return SCHEDRUN_OK;
}

/* ---- sequences, in the arena ---- */

static int h_seq_create(gpu_backend *b, int dev, gpu_seq **out, schedrun_error_t *err) {
  *out = NULL;
  host_device *d = dev_of(b, dev);
  gpu_seq *s = calloc(1, sizeof *s);
  if (!s || host_dev_alloc(d, sizeof(hw_seq), &s->hdr)) {
    free(s);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  memset(host_device_ptr(d, s->hdr), 0, sizeof(hw_seq));
  s->owner = b;
  s->b = hb(b);
  s->dev = dev;
  *out = s;
  return SCHEDRUN_OK;
}

static void h_seq_destroy(gpu_seq *s);

/* Publishes the arrays' addresses and count to the worker's header. */
static void sync_hdr(gpu_seq *s) {
  host_device *d = &s->b->devs[s->dev];
  hw_seq *h = host_device_ptr(d, s->hdr);
  h->nodes = s->nodes_addr;
  h->args = s->args_addr;
  h->n = s->n;
}

static int set_node(gpu_seq *s, hw_node *hn, gpu_node *n, bool fresh, schedrun_error_t *err) {
  host_device *d = &s->b->devs[s->dev];
  switch (n->kind) {
  case GN_LAUNCH:
    if (fresh) {
      if (s->nargs + n->u.launch.nargs > s->args_cap) {
        uint32_t cap = s->args_cap ? s->args_cap : 16;
        while (cap < s->nargs + n->u.launch.nargs) cap *= 2;
        if (host_dev_realloc(d, &s->args_addr, s->nargs * sizeof(uint64_t), cap * sizeof(uint64_t)))
          return err_set(err, SCHEDRUN_ENOMEM, "%s: out of device memory for a sequence", d->name);
        s->args_cap = cap;
      }
      assert(n->u.launch.nargs <= PROG_MAX_PARAMS); /* hw_node's nargs is 16 bits */
      hn->arg0 = s->nargs;
      hn->nargs = (uint16_t)n->u.launch.nargs;
      s->nargs += n->u.launch.nargs;
    } else if (hn->nargs != n->u.launch.nargs) {
      return err_set(err, SCHEDRUN_EINTERNAL, "update changes a launch's argument count");
    }
    hn->u.launch.fn = (uint64_t)(uintptr_t)n->u.launch.fn;
    hn->shared = n->u.launch.shared;
    memcpy(hn->u.launch.grid, n->u.launch.grid, sizeof hn->u.launch.grid);
    memcpy(hn->u.launch.block, n->u.launch.block, sizeof hn->u.launch.block);
    if (hn->nargs)
      memcpy((uint64_t *)host_device_ptr(d, s->args_addr) + hn->arg0, n->u.launch.args, hn->nargs * sizeof(uint64_t));
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
      if (s->nbodies == s->bodies_cap) {
        uint32_t cap = s->bodies_cap ? 2 * s->bodies_cap : 4;
        gpu_seq **bs = realloc(s->bodies, cap * sizeof *bs);
        if (!bs) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
        s->bodies = bs;
        s->bodies_cap = cap;
      }
      gpu_seq *body = NULL;
      int rc = h_seq_create(&s->b->base, s->dev, &body, err);
      if (rc) return rc;
      s->bodies[s->nbodies++] = body;
      n->u.loop.body = body;
      hn->u.loop.body = body->hdr;
    }
    break;
  default:
    return err_set(err, SCHEDRUN_EINTERNAL, "unknown node kind %d", (int)n->kind);
  }
  hn->kind = (uint8_t)n->kind;
  hn->tag = n->tag;
  return SCHEDRUN_OK;
}

static int h_seq_add(gpu_seq *s, gpu_node *n, uint32_t *index, schedrun_error_t *err) {
  host_device *d = &s->b->devs[s->dev];
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 16;
    if (host_dev_realloc(d, &s->nodes_addr, s->n * sizeof(hw_node), cap * sizeof(hw_node)))
      return err_set(err, SCHEDRUN_ENOMEM, "%s: out of device memory for a sequence", d->name);
    s->cap = cap;
  }
  hw_node *hn = (hw_node *)host_device_ptr(d, s->nodes_addr) + s->n;
  memset(hn, 0, sizeof *hn);
  int rc = set_node(s, hn, n, true, err);
  if (rc) return rc;
  *index = s->n++;
  sync_hdr(s);
  return SCHEDRUN_OK;
}

static int h_seq_update(gpu_seq *s, uint32_t index, const gpu_node *n, schedrun_error_t *err) {
  host_device *d = &s->b->devs[s->dev];
  hw_node *hn = index < s->n ? (hw_node *)host_device_ptr(d, s->nodes_addr) + index : NULL;
  if (!hn || hn->kind != n->kind)
    return err_set(err, SCHEDRUN_EINTERNAL, "update of node %u does not match the sequence", index);
  gpu_node copy = *n; /* set_node writes the body of a fresh while node only */
  return set_node(s, hn, &copy, false, err);
}

static int h_seq_finalize(gpu_seq *s, schedrun_error_t *err) {
  host_device *d = &s->b->devs[s->dev];
  /* give back what doubling reserved: a recording lives long */
  if (s->n && s->n < s->cap && host_dev_realloc(d, &s->nodes_addr, s->n * sizeof(hw_node), s->n * sizeof(hw_node)) == 0)
    s->cap = s->n;
  if (s->nargs && s->nargs < s->args_cap &&
      host_dev_realloc(d, &s->args_addr, s->nargs * sizeof(uint64_t), s->nargs * sizeof(uint64_t)) == 0)
    s->args_cap = s->nargs;
  sync_hdr(s);
  for (uint32_t i = 0; i < s->nbodies; i++) h_seq_finalize(s->bodies[i], err);
  return SCHEDRUN_OK;
}

static int h_launch(gpu_backend *b, int dev, const gpu_node *n, bool wait, schedrun_error_t *err) {
  (void)wait; /* the device runs it before answering */
  host_device *d = dev_of(b, dev);
  if (n->kind == GN_WHILE)
    return err_set(err, SCHEDRUN_EINVAL, "%s: a %s node cannot run on its own", d->name, "while");
  uint32_t nargs = n->kind == GN_LAUNCH ? n->u.launch.nargs : 0;
  uint64_t at;
  if (host_dev_alloc(d, sizeof(hw_node) + nargs * sizeof(uint64_t), &at))
    return err_set(err, SCHEDRUN_ENOMEM, "%s: out of device memory", d->name);
  gpu_seq scratch = {.b = hb(b), .dev = dev, .args_addr = at + sizeof(hw_node), .args_cap = nargs};
  hw_node *hn = host_device_ptr(d, at);
  memset(hn, 0, sizeof *hn);
  gpu_node copy = *n;
  int rc = set_node(&scratch, hn, &copy, true, err);
  gpu_failure f;
  if (rc == SCHEDRUN_OK) {
    hn->arg0 = 0;
    host_device_lock(d);
    d->ctl->a[0] = at;
    d->ctl->a[1] = at + sizeof(hw_node);
    rc = host_device_request(d, HW_OP_RUN_NODE, 0, &f, err);
    pthread_mutex_unlock(&d->lock);
  }
  host_dev_free(d, at);
  return rc;
}

/* s's device, locked, with RUN_SEQ's arguments for s in its control block;
 * times, when not 0, is where the worker writes {tag, start, end} of the
 * first max nodes. */
static host_device *lock_for_seq(gpu_seq *s, uint64_t times, uint32_t max) {
  host_device *d = &s->b->devs[s->dev];
  host_device_lock(d);
  d->ctl->a[0] = s->hdr;
  d->ctl->a[1] = times;
  d->ctl->a[2] = max;
  return d;
}

/* Runs s and waits for it (times and max: lock_for_seq). */
static int run_seq(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, uint64_t times, uint32_t max,
                   schedrun_error_t *err) {
  gpu_failure ignored;
  if (!f) f = &ignored;
  host_device *d = lock_for_seq(s, times, max);
  atomic_fetch_add(&d->launches, 1);
  int rc = host_device_request(d, HW_OP_RUN_SEQ, deadline_ns, f, err);
  pthread_mutex_unlock(&d->lock);
  return rc;
}

static int h_seq_launch(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  return run_seq(s, deadline_ns, f, 0, 0, err);
}

static bool h_seq_post(gpu_seq *s) {
  host_device *d = lock_for_seq(s, 0, 0); /* not timed */
  bool posted = host_device_post(d, HW_OP_RUN_SEQ);
  if (posted) atomic_fetch_add(&d->launches, 1);
  pthread_mutex_unlock(&d->lock);
  return posted;
}

static int h_seq_collect(gpu_seq *s, uint64_t until_ns, gpu_failure *f, schedrun_error_t *err) {
  return host_device_collect(&s->b->devs[s->dev], until_ns, f, err);
}

static int h_device_wake_fds(gpu_backend *b, int dev, int fds[2]) { return host_device_wake_fds(dev_of(b, dev), fds); }
static void h_device_woken(gpu_backend *b, int dev) { host_device_woken(dev_of(b, dev)); }

static int h_seq_launch_timed(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, uint64_t *times, uint32_t max,
                              uint32_t *n, schedrun_error_t *err) {
  host_device *d = &s->b->devs[s->dev];
  *n = 0;
  uint64_t at = 0, bytes = (uint64_t)(max ? max : 1) * 3 * sizeof(uint64_t);
  if (host_dev_alloc(d, bytes, &at)) return run_seq(s, deadline_ns, f, 0, 0, err); /* no room to time it: run it */
  int rc = run_seq(s, deadline_ns, f, at, max, err);
  if (rc == SCHEDRUN_OK) {
    *n = s->n < max ? s->n : max;
    if (*n) memcpy(times, host_dev_range(d, at, (uint64_t)*n * 3 * sizeof(uint64_t)), (size_t)*n * 3 * sizeof(uint64_t));
  }
  host_dev_free(d, at);
  return rc;
}

/* The arena bytes a batch step stages (host bytes in, or read back), 16-byte
 * aligned. */
static uint64_t stage_len(const gpu_batch_op *o) {
  return o->kind == GB_HTOD || o->kind == GB_DTOH ? (o->bytes + 15) & ~15ull : 0;
}

/* A batch as one RUN_STEPS request: host bytes are staged in the arena
 * first (the worker copies them in between the jobs' sequences), what is
 * read back is staged by the worker and copied out after. */
static int h_run_batch(gpu_backend *b, int dev, gpu_batch_op *ops, size_t n, uint64_t deadline_ns, size_t *done,
                       gpu_failure *f, schedrun_error_t *err) {
  host_device *d = dev_of(b, dev);
  *done = 0;
  uint64_t staged = 0;
  for (size_t i = 0; i < n; i++) staged += stage_len(&ops[i]);
  uint64_t at = 0, at_len = 0, steps_bytes = n * sizeof(hw_step);
  if (host_stage_take(d, steps_bytes + staged, &at, &at_len))
    return err_set(err, SCHEDRUN_ENOMEM, "%s: no room to stage a batch of %zu steps (%llu bytes)", d->name, n,
                   (unsigned long long)(steps_bytes + staged));
  assert(at_len >= steps_bytes + staged);
  hw_step *steps = host_dev_range(d, at, steps_bytes);
  uint64_t stage = at + steps_bytes, seqs = 0;
  for (size_t i = 0; i < n; i++) {
    const gpu_batch_op *o = &ops[i];
    hw_step *st = &steps[i];
    switch (o->kind) {
    case GB_HTOD:
      if (o->bytes) memcpy(host_dev_range(d, stage, o->bytes), o->src, o->bytes);
      *st = (hw_step){HW_STEP_COPY, 0, o->addr, stage, o->bytes, 0};
      break;
    case GB_ZERO: *st = (hw_step){HW_STEP_ZERO, 0, o->addr, 0, o->bytes, 0}; break;
    case GB_SEQ:
      assert(o->seq->b == hb(b) && o->seq->dev == dev);
      *st = (hw_step){HW_STEP_SEQ, 0, 0, o->seq->hdr, 0, 0};
      seqs++;
      break;
    case GB_DTOH: *st = (hw_step){HW_STEP_COPY, 0, stage, o->addr, o->bytes, 0}; break;
    case GB_DTOD:
      (void)host_dev_range(d, o->addr, o->bytes); /* both inside the arena */
      (void)host_dev_range(d, o->from, o->bytes);
      *st = (hw_step){HW_STEP_COPY, 0, o->addr, o->from, o->bytes, 0};
      break;
    }
    stage += stage_len(o);
  }
  assert(stage == at + steps_bytes + staged);
  host_device_lock(d);
  d->ctl->a[0] = at;
  d->ctl->a[1] = n;
  d->ctl->a[2] = 0;
  atomic_fetch_add(&d->launches, seqs);
  int rc = host_device_request(d, HW_OP_RUN_STEPS, deadline_ns, f, err);
  uint64_t ran = __atomic_load_n(&d->ctl->a[2], __ATOMIC_RELAXED);
  pthread_mutex_unlock(&d->lock);
  /* the steps that ran: read back what they staged */
  *done = rc == SCHEDRUN_OK ? n : (size_t)(ran < n ? ran : n);
  stage = at + steps_bytes;
  for (size_t i = 0; i < *done; i++) {
    gpu_batch_op *o = &ops[i];
    if (o->kind == GB_SEQ) o->t_end = steps[i].t_end;
    if (o->kind == GB_DTOH && o->bytes) memcpy(o->dst, host_dev_range(d, stage, o->bytes), o->bytes);
    stage += stage_len(o);
  }
  host_stage_give(d, at, at_len);
  return rc;
}

static void h_seq_destroy(gpu_seq *s) {
  if (!s) return;
  host_device *d = &s->b->devs[s->dev];
  for (uint32_t i = 0; i < s->nbodies; i++) h_seq_destroy(s->bodies[i]);
  free(s->bodies);
  host_dev_free(d, s->nodes_addr);
  host_dev_free(d, s->args_addr);
  host_dev_free(d, s->hdr);
  free(s);
}

static const char *h_device_lost(const gpu_backend *b, int dev) {
  host_device *d = dev_of(b, dev);
  return atomic_load(&d->lost) ? d->lost_why : NULL;
}

static void h_abandon(gpu_backend *b) {
  for (int i = 0; i < hb(b)->ndevices; i++)
    host_device_abandon(&hb(b)->devs[i], "abandoned while busy when the scheduler closed");
}

static void h_counters(const gpu_backend *b, int dev, gpu_counters *out) {
  out->launches = atomic_load(&dev_of(b, dev)->launches);
  out->host_trips = 0;
  out->beside = 0; /* a batch runs alone in the worker */
  out->loops = ""; /* loops run in the worker like every other node */
}

static const gpu_ops host_ops = {
    .name = "host",
    .any_thread = true,
    .destroy = h_destroy,
    .device_count = h_device_count,
    .device_name = h_device_name,
    .target = h_target,
    .arch = h_arch,
    .mem_alloc = h_mem_alloc,
    .mem_room = h_mem_room,
    .mem_free = h_mem_free,
    .mem_zero = h_mem_zero,
    .copy_htod = h_copy_htod,
    .copy_dtoh = h_copy_dtoh,
    .copy_dtod = h_copy_dtod,
    .copy_peer = h_copy_peer,
    .host_alloc = h_host_alloc,
    .host_free = h_host_free,
    .mem_bind = h_mem_bind,
    .mem_unbind = h_mem_unbind,
    .module_load = h_module_load,
    .module_unload = h_module_unload,
    .module_function = h_module_function,
    .launch = h_launch,
    .seq_create = h_seq_create,
    .seq_add = h_seq_add,
    .seq_update = h_seq_update,
    .seq_finalize = h_seq_finalize,
    .seq_launch = h_seq_launch,
    .seq_launch_timed = h_seq_launch_timed,
    .seq_post = h_seq_post,
    .seq_collect = h_seq_collect,
    .device_wake_fds = h_device_wake_fds,
    .device_woken = h_device_woken,
    .run_batch = h_run_batch,
    .seq_destroy = h_seq_destroy,
    .device_lost = h_device_lost,
    .abandon = h_abandon,
    .counters = h_counters,
};

int gpu_host_open(int ndevices, const gpu_open_opts *o, gpu_backend **out, schedrun_error_t *err) {
  *out = NULL;
  if (ndevices < 1 || ndevices > SCHEDRUN_MAX_DEVICES)
    return err_set(err, SCHEDRUN_EINVAL, "host backend: %d devices (1 to %d)", ndevices, SCHEDRUN_MAX_DEVICES);
  /* without a cache, the worker program is built in a private directory and
   * removed once the workers run */
  char tmp[256] = "";
  const char *cache = o && o->cache_dir ? o->cache_dir : NULL;
  if (!cache && !(o && o->host_in_process)) {
    if (fs_temp_dir(tmp, sizeof tmp, "/tmp", "schedrun-worker-") != 0) return err_set(err, SCHEDRUN_EIO, "cannot create a directory in /tmp");
    cache = tmp;
  }
  char *worker = NULL;
  int worker_fd = -1;
  int rc = o && o->host_in_process ? SCHEDRUN_OK : host_worker_program(cache, &worker, &worker_fd, err);
  host_backend *b = rc ? NULL : calloc(1, sizeof *b);
  if (b) b->devs = calloc((size_t)ndevices, sizeof *b->devs);
  if (!rc && (!b || !b->devs)) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  if (b) b->shared.fd = -1;
  if (!rc) {
    long page = sysconf(_SC_PAGESIZE);
    b->base.ops = &host_ops;
    rc = host_shared_open(&b->shared, page > 0 ? (uint64_t)page : 4096, err);
    for (; b->ndevices < ndevices && !rc; b->ndevices++)
      rc = host_device_start(&b->devs[b->ndevices], b->ndevices, worker, worker_fd, b->shared.fd,
                             o ? o->spin_ns : 0, err);
    if (rc && b->ndevices) b->ndevices--; /* that one cleaned up after itself */
  }
  free(worker);
  if (worker_fd >= 0) close(worker_fd);
  if (cache == tmp) fs_remove_tree(tmp);
  if (rc) {
    if (b) h_destroy(&b->base);
    return rc;
  }
  *out = &b->base;
  return SCHEDRUN_OK;
}
