/*
 * Launching a CUDA sequence: its segments in order on the device's stream
 * (graphs, brought up to date first where their nodes changed in the graph;
 * while loops driven from the host, a deadline-aware wait per trip), then
 * one wait for the whole. See cuda_graph.c for how sequences are built.
 */
#include <stdbool.h>
#include <string.h>

#include "gpu/cuda/cuda_internal.h"
#include "gpu/cuda/cuda_seq.h"

/* Carries a stale segment's graph into its instantiated graph: one
 * cuGraphExecUpdate, or, where the driver refuses the update, the graph
 * instantiated afresh (the refusal is not an error: the graph holds the
 * parameters wanted). */
static int refresh(cuda_backend *b, cu_device *d, cu_segment *sg, schedrun_error_t *err) {
  cu_api *a = &b->api;
  CUgraphExecUpdateResultInfo info;
  memset(&info, 0, sizeof info);
  CUresult r = a->cuGraphExecUpdate(sg->exec, sg->graph, &info);
  if (r != CUDA_SUCCESS) {
    if (r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) return cu_fail(a, err, r, "cuGraphExecUpdate", d->name);
    CUgraphExec fresh = NULL; /* the old one stays until this one exists */
    CU_CHECK(a, a->cuGraphInstantiateWithFlags(&fresh, sg->graph, 0), d->name, err);
    a->cuGraphExecDestroy(sg->exec);
    sg->exec = fresh;
  }
  sg->stale = false;
  return SCHEDRUN_OK;
}

/* ---- launching ---- */

int cu_host_trip(cuda_backend *b, cu_device *d, uint64_t flag, uint32_t t, uint32_t max_trips, uint64_t deadline_ns,
                 gpu_failure *f, bool *go, schedrun_error_t *err) {
  int32_t v = 0;
  *go = false;
  atomic_fetch_add(&d->host_trips, 1);
  int rc = cu_wait_stream(b, d, deadline_ns, f, err);
  if (rc) return rc;
  if (atomic_load(&b->abandoned))
    return err_set(err, SCHEDRUN_ELOST, "%s: abandoned in a while loop run from the host (trip %u)", d->name, t + 1);
  if (deadline_ns && now_ns() >= deadline_ns)
    return err_set(err, SCHEDRUN_ETIMEOUT, "%s: the job ran past its deadline in a while loop run from the "
                   "host (trip %u of at most %u)", d->name, t + 1, max_trips);
  CU_CHECK(&b->api, b->api.cuMemcpyDtoH(&v, (CUdeviceptr)flag, sizeof v), d->name, err);
  *go = v != 0;
  return SCHEDRUN_OK;
}

int cu_seq_begin(gpu_seq *s, gpu_failure *f, schedrun_error_t *err) {
  cu_device *d = &s->b->devs[s->dev];
  int rc = cu_launch_begin(d, f, err);
  if (rc) return rc;
  if (!s->finalized || s->parent) return err_set(err, SCHEDRUN_EINTERNAL, "%s: launch before finalize", d->name);
  return cu_use(s->b, s->dev, err);
}

/* Runs s's segments: graphs, and while loops driven from the host, whose
 * every trip waits for the stream through cu_wait_stream (the job's
 * deadline, a close that abandons the device, a kernel's fault) and stops
 * once the deadline has passed, the device idle between trips and not lost. */
static int run_segments(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_api *a = &b->api;
  cu_device *d = &b->devs[s->dev];
  for (uint32_t i = 0; i < s->nsegs; i++) {
    cu_segment *sg = &s->segs[i];
    if (sg->kind == SEG_GRAPH) {
      int rc = sg->stale ? refresh(b, d, sg, err) : SCHEDRUN_OK;
      if (rc) return rc;
      CU_CHECK(a, a->cuGraphLaunch(sg->exec, d->stream), d->name, err);
      atomic_fetch_add(&d->launches, 1);
      continue;
    }
    for (uint32_t t = 0; t < sg->max_trips; t++) {
      bool go = false;
      int rc = cu_host_trip(b, d, sg->flag, t, sg->max_trips, deadline_ns, f, &go, err);
      if (rc) return rc;
      if (!go) break;
      if ((rc = run_segments(sg->body, deadline_ns, f, err))) return rc;
    }
  }
  return SCHEDRUN_OK;
}

/* Counts the kernel nodes of s and of its loops' bodies; *tag gets the last
 * one's tag. */
static uint32_t count_kernels(const gpu_seq *s, uint32_t *tag) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->n; i++) {
    const cu_node *cn = &s->nodes[i];
    if (cn->kind == GN_LAUNCH) {
      n++;
      *tag = cn->tag;
    } else if (cn->kind == GN_WHILE) {
      const gpu_seq *body = cn->body ? cn->body : s->segs[cn->seg].body; /* conditional, or host-driven */
      if (body) n += count_kernels(body, tag);
    }
  }
  return n;
}

int cu_seq_device(const gpu_seq *s) { return s->dev; }

int cu_seq_enqueue(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  cu_device *d = &s->b->devs[s->dev];
  if (!s->finalized || s->parent) return err_set(err, SCHEDRUN_EINTERNAL, "%s: launch before finalize", d->name);
  return run_segments(s, deadline_ns, f, err);
}

int cu_seq_launch(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_device *d = &b->devs[s->dev];
  gpu_failure ignored;
  if (!f) f = &ignored;
  int rc = cu_seq_begin(s, f, err);
  if (rc == SCHEDRUN_OK) rc = run_segments(s, deadline_ns, f, err);
  if (rc == SCHEDRUN_OK) rc = cu_wait_stream(b, d, deadline_ns, f, err);
  /* A driver says that a graph's work failed, not which node: when the
   * sequence holds one kernel, the failure is named after it. */
  uint32_t tag = GPU_NO_TAG;
  if (rc != SCHEDRUN_OK && f->tag == GPU_NO_TAG && count_kernels(s, &tag) == 1) f->tag = tag;
  return rc;
}
