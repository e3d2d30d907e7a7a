/*
 * What the CUDA backend's sequence files share (cuda_graph.c builds and
 * launches sequences, cuda_timed.c runs one node by node, timed): the
 * sequence, its segments and nodes. Internal to gpu/cuda/.
 */
#ifndef SCHEDRUN_CUDA_SEQ_H
#define SCHEDRUN_CUDA_SEQ_H

#include "gpu/cuda/cuda_internal.h"

enum { SEG_GRAPH, SEG_WHILE };

typedef struct cu_segment {
  int kind;
  bool owned; /* the graph is this segment's (not a conditional node's body) */
  bool has_cond; /* holds a conditional node: updated through the graph (above) */
  bool stale;    /* the graph's nodes changed since it was instantiated or updated */
  CUgraph graph;
  CUgraphExec exec;
  CUgraphNode last; /* the chain's tail */
  uint64_t flag;    /* SEG_WHILE */
  uint32_t max_trips;
  gpu_seq *body;
} cu_segment;

/* One gpu node: up to two CUDA nodes (an 8-byte fill with differing halves
 * is two 4-byte memsets over rows of pitch 8; a conditional while loop is
 * its first condition kernel and the conditional node), and the argument
 * slots a kernel node was given. */
typedef struct cu_node {
  uint8_t kind, ncu;
  bool empty; /* a zero-length copy or fill: an empty node keeps its place */
  uint16_t seg;
  uint32_t tag; /* the caller's (gpu_node.tag) */
  CUgraphNode cu[2];
  size_t set_height; /* a memset's rows */
  uint64_t *args;
  void **params;
  uint32_t nargs;
  bool fill_kernel;     /* a fill as a kernel node of the fill kernel */
  gpu_seq *body;        /* a conditional while loop's */
  uint64_t cond_params; /* its parameter block: {flag address, max_trips | trips << 32} */
  /* what it was last given (a launch's arguments are in args), for a run
   * node by node (cuda_timed.c) */
  gpu_node node;
} cu_node;

struct gpu_seq {
  gpu_backend *owner; /* first, as in every backend (gpu_owner) */
  cuda_backend *b;
  int dev;
  cu_node *nodes;
  uint32_t n, cap;
  cu_segment *segs;
  uint32_t nsegs, segcap;
  bool finalized;
  /* a conditional node's body: its graph is the node's, instantiated with
   * the parent's, and it ends with the condition kernel */
  gpu_seq *parent;
  uint16_t parent_seg;
  CUgraphConditionalHandle handle;
  uint64_t cond_params;
};

/* The fill kernel's launch shape (cuda_own.c builds it). */
enum { FILL_BLOCK = 256, FILL_MAX_BLOCKS = 4096 };
/* Settles how d runs while loops, at its first loop (d's context current):
 * conditional nodes with the condition kernel, or from the host (d->loops). */
void cu_loops_setup(cuda_backend *b, cu_device *d);
/* Whether fills that change size are kernel nodes of the fill kernel on d
 * (settled at the first; else memsets). */
bool cu_fills_by_kernel(cuda_backend *b, cu_device *d);

/* The start of a sequence's launch (cuda_launch.c): cu_launch_begin, the
 * sequence finalized (and not a loop's body), its device's context current. */
int cu_seq_begin(gpu_seq *s, gpu_failure *f, schedrun_error_t *err);
/* Trip t of a while loop driven from the host: after the device's work so
 * far (a deadline-aware wait), not abandoned, not past the deadline; *go
 * says whether the flag at `flag` asks for the trip. */
int cu_host_trip(cuda_backend *b, cu_device *d, uint64_t flag, uint32_t t, uint32_t max_trips, uint64_t deadline_ns,
                 gpu_failure *f, bool *go, schedrun_error_t *err);

/* A kernel node's parameters from n, with cn's marshalled arguments. */
void cu_kernel_params(const cu_node *cn, const gpu_node *n, CUDA_KERNEL_NODE_PARAMS *kp);
/* A fill as the fill kernel's launch (cn->args and cn->params hold its 4 arguments). */
void cu_fill_kernel_params(const cu_device *d, cu_node *cn, const gpu_node *n, CUDA_KERNEL_NODE_PARAMS *kp);
/* A fill as memsets: how many (0 for an empty fill). */
int cu_fill_params(const gpu_node *n, CUDA_MEMSET_NODE_PARAMS mp[2]);

#endif
