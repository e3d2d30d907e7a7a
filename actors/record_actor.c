/*
 * The record actor: turns a program, for one execution context, into a
 * recorded sequence, and keeps it.
 *
 * Sequences are stored by seq_key {program, device, slot}; inside, each node
 * carries its node_key {command, record id} and remembers the parameters it
 * was recorded with (function, grid, addresses, scalars). On RECORD the actor
 * first builds the wanted node list for the job's bindings and variables
 * (unrolling `trips` loops, recording a `while` body once as a child
 * sequence), without touching anything; then, against what is stored:
 *   - no sequence, or a different shape (the node keys or kinds differ):
 *     create it from scratch;
 *   - same shape: update in place exactly the nodes whose parameters changed,
 *     and reuse the others.
 * A failure while building the wanted list leaves the stored sequence as it was.
 * The scheduler never sends RECORD for a sequence that is executing, so an
 * update never happens under a running replay.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actor.h"
#include "actors/core.h"
#include "actors/exec_ctx_key.h"
#include "common/artifact.h"

/* Above this many nodes the scratch list is freed after each RECORD. */
#define WANT_KEEP_NODES 4096

/* One recorded node and what it was recorded with. 64 bytes + its args. */
typedef struct rec_node {
  node_key key;
  uint16_t seq_no; /* which sequence of the recording: 0 root, else a while body */
  uint8_t kind;    /* gpu_node_kind */
  uint32_t index;  /* position in that sequence, for seq_update */
  uint32_t arg0, nargs;
  union {
    struct {
      gpu_function fn;
      uint32_t grid[3], block[3];
    } launch;
    struct {
      uint64_t dst, src, bytes;
    } copy;
    struct {
      uint64_t dst, count, pattern;
      uint32_t elem_size;
    } fill;
    struct {
      uint64_t flag;
      uint32_t max_trips;
      uint16_t body_no;
    } loop;
  } u;
} rec_node;

typedef struct node_list {
  rec_node *v;
  uint32_t n, cap;
  uint64_t *args;
  uint32_t nargs, args_cap;
  uint16_t nseqs;
} node_list;

typedef struct rec_seq {
  node_list nodes;
  hmap index;     /* node_key -> position in nodes + 1: the key store */
  gpu_seq **seqs; /* [0] root, owns the others */
  msg_counts total;
  uint32_t rebuilds; /* times an update in place was refused and the recording built afresh */
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
  node_list want; /* scratch, reused between RECORDs */
};

/* ---- node lists ---- */

static rec_node *nl_push(node_list *l) {
  if (l->n == l->cap) {
    uint32_t cap = l->cap ? l->cap * 2 : 64;
    rec_node *v = realloc(l->v, cap * sizeof *v);
    if (!v) return NULL;
    l->v = v;
    l->cap = cap;
  }
  rec_node *r = &l->v[l->n++];
  memset(r, 0, sizeof *r);
  return r;
}

/* Reserves n argument slots; false when out of memory. */
static bool nl_args(node_list *l, uint32_t n, uint32_t *arg0) {
  if (l->nargs + n > l->args_cap) {
    uint32_t cap = l->args_cap ? l->args_cap : 64;
    while (cap < l->nargs + n) cap *= 2;
    uint64_t *a = realloc(l->args, cap * sizeof *a);
    if (!a) return false;
    l->args = a;
    l->args_cap = cap;
  }
  *arg0 = l->nargs;
  l->nargs += n;
  return true;
}

static void nl_reset(node_list *l) {
  l->n = 0;
  l->nargs = 0;
  l->nseqs = 1;
}

static void nl_free(node_list *l) {
  free(l->v);
  free(l->args);
  memset(l, 0, sizeof *l);
}

/* Copies src into dst, reusing dst's memory. */
static int nl_copy(node_list *dst, const node_list *src) {
  if (dst->cap < src->n) {
    rec_node *v = realloc(dst->v, (src->n ? src->n : 1) * sizeof *v);
    if (!v) return -1;
    dst->v = v;
    dst->cap = src->n;
  }
  if (dst->args_cap < src->nargs) {
    uint64_t *a = realloc(dst->args, (src->nargs ? src->nargs : 1) * sizeof *a);
    if (!a) return -1;
    dst->args = a;
    dst->args_cap = src->nargs;
  }
  if (src->n) memcpy(dst->v, src->v, src->n * sizeof *src->v);
  if (src->nargs) memcpy(dst->args, src->args, src->nargs * sizeof *src->args);
  dst->n = src->n;
  dst->nargs = src->nargs;
  dst->nseqs = src->nseqs;
  return 0;
}

/* ---- building the wanted list ---- */

typedef struct walk {
  record_state *s;
  const prog_program *p;
  const msg_record *r;
  const gpu_function *fns;
  prog_env env;
  strbuf *why;
} walk;

__attribute__((format(printf, 3, 4))) static int wfail(walk *w, const prog_step *st,
                                                       const char *fmt, ...) {
  if (w->why->len == 0) {
    sb_addf(w->why, "%s:%d:%d: ", w->p->path, st->loc.line, st->loc.col);
    va_list ap;
    va_start(ap, fmt);
    sb_vaddf(w->why, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int eval(walk *w, const prog_step *st, const prog_expr *e, const char *what,
                prog_value *v) {
  if (e->n == 0) {
    *v = (prog_value){.is_int = true};
    return 0;
  }
  const char *bad = prog_expr_eval(e, &w->env, v);
  if (bad) return wfail(w, st, "%s: %s", what, bad);
  return 0;
}

static int eval_index(walk *w, const prog_step *st, const prog_expr *e, const char *what,
                      int64_t *out) {
  prog_value v;
  if (eval(w, st, e, what, &v)) return -1;
  if (!v.is_int) {
    if (v.f != floor(v.f) || fabs(v.f) > 9e15) return wfail(w, st, "%s is %g, not an integer", what, v.f);
    v.i = (int64_t)v.f;
  }
  *out = v.i;
  return 0;
}

/* A byte range [offset, offset+count) of elements inside buffer b. */
static int buf_range(walk *w, const prog_step *st, uint32_t b, int64_t off, int64_t count,
                     const char *what, uint64_t *addr) {
  const prog_buffer *buf = &w->p->buffers[b];
  if (off < 0 || count < 0 || (uint64_t)off > buf->count || (uint64_t)count > buf->count - (uint64_t)off)
    return wfail(w, st, "%s: %lld elements at offset %lld run outside buffer '%s' (%llu elements)",
                 what, (long long)count, (long long)off, buf->name,
                 (unsigned long long)buf->count);
  *addr = w->r->bindings.v[b] + (uint64_t)off * prog_type_size(buf->type);
  return 0;
}

static int pack_scalar(walk *w, const prog_step *st, prog_type t, prog_value v, uint32_t argno,
                       uint64_t *slot) {
  *slot = 0;
  if (t == PT_F32) {
    float f = (float)prog_value_f(v);
    memcpy(slot, &f, sizeof f);
    return 0;
  }
  if (t == PT_F64) {
    double d = prog_value_f(v);
    memcpy(slot, &d, sizeof d);
    return 0;
  }
  int64_t i = v.i;
  if (!v.is_int) {
    if (v.f != floor(v.f) || fabs(v.f) > 9e18)
      return wfail(w, st, "argument %u is %g, which is not an integer for %s", argno, v.f,
                   prog_type_name(t));
    i = (int64_t)v.f;
  }
  bool fits = t == PT_I32 ? (i >= INT32_MIN && i <= INT32_MAX)
              : t == PT_U32 ? (i >= 0 && i <= (int64_t)UINT32_MAX)
              : t == PT_U64 ? i >= 0
                            : true;
  if (!fits) return wfail(w, st, "argument %u is %lld, which does not fit %s", argno, (long long)i,
                          prog_type_name(t));
  if (t == PT_I32 || t == PT_U32) {
    uint32_t u = (uint32_t)i;
    memcpy(slot, &u, 4);
  } else {
    memcpy(slot, &i, 8);
  }
  return 0;
}

static int walk_steps(walk *w, const prog_step *steps, uint32_t n, int depth, uint32_t rid,
                      uint16_t seq_no);

static int walk_step(walk *w, const prog_step *st, int depth, uint32_t rid, uint16_t seq_no) {
  node_list *l = &w->s->want;
  if (st->kind == ST_LOOP) {
    for (uint32_t it = 0; it < st->u.loop.trips; it++) {
      w->env.v[EXV_ITER0 + depth] = it;
      if (walk_steps(w, st->u.loop.body, st->u.loop.nbody, depth + 1,
                     rid * st->u.loop.trips + it, seq_no))
        return -1;
    }
    return 0;
  }
  rec_node *nd = nl_push(l);
  if (!nd) return wfail(w, st, "out of memory");
  nd->key = (node_key){st->command, rid};
  nd->seq_no = seq_no;
  switch (st->kind) {
  case ST_LAUNCH: {
    const prog_kernel *k = &w->p->kernels[st->u.launch.kernel];
    nd->kind = GN_LAUNCH;
    nd->u.launch.fn = w->fns[st->u.launch.kernel];
    memcpy(nd->u.launch.grid, st->u.launch.grid, sizeof nd->u.launch.grid);
    memcpy(nd->u.launch.block, st->u.launch.block, sizeof nd->u.launch.block);
    nd->nargs = st->u.launch.nargs;
    uint32_t arg0;
    if (!nl_args(l, nd->nargs, &arg0)) return wfail(w, st, "out of memory");
    nd = &l->v[l->n - 1];
    nd->arg0 = arg0;
    for (uint32_t a = 0; a < st->u.launch.nargs; a++) {
      const prog_arg *pa = &st->u.launch.args[a];
      uint64_t *slot = &l->args[arg0 + a];
      if (pa->is_buffer) {
        int64_t off = 0;
        if (eval_index(w, st, &pa->expr, "offset", &off) ||
            buf_range(w, st, pa->buffer, off, 0, "offset", slot))
          return -1;
      } else {
        prog_value v;
        if (eval(w, st, &pa->expr, "argument", &v) ||
            pack_scalar(w, st, k->params[a], v, a + 1, slot))
          return -1;
      }
    }
    return 0;
  }
  case ST_COPY: {
    int64_t count, fo = 0, to = 0;
    uint64_t src = 0, dst = 0; /* set by buf_range, or the step fails */
    nd->kind = GN_COPY;
    if (eval_index(w, st, &st->u.copy.count, "count", &count) ||
        eval_index(w, st, &st->u.copy.from_offset, "from_offset", &fo) ||
        eval_index(w, st, &st->u.copy.to_offset, "to_offset", &to) ||
        buf_range(w, st, st->u.copy.from, fo, count, "copy", &src) ||
        buf_range(w, st, st->u.copy.to, to, count, "copy", &dst))
      return -1;
    nd = &l->v[l->n - 1];
    nd->u.copy.src = src;
    nd->u.copy.dst = dst;
    nd->u.copy.bytes = (uint64_t)count * prog_type_size(w->p->buffers[st->u.copy.from].type);
    return 0;
  }
  case ST_FILL: {
    const prog_buffer *b = &w->p->buffers[st->u.fill.buffer];
    int64_t off = 0, count;
    prog_value v;
    uint64_t dst = 0, pattern = 0;
    if (eval_index(w, st, &st->u.fill.offset, "offset", &off)) return -1;
    count = (int64_t)b->count - off;
    if ((st->u.fill.count.n && eval_index(w, st, &st->u.fill.count, "count", &count)) ||
        buf_range(w, st, st->u.fill.buffer, off, count, "fill", &dst) ||
        eval(w, st, &st->u.fill.value, "value", &v))
      return -1;
    if (b->type == PT_U8) {
      int64_t i = v.is_int ? v.i : (int64_t)v.f;
      if (i < 0 || i > 255 || (!v.is_int && v.f != floor(v.f)))
        return wfail(w, st, "fill value does not fit u8");
      pattern = (uint64_t)i;
    } else if (pack_scalar(w, st, b->type, v, 1, &pattern)) {
      return -1;
    }
    nd = &l->v[l->n - 1];
    nd->kind = GN_FILL;
    nd->u.fill.dst = dst;
    nd->u.fill.count = (uint64_t)count;
    nd->u.fill.pattern = pattern;
    nd->u.fill.elem_size = (uint32_t)prog_type_size(b->type);
    return 0;
  }
  case ST_WHILE: {
    uint64_t flag = 0;
    if (buf_range(w, st, st->u.loop.buffer, (int64_t)st->u.loop.index, 1, "while flag", &flag))
      return -1;
    if (l->nseqs == UINT16_MAX) return wfail(w, st, "too many while loops");
    uint16_t body_no = l->nseqs++;
    nd = &l->v[l->n - 1];
    nd->kind = GN_WHILE;
    nd->u.loop.flag = flag;
    nd->u.loop.max_trips = st->u.loop.max_trips;
    nd->u.loop.body_no = body_no;
    w->env.v[EXV_ITER0 + depth] = 0;
    return walk_steps(w, st->u.loop.body, st->u.loop.nbody, depth + 1, rid, body_no);
  }
  default: return wfail(w, st, "unknown step");
  }
}

static int walk_steps(walk *w, const prog_step *steps, uint32_t n, int depth, uint32_t rid,
                      uint16_t seq_no) {
  for (uint32_t i = 0; i < n; i++)
    if (walk_step(w, &steps[i], depth, rid, seq_no)) return -1;
  return 0;
}

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
  if (q->seqs && q->seqs[0]) s->core->backend->ops->seq_destroy(q->seqs[0]);
  free(q->seqs);
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
  int rc = q->seqs ? ops->seq_create(s->core->backend, (int)device, &q->seqs[0], err)
                   : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  if (rc == SCHEDRUN_OK && nl_copy(&q->nodes, &s->want) != 0)
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
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
  if (rc == SCHEDRUN_OK) rc = ops->seq_finalize(q->seqs[0], err);
  if (rc) {
    rec_seq_destroy(s, q);
    return rc;
  }
  *out = q;
  return SCHEDRUN_OK;
}

/* Brings q up to the wanted list: same shape assumed. Each wanted node finds
 * its recorded state by its key. */
static int update_seq(record_state *s, rec_seq *q, msg_counts *c, schedrun_error_t *err) {
  const gpu_ops *ops = s->core->backend->ops;
  for (uint32_t i = 0; i < s->want.n; i++) {
    const rec_node *want = &s->want.v[i];
    node_key k = store_key(want->key);
    uintptr_t pos = (uintptr_t)hmap_get(&q->index, &k);
    if (pos == 0 || pos > q->nodes.n) return err_set(err, SCHEDRUN_EINTERNAL, "recorded node missing from its key store");
    rec_node *have = &q->nodes.v[pos - 1];
    if (same_params(&q->nodes, have, &s->want, want)) {
      c->reused++;
      continue;
    }
    gpu_node g;
    to_gpu_node(&s->want, want, &g);
    int rc = ops->seq_update(q->seqs[have->seq_no], have->index, &g, err);
    if (rc) return rc;
    /* remember the new parameters; the key, index and arg slots stay */
    uint32_t index = have->index, arg0 = have->arg0;
    *have = *want;
    have->index = index;
    have->arg0 = arg0;
    if (want->nargs)
      memcpy(q->nodes.args + arg0, s->want.args + want->arg0, want->nargs * sizeof(uint64_t));
    c->updated++;
  }
  return SCHEDRUN_OK;
}

/* ---- modules ---- */

static int ensure_functions(record_state *s, const prog_program *p, const msg_record *r,
                            gpu_function *fns, schedrun_error_t *err) {
  const gpu_ops *ops = s->core->backend->ops;
  for (uint32_t k = 0; k < p->nkernels; k++) {
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
      snprintf(rm->key, sizeof rm->key, "%s", mm->key);
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
  }
  return SCHEDRUN_OK;
}

/* ---- messages ---- */

static void handle_record(actor_t *self, record_state *s, msg *m) {
  const msg_record *r = &m->body.record;
  const prog_program *p = core_program(s->core, r->program);
  schedrun_error_t err = {0};
  strbuf why;
  sb_init(&why);
  gpu_function *fns = NULL;
  int rc = SCHEDRUN_OK;
  bool dropped = false; /* a half-updated recording was destroyed */
  if (!p) rc = err_set(&err, SCHEDRUN_EPROTO, "RECORD names unknown program %llu", (unsigned long long)r->program);
  else if (r->device >= (uint32_t)s->core->ndevices)
    rc = err_set(&err, SCHEDRUN_EPROTO, "RECORD names device %u of %d", r->device, s->core->ndevices);
  else if (r->bindings.n != p->nbuffers)
    rc = err_set(&err, SCHEDRUN_EPROTO, "RECORD binds %zu buffers; the program has %u", r->bindings.n, p->nbuffers);
  else if (!(fns = calloc(p->nkernels ? p->nkernels : 1, sizeof *fns)))
    rc = err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
  else
    rc = ensure_functions(s, p, r, fns, &err);

  if (rc == SCHEDRUN_OK) {
    walk w = {s, p, r, fns, {{0}}, &why};
    w.env.v[EXV_JOB] = r->job_index;
    w.env.v[EXV_DEVICE] = r->device;
    w.env.v[EXV_RUN] = r->run;
    nl_reset(&s->want);
    if (walk_steps(&w, p->steps, p->nsteps, 0, 0, 0) != 0)
      rc = err_set(&err, SCHEDRUN_ECONFIG, "%s", why.data ? why.data : "recording failed");
  }

  msg_counts c = {0};
  seq_key key = {r->program, r->device, r->slot};
  rec_seq *q = NULL;
  if (rc == SCHEDRUN_OK) {
    q = hmap_get(&s->seqs, &key);
    if (q && same_shape(&q->nodes, &s->want)) {
      rc = update_seq(s, q, &c, &err);
      if (rc) {
        /* The backend refused an update in place (a driver allows only some
         * changes to an instantiated graph) or failed half-way: the
         * recording is not trusted any more, and is built afresh. */
        hmap_remove(&s->seqs, &key);
        msg_counts total = q->total;
        uint32_t rebuilds = q->rebuilds;
        rec_seq_destroy(s, q);
        q = NULL;
        schedrun_error_t why_update = err;
        memset(&err, 0, sizeof err);
        rec_seq *fresh = NULL;
        rc = create_seq(s, r->device, &fresh, &err);
        if (rc == SCHEDRUN_OK && hmap_put(&s->seqs, &key, fresh) != 0) {
          rec_seq_destroy(s, fresh);
          rc = err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
        }
        if (rc == SCHEDRUN_OK) {
          q = fresh;
          q->total = total;
          q->rebuilds = rebuilds + 1;
          c = (msg_counts){.created = q->nodes.n};
        } else {
          char *create_msg = err.message;
          err.message = NULL;
          err_set(&err, rc, "the recording could not be updated in place (%s), nor re-created (%s)",
                  why_update.message ? why_update.message : "refused", create_msg ? create_msg : "failed");
          free(create_msg);
          dropped = true;
        }
        schedrun_error_clear(&why_update);
      }
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
            rec_seq_destroy(s, q);
          }
          q = fresh;
          c.created = q->nodes.n;
        }
      }
    }
  }
  free(fns);
  sb_free(&why);
  /* the scratch list is kept for the next RECORD, unless it grew large */
  if (s->want.cap > WANT_KEEP_NODES) nl_free(&s->want);
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
  reply.body.recorded = (msg_recorded){r->program, r->device, r->slot,
                                       (uint64_t)(uintptr_t)q->seqs[0], c};
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
  free(s);
}

const actor_def record_actor_def = {NULL, record_handle, NULL};
