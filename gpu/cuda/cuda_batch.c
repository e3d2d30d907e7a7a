/*
 * Batches of jobs on a CUDA device (gpu_ops.run_batch): every step of every
 * job of the batch — buffer fills from host bytes, zeroing, copies between
 * buffers, the recorded graphs, the reads back — is queued on the device's
 * stream at once, and the batch is waited for once, as a host device runs
 * a batch as one request.
 *
 * Host bytes go through a pinned staging buffer kept per device: a fill's
 * bytes are copied into it before the batch is queued, and what is read
 * back is copied out of it after the wait, so every copy the driver does
 * is asynchronous (a copy from pageable memory would wait for the stream,
 * one to pageable memory would return only when done).
 *
 * A batch may be queued while the one before it still runs (batch_begin,
 * then batch_finish of the older): each of the two has a lane of its own
 * (staging, events), used again only once its batch was finished. When the
 * caller says the new batch's first fills touch nothing of the batch out
 * (another execution context's buffers: execute_many.c), they go on a copy
 * stream, which the device's stream waits for with an event before the
 * batch's first sequence: the inputs are copied in while the kernels of the
 * batch before run. Everything else of a batch is on the device's stream,
 * in order after the batch before; finishing a batch waits for its own last
 * event, not for the stream, so the batch after it runs on meanwhile.
 *
 * Each job's end time comes from an event recorded after its graph: the
 * wait's end on the host's clock, less the time the device spent after
 * that event (cuEventElapsedTime to an event recorded at the batch's end).
 *
 * How far a batch that failed got comes from an event recorded at each
 * boundary between two jobs: the jobs before the first boundary not reached
 * are done. After a fault every call on the context says the fault, so
 * none is known done then; after a deadline the events still answer
 * (cuEventQuery does not wait), and only the job that was running is named
 * as past its deadline.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda/cuda_internal.h"

#define STAGE_ALIGN 256u

static uint64_t stage_len(const gpu_batch_op *o) {
  return o->kind == GB_HTOD || o->kind == GB_DTOH ? (o->bytes + STAGE_ALIGN - 1) & ~(uint64_t)(STAGE_ALIGN - 1) : 0;
}

int cu_batch_room(cuda_backend *b, cu_device *d, cu_lane *l, uint64_t bytes, uint32_t nevs, schedrun_error_t *err) {
  cu_api *a = &b->api;
  if (bytes > l->stage_cap) {
    uint64_t cap = l->stage_cap ? l->stage_cap : 1u << 20;
    while (cap < bytes) cap *= 2;
    if (l->stage) a->cuMemFreeHost(l->stage); /* what used it has been waited for */
    l->stage = NULL;
    l->stage_cap = 0;
    CU_CHECK(a, a->cuMemHostAlloc(&l->stage, (size_t)cap, 0), d->name, err);
    l->stage_cap = cap;
  }
  if (nevs > l->nevs) {
    CUevent *evs = realloc(l->evs, nevs * sizeof *evs);
    if (!evs) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    l->evs = evs;
    for (; l->nevs < nevs; l->nevs++) CU_CHECK(a, a->cuEventCreate(&l->evs[l->nevs], CU_EVENT_DEFAULT), d->name, err);
  }
  return SCHEDRUN_OK;
}

/* The events of a batch of nseq sequences: evs[0] at its end, then one
 * after each sequence, then one at each boundary between jobs. */
#define EV_END 0
#define EV_SEQ(k) (1 + (k))
#define EV_JOB(nseq, k) (1 + (nseq) + (k))

/* Queues o (host bytes already staged at `at`) on stream st; a sequence
 * records evs[EV_SEQ(*seqs)] after it. */
static int queue_op(cuda_backend *b, cu_device *d, int dev, cu_lane *l, CUstream st, gpu_batch_op *o, uint8_t *at,
                    uint32_t *seqs, gpu_failure *f, schedrun_error_t *err) {
  cu_api *a = &b->api;
  switch (o->kind) {
  case GB_HTOD: CU_CHECK(a, a->cuMemcpyHtoDAsync((CUdeviceptr)o->addr, at, o->bytes, st), d->name, err); break;
  case GB_ZERO: CU_CHECK(a, a->cuMemsetD8Async((CUdeviceptr)o->addr, 0, o->bytes, st), d->name, err); break;
  case GB_DTOD:
    /* the loader refuses overlapping ranges, whose copy a driver leaves undefined */
    assert(o->addr + o->bytes <= o->from || o->from + o->bytes <= o->addr || !o->bytes);
    CU_CHECK(a, a->cuMemcpyDtoDAsync((CUdeviceptr)o->addr, (CUdeviceptr)o->from, o->bytes, st), d->name, err);
    break;
  case GB_SEQ: {
    (void)dev;
    assert(st == d->stream); /* sequences run on the device's stream, in order */
    assert(o->seq && cu_seq_device(o->seq) == dev); /* recorded for this device */
    int rc = cu_seq_enqueue(o->seq, l->deadline_ns, f, err);
    if (rc) return rc;
    CU_CHECK(a, a->cuEventRecord(l->evs[EV_SEQ(*seqs)], st), d->name, err);
    ++*seqs;
    break;
  }
  case GB_DTOH: CU_CHECK(a, a->cuMemcpyDtoHAsync(at, (CUdeviceptr)o->addr, o->bytes, st), d->name, err); break;
  }
  return SCHEDRUN_OK;
}

/* The steps before the first sequence queued on the copy stream, the
 * device's stream waiting for them: they run while the batch before still
 * does. Returns how many were queued there (*rc says whether they were). */
static size_t queue_beside(cuda_backend *b, cu_device *d, int dev, cu_lane *l, uint32_t *seqs, int *rc,
                           schedrun_error_t *err) {
  cu_api *a = &b->api;
  size_t k = 0;
  while (k < l->n && l->ops[k].kind != GB_SEQ && l->ops[k].kind != GB_DTOH) k++;
  if (k == 0) return 0;
  const char *call = "cuStreamCreate";
  CUresult r = d->copy_stream ? CUDA_SUCCESS : a->cuStreamCreate(&d->copy_stream, CU_STREAM_NON_BLOCKING);
  if (r == CUDA_SUCCESS && !l->copied && (call = "cuEventCreate"))
    r = a->cuEventCreate(&l->copied, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    *rc = cu_fail(a, err, r, call, d->name);
    return 0;
  }
  uint64_t off = 0;
  for (size_t i = 0; i < k && *rc == SCHEDRUN_OK; i++) {
    *rc = queue_op(b, d, dev, l, d->copy_stream, &l->ops[i], (uint8_t *)l->stage + off, seqs, &l->f, err);
    off += stage_len(&l->ops[i]);
  }
  if (*rc == SCHEDRUN_OK && (r = a->cuEventRecord(l->copied, d->copy_stream)) == CUDA_SUCCESS)
    r = a->cuStreamWaitEvent(d->stream, l->copied, 0);
  if (*rc == SCHEDRUN_OK && r != CUDA_SUCCESS) *rc = cu_fail(a, err, r, "cuStreamWaitEvent", d->name);
  if (*rc == SCHEDRUN_OK) atomic_fetch_add(&d->beside, 1);
  return *rc == SCHEDRUN_OK ? k : 0;
}

int cu_batch_begin(gpu_backend *g, int dev, gpu_batch_op *ops, size_t n, uint64_t deadline_ns, bool beside,
                   schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  if (dev < 0 || dev >= b->ndevices) return err_set(err, SCHEDRUN_EINVAL, "no cuda device %d", dev);
  cu_device *d = &b->devs[dev];
  assert(d->out < 2); /* the caller finishes the first before a third begins */
  if (d->out == 2) return err_set(err, SCHEDRUN_EINTERNAL, "%s: two batches are out already", d->name);
  cu_lane *l = &d->lanes[(d->first + d->out) % 2];
  gpu_failure f = {GPU_NO_TAG, false};
  int rc = cu_launch_begin(d, &f, err);
  if (rc) return rc;
  uint64_t staged = 0;
  uint32_t nseq = 0;
  for (size_t i = 0; i < n; i++) {
    staged += stage_len(&ops[i]);
    nseq += ops[i].kind == GB_SEQ;
  }
  rc = cu_use(b, dev, err);
  if (rc == SCHEDRUN_OK) rc = cu_batch_room(b, d, l, staged, 2 * nseq + 1, err);
  if (rc == SCHEDRUN_OK && nseq > l->bound_cap) {
    size_t *bound = realloc(l->bound, nseq * sizeof *bound);
    if (!bound) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    else {
      l->bound = bound;
      l->bound_cap = nseq;
    }
  }
  if (rc) return rc; /* nothing queued: the lane stays free */
  /* this batch's: what the lane keeps (staging, events) stays */
  assert(!l->ops && !l->err.message); /* finished, its error handed on */
  l->ops = ops;
  l->n = n;
  l->queued = 0;
  l->nseq = nseq;
  l->nbound = 0;
  l->deadline_ns = deadline_ns;
  l->timed = false;
  l->rc = SCHEDRUN_OK;
  l->f = (gpu_failure){GPU_NO_TAG, false};
  d->out++;
  uint8_t *stage = l->stage;
  /* the host bytes first: every copy from them then runs without the CPU */
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    if (ops[i].kind == GB_HTOD && ops[i].bytes) memcpy(stage + off, ops[i].src, ops[i].bytes);
    off += stage_len(&ops[i]);
  }
  assert(off == staged);
  l->t_begin = now_ns();
  uint32_t seqs = 0;
  bool after_seq = false;
  /* beside the batch out before, when the caller says its fills may be */
  size_t from = beside && d->out == 2 ? queue_beside(b, d, dev, l, &seqs, &l->rc, &l->err) : 0;
  off = 0;
  for (size_t i = 0; i < from; i++) off += stage_len(&ops[i]);
  for (l->queued = from; l->queued < n && l->rc == SCHEDRUN_OK; l->queued++) {
    gpu_batch_kind kind = ops[l->queued].kind;
    if (after_seq && kind != GB_DTOH) {
      /* the job before has queued its reads back: a boundary */
      CUresult r = b->api.cuEventRecord(l->evs[EV_JOB(nseq, l->nbound)], d->stream);
      if (r != CUDA_SUCCESS) {
        l->rc = cu_fail(&b->api, &l->err, r, "cuEventRecord", d->name);
        break;
      }
      l->bound[l->nbound++] = l->queued;
      after_seq = false;
    }
    l->rc = queue_op(b, d, dev, l, d->stream, &ops[l->queued], stage + off, &seqs, &l->f, &l->err);
    if (l->rc) break;
    after_seq |= kind == GB_SEQ;
    off += stage_len(&ops[l->queued]);
  }
  assert(l->rc || (seqs == nseq && l->nbound + (nseq > 0) == nseq)); /* a boundary between each two jobs */
  /* without the end's event every step still ran: only the times are not known */
  l->timed = l->rc == SCHEDRUN_OK && b->api.cuEventRecord(l->evs[EV_END], d->stream) == CUDA_SUCCESS;
  return SCHEDRUN_OK;
}

int cu_batch_finish(gpu_backend *g, int dev, size_t *done, gpu_failure *f, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  *done = 0;
  *f = (gpu_failure){GPU_NO_TAG, false};
  if (dev < 0 || dev >= b->ndevices) return err_set(err, SCHEDRUN_EINVAL, "no cuda device %d", dev);
  cu_device *d = &b->devs[dev];
  assert(d->out > 0);
  if (d->out == 0) return err_set(err, SCHEDRUN_EINTERNAL, "%s: no batch is out", d->name);
  cu_lane *l = &d->lanes[d->first];
  d->first = (d->first + 1) % 2;
  d->out--;
  int rc = l->rc;
  *f = l->f;
  if (rc) err_move(err, &l->err);
  /* what was queued runs to its end (or the device is lost) before the
   * staging is read or used again; a batch queued after it may still run */
  schedrun_error_t werr = {0};
  int wrc;
  if (atomic_load(&d->stuck)) {
    /* lost to the batch before, whose work may never end: nothing waits */
    f->lost = true;
    wrc = err_set(rc ? &werr : err, SCHEDRUN_ELOST, "%s is lost: %s", d->name, d->lost_why);
  } else {
    wrc = cu_use(b, dev, rc ? &werr : err);
    if (wrc == SCHEDRUN_OK)
      wrc = l->timed ? cu_wait_event(b, d, l->evs[EV_END], l->deadline_ns, f, rc ? &werr : err)
                     : cu_wait_stream(b, d, l->deadline_ns, f, rc ? &werr : err);
  }
  uint64_t t_done = now_ns();
  size_t upto = l->n;
  if (rc || wrc) {
    /* failed while queueing ops[queued] (rc; what was queued before it ran
     * when the wait says so), or while running: the jobs before the first
     * boundary not reached are done */
    upto = rc && wrc == SCHEDRUN_OK ? l->queued : 0;
    for (uint32_t k = 0; wrc && k < l->nbound && b->api.cuEventQuery(l->evs[EV_JOB(l->nseq, k)]) == CUDA_SUCCESS; k++)
      upto = l->bound[k];
  }
  /* the steps done: what they read back, when their graphs ended */
  uint64_t off = 0;
  uint32_t seqs = 0;
  for (size_t i = 0; i < upto; i++) {
    gpu_batch_op *o = &l->ops[i];
    if (o->kind == GB_DTOH && o->bytes) memcpy(o->dst, (uint8_t *)l->stage + off, o->bytes);
    if (o->kind == GB_SEQ) {
      float ms = 0;
      CUresult r = rc || wrc || !l->timed ? CUDA_ERROR_NOT_READY
                                          : b->api.cuEventElapsedTime(&ms, l->evs[EV_SEQ(seqs)], l->evs[EV_END]);
      seqs++;
      uint64_t span = t_done - l->t_begin;
      uint64_t after = r == CUDA_SUCCESS && ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
      o->t_end = t_done - (after < span ? after : span);
    }
    off += stage_len(o);
  }
  *done = upto;
  l->ops = NULL;
  schedrun_error_clear(&werr);
  return rc ? rc : wrc;
}

int cu_run_batch(gpu_backend *g, int dev, gpu_batch_op *ops, size_t n, uint64_t deadline_ns, size_t *done,
                 gpu_failure *f, schedrun_error_t *err) {
  *done = 0;
  *f = (gpu_failure){GPU_NO_TAG, false};
  int rc = cu_batch_begin(g, dev, ops, n, deadline_ns, false, err);
  if (rc) {
    f->lost = rc == SCHEDRUN_ELOST;
    return rc;
  }
  return cu_batch_finish(g, dev, done, f, err);
}

void cu_batch_release(cuda_backend *b, cu_device *d) {
  for (int k = 0; k < 2; k++) {
    cu_lane *l = &d->lanes[k];
    for (uint32_t i = 0; i < l->nevs; i++) b->api.cuEventDestroy(l->evs[i]);
    free(l->evs);
    if (l->copied) b->api.cuEventDestroy(l->copied);
    if (l->stage) b->api.cuMemFreeHost(l->stage);
    free(l->bound);
    schedrun_error_clear(&l->err);
    memset(l, 0, sizeof *l);
  }
  if (d->copy_stream) b->api.cuStreamDestroy(d->copy_stream);
  d->copy_stream = NULL;
}
