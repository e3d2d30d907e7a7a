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
 * one to pageable memory would return only when done). Staging is reused
 * by the next batch only: each batch ends with a wait.
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

int cu_batch_room(cuda_backend *b, cu_device *d, uint64_t bytes, uint32_t nevs, schedrun_error_t *err) {
  cu_api *a = &b->api;
  if (bytes > d->stage_cap) {
    uint64_t cap = d->stage_cap ? d->stage_cap : 1u << 20;
    while (cap < bytes) cap *= 2;
    if (d->stage) a->cuMemFreeHost(d->stage); /* the last batch was waited for */
    d->stage = NULL;
    d->stage_cap = 0;
    CU_CHECK(a, a->cuMemHostAlloc(&d->stage, (size_t)cap, 0), d->name, err);
    d->stage_cap = cap;
  }
  if (nevs > d->nevs) {
    CUevent *evs = realloc(d->evs, nevs * sizeof *evs);
    if (!evs) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    d->evs = evs;
    for (; d->nevs < nevs; d->nevs++) CU_CHECK(a, a->cuEventCreate(&d->evs[d->nevs], CU_EVENT_DEFAULT), d->name, err);
  }
  return SCHEDRUN_OK;
}

/* The events of a batch of nseq sequences: evs[0] at its end, then one
 * after each sequence, then one at each boundary between jobs. */
#define EV_END 0
#define EV_SEQ(k) (1 + (k))
#define EV_JOB(nseq, k) (1 + (nseq) + (k))

/* Queues ops[i] (host bytes already staged at *at); evs[EV_SEQ(*seqs)] is
 * recorded after a sequence. */
static int queue_op(cuda_backend *b, cu_device *d, int dev, gpu_batch_op *o, uint8_t *at, uint32_t *seqs,
                    uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  cu_api *a = &b->api;
  CUstream st = d->stream;
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
    assert(o->seq && cu_seq_device(o->seq) == dev); /* recorded for this device */
    int rc = cu_seq_enqueue(o->seq, deadline_ns, f, err);
    if (rc) return rc;
    CU_CHECK(a, a->cuEventRecord(d->evs[EV_SEQ(*seqs)], st), d->name, err);
    ++*seqs;
    break;
  }
  case GB_DTOH: CU_CHECK(a, a->cuMemcpyDtoHAsync(at, (CUdeviceptr)o->addr, o->bytes, st), d->name, err); break;
  }
  return SCHEDRUN_OK;
}

int cu_run_batch(gpu_backend *g, int dev, gpu_batch_op *ops, size_t n, uint64_t deadline_ns, size_t *done,
                 gpu_failure *f, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  *done = 0;
  f->tag = GPU_NO_TAG;
  f->lost = false;
  if (dev < 0 || dev >= b->ndevices) return err_set(err, SCHEDRUN_EINVAL, "no cuda device %d", dev);
  cu_device *d = &b->devs[dev];
  int rc = cu_launch_begin(d, f, err);
  if (rc) return rc;
  uint64_t staged = 0;
  uint32_t nseq = 0;
  for (size_t i = 0; i < n; i++) {
    staged += stage_len(&ops[i]);
    nseq += ops[i].kind == GB_SEQ;
  }
  rc = cu_use(b, dev, err);
  if (rc == SCHEDRUN_OK) rc = cu_batch_room(b, d, staged, 2 * nseq + 1, err);
  /* where each job after the first starts */
  size_t *bound = rc == SCHEDRUN_OK ? malloc((nseq ? nseq : 1) * sizeof *bound) : NULL;
  if (rc == SCHEDRUN_OK && !bound) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  if (rc) return rc;
  uint8_t *stage = d->stage;
  /* the host bytes first: every copy from them then runs without the CPU */
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    if (ops[i].kind == GB_HTOD && ops[i].bytes) memcpy(stage + off, ops[i].src, ops[i].bytes);
    off += stage_len(&ops[i]);
  }
  assert(off == staged);
  uint64_t t_begin = now_ns();
  uint32_t seqs = 0, nbound = 0;
  size_t queued = 0;
  bool after_seq = false;
  off = 0;
  for (; queued < n && rc == SCHEDRUN_OK; queued++) {
    gpu_batch_kind kind = ops[queued].kind;
    if (after_seq && kind != GB_DTOH) {
      /* the job before has queued its reads back: a boundary */
      CUresult r = b->api.cuEventRecord(d->evs[EV_JOB(nseq, nbound)], d->stream);
      if (r != CUDA_SUCCESS) {
        rc = cu_fail(&b->api, err, r, "cuEventRecord", d->name);
        break;
      }
      bound[nbound++] = queued;
      after_seq = false;
    }
    rc = queue_op(b, d, dev, &ops[queued], stage + off, &seqs, deadline_ns, f, err);
    if (rc) break;
    after_seq |= kind == GB_SEQ;
    off += stage_len(&ops[queued]);
  }
  assert(rc || (seqs == nseq && nbound + (nseq > 0) == nseq)); /* a boundary between each two jobs */
  /* without the end's event every step still ran: only the times are not known */
  bool timed = rc == SCHEDRUN_OK && b->api.cuEventRecord(d->evs[EV_END], d->stream) == CUDA_SUCCESS;
  /* what was queued runs to its end (or the device is lost) before the
   * staging is read or used again */
  schedrun_error_t werr = {0};
  int wrc = cu_wait_stream(b, d, deadline_ns, f, rc ? &werr : err);
  uint64_t t_done = now_ns();
  size_t upto = n;
  if (rc || wrc) {
    /* failed while queueing ops[queued] (rc; what was queued before it ran
     * when the wait says so), or while running: the jobs before the first
     * boundary not reached are done */
    upto = rc && wrc == SCHEDRUN_OK ? queued : 0;
    for (uint32_t k = 0; wrc && k < nbound && b->api.cuEventQuery(d->evs[EV_JOB(nseq, k)]) == CUDA_SUCCESS; k++)
      upto = bound[k];
  }
  free(bound);
  /* the steps done: what they read back, when their graphs ended */
  off = 0;
  seqs = 0;
  for (size_t i = 0; i < upto; i++) {
    gpu_batch_op *o = &ops[i];
    if (o->kind == GB_DTOH && o->bytes) memcpy(o->dst, stage + off, o->bytes);
    if (o->kind == GB_SEQ) {
      float ms = 0;
      CUresult r = rc || wrc || !timed ? CUDA_ERROR_NOT_READY
                                       : b->api.cuEventElapsedTime(&ms, d->evs[EV_SEQ(seqs)], d->evs[EV_END]);
      seqs++;
      uint64_t after = r == CUDA_SUCCESS && ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
      o->t_end = t_done - (after < t_done - t_begin ? after : t_done - t_begin);
    }
    off += stage_len(o);
  }
  *done = upto;
  schedrun_error_clear(&werr);
  return rc ? rc : wrc;
}

void cu_batch_release(cuda_backend *b, cu_device *d) {
  for (uint32_t i = 0; i < d->nevs; i++) b->api.cuEventDestroy(d->evs[i]);
  free(d->evs);
  d->evs = NULL;
  d->nevs = 0;
  if (d->stage) b->api.cuMemFreeHost(d->stage);
  d->stage = NULL;
  d->stage_cap = 0;
}
