/* Checking a buffer's contents against the config's `expect`. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "program/program.h"

double prog_element(prog_type t, const void *data, uint64_t i) {
  switch (t) {
  case PT_I32: { int32_t v; memcpy(&v, (const char *)data + 4 * i, 4); return v; }
  case PT_U32: { uint32_t v; memcpy(&v, (const char *)data + 4 * i, 4); return v; }
  case PT_F32: { float v; memcpy(&v, (const char *)data + 4 * i, 4); return v; }
  case PT_I64: { int64_t v; memcpy(&v, (const char *)data + 8 * i, 8); return (double)v; }
  case PT_U64: { uint64_t v; memcpy(&v, (const char *)data + 8 * i, 8); return (double)v; }
  case PT_F64: { double v; memcpy(&v, (const char *)data + 8 * i, 8); return v; }
  case PT_U8: return ((const uint8_t *)data)[i];
  default: return 0;
  }
}

uint64_t prog_element_bits(prog_type t, const void *data, uint64_t i) {
  switch (t) {
  case PT_I32: { int32_t v; memcpy(&v, (const char *)data + 4 * i, 4); return (uint64_t)(int64_t)v; }
  case PT_U32: { uint32_t v; memcpy(&v, (const char *)data + 4 * i, 4); return v; }
  case PT_I64:
  case PT_U64: { uint64_t v; memcpy(&v, (const char *)data + 8 * i, 8); return v; }
  case PT_U8: return ((const uint8_t *)data)[i];
  default: return 0;
  }
}

/* An integer element as text, signed or not as its type is. */
static void int_text(prog_type t, uint64_t bits, char *out, size_t n) {
  if (t == PT_U64 || t == PT_U32 || t == PT_U8) snprintf(out, n, "%llu", (unsigned long long)bits);
  else snprintf(out, n, "%lld", (long long)(int64_t)bits);
}

/* The check docs/config.md states: |got - want| <= tol + rtol * |want|. */
static bool close_enough(double got, double want, const prog_expect *e) {
  assert(e->tol >= 0 && e->rtol >= 0);
  if (got == want) return true;
  if (isnan(got) || isnan(want)) return false;
  return fabs(got - want) <= e->tol + e->rtol * fabs(want);
}

/* Several mismatches of one buffer read as a list. */
static void sep(strbuf *why) {
  if (why->len) sb_adds(why, "; ");
}

/* An expected value: the constant, or its expression computed for this job. */
static bool want_of(const prog_expr *e, double constant, const prog_env *env, double *out) {
  if (!e || e->n == 0) {
    *out = constant;
    return true;
  }
  prog_value v;
  if (prog_expr_eval(e, env, &v)) return false;
  *out = prog_value_f(v);
  return true;
}

bool prog_verify_buffer(const prog_program *p, uint32_t buffer, const void *data, size_t len, const prog_env *env,
                        strbuf *why) {
  const prog_buffer *b = &p->buffers[buffer];
  uint64_t count = len / prog_type_size(b->type);
  bool ok = true;
  for (uint32_t k = 0; k < p->nexpects; k++) {
    const prog_expect *e = &p->expects[k];
    if (e->buffer != buffer) continue;
    if (e->kind == EXP_SUM) {
      double s = 0;
      for (uint64_t i = 0; i < count; i++) s += prog_element(b->type, data, i);
      double want;
      if (!want_of(&e->sum_expr, e->sum, env, &want)) {
        sep(why);
        sb_addf(why, "buffer %s: the expected sum cannot be computed for this job", b->name);
        ok = false;
      } else if (!close_enough(s, want, e)) {
        sep(why);
        sb_addf(why, "buffer %s: expected sum %.9g, got %.9g", b->name, want, s);
        ok = false;
      }
      continue;
    }
    for (size_t j = 0; j < e->n; j++) {
      uint64_t i = e->kind == EXP_AT ? e->index[j] : j;
      if (i >= count) {
        sep(why);
        sb_addf(why, "buffer %s: has %llu elements, expected index %llu", b->name,
                (unsigned long long)count, (unsigned long long)i);
        ok = false;
        break;
      }
      char at[PROG_MAX_DIMS * 22]; /* the index as text, written only for a failure */
      if (e->bits && e->tol == 0 && e->rtol == 0) {
        /* an integer buffer: compared as integers, exactly (a double holds
         * only 53 bits) */
        uint64_t got = prog_element_bits(b->type, data, i), want = e->bits[j];
        bool known = true;
        if (e->exprs && e->exprs[j].n) {
          prog_value v;
          known = !prog_expr_eval(&e->exprs[j], env, &v);
          want = v.is_int ? (uint64_t)v.i : (uint64_t)(int64_t)v.f;
        }
        if (!known) {
          prog_index_text(b, i, at, sizeof at);
          sep(why);
          sb_addf(why, "buffer %s[%s]: the expected value cannot be computed for this job", b->name, at);
          ok = false;
          break;
        }
        if (got != want) {
          char g[32], w[32];
          int_text(b->type, got, g, sizeof g);
          int_text(b->type, want, w, sizeof w);
          prog_index_text(b, i, at, sizeof at);
          sep(why);
          sb_addf(why, "buffer %s[%s]: expected %s, got %s", b->name, at, w, g);
          ok = false;
          break;
        }
        continue;
      }
      double got = prog_element(b->type, data, i), want;
      if (!want_of(e->exprs ? &e->exprs[j] : NULL, e->values[j], env, &want)) {
        prog_index_text(b, i, at, sizeof at);
        sep(why);
        sb_addf(why, "buffer %s[%s]: the expected value cannot be computed for this job", b->name, at);
        ok = false;
        break;
      }
      if (!close_enough(got, want, e)) {
        prog_index_text(b, i, at, sizeof at);
        sep(why);
        sb_addf(why, "buffer %s[%s]: expected %.9g, got %.9g", b->name, at, want, got);
        ok = false;
        break; /* the first bad index is the useful one */
      }
    }
  }
  return ok;
}
