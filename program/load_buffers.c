/*
 * The config loader's buffers and expectations (loader.c has the document,
 * the kernels and the top level; load_steps.c the steps): each buffer's
 * type, count or shape, flags and initial contents (fills, iotas, values,
 * .npy and raw files), and each `expect` entry, checked against its buffer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "program/load_util.h"
#include "program/npy.h"

/* ---- buffers ---- */

/* `shape: [d0, d1, ...]`: 1 to PROG_MAX_DIMS positive sizes whose product
 * is at most `most`; sets b's dims and count. */
static bool load_shape(ld *l, node *n, prog_buffer *b, uint64_t most) {
  if (n->type != YAML_SEQUENCE_NODE) {
    ld_problem(l, n, "shape of buffer '%s' is a list of sizes, like [rows, cols]", b->name);
    return false;
  }
  size_t nd = ld_items(n);
  if (nd == 0 || nd > PROG_MAX_DIMS) {
    ld_problem(l, n, "shape of buffer '%s' has %zu dimensions; 1 to %d", b->name, nd, PROG_MAX_DIMS);
    return false;
  }
  uint64_t count = 1;
  for (size_t d = 0; d < nd; d++) {
    node *x = ld_get(l, n->data.sequence.items.start[d]);
    int64_t v;
    if (!x || !ld_read_int(l, x, "a dimension of the shape", 1, (int64_t)most, &v)) return false;
    if (__builtin_mul_overflow(count, (uint64_t)v, &count) || count > most) {
      ld_problem(l, n, "shape of buffer '%s' holds more than %llu elements", b->name, (unsigned long long)most);
      return false;
    }
    b->dims[d] = (uint64_t)v;
  }
  b->ndims = (uint32_t)nd;
  b->count = count;
  return true;
}

/* A file read for buffer b (`what`: init or expect) that is a NumPy file
 * keeps only its elements, after its dtype and element count are checked
 * against the buffer's; false, with the problem reported, when they do not
 * match. Any other file is left as it is (raw elements). */
static bool npy_elements(ld *l, node *n, const char *what, const char *rel, const prog_buffer *b, char *data,
                         size_t *len) {
  if (!npy_is((const uint8_t *)data, *len)) return true;
  char why[200];
  size_t at = 0;
  if (npy_check((const uint8_t *)data, *len, b->type, b->count, b->ndims, b->dims, &at, why, sizeof why)) {
    ld_problem(l, n, "%s file '%s' %s", what, rel, why);
    return false;
  }
  *len -= at;
  memmove(data, data + at, *len);
  return true;
}

static void load_init(ld *l, node *n, prog_buffer *b) {
  static const char *const keys[] = {"fill", "iota", "values", "file", "memory", NULL};
  node *f[5];
  char what[160];
  snprintf(what, sizeof what, "init of buffer '%s'", b->name);
  if (!ld_read_map(l, n, what, keys, f)) return;
  int given = !!f[0] + !!f[1] + !!f[2] + !!f[3] + !!f[4];
  if (f[4] && !l->src) {
    ld_problem(l, f[4], "init memory is for programs made with the builder (schedrun_builder_buffer)");
    return;
  }
  if (given != 1) {
    ld_problem(l, n, "init of buffer '%s' needs exactly one of fill, iota, values, file", b->name);
    return;
  }
  size_t es = prog_type_size(b->type);
  if (b->count > PROG_MAX_BUFFER_BYTES / es) return; /* reported with count */
  if (f[4]) {
    int64_t k;
    if (!ld_read_int(l, f[4], "init memory", 0, (int64_t)l->src->nblobs - 1, &k)) return;
    const prog_blob *bl = &l->src->blobs[k];
    if (bl->len != b->count * es) {
      ld_problem(l, f[4], "init of buffer '%s' has %zu bytes; the buffer needs %llu", b->name, bl->len,
                 (unsigned long long)(b->count * es));
      return;
    }
    b->image = ld_calloc(l, n, b->count, es, "the buffer's contents");
    if (b->image) memcpy(b->image, bl->data, bl->len);
    return;
  }
  if (f[3]) {
    const char *rel = ld_read_str(l, f[3], "init file");
    if (!rel) return;
    size_t len = 0;
    char *data = ld_read_file(l, f[3], rel, "init", PROG_MAX_BUFFER_BYTES, &len, NULL);
    if (data && !npy_elements(l, f[3], "init", rel, b, data, &len)) {
      free(data);
      return;
    }
    if (data && len != b->count * es)
      ld_problem(l, f[3], "init file '%s' has %zu bytes; buffer '%s' needs %llu", rel, len, b->name,
              (unsigned long long)(b->count * es));
    else if (data) {
      b->image = (uint8_t *)data;
      data = NULL;
    }
    free(data);
    return;
  }
  b->image = ld_calloc(l, n, b->count, es, "the buffer's contents");
  if (!b->image) return;
  ld_num start = {.kind = LD_INT}, step = {.kind = LD_INT};
  bool ok = true;
  if (f[0]) {
    ok = ld_read_number(l, f[0], "fill", &start);
  } else if (f[1]) {
    static const char *const ik[] = {"start", "step", NULL};
    node *iv[2];
    ok = ld_read_map(l, f[1], "iota", ik, iv);
    if (ok && iv[0]) ok = ld_read_number(l, iv[0], "iota start", &start);
    if (ok && iv[1]) ok = ld_read_number(l, iv[1], "iota step", &step);
    else if (ok) step = (ld_num){.kind = LD_INT, .i = 1, .u = 1, .f = 1};
  } else {
    if (f[2]->type != YAML_SEQUENCE_NODE) {
      ld_problem(l, f[2], "values must be a list of numbers");
      return;
    }
    size_t nv = ld_items(f[2]);
    if (nv > b->count) {
      ld_problem(l, f[2], "buffer '%s' has %llu elements but values lists %zu", b->name,
              (unsigned long long)b->count, nv);
      return;
    }
    for (size_t i = 0; i < nv; i++) {
      node *e = ld_get(l, f[2]->data.sequence.items.start[i]);
      ld_num v;
      if (!e || !ld_read_number(l, e, "a value", &v)) continue;
      if (!ld_num_fits(b->type, &v)) {
        ld_problem(l, e, "%s does not fit buffer '%s' of type %s", ld_sval(e), b->name, prog_type_name(b->type));
        continue;
      }
      ld_store_num(b->type, b->image, i, &v);
    }
    return;
  }
  if (!ok) return;
  if (ld_type_is_int(b->type) && start.kind != LD_FLOAT && step.kind != LD_FLOAT) {
    /* exact: start + i * step for every i, checked at both ends */
    __extension__ typedef __int128 i128;
    i128 s0 = start.kind == LD_UINT ? (i128)start.u : (i128)start.i;
    i128 d = step.kind == LD_UINT ? (i128)step.u : (i128)step.i;
    i128 last = s0 + d * (i128)(b->count - 1);
    ld_num lo = {.kind = LD_INT}, hi = {.kind = LD_INT};
    for (int end = 0; end < 2; end++) {
      i128 v = end ? last : s0;
      ld_num *x = end ? &hi : &lo;
      if (v > (i128)UINT64_MAX || v < (i128)INT64_MIN) x->kind = LD_FLOAT, x->f = 1e300;
      else if (v > (i128)INT64_MAX) x->kind = LD_UINT, x->u = (uint64_t)v, x->f = (double)v;
      else x->i = (int64_t)v, x->f = (double)v;
    }
    if (!ld_num_fits(b->type, &lo) || !ld_num_fits(b->type, &hi)) {
      ld_problem(l, n, "init values of buffer '%s' do not fit its type %s", b->name, prog_type_name(b->type));
      return;
    }
    for (uint64_t i = 0; i < b->count; i++) {
      i128 v = s0 + d * (i128)i;
      ld_num x = {.kind = v > (i128)INT64_MAX ? LD_UINT : LD_INT, .i = (int64_t)v, .u = (uint64_t)v};
      ld_store_num(b->type, b->image, i, &x);
    }
    return;
  }
  double first = start.f, by = step.f;
  ld_num last = {.kind = LD_FLOAT, .f = first + by * (double)(b->count - 1)};
  if (!ld_num_fits(b->type, &start) || !ld_num_fits(b->type, &last) || !isfinite(last.f) ||
      (ld_type_is_int(b->type) && by != floor(by))) {
    ld_problem(l, n, "init values of buffer '%s' do not fit its type %s", b->name,
            prog_type_name(b->type));
    return;
  }
  for (uint64_t i = 0; i < b->count; i++) ld_store_elem(b->type, b->image, i, first + by * (double)i);
}

void ld_load_buffers(ld *l, node *n) {
  if (n->type != YAML_MAPPING_NODE) {
    ld_problem(l, n, "buffers must be a mapping of buffer names, not %s", ld_kind_name(n));
    return;
  }
  size_t count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
  l->p->buffers = ld_calloc(l, n, count, sizeof(prog_buffer), "the buffers");
  if (!l->p->buffers) return;
  for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
    node *k = ld_get(l, pr->key), *v = ld_get(l, pr->value);
    if (!k || !v || !ld_is_scalar(l, k, "a buffer name")) continue;
    if (prog_find_buffer(l->p, ld_sval(k)) >= 0) {
      ld_problem(l, k, "buffer '%s' is defined twice", ld_sval(k));
      continue;
    }
    prog_buffer *b = &l->p->buffers[l->p->nbuffers++];
    b->name = xstrdup(ld_sval(k));
    b->loc = ld_loc_of(k);
    b->type = PT_F32;
    static const char *const keys[] = {"type", "count", "init", "output", "resident", "shape", NULL};
    node *f[6];
    char what[160];
    snprintf(what, sizeof what, "buffer '%s'", b->name);
    if (!ld_read_map(l, v, what, keys, f)) continue;
    bool ok = true;
    if (!f[0]) {
      ld_problem(l, v, "buffer '%s' has no type", b->name);
      ok = false;
    } else if (ld_is_scalar(l, f[0], "type") && (!ld_parse_type(ld_sval(f[0]), &b->type) || b->type == PT_PTR)) {
      ld_problem(l, f[0], "unknown buffer type '%s' (known: i32 u32 i64 u64 f32 f64 u8)", ld_sval(f[0]));
      ok = false;
    }
    int64_t c = 0;
    uint64_t most = PROG_MAX_BUFFER_BYTES / prog_type_size(b->type);
    if (f[5] && !load_shape(l, f[5], b, most)) ok = false;
    if (!f[1] && !f[5]) {
      ld_problem(l, v, "buffer '%s' has no count (or shape)", b->name);
      ok = false;
    } else if (f[1] && !ld_read_int(l, f[1], "count", 1, (int64_t)most, &c)) {
      ok = false;
    } else if (f[1] && b->ndims && (uint64_t)c != b->count) {
      char sh[200];
      prog_shape_text(b, sh, sizeof sh);
      ld_problem(l, f[1], "buffer '%s' has count %lld but shape %s holds %llu elements", b->name, (long long)c, sh,
                 (unsigned long long)b->count);
      ok = false;
    }
    if (f[1]) b->count = (uint64_t)c;
    for (int fi = 3; fi <= 4; fi++) {
      const char *key = fi == 3 ? "output" : "resident";
      if (!f[fi] || !ld_is_scalar(l, f[fi], key)) continue;
      const char *o = ld_sval(f[fi]);
      bool *flag = fi == 3 ? &b->output : &b->resident;
      if (!strcmp(o, "true")) *flag = true;
      else if (strcmp(o, "false")) ld_problem(l, f[fi], "%s of buffer '%s' is true or false, not '%s'", key, b->name, o);
    }
    if (b->resident) l->p->nresident++;
    if (ok) {
      uint64_t bytes = b->count * prog_type_size(b->type);
      l->buffer_bytes += bytes;
      if (l->buffer_bytes > PROG_MAX_BUFFER_BYTES) {
        ld_problem(l, f[1], "buffer '%s' brings the program's buffers to %llu bytes; at most %llu GiB in all",
                b->name, (unsigned long long)l->buffer_bytes, PROG_MAX_BUFFER_BYTES >> 30);
        ok = false;
      }
    }
    if (ok && f[2]) load_init(l, f[2], b);
  }
}


/* ---- expect ---- */

/* An expected value: a number, or an expression over $job, $run and $device
 * (a constant one is computed now; the others per job, when verifying). */
static bool read_expect(ld *l, node *n, const char *what, prog_type t, double *val, uint64_t *bits, prog_expr *ex) {
  memset(ex, 0, sizeof *ex);
  if (!ld_is_scalar(l, n, what)) return false;
  const char *s = ld_sval(n);
  char *end;
  strtod(s, &end);
  ld_num v;
  if (*s && *end == '\0') {
    /* a number: an integer one exact */
    if (!ld_read_number(l, n, what, &v)) return false;
  } else {
    unsigned uses = l->p->uses;
    bool ok = ld_parse_expr_node(l, n, 0, what, ex);
    /* an expectation is checked after the job ran: it never changes what the
     * job records, so it does not make jobs with another $job or $run record */
    l->p->uses = uses;
    if (!ok) return false;
    if (!ex->constant) return true; /* computed per job */
    prog_value pv;
    prog_env env = {{0}};
    prog_expr_eval(ex, &env, &pv); /* checked by parse_expr_node */
    prog_expr_free(ex);
    v = ld_num_of(pv, false); /* a u64 literal is parsed as a number above, never here */
  }
  if (bits && !ld_num_fits(t, &v)) {
    ld_problem(l, n, "%s %s does not fit the buffer's type %s", what, s, prog_type_name(t));
    return false;
  }
  *val = v.f;
  if (bits) *bits = ld_num_bits(t, &v);
  return true;
}

/* An index of a buffer with a shape, as a list ([row, col]): one in range
 * per dimension; *flat is the element's place in C order. */
static bool read_index(ld *l, node *n, const prog_buffer *b, int64_t *flat) {
  size_t nd = ld_items(n);
  char sh[200];
  prog_shape_text(b, sh, sizeof sh);
  if (nd != (b->ndims ? b->ndims : 1)) {
    ld_problem(l, n, "index of buffer '%s' has %zu dimensions; its shape %s has %u", b->name, nd, sh,
               b->ndims ? b->ndims : 1);
    return false;
  }
  uint64_t at = 0;
  for (size_t d = 0; d < nd; d++) {
    node *x = ld_get(l, n->data.sequence.items.start[d]);
    int64_t v;
    uint64_t dim = b->ndims ? b->dims[d] : b->count;
    if (!x || !ld_read_int(l, x, "an index", 0, INT64_MAX, &v)) return false;
    if ((uint64_t)v >= dim) {
      ld_problem(l, x, "index %lld of dimension %zu is outside buffer '%s' (shape %s)", (long long)v, d, b->name, sh);
      return false;
    }
    at = at * dim + (uint64_t)v;
  }
  *flat = (int64_t)at;
  return true;
}

void ld_load_expect(ld *l, node *n) {
  if (n->type != YAML_MAPPING_NODE) {
    ld_problem(l, n, "expect must be a mapping of buffer names");
    return;
  }
  size_t count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
  l->p->expects = ld_calloc(l, n, 2 * count, sizeof(prog_expect), "the expectations");
  if (!l->p->expects) return;
  for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
    node *k = ld_get(l, pr->key), *v = ld_get(l, pr->value);
    if (!k || !v) continue;
    int b = ld_buffer_ref(l, k, "expect");
    if (b < 0) continue;
    const prog_buffer *buf = &l->p->buffers[b];
    bool exact = ld_type_is_int(buf->type); /* integers are compared as integers */
    static const char *const keys[] = {"values", "at", "sum", "tol", "file", "rtol", NULL};
    node *f[6];
    char what[160];
    snprintf(what, sizeof what, "expect for '%s'", buf->name);
    if (!ld_read_map(l, v, what, keys, f)) continue;
    int given = !!f[0] + !!f[1] + !!f[2] + !!f[4];
    if (given == 0) {
      ld_problem(l, v, "%s needs one of values, at, sum, file", what);
      continue;
    }
    if (!!f[0] + !!f[1] + !!f[4] > 1) {
      ld_problem(l, v, "%s takes one of values, at, file (sum may go with any)", what);
      continue;
    }
    /* tol (absolute) and rtol (relative) as given; neither given: 1e-5 each
     * for floating-point buffers, exact for integer ones */
    double tol = 0, rtol = 0;
    if (!f[3] && !f[5] && prog_type_is_float(buf->type)) tol = rtol = 1e-5;
    if (f[3] && ld_read_num(l, f[3], "tol", &tol) && !(tol >= 0)) ld_problem(l, f[3], "tol must be >= 0");
    if (f[5] && ld_read_num(l, f[5], "rtol", &rtol) && !(rtol >= 0)) ld_problem(l, f[5], "rtol must be >= 0");
    /* one check per kind given, all on this buffer */
    for (int kind = 0; kind < 4; kind++) {
      node *fk = kind == 0 ? f[2] : kind == 1 ? f[0] : kind == 2 ? f[1] : f[4];
      if (!fk) continue;
      prog_expect *e = &l->p->expects[l->p->nexpects++];
      e->buffer = (uint32_t)b;
      e->loc = ld_loc_of(k);
      e->tol = tol >= 0 ? tol : 0;
      e->rtol = rtol >= 0 ? rtol : 0;
      if (kind == 0) {
        e->kind = EXP_SUM;
        read_expect(l, fk, "sum", PT_F64, &e->sum, NULL, &e->sum_expr);
      } else if (kind == 1) {
        e->kind = EXP_VALUES;
        if (fk->type != YAML_SEQUENCE_NODE) {
          ld_problem(l, fk, "values must be a list of numbers");
          continue;
        }
        size_t nv = ld_items(fk);
        if (nv > buf->count) {
          ld_problem(l, fk, "buffer '%s' has %llu elements but values lists %zu", buf->name,
                  (unsigned long long)buf->count, nv);
          continue;
        }
        e->values = ld_calloc(l, fk, nv, sizeof(double), "the expected values");
        e->exprs = e->values ? ld_calloc(l, fk, nv, sizeof(prog_expr), "the expected values") : NULL;
        e->bits = e->exprs && exact ? ld_calloc(l, fk, nv, sizeof(uint64_t), "the expected values") : NULL;
        for (size_t i = 0; e->values && e->exprs && (e->bits || !exact) && i < nv; i++) {
          node *x = ld_get(l, fk->data.sequence.items.start[i]);
          if (x) read_expect(l, x, "a value", buf->type, &e->values[e->n], e->bits ? &e->bits[e->n] : NULL, &e->exprs[e->n]);
          e->n++;
        }
      } else if (kind == 2) {
        e->kind = EXP_AT;
        if (fk->type != YAML_MAPPING_NODE) {
          ld_problem(l, fk, "at must be a mapping of index: value");
          continue;
        }
        size_t nv = (size_t)(fk->data.mapping.pairs.top - fk->data.mapping.pairs.start);
        e->values = ld_calloc(l, fk, nv, sizeof(double), "the expected values");
        e->exprs = e->values ? ld_calloc(l, fk, nv, sizeof(prog_expr), "the expected values") : NULL;
        e->index = e->exprs ? ld_calloc(l, fk, nv, sizeof(uint64_t), "the expected values") : NULL;
        e->bits = e->index && exact ? ld_calloc(l, fk, nv, sizeof(uint64_t), "the expected values") : NULL;
        for (yaml_node_pair_t *q = fk->data.mapping.pairs.start;
             e->values && e->exprs && e->index && (e->bits || !exact) && q < fk->data.mapping.pairs.top; q++) {
          node *ik = ld_get(l, q->key), *iv = ld_get(l, q->value);
          int64_t idx;
          if (!ik || !iv) continue;
          if (ik->type == YAML_SEQUENCE_NODE) {
            if (!read_index(l, ik, buf, &idx)) continue;
          } else if (!ld_read_int(l, ik, "an index", 0, INT64_MAX, &idx)) {
            continue;
          }
          if ((uint64_t)idx >= buf->count) {
            ld_problem(l, ik, "index %lld is outside buffer '%s' (%llu elements)", (long long)idx, buf->name,
                    (unsigned long long)buf->count);
            continue;
          }
          if (read_expect(l, iv, "a value", buf->type, &e->values[e->n], e->bits ? &e->bits[e->n] : NULL,
                          &e->exprs[e->n]))
            e->index[e->n++] = (uint64_t)idx;
        }
      } else {
        e->kind = EXP_VALUES;
        const char *rel = ld_read_str(l, fk, "expect file");
        if (!rel) continue;
        size_t len = 0, es = prog_type_size(buf->type);
        char *data = ld_read_file(l, fk, rel, "expect", PROG_MAX_BUFFER_BYTES, &len, NULL);
        if (data && !npy_elements(l, fk, "expect", rel, buf, data, &len)) {
          free(data);
          continue;
        }
        if (data && len != buf->count * es)
          ld_problem(l, fk, "expect file '%s' has %zu bytes; buffer '%s' holds %llu", rel, len, buf->name,
                  (unsigned long long)(buf->count * es));
        else if (data && (e->values = ld_calloc(l, fk, buf->count, sizeof(double), "the expected values")) &&
                 (!exact || (e->bits = ld_calloc(l, fk, buf->count, sizeof(uint64_t), "the expected values")))) {
          for (uint64_t i = 0; i < buf->count; i++) {
            e->values[i] = prog_element(buf->type, data, i);
            if (exact) e->bits[i] = prog_element_bits(buf->type, data, i);
          }
          e->n = buf->count;
        }
        free(data);
      }
    }
  }
}
