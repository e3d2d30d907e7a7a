/*
 * Buffers handed from one job to the next (a job graph's hand-offs). A job
 * that hands a buffer on leaves a parcel: a copy of the buffer in fresh
 * memory of its device, made on the device once the job has run, since the
 * buffer itself belongs to the execution context and the next job of that
 * context overwrites it. The parcel's address travels back in COMPLETE (or a
 * batch's COMPLETE_MANY); the
 * client gives it to the one job that takes it, whose execute actor copies
 * it into that job's buffer (on the device when both are on one device, else
 * once through the host) and frees it. Every parcel has exactly one taker.
 */
#include <assert.h>
#include <stdlib.h>

#include "actors/execute_state.h"

static uint64_t buffer_bytes(const prog_program *p, uint32_t b) {
  return p->buffers[b].count * prog_type_size(p->buffers[b].type);
}

bool execute_taken(const msg_u64s *takes, uint32_t b) {
  for (size_t i = 0; i + 2 < takes->n; i += 3)
    if (MSG_TAKE_BUFFER(takes->v[i]) == b) return true;
  return false;
}

/* Fills buffer b from registered memory `id` (in), or writes b back into
 * it. Memory the device reaches (a device pointer, pinned host memory) is
 * already the buffer: the scheduler sent the job to a context made with it
 * (scheduler_bound_slot), so nothing is copied. Other host memory is bound
 * in place where the backend can make the buffer that memory for the job
 * (host memory from schedrun_host_alloc on host devices), so that nothing
 * is copied either way; else one copy each way, counted. A resident buffer
 * is always copied: the jobs after this one start from what it left in the
 * buffer's own memory. */
static int bound_memory(execute_state *s, const context_run *c, uint64_t id, uint32_t b, bool in, const job_run *jr,
                        schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  core_buffer m = {0};
  if (b >= c->p->nbuffers) return err_set(err, SCHEDRUN_EPROTO, "EXECUTE binds buffer %u; the program has %u", b, c->p->nbuffers);
  uint64_t want = buffer_bytes(c->p, b);
  /* registered while a job bound to it has not completed: this one */
  bool there = core_buffer_get(s->core, id, &m);
  if (!there || m.bytes != want)
    return err_set(err, SCHEDRUN_EPROTO, "EXECUTE binds buffer '%s' to registered memory %llu, which %s",
                   c->p->buffers[b].name, (unsigned long long)id, there ? "has another size" : "is not there");
  if (m.addr) {
    if (c->bindings->v[b] != m.addr)
      return err_set(err, SCHEDRUN_EPROTO,
                     "EXECUTE binds buffer '%s' to memory at 0x%llx, but its context's buffer is at 0x%llx",
                     c->p->buffers[b].name, (unsigned long long)m.addr, (unsigned long long)c->bindings->v[b]);
    return SCHEDRUN_OK; /* the buffer is that memory: nothing to move */
  }
  void *data = m.data;
  assert(jr->traffic && data);
  if (b < 64 && (jr->traffic->inplace >> b & 1)) {
    assert(!in); /* bound in place: already the memory itself */
    return SCHEDRUN_OK;
  }
  /* the library's own view of the buffer is remapped too only for host
   * tasks, which read and write buffers through it: a remap in this
   * process, with its threads, costs several times one in the worker, and
   * outputs are read from the memory itself (execute_bound_data) */
  bool inplace = false, viewed = c->p->nhosts > 0;
  int rc = SCHEDRUN_OK;
  if (in && b < 64 && be->ops->mem_bind && !c->p->buffers[b].resident &&
      (rc = be->ops->mem_bind(be, s->device, c->bindings->v[b], data, want, viewed, &inplace, err)) == SCHEDRUN_OK &&
      inplace) {
    jr->traffic->inplace |= 1ull << b;
    if (viewed) jr->traffic->viewed |= 1ull << b;
    return SCHEDRUN_OK;
  }
  if (rc == SCHEDRUN_OK)
    rc = in ? be->ops->copy_htod(be, s->device, c->bindings->v[b], data, want, err)
            : be->ops->copy_dtoh(be, s->device, data, c->bindings->v[b], want, err);
  if (rc) return err_set(err, rc, "%s buffer '%s' %s registered memory: %s", in ? "filling" : "writing",
                         c->p->buffers[b].name, in ? "from its" : "back into its", err->message ? err->message : "copy failed");
  if (in) jr->traffic->in += want;
  else jr->traffic->out += want;
  return SCHEDRUN_OK;
}

int execute_write_back(execute_state *s, const context_run *c, const job_run *jr, schedrun_error_t *err) {
  for (size_t i = 0; i + 2 < jr->takes.n; i += 3)
    if (jr->takes.v[i] & MSG_TAKE_BOUND) {
      int rc = bound_memory(s, c, jr->takes.v[i + 1], MSG_TAKE_BUFFER(jr->takes.v[i]), false, jr, err);
      if (rc) return rc;
    }
  return SCHEDRUN_OK;
}

const void *execute_bound_data(execute_state *s, const job_run *jr, uint32_t b) {
  if (!jr->traffic || b >= 64 || !((jr->traffic->inplace & ~jr->traffic->viewed) >> b & 1)) return NULL;
  for (size_t i = 0; i + 2 < jr->takes.n; i += 3)
    if ((jr->takes.v[i] & MSG_TAKE_BOUND) && MSG_TAKE_BUFFER(jr->takes.v[i]) == b) {
      core_buffer m = {0};
      bool there = core_buffer_get(s->core, jr->takes.v[i + 1], &m);
      assert(there); /* it was when the buffer was bound, and stays while the job runs */
      return there ? m.data : NULL;
    }
  return NULL;
}

int execute_unbind(execute_state *s, const context_run *c, const job_run *jr, schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  int rc = SCHEDRUN_OK;
  for (uint32_t b = 0; b < 64 && jr->traffic->inplace; b++)
    if (jr->traffic->inplace >> b & 1) {
      jr->traffic->inplace &= ~(1ull << b);
      schedrun_error_t e = {0};
      int r = be->ops->mem_unbind(be, s->device, c->bindings->v[b], buffer_bytes(c->p, b),
                                  jr->traffic->viewed >> b & 1, &e);
      if (r && rc == SCHEDRUN_OK) rc = err_set(err, r, "giving buffer '%s' its memory back: %s", c->p->buffers[b].name,
                                                e.message ? e.message : "failed");
      schedrun_error_clear(&e);
    }
  return rc;
}

int execute_take_parcels(execute_state *s, const context_run *c, const job_run *jr, schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  assert(jr->takes.n % 3 == 0 && jr->traffic); /* the decoder checks the triples */
  for (size_t i = 0; i < jr->takes.n; i += 3) {
    if (jr->takes.v[i + 1] == MSG_TAKE_LOCAL) continue; /* kept here: the job's plan took it */
    uint32_t b = MSG_TAKE_BUFFER(jr->takes.v[i]);
    if (jr->takes.v[i] & MSG_TAKE_BOUND) {
      int rc = bound_memory(s, c, jr->takes.v[i + 1], b, true, jr, err);
      if (rc) return rc;
      continue;
    }
    int from = (int)jr->takes.v[i + 1];
    uint64_t addr = jr->takes.v[i + 2];
    if (b >= c->p->nbuffers || from < 0 || from >= s->core->ndevices)
      return err_set(err, SCHEDRUN_EPROTO, "EXECUTE takes a parcel for buffer %u from device %d: no such buffer or device",
                     b, from);
    uint64_t bytes = buffer_bytes(c->p, b);
    int rc = SCHEDRUN_OK;
    bool peer = false;
    if (from == s->device) {
      rc = be->ops->copy_dtod(be, s->device, c->bindings->v[b], addr, bytes, err);
      jr->traffic->local++;
    } else if (be->ops->copy_peer &&
               (rc = be->ops->copy_peer(be, s->device, c->bindings->v[b], from, addr, bytes, &peer, err)) == SCHEDRUN_OK &&
               peer) {
      /* another device's memory, straight across */
      jr->traffic->peer++;
      jr->traffic->across += bytes;
    } else if (rc == SCHEDRUN_OK) {
      /* another device's memory, no path between them: one copy through the host */
      void *tmp = malloc(bytes ? bytes : 1);
      if (!tmp) return err_set(err, SCHEDRUN_ENOMEM, "out of memory for a hand-off of %llu bytes", (unsigned long long)bytes);
      rc = be->ops->copy_dtoh(be, from, tmp, addr, bytes, err);
      if (rc == SCHEDRUN_OK) rc = be->ops->copy_htod(be, s->device, c->bindings->v[b], tmp, bytes, err);
      free(tmp);
      jr->traffic->copied++;
      jr->traffic->out += bytes;
      jr->traffic->in += bytes;
    }
    if (rc)
      return err_set(err, rc, "%s buffer '%s' on from %s to %s: %s",
                     jr->takes.v[i] & MSG_TAKE_RESIDENT ? "moving resident" : "handing", c->p->buffers[b].name,
                     be->ops->device_name(be, from), be->ops->device_name(be, s->device),
                     err->message ? err->message : "copy failed");
  }
  return SCHEDRUN_OK;
}

int execute_park(execute_state *s, const context_run *c, const msg_u64s *park, msg_u64s *parcels,
                 schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  parcels->v = malloc(park->n * sizeof *parcels->v);
  if (!parcels->v) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  int rc = SCHEDRUN_OK;
  for (size_t i = 0; rc == SCHEDRUN_OK && i < park->n; i++) {
    if (park->v[i] & MSG_PARK_LOCAL) {
      parcels->v[parcels->n++] = 0; /* kept here (execute_kept.c); its place stays */
      continue;
    }
    uint32_t b = (uint32_t)park->v[i];
    if (b >= c->p->nbuffers) {
      rc = err_set(err, SCHEDRUN_EPROTO, "EXECUTE parks buffer %u; the program has %u", b, c->p->nbuffers);
      break;
    }
    uint64_t bytes = buffer_bytes(c->p, b), addr = 0;
    rc = be->ops->mem_alloc(be, s->device, bytes ? bytes : 1, &addr, err);
    if (rc == SCHEDRUN_OK) {
      rc = be->ops->copy_dtod(be, s->device, addr, c->bindings->v[b], bytes, err);
      if (rc) be->ops->mem_free(be, s->device, addr);
      else parcels->v[parcels->n++] = addr;
    }
    if (rc)
      err_set(err, rc, "leaving buffer '%s' on %s for the job it is handed to: %s", c->p->buffers[b].name,
              be->ops->device_name(be, s->device), err->message ? err->message : "failed");
  }
  if (rc) execute_drop_parcels(s, parcels);
  return rc;
}

void execute_drop_parcels(execute_state *s, msg_u64s *parcels) {
  gpu_backend *be = s->core->backend;
  for (size_t i = 0; i < parcels->n; i++)
    if (parcels->v[i]) be->ops->mem_free(be, s->device, parcels->v[i]);
  free(parcels->v);
  parcels->v = NULL;
  parcels->n = 0;
}
