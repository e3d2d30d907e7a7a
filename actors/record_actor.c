/*
 * The record actor: turns a program, for one execution context, into a
 * recorded sequence, and keeps it.
 *
 * Sequences are stored by seq_key {program, device, slot}; inside, each node
 * carries its node_key {command, record id} and remembers the parameters it
 * was recorded with (function, grid, addresses, scalars). On RECORD the actor
 * first builds the wanted node list for the job's bindings and variables
 * (record_nodes.c), without touching anything; then, against what is stored:
 *   - no sequence, or a different shape (the node keys or kinds differ):
 *     create it from scratch;
 *   - same shape: update in place exactly the nodes whose parameters changed,
 *     and reuse the others. Where the backend refuses an update in place (a
 *     driver allows only some changes to an instantiated graph), the
 *     recording is built afresh instead.
 * A failure while building the wanted list leaves the stored sequence as it was.
 * The scheduler never sends RECORD for a sequence that is executing, so an
 * update never happens under a running replay.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actor.h"
#include "actors/core.h"
#include "actors/exec_ctx_key.h"
#include "actors/record_nodes.h"
#include "common/artifact.h"

/* Above this many nodes the scratch list is freed after each RECORD. */
#define WANT_KEEP_NODES 4096

typedef struct rec_seq {
  node_list nodes;
  hmap index;     /* node_key -> position in nodes + 1: the key store */
  gpu_seq **seqs; /* by sequence number: segment roots own their while bodies */
  gpu_seq **roots; /* the segment roots in order (host steps between them) */
  msg_counts total;
  uint32_t rebuilds; /* times an update in place was refused and the recording built afresh */
  /* what it was recorded with besides the job's variables: while a RECORD
   * brings the same, only the nodes that depend on the job can change */
  uint64_t *bindings;
  gpu_function *fns;
  uint32_t nbindings, nfns;
} rec_seq;

/* The key a node is stored under. SCHEDRUN_RECORD_SHARED_SLOT builds the broken
 * variant this design exists to avoid (one state per command, the last
 * recording wins), only so that a test can show it fails. */
static node_key store_key(node_key k) {
#ifdef SCHEDRUN_RECORD_SHARED_SLOT
  k.record_id = 0;
#endif
  return k;
}

typedef struct mod_key {
  uint64_t program;
  uint32_t device;
  uint32_t kernel;
} mod_key;

typedef struct rec_module {
  char key[65];
  gpu_module *mod;
  gpu_function fn;
} rec_module;

struct record_state {
  schedrun_core *core;
  hmap seqs;    /* seq_key -> rec_seq* */
  hmap modules; /* mod_key -> rec_module* */
  node_list want;    /* scratch, reused between RECORDs */
  node_list dynamic; /* scratch: the job-dependent nodes evaluated again */
};

/* ---- applying the wanted list ---- */

static void to_gpu_node(const node_list *l, const rec_node *r, gpu_node *g) {
  memset(g, 0, sizeof *g);
  g->kind = (gpu_node_kind)r->kind;
  g->tag = r->key.command; /* a failure names the program's step */
  switch (r->kind) {
  case GN_LAUNCH:
    g->u.launch.fn = r->u.launch.fn;
    memcpy(g->u.launch.grid, r->u.launch.grid, sizeof g->u.launch.grid);
    memcpy(g->u.launch.block, r->u.launch.block, sizeof g->u.launch.block);
    g->u.launch.shared = r->u.launch.shared;
    g->u.launch.args = l->args + r->arg0;
    g->u.launch.nargs = r->nargs;
    break;
  case GN_COPY:
    g->u.copy.dst = r->u.copy.dst;
    g->u.copy.src = r->u.copy.src;
    g->u.copy.bytes = r->u.copy.bytes;
    break;
  case GN_FILL:
    g->u.fill.dst = r->u.fill.dst;
    g->u.fill.count = r->u.fill.count;
    g->u.fill.pattern = r->u.fill.pattern;
    g->u.fill.elem_size = r->u.fill.elem_size;
    g->u.fill.resizes = r->u.fill.resizes != 0;
    break;
  case GN_WHILE:
    g->u.loop.flag = r->u.loop.flag;
    g->u.loop.max_trips = r->u.loop.max_trips;
    break;
  }
}

static bool same_shape(const node_list *a, const node_list *b) {
  if (a->n != b->n || a->nseqs != b->nseqs) return false;
  for (uint32_t i = 0; i < a->n; i++) {
    const rec_node *x = &a->v[i], *y = &b->v[i];
    if (x->key.command != y->key.command || x->key.record_id != y->key.record_id ||
        x->seq_no != y->seq_no || x->kind != y->kind || x->nargs != y->nargs)
      return false;
    if (x->kind == GN_WHILE && x->u.loop.body_no != y->u.loop.body_no) return false;
  }
  return true;
}

static bool same_params(const node_list *la, const rec_node *x, const node_list *lb,
                        const rec_node *y) {
  switch (x->kind) {
  case GN_LAUNCH:
    return x->u.launch.fn == y->u.launch.fn &&
           !memcmp(x->u.launch.grid, y->u.launch.grid, sizeof x->u.launch.grid) &&
           !memcmp(x->u.launch.block, y->u.launch.block, sizeof x->u.launch.block) &&
           x->u.launch.shared == y->u.launch.shared &&
           (x->nargs == 0 || !memcmp(la->args + x->arg0, lb->args + y->arg0, x->nargs * sizeof(uint64_t)));
  case GN_COPY:
    return x->u.copy.dst == y->u.copy.dst && x->u.copy.src == y->u.copy.src &&
           x->u.copy.bytes == y->u.copy.bytes;
  case GN_FILL:
    return x->u.fill.dst == y->u.fill.dst && x->u.fill.count == y->u.fill.count &&
           x->u.fill.pattern == y->u.fill.pattern;
  case GN_WHILE:
    return x->u.loop.flag == y->u.loop.flag && x->u.loop.max_trips == y->u.loop.max_trips;
  }
  return false;
}

static void rec_seq_destroy(record_state *s, rec_seq *q) {
  if (!q) return;
  for (uint16_t k = 0; q->seqs && k < q->nodes.nsegs; k++)
    if (q->seqs[q->nodes.segs[k]]) s->core->backend->ops->seq_destroy(q->seqs[q->nodes.segs[k]]);
  free(q->seqs);
  free(q->roots);
  free(q->bindings);
  free(q->fns);
  nl_free(&q->nodes);
  hmap_destroy(&q->index);
  free(q);
}

/* Builds a new recording from the wanted list. */
static int create_seq(record_state *s, uint32_t device, rec_seq **out, schedrun_error_t *err) {
  const gpu_ops *ops = s->core->backend->ops;
  rec_seq *q = calloc(1, sizeof *q);
  if (!q) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  hmap_init(&q->index, sizeof(node_key));
  q->seqs = calloc(s->want.nseqs, sizeof *q->seqs);
  q->roots = calloc(s->want.nsegs, sizeof *q->roots);
  int rc = q->seqs && q->roots && nl_copy(&q->nodes, &s->want) == 0 ? SCHEDRUN_OK
                                                                    : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (uint16_t k = 0; rc == SCHEDRUN_OK && k < q->nodes.nsegs; k++) {
    rc = ops->seq_create(s->core->backend, (int)device, &q->seqs[q->nodes.segs[k]], err);
    q->roots[k] = q->seqs[q->nodes.segs[k]];
  }
  for (uint32_t i = 0; rc == SCHEDRUN_OK && i < q->nodes.n; i++) {
    rec_node *r = &q->nodes.v[i];
    gpu_node g;
    to_gpu_node(&q->nodes, r, &g);
    rc = ops->seq_add(q->seqs[r->seq_no], &g, &r->index, err);
    if (rc == SCHEDRUN_OK && r->kind == GN_WHILE) q->seqs[r->u.loop.body_no] = g.u.loop.body;
    node_key k = store_key(r->key);
    if (rc == SCHEDRUN_OK && hmap_put(&q->index, &k, (void *)(uintptr_t)(i + 1)) != 0)
      rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  for (uint16_t k = 0; rc == SCHEDRUN_OK && k < q->nodes.nsegs; k++) rc = ops->seq_finalize(q->roots[k], err);
  if (rc) {
    rec_seq_destroy(s, q);
    return rc;
  }
  *out = q;
  return SCHEDRUN_OK;
}

/* Updates q's node `have` in place to `want` (from list `from`) and
 * remembers the new parameters; the key, index and argument slots stay. */
static int apply_update(record_state *s, rec_seq *q, rec_node *have, const node_list *from, const rec_node *want,
                        schedrun_error_t *err) {
  gpu_node g;
  to_gpu_node(from, want, &g);
  int rc = s->core->backend->ops->seq_update(q->seqs[have->seq_no], have->index, &g, err);
  if (rc) return rc;
  uint32_t index = have->index, arg0 = have->arg0;
  *have = *want;
  have->index = index;
  have->arg0 = arg0;
  if (want->nargs) memcpy(q->nodes.args + arg0, from->args + want->arg0, want->nargs * sizeof(uint64_t));
  return SCHEDRUN_OK;
}

/* Brings q up to the wanted list: same shape assumed, so each wanted node's
 * recorded state is at its own position (the keys were compared). The
 * shared-slot build looks it up by its (broken) key instead, to show what
 * that costs in correctness. */
static int update_seq(record_state *s, rec_seq *q, msg_counts *c, schedrun_error_t *err) {
  for (uint32_t i = 0; i < s->want.n; i++) {
    const rec_node *want = &s->want.v[i];
#ifdef SCHEDRUN_RECORD_SHARED_SLOT
    node_key k = store_key(want->key);
    uintptr_t pos = (uintptr_t)hmap_get(&q->index, &k);
    if (pos == 0 || pos > q->nodes.n) return err_set(err, SCHEDRUN_EINTERNAL, "recorded node missing from its key store");
    rec_node *have = &q->nodes.v[pos - 1];
#else
    /* same_shape compared the keys position by position: node i is the one */
    rec_node *have = &q->nodes.v[i];
    assert(have->key.command == want->key.command && have->key.record_id == want->key.record_id);
#endif
    if (same_params(&q->nodes, have, &s->want, want)) {
      c->reused++;
      continue;
    }
    int rc = apply_update(s, q, have, &s->want, want, err);
    if (rc) return rc;
    c->updated++;
  }
  return SCHEDRUN_OK;
}

/* Whether RECORD r brings the buffers and kernel functions q was recorded
 * with: then only q's job-dependent nodes can differ. */
static bool same_context(const rec_seq *q, const msg_record *r, const gpu_function *fns, uint32_t nfns) {
  return q->bindings && q->nbindings == r->bindings.n && q->nfns == nfns &&
         !memcmp(q->bindings, r->bindings.v, q->nbindings * sizeof *q->bindings) &&
         (nfns == 0 || !memcmp(q->fns, fns, nfns * sizeof *fns));
}

/* Remembers r's buffers and the functions for the next RECORD; when out of
 * memory nothing is remembered, and the next RECORD walks the whole program. */
static void remember_context(rec_seq *q, const msg_record *r, const gpu_function *fns, uint32_t nfns) {
  free(q->bindings);
  free(q->fns);
  q->bindings = malloc((r->bindings.n ? r->bindings.n : 1) * sizeof *q->bindings);
  q->fns = malloc((nfns ? nfns : 1) * sizeof *q->fns);
  if (!q->bindings || !q->fns) {
    free(q->bindings);
    free(q->fns);
    q->bindings = NULL;
    q->fns = NULL;
    return;
  }
  if (r->bindings.n) memcpy(q->bindings, r->bindings.v, r->bindings.n * sizeof *q->bindings);
  if (nfns) memcpy(q->fns, fns, nfns * sizeof *fns);
  q->nbindings = (uint32_t)r->bindings.n;
  q->nfns = nfns;
}

/* Brings q up to the job-dependent nodes evaluated in s->dynamic (the
 * others cannot have changed): the cost is what depends on the job, not the
 * program's size. */
static int update_dynamic(record_state *s, rec_seq *q, msg_counts *c, schedrun_error_t *err) {
  assert(s->dynamic.n == q->nodes.ndyn);
  for (uint32_t k = 0; k < q->nodes.ndyn; k++) {
    const rec_node *want = &s->dynamic.v[k];
    uint32_t pos = q->nodes.dyn[k].node;
#ifdef SCHEDRUN_RECORD_SHARED_SLOT
    node_key key = store_key(q->nodes.v[pos].key);
    uintptr_t found = (uintptr_t)hmap_get(&q->index, &key);
    if (found == 0 || found > q->nodes.n) return err_set(err, SCHEDRUN_EINTERNAL, "recorded node missing from its key store");
    pos = (uint32_t)found - 1;
#endif
    rec_node *have = &q->nodes.v[pos];
    assert(have->key.command == want->key.command && have->kind == want->kind);
    if (same_params(&q->nodes, have, &s->dynamic, want)) continue;
    int rc = apply_update(s, q, have, &s->dynamic, want, err);
    if (rc) return rc;
    c->updated++;
  }
  c->reused = q->nodes.n - c->updated;
  return SCHEDRUN_OK;
}

/* ---- modules ---- */

static int ensure_functions(record_state *s, const prog_program *p, const msg_record *r,
                            gpu_function *fns, const char **keys, schedrun_error_t *err) {
  const gpu_ops *ops = s->core->backend->ops;
  for (uint32_t k = 0; k < p->nkernels; k++) {
    fns[k] = NULL;
    keys[k] = NULL;
    if (p->kernels[k].variants_only) continue; /* never compiled: its variants are */
    const msg_module *mm = NULL;
    for (size_t i = 0; i < r->modules.n; i++)
      if (!strcmp(r->modules.v[i].name, p->kernels[k].name)) mm = &r->modules.v[i];
    if (!mm) return err_set(err, SCHEDRUN_EPROTO, "RECORD lacks a module for kernel '%s'", p->kernels[k].name);
    mod_key key = {r->program, r->device, k};
    rec_module *rm = hmap_get(&s->modules, &key);
    if (rm && strcmp(rm->key, mm->key) != 0) {
      ops->module_unload(s->core->backend, rm->mod);
      hmap_remove(&s->modules, &key);
      free(rm);
      rm = NULL;
    }
    if (!rm) {
      rm = calloc(1, sizeof *rm);
      if (!rm) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
      str_copy(rm->key, sizeof rm->key, mm->key);
      uint8_t *img = NULL;
      size_t len = 0;
      int rc = artifact_read(mm->path, mm->key, &img, &len, err);
      if (rc == SCHEDRUN_OK) rc = ops->module_load(s->core->backend, (int)r->device, img, len, &rm->mod, err);
      free(img);
      if (rc == SCHEDRUN_OK) {
        rc = ops->module_function(s->core->backend, rm->mod, p->kernels[k].entry, &rm->fn, err);
        if (rc) ops->module_unload(s->core->backend, rm->mod);
      }
      if (rc == SCHEDRUN_OK && hmap_put(&s->modules, &key, rm) != 0) {
        ops->module_unload(s->core->backend, rm->mod);
        rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
      }
      if (rc) {
        free(rm);
        return rc;
      }
    }
    fns[k] = rm->fn;
    keys[k] = rm->key;
  }
  return SCHEDRUN_OK;
}

/* ---- messages ---- */

/* Replaces the recording *q (whose update in place was refused, err saying
 * why) with one created from s->want. On failure the context has no
 * recording, and err names both failures. */
static int rebuild(record_state *s, const seq_key *key, rec_seq **q, uint32_t device, msg_counts *c,
                   schedrun_error_t *err) {
  hmap_remove(&s->seqs, key);
  msg_counts total = (*q)->total;
  uint32_t rebuilds = (*q)->rebuilds;
  rec_seq_destroy(s, *q);
  *q = NULL;
  schedrun_error_t why_update = *err;
  memset(err, 0, sizeof *err);
  rec_seq *fresh = NULL;
  int rc = create_seq(s, device, &fresh, err);
  if (rc == SCHEDRUN_OK && hmap_put(&s->seqs, key, fresh) != 0) {
    rec_seq_destroy(s, fresh);
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  if (rc == SCHEDRUN_OK) {
    *q = fresh;
    fresh->total = total;
    fresh->rebuilds = rebuilds + 1;
    c->created = fresh->nodes.n;
  } else {
    char *create_msg = err->message;
    err->message = NULL;
    err_set(err, rc, "the recording could not be updated in place (%s), nor re-created (%s)",
            why_update.message ? why_update.message : "refused", create_msg ? create_msg : "failed");
    free(create_msg);
  }
  schedrun_error_clear(&why_update);
  return rc;
}

static void handle_record(actor_t *self, record_state *s, msg *m) {
  const msg_record *r = &m->body.record;
  const prog_program *p = core_program(s->core, r->program);
  schedrun_error_t err = {0};
  strbuf why;
  sb_init(&why);
  gpu_function *fns = NULL;
  const char **keys = NULL;
  int rc = SCHEDRUN_OK;
  bool dropped = false; /* a half-updated recording was destroyed */
  if (!p) rc = err_set(&err, SCHEDRUN_EPROTO, "RECORD names unknown program %llu", (unsigned long long)r->program);
  else if (r->device >= (uint32_t)s->core->ndevices)
    rc = err_set(&err, SCHEDRUN_EPROTO, "RECORD names device %u of %d", r->device, s->core->ndevices);
  else if (r->bindings.n != p->nbuffers)
    rc = err_set(&err, SCHEDRUN_EPROTO, "RECORD binds %zu buffers; the program has %u", r->bindings.n, p->nbuffers);
  else if (!(fns = calloc(p->nkernels ? p->nkernels : 1, sizeof *fns)) ||
           !(keys = calloc(p->nkernels ? p->nkernels : 1, sizeof *keys)))
    rc = err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
  else
    rc = ensure_functions(s, p, r, fns, keys, &err);
  tune_ctx tune = {s->core, p, r, fns, keys};

  msg_counts c = {0};
  seq_key key = {r->program, r->device, r->slot};
  rec_seq *q = rc == SCHEDRUN_OK ? hmap_get(&s->seqs, &key) : NULL;
  /* the same buffers and functions as last time: only the nodes that
   * depend on the job are evaluated again; otherwise the whole program */
  bool partial = q && !s->core->record_whole_program && same_context(q, r, fns, p->nkernels);
  if (rc == SCHEDRUN_OK) {
    int w = partial ? record_walk_dynamic(&s->dynamic, &q->nodes, p, r, fns, &tune, &why)
                    : record_walk(&s->want, p, r, fns, &tune, &why);
    if (w != 0) rc = err_set(&err, SCHEDRUN_ECONFIG, "%s", why.data ? why.data : "recording failed");
  }
  if (rc == SCHEDRUN_OK) {
    bool refused = false;
    if (partial) {
      refused = (rc = update_dynamic(s, q, &c, &err)) != SCHEDRUN_OK;
      /* a rebuild needs the whole program walked */
      if (refused && record_walk(&s->want, p, r, fns, &tune, &why) != 0) {
        schedrun_error_clear(&err);
        rc = err_set(&err, SCHEDRUN_ECONFIG, "%s", why.data ? why.data : "recording failed");
        refused = false;
        hmap_remove(&s->seqs, &key);
        rec_seq_destroy(s, q);
        q = NULL;
        dropped = true;
      }
    } else if (q && same_shape(&q->nodes, &s->want)) {
      refused = (rc = update_seq(s, q, &c, &err)) != SCHEDRUN_OK;
    } else {
      rec_seq *fresh = NULL;
      rc = create_seq(s, r->device, &fresh, &err);
      if (rc == SCHEDRUN_OK) {
        if (hmap_put(&s->seqs, &key, fresh) != 0) {
          rec_seq_destroy(s, fresh);
          rc = err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
        } else {
          if (q) {
            fresh->total = q->total;
            fresh->rebuilds = q->rebuilds;
            rec_seq_destroy(s, q);
          }
          q = fresh;
          c.created = q->nodes.n;
        }
      }
    }
    if (refused) {
      /* The backend refused an update in place (a driver allows only some
       * changes to an instantiated graph) or failed half-way: the
       * recording is not trusted any more, and is built afresh. */
      c = (msg_counts){0};
      rc = rebuild(s, &key, &q, r->device, &c, &err);
      dropped = rc != SCHEDRUN_OK;
    }
    if (rc == SCHEDRUN_OK && !partial) remember_context(q, r, fns, p->nkernels);
  }
  free(fns);
  free(keys);
  sb_free(&why);
  /* the scratch list is kept for the next RECORD, unless it grew large */
  if (s->want.cap > WANT_KEEP_NODES) nl_free(&s->want);
  if (s->dynamic.cap > WANT_KEEP_NODES) nl_free(&s->dynamic);
  if (rc) {
    const char *steps[] = {dropped ? "drop the recording of this execution context: the next job records it afresh"
                                   : "keep the previous recording of this execution context unchanged"};
    actor_send_error(self, m->from, m->job, rc, err.message ? err.message : "record failed", steps, 1);
    schedrun_error_clear(&err);
    return;
  }
  q->total.created += c.created;
  q->total.updated += c.updated;
  q->total.reused += c.reused;
  msg reply;
  msg_init(&reply, MSG_RECORDED, m->job, ACTOR_RECORD);
  /* the handle the execute actor replays: the sequence, or, for a program
   * with host steps, its segments (gpu_seq *[nhosts + 1]) */
  uint64_t handle = q->nodes.nsegs > 1 ? (uint64_t)(uintptr_t)q->roots : (uint64_t)(uintptr_t)q->seqs[0];
  reply.body.recorded = (msg_recorded){r->program, r->device, r->slot, handle, c};
  actor_send(self, m->from, &reply);
  msg_free(&reply);
}

static void handle_release(actor_t *self, record_state *s, msg *m) {
  uint64_t program = m->body.release.program;
  size_t pos = 0;
  const void *k;
  void *v;
  /* collect first: the map must not change while iterating */
  seq_key *sk = calloc(s->seqs.count + 1, sizeof *sk);
  mod_key *mk = calloc(s->modules.count + 1, sizeof *mk);
  size_t ns = 0, nm = 0;
  while (sk && hmap_next(&s->seqs, &pos, &k, &v))
    if (((const seq_key *)k)->program == program) sk[ns++] = *(const seq_key *)k;
  pos = 0;
  while (mk && hmap_next(&s->modules, &pos, &k, &v))
    if (((const mod_key *)k)->program == program) mk[nm++] = *(const mod_key *)k;
  for (size_t i = 0; i < ns; i++) rec_seq_destroy(s, hmap_remove(&s->seqs, &sk[i]));
  for (size_t i = 0; i < nm; i++) {
    rec_module *rm = hmap_remove(&s->modules, &mk[i]);
    s->core->backend->ops->module_unload(s->core->backend, rm->mod);
    free(rm);
  }
  free(sk);
  free(mk);
  msg reply;
  msg_init(&reply, MSG_RELEASE, m->job, ACTOR_RECORD);
  reply.body.release.program = program;
  actor_send(self, m->from, &reply);
  msg_free(&reply);
}

/* STATUS {program, device, slot} -> {nodes, created, updated, reused,
 * rebuilt} of that execution context's recording (all zero when there is
 * none), and how many recordings the actor holds. */
static void handle_status(actor_t *self, record_state *s, msg *m) {
  seq_key key = {0, 0, 0};
  for (size_t i = 0; i < m->body.status.items.n; i++) {
    const msg_stat *it = &m->body.status.items.v[i];
    if (!strcmp(it->name, "program")) key.program = (uint64_t)it->value;
    else if (!strcmp(it->name, "device")) key.device = (uint32_t)it->value;
    else if (!strcmp(it->name, "slot")) key.slot = (uint32_t)it->value;
  }
  const rec_seq *q = hmap_get(&s->seqs, &key);
  msg r;
  msg_init(&r, MSG_STATUS, m->job, ACTOR_RECORD);
  r.body.status.items.v = calloc(6, sizeof(msg_stat));
  if (r.body.status.items.v) {
    msg_stat items[] = {{xstrdup("nodes"), q ? q->nodes.n : 0},
                        {xstrdup("created"), q ? q->total.created : 0},
                        {xstrdup("updated"), q ? q->total.updated : 0},
                        {xstrdup("reused"), q ? q->total.reused : 0},
                        {xstrdup("rebuilt"), q ? q->rebuilds : 0},
                        {xstrdup("sequences"), (int64_t)s->seqs.count}};
    memcpy(r.body.status.items.v, items, sizeof items);
    r.body.status.items.n = 6;
  }
  actor_send(self, m->from, &r);
  msg_free(&r);
}

static int record_handle(actor_t *self, msg *m) {
  record_state *s = actor_state(self);
  switch (m->type) {
  case MSG_RECORD: handle_record(self, s, m); return ACTOR_CONTINUE;
  case MSG_STATUS: handle_status(self, s, m); return ACTOR_CONTINUE;
  case MSG_RELEASE: handle_release(self, s, m); return ACTOR_CONTINUE;
  case MSG_TERM: return ACTOR_STOP;
  default: return ACTOR_CONTINUE;
  }
}

record_state *record_state_new(schedrun_core *core) {
  record_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->core = core;
  hmap_init(&s->seqs, sizeof(seq_key));
  hmap_init(&s->modules, sizeof(mod_key));
  return s;
}

void record_state_free(record_state *s) {
  if (!s) return;
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->seqs, &pos, NULL, &v)) rec_seq_destroy(s, v);
  hmap_destroy(&s->seqs);
  pos = 0;
  while (hmap_next(&s->modules, &pos, NULL, &v)) {
    s->core->backend->ops->module_unload(s->core->backend, ((rec_module *)v)->mod);
    free(v);
  }
  hmap_destroy(&s->modules);
  nl_free(&s->want);
  nl_free(&s->dynamic);
  free(s);
}

const actor_def record_actor_def = {NULL, record_handle, NULL};
