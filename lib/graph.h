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

/* Refuses a cycle, naming the nodes on it (SCHEDRUN_EINVAL). */
int graph_check_cycles(const schedrun_graph_t *g, schedrun_error_t *err);

#endif
