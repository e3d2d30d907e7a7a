/* See load_util.h. */
#include <assert.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/load_util.h"

prog_loc ld_loc_of(const node *n) {
  return (prog_loc){(int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
}

static void problem_at(ld *l, prog_loc lc, const char *fmt, va_list ap) {
  l->problems++;
  if (l->problems > MAX_PROBLEMS) return;
  strbuf sb;
  sb_init(&sb);
  sb_vaddf(&sb, fmt, ap);
  if (l->src) {
    char at[256];
    l->src->where(l->src->ctx, lc, at, sizeof at);
    err_append(l->err, SCHEDRUN_ECONFIG, "%s: %s", at, sb.data ? sb.data : "");
  } else {
    err_append(l->err, SCHEDRUN_ECONFIG, "%s:%d:%d: %s", l->file, lc.line, lc.col, sb.data ? sb.data : "");
  }
  sb_free(&sb);
}

void ld_problem(ld *l, const node *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  problem_at(l, n ? ld_loc_of(n) : (prog_loc){1, 1}, fmt, ap);
  va_end(ap);
}

/* A problem at byte `at` of scalar n's value: its column when the value is
 * on one line as written (plain, or quoted with nothing escaped before it);
 * else the scalar's start. */
static void problem_in_scalar(ld *l, const node *n, size_t at, const char *fmt, ...) {
  prog_loc lc = ld_loc_of(n);
  const char *v = ld_sval(n);
  yaml_scalar_style_t st = n->data.scalar.style;
  bool plain = st == YAML_PLAIN_SCALAR_STYLE, quoted = st == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                                                       st == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
  bool exact = (plain || quoted) && at <= strlen(v) && n->start_mark.line == n->end_mark.line &&
               !memchr(v, st == YAML_SINGLE_QUOTED_SCALAR_STYLE ? '\'' : '\\', at);
  if (exact) lc.col += (int)at + (quoted ? 1 : 0);
  va_list ap;
  va_start(ap, fmt);
  problem_at(l, lc, fmt, ap);
  va_end(ap);
}


const char *ld_kind_name(const node *n) {
  switch (n->type) {
  case YAML_SCALAR_NODE: return "a scalar";
  case YAML_SEQUENCE_NODE: return "a list";
  case YAML_MAPPING_NODE: return "a mapping";
  default: return "nothing";
  }
}


/* Reads a mapping whose keys must come from `keys` (NULL-terminated); fills
 * vals[i] for keys[i]. Reports unknown and repeated keys. */
bool ld_read_map(ld *l, node *n, const char *what, const char *const *keys, node **vals) {
  size_t nkeys = 0;
  while (keys[nkeys]) vals[nkeys++] = NULL;
  if (n->type != YAML_MAPPING_NODE) {
    ld_problem(l, n, "%s must be a mapping, not %s", what, ld_kind_name(n));
    return false;
  }
  for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
    node *k = ld_get(l, pr->key), *v = ld_get(l, pr->value);
    if (!k || !v) continue;
    if (k->type != YAML_SCALAR_NODE) {
      ld_problem(l, k, "%s: keys must be names", what);
      continue;
    }
    size_t i = 0;
    while (i < nkeys && strcmp(keys[i], ld_sval(k)) != 0) i++;
    if (i == nkeys) {
      strbuf known;
      sb_init(&known);
      for (size_t j = 0; j < nkeys; j++) sb_addf(&known, "%s%s", j ? ", " : "", keys[j]);
      ld_problem(l, k, "unknown key '%s' in %s (known: %s)", ld_sval(k), what, known.data);
      sb_free(&known);
    } else if (vals[i]) {
      ld_problem(l, k, "key '%s' appears twice in %s", ld_sval(k), what);
    } else {
      vals[i] = v;
    }
  }
  return true;
}

bool ld_is_scalar(ld *l, node *n, const char *what) {
  if (n->type == YAML_SCALAR_NODE) return true;
  ld_problem(l, n, "%s must be a scalar, not %s", what, ld_kind_name(n));
  return false;
}

bool ld_read_int(ld *l, node *n, const char *what, int64_t lo, int64_t hi, int64_t *out) {
  if (!ld_is_scalar(l, n, what)) return false;
  const char *s = ld_sval(n);
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (end != s && *end == '\0' && errno == ERANGE) {
    /* an integer, too large for 64 bits: the range is what is wrong */
    ld_problem(l, n, "%s must be between %lld and %lld, not %s", what, (long long)lo, (long long)hi, s);
    return false;
  }
  if (end == s || *end != '\0' || errno) {
    ld_problem(l, n, "%s must be an integer, not '%s'", what, s);
    return false;
  }
  if (v < lo || v > hi) {
    ld_problem(l, n, "%s must be between %lld and %lld, not %lld", what, (long long)lo,
            (long long)hi, v);
    return false;
  }
  *out = v;
  return true;
}

bool ld_read_num(ld *l, node *n, const char *what, double *out) {
  if (!ld_is_scalar(l, n, what)) return false;
  const char *s = ld_sval(n);
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || !isfinite(v)) {
    ld_problem(l, n, "%s must be a number, not '%s'", what, s);
    return false;
  }
  *out = v;
  return true;
}

bool ld_read_number(ld *l, node *n, const char *what, ld_num *out) {
  if (!ld_is_scalar(l, n, what)) return false;
  const char *s = ld_sval(n);
  memset(out, 0, sizeof *out);
  const char *digits = s + (*s == '-' || *s == '+');
  if (*digits && strspn(digits, "0123456789") == strlen(digits)) {
    /* an integer literal: exact, or refused */
    char *end;
    errno = 0;
    if (*s == '-') {
      long long v = strtoll(s, &end, 10);
      if (errno == ERANGE) {
        ld_problem(l, n, "%s %s is below the smallest 64-bit integer (-9223372036854775808)", what, s);
        return false;
      }
      out->kind = LD_INT;
      out->i = v;
    } else {
      unsigned long long v = strtoull(digits, &end, 10);
      if (errno == ERANGE) {
        ld_problem(l, n, "%s %s is above the largest 64-bit integer (18446744073709551615)", what, s);
        return false;
      }
      out->kind = v > (unsigned long long)INT64_MAX ? LD_UINT : LD_INT;
      out->i = (int64_t)v;
      out->u = v;
    }
    out->f = out->kind == LD_UINT ? (double)out->u : (double)out->i;
    return true;
  }
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || isnan(v)) {
    ld_problem(l, n, "%s must be a number, not '%s'", what, s);
    return false;
  }
  if (!isfinite(v)) { /* an overflow; an underflow is a tiny number or 0 */
    ld_problem(l, n, "%s %s does not fit a double (its magnitude is at most %g)", what, s, DBL_MAX);
    return false;
  }
  out->kind = LD_FLOAT;
  out->f = v;
  return true;
}

ld_num ld_num_of(prog_value v, bool u64_literal) {
  if (u64_literal) return (ld_num){.kind = LD_UINT, .i = v.i, .u = (uint64_t)v.i, .f = (double)(uint64_t)v.i};
  if (v.is_int) return (ld_num){.kind = LD_INT, .i = v.i, .u = (uint64_t)v.i, .f = (double)v.i};
  return (ld_num){.kind = LD_FLOAT, .f = v.f};
}

bool ld_num_fits(prog_type t, const ld_num *v) {
  if (t == PT_F64) return true;
  if (t == PT_F32) return fabs(v->f) <= FLT_MAX;
  if (v->kind == LD_FLOAT) return ld_value_fits(t, v->f);
  if (v->kind == LD_UINT) return t == PT_U64;
  switch (t) {
  case PT_I32: return v->i >= INT32_MIN && v->i <= INT32_MAX;
  case PT_U32: return v->i >= 0 && v->i <= (int64_t)UINT32_MAX;
  case PT_U8: return v->i >= 0 && v->i <= 255;
  case PT_U64: return v->i >= 0;
  default: return true;
  }
}

uint64_t ld_num_bits(prog_type t, const ld_num *v) {
  if (v->kind == LD_UINT) return v->u;
  if (v->kind == LD_INT) return (uint64_t)v->i;
  return t == PT_U64 ? (uint64_t)v->f : (uint64_t)(int64_t)v->f; /* integral and in range: fits */
}

void ld_store_num(prog_type t, uint8_t *base, uint64_t i, const ld_num *v) {
  if (prog_type_is_float(t) || t == PT_PTR) {
    ld_store_elem(t, base, i, v->f);
    return;
  }
  uint64_t bits = ld_num_bits(t, v);
  switch (t) {
  case PT_I32: ((int32_t *)base)[i] = (int32_t)(int64_t)bits; break;
  case PT_U32: ((uint32_t *)base)[i] = (uint32_t)bits; break;
  case PT_I64: ((int64_t *)base)[i] = (int64_t)bits; break;
  case PT_U64: ((uint64_t *)base)[i] = bits; break;
  case PT_U8: base[i] = (uint8_t)bits; break;
  default: break;
  }
}

const char *ld_read_str(ld *l, node *n, const char *what) {
  if (!ld_is_scalar(l, n, what)) return NULL;
  if (ld_sval(n)[0] == '\0') {
    ld_problem(l, n, "%s must not be empty", what);
    return NULL;
  }
  return ld_sval(n);
}

bool ld_parse_type(const char *s, prog_type *t) {
  static const char *const names[] = {"i32", "u32", "i64", "u64", "f32", "f64", "ptr", "u8"};
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(names); i++)
    if (strcmp(s, names[i]) == 0) {
      *t = (prog_type)i;
      return true;
    }
  return false;
}

/* ---- element conversion ---- */

bool ld_type_is_int(prog_type t) { return !prog_type_is_float(t); }

bool ld_value_fits(prog_type t, double v) {
  if (prog_type_is_float(t)) return true;
  if (v != floor(v)) return false;
  switch (t) {
  case PT_I32: return v >= INT32_MIN && v <= INT32_MAX;
  case PT_U32: return v >= 0 && v <= UINT32_MAX;
  case PT_U8: return v >= 0 && v <= 255;
  case PT_U64: return v >= 0 && v < 18446744073709551616.0;
  default: return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  }
}

void ld_store_elem(prog_type t, uint8_t *base, uint64_t i, double v) {
  switch (t) {
  case PT_I32: ((int32_t *)base)[i] = (int32_t)v; break;
  case PT_U32: ((uint32_t *)base)[i] = (uint32_t)v; break;
  case PT_I64: ((int64_t *)base)[i] = (int64_t)v; break;
  case PT_U64: ((uint64_t *)base)[i] = (uint64_t)v; break;
  case PT_F32: ((float *)base)[i] = (float)v; break;
  case PT_F64: ((double *)base)[i] = v; break;
  case PT_U8: base[i] = (uint8_t)v; break;
  case PT_PTR: break;
  }
}


bool ld_parse_expr_node(ld *l, node *n, int depth, const char *what, prog_expr *out) {
  return ld_parse_expr_text(l, n, NULL, depth, what, out);
}

bool ld_parse_expr_text(ld *l, node *n, const char *text, int depth, const char *what, prog_expr *out) {
  if (!ld_is_scalar(l, n, what)) return false;
  char why[400];
  size_t at = 0;
  const char *bad = prog_expr_parse_at(text ? text : ld_sval(n), depth, out, why, sizeof why, &at);
  if (bad) {
    /* a place in text given is not one in the node's own text: its start */
    problem_in_scalar(l, n, text ? 0 : at, "%s: %s", what, bad);
    return false;
  }
  if (out->u64_literal && !l->u64_literal_ok) {
    ld_problem(l, n, "%s: %s is above 9223372036854775807; only a u64 kernel argument can be (expressions "
                     "compute in 64-bit signed integers)",
               what, ld_sval(n));
    prog_expr_free(out);
    return false;
  }
  if ((prog_expr_uses(out) & PROG_USES_BLOCK) && !l->block_ok) {
    ld_problem(l, n, "%s: $block is a candidate's block size, known only in an autotuned launch's grid", what);
    prog_expr_free(out);
    return false;
  }
  l->p->uses |= prog_expr_uses(out) & ~(unsigned)PROG_USES_BLOCK;
  /* only the iterations it reads: a trips loop inside a while body may use
   * its own $iter */
  for (uint32_t d = 0; d < out->depth_used; d++)
    if ((out->iters_used & (1u << d)) && l->loop_is_while[d]) {
      ld_problem(l, n, "%s uses the iteration of a while loop, which is not known when the loop is "
                    "recorded", what);
      prog_expr_free(out);
      return false;
    }
  if (out->constant) {
    /* a constant is computed now: its overflow or division by zero is the
     * config's error, with its place */
    prog_value v;
    prog_env env = {{0}};
    const char *wrong = prog_expr_eval(out, &env, &v);
    if (wrong) {
      ld_problem(l, n, "%s: %s in '%s'", what, wrong, ld_sval(n));
      prog_expr_free(out);
      return false;
    }
  }
  return true;
}

bool ld_const_int(const prog_expr *e, int64_t *v) {
  prog_value r;
  prog_env env = {{0}};
  if (!e->constant || prog_expr_eval(e, &env, &r) || !r.is_int) return false;
  *v = r.i;
  return true;
}

int ld_buffer_ref(ld *l, node *n, const char *what) {
  const char *name = ld_read_str(l, n, what);
  if (!name) return -1;
  int b = prog_find_buffer(l->p, name);
  if (b < 0) ld_problem(l, n, "%s: no buffer named '%s'", what, name);
  return b;
}



void *ld_calloc(ld *l, const node *n, size_t count, size_t size, const char *what) {
  void *p = calloc(count ? count : 1, size);
  if (!p) {
    l->out_of_memory = true;
    ld_problem(l, n, "out of memory for %s", what);
  }
  return p;
}

char *ld_read_file(ld *l, node *n, const char *rel, const char *what, uint64_t max_bytes, size_t *len, char **path) {
  char *full = fs_join_rel(l->file, rel), *data = NULL;
  schedrun_error_t e = {0};
  if (!full) err_set(&e, SCHEDRUN_ENOMEM, "out of memory");
  else fs_read_input(full, max_bytes, &data, len, &e);
  if (!data) ld_problem(l, n, "cannot read %s file '%s': %s", what, rel, e.message ? e.message : "");
  assert(!data || *len <= max_bytes);
  schedrun_error_clear(&e);
  if (data && path) *path = full;
  else free(full);
  return data;
}
