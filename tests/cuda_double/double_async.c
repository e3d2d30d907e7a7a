/*
 * The double's asynchronous copies and fills, and its events, under the
 * driver's documented rules ("API synchronization behavior"):
 *
 * - a copy between device memory and pinned host memory (cuMemHostAlloc),
 *   a device-to-device copy and a fill are queued on the stream and return
 *   at once: a pinned source is read when the copy runs, not when it was
 *   queued, so a caller that reuses it too early is caught;
 * - a copy from pageable host memory waits for the stream, then copies
 *   (the driver may stage it and return before the DMA, but the source may
 *   be reused when the call returns); a copy to pageable host memory returns
 *   only once it is done;
 * - cuStreamWaitEvent holds the stream's later work until the event's
 *   latest record at the call has run (at once when never recorded), even
 *   when that record is on a stream of another context;
 * - an event is complete once the work queued before its latest record has
 *   run (at once when never recorded); cuEventElapsedTime needs two
 *   recorded, complete events with timing; destroying an event whose record
 *   is still queued returns at once and frees it when the record has run.
 *
 * A context's fault (double_stream.c) is returned by every one of them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "double.h"

/* The current context's stream s, not faulted. */
static CUresult live_stream(CUstream s, dstream **st) {
  CUresult r = dbl_stream_of(s, st);
  return r == CUDA_SUCCESS ? dbl_sticky((*st)->ctx) : r;
}

static CUresult queue_copy(dstream *st, uint64_t dst, uint64_t src, uint64_t n) {
  dwork w = {.type = CU_GRAPH_NODE_TYPE_MEMCPY, .ctx = st->ctx};
  w.u.copy.dst = dst;
  w.u.copy.src = src;
  w.u.copy.bytes = n;
  return dbl_enqueue_kernel(st, &w);
}

static CUresult d_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  ENTER("cuMemcpyHtoDAsync");
  dstream *st;
  CUresult r = live_stream(s, &st);
  if (r != CUDA_SUCCESS) LEAVE(r);
  if (n == 0) LEAVE(CUDA_SUCCESS);
  if (!src || !dbl_range(dst, n, NULL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (dbl_pinned(src, n)) {
    dbl_count("copy-async-pinned");
    LEAVE(queue_copy(st, dst, (uint64_t)(uintptr_t)src, n));
  }
  /* pageable: after the stream's work, and done before the call returns */
  dbl_count("copy-async-pageable");
  r = dbl_wait(st->ctx, st, "cuMemcpyHtoDAsync");
  if (r == CUDA_SUCCESS) memcpy((void *)(uintptr_t)dst, src, n);
  LEAVE(r);
}

static CUresult d_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER("cuMemcpyDtoHAsync");
  dstream *st;
  CUresult r = live_stream(s, &st);
  if (r != CUDA_SUCCESS) LEAVE(r);
  if (n == 0) LEAVE(CUDA_SUCCESS);
  if (!dst || !dbl_range(src, n, NULL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (dbl_pinned(dst, n)) {
    dbl_count("copy-async-pinned");
    LEAVE(queue_copy(st, (uint64_t)(uintptr_t)dst, src, n));
  }
  dbl_count("copy-async-pageable");
  r = dbl_wait(st->ctx, st, "cuMemcpyDtoHAsync");
  if (r == CUDA_SUCCESS) memcpy(dst, (const void *)(uintptr_t)src, n);
  LEAVE(r);
}

static CUresult d_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER("cuMemcpyDtoDAsync");
  dstream *st;
  CUresult r = live_stream(s, &st);
  if (r != CUDA_SUCCESS) LEAVE(r);
  if (n == 0) LEAVE(CUDA_SUCCESS);
  if (!dbl_range(dst, n, NULL) || !dbl_range(src, n, NULL)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (dst < src + n && src < dst + n) LEAVE(CUDA_ERROR_INVALID_VALUE); /* overlapping: undefined on a driver */
  LEAVE(queue_copy(st, dst, src, n));
}

/* A fill queued on stream s: `height` rows of `width` elements of esize
 * bytes (1 or 4), `pitch` bytes apart, each the low bytes of v; dst aligned
 * to esize and every row inside one allocation. */
static CUresult queue_set(CUstream s, CUdeviceptr dst, size_t pitch, unsigned v, unsigned esize, size_t width,
                          size_t height) {
  dstream *st;
  CUresult r = live_stream(s, &st);
  if (r != CUDA_SUCCESS) return r;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst % esize || width > SIZE_MAX / esize || pitch < width * esize ||
      (height > 1 && pitch > (SIZE_MAX - width * esize) / (height - 1)) ||
      !dbl_range(dst, (height - 1) * pitch + width * esize, NULL))
    return CUDA_ERROR_INVALID_VALUE;
  dwork w = {.type = CU_GRAPH_NODE_TYPE_MEMSET, .ctx = st->ctx};
  w.u.set = (CUDA_MEMSET_NODE_PARAMS){.dst = dst, .pitch = pitch, .value = v, .elementSize = esize, .width = width,
                                      .height = height};
  return dbl_enqueue_kernel(st, &w);
}

static CUresult d_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  ENTER("cuMemsetD8Async");
  LEAVE(queue_set(s, dst, n, v, 1, n, 1));
}

static CUresult d_cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s) {
  ENTER("cuMemsetD32Async");
  LEAVE(queue_set(s, dst, n <= SIZE_MAX / 4 ? n * 4 : 0, v, 4, n, 1));
}

/* Rows of `width` 32-bit values, `pitch` bytes apart. */
static CUresult d_cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned v, size_t width, size_t height,
                                     CUstream s) {
  ENTER("cuMemsetD2D32Async");
  LEAVE(queue_set(s, dst, pitch, v, 4, width, height));
}

/* ---- events ---- */

static CUresult d_cuEventCreate(CUevent *out, unsigned flags) {
  ENTER("cuEventCreate");
  NEED_CTX(x);
  if (!out || (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)) ||
      ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
    LEAVE(CUDA_ERROR_INVALID_VALUE);
  devent *ev = dbl_new(K_EVENT, sizeof *ev);
  if (!ev) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  ev->ctx = x;
  ev->flags = flags;
  *out = (CUevent)ev;
  LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuEventRecord(CUevent e, CUstream s) {
  ENTER("cuEventRecord");
  NEED_INIT();
  if (!dbl_live(e, K_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  devent *ev = (devent *)e;
  dstream *st;
  CUresult r = live_stream(s, &st);
  if (r != CUDA_SUCCESS) LEAVE(r);
  if (st->ctx != ev->ctx) LEAVE(CUDA_ERROR_INVALID_HANDLE); /* the event and the stream of one context */
  pthread_mutex_lock(&dbl_qlock);
  ev->issued++;
  pthread_mutex_unlock(&dbl_qlock);
  r = dbl_enqueue_event(st, ev);
  dbl_count("event-record");
  if (r != CUDA_SUCCESS) {
    pthread_mutex_lock(&dbl_qlock);
    ev->issued--;
    pthread_mutex_unlock(&dbl_qlock);
  }
  LEAVE(r);
}

static CUresult d_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  ENTER("cuStreamWaitEvent");
  NEED_INIT();
  if (!dbl_live(e, K_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  if (flags != 0) LEAVE(CUDA_ERROR_INVALID_VALUE); /* CU_EVENT_WAIT_DEFAULT */
  dstream *st;
  CUresult r = live_stream(s, &st);
  if (r != CUDA_SUCCESS) LEAVE(r);
  dbl_count("stream-wait-event");
  LEAVE(dbl_enqueue_wait(st, (devent *)e));
}

static CUresult d_cuEventQuery(CUevent e) {
  ENTER("cuEventQuery");
  NEED_INIT();
  if (!dbl_live(e, K_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  devent *ev = (devent *)e;
  CUresult r = dbl_sticky(ev->ctx);
  if (r != CUDA_SUCCESS) LEAVE(r);
  pthread_mutex_lock(&dbl_qlock);
  r = ev->done < ev->issued ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  pthread_mutex_unlock(&dbl_qlock);
  LEAVE(r);
}

static CUresult d_cuEventSynchronize(CUevent e) {
  ENTER("cuEventSynchronize");
  NEED_INIT();
  if (!dbl_live(e, K_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  LEAVE(dbl_event_wait((devent *)e, "cuEventSynchronize"));
}

static CUresult d_cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
  ENTER("cuEventElapsedTime");
  NEED_INIT();
  if (!ms) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (!dbl_live(start, K_EVENT) || !dbl_live(end, K_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  const devent *a = (const devent *)start, *b = (const devent *)end;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  CUresult r = dbl_sticky(a->ctx);
  if (r == CUDA_SUCCESS) r = dbl_sticky(b->ctx);
  if (r != CUDA_SUCCESS) LEAVE(r);
  pthread_mutex_lock(&dbl_qlock);
  if (!a->issued || !b->issued) r = CUDA_ERROR_INVALID_HANDLE; /* never recorded */
  else if (a->done < a->issued || b->done < b->issued) r = CUDA_ERROR_NOT_READY;
  else *ms = (float)((double)((int64_t)(b->t_ns - a->t_ns)) / 1e6);
  pthread_mutex_unlock(&dbl_qlock);
  LEAVE(r);
}

static CUresult d_cuEventDestroy(CUevent e) {
  ENTER("cuEventDestroy");
  NEED_INIT();
  if (!dbl_live(e, K_EVENT)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  /* returns at once: a record still queued frees it when it runs */
  dbl_forget(e);
  dbl_event_release((devent *)e);
  LEAVE(CUDA_SUCCESS);
}

#define E(name, since) {#name, (void *)d_##name, since}
const dbl_entry dbl_async_entries[] = {
    E(cuMemcpyHtoDAsync, 3020), E(cuMemcpyDtoHAsync, 3020),   E(cuMemcpyDtoDAsync, 3020), E(cuMemsetD8Async, 3020),
    E(cuEventCreate, 2000),     E(cuEventRecord, 2000),       E(cuStreamWaitEvent, 3020),       E(cuEventQuery, 2000),      E(cuEventSynchronize, 2000),
    E(cuEventElapsedTime, 2000), E(cuEventDestroy, 4000),    E(cuMemsetD32Async, 3020), E(cuMemsetD2D32Async, 3020),
    {NULL, NULL, 0}};
#undef E
