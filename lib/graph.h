/*
 * A job graph as the caller makes it (lib/api_graph.c) or a stages config
 * describes it (lib/api_stages.c). Private to lib/.
 */
#ifndef SCHEDRUN_LIB_GRAPH_H
#define SCHEDRUN_LIB_GRAPH_H

#include "lib/deps.h"

typedef struct g_edge {
  int from, to;
  char *from_buf, *to_buf; /* NULL for an edge that moves nothing */
} g_edge;

typedef struct g_node {
  bool host;
  schedrun_program_t *prog;
  schedrun_job_options_t o; /* inputs and after point into the copies below */
  schedrun_input_t *inputs;
  schedrun_job_t *after;
  char *name; /* a host task's */
  schedrun_host_fn fn;
  void *user;
  char *stage; /* its name in a stages config, or NULL */
} g_node;

struct schedrun_graph {
  g_node *nodes;
  size_t n, cap;
  g_edge *edges;
  size_t ne, ecap;
  /* a stages config's (schedrun_graph_load_file): what it is called, its
   * devices and repeat, and the programs of its stages, freed with it */
  char *name, *devices;
  int repeat;
  schedrun_program_t **programs;
  size_t nprograms;
};

/* "node 2 (a job of 'saxpy')", "stage 'combine'": a node in messages. */
void graph_node_label(const schedrun_graph_t *g, int i, char *buf, size_t size);

/* ---- the edges by node (lib/graph_index.c) ---- */

/* Each node's edges in, and out, in the order they were added: edges[in[k]]
 * for k in [in_start[i], in_start[i + 1]) end at node i; likewise out. Built
 * in O(nodes + edges), so that submitting a graph is linear in its size. */
typedef struct graph_index {
  size_t *in_start, *in, *out_start, *out;
} graph_index;
int graph_index_build(const schedrun_graph_t *g, graph_index *x, schedrun_error_t *err);
void graph_index_free(graph_index *x);
/* Refuses a cycle, naming the nodes on it (SCHEDRUN_EINVAL). */
int graph_check_cycles(const schedrun_graph_t *g, schedrun_error_t *err);
int graph_check_cycles_indexed(const schedrun_graph_t *g, const graph_index *x, schedrun_error_t *err);

#endif
