/*
 * Registered memory (schedrun_buffer_register, _register_device;
 * include/schedrun.h says who owns what and until when). A registration is
 * a core_buffer in the core's table, where an execute actor finds it by id:
 * a job bound to it carries {buffer | MSG_TAKE_BOUND, id, address} among its
 * takes. Host memory (address 0) is copied into the buffer before the job
 * runs and back after, or bound in place by the backend
 * (actors/execute_handoff.c); its host address never travels in a message.
 * Memory devices reach (a device pointer, pinned host memory) travels as
 * the device address it is at, since it is the buffer itself: the scheduler
 * runs the job in an execution context made with it (scheduler_bound_slot).
 * The library counts the jobs bound to each registration, so that it stays
 * registered while one may touch it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lib/api.h"

struct schedrun_buffer {
  schedrun_t *s; /* NULL once its scheduler closed */
  core_buffer core;
  uint32_t users;          /* jobs bound to it, not yet complete (under s->lock) */
  schedrun_job_t last;     /* the last job bound to it */
  struct schedrun_buffer *next; /* in s->buffers */
};

/* Adds registration m (its memory filled in) to s's table; frees it when it
 * cannot. */
static int register_memory(schedrun_t *s, const char *fn, core_buffer m, schedrun_buffer_t **out,
                           schedrun_error_t *err) {
  schedrun_buffer_t *b = calloc(1, sizeof *b);
  if (!b) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  b->s = s;
  b->core = m;
  pthread_mutex_lock(&s->lock);
  int rc = s->closing ? err_set(err, SCHEDRUN_ECLOSED, "%s: the scheduler is shut down", fn) : SCHEDRUN_OK;
  if (rc == SCHEDRUN_OK) {
    b->core.id = ++s->next_buffer;
    pthread_mutex_lock(&s->core.reg_lock);
    if (hmap_put(&s->core.buffers, &b->core.id, &b->core) != 0)
      rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    pthread_mutex_unlock(&s->core.reg_lock);
  }
  if (rc == SCHEDRUN_OK) {
    b->next = s->buffers;
    s->buffers = b;
  }
  pthread_mutex_unlock(&s->lock);
  if (rc) {
    free(b);
    return rc;
  }
  *out = b;
  return SCHEDRUN_OK;
}

int schedrun_buffer_register(schedrun_t *s, void *data, size_t bytes, schedrun_buffer_t **out, schedrun_error_t *err) {
  if (out) *out = NULL;
  if (!s || !data || !out)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_buffer_register: %s is NULL",
                   !s ? "the scheduler" : !data ? "data" : "out");
  if (bytes == 0) return err_set(err, SCHEDRUN_EINVAL, "schedrun_buffer_register: bytes is 0");
  core_buffer m = {.data = data, .bytes = bytes, .device = -1};
  /* memory every device reaches (CUDA's pinned host memory) is used in place */
  gpu_backend *be = s->core.backend;
  if (be->ops->host_address && !be->ops->host_address(be, data, bytes, &m.addr)) m.addr = 0;
  return register_memory(s, "schedrun_buffer_register", m, out, err);
}

int schedrun_buffer_register_device(schedrun_t *s, int device, uint64_t address, size_t bytes,
                                    schedrun_buffer_t **out, schedrun_error_t *err) {
  static const char fn[] = "schedrun_buffer_register_device";
  if (out) *out = NULL;
  if (!s || !out) return err_set(err, SCHEDRUN_EINVAL, "%s: %s is NULL", fn, !s ? "the scheduler" : "out");
  if (address == 0) return err_set(err, SCHEDRUN_EINVAL, "%s: address is 0", fn);
  if (bytes == 0) return err_set(err, SCHEDRUN_EINVAL, "%s: bytes is 0", fn);
  if (device < 0 || device >= s->core.ndevices)
    return err_set(err, SCHEDRUN_EINVAL, "%s: no device %d (the scheduler has %d)", fn, device, s->core.ndevices);
  gpu_backend *be = s->core.backend;
  if (!be->ops->mem_reach)
    return err_set(err, SCHEDRUN_EINVAL,
                   "%s: %s devices have no memory of their own for a caller to allocate; register host memory "
                   "from schedrun_host_alloc instead, which they use in place",
                   fn, be->ops->name);
  schedrun_error_t e = {0};
  int rc = be->ops->mem_reach(be, device, address, bytes, &e);
  if (rc) {
    rc = err_set(err, rc, "%s: %llu bytes at 0x%llx on %s: %s", fn, (unsigned long long)bytes,
                 (unsigned long long)address, be->ops->device_name(be, device), e.message ? e.message : "refused");
    schedrun_error_clear(&e);
    return rc;
  }
  core_buffer m = {.bytes = bytes, .addr = address, .device = device};
  return register_memory(s, fn, m, out, err);
}

int schedrun_buffer_unregister(schedrun_buffer_t **pb, schedrun_error_t *err) {
  if (!pb || !*pb) return SCHEDRUN_OK;
  schedrun_buffer_t *b = *pb;
  schedrun_t *s = b->s;
  if (s) {
    pthread_mutex_lock(&s->lock);
    if (b->users) {
      int rc = err_set(err, SCHEDRUN_EBUSY,
                       "schedrun_buffer_unregister: the memory at %p (%zu bytes) is bound to %u job(s) not yet "
                       "complete (the last: job %llu); it stays registered",
                       b->core.data, b->core.bytes, b->users, (unsigned long long)b->last);
      pthread_mutex_unlock(&s->lock);
      return rc;
    }
    pthread_mutex_lock(&s->core.reg_lock);
    hmap_remove(&s->core.buffers, &b->core.id);
    pthread_mutex_unlock(&s->core.reg_lock);
    for (schedrun_buffer_t **at = &s->buffers; *at; at = &(*at)->next)
      if (*at == b) {
        *at = b->next;
        break;
      }
    pthread_mutex_unlock(&s->lock);
  }
  free(b);
  *pb = NULL;
  return SCHEDRUN_OK;
}

/* ---- schedrun_host_alloc: the backend's memory, or plain pages ---- */

struct api_host_mem {
  uint8_t *data;
  size_t bytes;
  bool backend; /* the backend's host_alloc made it; else an anonymous mapping */
  struct api_host_mem *next;
};

int schedrun_host_alloc(schedrun_t *s, size_t bytes, void **data, schedrun_error_t *err) {
  if (data) *data = NULL;
  if (!s || !data)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_host_alloc: %s is NULL", !s ? "the scheduler" : "data");
  if (bytes == 0) return err_set(err, SCHEDRUN_EINVAL, "schedrun_host_alloc: bytes is 0");
  struct api_host_mem *h = calloc(1, sizeof *h);
  if (!h) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  gpu_backend *be = s->core.backend;
  int rc = SCHEDRUN_OK;
  void *p = NULL;
  h->bytes = bytes;
  h->backend = be->ops->host_alloc != NULL;
  if (h->backend) {
    rc = be->ops->host_alloc(be, bytes, &p, err);
  } else if ((p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED) {
    p = NULL;
    rc = err_set(err, SCHEDRUN_ENOMEM, "schedrun_host_alloc: cannot allocate %zu bytes", bytes);
  }
  if (rc) {
    free(h);
    return err_append(err, rc, "schedrun_host_alloc: %zu bytes", bytes);
  }
  h->data = p;
  pthread_mutex_lock(&s->lock);
  if (s->closing) rc = err_set(err, SCHEDRUN_ECLOSED, "schedrun_host_alloc: the scheduler is shut down");
  else {
    h->next = s->host_mem;
    s->host_mem = h;
  }
  pthread_mutex_unlock(&s->lock);
  if (rc) {
    if (h->backend) be->ops->host_free(be, p);
    else munmap(p, bytes);
    free(h);
    return rc;
  }
  *data = p;
  return SCHEDRUN_OK;
}

static void host_mem_free(schedrun_t *s, struct api_host_mem *h) {
  if (h->backend) s->core.backend->ops->host_free(s->core.backend, h->data);
  else munmap(h->data, h->bytes);
  free(h);
}

int schedrun_host_free(schedrun_t *s, void *data, schedrun_error_t *err) {
  if (!s) return err_set(err, SCHEDRUN_EINVAL, "schedrun_host_free: the scheduler is NULL");
  if (!data) return SCHEDRUN_OK;
  pthread_mutex_lock(&s->lock);
  struct api_host_mem **at = &s->host_mem;
  while (*at && (*at)->data != data) at = &(*at)->next;
  struct api_host_mem *h = *at;
  int rc = !h ? err_set(err, SCHEDRUN_EINVAL,
                        "schedrun_host_free: %p is not memory schedrun_host_alloc gave, or it was freed", data)
              : SCHEDRUN_OK;
  for (schedrun_buffer_t *b = s->buffers; rc == SCHEDRUN_OK && b; b = b->next) {
    const uint8_t *p = b->core.data;
    if (p < h->data + h->bytes && p + b->core.bytes > h->data)
      rc = err_set(err, SCHEDRUN_EBUSY,
                   "schedrun_host_free: the memory at %p (%zu bytes) is in use: %zu bytes of it at %p are "
                   "registered (unregister them first); nothing was freed",
                   data, h->bytes, b->core.bytes, b->core.data);
  }
  if (rc == SCHEDRUN_OK) *at = h->next;
  pthread_mutex_unlock(&s->lock);
  if (rc == SCHEDRUN_OK) host_mem_free(s, h);
  return rc;
}

/* Whether job `job` is among o's `after`. */
static bool runs_after(const schedrun_job_options_t *o, schedrun_job_t job) {
  for (size_t i = 0; i < o->nafter; i++)
    if (o->after && o->after[i] == job) return true;
  return false;
}

int api_bind_check(schedrun_t *s, const prog_program *p, const char *fn, const schedrun_job_options_t *o,
                   msg_submit *sb, schedrun_error_t *err) {
  if (!o->nbinds) return SCHEDRUN_OK;
  if (!o->binds) return err_set(err, SCHEDRUN_EINVAL, "%s: binds is NULL", fn);
  uint64_t *v = realloc(sb->takes.v, (sb->takes.n + 3 * o->nbinds) * sizeof *v);
  if (!v) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  sb->takes.v = v;
  for (size_t i = 0; i < o->nbinds; i++) {
    const schedrun_bind_t *bd = &o->binds[i];
    int b = bd->buffer ? prog_find_buffer(p, bd->buffer) : -1;
    if (b < 0)
      return err_set(err, SCHEDRUN_EINVAL, "%s: binds[%zu] names no buffer of '%s' (%s)", fn, i, p->name,
                     bd->buffer ? bd->buffer : "NULL");
    const schedrun_buffer_t *m = bd->memory;
    if (!m || m->s != s)
      return err_set(err, SCHEDRUN_EINVAL, "%s: binds[%zu] (buffer '%s'): %s", fn, i, bd->buffer,
                     !m ? "memory is NULL" : "the memory is registered with another scheduler, or none");
    uint64_t want = p->buffers[b].count * prog_type_size(p->buffers[b].type);
    if (m->core.bytes != want)
      return err_set(err, SCHEDRUN_EINVAL, "%s: binds[%zu]: buffer '%s' holds %llu bytes; the memory bound to it %zu",
                     fn, i, bd->buffer, (unsigned long long)want, m->core.bytes);
    for (size_t k = 0; k < i; k++)
      if (o->binds[k].memory == m || !strcmp(o->binds[k].buffer, bd->buffer))
        return err_set(err, SCHEDRUN_EINVAL, "%s: binds[%zu] binds %s again", fn, i,
                       o->binds[k].memory == m ? "the same memory" : "the same buffer");
    for (size_t k = 0; k < o->ninputs; k++)
      if (o->inputs[k].buffer && !strcmp(o->inputs[k].buffer, bd->buffer))
        return err_set(err, SCHEDRUN_EINVAL, "%s: buffer '%s' is both bound and given as an input", fn, bd->buffer);
    if (m->users && !runs_after(o, m->last))
      return err_set(err, SCHEDRUN_EBUSY,
                     "%s: binds[%zu]: the memory is bound to job %llu, not yet complete; run this job after it "
                     "(after), or wait for it",
                     fn, i, (unsigned long long)m->last);
    if (m->core.addr && p->nresident)
      return err_set(err, SCHEDRUN_EINVAL,
                     "%s: binds[%zu]: program '%s' has resident buffers, whose buffer sets keep memory of their "
                     "own; memory devices reach (device memory, pinned host memory) cannot be bound to its jobs",
                     fn, i, p->name);
    if (m->core.device >= 0 && sb->device != m->core.device) {
      if (sb->device >= 0)
        return err_set(err, SCHEDRUN_EINVAL,
                       "%s: binds[%zu]: buffer '%s' is bound to memory of device %d, but the job runs on device %d",
                       fn, i, bd->buffer, m->core.device, sb->device);
      sb->device = m->core.device; /* it runs where its memory is */
    }
    sb->takes.v[sb->takes.n++] = (uint64_t)b | MSG_TAKE_BOUND;
    sb->takes.v[sb->takes.n++] = m->core.id;
    sb->takes.v[sb->takes.n++] = m->core.addr; /* the context's buffer address (scheduler_bound_slot) */
  }
  return SCHEDRUN_OK;
}

int api_bind(schedrun_t *s, pending_job *pj, const schedrun_job_options_t *o, schedrun_error_t *err) {
  (void)s;
  if (!o->nbinds) return SCHEDRUN_OK;
  pj->binds = malloc(o->nbinds * sizeof *pj->binds);
  if (!pj->binds) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (size_t i = 0; i < o->nbinds; i++) {
    schedrun_buffer_t *m = o->binds[i].memory;
    m->users++;
    m->last = pj->id;
    pj->binds[pj->nbinds++] = m;
  }
  return SCHEDRUN_OK;
}

void api_unbind(schedrun_t *s, pending_job *pj) {
  (void)s;
  for (uint32_t i = 0; i < pj->nbinds; i++) pj->binds[i]->users--;
  free(pj->binds);
  pj->binds = NULL;
  pj->nbinds = 0;
}

void api_buffers_close(schedrun_t *s) {
  for (struct api_host_mem *h = s->host_mem, *next; h; h = next) {
    next = h->next;
    host_mem_free(s, h);
  }
  s->host_mem = NULL;
  for (schedrun_buffer_t *b = s->buffers, *next; b; b = next) {
    next = b->next;
    b->s = NULL;
    b->next = NULL;
  }
  s->buffers = NULL;
  hmap_destroy(&s->core.buffers);
}
