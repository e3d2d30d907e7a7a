/* See record_nodes.h. */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "actors/record_nodes.h"

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

void nl_reset(node_list *l) {
  l->n = 0;
  l->nargs = 0;
  l->nseqs = 1;
  l->nsegs = 1;
  l->segs[0] = 0;
  l->ndyn = 0;
  l->niters = 0;
}

void nl_free(node_list *l) {
  free(l->v);
  free(l->args);
  free(l->dyn);
  free(l->iters);
  memset(l, 0, sizeof *l);
}

/* Grows an array of `size`-byte items to hold `need`; false when out of memory. */
static bool grow(void **v, uint32_t *cap, uint32_t need, size_t size) {
  if (need <= *cap) return true;
  uint32_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *p = realloc(*v, (size_t)c * size);
  if (!p) return false;
  *v = p;
  *cap = c;
  return true;
}

/* Copies src into dst, reusing dst's memory. */
int nl_copy(node_list *dst, const node_list *src) {
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
  if (!grow((void **)&dst->dyn, &dst->dyn_cap, src->ndyn, sizeof *dst->dyn) ||
      !grow((void **)&dst->iters, &dst->iters_cap, src->niters, sizeof *dst->iters))
    return -1;
  if (src->n) memcpy(dst->v, src->v, src->n * sizeof *src->v);
  if (src->nargs) memcpy(dst->args, src->args, src->nargs * sizeof *src->args);
  if (src->ndyn) memcpy(dst->dyn, src->dyn, src->ndyn * sizeof *src->dyn);
  if (src->niters) memcpy(dst->iters, src->iters, src->niters * sizeof *src->iters);
  dst->n = src->n;
  dst->nargs = src->nargs;
  dst->nseqs = src->nseqs;
  dst->nsegs = src->nsegs;
  memcpy(dst->segs, src->segs, sizeof dst->segs);
  dst->ndyn = src->ndyn;
  dst->niters = src->niters;
  return 0;
}

/* ---- building the wanted list ---- */

typedef struct walk {
  node_list *l;
  const prog_program *p;
  const msg_record *r;
  const gpu_function *fns;
  tune_ctx *tune;
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

/* A byte range [offset, offset+count) of elements inside buffer b: the
 * offset at most the buffer's end, and the count no further than it. */
static int buf_range(walk *w, const prog_step *st, uint32_t b, int64_t off, int64_t count,
                     const char *what, uint64_t *addr) {
  const prog_buffer *buf = &w->p->buffers[b];
  if (off < 0 || (uint64_t)off > buf->count)
    return wfail(w, st, "%s: offset %lld is outside buffer '%s' (%llu elements)", what, (long long)off, buf->name,
                 (unsigned long long)buf->count);
  if (count < 0 || (uint64_t)count > buf->count - (uint64_t)off)
    return wfail(w, st, "%s: %lld elements at offset %lld run outside buffer '%s' (%llu elements)",
                 what, (long long)count, (long long)off, buf->name,
                 (unsigned long long)buf->count);
  *addr = w->r->bindings.v[b] + (uint64_t)off * prog_type_size(buf->type);
  return 0;
}

/* A kernel's buffer argument: a pointer to one of b's elements, so an offset
 * at the buffer's end (nothing left to point at) is refused too. */
static int buf_pointer(walk *w, const prog_step *st, uint32_t b, int64_t off, uint32_t argno, uint64_t *addr) {
  const prog_buffer *buf = &w->p->buffers[b];
  if (off < 0 || (uint64_t)off >= buf->count)
    return wfail(w, st, "argument %u of '%s': offset %lld is outside buffer '%s' (%llu elements; a buffer argument "
                 "points at one of them)", argno, w->p->kernels[st->u.launch.kernel].name, (long long)off, buf->name,
                 (unsigned long long)buf->count);
  return buf_range(w, st, b, off, 1, "offset", addr);
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

/* Which per-job variables a step's own expressions read (PROG_USES_*). */
static unsigned step_uses(const prog_step *st) {
  unsigned u = 0;
  switch (st->kind) {
  case ST_LAUNCH:
    for (uint32_t a = 0; a < st->u.launch.nargs; a++) u |= prog_expr_uses(&st->u.launch.args[a].expr);
    for (uint32_t c = 0; st->u.launch.tune && c < st->u.launch.tune->ncombos; c++)
      for (int d = 0; d < 3; d++) u |= prog_expr_uses(&st->u.launch.tune->grid[c][d]);
    break;
  case ST_COPY:
    u = prog_expr_uses(&st->u.copy.count) | prog_expr_uses(&st->u.copy.from_offset) |
        prog_expr_uses(&st->u.copy.to_offset);
    break;
  case ST_FILL:
    u = prog_expr_uses(&st->u.fill.value) | prog_expr_uses(&st->u.fill.count) | prog_expr_uses(&st->u.fill.offset);
    break;
  default: break; /* a while loop's flag and bound do not depend on the job */
  }
  return u;
}

static int walk_steps(walk *w, const prog_step *steps, uint32_t n, int depth, uint32_t rid,
                      uint16_t seq_no);

static int walk_step(walk *w, const prog_step *st, int depth, uint32_t rid, uint16_t seq_no) {
  node_list *l = w->l;
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
  if (step_uses(st) & (PROG_USES_JOB | PROG_USES_RUN)) {
    if (!grow((void **)&l->dyn, &l->dyn_cap, l->ndyn + 1, sizeof *l->dyn) ||
        !grow((void **)&l->iters, &l->iters_cap, l->niters + (uint32_t)depth, sizeof *l->iters))
      return wfail(w, st, "out of memory");
    l->dyn[l->ndyn++] = (dyn_node){st, l->n - 1, rid, l->niters, seq_no, (uint8_t)depth};
    for (int d = 0; d < depth; d++) l->iters[l->niters++] = w->env.v[EXV_ITER0 + d];
    nd = &l->v[l->n - 1];
  }
  switch (st->kind) {
  case ST_LAUNCH: {
    const prog_kernel *k = &w->p->kernels[st->u.launch.kernel];
    nd->kind = GN_LAUNCH;
    nd->u.launch.fn = w->fns[st->u.launch.kernel];
    memcpy(nd->u.launch.grid, st->u.launch.grid, sizeof nd->u.launch.grid);
    memcpy(nd->u.launch.block, st->u.launch.block, sizeof nd->u.launch.block);
    nd->u.launch.shared = st->u.launch.shared;
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
        if (eval_index(w, st, &pa->expr, "offset", &off) || buf_pointer(w, st, pa->buffer, off, a + 1, slot))
          return -1;
      } else {
        prog_value v;
        if (eval(w, st, &pa->expr, "argument", &v)) return -1;
        if (pa->expr.u64_literal) { /* its bits, which only a u64 parameter takes (checked at load) */
          assert(k->params[a] == PT_U64 && v.is_int);
          memcpy(slot, &v.i, 8);
        } else if (pack_scalar(w, st, k->params[a], v, a + 1, slot)) {
          return -1;
        }
      }
    }
    if (st->u.launch.tune) {
      assert(w->tune); /* the record actor gives one for every program */
      strbuf why;
      sb_init(&why);
      rec_node *at = &l->v[l->n - 1];
      int rc = record_tune_choose(w->tune, st, &l->args[arg0], &w->env, at->u.launch.grid, at->u.launch.block,
                                  &at->u.launch.fn, &why);
      if (rc) wfail(w, st, "%s", why.data ? why.data : "autotune failed");
      sb_free(&why);
      if (rc) return -1;
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
    uint64_t bytes = (uint64_t)count * prog_type_size(w->p->buffers[st->u.copy.from].type);
    /* A device copies between ranges that do not overlap (cuMemcpy and a
     * graph's copy node leave the result of an overlap undefined): refused
     * on every backend alike. By address, so that two buffers bound to the
     * same memory are caught too. */
    if (bytes && src < dst + bytes && dst < src + bytes)
      return wfail(w, st, "copy: elements [%lld, %lld) of '%s' and [%lld, %lld) of '%s' overlap (a device copies "
                   "only between ranges that do not)", (long long)fo, (long long)(fo + count),
                   w->p->buffers[st->u.copy.from].name, (long long)to, (long long)(to + count),
                   w->p->buffers[st->u.copy.to].name);
    nd = &l->v[l->n - 1];
    nd->u.copy.src = src;
    nd->u.copy.dst = dst;
    nd->u.copy.bytes = bytes;
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
    nd->u.fill.resizes = (prog_expr_uses(&st->u.fill.count) | prog_expr_uses(&st->u.fill.offset)) != 0;
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

static void walk_init(walk *w, node_list *l, const prog_program *p, const msg_record *r, const gpu_function *fns,
                      tune_ctx *tune, strbuf *why) {
  *w = (walk){l, p, r, fns, tune, {{0}}, why};
  w->env.v[EXV_JOB] = r->job_index;
  w->env.v[EXV_DEVICE] = r->device;
  w->env.v[EXV_RUN] = r->run;
  nl_reset(l);
}

int record_walk(node_list *want, const prog_program *p, const msg_record *r, const gpu_function *fns, tune_ctx *tune,
                strbuf *why) {
  walk w;
  walk_init(&w, want, p, r, fns, tune, why);
  uint16_t seq_no = 0;
  for (uint32_t i = 0; i < p->nsteps; i++) {
    const prog_step *st = &p->steps[i];
    if (st->kind == ST_HOST) {
      /* the device steps after it are a segment of their own */
      assert(want->nsegs <= PROG_MAX_HOST_STEPS); /* the loader bounds host steps */
      if (want->nseqs == UINT16_MAX) return wfail(&w, st, "too many while loops");
      seq_no = want->nseqs++;
      want->segs[want->nsegs++] = seq_no;
      continue;
    }
    if (walk_step(&w, st, 0, 0, seq_no)) return -1;
  }
  return 0;
}

int record_walk_dynamic(node_list *out, const node_list *of, const prog_program *p, const msg_record *r,
                        const gpu_function *fns, tune_ctx *tune, strbuf *why) {
  walk w;
  walk_init(&w, out, p, r, fns, tune, why);
  for (uint32_t k = 0; k < of->ndyn; k++) {
    const dyn_node *d = &of->dyn[k];
    assert(d->st->kind != ST_LOOP && d->st->kind != ST_WHILE); /* leaves only: one node each */
    for (int i = 0; i < d->depth; i++) w.env.v[EXV_ITER0 + i] = of->iters[d->iter0 + i];
    if (walk_step(&w, d->st, d->depth, d->rid, d->seq_no)) return -1;
    assert(out->n == k + 1);
  }
  return 0;
}
