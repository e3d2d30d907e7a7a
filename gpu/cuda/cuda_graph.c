/*
 * The CUDA backend's sequences: CUDA graphs, built once, updated in place,
 * launched many times.
 *
 * A sequence is a list of segments run in order on the device's stream:
 *   - a graph segment: a CUDA graph whose nodes (kernel, memcpy, memset,
 *     empty) form a chain in program order, instantiated once by
 *     seq_finalize and updated with the cuGraphExec*NodeSetParams calls;
 *   - a while segment: a body sequence repeated while an i32 flag in device
 *     memory is non-zero (at most max_trips), the flag read back between
 *     trips. Used only where conditional nodes cannot be.
 *
 * Where the driver has conditional nodes (12.3 on) and the condition kernel
 * can be built (NVRTC and the device runtime library, linked by the
 * driver's JIT linker), a while loop is a node of the graph instead:
 *
 *   ... -> cond(first) -> WHILE(handle) { body ... -> cond(next) } -> ...
 *
 * The condition kernel reads the flag, counts trips against max_trips in a
 * 16-byte parameter block of its own, and sets the handle; the loop then
 * costs no synchronisation, and a job is one graph launch. Changing the
 * loop's flag or bound rewrites the parameter block, not the graph.
 *
 * A node is updated in place by the cuGraphExec*NodeSetParams call of its
 * kind, which the documentation promises for the nodes of the graph that was
 * instantiated only. A segment holding a conditional node (and so a body,
 * whose nodes are another graph's) is updated as a whole instead: its nodes
 * and its bodies' nodes take the new parameters in the graph
 * (cuGraph*NodeSetParams), the segment is marked stale, and its next launch
 * carries them into the instantiated graph with one cuGraphExecUpdate, which
 * documents body nodes under the same rules (or instantiates it afresh, if
 * the driver refuses).
 *
 * A fill whose size changes from job to job is a kernel node of the fill
 * kernel (cuda_own.c), whose arguments always update in place. Sequences are
 * launched by cuda_launch.c, and run node by node, timed, by cuda_timed.c.
 *
 * What a driver refuses to update in place is refused here before the call
 * where the rule is known (a 2-D memset on a 12.x driver, a changed 2-D
 * shape, a copy or fill that becomes or stops being empty); the record actor
 * then builds the recording afresh.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda/cuda_internal.h"
#include "gpu/cuda/cuda_seq.h"

static CUresult add_cond_kernel(gpu_seq *s, cu_segment *sg, CUgraphConditionalHandle h, uint64_t params, int first,
                                CUgraphNode *out) {
  cu_device *d = &s->b->devs[s->dev];
  uint64_t slots[3] = {h, params, (uint64_t)(uint32_t)first};
  void *kp[3];
  cuda_marshal_args(slots, 3, kp);
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.func = d->cond_fn;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = kp;
  CUgraphNode dep = sg->last;
  CUresult r = s->b->api.cuGraphAddKernelNode(out, sg->graph, dep ? &dep : NULL, dep ? 1 : 0, &p);
  if (r == CUDA_SUCCESS) sg->last = *out;
  return r;
}

/* ---- building ---- */

static gpu_seq *seq_new(cuda_backend *b, int dev) {
  gpu_seq *s = calloc(1, sizeof *s);
  if (s) {
    s->owner = &b->base;
    s->b = b;
    s->dev = dev;
  }
  return s;
}

int cu_seq_create(gpu_backend *g, int dev, gpu_seq **out, schedrun_error_t *err) {
  cuda_backend *b = cb(g);
  if (dev < 0 || dev >= b->ndevices) return err_set(err, SCHEDRUN_EINVAL, "no cuda device %d", dev);
  *out = seq_new(b, dev);
  return *out ? SCHEDRUN_OK : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
}

void cu_seq_destroy(gpu_seq *s) {
  if (!s) return;
  cu_api *a = &s->b->api;
  /* a stuck device's context is left alone (cuda_internal.h) */
  bool here = !atomic_load(&s->b->devs[s->dev].stuck);
  if (here) cu_use(s->b, s->dev, NULL);
  for (uint32_t i = 0; i < s->nsegs; i++) {
    cu_segment *sg = &s->segs[i];
    if (here && sg->exec) a->cuGraphExecDestroy(sg->exec);
    if (here && sg->graph && sg->owned) a->cuGraphDestroy(sg->graph); /* with it, its conditional bodies */
    cu_seq_destroy(sg->body);
  }
  for (uint32_t i = 0; i < s->n; i++) {
    cu_node *cn = &s->nodes[i];
    free(cn->args);
    free(cn->params);
    cu_seq_destroy(cn->body);
    if (here && cn->cond_params) a->cuMemFree((CUdeviceptr)cn->cond_params);
  }
  free(s->segs);
  free(s->nodes);
  free(s);
}

/* Appends a segment; a graph segment gets a graph of its own, unless it is
 * given one (a conditional node's body, which that node owns). */
static cu_segment *push_segment(gpu_seq *s, int kind, CUgraph given, schedrun_error_t *err) {
  if (s->nsegs == s->segcap) {
    uint32_t cap = s->segcap ? s->segcap * 2 : 4;
    cu_segment *p = realloc(s->segs, cap * sizeof *p);
    if (!p) {
      err_set(err, SCHEDRUN_ENOMEM, "out of memory");
      return NULL;
    }
    s->segs = p;
    s->segcap = cap;
  }
  cu_segment *sg = &s->segs[s->nsegs];
  memset(sg, 0, sizeof *sg);
  sg->kind = kind;
  sg->graph = given;
  if (kind == SEG_GRAPH && !given) {
    CUresult r = s->b->api.cuGraphCreate(&sg->graph, 0);
    if (r != CUDA_SUCCESS) {
      cu_fail(&s->b->api, err, r, "cuGraphCreate", s->b->devs[s->dev].name);
      return NULL;
    }
    sg->owned = true;
  }
  s->nsegs++;
  return sg;
}

void cu_kernel_params(const cu_node *cn, const gpu_node *n, CUDA_KERNEL_NODE_PARAMS *kp) {
  memset(kp, 0, sizeof *kp);
  kp->func = (CUfunction)n->u.launch.fn;
  kp->gridDimX = n->u.launch.grid[0];
  kp->gridDimY = n->u.launch.grid[1];
  kp->gridDimZ = n->u.launch.grid[2];
  kp->blockDimX = n->u.launch.block[0];
  kp->blockDimY = n->u.launch.block[1];
  kp->blockDimZ = n->u.launch.block[2];
  kp->sharedMemBytes = n->u.launch.shared;
  kp->kernelParams = cn->params;
}

/* A fill as the fill kernel's launch: cn->args and cn->params (4 each) hold
 * its arguments; as many blocks as the count needs, up to FILL_MAX_BLOCKS
 * (then each thread fills several elements), at least one. */
void cu_fill_kernel_params(const cu_device *d, cu_node *cn, const gpu_node *n, CUDA_KERNEL_NODE_PARAMS *kp) {
  assert(cn->nargs == 4);
  uint64_t count = n->u.fill.count, blocks = (count + FILL_BLOCK - 1) / FILL_BLOCK;
  cn->args[0] = n->u.fill.dst;
  cn->args[1] = count;
  cn->args[2] = n->u.fill.elem_size == 8 ? n->u.fill.pattern
                : n->u.fill.elem_size == 4 ? (uint32_t)n->u.fill.pattern : (uint8_t)n->u.fill.pattern;
  cn->args[3] = n->u.fill.elem_size;
  cuda_marshal_args(cn->args, 4, cn->params);
  memset(kp, 0, sizeof *kp);
  kp->func = d->fill_fn;
  kp->gridDimX = (unsigned)(blocks == 0 ? 1 : blocks > FILL_MAX_BLOCKS ? FILL_MAX_BLOCKS : blocks);
  kp->gridDimY = kp->gridDimZ = 1;
  kp->blockDimX = FILL_BLOCK;
  kp->blockDimY = kp->blockDimZ = 1;
  kp->kernelParams = cn->params;
}

static void copy_params(const gpu_node *n, CUDA_MEMCPY3D *cp) {
  memset(cp, 0, sizeof *cp);
  cp->srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp->srcDevice = (CUdeviceptr)n->u.copy.src;
  cp->dstMemoryType = CU_MEMORYTYPE_DEVICE;
  cp->dstDevice = (CUdeviceptr)n->u.copy.dst;
  cp->WidthInBytes = n->u.copy.bytes;
  cp->Height = 1;
  cp->Depth = 1;
}

/* A fill as memsets; returns how many (0 for an empty fill). 1- and 4-byte
 * elements directly; 8-byte elements as one 1-D memset of 4-byte elements
 * when both halves of the pattern are equal (0.0, say), else as two 4-byte
 * memsets over rows of pitch 8 (low and high halves). */
int cu_fill_params(const gpu_node *n, CUDA_MEMSET_NODE_PARAMS mp[2]) {
  memset(mp, 0, 2 * sizeof *mp);
  uint32_t es = n->u.fill.elem_size;
  uint64_t pat = n->u.fill.pattern;
  if (n->u.fill.count == 0) return 0;
  if (es == 1 || es == 4 || (es == 8 && (uint32_t)pat == (uint32_t)(pat >> 32))) {
    mp[0].dst = (CUdeviceptr)n->u.fill.dst;
    mp[0].value = (unsigned)(es == 1 ? (pat & 0xff) : (uint32_t)pat);
    mp[0].elementSize = es == 1 ? 1 : 4;
    mp[0].width = n->u.fill.count * (es == 8 ? 2 : 1);
    mp[0].height = 1;
    return 1;
  }
  for (int h = 0; h < 2; h++) {
    mp[h].dst = (CUdeviceptr)(n->u.fill.dst + 4u * (unsigned)h);
    mp[h].value = (unsigned)(uint32_t)(pat >> (32 * h));
    mp[h].elementSize = 4;
    mp[h].width = 1;
    mp[h].height = n->u.fill.count;
    mp[h].pitch = 8;
  }
  return 2;
}

static int add_while_host(gpu_seq *s, cu_node *cn, gpu_node *n, schedrun_error_t *err) {
  cu_segment *sg = push_segment(s, SEG_WHILE, NULL, err);
  if (!sg) return err && err->code ? err->code : SCHEDRUN_ENOMEM;
  sg->flag = n->u.loop.flag;
  sg->max_trips = n->u.loop.max_trips;
  if (!(sg->body = seq_new(s->b, s->dev))) {
    s->nsegs--;
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  n->u.loop.body = sg->body;
  cn->node.u.loop.body = sg->body;
  cn->seg = (uint16_t)(s->nsegs - 1);
  return SCHEDRUN_OK;
}

static int write_cond_params(cuda_backend *b, cu_device *d, uint64_t at, const gpu_node *n, schedrun_error_t *err) {
  uint64_t p[2] = {n->u.loop.flag, n->u.loop.max_trips};
  CU_CHECK(&b->api, b->api.cuMemcpyHtoD((CUdeviceptr)at, p, sizeof p), d->name, err);
  return SCHEDRUN_OK;
}

/* A while loop as a conditional WHILE node of segment sg. */
static int add_while_cond(gpu_seq *s, cu_segment *sg, cu_node *cn, gpu_node *n, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_api *a = &b->api;
  cu_device *d = &b->devs[s->dev];
  CUdeviceptr params = 0;
  CU_CHECK(a, a->cuMemAlloc(&params, 16), d->name, err);
  cn->cond_params = (uint64_t)params;
  int rc = write_cond_params(b, d, cn->cond_params, n, err);
  if (rc) return rc;
  CUgraphConditionalHandle h = 0;
  CU_CHECK(a, a->cuGraphConditionalHandleCreate(&h, sg->graph, d->ctx, 0, 0), d->name, err);
  CU_CHECK(a, add_cond_kernel(s, sg, h, cn->cond_params, 1, &cn->cu[0]), d->name, err);
  CUgraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  np.conditional.handle = h;
  np.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
  np.conditional.size = 1;
  np.conditional.ctx = d->ctx;
  CU_CHECK(a, a->cuGraphAddNode(&cn->cu[1], sg->graph, &cn->cu[0], NULL, 1, &np), d->name, err);
  sg->last = cn->cu[1];
  sg->has_cond = true;
  cn->ncu = 2;
  gpu_seq *body = seq_new(b, s->dev);
  if (!body) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  if (!push_segment(body, SEG_GRAPH, np.conditional.phGraph_out[0], err)) {
    free(body); /* holds nothing yet: the body graph is the conditional node's */
    return SCHEDRUN_ENOMEM;
  }
  body->parent = s;
  body->parent_seg = (uint16_t)(sg - s->segs);
  body->handle = h;
  body->cond_params = cn->cond_params;
  cn->body = body;
  n->u.loop.body = body;
  return SCHEDRUN_OK;
}

int cu_seq_add(gpu_seq *s, gpu_node *n, uint32_t *index, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_api *a = &b->api;
  cu_device *d = &b->devs[s->dev];
  if (s->finalized) return err_set(err, SCHEDRUN_EINTERNAL, "%s: a finalized sequence takes no nodes", d->name);
  int rc = cu_use(b, s->dev, err);
  if (rc) return rc;
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 16;
    cu_node *p = realloc(s->nodes, cap * sizeof *p);
    if (!p) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    s->nodes = p;
    s->cap = cap;
  }
  cu_node *cn = &s->nodes[s->n];
  memset(cn, 0, sizeof *cn);
  cn->kind = (uint8_t)n->kind;
  cn->tag = n->tag;
  cn->node = *n;
  if (n->kind == GN_LAUNCH) cn->node.u.launch.args = NULL; /* the caller's: copied into cn->args below */
  if (n->kind == GN_WHILE) cu_loops_setup(b, d);
  if (n->kind == GN_WHILE && atomic_load(&d->loops) != LOOPS_CONDITIONAL) {
    if ((rc = add_while_host(s, cn, n, err))) return rc;
    *index = s->n++;
    return SCHEDRUN_OK;
  }
  cu_segment *sg = s->nsegs && s->segs[s->nsegs - 1].kind == SEG_GRAPH ? &s->segs[s->nsegs - 1]
                                                                       : push_segment(s, SEG_GRAPH, NULL, err);
  if (!sg) return err && err->code ? err->code : SCHEDRUN_ENOMEM;
  cn->seg = (uint16_t)(sg - s->segs);
  if (n->kind == GN_WHILE) {
    rc = add_while_cond(s, sg, cn, n, err);
    if (rc) {
      if (cn->cond_params) a->cuMemFree((CUdeviceptr)cn->cond_params);
      return rc;
    }
    *index = s->n++;
    return SCHEDRUN_OK;
  }
  CUgraphNode dep = sg->last;
  size_t ndep = dep ? 1 : 0;
  CUresult r = CUDA_SUCCESS;
  const char *call = "";
  CUDA_MEMSET_NODE_PARAMS mp[2];
  int k = n->kind == GN_FILL ? cu_fill_params(n, mp) : 0;
  cn->fill_kernel = n->kind == GN_FILL && n->u.fill.resizes && cu_fills_by_kernel(b, d);
  if (cn->fill_kernel) {
    cn->nargs = 4;
    cn->args = malloc(4 * sizeof(uint64_t));
    cn->params = malloc(4 * sizeof(void *));
    if (!cn->args || !cn->params) {
      free(cn->args);
      free(cn->params);
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    }
    CUDA_KERNEL_NODE_PARAMS kp;
    cu_fill_kernel_params(d, cn, n, &kp);
    call = "cuGraphAddKernelNode";
    r = a->cuGraphAddKernelNode(&cn->cu[0], sg->graph, ndep ? &dep : NULL, ndep, &kp);
    cn->ncu = 1;
  } else if ((n->kind == GN_COPY && n->u.copy.bytes == 0) || (n->kind == GN_FILL && k == 0)) {
    /* the driver refuses zero-sized copies and memsets */
    cn->empty = true;
    call = "cuGraphAddEmptyNode";
    r = a->cuGraphAddEmptyNode(&cn->cu[0], sg->graph, ndep ? &dep : NULL, ndep);
    cn->ncu = 1;
  } else if (n->kind == GN_LAUNCH) {
    cn->nargs = n->u.launch.nargs;
    cn->args = malloc((cn->nargs ? cn->nargs : 1) * sizeof(uint64_t));
    cn->params = malloc((cn->nargs ? cn->nargs : 1) * sizeof(void *));
    if (!cn->args || !cn->params) {
      free(cn->args);
      free(cn->params);
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    }
    if (cn->nargs) memcpy(cn->args, n->u.launch.args, cn->nargs * sizeof(uint64_t));
    cuda_marshal_args(cn->args, cn->nargs, cn->params);
    CUDA_KERNEL_NODE_PARAMS kp;
    cu_kernel_params(cn, n, &kp);
    call = "cuGraphAddKernelNode";
    r = a->cuGraphAddKernelNode(&cn->cu[0], sg->graph, ndep ? &dep : NULL, ndep, &kp);
    cn->ncu = 1;
  } else if (n->kind == GN_COPY) {
    CUDA_MEMCPY3D cp;
    copy_params(n, &cp);
    call = "cuGraphAddMemcpyNode";
    r = a->cuGraphAddMemcpyNode(&cn->cu[0], sg->graph, ndep ? &dep : NULL, ndep, &cp, d->ctx);
    cn->ncu = 1;
  } else if (n->kind == GN_FILL) {
    call = "cuGraphAddMemsetNode";
    for (int i = 0; i < k && r == CUDA_SUCCESS; i++) {
      r = a->cuGraphAddMemsetNode(&cn->cu[i], sg->graph, ndep ? &dep : NULL, ndep, &mp[i], d->ctx);
      if (r == CUDA_SUCCESS) {
        dep = cn->cu[i];
        ndep = 1;
      }
    }
    cn->ncu = (uint8_t)k;
    cn->set_height = mp[0].height;
  } else {
    return err_set(err, SCHEDRUN_EINTERNAL, "unknown node kind %d", (int)n->kind);
  }
  if (r != CUDA_SUCCESS) {
    free(cn->args);
    free(cn->params);
    return cu_fail(a, err, r, call, d->name);
  }
  sg->last = cn->cu[cn->ncu - 1];
  *index = s->n++;
  return SCHEDRUN_OK;
}

int cu_seq_finalize(gpu_seq *s, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_device *d = &b->devs[s->dev];
  int rc = cu_use(b, s->dev, err);
  if (rc) return rc;
  /* conditional bodies are complete before the graph holding them is instantiated */
  for (uint32_t i = 0; i < s->n; i++)
    if (s->nodes[i].body && (rc = cu_seq_finalize(s->nodes[i].body, err))) return rc;
  if (s->parent) {
    CUgraphNode tail;
    CU_CHECK(&b->api, add_cond_kernel(s, &s->segs[0], s->handle, s->cond_params, 0, &tail), d->name, err);
    s->finalized = true;
    return SCHEDRUN_OK;
  }
  for (uint32_t i = 0; i < s->nsegs; i++) {
    cu_segment *sg = &s->segs[i];
    if (sg->kind == SEG_WHILE) {
      if ((rc = cu_seq_finalize(sg->body, err))) return rc;
    } else if (!sg->exec) {
      CU_CHECK(&b->api, b->api.cuGraphInstantiateWithFlags(&sg->exec, sg->graph, 0), d->name, err);
    }
  }
  s->finalized = true;
  return SCHEDRUN_OK;
}

/* The segment whose instantiated graph holds the nodes of segment seg: a
 * conditional body's nodes are in the graph of the sequence that holds the
 * loop. */
static cu_segment *top_segment(gpu_seq *s, uint16_t seg) {
  while (s->parent) {
    seg = s->parent_seg;
    s = s->parent;
  }
  return &s->segs[seg];
}

static int refuse(const cu_device *d, const char *what, schedrun_error_t *err) {
  return err_set(err, SCHEDRUN_EBACKEND, "%s: the driver cannot update %s in place", d->name, what);
}

int cu_seq_update(gpu_seq *s, uint32_t index, const gpu_node *n, schedrun_error_t *err) {
  cuda_backend *b = s->b;
  cu_api *a = &b->api;
  cu_device *d = &b->devs[s->dev];
  if (index >= s->n || s->nodes[index].kind != n->kind)
    return err_set(err, SCHEDRUN_EINTERNAL, "update of node %u does not match the sequence", index);
  int rc = cu_use(b, s->dev, err);
  if (rc) return rc;
  cu_node *cn = &s->nodes[index];
  cu_segment *sg = &s->segs[cn->seg];
  gpu_seq *body = cn->node.u.loop.body;
  cn->node = *n;
  if (n->kind == GN_LAUNCH) cn->node.u.launch.args = NULL; /* copied into cn->args below */
  if (n->kind == GN_WHILE) cn->node.u.loop.body = body;  /* a host-driven loop's, set when it was added */
  if (n->kind == GN_WHILE) {
    if (cn->body) return write_cond_params(b, d, cn->cond_params, n, err);
    sg->flag = n->u.loop.flag;
    sg->max_trips = n->u.loop.max_trips;
    return SCHEDRUN_OK;
  }
  cu_segment *top = top_segment(s, cn->seg);
  CUgraphExec exec = top->exec;
  if (!exec) return err_set(err, SCHEDRUN_EINTERNAL, "%s: update before finalize", d->name);
  /* in the graph, for cuGraphExecUpdate at the next launch (above) */
  bool whole = top->has_cond;
  assert(whole || !s->parent); /* a body is always in a segment with its conditional node */
  if (cn->fill_kernel) {
    CUDA_KERNEL_NODE_PARAMS kp;
    cu_fill_kernel_params(d, cn, n, &kp);
    if (whole) CU_CHECK(a, a->cuGraphKernelNodeSetParams(cn->cu[0], &kp), d->name, err);
    else CU_CHECK(a, a->cuGraphExecKernelNodeSetParams(exec, cn->cu[0], &kp), d->name, err);
  } else if (n->kind == GN_LAUNCH) {
    if (n->u.launch.nargs != cn->nargs) return err_set(err, SCHEDRUN_EINTERNAL, "update changes a launch's arguments");
    if (cn->nargs) memcpy(cn->args, n->u.launch.args, cn->nargs * sizeof(uint64_t));
    CUDA_KERNEL_NODE_PARAMS kp;
    cu_kernel_params(cn, n, &kp);
    if (whole) CU_CHECK(a, a->cuGraphKernelNodeSetParams(cn->cu[0], &kp), d->name, err);
    else CU_CHECK(a, a->cuGraphExecKernelNodeSetParams(exec, cn->cu[0], &kp), d->name, err);
  } else if (n->kind == GN_COPY) {
    if ((n->u.copy.bytes == 0) != cn->empty) return refuse(d, "a copy to or from zero bytes", err);
    if (cn->empty) return SCHEDRUN_OK;
    CUDA_MEMCPY3D cp;
    copy_params(n, &cp);
    if (whole) CU_CHECK(a, a->cuGraphMemcpyNodeSetParams(cn->cu[0], &cp), d->name, err);
    else CU_CHECK(a, a->cuGraphExecMemcpyNodeSetParams(exec, cn->cu[0], &cp, d->ctx), d->name, err);
  } else {
    CUDA_MEMSET_NODE_PARAMS mp[2];
    int k = cu_fill_params(n, mp);
    if ((k == 0) != cn->empty) return refuse(d, "a fill to or from zero elements", err);
    if (cn->empty) return SCHEDRUN_OK;
    if (k != cn->ncu) return refuse(d, "a fill whose memsets change in number", err);
    if (mp[0].height > 1 || cn->set_height > 1) {
      /* 12.x drivers update 1-D memsets only; 13.x keep a 2-D one's shape */
      if (b->driver_version < 13000) return refuse(d, "a 2-D memset (drivers before CUDA 13)", err);
      if (mp[0].height != cn->set_height) return refuse(d, "the shape of a 2-D memset", err);
    }
    for (int i = 0; i < k; i++) {
      if (whole) CU_CHECK(a, a->cuGraphMemsetNodeSetParams(cn->cu[i], &mp[i]), d->name, err);
      else CU_CHECK(a, a->cuGraphExecMemsetNodeSetParams(exec, cn->cu[i], &mp[i], d->ctx), d->name, err);
    }
  }
  if (whole) top->stale = true;
  return SCHEDRUN_OK;
}
