/*
 * A sequence run node by node, timed (gpu_ops.seq_launch_timed): what the
 * first jobs of a device do, so that the trace shows each node's time on
 * CUDA devices as on host ones.
 *
 * A graph launch says nothing of its nodes' times, so a timed job queues its
 * top-level nodes one by one on the device's stream, as they were last
 * given (cu_node.node): kernels with cuLaunchKernel, copies and fills with
 * their asynchronous calls (or the fill kernel, where the recording uses
 * it), while loops driven from the host (the flag read between trips, as a
 * host-driven segment does). An event recorded before the first node and
 * after each gives the nodes' durations; placed on the host's clock by the
 * wait's end, less the device's time after each event (cuEventElapsedTime
 * to the last one). The results are those of the graph: the same work in
 * the same order on the same stream; only the launch overhead differs,
 * and the jobs after TIMED_JOBS launch the graph.
 */
#include <assert.h>
#include <string.h>

#include "gpu/cuda/cuda_seq.h"

static int run_nodes(gpu_seq *s, uint32_t max_timed, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err);

static int launch_kernel(cuda_backend *b, cu_device *d, const CUDA_KERNEL_NODE_PARAMS *kp, schedrun_error_t *err) {
  CU_CHECK(&b->api,
           b->api.cuLaunchKernel(kp->func, kp->gridDimX, kp->gridDimY, kp->gridDimZ, kp->blockDimX, kp->blockDimY,
                                 kp->blockDimZ, kp->sharedMemBytes, d->stream, kp->kernelParams, NULL),
           d->name, err);
  return SCHEDRUN_OK;
}

/* A while loop driven from the host: at most max_trips trips of body while
 * the flag is non-zero, each trip after the device's work so far. */
static int run_loop(cuda_backend *b, cu_device *d, gpu_seq *body, uint64_t flag, uint32_t max_trips,
                    uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  for (uint32_t t = 0; t < max_trips; t++) {
    bool go = false;
    int rc = cu_host_trip(b, d, flag, t, max_trips, deadline_ns, f, &go, err);
    if (rc) return rc;
    if (!go) break;
    if ((rc = run_nodes(body, 0, deadline_ns, f, err))) return rc;
  }
  return SCHEDRUN_OK;
}

static int run_node(gpu_seq *s, cu_node *cn, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_device *d = &b->devs[s->dev];
  cu_api *a = &b->api;
  const gpu_node *n = &cn->node;
  CUDA_KERNEL_NODE_PARAMS kp;
  switch (cn->kind) {
  case GN_LAUNCH: cu_kernel_params(cn, n, &kp); return launch_kernel(b, d, &kp, err);
  case GN_COPY:
    if (n->u.copy.bytes)
      CU_CHECK(a, a->cuMemcpyDtoDAsync((CUdeviceptr)n->u.copy.dst, (CUdeviceptr)n->u.copy.src, n->u.copy.bytes, d->stream),
               d->name, err);
    return SCHEDRUN_OK;
  case GN_FILL: {
    if (cn->fill_kernel) {
      cu_fill_kernel_params(d, cn, n, &kp);
      return launch_kernel(b, d, &kp, err);
    }
    CUDA_MEMSET_NODE_PARAMS mp[2];
    int k = cu_fill_params(n, mp);
    for (int i = 0; i < k; i++) {
      const CUDA_MEMSET_NODE_PARAMS *m = &mp[i];
      if (m->height > 1)
        CU_CHECK(a, a->cuMemsetD2D32Async(m->dst, m->pitch, m->value, m->width, m->height, d->stream), d->name, err);
      else if (m->elementSize == 1)
        CU_CHECK(a, a->cuMemsetD8Async(m->dst, (unsigned char)m->value, m->width, d->stream), d->name, err);
      else
        CU_CHECK(a, a->cuMemsetD32Async(m->dst, m->value, m->width, d->stream), d->name, err);
    }
    return SCHEDRUN_OK;
  }
  case GN_WHILE: {
    /* a conditional loop's body, or a host-driven segment's */
    gpu_seq *body = cn->body ? cn->body : n->u.loop.body;
    assert(body);
    return run_loop(b, d, body, n->u.loop.flag, n->u.loop.max_trips, deadline_ns, f, err);
  }
  default: return err_set(err, SCHEDRUN_EINTERNAL, "unknown node kind %d", (int)cn->kind);
  }
}

/* Queues s's nodes; the first max_timed each followed by event
 * evs[EV_NODE(i)] (evs[0] was recorded before the first). */
#define EV_NODE(i) (1 + (i))
static int run_nodes(gpu_seq *s, uint32_t max_timed, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_device *d = &b->devs[s->dev];
  for (uint32_t i = 0; i < s->n; i++) {
    int rc = run_node(s, &s->nodes[i], deadline_ns, f, err);
    if (rc) {
      if (f->tag == GPU_NO_TAG) f->tag = s->nodes[i].tag;
      return rc;
    }
    if (i < max_timed) CU_CHECK(&b->api, b->api.cuEventRecord(d->lanes[0].evs[EV_NODE(i)], d->stream), d->name, err);
  }
  return SCHEDRUN_OK;
}

int cu_seq_launch_timed(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, uint64_t *times, uint32_t max, uint32_t *n,
                        schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_device *d = &b->devs[s->dev];
  gpu_failure ignored;
  if (!f) f = &ignored;
  *n = 0;
  uint32_t nt = s->n < max ? s->n : max;
  int rc = cu_seq_begin(s, f, err);
  assert(d->out == 0); /* lanes[0]'s events are free: no batch is out */
  if (rc == SCHEDRUN_OK) rc = cu_batch_room(b, d, &d->lanes[0], 0, nt + 1, err);
  if (rc) return rc;
  const CUevent *evs = d->lanes[0].evs;
  CU_CHECK(&b->api, b->api.cuEventRecord(evs[0], d->stream), d->name, err);
  uint64_t t_begin = now_ns();
  atomic_fetch_add(&d->launches, 1);
  rc = run_nodes(s, nt, deadline_ns, f, err);
  schedrun_error_t werr = {0};
  int wrc = cu_wait_stream(b, d, deadline_ns, f, rc ? &werr : err);
  schedrun_error_clear(&werr);
  if (rc || wrc) {
    /* the first node whose end was not reached, when the device can say */
    for (uint32_t i = 0; f->tag == GPU_NO_TAG && i < nt; i++) {
      CUresult q = b->api.cuEventQuery(evs[EV_NODE(i)]);
      if (q == CUDA_ERROR_NOT_READY) f->tag = s->nodes[i].tag;
      if (q != CUDA_SUCCESS) break; /* after a fault every call says the fault: not known */
    }
    return rc ? rc : wrc;
  }
  uint64_t t_done = now_ns(), span = t_done - t_begin;
  /* on the host's clock: the wait's end less the device's time after each event */
  uint64_t at[2];
  for (uint32_t i = 0; i < nt; i++) {
    for (int e = 0; e < 2; e++) {
      float ms = 0;
      CUresult r = b->api.cuEventElapsedTime(&ms, evs[i + (uint32_t)e], evs[nt]);
      uint64_t after = r == CUDA_SUCCESS && ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
      at[e] = t_done - (after < span ? after : span);
    }
    times[3 * i] = s->nodes[i].tag;
    times[3 * i + 1] = at[0];
    times[3 * i + 2] = at[1] < at[0] ? at[0] : at[1];
  }
  *n = nt;
  return SCHEDRUN_OK;
}
