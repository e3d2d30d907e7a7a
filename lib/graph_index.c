/*
 * A graph's edges by node, and the check for cycles, both linear in the
 * graph's size: a graph of 10,000 jobs each after the 50 before it has half
 * a million edges, and scanning them all for every node is what made its
 * submission take seconds.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/graph.h"

void graph_index_free(graph_index *x) {
  free(x->in_start);
  free(x->in);
  free(x->out_start);
  free(x->out);
  memset(x, 0, sizeof *x);
}

int graph_index_build(const schedrun_graph_t *g, graph_index *x, schedrun_error_t *err) {
  size_t n = g->n, ne = g->ne;
  x->in_start = calloc(n + 1, sizeof *x->in_start);
  x->out_start = calloc(n + 1, sizeof *x->out_start);
  x->in = malloc((ne ? ne : 1) * sizeof *x->in);
  x->out = malloc((ne ? ne : 1) * sizeof *x->out);
  if (!x->in_start || !x->out_start || !x->in || !x->out) {
    graph_index_free(x);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  /* counting sort by node, stable: each node's edges keep their order */
  for (size_t e = 0; e < ne; e++) {
    x->in_start[g->edges[e].to + 1]++;
    x->out_start[g->edges[e].from + 1]++;
  }
  for (size_t i = 0; i < n; i++) {
    x->in_start[i + 1] += x->in_start[i];
    x->out_start[i + 1] += x->out_start[i];
  }
  size_t *in_at = calloc(n ? n : 1, sizeof *in_at), *out_at = calloc(n ? n : 1, sizeof *out_at);
  if (!in_at || !out_at) {
    free(in_at);
    free(out_at);
    graph_index_free(x);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  for (size_t e = 0; e < ne; e++) {
    int to = g->edges[e].to, from = g->edges[e].from;
    x->in[x->in_start[to] + in_at[to]++] = e;
    x->out[x->out_start[from] + out_at[from]++] = e;
  }
  free(in_at);
  free(out_at);
  assert(x->in_start[n] == ne && x->out_start[n] == ne);
  return SCHEDRUN_OK;
}

/* Refuses a cycle, naming it: nodes are taken in an order where every node
 * comes after those before it (Kahn); what is left lies on or after a cycle,
 * and walking back along edges from one of them must meet a node twice. */
int graph_check_cycles_indexed(const schedrun_graph_t *g, const graph_index *x, schedrun_error_t *err) {
  size_t *indeg = calloc(g->n ? g->n : 1, sizeof *indeg), *queue = calloc(g->n ? g->n : 1, sizeof *queue);
  if (!indeg || !queue) {
    free(indeg);
    free(queue);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < g->n; i++) indeg[i] = x->in_start[i + 1] - x->in_start[i];
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < g->n; i++)
    if (!indeg[i]) queue[tail++] = i;
  while (head < tail) {
    size_t v = queue[head++];
    for (size_t k = x->out_start[v]; k < x->out_start[v + 1]; k++) {
      size_t to = (size_t)g->edges[x->out[k]].to;
      if (--indeg[to] == 0) queue[tail++] = to;
    }
  }
  int rc = SCHEDRUN_OK;
  if (tail < g->n) {
    /* a node left; step back along an edge from a node also left until one repeats */
    size_t v = 0;
    while (!indeg[v]) v++;
    size_t *seen = queue; /* reused: the step at which each node was met, +1 */
    memset(seen, 0, g->n * sizeof *seen);
    size_t step = 1;
    while (!seen[v]) {
      seen[v] = step++;
      for (size_t k = x->in_start[v]; k < x->in_start[v + 1]; k++)
        if (indeg[g->edges[x->in[k]].from]) {
          v = (size_t)g->edges[x->in[k]].from;
          break;
        }
    }
    /* v starts the cycle: walk it again, forwards in the order met (backwards in edges) */
    strbuf sb;
    sb_init(&sb);
    size_t start = v, n = 0;
    char l[160];
    do {
      graph_node_label(g, (int)v, l, sizeof l);
      sb_addf(&sb, "%s%s", n++ ? " <- " : "", l);
      for (size_t k = x->in_start[v]; k < x->in_start[v + 1]; k++) {
        size_t from = (size_t)g->edges[x->in[k]].from;
        if (indeg[from] && seen[from]) {
          v = from;
          break;
        }
      }
    } while (v != start && n <= g->n);
    graph_node_label(g, (int)start, l, sizeof l);
    sb_addf(&sb, " <- %s", l);
    rc = err_set(err, SCHEDRUN_EINVAL, "the graph has a cycle (each node runs after the next): %s", sb.data ? sb.data : "");
    sb_free(&sb);
  }
  free(indeg);
  free(queue);
  return rc;
}

int graph_check_cycles(const schedrun_graph_t *g, schedrun_error_t *err) {
  graph_index x;
  int rc = graph_index_build(g, &x, err);
  if (rc == SCHEDRUN_OK) rc = graph_check_cycles_indexed(g, &x, err);
  graph_index_free(&x);
  return rc;
}
