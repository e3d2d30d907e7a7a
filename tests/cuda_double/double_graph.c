/*
 * The double's graphs: nodes (kernel, memcpy, memset, empty, conditional),
 * conditional handles, instantiation, the rules for updating an
 * instantiated graph in place, and launches.
 *
 * The update rules follow the driver documentation. Memset nodes: a 12.x
 * driver updates only 1-D memsets (height 1) into 1-D memsets; a 13.x driver
 * also updates 2-D ones, but then only their address and value, and a 1-D
 * one may not grow. Memcpy nodes: 1-D only, same contexts. Zero-sized copies
 * and memsets are refused when added and when set. Kernel nodes: the
 * function's context may not change. cuGraphExecUpdate carries a graph's
 * nodes (a conditional body's included) into what was instantiated from it
 * under the same rules, all or nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "double.h"

/* ---- conditional handles ---- */

typedef struct cond {
  const dgraph *g; /* NULL: free */
  unsigned value, dflt;
  bool assign_default, used;
} cond;
static cond *g_conds;
static uint32_t g_nconds;

static cond *cond_of(uint64_t h) { return h && h <= g_nconds && g_conds[h - 1].g ? &g_conds[h - 1] : NULL; }

void dbl_set_conditional(uint64_t h, unsigned value) {
  /* called by a condition kernel, on a stream's thread */
  pthread_mutex_lock(&dbl_lock);
  cond *c = cond_of(h);
  if (c) c->value = value;
  pthread_mutex_unlock(&dbl_lock);
}

/* A handle's value now, 0 for a handle no longer there. */
static unsigned cond_value(uint64_t h) {
  pthread_mutex_lock(&dbl_lock);
  cond *c = cond_of(h);
  unsigned v = c ? c->value : 0;
  pthread_mutex_unlock(&dbl_lock);
  return v;
}

static bool range_now(uint64_t addr, uint64_t bytes) {
  pthread_mutex_lock(&dbl_lock);
  bool ok = dbl_range(addr, bytes, NULL);
  pthread_mutex_unlock(&dbl_lock);
  return ok;
}

/* ---- graphs and nodes ---- */

static CUresult d_cuGraphCreate(CUgraph *out, unsigned flags) {
  ENTER("cuGraphCreate");
  if (!out || flags) LEAVE(CUDA_ERROR_INVALID_VALUE);
  dgraph *g = dbl_new(K_GRAPH, sizeof *g);
  if (!g) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  *out = (CUgraph)g;
  LEAVE(CUDA_SUCCESS);
}

static void graph_free(dgraph *g) {
  for (uint32_t i = 0; i < g->n; i++) {
    dnode *n = g->nodes[i];
    if (n->w.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) graph_free(n->w.u.cond.body);
    free(n->deps);
    dbl_free(n);
  }
  for (uint32_t i = 0; i < g->nhandles; i++) {
    cond *c = cond_of(g->handles[i]);
    if (c) c->g = NULL;
  }
  free(g->handles);
  free(g->nodes);
  dbl_free(g);
}

static CUresult d_cuGraphDestroy(CUgraph g) {
  ENTER("cuGraphDestroy");
  if (!dbl_live(g, K_GRAPH)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  if (((dgraph *)g)->owner) LEAVE(CUDA_ERROR_INVALID_VALUE); /* a body belongs to its conditional node */
  graph_free((dgraph *)g);
  LEAVE(CUDA_SUCCESS);
}

static CUresult add_node(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t ndeps, const dwork *w) {
  if (!out || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
  if (!dbl_live(hg, K_GRAPH)) return CUDA_ERROR_INVALID_HANDLE;
  dgraph *g = (dgraph *)hg;
  for (size_t i = 0; i < ndeps; i++)
    if (!dbl_live(deps[i], K_NODE) || ((dnode *)deps[i])->g != g) return CUDA_ERROR_INVALID_VALUE;
  if (g->n == g->cap) {
    uint32_t cap = g->cap ? g->cap * 2 : 8;
    dnode **p = realloc(g->nodes, cap * sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    g->nodes = p;
    g->cap = cap;
  }
  dnode *n = dbl_new(K_NODE, sizeof *n);
  if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
  n->deps = ndeps ? malloc(ndeps * sizeof *n->deps) : NULL;
  if (ndeps && !n->deps) {
    dbl_free(n);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < ndeps; i++) n->deps[i] = (dnode *)deps[i];
  n->ndeps = (uint32_t)ndeps;
  n->g = g;
  n->w = *w;
  g->nodes[g->n++] = n;
  *out = (CUgraphNode)n;
  return CUDA_SUCCESS;
}

static CUresult kernel_work(const CUDA_KERNEL_NODE_PARAMS *p, dwork *w) {
  if (!p || p->extra || !p->func) return CUDA_ERROR_INVALID_VALUE;
  if (!dbl_live(p->func, K_FUNC)) return CUDA_ERROR_INVALID_HANDLE;
  memset(w, 0, sizeof *w);
  w->type = CU_GRAPH_NODE_TYPE_KERNEL;
  w->u.k.f = (dfunc *)p->func;
  uint32_t g[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, b[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  for (int i = 0; i < 3; i++)
    if (!g[i] || !b[i]) return CUDA_ERROR_INVALID_VALUE;
  if ((uint64_t)b[0] * b[1] * b[2] > 1024 || p->sharedMemBytes > 48 * 1024) return CUDA_ERROR_INVALID_VALUE;
  memcpy(w->u.k.grid, g, sizeof g);
  memcpy(w->u.k.block, b, sizeof b);
  w->u.k.shared = p->sharedMemBytes;
  return dbl_kernel_args(w->u.k.f, p->kernelParams, w->u.k.args);
}

static CUresult copy_work(const CUDA_MEMCPY3D *c, CUcontext hctx, dwork *w) {
  dctx *x = dbl_ctx(hctx);
  if (!x) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (c->srcMemoryType != CU_MEMORYTYPE_DEVICE || c->dstMemoryType != CU_MEMORYTYPE_DEVICE)
    return CUDA_ERROR_NOT_SUPPORTED; /* the double copies device to device only */
  if (c->srcXInBytes || c->srcY || c->srcZ || c->srcLOD || c->dstXInBytes || c->dstY || c->dstZ || c->dstLOD)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (c->WidthInBytes == 0 || c->Height == 0 || c->Depth == 0) return CUDA_ERROR_INVALID_VALUE; /* zero-sized */
  if (c->Height != 1 || c->Depth != 1) return CUDA_ERROR_NOT_SUPPORTED;
  if (!dbl_range(c->srcDevice, c->WidthInBytes, NULL) || !dbl_range(c->dstDevice, c->WidthInBytes, NULL))
    return CUDA_ERROR_INVALID_VALUE;
  /* overlapping ranges: undefined on a driver, refused here */
  if (c->dstDevice < c->srcDevice + c->WidthInBytes && c->srcDevice < c->dstDevice + c->WidthInBytes)
    return CUDA_ERROR_INVALID_VALUE;
  memset(w, 0, sizeof *w);
  w->type = CU_GRAPH_NODE_TYPE_MEMCPY;
  w->ctx = x;
  w->u.copy.dst = c->dstDevice;
  w->u.copy.src = c->srcDevice;
  w->u.copy.bytes = c->WidthInBytes;
  return CUDA_SUCCESS;
}

static uint64_t memset_extent(const CUDA_MEMSET_NODE_PARAMS *p) {
  return (uint64_t)(p->height - 1) * p->pitch + (uint64_t)p->width * p->elementSize;
}

static CUresult set_work(const CUDA_MEMSET_NODE_PARAMS *p, CUcontext hctx, dwork *w) {
  dctx *x = dbl_ctx(hctx);
  if (!x) return CUDA_ERROR_INVALID_CONTEXT;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
  if (p->width == 0 || p->height == 0) return CUDA_ERROR_INVALID_VALUE; /* zero-sized */
  if (p->height > 1 && p->pitch < (size_t)p->width * p->elementSize) return CUDA_ERROR_INVALID_VALUE;
  if (p->dst % p->elementSize) return CUDA_ERROR_INVALID_VALUE;
  if (!dbl_range(p->dst, memset_extent(p), NULL)) return CUDA_ERROR_INVALID_VALUE;
  memset(w, 0, sizeof *w);
  w->type = CU_GRAPH_NODE_TYPE_MEMSET;
  w->ctx = x;
  w->u.set = *p;
  return CUDA_SUCCESS;
}

static CUresult d_cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                       const CUDA_KERNEL_NODE_PARAMS *p) {
  ENTER("cuGraphAddKernelNode");
  dwork w;
  CUresult r = kernel_work(p, &w);
  LEAVE(r == CUDA_SUCCESS ? add_node(out, g, deps, ndeps, &w) : r);
}

static CUresult d_cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                       const CUDA_MEMCPY3D *c, CUcontext ctx) {
  ENTER("cuGraphAddMemcpyNode");
  dwork w;
  CUresult r = copy_work(c, ctx, &w);
  LEAVE(r == CUDA_SUCCESS ? add_node(out, g, deps, ndeps, &w) : r);
}

static CUresult d_cuGraphAddMemsetNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                       const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx) {
  ENTER("cuGraphAddMemsetNode");
  dwork w;
  CUresult r = set_work(p, ctx, &w);
  LEAVE(r == CUDA_SUCCESS ? add_node(out, g, deps, ndeps, &w) : r);
}

static CUresult d_cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps) {
  ENTER("cuGraphAddEmptyNode");
  dwork w = {.type = CU_GRAPH_NODE_TYPE_EMPTY};
  LEAVE(add_node(out, g, deps, ndeps, &w));
}

static CUresult d_cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph hg, CUcontext ctx,
                                                 unsigned dflt, unsigned flags) {
  ENTER("cuGraphConditionalHandleCreate");
  if (!out || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT)) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (!dbl_live(hg, K_GRAPH)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  if (ctx ? !dbl_ctx(ctx) : !dbl_current()) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  dgraph *g = (dgraph *)hg;
  cond *c = realloc(g_conds, (g_nconds + 1) * sizeof *c);
  uint64_t *hs = c ? realloc(g->handles, (g->nhandles + 1) * sizeof *hs) : NULL;
  if (c) g_conds = c;
  if (!hs) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  g->handles = hs;
  g_conds[g_nconds] = (cond){g, dflt, dflt, (flags & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0, false};
  g->handles[g->nhandles++] = ++g_nconds;
  *out = g_nconds;
  LEAVE(CUDA_SUCCESS);
}

/* cuGraphAddNode (12.3 on), for conditional nodes only. */
static CUresult d_cuGraphAddNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                 size_t ndeps, CUgraphNodeParams *p) {
  ENTER("cuGraphAddNode");
  if (!p || p->reserved0[0] || p->reserved0[1] || p->reserved0[2] || p->reserved2) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (edges)
    for (size_t i = 0; i < ndeps; i++)
      if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || edges[i].from_port || edges[i].to_port)
        LEAVE(CUDA_ERROR_NOT_SUPPORTED);
  if (p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL) LEAVE(CUDA_ERROR_NOT_SUPPORTED);
  if (!dbl_live(hg, K_GRAPH)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  CUDA_CONDITIONAL_NODE_PARAMS *cp = &p->conditional;
  cond *c = cond_of(cp->handle);
  if (!c || c->used || cp->size != 1 || (cp->type != CU_GRAPH_COND_TYPE_WHILE && cp->type != CU_GRAPH_COND_TYPE_IF))
    LEAVE(CUDA_ERROR_INVALID_VALUE);
  /* the handle belongs to this graph or one that encloses it */
  const dgraph *up = (const dgraph *)hg;
  while (up && up != c->g) up = up->owner ? up->owner->g : NULL;
  if (!up) LEAVE(CUDA_ERROR_INVALID_VALUE);
  dgraph *body = dbl_new(K_GRAPH, sizeof *body);
  if (!body) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  dwork w = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL};
  w.u.cond.handle = cp->handle;
  w.u.cond.body = body;
  CUresult r = add_node(out, hg, deps, ndeps, &w);
  if (r != CUDA_SUCCESS) {
    dbl_free(body);
    LEAVE(r);
  }
  dnode *n = (dnode *)*out;
  body->owner = n;
  n->body_out[0] = (CUgraph)body;
  cp->phGraph_out = n->body_out;
  c->used = true;
  LEAVE(CUDA_SUCCESS);
}

/* ---- instantiation ---- */

static void exec_free(dexec *e) {
  for (uint32_t i = 0; i < e->n; i++)
    if (e->steps[i].body) exec_free(e->steps[i].body);
  free(e->steps);
  free(e->handles);
  dbl_free(e);
}

static CUresult collect_handles(const dgraph *g, dexec *top) {
  for (uint32_t i = 0; i < g->nhandles; i++) {
    cond *c = cond_of(g->handles[i]);
    if (!c || !c->used) return CUDA_ERROR_INVALID_VALUE; /* a handle with no conditional node */
    uint64_t *hs = realloc(top->handles, (top->nhandles + 1) * sizeof *hs);
    if (!hs) return CUDA_ERROR_OUT_OF_MEMORY;
    top->handles = hs;
    top->handles[top->nhandles++] = g->handles[i];
  }
  return CUDA_SUCCESS;
}

/* Steps in an order that respects every dependency (Kahn's). */
static CUresult exec_build(const dgraph *g, dexec *top, dexec **out) {
  dexec *e = dbl_new(K_EXEC, sizeof *e);
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  e->from = g;
  e->steps = calloc(g->n ? g->n : 1, sizeof *e->steps);
  bool *done = calloc(g->n ? g->n : 1, 1);
  CUresult r = e->steps && done ? collect_handles(g, top ? top : e) : CUDA_ERROR_OUT_OF_MEMORY;
  while (r == CUDA_SUCCESS && e->n < g->n) {
    bool progress = false;
    for (uint32_t i = 0; i < g->n && r == CUDA_SUCCESS; i++) {
      if (done[i]) continue;
      const dnode *n = g->nodes[i];
      bool ready = true;
      for (uint32_t d = 0; d < n->ndeps && ready; d++)
        for (uint32_t j = 0; j < g->n; j++)
          if (g->nodes[j] == n->deps[d]) ready = done[j];
      if (!ready) continue;
      struct dstep *s = &e->steps[e->n++];
      s->node = n;
      s->w = n->w;
      if (n->w.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) r = exec_build(n->w.u.cond.body, top ? top : e, &s->body);
      done[i] = true;
      progress = true;
    }
    if (!progress) r = CUDA_ERROR_INVALID_VALUE; /* a cycle */
  }
  free(done);
  if (r != CUDA_SUCCESS) {
    exec_free(e);
    return r;
  }
  *out = e;
  return CUDA_SUCCESS;
}

static CUresult d_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph hg, unsigned long long flags) {
  ENTER("cuGraphInstantiateWithFlags");
  if (!out || flags) LEAVE(CUDA_ERROR_INVALID_VALUE);
  if (!dbl_live(hg, K_GRAPH)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  if (((dgraph *)hg)->owner) LEAVE(CUDA_ERROR_INVALID_VALUE);
  dexec *e;
  CUresult r = exec_build((dgraph *)hg, NULL, &e);
  if (r == CUDA_SUCCESS) *out = (CUgraphExec)e;
  LEAVE(r);
}

static CUresult d_cuGraphExecDestroy(CUgraphExec e) {
  ENTER("cuGraphExecDestroy");
  if (!dbl_live(e, K_EXEC)) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  exec_free((dexec *)e);
  LEAVE(CUDA_SUCCESS);
}

/* ---- updates ---- */

/* Where node is in e; *in_body says whether it is in a conditional node's
 * body (a node of another graph than the one instantiated). */
static struct dstep *find_step(dexec *e, const void *node, bool *in_body) {
  for (uint32_t i = 0; i < e->n; i++) {
    if (e->steps[i].node == node) return &e->steps[i];
    struct dstep *s = e->steps[i].body ? find_step(e->steps[i].body, node, in_body) : NULL;
    if (s) {
      *in_body = true;
      return s;
    }
  }
  return NULL;
}

static CUresult rejected(void) {
  dbl_count("update-rejected");
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult step_for(CUgraphExec he, CUgraphNode hn, CUgraphNodeType type, struct dstep **out) {
  if (!dbl_live(he, K_EXEC) || !dbl_live(hn, K_NODE)) return CUDA_ERROR_INVALID_HANDLE;
  bool in_body = false;
  struct dstep *s = find_step((dexec *)he, hn, &in_body);
  if (!s || s->w.type != type) return CUDA_ERROR_INVALID_VALUE;
  /* the setters document nodes of the graph that was instantiated only */
  if (in_body && (dbl_strict & DBL_STRICT_BODY_SETPARAMS)) return rejected();
  *out = s;
  return CUDA_SUCCESS;
}

/* Whether an instantiated node's work `was` may become `now` (of the same
 * type) in place: the rules cuGraphExec*NodeSetParams and cuGraphExecUpdate
 * share. */
static bool update_allowed(const dwork *was, const dwork *now) {
  if (dbl_strict & DBL_STRICT_NO_UPDATES) return false;
  switch (now->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL: return now->u.k.f->mod->ctx == was->u.k.f->mod->ctx;
  case CU_GRAPH_NODE_TYPE_MEMCPY: return now->ctx == was->ctx;
  case CU_GRAPH_NODE_TYPE_MEMSET: {
    const CUDA_MEMSET_NODE_PARAMS *a = &was->u.set, *b = &now->u.set;
    if (now->ctx != was->ctx || b->elementSize != a->elementSize) return false;
    /* 12.x: both the instantiated and the new memset must be 1-D */
    if (dbl_driver_version < 13000) return a->height == 1 && b->height == 1;
    /* 13.x: a 2-D memset keeps its shape; only address and value change */
    if (a->height != 1) return b->height == a->height && b->width == a->width && b->pitch == a->pitch;
    /* a 1-D memset may not change height, nor outgrow the work it was given */
    return b->height == 1 && b->width <= a->width;
  }
  default: return true;
  }
}

static CUresult d_cuGraphExecKernelNodeSetParams(CUgraphExec he, CUgraphNode hn, const CUDA_KERNEL_NODE_PARAMS *p) {
  ENTER("cuGraphExecKernelNodeSetParams");
  struct dstep *s;
  CUresult r = step_for(he, hn, CU_GRAPH_NODE_TYPE_KERNEL, &s);
  dwork w;
  if (r == CUDA_SUCCESS) r = kernel_work(p, &w);
  if (r == CUDA_SUCCESS && !update_allowed(&s->w, &w)) r = rejected();
  if (r == CUDA_SUCCESS) s->w = w;
  LEAVE(r);
}

static CUresult d_cuGraphExecMemcpyNodeSetParams(CUgraphExec he, CUgraphNode hn, const CUDA_MEMCPY3D *c, CUcontext ctx) {
  ENTER("cuGraphExecMemcpyNodeSetParams");
  struct dstep *s;
  CUresult r = step_for(he, hn, CU_GRAPH_NODE_TYPE_MEMCPY, &s);
  dwork w;
  if (r == CUDA_SUCCESS) r = copy_work(c, ctx, &w);
  if (r == CUDA_SUCCESS && !update_allowed(&s->w, &w)) r = rejected();
  if (r == CUDA_SUCCESS) s->w = w;
  LEAVE(r);
}

static CUresult d_cuGraphExecMemsetNodeSetParams(CUgraphExec he, CUgraphNode hn, const CUDA_MEMSET_NODE_PARAMS *p,
                                                 CUcontext ctx) {
  ENTER("cuGraphExecMemsetNodeSetParams");
  struct dstep *s;
  CUresult r = step_for(he, hn, CU_GRAPH_NODE_TYPE_MEMSET, &s);
  dwork w;
  if (r == CUDA_SUCCESS) r = set_work(p, ctx, &w);
  if (r == CUDA_SUCCESS && !update_allowed(&s->w, &w)) r = rejected();
  if (r == CUDA_SUCCESS) s->w = w;
  LEAVE(r);
}

/* A graph's node, before instantiation or after: its work changes in the
 * graph, not in what was instantiated from it (cuGraphExecUpdate carries it
 * there). A memcpy or memset keeps its context. */
static CUresult graph_node(CUgraphNode hn, CUgraphNodeType type, dnode **out) {
  if (!dbl_live(hn, K_NODE)) return CUDA_ERROR_INVALID_HANDLE;
  if (((dnode *)hn)->w.type != type) return CUDA_ERROR_INVALID_VALUE;
  *out = (dnode *)hn;
  return CUDA_SUCCESS;
}

static CUresult d_cuGraphKernelNodeSetParams(CUgraphNode hn, const CUDA_KERNEL_NODE_PARAMS *p) {
  ENTER("cuGraphKernelNodeSetParams");
  dnode *n;
  dwork w;
  CUresult r = graph_node(hn, CU_GRAPH_NODE_TYPE_KERNEL, &n);
  if (r == CUDA_SUCCESS) r = kernel_work(p, &w);
  if (r == CUDA_SUCCESS) n->w = w;
  LEAVE(r);
}

static CUresult d_cuGraphMemcpyNodeSetParams(CUgraphNode hn, const CUDA_MEMCPY3D *c) {
  ENTER("cuGraphMemcpyNodeSetParams");
  dnode *n;
  dwork w;
  CUresult r = graph_node(hn, CU_GRAPH_NODE_TYPE_MEMCPY, &n);
  if (r == CUDA_SUCCESS) r = copy_work(c, (CUcontext)n->w.ctx, &w);
  if (r == CUDA_SUCCESS) n->w = w;
  LEAVE(r);
}

static CUresult d_cuGraphMemsetNodeSetParams(CUgraphNode hn, const CUDA_MEMSET_NODE_PARAMS *p) {
  ENTER("cuGraphMemsetNodeSetParams");
  dnode *n;
  dwork w;
  CUresult r = graph_node(hn, CU_GRAPH_NODE_TYPE_MEMSET, &n);
  if (r == CUDA_SUCCESS) r = set_work(p, (CUcontext)n->w.ctx, &w);
  if (r == CUDA_SUCCESS) n->w = w;
  LEAVE(r);
}

/* Whether e, instantiated from a graph topologically identical to g, can
 * take g's nodes' work as it is now: as many nodes, each of its type, each
 * change allowed, conditional bodies alike. Else the result and the node. */
static CUgraphExecUpdateResult update_check(const dexec *e, const dgraph *g, const dnode **bad) {
  *bad = NULL;
  if (e->n != g->n) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
  for (uint32_t i = 0; i < e->n; i++) {
    const struct dstep *s = &e->steps[i];
    const dnode *n = s->node;
    *bad = n;
    if (n->g != g) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    if (n->w.type != s->w.type) return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
    if (n->w.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      if (n->w.u.cond.handle != s->w.u.cond.handle) return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
      CUgraphExecUpdateResult r = update_check(s->body, n->w.u.cond.body, bad);
      if (r != CU_GRAPH_EXEC_UPDATE_SUCCESS) return r;
    } else if (memcmp(&s->w, &n->w, sizeof s->w) != 0 && !update_allowed(&s->w, &n->w)) {
      /* the rules bind what changes: a node as it was is carried over as it is */
      return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
    }
  }
  *bad = NULL;
  return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

static void update_apply(dexec *e) {
  for (uint32_t i = 0; i < e->n; i++) {
    struct dstep *s = &e->steps[i];
    if (s->body) update_apply(s->body);
    else s->w = s->node->w;
  }
}

static CUresult d_cuGraphExecUpdate(CUgraphExec he, CUgraph hg, CUgraphExecUpdateResultInfo *info) {
  ENTER("cuGraphExecUpdate");
  if (!info) LEAVE(CUDA_ERROR_INVALID_VALUE);
  memset(info, 0, sizeof *info);
  info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
  if (!dbl_live(he, K_EXEC) || !dbl_live(hg, K_GRAPH) || ((dgraph *)hg)->owner) LEAVE(CUDA_ERROR_INVALID_VALUE);
  const dnode *bad;
  info->result = update_check((const dexec *)he, (const dgraph *)hg, &bad);
  info->errorNode = (CUgraphNode)bad;
  if (info->result != CU_GRAPH_EXEC_UPDATE_SUCCESS) {
    dbl_count("update-rejected");
    LEAVE(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE); /* nothing was changed */
  }
  update_apply((dexec *)he);
  dbl_count("graph-update");
  LEAVE(CUDA_SUCCESS);
}

/* ---- launches ---- */

/* On a stream's thread, without dbl_lock but for the moments it reads
 * what other threads change (allocations, conditional handles). */
CUresult dbl_run_step(const dwork *w) {
  switch (w->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL: return dbl_run_kernel(w);
  case CU_GRAPH_NODE_TYPE_MEMCPY:
    /* the buffers may have been freed since the node was set */
    if (!range_now(w->u.copy.src, w->u.copy.bytes) || !range_now(w->u.copy.dst, w->u.copy.bytes))
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    memcpy((void *)(uintptr_t)w->u.copy.dst, (const void *)(uintptr_t)w->u.copy.src, w->u.copy.bytes);
    return CUDA_SUCCESS;
  case CU_GRAPH_NODE_TYPE_MEMSET: {
    const CUDA_MEMSET_NODE_PARAMS *p = &w->u.set;
    if (!range_now(p->dst, memset_extent(p))) return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (size_t row = 0; row < p->height; row++) {
      uint8_t *d = (uint8_t *)(uintptr_t)(p->dst + row * p->pitch);
      for (size_t k = 0; k < p->width; k++)
        memcpy(d + k * p->elementSize, &(uint32_t){p->value}, p->elementSize); /* little-endian: low bytes */
    }
    return CUDA_SUCCESS;
  }
  case CU_GRAPH_NODE_TYPE_EMPTY: return CUDA_SUCCESS;
  default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

static CUresult run_exec(const dexec *e) {
  for (uint32_t i = 0; i < e->n; i++) {
    const dwork *w = &e->steps[i].w;
    CUresult r = CUDA_SUCCESS;
    if (w->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      for (unsigned long trips = 0; cond_value(w->u.cond.handle); trips++) {
        r = run_exec(e->steps[i].body);
        if (r != CUDA_SUCCESS) break;
        if (trips >= (1ul << 31)) return CUDA_ERROR_LAUNCH_TIMEOUT;
      }
    } else {
      r = dbl_run_step(w);
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult dbl_exec_run(const dexec *e) {
  pthread_mutex_lock(&dbl_lock);
  for (uint32_t i = 0; i < e->nhandles; i++) {
    cond *c = cond_of(e->handles[i]);
    if (c && c->assign_default) c->value = c->dflt;
  }
  pthread_mutex_unlock(&dbl_lock);
  return run_exec(e);
}

void dbl_exec_snapshot_free(dexec *e) {
  if (!e) return;
  for (uint32_t i = 0; i < e->n; i++) dbl_exec_snapshot_free(e->steps[i].body);
  free(e->steps);
  free(e->handles);
  free(e);
}

dexec *dbl_exec_snapshot(const dexec *e) {
  dexec *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->from = e->from;
  c->steps = calloc(e->n ? e->n : 1, sizeof *c->steps);
  c->handles = calloc(e->nhandles ? e->nhandles : 1, sizeof *c->handles);
  if (!c->steps || !c->handles) {
    dbl_exec_snapshot_free(c);
    return NULL;
  }
  if (e->nhandles) memcpy(c->handles, e->handles, e->nhandles * sizeof *c->handles);
  c->nhandles = e->nhandles;
  for (uint32_t i = 0; i < e->n; i++) {
    c->steps[i] = e->steps[i];
    c->steps[i].body = NULL;
    c->n = i + 1;
    if (e->steps[i].body && !(c->steps[i].body = dbl_exec_snapshot(e->steps[i].body))) {
      dbl_exec_snapshot_free(c);
      return NULL;
    }
  }
  return c;
}

void dbl_exec_first_kernel(const dexec *e, const char **name) {
  for (uint32_t i = 0; i < e->n; i++) {
    if (e->steps[i].w.type == CU_GRAPH_NODE_TYPE_KERNEL) {
      *name = e->steps[i].w.u.k.f->k->name;
      return;
    }
    if (e->steps[i].body) dbl_exec_first_kernel(e->steps[i].body, name);
  }
}

static CUresult d_cuGraphLaunch(CUgraphExec he, CUstream s) {
  ENTER("cuGraphLaunch");
  if (!dbl_live(he, K_EXEC) || (s && !dbl_live(s, K_STREAM))) LEAVE(CUDA_ERROR_INVALID_HANDLE);
  dctx *x = dbl_current();
  if (!x || (s && ((dstream *)s)->ctx != x)) LEAVE(CUDA_ERROR_INVALID_CONTEXT);
  CUresult r = dbl_sticky(x); /* a fault before it: the context takes no more work */
  if (r != CUDA_SUCCESS) LEAVE(r);
  /* what runs is the graph as instantiated and updated now */
  dexec *snap = dbl_exec_snapshot((const dexec *)he);
  if (!snap) LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
  r = dbl_enqueue_graph(dbl_stream(s, x), snap);
  if (r == CUDA_SUCCESS) dbl_count("graph-launch");
  LEAVE(r);
}

#define E(name, since) {#name, (void *)d_##name, since}
const dbl_entry dbl_graph_entries[] = {
    E(cuGraphCreate, 10000), E(cuGraphDestroy, 10000), E(cuGraphAddKernelNode, 12000),
    E(cuGraphAddMemcpyNode, 10000), E(cuGraphAddMemsetNode, 10000), E(cuGraphAddEmptyNode, 10000),
    E(cuGraphInstantiateWithFlags, 11040), E(cuGraphExecDestroy, 10000), E(cuGraphLaunch, 10000),
    E(cuGraphExecKernelNodeSetParams, 12000), E(cuGraphExecMemcpyNodeSetParams, 10020),
    E(cuGraphExecMemsetNodeSetParams, 10020), E(cuGraphConditionalHandleCreate, 12030), E(cuGraphAddNode, 12030),
    E(cuGraphKernelNodeSetParams, 12000), E(cuGraphMemcpyNodeSetParams, 10000), E(cuGraphMemsetNodeSetParams, 10000),
    E(cuGraphExecUpdate, 12000),
    {NULL, NULL, 0}};
#undef E
