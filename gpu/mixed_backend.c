/*
 * A backend made of others: CUDA devices and host devices in one scheduler
 * ("devices: [cuda, host:1]"). Its devices are its parts' devices in the
 * order the parts were named; every call that names a device goes to that
 * device's part with the part's own number for it, and every call on a
 * sequence or a module goes to the part that made it (gpu_owner).
 *
 * What the parts do not share, the mixed backend does not offer: memory
 * every device reaches (host_alloc, host_address: the library hands out
 * plain memory, which jobs copy), copies straight between devices of two
 * parts (copy_peer says there is no such path, and the caller goes through
 * the host), and batches queued ahead (batch_begin: host devices have
 * none, so CUDA devices run their batches one at a time here).
 */
#include <assert.h>
#include <stdlib.h>

#include "gpu/backend.h"

typedef struct mixed_backend {
  gpu_backend base;
  gpu_backend *parts[GPU_MAX_TARGETS];
  int first[GPU_MAX_TARGETS]; /* the first device of each part */
  int nparts, ndevices;
  uint8_t part_of[SCHEDRUN_MAX_DEVICES];
} mixed_backend;

static mixed_backend *mb(const gpu_backend *b) { return (mixed_backend *)b; }

/* Device dev's part, and (in *local) the part's number for it. */
static gpu_backend *part_of(const gpu_backend *b, int dev, int *local) {
  const mixed_backend *m = mb(b);
  assert(dev >= 0 && dev < m->ndevices);
  int p = m->part_of[dev];
  *local = dev - m->first[p];
  return m->parts[p];
}

static void x_destroy(gpu_backend *b) {
  for (int i = 0; i < mb(b)->nparts; i++) gpu_backend_close(&mb(b)->parts[i]);
  free(b);
}

static int x_device_count(const gpu_backend *b) { return mb(b)->ndevices; }

static const char *x_device_name(const gpu_backend *b, int dev) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->device_name(p, l);
}

static const char *x_target(const gpu_backend *b, int dev) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->target(p, l);
}

static const char *x_arch(const gpu_backend *b, int dev) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->arch(p, l);
}

static int x_mem_alloc(gpu_backend *b, int dev, uint64_t bytes, uint64_t *addr, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->mem_alloc(p, l, bytes, addr, err);
}

static void x_mem_free(gpu_backend *b, int dev, uint64_t addr) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  p->ops->mem_free(p, l, addr);
}

static int x_mem_room(gpu_backend *b, int dev, uint64_t *free_bytes, uint64_t *total, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->mem_room(p, l, free_bytes, total, err);
}

static int x_mem_zero(gpu_backend *b, int dev, uint64_t addr, uint64_t n, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->mem_zero(p, l, addr, n, err);
}

static int x_copy_htod(gpu_backend *b, int dev, uint64_t dst, const void *src, uint64_t n, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->copy_htod(p, l, dst, src, n, err);
}

static int x_copy_dtoh(gpu_backend *b, int dev, void *dst, uint64_t src, uint64_t n, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->copy_dtoh(p, l, dst, src, n, err);
}

static int x_copy_dtod(gpu_backend *b, int dev, uint64_t dst, uint64_t src, uint64_t n, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->copy_dtod(p, l, dst, src, n, err);
}

static int x_copy_peer(gpu_backend *b, int dst_dev, uint64_t dst, int src_dev, uint64_t src, uint64_t n, bool *peer,
                       schedrun_error_t *err) {
  int ld, ls;
  gpu_backend *pd = part_of(b, dst_dev, &ld), *ps = part_of(b, src_dev, &ls);
  *peer = false;
  if (pd != ps || !pd->ops->copy_peer) return SCHEDRUN_OK; /* through the host */
  return pd->ops->copy_peer(pd, ld, dst, ls, src, n, peer, err);
}

static int x_mem_bind(gpu_backend *b, int dev, uint64_t addr, const void *host, uint64_t bytes, bool viewed,
                      bool *inplace, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  *inplace = false;
  return p->ops->mem_bind ? p->ops->mem_bind(p, l, addr, host, bytes, viewed, inplace, err) : SCHEDRUN_OK;
}

static int x_mem_unbind(gpu_backend *b, int dev, uint64_t addr, uint64_t bytes, bool viewed, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  assert(p->ops->mem_unbind); /* bound only through its part's mem_bind */
  return p->ops->mem_unbind(p, l, addr, bytes, viewed, err);
}

static int x_mem_reach(gpu_backend *b, int dev, uint64_t addr, uint64_t bytes, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  if (!p->ops->mem_reach)
    return err_set(err, SCHEDRUN_EINVAL, "%s has no memory a caller allocates on it", p->ops->device_name(p, l));
  return p->ops->mem_reach(p, l, addr, bytes, err);
}

static int x_module_load(gpu_backend *b, int dev, const void *image, size_t len, gpu_module **out,
                         schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->module_load(p, l, image, len, out, err);
}

static void x_module_unload(gpu_backend *b, gpu_module *m) {
  (void)b;
  gpu_backend *p = gpu_owner(m);
  p->ops->module_unload(p, m);
}

static int x_module_function(gpu_backend *b, gpu_module *m, const char *entry, gpu_function *out,
                             schedrun_error_t *err) {
  (void)b;
  gpu_backend *p = gpu_owner(m);
  return p->ops->module_function(p, m, entry, out, err);
}

static int x_launch(gpu_backend *b, int dev, const gpu_node *n, bool wait, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->launch(p, l, n, wait, err);
}

static int x_seq_create(gpu_backend *b, int dev, gpu_seq **out, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->seq_create(p, l, out, err);
}

static int x_seq_add(gpu_seq *s, gpu_node *n, uint32_t *index, schedrun_error_t *err) {
  return gpu_owner(s)->ops->seq_add(s, n, index, err);
}

static int x_seq_update(gpu_seq *s, uint32_t index, const gpu_node *n, schedrun_error_t *err) {
  return gpu_owner(s)->ops->seq_update(s, index, n, err);
}

static int x_seq_finalize(gpu_seq *s, schedrun_error_t *err) { return gpu_owner(s)->ops->seq_finalize(s, err); }

static int x_seq_launch(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  return gpu_owner(s)->ops->seq_launch(s, deadline_ns, f, err);
}

static int x_seq_launch_timed(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, uint64_t *times, uint32_t max,
                              uint32_t *n, schedrun_error_t *err) {
  const gpu_ops *o = gpu_owner(s)->ops;
  assert(o->seq_launch_timed); /* both parts time nodes */
  return o->seq_launch_timed(s, deadline_ns, f, times, max, n, err);
}

static void x_seq_destroy(gpu_seq *s) { gpu_owner(s)->ops->seq_destroy(s); }

static int x_run_batch(gpu_backend *b, int dev, gpu_batch_op *ops, size_t n, uint64_t deadline_ns, size_t *done,
                       gpu_failure *f, schedrun_error_t *err) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  assert(p->ops->run_batch); /* both parts run batches */
  return p->ops->run_batch(p, l, ops, n, deadline_ns, done, f, err);
}

static const char *x_device_lost(const gpu_backend *b, int dev) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  return p->ops->device_lost(p, l);
}

static void x_abandon(gpu_backend *b) {
  for (int i = 0; i < mb(b)->nparts; i++) mb(b)->parts[i]->ops->abandon(mb(b)->parts[i]);
}

static void x_counters(const gpu_backend *b, int dev, gpu_counters *out) {
  int l;
  gpu_backend *p = part_of(b, dev, &l);
  p->ops->counters(p, l, out);
}

static const gpu_backend *x_part(const gpu_backend *b, int i, int *first) {
  if (i < 0 || i >= mb(b)->nparts) return NULL;
  *first = mb(b)->first[i];
  return mb(b)->parts[i];
}

static const gpu_ops mixed_ops = {
    .name = "mixed",
    .any_thread = false, /* a CUDA part's calls are not (its kinds differ: one of them is CUDA) */
    .destroy = x_destroy,
    .device_count = x_device_count,
    .device_name = x_device_name,
    .target = x_target,
    .arch = x_arch,
    .mem_alloc = x_mem_alloc,
    .mem_free = x_mem_free,
    .mem_room = x_mem_room,
    .mem_zero = x_mem_zero,
    .copy_htod = x_copy_htod,
    .copy_dtoh = x_copy_dtoh,
    .copy_dtod = x_copy_dtod,
    .copy_peer = x_copy_peer,
    .mem_bind = x_mem_bind,
    .mem_unbind = x_mem_unbind,
    .mem_reach = x_mem_reach,
    .module_load = x_module_load,
    .module_unload = x_module_unload,
    .module_function = x_module_function,
    .launch = x_launch,
    .seq_create = x_seq_create,
    .seq_add = x_seq_add,
    .seq_update = x_seq_update,
    .seq_finalize = x_seq_finalize,
    .seq_launch = x_seq_launch,
    .seq_launch_timed = x_seq_launch_timed,
    .seq_destroy = x_seq_destroy,
    .run_batch = x_run_batch,
    .device_lost = x_device_lost,
    .abandon = x_abandon,
    .counters = x_counters,
    .part = x_part,
};

int gpu_mixed_open(gpu_backend **parts, int nparts, gpu_backend **out, schedrun_error_t *err) {
  *out = NULL;
  mixed_backend *m = nparts >= 1 && nparts <= GPU_MAX_TARGETS ? calloc(1, sizeof *m) : NULL;
  int rc = m ? SCHEDRUN_OK : nparts < 1 || nparts > GPU_MAX_TARGETS
                                 ? err_set(err, SCHEDRUN_EINVAL, "devices: %d kinds; at most %d", nparts, GPU_MAX_TARGETS)
                                 : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (int i = 0; rc == SCHEDRUN_OK && i < nparts; i++) {
    gpu_backend *p = parts[i];
    int n = p->ops->device_count(p);
    if (m->ndevices + n > SCHEDRUN_MAX_DEVICES) {
      rc = err_set(err, SCHEDRUN_EINVAL, "devices: %d in all; at most %d", m->ndevices + n, SCHEDRUN_MAX_DEVICES);
      break;
    }
    m->first[i] = m->ndevices;
    for (int d = 0; d < n; d++) m->part_of[m->ndevices + d] = (uint8_t)i;
    m->ndevices += n;
  }
  if (rc != SCHEDRUN_OK) {
    for (int i = 0; i < nparts; i++) gpu_backend_close(&parts[i]);
    free(m);
    return rc;
  }
  for (int i = 0; i < nparts; i++) m->parts[i] = parts[i];
  m->nparts = nparts;
  m->base.ops = &mixed_ops;
  *out = &m->base;
  return SCHEDRUN_OK;
}
