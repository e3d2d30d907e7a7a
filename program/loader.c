/*
 * The config loader: YAML (libyaml's document API) to a checked prog_program.
 *
 * The whole document is walked even after a problem is found, so that one run
 * reports every problem, each as "file:line:col: message" (1-based, pointing
 * at the offending node). Nothing is returned unless there were none.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "program/program.h"
#include "program/yaml_depth.h"

#define MAX_PROBLEMS 100

typedef struct ld {
  yaml_document_t doc;
  const char *file;
  schedrun_error_t *err;
  int problems;
  prog_program *p;
  uint32_t next_command;
  bool loop_is_while[PROG_MAX_DEPTH];
  uint64_t buffer_bytes; /* all buffers so far */
} ld;

typedef yaml_node_t node;

static prog_loc loc_of(const node *n) {
  return (prog_loc){(int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
}

__attribute__((format(printf, 3, 4))) static void problem(ld *l, const node *n, const char *fmt,
                                                          ...) {
  l->problems++;
  if (l->problems > MAX_PROBLEMS) return;
  strbuf sb;
  sb_init(&sb);
  va_list ap;
  va_start(ap, fmt);
  sb_vaddf(&sb, fmt, ap);
  va_end(ap);
  prog_loc lc = n ? loc_of(n) : (prog_loc){1, 1};
  err_append(l->err, SCHEDRUN_ECONFIG, "%s:%d:%d: %s", l->file, lc.line, lc.col,
             sb.data ? sb.data : "");
  sb_free(&sb);
}

static node *get(ld *l, int id) { return yaml_document_get_node(&l->doc, id); }

static const char *kind_name(const node *n) {
  switch (n->type) {
  case YAML_SCALAR_NODE: return "a scalar";
  case YAML_SEQUENCE_NODE: return "a list";
  case YAML_MAPPING_NODE: return "a mapping";
  default: return "nothing";
  }
}

static const char *sval(const node *n) { return (const char *)n->data.scalar.value; }

/* Reads a mapping whose keys must come from `keys` (NULL-terminated); fills
 * vals[i] for keys[i]. Reports unknown and repeated keys. */
static bool read_map(ld *l, node *n, const char *what, const char *const *keys, node **vals) {
  size_t nkeys = 0;
  while (keys[nkeys]) vals[nkeys++] = NULL;
  if (n->type != YAML_MAPPING_NODE) {
    problem(l, n, "%s must be a mapping, not %s", what, kind_name(n));
    return false;
  }
  for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
    node *k = get(l, pr->key), *v = get(l, pr->value);
    if (!k || !v) continue;
    if (k->type != YAML_SCALAR_NODE) {
      problem(l, k, "%s: keys must be names", what);
      continue;
    }
    size_t i = 0;
    while (i < nkeys && strcmp(keys[i], sval(k)) != 0) i++;
    if (i == nkeys) {
      strbuf known;
      sb_init(&known);
      for (size_t j = 0; j < nkeys; j++) sb_addf(&known, "%s%s", j ? ", " : "", keys[j]);
      problem(l, k, "unknown key '%s' in %s (known: %s)", sval(k), what, known.data);
      sb_free(&known);
    } else if (vals[i]) {
      problem(l, k, "key '%s' appears twice in %s", sval(k), what);
    } else {
      vals[i] = v;
    }
  }
  return true;
}

static bool is_scalar(ld *l, node *n, const char *what) {
  if (n->type == YAML_SCALAR_NODE) return true;
  problem(l, n, "%s must be a scalar, not %s", what, kind_name(n));
  return false;
}

static bool read_int(ld *l, node *n, const char *what, int64_t lo, int64_t hi, int64_t *out) {
  if (!is_scalar(l, n, what)) return false;
  const char *s = sval(n);
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (end == s || *end != '\0' || errno) {
    problem(l, n, "%s must be an integer, not '%s'", what, s);
    return false;
  }
  if (v < lo || v > hi) {
    problem(l, n, "%s must be between %lld and %lld, not %lld", what, (long long)lo,
            (long long)hi, v);
    return false;
  }
  *out = v;
  return true;
}

static bool read_num(ld *l, node *n, const char *what, double *out) {
  if (!is_scalar(l, n, what)) return false;
  const char *s = sval(n);
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || !isfinite(v)) {
    problem(l, n, "%s must be a number, not '%s'", what, s);
    return false;
  }
  *out = v;
  return true;
}

static const char *read_str(ld *l, node *n, const char *what) {
  if (!is_scalar(l, n, what)) return NULL;
  if (sval(n)[0] == '\0') {
    problem(l, n, "%s must not be empty", what);
    return NULL;
  }
  return sval(n);
}

static bool parse_type(const char *s, prog_type *t) {
  static const char *const names[] = {"i32", "u32", "i64", "u64", "f32", "f64", "ptr", "u8"};
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(names); i++)
    if (strcmp(s, names[i]) == 0) {
      *t = (prog_type)i;
      return true;
    }
  return false;
}

/* ---- element conversion ---- */

static bool type_is_int(prog_type t) { return !prog_type_is_float(t); }

static bool value_fits(prog_type t, double v) {
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

static void store_elem(prog_type t, uint8_t *base, uint64_t i, double v) {
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

/* ---- kernels ---- */

static void load_kernels(ld *l, node *n) {
  if (n->type != YAML_MAPPING_NODE) {
    problem(l, n, "kernels must be a mapping of kernel names, not %s", kind_name(n));
    return;
  }
  size_t count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
  l->p->kernels = calloc(count ? count : 1, sizeof(prog_kernel));
  if (!l->p->kernels) return;
  for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
    node *k = get(l, pr->key), *v = get(l, pr->value);
    if (!k || !v || !is_scalar(l, k, "a kernel name")) continue;
    const char *name = sval(k);
    bool dup = false;
    for (uint32_t i = 0; i < l->p->nkernels; i++)
      if (strcmp(l->p->kernels[i].name, name) == 0) dup = true;
    if (dup) {
      problem(l, k, "kernel '%s' is defined twice", name);
      continue;
    }
    prog_kernel *kr = &l->p->kernels[l->p->nkernels++];
    kr->name = xstrdup(name);
    kr->loc = loc_of(k);
    static const char *const keys[] = {"params", "source", "file", "entry", NULL};
    node *f[4];
    char what[160];
    snprintf(what, sizeof what, "kernel '%s'", name);
    if (!read_map(l, v, what, keys, f)) continue;
    if (!f[0]) problem(l, v, "kernel '%s' has no params (a list of types)", name);
    else if (f[0]->type != YAML_SEQUENCE_NODE)
      problem(l, f[0], "params of kernel '%s' must be a list of types", name);
    else if (f[0]->data.sequence.items.top - f[0]->data.sequence.items.start > PROG_MAX_PARAMS)
      problem(l, f[0], "kernel '%s' has %zu params; at most %d", name,
              (size_t)(f[0]->data.sequence.items.top - f[0]->data.sequence.items.start), PROG_MAX_PARAMS);
    else {
      size_t np = (size_t)(f[0]->data.sequence.items.top - f[0]->data.sequence.items.start);
      kr->params = calloc(np ? np : 1, sizeof(prog_type));
      strbuf txt;
      sb_init(&txt);
      for (size_t i = 0; kr->params && i < np; i++) {
        node *t = get(l, f[0]->data.sequence.items.start[i]);
        prog_type ty;
        if (!t || !is_scalar(l, t, "a parameter type")) continue;
        if (!parse_type(sval(t), &ty) || ty == PT_U8) {
          problem(l, t, "unknown parameter type '%s' (known: i32 u32 i64 u64 f32 f64 ptr)",
                  sval(t));
          continue;
        }
        kr->params[kr->nparams++] = ty;
        sb_addf(&txt, "%s%s", i ? "," : "", prog_type_name(ty));
      }
      kr->params_text = sb_take(&txt);
    }
    if (f[1] && f[2]) problem(l, f[2], "kernel '%s' has both source and file; give one", name);
    else if (f[1]) {
      if (is_scalar(l, f[1], "source")) {
        if (f[1]->data.scalar.length > PROG_MAX_SOURCE_BYTES)
          problem(l, f[1], "kernel '%s' has %zu bytes of source; at most %u MiB", name, f[1]->data.scalar.length,
                  PROG_MAX_SOURCE_BYTES >> 20);
        kr->source = xstrdup(sval(f[1]));
        kr->source_file = xstrdup(l->file);
        bool block = f[1]->data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
                     f[1]->data.scalar.style == YAML_FOLDED_SCALAR_STYLE;
        kr->first_line = (uint32_t)f[1]->start_mark.line + (block ? 2 : 1);
      }
    } else if (f[2]) {
      const char *rel = read_str(l, f[2], "file");
      if (rel) {
        char *path = fs_join_rel(l->file, rel);
        char *data = NULL;
        size_t len = 0;
        schedrun_error_t e = {0};
        if (!path || fs_read_input(path, PROG_MAX_SOURCE_BYTES, &data, &len, &e) != SCHEDRUN_OK) {
          problem(l, f[2], "cannot read kernel file '%s': %s", rel, e.message ? e.message : "");
        } else if (len > PROG_MAX_SOURCE_BYTES) {
          problem(l, f[2], "kernel file '%s' has %zu bytes; at most %u MiB", rel, len, PROG_MAX_SOURCE_BYTES >> 20);
        } else if (memchr(data, '\0', len)) {
          problem(l, f[2], "kernel file '%s' is not text", rel);
        } else {
          kr->source = data;
          data = NULL;
          kr->source_file = path;
          path = NULL;
          kr->first_line = 1;
        }
        schedrun_error_clear(&e);
        free(data);
        free(path);
      }
    } else {
      problem(l, v, "kernel '%s' needs source (inline) or file", name);
    }
    if (f[3]) {
      const char *e = read_str(l, f[3], "entry");
      if (e) kr->entry = xstrdup(e);
    }
    if (!kr->entry) kr->entry = xstrdup(name);
    bool ident = kr->entry[0] != '\0';
    for (const char *c = kr->entry; *c; c++)
      if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
            (c != kr->entry && *c >= '0' && *c <= '9')))
        ident = false;
    if (!ident) problem(l, f[3] ? f[3] : k, "entry '%s' is not a C function name", kr->entry);
    else if (strlen(kr->entry) > PROG_MAX_ENTRY)
      problem(l, f[3] ? f[3] : k, "entry of kernel '%s' has %zu characters; at most %d", name, strlen(kr->entry),
              PROG_MAX_ENTRY);
  }
}

/* ---- buffers ---- */

static void load_init(ld *l, node *n, prog_buffer *b) {
  static const char *const keys[] = {"fill", "iota", "values", "file", NULL};
  node *f[4];
  char what[160];
  snprintf(what, sizeof what, "init of buffer '%s'", b->name);
  if (!read_map(l, n, what, keys, f)) return;
  int given = !!f[0] + !!f[1] + !!f[2] + !!f[3];
  if (given != 1) {
    problem(l, n, "init of buffer '%s' needs exactly one of fill, iota, values, file", b->name);
    return;
  }
  size_t es = prog_type_size(b->type);
  if (b->count > (1ull << 32) / es) return; /* reported with count */
  if (f[3]) {
    const char *rel = read_str(l, f[3], "init file");
    if (!rel) return;
    char *path = fs_join_rel(l->file, rel);
    char *data = NULL;
    size_t len = 0;
    schedrun_error_t e = {0};
    if (!path || fs_read_input(path, PROG_MAX_BUFFER_BYTES, &data, &len, &e) != SCHEDRUN_OK)
      problem(l, f[3], "cannot read init file '%s': %s", rel, e.message ? e.message : "");
    else if (len != b->count * es)
      problem(l, f[3], "init file '%s' has %zu bytes; buffer '%s' needs %llu", rel, len, b->name,
              (unsigned long long)(b->count * es));
    else {
      b->image = (uint8_t *)data;
      data = NULL;
    }
    schedrun_error_clear(&e);
    free(data);
    free(path);
    return;
  }
  b->image = calloc(b->count, es);
  if (!b->image) {
    problem(l, n, "out of memory for buffer '%s'", b->name);
    return;
  }
  double start = 0, step = 0;
  bool ok = true;
  if (f[0]) {
    ok = read_num(l, f[0], "fill", &start);
  } else if (f[1]) {
    static const char *const ik[] = {"start", "step", NULL};
    node *iv[2];
    ok = read_map(l, f[1], "iota", ik, iv);
    if (ok && iv[0]) ok = read_num(l, iv[0], "iota start", &start);
    if (ok && iv[1]) ok = read_num(l, iv[1], "iota step", &step);
    else if (ok) step = 1;
  } else {
    if (f[2]->type != YAML_SEQUENCE_NODE) {
      problem(l, f[2], "values must be a list of numbers");
      return;
    }
    size_t nv = (size_t)(f[2]->data.sequence.items.top - f[2]->data.sequence.items.start);
    if (nv > b->count) {
      problem(l, f[2], "buffer '%s' has %llu elements but values lists %zu", b->name,
              (unsigned long long)b->count, nv);
      return;
    }
    for (size_t i = 0; i < nv; i++) {
      node *e = get(l, f[2]->data.sequence.items.start[i]);
      double v;
      if (!e || !read_num(l, e, "a value", &v)) continue;
      if (!value_fits(b->type, v)) {
        problem(l, e, "%g does not fit buffer '%s' of type %s", v, b->name,
                prog_type_name(b->type));
        continue;
      }
      store_elem(b->type, b->image, i, v);
    }
    return;
  }
  if (!ok) return;
  double last = start + step * (double)(b->count - 1);
  if (!value_fits(b->type, start) || !value_fits(b->type, last) ||
      (type_is_int(b->type) && step != floor(step))) {
    problem(l, n, "init values of buffer '%s' do not fit its type %s", b->name,
            prog_type_name(b->type));
    return;
  }
  for (uint64_t i = 0; i < b->count; i++) store_elem(b->type, b->image, i, start + step * (double)i);
}

static void load_buffers(ld *l, node *n) {
  if (n->type != YAML_MAPPING_NODE) {
    problem(l, n, "buffers must be a mapping of buffer names, not %s", kind_name(n));
    return;
  }
  size_t count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
  l->p->buffers = calloc(count ? count : 1, sizeof(prog_buffer));
  if (!l->p->buffers) return;
  for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
    node *k = get(l, pr->key), *v = get(l, pr->value);
    if (!k || !v || !is_scalar(l, k, "a buffer name")) continue;
    if (prog_find_buffer(l->p, sval(k)) >= 0) {
      problem(l, k, "buffer '%s' is defined twice", sval(k));
      continue;
    }
    prog_buffer *b = &l->p->buffers[l->p->nbuffers++];
    b->name = xstrdup(sval(k));
    b->loc = loc_of(k);
    b->type = PT_F32;
    static const char *const keys[] = {"type", "count", "init", NULL};
    node *f[3];
    char what[160];
    snprintf(what, sizeof what, "buffer '%s'", b->name);
    if (!read_map(l, v, what, keys, f)) continue;
    bool ok = true;
    if (!f[0]) {
      problem(l, v, "buffer '%s' has no type", b->name);
      ok = false;
    } else if (is_scalar(l, f[0], "type") && (!parse_type(sval(f[0]), &b->type) || b->type == PT_PTR)) {
      problem(l, f[0], "unknown buffer type '%s' (known: i32 u32 i64 u64 f32 f64 u8)", sval(f[0]));
      ok = false;
    }
    int64_t c = 0;
    if (!f[1]) {
      problem(l, v, "buffer '%s' has no count", b->name);
      ok = false;
    } else if (!read_int(l, f[1], "count", 1, (int64_t)((1ull << 32) / prog_type_size(b->type)), &c)) {
      ok = false;
    }
    b->count = (uint64_t)c;
    if (ok) {
      uint64_t bytes = b->count * prog_type_size(b->type);
      l->buffer_bytes += bytes;
      if (l->buffer_bytes > PROG_MAX_BUFFER_BYTES) {
        problem(l, f[1], "buffer '%s' brings the program's buffers to %llu bytes; at most %llu MiB in all (a job's "
                         "buffers travel in one message)",
                b->name, (unsigned long long)l->buffer_bytes, PROG_MAX_BUFFER_BYTES >> 20);
        ok = false;
      }
    }
    if (ok && f[2]) load_init(l, f[2], b);
  }
}

/* ---- program steps ---- */

static bool parse_expr_node(ld *l, node *n, int depth, const char *what, prog_expr *out) {
  if (!is_scalar(l, n, what)) return false;
  char why[160];
  const char *bad = prog_expr_parse(sval(n), depth, out, why, sizeof why);
  if (bad) {
    problem(l, n, "%s: %s", what, bad);
    return false;
  }
  l->p->uses |= prog_expr_uses(out);
  /* only the iterations it reads: a trips loop inside a while body may use
   * its own $iter */
  for (uint32_t d = 0; d < out->depth_used; d++)
    if ((out->iters_used & (1u << d)) && l->loop_is_while[d]) {
      problem(l, n, "%s uses the iteration of a while loop, which is not known when the loop is "
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
      problem(l, n, "%s: %s in '%s'", what, wrong, sval(n));
      prog_expr_free(out);
      return false;
    }
  }
  return true;
}

static bool const_int(const prog_expr *e, int64_t *v) {
  prog_value r;
  prog_env env = {{0}};
  if (!e->constant || prog_expr_eval(e, &env, &r) || !r.is_int) return false;
  *v = r.i;
  return true;
}

static int buffer_ref(ld *l, node *n, const char *what) {
  const char *name = read_str(l, n, what);
  if (!name) return -1;
  int b = prog_find_buffer(l->p, name);
  if (b < 0) problem(l, n, "%s: no buffer named '%s'", what, name);
  return b;
}

static bool read_dims(ld *l, node *n, const char *what, uint32_t out[3]) {
  out[0] = out[1] = out[2] = 1;
  int64_t v;
  if (n->type == YAML_SCALAR_NODE) {
    if (!read_int(l, n, what, 1, INT32_MAX, &v)) return false;
    out[0] = (uint32_t)v;
    return true;
  }
  if (n->type != YAML_SEQUENCE_NODE) {
    problem(l, n, "%s must be an integer or a list of up to 3", what);
    return false;
  }
  size_t k = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
  if (k < 1 || k > 3) {
    problem(l, n, "%s must list 1 to 3 sizes, not %zu", what, k);
    return false;
  }
  bool ok = true;
  for (size_t i = 0; i < k; i++) {
    node *e = get(l, n->data.sequence.items.start[i]);
    if (e && read_int(l, e, what, 1, INT32_MAX, &v)) out[i] = (uint32_t)v;
    else ok = false;
  }
  return ok;
}

static uint64_t load_steps(ld *l, node *n, int depth, prog_step **out, uint32_t *nout);

static uint64_t load_launch(ld *l, node *n, int depth, prog_step *st) {
  static const char *const keys[] = {"kernel", "grid", "block", "args", NULL};
  node *f[4];
  if (!read_map(l, n, "launch", keys, f)) return 1;
  int kidx = -1;
  if (!f[0]) problem(l, n, "launch needs a kernel");
  else {
    const char *kn = read_str(l, f[0], "kernel");
    for (uint32_t i = 0; kn && i < l->p->nkernels; i++)
      if (strcmp(l->p->kernels[i].name, kn) == 0) kidx = (int)i;
    if (kn && kidx < 0) problem(l, f[0], "no kernel named '%s'", kn);
  }
  st->u.launch.kernel = kidx < 0 ? 0 : (uint32_t)kidx;
  if (!f[1]) problem(l, n, "launch needs a grid");
  else if (read_dims(l, f[1], "grid", st->u.launch.grid)) {
    const uint32_t *g = st->u.launch.grid;
    if (g[0] > INT32_MAX || g[1] > 65535 || g[2] > 65535)
      problem(l, f[1], "grid [%u, %u, %u]: x is at most 2147483647, y and z at most 65535 (CUDA's limits)", g[0], g[1],
              g[2]);
  }
  if (!f[2]) problem(l, n, "launch needs a block");
  else if (read_dims(l, f[2], "block", st->u.launch.block)) {
    const uint32_t *b = st->u.launch.block;
    uint64_t t = (uint64_t)b[0] * b[1] * b[2];
    if (t > 1024) problem(l, f[2], "block has %llu threads; at most 1024", (unsigned long long)t);
    else if (b[0] > 1024 || b[1] > 1024 || b[2] > 64)
      problem(l, f[2], "block [%u, %u, %u]: x and y are at most 1024 and z at most 64 (CUDA's limits)", b[0], b[1],
              b[2]);
  }
  if (!f[3]) {
    problem(l, n, "launch needs args");
    return 1;
  }
  if (f[3]->type != YAML_SEQUENCE_NODE) {
    problem(l, f[3], "args must be a list");
    return 1;
  }
  if (kidx < 0) return 1;
  const prog_kernel *k = &l->p->kernels[kidx];
  size_t na = (size_t)(f[3]->data.sequence.items.top - f[3]->data.sequence.items.start);
  if (na != k->nparams) {
    problem(l, f[3], "kernel '%s' takes %u arguments (%s), but %zu are given", k->name,
            k->nparams, k->params_text ? k->params_text : "", na);
    return 1;
  }
  st->u.launch.args = calloc(na ? na : 1, sizeof(prog_arg));
  if (!st->u.launch.args) return 1;
  st->u.launch.nargs = (uint32_t)na;
  for (size_t i = 0; i < na; i++) {
    node *a = get(l, f[3]->data.sequence.items.start[i]);
    prog_arg *arg = &st->u.launch.args[i];
    char what[160];
    snprintf(what, sizeof what, "argument %zu of '%s' (%s)", i + 1, k->name,
             prog_type_name(k->params[i]));
    if (!a) continue;
    if (k->params[i] == PT_PTR) {
      arg->is_buffer = true;
      node *bn = a, *off = NULL;
      if (a->type == YAML_MAPPING_NODE) {
        static const char *const bk[] = {"buffer", "offset", NULL};
        node *bv[2];
        read_map(l, a, what, bk, bv);
        bn = bv[0];
        off = bv[1];
        if (!bn) {
          problem(l, a, "%s needs a buffer", what);
          continue;
        }
      } else if (a->type != YAML_SCALAR_NODE) {
        problem(l, a, "%s must be a buffer name or {buffer, offset}", what);
        continue;
      }
      int b = buffer_ref(l, bn, what);
      if (b < 0) continue;
      arg->buffer = (uint32_t)b;
      if (off && parse_expr_node(l, off, depth, "offset", &arg->expr)) {
        int64_t v;
        if (const_int(&arg->expr, &v) &&
            (v < 0 || (uint64_t)v > l->p->buffers[b].count))
          problem(l, off, "offset %lld is outside buffer '%s' (%llu elements)", (long long)v,
                  l->p->buffers[b].name, (unsigned long long)l->p->buffers[b].count);
      }
    } else {
      if (a->type == YAML_SCALAR_NODE && prog_find_buffer(l->p, sval(a)) >= 0) {
        problem(l, a, "%s is a scalar, but '%s' is a buffer", what, sval(a));
        continue;
      }
      if (parse_expr_node(l, a, depth, what, &arg->expr) && arg->expr.constant) {
        prog_value v;
        prog_env env = {{0}};
        if (!prog_expr_eval(&arg->expr, &env, &v) &&
            !value_fits(k->params[i], prog_value_f(v)))
          problem(l, a, "%s: %s does not fit %s", what, sval(a), prog_type_name(k->params[i]));
      }
    }
  }
  return 1;
}

static void check_range(ld *l, node *n, const prog_expr *off, const prog_expr *cnt, uint32_t b,
                        const char *what) {
  int64_t o = 0, c = 0;
  bool ko = !off->n || const_int(off, &o), kc = const_int(cnt, &c);
  if (!ko || !kc) return; /* checked when recorded */
  const prog_buffer *buf = &l->p->buffers[b];
  if (o < 0 || c < 0 || (uint64_t)o + (uint64_t)c > buf->count)
    problem(l, n, "%s of %lld elements at offset %lld runs outside buffer '%s' (%llu elements)",
            what, (long long)c, (long long)o, buf->name, (unsigned long long)buf->count);
}

static uint64_t load_copy(ld *l, node *n, int depth, prog_step *st) {
  static const char *const keys[] = {"from", "to", "count", "from_offset", "to_offset", NULL};
  node *f[5];
  if (!read_map(l, n, "copy", keys, f)) return 1;
  int from = -1, to = -1;
  if (!f[0]) problem(l, n, "copy needs from");
  else from = buffer_ref(l, f[0], "copy from");
  if (!f[1]) problem(l, n, "copy needs to");
  else to = buffer_ref(l, f[1], "copy to");
  bool ok = true;
  if (!f[2]) {
    problem(l, n, "copy needs count");
    ok = false;
  } else ok = parse_expr_node(l, f[2], depth, "count", &st->u.copy.count);
  if (f[3]) ok = parse_expr_node(l, f[3], depth, "from_offset", &st->u.copy.from_offset) && ok;
  if (f[4]) ok = parse_expr_node(l, f[4], depth, "to_offset", &st->u.copy.to_offset) && ok;
  if (from < 0 || to < 0) return 1;
  st->u.copy.from = (uint32_t)from;
  st->u.copy.to = (uint32_t)to;
  if (prog_type_size(l->p->buffers[from].type) != prog_type_size(l->p->buffers[to].type)) {
    problem(l, n, "copy from '%s' (%s) to '%s' (%s): element sizes differ",
            l->p->buffers[from].name, prog_type_name(l->p->buffers[from].type),
            l->p->buffers[to].name, prog_type_name(l->p->buffers[to].type));
    return 1;
  }
  if (ok) {
    check_range(l, n, &st->u.copy.from_offset, &st->u.copy.count, (uint32_t)from, "copy");
    check_range(l, n, &st->u.copy.to_offset, &st->u.copy.count, (uint32_t)to, "copy");
  }
  return 1;
}

static uint64_t load_fill(ld *l, node *n, int depth, prog_step *st) {
  static const char *const keys[] = {"buffer", "value", "count", "offset", NULL};
  node *f[4];
  if (!read_map(l, n, "fill", keys, f)) return 1;
  int b = -1;
  if (!f[0]) problem(l, n, "fill needs buffer");
  else b = buffer_ref(l, f[0], "fill buffer");
  if (!f[1]) problem(l, n, "fill needs value");
  else parse_expr_node(l, f[1], depth, "value", &st->u.fill.value);
  bool ok = true;
  if (f[2]) ok = parse_expr_node(l, f[2], depth, "count", &st->u.fill.count);
  if (f[3]) ok = parse_expr_node(l, f[3], depth, "offset", &st->u.fill.offset) && ok;
  if (b < 0) return 1;
  st->u.fill.buffer = (uint32_t)b;
  if (ok && f[2]) check_range(l, n, &st->u.fill.offset, &st->u.fill.count, (uint32_t)b, "fill");
  return 1;
}

static uint64_t load_loop(ld *l, node *n, int depth, prog_step *st) {
  static const char *const keys[] = {"trips", "while", "max_trips", "body", NULL};
  node *f[4];
  if (!read_map(l, n, "loop", keys, f)) return 1;
  if (depth >= PROG_MAX_DEPTH) {
    problem(l, n, "loops nest too deeply (at most %d)", PROG_MAX_DEPTH);
    return 1;
  }
  int64_t v = 0;
  if (f[0] && f[1]) problem(l, n, "a loop has trips or while, not both");
  else if (!f[0] && !f[1]) problem(l, n, "a loop needs trips (a count) or while (a device flag)");
  else if (f[0]) {
    st->kind = ST_LOOP;
    if (f[2]) problem(l, f[2], "max_trips belongs to while loops");
    if (read_int(l, f[0], "trips", 0, PROG_MAX_NODES, &v)) st->u.loop.trips = (uint32_t)v;
  } else {
    st->kind = ST_WHILE;
    static const char *const wk[] = {"buffer", "index", NULL};
    node *w[2];
    if (read_map(l, f[1], "while", wk, w)) {
      int b = -1;
      if (!w[0]) problem(l, f[1], "while needs a buffer");
      else b = buffer_ref(l, w[0], "while buffer");
      if (b >= 0) {
        st->u.loop.buffer = (uint32_t)b;
        if (l->p->buffers[b].type != PT_I32)
          problem(l, w[0], "while buffer '%s' must be i32, not %s", l->p->buffers[b].name,
                  prog_type_name(l->p->buffers[b].type));
      }
      if (w[1] && read_int(l, w[1], "index", 0, INT64_MAX, &v)) {
        st->u.loop.index = (uint64_t)v;
        if (b >= 0 && (uint64_t)v >= l->p->buffers[b].count)
          problem(l, w[1], "index %lld is outside buffer '%s'", (long long)v,
                  l->p->buffers[b].name);
      }
    }
    if (!f[2]) problem(l, n, "a while loop needs max_trips");
    else if (read_int(l, f[2], "max_trips", 1, INT32_MAX, &v)) st->u.loop.max_trips = (uint32_t)v;
  }
  if (!f[3]) {
    problem(l, n, "a loop needs a body");
    return 1;
  }
  l->loop_is_while[depth] = st->kind == ST_WHILE;
  uint64_t inner = load_steps(l, f[3], depth + 1, &st->u.loop.body, &st->u.loop.nbody);
  if (st->kind == ST_WHILE) return 1 + inner;
  return inner * st->u.loop.trips;
}

static uint64_t load_steps(ld *l, node *n, int depth, prog_step **out, uint32_t *nout) {
  if (n->type != YAML_SEQUENCE_NODE) {
    problem(l, n, "a program must be a list of steps, not %s", kind_name(n));
    return 0;
  }
  size_t count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
  if (count == 0) problem(l, n, "a list of steps must not be empty");
  *out = calloc(count ? count : 1, sizeof(prog_step));
  if (!*out) return 0;
  uint64_t nodes = 0;
  for (size_t i = 0; i < count; i++) {
    node *s = get(l, n->data.sequence.items.start[i]);
    prog_step *st = &(*out)[(*nout)++];
    st->command = l->next_command++;
    if (!s) continue;
    st->loc = loc_of(s);
    if (s->type != YAML_MAPPING_NODE ||
        s->data.mapping.pairs.top - s->data.mapping.pairs.start != 1) {
      problem(l, s, "a step must be a mapping with one key: launch, copy, fill or loop");
      st->kind = ST_FILL; /* empty; never recorded since the load fails */
      continue;
    }
    node *k = get(l, s->data.mapping.pairs.start->key), *v = get(l, s->data.mapping.pairs.start->value);
    const char *kind = k && k->type == YAML_SCALAR_NODE ? sval(k) : "";
    uint64_t c;
    if (strcmp(kind, "launch") == 0) {
      st->kind = ST_LAUNCH;
      c = load_launch(l, v, depth, st);
    } else if (strcmp(kind, "copy") == 0) {
      st->kind = ST_COPY;
      c = load_copy(l, v, depth, st);
    } else if (strcmp(kind, "fill") == 0) {
      st->kind = ST_FILL;
      c = load_fill(l, v, depth, st);
    } else if (strcmp(kind, "loop") == 0) {
      st->kind = ST_LOOP;
      c = load_loop(l, v, depth, st);
    } else {
      st->kind = ST_FILL;
      problem(l, k, "unknown step '%s' (known: launch, copy, fill, loop)", kind);
      c = 0;
    }
    nodes += c;
    if (nodes > PROG_MAX_NODES) nodes = PROG_MAX_NODES + 1;
  }
  return nodes;
}

/* ---- expect ---- */

/* An expected value: a number, or an expression over $job, $run and $device
 * (a constant one is computed now; the others per job, when verifying). */
static bool read_expect(ld *l, node *n, const char *what, double *val, prog_expr *ex) {
  memset(ex, 0, sizeof *ex);
  if (!is_scalar(l, n, what)) return false;
  const char *s = sval(n);
  char *end;
  errno = 0;
  double d = strtod(s, &end);
  if (*s && *end == '\0' && errno == 0) {
    *val = d;
    return true;
  }
  if (!parse_expr_node(l, n, 0, what, ex)) return false;
  if (ex->constant) {
    prog_value v;
    prog_env env = {{0}};
    prog_expr_eval(ex, &env, &v); /* checked by parse_expr_node */
    *val = prog_value_f(v);
    prog_expr_free(ex);
  }
  return true;
}

static void load_expect(ld *l, node *n) {
  if (n->type != YAML_MAPPING_NODE) {
    problem(l, n, "expect must be a mapping of buffer names");
    return;
  }
  size_t count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
  l->p->expects = calloc(count ? 2 * count : 1, sizeof(prog_expect));
  if (!l->p->expects) return;
  for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
    node *k = get(l, pr->key), *v = get(l, pr->value);
    if (!k || !v) continue;
    int b = buffer_ref(l, k, "expect");
    if (b < 0) continue;
    const prog_buffer *buf = &l->p->buffers[b];
    static const char *const keys[] = {"values", "at", "sum", "tol", "file", NULL};
    node *f[5];
    char what[160];
    snprintf(what, sizeof what, "expect for '%s'", buf->name);
    if (!read_map(l, v, what, keys, f)) continue;
    int given = !!f[0] + !!f[1] + !!f[2] + !!f[4];
    if (given == 0) {
      problem(l, v, "%s needs one of values, at, sum, file", what);
      continue;
    }
    if (!!f[0] + !!f[1] + !!f[4] > 1) {
      problem(l, v, "%s takes one of values, at, file (sum may go with any)", what);
      continue;
    }
    double tol = prog_type_is_float(buf->type) ? 1e-5 : 0;
    if (f[3] && read_num(l, f[3], "tol", &tol) && tol < 0) problem(l, f[3], "tol must be >= 0");
    /* one check per kind given, all on this buffer */
    for (int kind = 0; kind < 4; kind++) {
      node *fk = kind == 0 ? f[2] : kind == 1 ? f[0] : kind == 2 ? f[1] : f[4];
      if (!fk) continue;
      prog_expect *e = &l->p->expects[l->p->nexpects++];
      e->buffer = (uint32_t)b;
      e->loc = loc_of(k);
      e->tol = tol;
      if (kind == 0) {
        e->kind = EXP_SUM;
        read_expect(l, fk, "sum", &e->sum, &e->sum_expr);
      } else if (kind == 1) {
        e->kind = EXP_VALUES;
        if (fk->type != YAML_SEQUENCE_NODE) {
          problem(l, fk, "values must be a list of numbers");
          continue;
        }
        size_t nv = (size_t)(fk->data.sequence.items.top - fk->data.sequence.items.start);
        if (nv > buf->count) {
          problem(l, fk, "buffer '%s' has %llu elements but values lists %zu", buf->name,
                  (unsigned long long)buf->count, nv);
          continue;
        }
        e->values = calloc(nv ? nv : 1, sizeof(double));
        e->exprs = calloc(nv ? nv : 1, sizeof(prog_expr));
        for (size_t i = 0; e->values && e->exprs && i < nv; i++) {
          node *x = get(l, fk->data.sequence.items.start[i]);
          if (x) read_expect(l, x, "a value", &e->values[e->n], &e->exprs[e->n]);
          e->n++;
        }
      } else if (kind == 2) {
        e->kind = EXP_AT;
        if (fk->type != YAML_MAPPING_NODE) {
          problem(l, fk, "at must be a mapping of index: value");
          continue;
        }
        size_t nv = (size_t)(fk->data.mapping.pairs.top - fk->data.mapping.pairs.start);
        e->values = calloc(nv ? nv : 1, sizeof(double));
        e->exprs = calloc(nv ? nv : 1, sizeof(prog_expr));
        e->index = calloc(nv ? nv : 1, sizeof(uint64_t));
        for (yaml_node_pair_t *q = fk->data.mapping.pairs.start;
             e->values && e->exprs && e->index && q < fk->data.mapping.pairs.top; q++) {
          node *ik = get(l, q->key), *iv = get(l, q->value);
          int64_t idx;
          if (!ik || !iv || !read_int(l, ik, "an index", 0, INT64_MAX, &idx)) continue;
          if ((uint64_t)idx >= buf->count) {
            problem(l, ik, "index %lld is outside buffer '%s' (%llu elements)", (long long)idx, buf->name,
                    (unsigned long long)buf->count);
            continue;
          }
          if (read_expect(l, iv, "a value", &e->values[e->n], &e->exprs[e->n])) e->index[e->n++] = (uint64_t)idx;
        }
      } else {
        e->kind = EXP_VALUES;
        const char *rel = read_str(l, fk, "expect file");
        if (!rel) continue;
        char *path = fs_join_rel(l->file, rel);
        char *data = NULL;
        size_t len = 0;
        schedrun_error_t er = {0};
        size_t es = prog_type_size(buf->type);
        if (!path || fs_read_input(path, PROG_MAX_BUFFER_BYTES, &data, &len, &er) != SCHEDRUN_OK)
          problem(l, fk, "cannot read expect file '%s': %s", rel, er.message ? er.message : "");
        else if (len != buf->count * es)
          problem(l, fk, "expect file '%s' has %zu bytes; buffer '%s' holds %llu", rel, len, buf->name,
                  (unsigned long long)(buf->count * es));
        else if ((e->values = calloc(buf->count, sizeof(double)))) {
          for (uint64_t i = 0; i < buf->count; i++) e->values[i] = prog_element(buf->type, data, i);
          e->n = buf->count;
        }
        schedrun_error_clear(&er);
        free(data);
        free(path);
      }
    }
  }
}

/* ---- top level ---- */

static bool devices_valid(const char *s) {
  if (!strcmp(s, "auto") || !strcmp(s, "host") || !strcmp(s, "cuda") || !strcmp(s, "all"))
    return true;
  if (!strncmp(s, "host:", 5)) {
    char *end;
    long n = strtol(s + 5, &end, 10);
    return s[5] && *end == '\0' && n >= 1 && n <= SCHEDRUN_MAX_DEVICES;
  }
  if (!strncmp(s, "cuda:", 5)) {
    const char *p = s + 5;
    if (!*p) return false;
    while (*p) {
      char *end;
      long n = strtol(p, &end, 10);
      if (end == p || n < 0 || n >= SCHEDRUN_MAX_DEVICES) return false;
      p = end;
      if (*p == ',') p++;
      else if (*p) return false;
    }
    return true;
  }
  return false;
}

static void load_doc(ld *l, node *root) {
  static const char *const keys[] = {"version", "name",    "devices", "repeat", "buffer_sets", "jobs",
                                     "kernels", "buffers", "program", "expect", NULL};
  node *f[10];
  prog_program *p = l->p;
  if (!read_map(l, root, "the config", keys, f)) return;
  int64_t v;
  if (!f[0]) problem(l, root, "version is missing (this format is version 1)");
  else if (read_int(l, f[0], "version", 0, INT32_MAX, &v) && v != 1)
    problem(l, f[0], "version %lld is not supported (this is version 1)", (long long)v);
  if (f[1] && read_str(l, f[1], "name")) p->name = xstrdup(sval(f[1]));
  p->devices = xstrdup("auto");
  if (f[2] && read_str(l, f[2], "devices")) {
    if (!devices_valid(sval(f[2])))
      problem(l, f[2], "devices '%s' is not one of auto, host, host:N, cuda, cuda:I,J, all",
              sval(f[2]));
    else {
      free(p->devices);
      p->devices = xstrdup(sval(f[2]));
    }
  }
  p->repeat = p->buffer_sets = p->jobs = 1;
  if (f[3] && read_int(l, f[3], "repeat", 1, 1000000, &v)) p->repeat = (int)v;
  if (f[4] && read_int(l, f[4], "buffer_sets", 1, 64, &v)) p->buffer_sets = (int)v;
  if (f[5] && read_int(l, f[5], "jobs", 1, 1000000, &v)) p->jobs = (int)v;
  if (f[6]) {
    load_kernels(l, f[6]);
    uint64_t sources = 0;
    for (uint32_t i = 0; i < p->nkernels; i++) sources += p->kernels[i].source ? strlen(p->kernels[i].source) : 0;
    if (sources > PROG_MAX_SOURCES_BYTES)
      problem(l, f[6], "the kernels have %llu bytes of source in all; at most %u MiB", (unsigned long long)sources,
              PROG_MAX_SOURCES_BYTES >> 20);
  }
  if (f[7]) load_buffers(l, f[7]);
  if (!f[8]) problem(l, root, "program is missing (a list of steps)");
  else {
    uint64_t nodes = load_steps(l, f[8], 0, &p->steps, &p->nsteps);
    if (nodes > PROG_MAX_NODES)
      problem(l, f[8], "the program unrolls to more than %u recorded nodes", PROG_MAX_NODES);
  }
  p->ncommands = l->next_command;
  if (f[9]) load_expect(l, f[9]);
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

int prog_load_string(const char *text, size_t len, const char *origin, prog_program **out,
                     schedrun_error_t *err) {
  *out = NULL;
  ld l;
  memset(&l, 0, sizeof l);
  l.file = origin ? origin : "<string>";
  l.err = err;
  if (err) schedrun_error_clear(err);
  l.p = calloc(1, sizeof(prog_program));
  if (!l.p) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  l.p->path = xstrdup(l.file);

  size_t dl, dc;
  if (prog_yaml_depth_check(text, len, PROG_MAX_YAML_DEPTH, &dl, &dc) != 0) {
    err_set(err, SCHEDRUN_ECONFIG, "%s:%zu:%zu: collections nest more than %d deep", l.file, dl, dc,
            PROG_MAX_YAML_DEPTH);
    prog_free(l.p);
    return SCHEDRUN_ECONFIG;
  }
  yaml_parser_t parser;
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &l.doc)) {
    l.problems++;
    err_append(err, SCHEDRUN_ECONFIG, "%s:%zu:%zu: %s%s%s", l.file, parser.problem_mark.line + 1,
               parser.problem_mark.column + 1, parser.context ? parser.context : "",
               parser.context ? ": " : "", parser.problem ? parser.problem : "invalid YAML");
    yaml_parser_delete(&parser);
    prog_free(l.p);
    return SCHEDRUN_ECONFIG;
  }
  yaml_parser_delete(&parser);
  node *root = yaml_document_get_root_node(&l.doc);
  if (!root) problem(&l, NULL, "the config is empty");
  else load_doc(&l, root);
  yaml_document_delete(&l.doc);
  if (!l.p->name) {
    const char *b = base_name(l.file);
    const char *dot = strrchr(b, '.');
    l.p->name = dot && dot != b ? xstrndup(b, (size_t)(dot - b)) : xstrdup(b);
  }
  if (l.problems > MAX_PROBLEMS)
    err_append(err, SCHEDRUN_ECONFIG, "%s: %d more problems not shown", l.file,
               l.problems - MAX_PROBLEMS);
  if (l.problems) {
    prog_free(l.p);
    return SCHEDRUN_ECONFIG;
  }
  *out = l.p;
  return SCHEDRUN_OK;
}

int prog_load_file(const char *path, prog_program **out, schedrun_error_t *err) {
  *out = NULL;
  char *data;
  size_t len;
  schedrun_error_t e = {0};
  if (fs_read_input(path, PROG_MAX_CONFIG_BYTES, &data, &len, &e) != SCHEDRUN_OK) {
    err_set(err, SCHEDRUN_ECONFIG, "%s", e.message);
    schedrun_error_clear(&e);
    return SCHEDRUN_ECONFIG;
  }
  int rc = prog_load_string(data, len, path, out, err);
  free(data);
  return rc;
}
