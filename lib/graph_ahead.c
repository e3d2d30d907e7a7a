/*
 * Jobs of a graph sent ahead: a job whose every predecessor is a job of the
 * same graph that is sent now (or ahead itself) goes to the scheduler now,
 * with the jobs it runs after, and the scheduler releases it when they are
 * done (actors/scheduler_then.c), without their COMPLETEs crossing back
 * here and its SUBMIT crossing again. A chain of hand-offs then costs the
 * scheduler a completion and a placement per step, and nothing here.
 *
 * Each predecessor's SUBMIT lists the edges to jobs sent ahead (`then`:
 * {follower, park index or UINT64_MAX, the follower's buffer}); each job
 * sent ahead says how many edges it waits for (`waits`). Its node here is
 * marked `ahead`: it still counts its predecessors' completions down, so
 * that a failure is named here as for any job after a job, and its result
 * is filed after theirs (lib/api_deps.c).
 *
 * Not sent ahead: jobs after a host task (its buffers are here), jobs that
 * also run after jobs outside the graph, and what follows them.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "lib/deps.h"
#include "lib/graph.h"

/* The nodes in an order where every node comes after those it runs after
 * (the graph has no cycle: checked). NULL without memory. */
static size_t *topo_order(const schedrun_graph_t *g, const graph_index *x) {
  size_t *order = malloc(g->n * sizeof *order), *left = malloc(g->n * sizeof *left);
  if (!order || !left) {
    free(order);
    free(left);
    return NULL;
  }
  size_t n = 0;
  for (size_t i = 0; i < g->n; i++)
    if ((left[i] = x->in_start[i + 1] - x->in_start[i]) == 0) order[n++] = i;
  for (size_t k = 0; k < n; k++)
    for (size_t e = x->out_start[order[k]]; e < x->out_start[order[k] + 1]; e++) {
      size_t to = (size_t)g->edges[x->out[e]].to;
      if (--left[to] == 0) order[n++] = to;
    }
  assert(n == g->n); /* acyclic */
  free(left);
  return order;
}

/* Whether node i can go ahead: a job, not failed already, waiting only for
 * jobs of this graph, each sent now or ahead. */
static bool can_go(const schedrun_graph_t *g, const graph_index *x, pending_job **pjs, const bool *goes, size_t i) {
  const dep_node *d = pjs[i]->dep;
  size_t nin = x->in_start[i + 1] - x->in_start[i];
  if (g->nodes[i].host || !d->is_job || d->fail_status != SCHEDRUN_OK || d->waiting != nin) return false;
  for (size_t e = x->in_start[i]; e < x->in_start[i + 1]; e++)
    if (!goes[g->edges[x->in[e]].from]) return false;
  return true;
}

size_t graph_mark_ahead(const schedrun_graph_t *g, const graph_index *x, pending_job **pjs, size_t *order_out) {
  size_t *order = topo_order(g, x);
  bool *goes = calloc(g->n, sizeof *goes);
  size_t *nthen = calloc(g->n, sizeof *nthen);
  size_t nahead = 0;
  if (!order || !goes || !nthen) goto out;
  /* roots go now (deps_settle releases them); then, in order, what follows */
  for (size_t k = 0; k < g->n; k++) {
    size_t i = order[k];
    const dep_node *d = pjs[i]->dep;
    if (d->waiting == 0) goes[i] = !g->nodes[i].host && d->is_job && d->fail_status == SCHEDRUN_OK;
    else if ((goes[i] = can_go(g, x, pjs, goes, i))) {
      order_out[nahead++] = i;
      for (size_t e = x->in_start[i]; e < x->in_start[i + 1]; e++) nthen[g->edges[x->in[e]].from]++;
    }
  }
  /* each predecessor's list, sized first: nothing is marked unless all fit */
  for (size_t i = 0; i < g->n && nahead; i++) {
    msg_u64s *t = &pjs[i]->dep->submit.body.submit.then;
    if (nthen[i] && !(t->v = malloc(3 * nthen[i] * sizeof *t->v))) {
      for (size_t k = 0; k < i; k++) {
        free(pjs[k]->dep->submit.body.submit.then.v);
        pjs[k]->dep->submit.body.submit.then.v = NULL;
      }
      nahead = 0;
    }
  }
  for (size_t k = 0; k < nahead; k++) {
    dep_node *d = pjs[order_out[k]]->dep;
    d->ahead = true;
    d->submit.body.submit.waits = (uint32_t)d->waiting;
  }
  for (size_t i = 0; i < g->n && nahead; i++) {
    dep_node *d = pjs[i]->dep;
    msg_u64s *t = &d->submit.body.submit.then;
    for (size_t k = 0; k < d->nouts; k++) {
      const dep_out *e = &d->outs[k];
      if (!e->to->dep->ahead) continue;
      assert(t->n + 3 <= 3 * nthen[i] && (e->park >= 0) == (e->in >= 0)); /* a job hands on parcels */
      t->v[t->n++] = e->to->id;
      t->v[t->n++] = e->park >= 0 ? (uint64_t)e->park : UINT64_MAX;
      t->v[t->n++] = e->in >= 0 ? e->to->dep->ins[e->in].buffer : 0;
    }
    assert(t->n == 3 * nthen[i]);
  }
out:
  free(order);
  free(goes);
  free(nthen);
  return nahead;
}

void graph_send_ahead(pending_job **pjs, const size_t *order, size_t nahead, deps_work *w) {
  for (size_t k = 0; k < nahead; k++) {
    dep_node *d = pjs[order[k]]->dep;
    assert(d->ahead && d->held && d->is_job && w->nsend < w->send_cap); /* room was made first */
    w->send[w->nsend++] = d->submit;
    memset(&d->submit, 0, sizeof d->submit);
    d->held = false; /* the scheduler releases it */
    d->is_job = false;
  }
}
