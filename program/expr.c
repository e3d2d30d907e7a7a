/*
 * Expressions in configs: integer or float arithmetic over numbers and the
 * variables $iter, $iter0..$iterN, $job, $device, $run (and $block, in an
 * autotuned launch's grid), with C's operators
 * and precedence (unary - + ~; * / %; + -; << >>; < <= > >=; == !=; &; ^; |;
 * c ? a : b) and min(a, b), max(a, b). Parsed once, at load, into reverse
 * Polish (a conditional as jumps, so only the branch taken is evaluated);
 * evaluated at record time for each unrolled iteration. Integer op integer
 * stays integer (division truncates, overflow is an error); anything with a
 * float is float; comparisons give 0 or 1.
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/program.h"

enum {
  EXO_NUM, EXO_VAR, EXO_ADD, EXO_SUB, EXO_MUL, EXO_DIV, EXO_MOD, EXO_NEG,
  EXO_SHL, EXO_SHR, EXO_AND, EXO_OR, EXO_XOR, EXO_NOT, EXO_LT, EXO_LE, EXO_GT, EXO_GE, EXO_EQ, EXO_NE,
  EXO_MIN, EXO_MAX,
  EXO_JZ,  /* pops a value; when it is zero, goes on at op num.i */
  EXO_JMP, /* goes on at op num.i */
};

#define EXPR_MAX_OPS 256
#define EXPR_MAX_STACK 64

/* What the grammar allows, for error messages. */
#define EXPR_OPERATORS "* / %, + -, << >>, < <= > >=, == !=, &, ^, |, c ? a : b"
#define EXPR_ALLOWED                                                                                    \
  "numbers, $iter, $iterN, $job, $device, $run, ( ), min(a, b), max(a, b), unary - + ~, and operators " \
  EXPR_OPERATORS

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
  size_t at; /* where it failed: an offset into s */
  bool failed;
  bool big; /* a literal above INT64_MAX was read */
} parser;

static void fail(parser *ps, const char *fmt, const char *arg) {
  if (ps->failed) return;
  ps->failed = true;
  ps->at = (size_t)(ps->p - ps->s);
  snprintf(ps->why, ps->why_len, fmt, arg);
}

static void skip_ws(parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t') ps->p++;
}

/* Pops of each op; what a value pushes is 1. */
static int pops(uint8_t op) {
  switch (op) {
  case EXO_NUM:
  case EXO_VAR: return -1;
  case EXO_NEG:
  case EXO_NOT:
  case EXO_JMP: return 0;
  default: return 1; /* binary ops pop two and push one; JZ pops one */
  }
}

static void emit(parser *ps, prog_expr_op op) {
  if (ps->failed) return;
  if (ps->n >= EXPR_MAX_OPS) {
    fail(ps, "%s", "expression too long (at most 256 operations)");
    return;
  }
  ps->ops[ps->n++] = op;
  ps->stack_depth -= pops(op.op);
  if (ps->stack_depth > ps->max_stack) ps->max_stack = ps->stack_depth;
  if (ps->max_stack > EXPR_MAX_STACK) fail(ps, "%s", "expression nested too deeply");
}

static void parse_cond(parser *ps, int nest);

static bool word(parser *ps, const char *w) {
  size_t n = strlen(w);
  if (strncmp(ps->p, w, n) != 0 || isalnum((unsigned char)ps->p[n]) || ps->p[n] == '_') return false;
  ps->p += n;
  return true;
}

static void expect_char(parser *ps, char c, const char *what) {
  skip_ws(ps);
  if (*ps->p != c) fail(ps, "%s", what);
  else ps->p++;
}

static void parse_unary(parser *ps, int nest);

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
    parse_cond(ps, nest + 1);
    expect_char(ps, ')', "expected ')'");
    return;
  }
  bool is_min = word(ps, "min");
  if (is_min || word(ps, "max")) {
    expect_char(ps, '(', is_min ? "expected '(' after min" : "expected '(' after max");
    parse_cond(ps, nest + 1);
    expect_char(ps, ',', "expected ',' between the two values of min/max");
    parse_cond(ps, nest + 1);
    expect_char(ps, ')', "expected ')' after the two values of min/max");
    emit(ps, (prog_expr_op){.op = is_min ? EXO_MIN : EXO_MAX});
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
    else if (strcmp(name, "$block") == 0) op.var = EXV_BLOCK;
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
      fail(ps, "unknown variable %s (known: $iter, $iterN, $job, $device, $run, $block)", name);
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
      if (errno == ERANGE) {
        fail(ps, "%s", "integer too large (at most 18446744073709551615)");
        return;
      }
      ps->big |= v > (unsigned long long)INT64_MAX; /* allowed alone only: checked at the end */
      op.num.i = (int64_t)v;
    }
    ps->p = end;
    emit(ps, op);
    return;
  }
  if (*p == '\0') fail(ps, "%s", "expression ends where a value was expected (allowed: " EXPR_ALLOWED ")");
  else fail(ps, "unexpected '%.1s' where a value was expected (allowed: " EXPR_ALLOWED ")", p);
}

static void parse_unary(parser *ps, int nest) {
  skip_ws(ps);
  char c = *ps->p;
  if (c == '-' || c == '+' || c == '~') {
    ps->p++;
    static const char min_digits[] = "9223372036854775808"; /* -2^63: its magnitude alone does not fit */
    const char *q = ps->p;
    while (*q == ' ' || *q == '\t') q++;
    size_t nd = sizeof min_digits - 1;
    if (c == '-' && !strncmp(q, min_digits, nd) && !isalnum((unsigned char)q[nd]) && q[nd] != '.') {
      ps->p = q + nd;
      emit(ps, (prog_expr_op){.op = EXO_NUM, .num = {.is_int = true, .i = INT64_MIN}});
      return;
    }
    parse_unary(ps, nest + 1);
    if (c == '-') emit(ps, (prog_expr_op){.op = EXO_NEG});
    if (c == '~') emit(ps, (prog_expr_op){.op = EXO_NOT});
    return;
  }
  parse_primary(ps, nest);
}

/* The binary operators by level, loosest first (C's precedence). */
static const struct binop {
  const char *text;
  uint8_t op;
  int level;
} binops[] = {
    {"|", EXO_OR, 0},   {"^", EXO_XOR, 1},  {"&", EXO_AND, 2},  {"==", EXO_EQ, 3}, {"!=", EXO_NE, 3},
    {"<<", EXO_SHL, 5}, {">>", EXO_SHR, 5}, {"<=", EXO_LE, 4},  {">=", EXO_GE, 4}, {"<", EXO_LT, 4},
    {">", EXO_GT, 4},   {"+", EXO_ADD, 6},  {"-", EXO_SUB, 6},  {"*", EXO_MUL, 7}, {"/", EXO_DIV, 7},
    {"%", EXO_MOD, 7},
};
#define LEVELS 8

/* The operator at ps->p of this level, if any (longest match first: "<<"
 * before "<", "<=" before "<"). */
static const struct binop *binop_at(parser *ps, int level) {
  for (size_t i = 0; i < sizeof binops / sizeof binops[0]; i++) {
    const struct binop *b = &binops[i];
    size_t n = strlen(b->text);
    if (strncmp(ps->p, b->text, n) != 0) continue;
    /* a one-character operator that is the start of a longer one is that one */
    if (n == 1 && (ps->p[1] == '=' || ps->p[1] == ps->p[0]) && strchr("<>=!", ps->p[0])) continue;
    return b->level == level ? b : NULL;
  }
  return NULL;
}

static void parse_level(parser *ps, int level, int nest) {
  if (level == LEVELS) {
    parse_unary(ps, nest);
    return;
  }
  parse_level(ps, level + 1, nest);
  for (;;) {
    skip_ws(ps);
    const struct binop *b = binop_at(ps, level);
    if (!b || ps->failed) return;
    ps->p += strlen(b->text);
    parse_level(ps, level + 1, nest);
    emit(ps, (prog_expr_op){.op = b->op});
  }
}

/* c ? a : b, right to left; only the branch taken is evaluated */
static void parse_cond(parser *ps, int nest) {
  if (nest > EXPR_MAX_STACK) {
    fail(ps, "%s", "expression nested too deeply");
    return;
  }
  parse_level(ps, 0, nest);
  skip_ws(ps);
  if (*ps->p != '?' || ps->failed) return;
  ps->p++;
  uint32_t jz = ps->n;
  emit(ps, (prog_expr_op){.op = EXO_JZ});
  parse_cond(ps, nest + 1);
  expect_char(ps, ':', "expected ':' of a conditional c ? a : b");
  uint32_t jmp = ps->n;
  emit(ps, (prog_expr_op){.op = EXO_JMP});
  ps->stack_depth--; /* the two branches leave one value between them */
  if (ps->failed) return;
  ps->ops[jz].num.i = ps->n;
  parse_cond(ps, nest + 1);
  if (!ps->failed) ps->ops[jmp].num.i = ps->n;
}

const char *prog_expr_parse(const char *text, int depth, prog_expr *out, char *why_buf, size_t why_len) {
  size_t at;
  return prog_expr_parse_at(text, depth, out, why_buf, why_len, &at);
}

const char *prog_expr_parse_at(const char *text, int depth, prog_expr *out, char *why_buf, size_t why_len,
                               size_t *at) {
  *at = 0;
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
  parse_cond(ps, 0);
  skip_ws(ps);
  if (!ps->failed && *ps->p != '\0')
    fail(ps, "unexpected '%.1s' after a complete expression (operators: " EXPR_OPERATORS ")", ps->p);
  if (!ps->failed && ps->big && ps->n != 1) {
    ps->at = 0;
    fail(ps, "%s", "integer too large for arithmetic (expressions compute in 64-bit signed integers, at most "
                   "9223372036854775807; a larger literal can only stand alone, as a u64 kernel argument)");
  }
  if (!ps->failed) {
    out->ops = malloc(ps->n * sizeof *out->ops);
    if (!out->ops) fail(ps, "%s", "out of memory");
  }
  if (ps->failed) {
    *at = ps->at;
    free(ps);
    return why_buf;
  }
  memcpy(out->ops, ps->ops, ps->n * sizeof *out->ops);
  out->n = ps->n;
  out->constant = ps->constant;
  out->depth_used = ps->depth_used;
  out->iters_used = ps->iters_used;
  out->u64_literal = ps->big;
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
    if (e->ops[i].var == EXV_BLOCK) u |= PROG_USES_BLOCK;
  }
  return u;
}

double prog_value_f(prog_value v) { return v.is_int ? (double)v.i : v.f; }

/* The binary operators on two integers: checked 64-bit arithmetic, an
 * overflow is an error, never a wrap. */
static const char *int_op(uint8_t op, int64_t a, int64_t b, int64_t *r) {
  switch (op) {
  case EXO_ADD: return __builtin_add_overflow(a, b, r) ? "integer overflow in +" : NULL;
  case EXO_SUB: return __builtin_sub_overflow(a, b, r) ? "integer overflow in -" : NULL;
  case EXO_MUL: return __builtin_mul_overflow(a, b, r) ? "integer overflow in *" : NULL;
  case EXO_DIV:
  case EXO_MOD:
    if (b == 0) return "division by zero";
    if (a == INT64_MIN && b == -1) return "integer overflow";
    *r = op == EXO_DIV ? a / b : a % b;
    return NULL;
  case EXO_SHL:
  case EXO_SHR:
    if (b < 0 || b > 63) return "a shift by less than 0 or more than 63 bits";
    if (op == EXO_SHR) {
      *r = a >= 0 ? a >> b : ~(~a >> b); /* arithmetic: rounds toward minus infinity */
      return NULL;
    }
    /* a << b is a * 2^b, checked like * (2^63 itself does not fit) */
    if (b == 63) {
      *r = 0;
      return a != 0 ? "integer overflow in <<" : NULL;
    }
    return __builtin_mul_overflow(a, (int64_t)1 << b, r) ? "integer overflow in <<" : NULL;
  case EXO_AND: *r = a & b; return NULL;
  case EXO_OR: *r = a | b; return NULL;
  case EXO_XOR: *r = a ^ b; return NULL;
  case EXO_LT: *r = a < b; return NULL;
  case EXO_LE: *r = a <= b; return NULL;
  case EXO_GT: *r = a > b; return NULL;
  case EXO_GE: *r = a >= b; return NULL;
  case EXO_EQ: *r = a == b; return NULL;
  case EXO_NE: *r = a != b; return NULL;
  case EXO_MIN: *r = a < b ? a : b; return NULL;
  case EXO_MAX: *r = a > b ? a : b; return NULL;
  default: return "bad expression";
  }
}

/* The same with a floating-point operand: comparisons give the integer 0 or
 * 1; the bitwise operators take integers only. */
static const char *float_op(uint8_t op, double x, double y, prog_value *r) {
  r->is_int = false;
  r->i = 0;
  switch (op) {
  case EXO_ADD: r->f = x + y; return NULL;
  case EXO_SUB: r->f = x - y; return NULL;
  case EXO_MUL: r->f = x * y; return NULL;
  case EXO_DIV: r->f = x / y; return NULL;
  case EXO_MOD:
    if (y == 0) return "division by zero";
    r->f = fmod(x, y);
    return NULL;
  case EXO_MIN: r->f = x < y ? x : y; return NULL;
  case EXO_MAX: r->f = x > y ? x : y; return NULL;
  case EXO_LT: case EXO_LE: case EXO_GT: case EXO_GE: case EXO_EQ: case EXO_NE:
    r->is_int = true;
    r->f = 0;
    r->i = op == EXO_LT ? x < y : op == EXO_LE ? x <= y : op == EXO_GT ? x > y : op == EXO_GE ? x >= y
         : op == EXO_EQ ? x == y : x != y;
    return NULL;
  case EXO_SHL: case EXO_SHR: return "a shift of a non-integer value";
  case EXO_AND: case EXO_OR: case EXO_XOR: return "a bitwise operator on a non-integer value";
  default: return "bad expression";
  }
}

static bool truthy(prog_value v) { return v.is_int ? v.i != 0 : v.f != 0; }

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
    case EXO_NOT:
      if (!st[sp - 1].is_int) return "a bitwise operator on a non-integer value";
      st[sp - 1].i = ~st[sp - 1].i;
      break;
    case EXO_JZ:
      assert(op->num.i > (int64_t)k && op->num.i <= (int64_t)e->n);
      if (!truthy(st[--sp])) k = (uint32_t)op->num.i - 1; /* the loop's k++ lands on the target */
      break;
    case EXO_JMP:
      assert(op->num.i > (int64_t)k && op->num.i <= (int64_t)e->n);
      k = (uint32_t)op->num.i - 1;
      break;
    default: {
      prog_value b = st[--sp], a = st[sp - 1], r;
      const char *bad;
      if (a.is_int && b.is_int) {
        r.is_int = true;
        r.f = 0;
        bad = int_op(op->op, a.i, b.i, &r.i);
      } else {
        bad = float_op(op->op, prog_value_f(a), prog_value_f(b), &r);
      }
      if (bad) return bad;
      st[sp - 1] = r;
    }
    }
  }
  if (sp != 1) return "bad expression";
  *out = st[0];
  return NULL;
}
