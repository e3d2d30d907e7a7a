/*
 * Expressions in configs: integer or float arithmetic over numbers and the
 * variables $iter, $iter0..$iterN, $job, $device, $run. Parsed once, at load,
 * into reverse Polish; evaluated at record time for each unrolled iteration.
 * Integer op integer stays integer (division truncates); anything with a
 * float is float.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/program.h"

enum { EXO_NUM, EXO_VAR, EXO_ADD, EXO_SUB, EXO_MUL, EXO_DIV, EXO_MOD, EXO_NEG };

#define EXPR_MAX_OPS 256
#define EXPR_MAX_STACK 64

typedef struct parser {
  const char *s, *p;
  int depth;
  prog_expr_op ops[EXPR_MAX_OPS];
  uint32_t n;
  int stack_depth, max_stack;
  uint32_t depth_used, iters_used;
  bool constant;
  char *why;
  size_t why_len;
  bool failed;
} parser;

static void fail(parser *ps, const char *fmt, const char *arg) {
  if (ps->failed) return;
  ps->failed = true;
  snprintf(ps->why, ps->why_len, fmt, arg);
}

static void skip_ws(parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t') ps->p++;
}

static void emit(parser *ps, prog_expr_op op) {
  if (ps->failed) return;
  if (ps->n >= EXPR_MAX_OPS) {
    fail(ps, "%s", "expression too long");
    return;
  }
  ps->ops[ps->n++] = op;
  if (op.op == EXO_NUM || op.op == EXO_VAR) ps->stack_depth++;
  else if (op.op != EXO_NEG) ps->stack_depth--;
  if (ps->stack_depth > ps->max_stack) ps->max_stack = ps->stack_depth;
  if (ps->max_stack > EXPR_MAX_STACK) fail(ps, "%s", "expression nested too deeply");
}

static void parse_sum(parser *ps, int nest);

static void parse_primary(parser *ps, int nest) {
  skip_ws(ps);
  if (nest > EXPR_MAX_STACK) {
    fail(ps, "%s", "expression nested too deeply");
    return;
  }
  const char *p = ps->p;
  prog_expr_op op = {0};
  if (*p == '(') {
    ps->p++;
    parse_sum(ps, nest + 1);
    skip_ws(ps);
    if (*ps->p != ')') fail(ps, "%s", "expected ')'");
    else ps->p++;
    return;
  }
  if (*p == '-' || *p == '+') {
    ps->p++;
    parse_primary(ps, nest + 1);
    if (*p == '-') emit(ps, (prog_expr_op){.op = EXO_NEG});
    return;
  }
  if (*p == '$') {
    const char *q = p + 1;
    while (isalnum((unsigned char)*q) || *q == '_') q++;
    size_t len = (size_t)(q - p);
    char name[32];
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, p, len);
    name[len] = '\0';
    op.op = EXO_VAR;
    if (strcmp(name, "$job") == 0) op.var = EXV_JOB;
    else if (strcmp(name, "$device") == 0) op.var = EXV_DEVICE;
    else if (strcmp(name, "$run") == 0) op.var = EXV_RUN;
    else if (strcmp(name, "$iter") == 0) {
      if (ps->depth == 0) {
        fail(ps, "%s", "$iter is used outside of any loop");
        return;
      }
      op.var = (uint8_t)(EXV_ITER0 + ps->depth - 1);
    } else if (strncmp(name, "$iter", 5) == 0 && isdigit((unsigned char)name[5])) {
      char *end;
      long k = strtol(name + 5, &end, 10);
      if (*end != '\0' || k < 0 || k >= ps->depth) {
        fail(ps, "%s is not an enclosing loop's iteration", name);
        return;
      }
      op.var = (uint8_t)(EXV_ITER0 + k);
    } else {
      fail(ps, "unknown variable %s (known: $iter, $iterN, $job, $device, $run)", name);
      return;
    }
    if (op.var < PROG_MAX_DEPTH && (uint32_t)op.var + 1 > ps->depth_used)
      ps->depth_used = (uint32_t)op.var + 1;
    if (op.var < PROG_MAX_DEPTH) ps->iters_used |= 1u << op.var;
    ps->constant = false;
    ps->p = q;
    emit(ps, op);
    return;
  }
  if (isdigit((unsigned char)*p) || *p == '.') {
    char *end;
    op.op = EXO_NUM;
    /* an integer unless it has a fraction or an exponent */
    size_t span = strspn(p, "0123456789");
    if (p[span] == '.' || p[span] == 'e' || p[span] == 'E') {
      op.num.is_int = false;
      op.num.f = strtod(p, &end);
      if (end == p) {
        fail(ps, "%s", "bad number");
        return;
      }
    } else {
      op.num.is_int = true;
      errno = 0;
      unsigned long long v = strtoull(p, &end, 10);
      if (v > (unsigned long long)INT64_MAX) {
        fail(ps, "%s", "integer too large");
        return;
      }
      op.num.i = (int64_t)v;
    }
    ps->p = end;
    emit(ps, op);
    return;
  }
  if (*p == '\0') fail(ps, "%s", "expression ends where a value was expected");
  else fail(ps, "unexpected '%.1s'", p);
}

static void parse_product(parser *ps, int nest) {
  parse_primary(ps, nest);
  for (;;) {
    skip_ws(ps);
    char c = *ps->p;
    if (c != '*' && c != '/' && c != '%') return;
    ps->p++;
    parse_primary(ps, nest);
    emit(ps, (prog_expr_op){.op = c == '*' ? EXO_MUL : c == '/' ? EXO_DIV : EXO_MOD});
    if (ps->failed) return;
  }
}

static void parse_sum(parser *ps, int nest) {
  parse_product(ps, nest);
  for (;;) {
    skip_ws(ps);
    char c = *ps->p;
    if (c != '+' && c != '-') return;
    ps->p++;
    parse_product(ps, nest);
    emit(ps, (prog_expr_op){.op = c == '+' ? EXO_ADD : EXO_SUB});
    if (ps->failed) return;
  }
}

const char *prog_expr_parse(const char *text, int depth, prog_expr *out, char *why_buf,
                            size_t why_len) {
  memset(out, 0, sizeof *out);
  parser *ps = calloc(1, sizeof *ps);
  if (!ps) {
    snprintf(why_buf, why_len, "out of memory");
    return why_buf;
  }
  ps->s = ps->p = text;
  ps->depth = depth;
  ps->constant = true;
  ps->why = why_buf;
  ps->why_len = why_len;
  parse_sum(ps, 0);
  skip_ws(ps);
  if (!ps->failed && *ps->p != '\0') fail(ps, "unexpected '%.1s'", ps->p);
  if (!ps->failed) {
    out->ops = malloc(ps->n * sizeof *out->ops);
    if (!out->ops) fail(ps, "%s", "out of memory");
  }
  if (ps->failed) {
    free(ps);
    return why_buf;
  }
  memcpy(out->ops, ps->ops, ps->n * sizeof *out->ops);
  out->n = ps->n;
  out->constant = ps->constant;
  out->depth_used = ps->depth_used;
  out->iters_used = ps->iters_used;
  free(ps);
  return NULL;
}

void prog_expr_free(prog_expr *e) {
  free(e->ops);
  memset(e, 0, sizeof *e);
}

unsigned prog_expr_uses(const prog_expr *e) {
  unsigned u = 0;
  for (uint32_t i = 0; i < e->n; i++) {
    if (e->ops[i].op != EXO_VAR) continue;
    if (e->ops[i].var == EXV_JOB) u |= PROG_USES_JOB;
    if (e->ops[i].var == EXV_RUN) u |= PROG_USES_RUN;
    if (e->ops[i].var == EXV_DEVICE) u |= PROG_USES_DEVICE;
  }
  return u;
}

double prog_value_f(prog_value v) { return v.is_int ? (double)v.i : v.f; }

const char *prog_expr_eval(const prog_expr *e, const prog_env *env, prog_value *out) {
  prog_value st[EXPR_MAX_STACK + 1];
  int sp = 0;
  for (uint32_t k = 0; k < e->n; k++) {
    const prog_expr_op *op = &e->ops[k];
    switch (op->op) {
    case EXO_NUM: st[sp++] = op->num; break;
    case EXO_VAR: st[sp++] = (prog_value){.is_int = true, .i = env->v[op->var]}; break;
    case EXO_NEG:
      if (st[sp - 1].is_int) {
        if (st[sp - 1].i == INT64_MIN) return "integer overflow in unary -";
        st[sp - 1].i = -st[sp - 1].i;
      } else {
        st[sp - 1].f = -st[sp - 1].f;
      }
      break;
    default: {
      prog_value b = st[--sp], a = st[sp - 1], r;
      if (a.is_int && b.is_int) {
        r.is_int = true;
        r.f = 0;
        /* checked 64-bit arithmetic: an overflow is an error, never a wrap */
        switch (op->op) {
        case EXO_ADD:
          if (__builtin_add_overflow(a.i, b.i, &r.i)) return "integer overflow in +";
          break;
        case EXO_SUB:
          if (__builtin_sub_overflow(a.i, b.i, &r.i)) return "integer overflow in -";
          break;
        case EXO_MUL:
          if (__builtin_mul_overflow(a.i, b.i, &r.i)) return "integer overflow in *";
          break;
        case EXO_DIV:
        case EXO_MOD:
          if (b.i == 0) return "division by zero";
          if (a.i == INT64_MIN && b.i == -1) return "integer overflow";
          r.i = op->op == EXO_DIV ? a.i / b.i : a.i % b.i;
          break;
        default: return "bad expression";
        }
      } else {
        double x = prog_value_f(a), y = prog_value_f(b);
        r.is_int = false;
        r.i = 0;
        switch (op->op) {
        case EXO_ADD: r.f = x + y; break;
        case EXO_SUB: r.f = x - y; break;
        case EXO_MUL: r.f = x * y; break;
        case EXO_DIV: r.f = x / y; break;
        case EXO_MOD:
          if (y == 0) return "division by zero";
          r.f = fmod(x, y);
          break;
        default: return "bad expression";
        }
      }
      st[sp - 1] = r;
    }
    }
  }
  if (sp != 1) return "bad expression";
  *out = st[0];
  return NULL;
}
