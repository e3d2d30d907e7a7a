/*
 * Stages configs: a job graph written as YAML (docs/config.md, "Job
 * graphs"). Each stage is a job of a program config of its own; `after`
 * and `inputs` make the edges. Problems are reported as the program loader
 * reports them, "file:line:col: message", all of them at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "lib/graph.h"
#include "program/load_util.h"
#include "program/yaml_depth.h"

#define MAX_STAGES 4096

/* The stage names, in order, and their nodes in the document. */
typedef struct stage_list {
  const char **names;
  node **after, **inputs; /* each stage's `after` and `inputs`, or NULL */
  size_t n;
} stage_list;

static int find_stage(const stage_list *sl, const char *name) {
  for (size_t i = 0; i < sl->n; i++)
    if (!strcmp(sl->names[i], name)) return (int)i;
  return -1;
}

/* One stage: its program (relative to the config) and options. */
static void load_stage(ld *l, schedrun_graph_t *g, const char *name, node *spec, node **after, node **inputs) {
  static const char *const keys[] = {"config", "device", "job", "after", "inputs", NULL};
  node *f[5];
  *after = *inputs = NULL;
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  int node_ix = -1;
  schedrun_program_t *p = NULL;
  if (!ld_read_map(l, spec, "a stage", keys, f)) goto placeholder;
  *after = f[3];
  *inputs = f[4];
  int64_t v;
  if (f[1] && ld_read_int(l, f[1], "device", 0, SCHEDRUN_MAX_DEVICES - 1, &v)) o.device = (int)v;
  if (f[2] && ld_read_int(l, f[2], "job", 0, 1000000, &v)) o.job = (int)v;
  const char *rel = f[0] ? ld_read_str(l, f[0], "config") : NULL;
  if (!f[0]) ld_problem(l, spec, "stage '%s' has no config (the program config it runs)", name);
  if (rel) {
    char *path = fs_join_rel(l->file, rel);
    schedrun_error_t e = {0};
    if (!path || schedrun_program_load_file(NULL, path, &p, &e) != SCHEDRUN_OK) {
      /* the program's own problems, each with its place, under the stage's */
      ld_problem(l, f[0], "stage '%s': its config does not load:\n%s", name, e.message ? e.message : "out of memory");
      schedrun_error_clear(&e);
    }
    free(path);
  }
placeholder:
  if (p) {
    schedrun_program_t **v2 = realloc(g->programs, (g->nprograms + 1) * sizeof *v2);
    schedrun_error_t e = {0};
    if (!v2 || schedrun_graph_job(g, p, &o, &node_ix, &e) != SCHEDRUN_OK) {
      if (v2) g->programs = v2;
      schedrun_program_free(&p);
      l->out_of_memory = true;
      ld_problem(l, spec, "out of memory for stage '%s'", name);
      schedrun_error_clear(&e);
    } else {
      g->programs = v2;
      g->programs[g->nprograms++] = p;
    }
  }
  if (node_ix >= 0) g->nodes[node_ix].stage = xstrdup(name);
}

/* A stage's `after` and `inputs`, once every stage is known. */
static void load_edges(ld *l, schedrun_graph_t *g, const stage_list *sl, size_t i, const int *nodes) {
  node *f[5] = {NULL, NULL, NULL, sl->after[i], sl->inputs[i]};
  if (nodes[i] < 0) return;
  schedrun_error_t e = {0};
  if (f[3]) {
    if (f[3]->type != YAML_SEQUENCE_NODE) {
      ld_problem(l, f[3], "after must be a list of stage names, not %s", ld_kind_name(f[3]));
    } else {
      for (yaml_node_item_t *it = f[3]->data.sequence.items.start; it < f[3]->data.sequence.items.top; it++) {
        node *a = ld_get(l, *it);
        const char *before = a ? ld_read_str(l, a, "a stage name") : NULL;
        if (!before) continue;
        int k = find_stage(sl, before);
        if (k < 0) ld_problem(l, a, "stage '%s' runs after '%s', which is no stage", sl->names[i], before);
        else if ((size_t)k == i) ld_problem(l, a, "stage '%s' cannot run after itself", sl->names[i]);
        else if (nodes[k] >= 0 && schedrun_graph_after(g, nodes[i], nodes[k], &e) != SCHEDRUN_OK)
          ld_problem(l, a, "%s", e.message);
        schedrun_error_clear(&e);
      }
    }
  }
  if (!f[4]) return;
  if (f[4]->type != YAML_MAPPING_NODE) {
    ld_problem(l, f[4], "inputs must be a mapping of BUFFER: STAGE.BUFFER, not %s", ld_kind_name(f[4]));
    return;
  }
  for (yaml_node_pair_t *pr = f[4]->data.mapping.pairs.start; pr < f[4]->data.mapping.pairs.top; pr++) {
    node *k = ld_get(l, pr->key), *v = ld_get(l, pr->value);
    const char *to = k ? ld_read_str(l, k, "a buffer name") : NULL;
    const char *from = v ? ld_read_str(l, v, "an input (STAGE.BUFFER)") : NULL;
    if (!to || !from) continue;
    const char *dot = strchr(from, '.');
    if (!dot || dot == from || !dot[1]) {
      ld_problem(l, v, "input '%s' must be STAGE.BUFFER (a buffer of the stage it comes from)", from);
      continue;
    }
    char *stage = xstrndup(from, (size_t)(dot - from));
    int s = stage ? find_stage(sl, stage) : -1;
    if (s < 0) ld_problem(l, v, "input '%s' comes from '%s', which is no stage", from, stage ? stage : "?");
    else if ((size_t)s == i) ld_problem(l, v, "stage '%s' cannot take an input from itself ('%s')", sl->names[i], from);
    else if (nodes[s] >= 0 && schedrun_graph_handoff(g, nodes[s], dot + 1, nodes[i], to, &e) != SCHEDRUN_OK)
      ld_problem(l, v, "%s", strncmp(e.message, "schedrun_graph_handoff: ", 24) ? e.message : e.message + 24);
    schedrun_error_clear(&e);
    free(stage);
  }
}

static void load_graph(ld *l, node *root, schedrun_graph_t *g) {
  static const char *const keys[] = {"version", "name", "devices", "repeat", "stages", NULL};
  node *f[5];
  if (!ld_read_map(l, root, "the config", keys, f)) return;
  int64_t v;
  if (!f[0]) ld_problem(l, root, "version is missing (this format is version 1)");
  else if (ld_read_int(l, f[0], "version", 1, 1000, &v) && v != 1)
    ld_problem(l, f[0], "version %lld is not supported (this is version 1)", (long long)v);
  const char *s;
  if (f[1] && (s = ld_read_str(l, f[1], "name"))) g->name = xstrdup(s);
  if (f[2] && (s = ld_read_str(l, f[2], "devices"))) g->devices = xstrdup(s);
  if (f[3] && ld_read_int(l, f[3], "repeat", 1, 1000000, &v)) g->repeat = (int)v;
  if (!f[4]) {
    ld_problem(l, root, "stages is missing (a mapping of stage names to stages)");
    return;
  }
  if (f[4]->type != YAML_MAPPING_NODE || f[4]->data.mapping.pairs.top == f[4]->data.mapping.pairs.start) {
    ld_problem(l, f[4], "stages must be a non-empty mapping of stage names to stages");
    return;
  }
  size_t n = (size_t)(f[4]->data.mapping.pairs.top - f[4]->data.mapping.pairs.start);
  if (n > MAX_STAGES) {
    ld_problem(l, f[4], "%zu stages; at most %d", n, MAX_STAGES);
    return;
  }
  stage_list sl = {calloc(n, sizeof(char *)), calloc(n, sizeof(node *)), calloc(n, sizeof(node *)), 0};
  int *nodes = calloc(n, sizeof *nodes);
  bool have = sl.names && sl.after && sl.inputs && nodes;
  if (!have) {
    l->out_of_memory = true;
    ld_problem(l, f[4], "out of memory for the stages");
  }
  for (yaml_node_pair_t *pr = f[4]->data.mapping.pairs.start; have && pr < f[4]->data.mapping.pairs.top; pr++) {
    node *k = ld_get(l, pr->key), *val = ld_get(l, pr->value);
    const char *name = k ? ld_read_str(l, k, "a stage name") : NULL;
    if (!name || !val) continue;
    if (find_stage(&sl, name) >= 0) {
      ld_problem(l, k, "stage '%s' appears twice", name);
      continue;
    }
    size_t before = g->n;
    load_stage(l, g, name, val, &sl.after[sl.n], &sl.inputs[sl.n]);
    nodes[sl.n] = g->n > before ? (int)before : -1;
    sl.names[sl.n++] = name;
  }
  for (size_t i = 0; have && i < sl.n; i++) load_edges(l, g, &sl, i, nodes);
  if (l->problems == 0) {
    schedrun_error_t e = {0};
    if (graph_check_cycles(g, &e) != SCHEDRUN_OK) ld_problem(l, f[4], "%s", e.message);
    schedrun_error_clear(&e);
  }
  free(sl.names);
  free(sl.after);
  free(sl.inputs);
  free(nodes);
}

/* Parses path into l->doc; false (with the problem reported) when it cannot. */
static bool parse(ld *l, const char *path) {
  char *data;
  size_t len;
  schedrun_error_t e = {0};
  if (fs_read_input(path, PROG_MAX_CONFIG_BYTES, &data, &len, &e) != SCHEDRUN_OK) {
    err_set(l->err, SCHEDRUN_ECONFIG, "%s", e.message);
    schedrun_error_clear(&e);
    return false;
  }
  bool ok = prog_yaml_parse(path, data, len, &l->doc, l->err);
  free(data);
  return ok;
}

int schedrun_config_is_graph(const char *path, schedrun_error_t *err) {
  if (!path) return err_set(err, SCHEDRUN_EINVAL, "schedrun_config_is_graph: path is NULL");
  ld l;
  memset(&l, 0, sizeof l);
  l.file = path;
  l.err = err;
  if (!parse(&l, path)) return SCHEDRUN_ECONFIG;
  node *root = yaml_document_get_root_node(&l.doc);
  int is = 0;
  for (yaml_node_pair_t *pr = root && root->type == YAML_MAPPING_NODE ? root->data.mapping.pairs.start : NULL;
       pr && pr < root->data.mapping.pairs.top; pr++) {
    node *k = ld_get(&l, pr->key);
    if (k && k->type == YAML_SCALAR_NODE && !strcmp(ld_sval(k), "stages")) is = 1;
  }
  yaml_document_delete(&l.doc);
  return is;
}

int schedrun_graph_load_file(const char *path, schedrun_graph_t **out, schedrun_error_t *err) {
  if (!path || !out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_graph_load_file: %s is NULL", !path ? "path" : "out");
  *out = NULL;
  if (err) schedrun_error_clear(err);
  ld l;
  memset(&l, 0, sizeof l);
  l.file = path;
  l.err = err;
  if (!parse(&l, path)) return SCHEDRUN_ECONFIG;
  schedrun_graph_t *g;
  if (schedrun_graph_new(&g, err) != SCHEDRUN_OK) {
    yaml_document_delete(&l.doc);
    return SCHEDRUN_ENOMEM;
  }
  node *root = yaml_document_get_root_node(&l.doc);
  if (!root) ld_problem(&l, NULL, "the config is empty");
  else load_graph(&l, root, g);
  yaml_document_delete(&l.doc);
  if (l.problems > MAX_PROBLEMS)
    err_append(err, SCHEDRUN_ECONFIG, "%s: %d more problems not shown", path, l.problems - MAX_PROBLEMS);
  if (l.problems) {
    schedrun_graph_free(&g);
    if (l.out_of_memory && err) err->code = SCHEDRUN_ENOMEM;
    return l.out_of_memory ? SCHEDRUN_ENOMEM : SCHEDRUN_ECONFIG;
  }
  *out = g;
  return SCHEDRUN_OK;
}
