/*
 * Job graphs as the caller makes them (schedrun_graph_*): nodes (jobs of
 * programs, host tasks), edges (runs after) and hand-offs (runs after, and
 * a buffer moves with it). Each call checks what it can at once; submitting
 * checks the rest (cycles, devices) and registers every node as a job, held
 * here until the nodes before it complete (lib/api_deps.c).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/graph.h"

int schedrun_graph_new(schedrun_graph_t **out, schedrun_error_t *err) {
  if (!out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_graph_new: out is NULL");
  *out = calloc(1, sizeof **out);
  return *out ? SCHEDRUN_OK : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
}

static void node_free(g_node *n) {
  free(n->stage);
  for (size_t i = 0; i < n->o.ninputs; i++) {
    free((void *)n->inputs[i].buffer);
    free((void *)n->inputs[i].data);
  }
  free(n->inputs);
  free(n->after);
  free(n->name);
}

void schedrun_graph_free(schedrun_graph_t **g) {
  if (!g || !*g) return;
  for (size_t i = 0; i < (*g)->n; i++) node_free(&(*g)->nodes[i]);
  for (size_t i = 0; i < (*g)->ne; i++) {
    free((*g)->edges[i].from_buf);
    free((*g)->edges[i].to_buf);
  }
  free((*g)->nodes);
  free((*g)->edges);
  for (size_t i = 0; i < (*g)->nprograms; i++) schedrun_program_free(&(*g)->programs[i]);
  free((*g)->programs);
  free((*g)->name);
  free((*g)->devices);
  free(*g);
  *g = NULL;
}

size_t schedrun_graph_size(const schedrun_graph_t *g) { return g ? g->n : 0; }

const char *schedrun_graph_node_name(const schedrun_graph_t *g, size_t node) {
  if (!g || node >= g->n) return NULL;
  const g_node *n = &g->nodes[node];
  return n->stage ? n->stage : n->host ? n->name : n->prog->p->name;
}

void schedrun_graph_set_run(schedrun_graph_t *g, int run) {
  for (size_t i = 0; g && run >= 0 && i < g->n; i++) g->nodes[i].o.run = run;
}

void schedrun_graph_set_timeout(schedrun_graph_t *g, int timeout_ms) {
  for (size_t i = 0; g && timeout_ms >= 0 && i < g->n; i++) g->nodes[i].o.timeout_ms = timeout_ms;
}

const char *schedrun_graph_name(const schedrun_graph_t *g) { return g ? g->name : NULL; }
const char *schedrun_graph_devices(const schedrun_graph_t *g) { return g ? g->devices : NULL; }
int schedrun_graph_repeat(const schedrun_graph_t *g) { return g && g->repeat > 0 ? g->repeat : 1; }

static g_node *add_node(schedrun_graph_t *g, schedrun_error_t *err) {
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 8;
    g_node *v = realloc(g->nodes, cap * sizeof *v);
    if (!v) {
      err_set(err, SCHEDRUN_ENOMEM, "out of memory");
      return NULL;
    }
    g->nodes = v;
    g->cap = cap;
  }
  g_node *n = &g->nodes[g->n];
  memset(n, 0, sizeof *n);
  return n;
}

int schedrun_graph_job(schedrun_graph_t *g, schedrun_program_t *p, const schedrun_job_options_t *o, int *node,
                       schedrun_error_t *err) {
  if (!g || !p || !node)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_graph_job: %s is NULL", !g ? "the graph" : !p ? "the program" : "node");
  if (o && ((o->ninputs && !o->inputs) || (o->nafter && !o->after)))
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_graph_job: %s is NULL", o->ninputs && !o->inputs ? "inputs" : "after");
  if (o && o->nbinds)
    return err_set(err, SCHEDRUN_EINVAL,
                   "schedrun_graph_job: binds are for jobs submitted alone (a graph's jobs hand buffers on instead)");
  g_node *n = add_node(g, err);
  if (!n) return SCHEDRUN_ENOMEM;
  schedrun_job_options_init(&n->o);
  if (o) n->o = *o;
  n->prog = p;
  n->inputs = calloc(n->o.ninputs ? n->o.ninputs : 1, sizeof *n->inputs);
  n->after = calloc(n->o.nafter ? n->o.nafter : 1, sizeof *n->after);
  bool ok = n->inputs && n->after;
  for (size_t i = 0; ok && i < n->o.ninputs; i++) {
    const schedrun_input_t *in = &o->inputs[i];
    void *data = malloc(in->bytes ? in->bytes : 1);
    n->inputs[i] = (schedrun_input_t){in->buffer ? xstrdup(in->buffer) : NULL, data, in->bytes};
    if (!data || (in->buffer && !n->inputs[i].buffer)) ok = false;
    else if (in->data) memcpy(data, in->data, in->bytes);
    else n->inputs[i].data = NULL, free(data); /* refused at submit, as schedrun_submit refuses it */
  }
  if (ok && n->o.nafter) memcpy(n->after, o->after, n->o.nafter * sizeof *n->after);
  n->o.inputs = n->inputs;
  n->o.after = n->after;
  if (!ok) {
    node_free(n);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  *node = (int)g->n++;
  return SCHEDRUN_OK;
}

int schedrun_graph_host(schedrun_graph_t *g, const char *name, schedrun_host_fn fn, void *user, int *node,
                        schedrun_error_t *err) {
  if (!g || !name || !fn || !node)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_graph_host: %s is NULL",
                   !g ? "the graph" : !name ? "name" : !fn ? "fn" : "node");
  g_node *n = add_node(g, err);
  if (!n) return SCHEDRUN_ENOMEM;
  schedrun_job_options_init(&n->o);
  n->host = true;
  n->fn = fn;
  n->user = user;
  if (!(n->name = xstrdup(name))) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  *node = (int)g->n++;
  return SCHEDRUN_OK;
}

/* "node 2 (a job of 'saxpy')", "node 3 (host task 'sum')" */
void graph_node_label(const schedrun_graph_t *g, int i, char *buf, size_t size) {
  const g_node *n = &g->nodes[i];
  if (n->stage) snprintf(buf, size, "stage '%s'", n->stage);
  else if (n->host) snprintf(buf, size, "node %d (host task '%s')", i, n->name);
  else snprintf(buf, size, "node %d (a job of '%s')", i, n->prog->p->name);
}

static int check_node(const schedrun_graph_t *g, const char *fn, const char *what, int i, schedrun_error_t *err) {
  if (i < 0 || (size_t)i >= g->n)
    return err_set(err, SCHEDRUN_EINVAL, "%s: %s is node %d; the graph has %zu", fn, what, i, g->n);
  return SCHEDRUN_OK;
}

static int add_edge(schedrun_graph_t *g, int from, int to, const char *from_buf, const char *to_buf,
                    schedrun_error_t *err) {
  if (g->ne == g->ecap) {
    size_t cap = g->ecap ? 2 * g->ecap : 8;
    g_edge *v = realloc(g->edges, cap * sizeof *v);
    if (!v) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    g->edges = v;
    g->ecap = cap;
  }
  g_edge *e = &g->edges[g->ne];
  *e = (g_edge){from, to, from_buf ? xstrdup(from_buf) : NULL, to_buf ? xstrdup(to_buf) : NULL};
  if ((from_buf && !e->from_buf) || (to_buf && !e->to_buf)) {
    free(e->from_buf);
    free(e->to_buf);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  g->ne++;
  return SCHEDRUN_OK;
}

int schedrun_graph_after(schedrun_graph_t *g, int node, int before, schedrun_error_t *err) {
  static const char fn[] = "schedrun_graph_after";
  if (!g) return err_set(err, SCHEDRUN_EINVAL, "%s: the graph is NULL", fn);
  int rc = check_node(g, fn, "node", node, err);
  if (rc == SCHEDRUN_OK) rc = check_node(g, fn, "before", before, err);
  if (rc) return rc;
  if (node == before) return err_set(err, SCHEDRUN_EINVAL, "%s: node %d cannot run after itself", fn, node);
  return add_edge(g, before, node, NULL, NULL, err);
}

/* The size of a job node's buffer, or -1 (err says why) when it has none of that name. */
static long long job_buffer(const schedrun_graph_t *g, const char *fn, int i, const char *name, int *index,
                            schedrun_error_t *err) {
  const prog_program *p = g->nodes[i].prog->p;
  int b = prog_find_buffer(p, name);
  if (b < 0) {
    char l[160];
    graph_node_label(g, i, l, sizeof l);
    err_set(err, SCHEDRUN_EINVAL, "%s: %s has no buffer '%s'", fn, l, name);
    return -1;
  }
  if (index) *index = b;
  return (long long)(p->buffers[b].count * prog_type_size(p->buffers[b].type));
}

int schedrun_graph_handoff(schedrun_graph_t *g, int from, const char *from_buffer, int to, const char *to_buffer,
                           schedrun_error_t *err) {
  static const char fn[] = "schedrun_graph_handoff";
  if (!g || !from_buffer || !to_buffer)
    return err_set(err, SCHEDRUN_EINVAL, "%s: %s is NULL", fn, !g ? "the graph" : !from_buffer ? "from_buffer" : "to_buffer");
  int rc = check_node(g, fn, "from", from, err);
  if (rc == SCHEDRUN_OK) rc = check_node(g, fn, "to", to, err);
  if (rc) return rc;
  if (from == to) return err_set(err, SCHEDRUN_EINVAL, "%s: node %d cannot hand a buffer to itself", fn, from);
  const g_node *f = &g->nodes[from], *t = &g->nodes[to];
  long long fb = -1, tb = -1;
  if (!f->host && (fb = job_buffer(g, fn, from, from_buffer, NULL, err)) < 0) return SCHEDRUN_EINVAL;
  if (!t->host && (tb = job_buffer(g, fn, to, to_buffer, NULL, err)) < 0) return SCHEDRUN_EINVAL;
  char fl[160], tl[160];
  graph_node_label(g, from, fl, sizeof fl);
  graph_node_label(g, to, tl, sizeof tl);
  if (fb >= 0 && tb >= 0 && fb != tb)
    return err_set(err, SCHEDRUN_EINVAL, "%s: %s's buffer '%s' has %lld bytes; %s's '%s' holds %lld", fn, fl,
                   from_buffer, fb, tl, to_buffer, tb);
  if (!f->host && f->o.record_only)
    return err_set(err, SCHEDRUN_EINVAL, "%s: %s is record_only: it runs nothing to hand on", fn, fl);
  for (size_t i = 0; i < g->ne; i++)
    if (g->edges[i].to == to && g->edges[i].to_buf && !strcmp(g->edges[i].to_buf, to_buffer))
      return err_set(err, SCHEDRUN_EINVAL, "%s: %s's buffer '%s' is already handed to it by node %d", fn, tl,
                     to_buffer, g->edges[i].from);
  for (size_t i = 0; i < t->o.ninputs; i++)
    if (t->inputs[i].buffer && !strcmp(t->inputs[i].buffer, to_buffer))
      return err_set(err, SCHEDRUN_EINVAL, "%s: %s's buffer '%s' is one of its inputs already", fn, tl, to_buffer);
  return add_edge(g, from, to, from_buffer, to_buffer, err);
}

/* One node's job as it is registered, before the lock: its pending_job
 * and node, and a job's SUBMIT (with the buffers it leaves for others). */
static int prepare(schedrun_t *s, const schedrun_graph_t *g, const graph_index *x, size_t i, pending_job **pjs,
                   schedrun_error_t *err) {
  const g_node *n = &g->nodes[i];
  static const char fn[] = "schedrun_graph_submit"; /* the node is named only in an error */
  pending_job *pj = pjs[i] = calloc(1, sizeof *pj);
  dep_node *d = pj ? (pj->dep = deps_node_new()) : NULL;
  if (!d) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  d->held = true;
  if (n->host) {
    d->fn = n->fn;
    d->user = n->user;
    if (!(d->name = xstrdup(n->name))) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  } else {
    int rc = api_check_options(s, fn, &n->o, err);
    if (rc == SCHEDRUN_OK) {
      d->is_job = true;
      msg_init(&d->submit, MSG_SUBMIT, 0, ACTOR_CLIENT);
      rc = api_fill_submit(n->prog->p, fn, &n->o, 0, &d->submit.body.submit, err);
    }
    if (rc) {
      char where[160];
      if (n->stage) graph_node_label(g, (int)i, where, sizeof where);
      else snprintf(where, sizeof where, "node %zu", i);
      return api_name_error(err, rc, fn, where);
    }
    d->submit.body.submit.program = 0; /* set once attached */
    d->pinned = n->o.device >= 0;
  }
  /* the buffers handed to it, in edge order */
  size_t nins = 0;
  for (size_t k = x->in_start[i]; k < x->in_start[i + 1]; k++) nins += g->edges[x->in[k]].to_buf != NULL;
  d->ins = calloc(nins ? nins : 1, sizeof *d->ins);
  if (!d->ins) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (size_t k = x->in_start[i]; k < x->in_start[i + 1]; k++) {
    const g_edge *ge = &g->edges[x->in[k]];
    assert(ge->to == (int)i);
    if (!ge->to_buf) continue;
    dep_in *in = &d->ins[d->nins++];
    in->device = -1;
    if (!(in->name = xstrdup(ge->to_buf))) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    if (!n->host) in->buffer = (uint32_t)prog_find_buffer(n->prog->p, ge->to_buf);
    const g_node *f = &g->nodes[ge->from];
    if (!f->host) {
      const prog_buffer *b = &f->prog->p->buffers[prog_find_buffer(f->prog->p, ge->from_buf)];
      in->bytes = b->count * prog_type_size(b->type);
    }
  }
  /* the buffers it leaves for the jobs after it: one parcel per hand-off */
  if (!n->host) {
    msg_submit *sb = &d->submit.body.submit;
    size_t np = 0;
    for (size_t k = x->out_start[i]; k < x->out_start[i + 1]; k++) np += g->edges[x->out[k]].from_buf != NULL;
    if (np && !(sb->park.v = malloc(np * sizeof *sb->park.v))) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    for (size_t k = x->out_start[i]; k < x->out_start[i + 1]; k++)
      if (g->edges[x->out[k]].from_buf)
        sb->park.v[sb->park.n++] = (uint64_t)prog_find_buffer(n->prog->p, g->edges[x->out[k]].from_buf);
  }
  return SCHEDRUN_OK;
}

/* The edges, under the lock, once every node is registered. */
static int connect(const schedrun_graph_t *g, pending_job **pjs, schedrun_error_t *err) {
  size_t *in_at = calloc(g->n, sizeof *in_at), *park_at = calloc(g->n, sizeof *park_at);
  int rc = in_at && park_at ? SCHEDRUN_OK : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (size_t e = 0; rc == SCHEDRUN_OK && e < g->ne; e++) {
    const g_edge *ge = &g->edges[e];
    bool moves = ge->to_buf != NULL;
    bool from_job = !g->nodes[ge->from].host;
    int in = moves ? (int)in_at[ge->to]++ : -1;
    int park = moves && from_job ? (int)park_at[ge->from]++ : -1;
    if (deps_add_out(pjs[ge->from], pjs[ge->to], in, park, moves && !from_job ? ge->from_buf : NULL) != 0)
      rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    else pjs[ge->to]->dep->waiting++;
  }
  free(in_at);
  free(park_at);
  return rc;
}

int schedrun_graph_submit(schedrun_t *s, schedrun_graph_t *g, schedrun_job_t *ids, schedrun_error_t *err) {
  static const char fn[] = "schedrun_graph_submit";
  if (!s || !g || !ids)
    return err_set(err, SCHEDRUN_EINVAL, "%s: %s is NULL", fn, !s ? "the scheduler" : !g ? "the graph" : "ids");
  for (size_t i = 0; i < g->n; i++) ids[i] = 0;
  if (g->n == 0) return err_set(err, SCHEDRUN_EINVAL, "%s: the graph has no nodes", fn);
  graph_index x;
  int rc = graph_index_build(g, &x, err);
  if (rc == SCHEDRUN_OK) rc = graph_check_cycles_indexed(g, &x, err);
  if (rc && rc != SCHEDRUN_ENOMEM && err && err->message) {
    schedrun_error_t named = {0};
    err_set(&named, rc, "%s: %s", fn, err->message);
    err_move(err, &named);
  }
  pending_job **pjs = rc ? NULL : calloc(g->n, sizeof *pjs);
  if (rc == SCHEDRUN_OK && !pjs) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (size_t i = 0; rc == SCHEDRUN_OK && i < g->n; i++) rc = prepare(s, g, &x, i, pjs, err);
  graph_index_free(&x);
  if (rc) {
    for (size_t i = 0; pjs && i < g->n; i++)
      if (pjs[i]) {
        deps_node_free(s, pjs[i]->dep, false);
        free(pjs[i]);
      }
    free(pjs);
    return rc;
  }
  schedrun_job_options_t defaults;
  schedrun_job_options_init(&defaults);
  pthread_mutex_lock(&s->lock);
  rc = g->n > s->max_inflight
           ? err_set(err, SCHEDRUN_EINVAL, "%s: %zu nodes; at most max_inflight (%zu) jobs can be in flight", fn, g->n,
                     s->max_inflight)
           : api_wait_for_room(s, g->n, &defaults, err);
  if (rc == SCHEDRUN_OK && s->closing) rc = err_set(err, SCHEDRUN_ECLOSED, "%s: the scheduler is shut down", fn);
  for (size_t i = 0; rc == SCHEDRUN_OK && i < g->n; i++) {
    const g_node *n = &g->nodes[i];
    if (n->host) continue;
    rc = api_attach(s, n->prog, err);
    if (rc == SCHEDRUN_OK) rc = api_after_check(s, fn, n->o.after, n->o.nafter, err);
  }
  size_t reg = 0;
  for (; rc == SCHEDRUN_OK && reg < g->n; reg++) {
    const g_node *n = &g->nodes[reg];
    rc = api_register_job(s, n->host ? NULL : n->prog->p, n->host ? &defaults : &n->o, false, pjs[reg], err);
    if (rc) break;
    ids[reg] = pjs[reg]->id;
    if (!n->host) {
      pjs[reg]->dep->submit.job = pjs[reg]->id;
      pjs[reg]->dep->submit.body.submit.program = n->prog->id;
    }
  }
  if (rc == SCHEDRUN_OK) rc = connect(g, pjs, err);
  if (rc) {
    for (size_t i = 0; i < reg; i++) api_unregister_job(s, pjs[i]);
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < g->n; i++) {
      ids[i] = 0;
      deps_node_free(s, pjs[i]->dep, false);
      free(pjs[i]);
    }
    free(pjs);
    return rc;
  }
  /* nothing fails from here on: the jobs outside the graph they run after,
   * then what can start now */
  deps_work w = {0};
  for (size_t i = 0; i < g->n; i++)
    if (!g->nodes[i].host) deps_after(s, pjs[i], g->nodes[i].o.after, g->nodes[i].o.nafter);
  for (size_t i = 0; i < g->n; i++)
    if (pjs[i]->dep->waiting == 0) {
      pending_job **v = realloc(w.ready, (w.nready + 1) * sizeof *v);
      if (!v) continue;
      w.ready = v;
      w.ready_cap = w.nready + 1;
      w.ready[w.nready++] = pjs[i];
    }
  free(pjs);
  deps_settle(s, &w);
  api_file_work(s, &w, api_on_completer(s)); /* unlocks */
  return SCHEDRUN_OK;
}

/* ---- DOT ---- */

static void dot_escape(strbuf *sb, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') sb_add(sb, "\\", 1);
    sb_add(sb, s, 1);
  }
}

int schedrun_graph_write_dot(const schedrun_graph_t *g, const char *path, schedrun_error_t *err) {
  if (!g || !path)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_graph_write_dot: %s is NULL", !g ? "the graph" : "path");
  strbuf sb;
  sb_init(&sb);
  sb_adds(&sb, "digraph jobs {\n  rankdir=LR;\n  node [fontname=\"monospace\"];\n");
  if (g->name) {
    sb_adds(&sb, "  label=\"");
    dot_escape(&sb, g->name);
    sb_adds(&sb, "\";\n");
  }
  for (size_t i = 0; i < g->n; i++) {
    const g_node *n = &g->nodes[i];
    sb_addf(&sb, "  n%zu [shape=%s, label=\"", i, n->host ? "ellipse" : "box");
    if (n->host) {
      sb_adds(&sb, "host task ");
      dot_escape(&sb, n->name);
    } else if (n->stage) {
      dot_escape(&sb, n->stage);
      sb_adds(&sb, "\\nprogram ");
      dot_escape(&sb, n->prog->p->name);
      sb_addf(&sb, "\\njob %d", n->o.job);
      if (n->o.device >= 0) sb_addf(&sb, ", device %d", n->o.device);
    } else {
      dot_escape(&sb, n->prog->p->name);
      sb_addf(&sb, "\\nrun %d, job %d", n->o.run, n->o.job);
      if (n->o.device >= 0) sb_addf(&sb, ", device %d", n->o.device);
    }
    sb_adds(&sb, "\"];\n");
  }
  for (size_t e = 0; e < g->ne; e++) {
    const g_edge *ge = &g->edges[e];
    sb_addf(&sb, "  n%d -> n%d", ge->from, ge->to);
    if (ge->to_buf) {
      sb_adds(&sb, " [label=\"");
      dot_escape(&sb, ge->from_buf);
      sb_adds(&sb, " -> ");
      dot_escape(&sb, ge->to_buf);
      sb_adds(&sb, "\"]");
    } else {
      sb_adds(&sb, " [style=dashed]");
    }
    sb_adds(&sb, ";\n");
  }
  sb_adds(&sb, "}\n");
  if (sb.failed) {
    sb_free(&sb);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  int rc = fs_write_output(path, sb.data, sb.len, err);
  sb_free(&sb);
  return rc;
}
