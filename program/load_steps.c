/*
 * The config loader's program steps: launch, copy, fill and the loops, with
 * their expressions, ranges and CUDA's grid and block limits. Every command
 * gets its pre-order index, the execution-context key's `command`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/load_util.h"

static bool read_dims(ld *l, node *n, const char *what, uint32_t out[3]) {
  out[0] = out[1] = out[2] = 1;
  int64_t v;
  if (n->type == YAML_SCALAR_NODE) {
    if (!ld_read_int(l, n, what, 1, INT32_MAX, &v)) return false;
    out[0] = (uint32_t)v;
    return true;
  }
  if (n->type != YAML_SEQUENCE_NODE) {
    ld_problem(l, n, "%s must be an integer or a list of up to 3", what);
    return false;
  }
  size_t k = ld_items(n);
  if (k < 1 || k > 3) {
    ld_problem(l, n, "%s must list 1 to 3 sizes, not %zu", what, k);
    return false;
  }
  bool ok = true;
  for (size_t i = 0; i < k; i++) {
    node *e = ld_get(l, n->data.sequence.items.start[i]);
    if (e && ld_read_int(l, e, what, 1, INT32_MAX, &v)) out[i] = (uint32_t)v;
    else ok = false;
  }
  return ok;
}

bool ld_read_block(ld *l, node *n, const char *what, uint32_t b[3]) {
  if (!read_dims(l, n, what, b)) return false;
  uint64_t t = (uint64_t)b[0] * b[1] * b[2];
  if (t > 1024) ld_problem(l, n, "%s has %llu threads; at most 1024", what, (unsigned long long)t);
  else if (b[0] > 1024 || b[1] > 1024 || b[2] > 64)
    ld_problem(l, n, "%s [%u, %u, %u]: x and y are at most 1024 and z at most 64 (CUDA's limits)", what, b[0], b[1],
               b[2]);
  else return true;
  return false;
}

static uint64_t load_launch(ld *l, node *n, int depth, prog_step *st) {
  static const char *const keys[] = {"kernel", "grid", "block", "args", "shared", "autotune", NULL};
  node *f[6];
  if (!ld_read_map(l, n, "launch", keys, f)) return 1;
  int kidx = -1;
  if (!f[0]) ld_problem(l, n, "launch needs a kernel");
  else {
    const char *kn = ld_read_str(l, f[0], "kernel");
    for (uint32_t i = 0; kn && i < l->p->nkernels; i++)
      if (strcmp(l->p->kernels[i].name, kn) == 0) kidx = (int)i;
    if (kn && kidx < 0) ld_problem(l, f[0], "no kernel named '%s'", kn);
  }
  st->u.launch.kernel = kidx < 0 ? 0 : (uint32_t)kidx;
  if (f[5] && (f[1] || f[2]))
    ld_problem(l, f[1] ? f[1] : f[2], "an autotuned launch takes its grid and its block candidates from autotune "
                                      "(autotune: {block: [...], grid: ...})");
  else if (f[5]) st->u.launch.grid[0] = st->u.launch.grid[1] = st->u.launch.grid[2] = 1; /* chosen when recorded */
  else if (!f[1]) ld_problem(l, n, "launch needs a grid");
  else if (read_dims(l, f[1], "grid", st->u.launch.grid)) {
    const uint32_t *g = st->u.launch.grid;
    if (g[0] > PROG_GRID_MAX_X || g[1] > PROG_GRID_MAX_YZ || g[2] > PROG_GRID_MAX_YZ)
      ld_problem(l, f[1], "grid [%u, %u, %u]: x is at most 2147483647, y and z at most 65535 (CUDA's limits)", g[0], g[1],
              g[2]);
  }
  if (f[5]) st->u.launch.block[0] = st->u.launch.block[1] = st->u.launch.block[2] = 1; /* chosen when recorded */
  else if (!f[2]) ld_problem(l, n, "launch needs a block");
  else ld_read_block(l, f[2], "block", st->u.launch.block);
  int64_t shared = 0;
  if (f[4]) ld_read_int(l, f[4], "shared (bytes of dynamic shared memory per block, at most 48 KiB)", 0,
                        PROG_MAX_SHARED, &shared);
  st->u.launch.shared = (uint32_t)shared;
  if (!f[3]) {
    ld_problem(l, n, "launch needs args");
    return 1;
  }
  if (f[3]->type != YAML_SEQUENCE_NODE) {
    ld_problem(l, f[3], "args must be a list");
    return 1;
  }
  if (kidx < 0) return 1;
  const prog_kernel *k = &l->p->kernels[kidx];
  size_t na = ld_items(f[3]);
  if (na != k->nparams) {
    ld_problem(l, f[3], "kernel '%s' takes %u arguments (%s), but %zu are given", k->name,
            k->nparams, k->params_text ? k->params_text : "", na);
    return 1;
  }
  st->u.launch.args = ld_calloc(l, f[3], na, sizeof(prog_arg), "the launch's args");
  if (!st->u.launch.args) return 1;
  st->u.launch.nargs = (uint32_t)na;
  for (size_t i = 0; i < na; i++) {
    node *a = ld_get(l, f[3]->data.sequence.items.start[i]);
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
        ld_read_map(l, a, what, bk, bv);
        bn = bv[0];
        off = bv[1];
        if (!bn) {
          ld_problem(l, a, "%s needs a buffer", what);
          continue;
        }
      } else if (a->type != YAML_SCALAR_NODE) {
        ld_problem(l, a, "%s must be a buffer name or {buffer, offset}", what);
        continue;
      }
      int b = ld_buffer_ref(l, bn, what);
      if (b < 0) continue;
      arg->buffer = (uint32_t)b;
      if (off && ld_parse_expr_node(l, off, depth, "offset", &arg->expr)) {
        int64_t v;
        if (ld_const_int(&arg->expr, &v) &&
            (v < 0 || (uint64_t)v >= l->p->buffers[b].count))
          ld_problem(l, off, "offset %lld is outside buffer '%s' (%llu elements; a buffer argument points at one of them)",
                     (long long)v, l->p->buffers[b].name, (unsigned long long)l->p->buffers[b].count);
      }
    } else {
      if (a->type == YAML_SCALAR_NODE && prog_find_buffer(l->p, ld_sval(a)) >= 0) {
        ld_problem(l, a, "%s is a scalar, but '%s' is a buffer", what, ld_sval(a));
        continue;
      }
      l->u64_literal_ok = k->params[i] == PT_U64;
      bool parsed = ld_parse_expr_node(l, a, depth, what, &arg->expr);
      l->u64_literal_ok = false;
      if (parsed && arg->expr.constant) {
        prog_value v;
        prog_env env = {{0}};
        ld_num num;
        if (!prog_expr_eval(&arg->expr, &env, &v) &&
            (num = ld_num_of(v, arg->expr.u64_literal), !ld_num_fits(k->params[i], &num)))
          ld_problem(l, a, "%s: %s does not fit %s", what, ld_sval(a), prog_type_name(k->params[i]));
      }
    }
  }
  if (f[5]) ld_load_tune(l, f[5], depth, k, st);
  /* (k may have moved: autotune's variants are appended to the kernels) */
  prog_kernel *kk = &l->p->kernels[kidx];
  if (st->u.launch.tune && st->u.launch.tune->constants[0]) {
    kk->variants_only = !kk->launched_plain;
  } else {
    kk->launched_plain = true;
    kk->variants_only = false;
  }
  return 1;
}

static void check_range(ld *l, node *n, const prog_expr *off, const prog_expr *cnt, uint32_t b,
                        const char *what) {
  int64_t o = 0, c = 0;
  bool ko = !off->n || ld_const_int(off, &o), kc = ld_const_int(cnt, &c);
  if (!ko || !kc) return; /* checked when recorded */
  const prog_buffer *buf = &l->p->buffers[b];
  if (c < 0 || o < 0) {
    ld_problem(l, n, "%s %s must be >= 0, not %lld", what, c < 0 ? "count" : "offset", (long long)(c < 0 ? c : o));
    return;
  }
  if ((uint64_t)o + (uint64_t)c > buf->count)
    ld_problem(l, n, "%s of %lld elements at offset %lld runs outside buffer '%s' (%llu elements)",
            what, (long long)c, (long long)o, buf->name, (unsigned long long)buf->count);
}

static uint64_t load_copy(ld *l, node *n, int depth, prog_step *st) {
  static const char *const keys[] = {"from", "to", "count", "from_offset", "to_offset", NULL};
  node *f[5];
  if (!ld_read_map(l, n, "copy", keys, f)) return 1;
  int from = -1, to = -1;
  if (!f[0]) ld_problem(l, n, "copy needs from");
  else from = ld_buffer_ref(l, f[0], "copy from");
  if (!f[1]) ld_problem(l, n, "copy needs to");
  else to = ld_buffer_ref(l, f[1], "copy to");
  bool ok = true;
  if (!f[2]) {
    ld_problem(l, n, "copy needs count");
    ok = false;
  } else ok = ld_parse_expr_node(l, f[2], depth, "count", &st->u.copy.count);
  if (f[3]) ok = ld_parse_expr_node(l, f[3], depth, "from_offset", &st->u.copy.from_offset) && ok;
  if (f[4]) ok = ld_parse_expr_node(l, f[4], depth, "to_offset", &st->u.copy.to_offset) && ok;
  if (from < 0 || to < 0) return 1;
  st->u.copy.from = (uint32_t)from;
  st->u.copy.to = (uint32_t)to;
  if (prog_type_size(l->p->buffers[from].type) != prog_type_size(l->p->buffers[to].type)) {
    ld_problem(l, n, "copy from '%s' (%s) to '%s' (%s): element sizes differ",
            l->p->buffers[from].name, prog_type_name(l->p->buffers[from].type),
            l->p->buffers[to].name, prog_type_name(l->p->buffers[to].type));
    return 1;
  }
  if (ok) {
    check_range(l, n, &st->u.copy.from_offset, &st->u.copy.count, (uint32_t)from, "copy");
    check_range(l, n, &st->u.copy.to_offset, &st->u.copy.count, (uint32_t)to, "copy");
    /* within one buffer, ranges known now must not overlap: a device copies
     * only between ranges that do not (the rest is checked when recorded) */
    int64_t fo = 0, tof = 0, c = 0;
    if (from == to && (!st->u.copy.from_offset.n || ld_const_int(&st->u.copy.from_offset, &fo)) &&
        (!st->u.copy.to_offset.n || ld_const_int(&st->u.copy.to_offset, &tof)) && ld_const_int(&st->u.copy.count, &c) &&
        c > 0 && fo < tof + c && tof < fo + c)
      ld_problem(l, n, "copy within buffer '%s': elements [%lld, %lld) and [%lld, %lld) overlap (a device copies "
                 "only between ranges that do not)", l->p->buffers[from].name, (long long)fo, (long long)(fo + c),
                 (long long)tof, (long long)(tof + c));
  }
  return 1;
}

static uint64_t load_fill(ld *l, node *n, int depth, prog_step *st) {
  static const char *const keys[] = {"buffer", "value", "count", "offset", NULL};
  node *f[4];
  if (!ld_read_map(l, n, "fill", keys, f)) return 1;
  int b = -1;
  if (!f[0]) ld_problem(l, n, "fill needs buffer");
  else b = ld_buffer_ref(l, f[0], "fill buffer");
  if (!f[1]) ld_problem(l, n, "fill needs value");
  else ld_parse_expr_node(l, f[1], depth, "value", &st->u.fill.value);
  bool ok = true;
  if (f[2]) ok = ld_parse_expr_node(l, f[2], depth, "count", &st->u.fill.count);
  if (f[3]) ok = ld_parse_expr_node(l, f[3], depth, "offset", &st->u.fill.offset) && ok;
  if (b < 0) return 1;
  st->u.fill.buffer = (uint32_t)b;
  if (ok && f[2]) check_range(l, n, &st->u.fill.offset, &st->u.fill.count, (uint32_t)b, "fill");
  return 1;
}

static uint64_t load_loop(ld *l, node *n, int depth, prog_step *st) {
  static const char *const keys[] = {"trips", "while", "max_trips", "body", NULL};
  node *f[4];
  if (!ld_read_map(l, n, "loop", keys, f)) return 1;
  if (depth >= PROG_MAX_DEPTH) {
    ld_problem(l, n, "loops nest too deeply (at most %d)", PROG_MAX_DEPTH);
    return 1;
  }
  int64_t v = 0;
  if (f[0] && f[1]) ld_problem(l, n, "a loop has trips or while, not both");
  else if (!f[0] && !f[1]) ld_problem(l, n, "a loop needs trips (a count) or while (a device flag)");
  else if (f[0]) {
    st->kind = ST_LOOP;
    if (f[2]) ld_problem(l, f[2], "max_trips belongs to while loops");
    if (ld_read_int(l, f[0], "trips", 0, PROG_MAX_NODES, &v)) st->u.loop.trips = (uint32_t)v;
  } else {
    st->kind = ST_WHILE;
    static const char *const wk[] = {"buffer", "index", NULL};
    node *w[2];
    if (ld_read_map(l, f[1], "while", wk, w)) {
      int b = -1;
      if (!w[0]) ld_problem(l, f[1], "while needs a buffer");
      else b = ld_buffer_ref(l, w[0], "while buffer");
      if (b >= 0) {
        st->u.loop.buffer = (uint32_t)b;
        if (l->p->buffers[b].type != PT_I32)
          ld_problem(l, w[0], "while buffer '%s' must be i32, not %s", l->p->buffers[b].name,
                  prog_type_name(l->p->buffers[b].type));
      }
      if (w[1] && ld_read_int(l, w[1], "index", 0, INT64_MAX, &v)) {
        st->u.loop.index = (uint64_t)v;
        if (b >= 0 && (uint64_t)v >= l->p->buffers[b].count)
          ld_problem(l, w[1], "index %lld is outside buffer '%s'", (long long)v,
                  l->p->buffers[b].name);
      }
    }
    if (!f[2]) ld_problem(l, n, "a while loop needs max_trips");
    else if (ld_read_int(l, f[2], "max_trips", 1, INT32_MAX, &v)) st->u.loop.max_trips = (uint32_t)v;
  }
  if (!f[3]) {
    ld_problem(l, n, "a loop needs a body");
    return 1;
  }
  l->loop_is_while[depth] = st->kind == ST_WHILE;
  uint64_t inner = ld_load_steps(l, f[3], depth + 1, &st->u.loop.body, &st->u.loop.nbody);
  if (st->kind == ST_WHILE) return 1 + inner;
  return inner * st->u.loop.trips;
}

/* `host: {name: N, task: K}`: a C function between device steps. Only a
 * builder's document can name one (src->hostfns); only at the top level,
 * since a recording runs its device steps between host steps as one
 * submission each. */
static uint64_t load_host(ld *l, node *n, int depth, prog_step *st) {
  static const char *const keys[] = {"name", "task", NULL};
  node *f[2] = {0};
  if (!ld_read_map(l, n, "host", keys, f)) return 0;
  if (!l->src || !l->src->hostfns) {
    ld_problem(l, n, "host steps are for programs made with the builder (schedrun_builder_host): a config cannot "
                     "name a C function");
    return 0;
  }
  if (depth > 0) {
    ld_problem(l, n, "a host step runs between the program's top-level steps, not inside a loop");
    return 0;
  }
  const char *name = f[0] ? ld_read_str(l, f[0], "host step name") : NULL;
  int64_t k = -1;
  if (!f[1] || !ld_read_int(l, f[1], "host task", 0, (int64_t)l->src->nhostfns - 1, &k) || !name) {
    if (!f[1] || !name) ld_problem(l, n, "a host step needs a name and a task");
    return 0;
  }
  prog_program *p = l->p;
  if (p->nhosts == PROG_MAX_HOST_STEPS) {
    ld_problem(l, n, "more than %d host steps", PROG_MAX_HOST_STEPS);
    return 0;
  }
  prog_host *v = realloc(p->hosts, (p->nhosts + 1) * sizeof *v);
  char *copy = xstrdup(name);
  if (!v || !copy) {
    if (v) p->hosts = v;
    free(copy);
    l->out_of_memory = true;
    ld_problem(l, n, "out of memory for a host step");
    return 0;
  }
  p->hosts = v;
  p->hosts[p->nhosts] = (prog_host){copy, l->src->hostfns[k].fn, l->src->hostfns[k].user};
  st->kind = ST_HOST;
  st->u.host.index = p->nhosts++;
  return 0;
}

uint64_t ld_load_steps(ld *l, node *n, int depth, prog_step **out, uint32_t *nout) {
  if (n->type != YAML_SEQUENCE_NODE) {
    ld_problem(l, n, "a program must be a list of steps, not %s", ld_kind_name(n));
    return 0;
  }
  size_t count = ld_items(n);
  if (count == 0) ld_problem(l, n, "a list of steps must not be empty");
  if (l->too_many_steps) return PROG_MAX_NODES + 1;
  /* counted before anything is loaded: a body that aliases itself over and
   * over stops here at once, not once the whole tree has been built */
  if ((l->steps += count) > PROG_MAX_STEPS) {
    l->too_many_steps = true;
    ld_problem(l, n, "the program has more than %u steps once YAML aliases are expanded (each use of an alias "
                     "counts); write a loop instead of repeating steps",
               PROG_MAX_STEPS);
    return PROG_MAX_NODES + 1;
  }
  *out = ld_calloc(l, n, count, sizeof(prog_step), "the steps");
  if (!*out) return 0;
  uint64_t nodes = 0;
  for (size_t i = 0; i < count; i++) {
    node *s = ld_get(l, n->data.sequence.items.start[i]);
    prog_step *st = &(*out)[(*nout)++];
    st->command = l->next_command++;
    if (!s) continue;
    st->loc = ld_loc_of(s);
    if (s->type != YAML_MAPPING_NODE ||
        s->data.mapping.pairs.top - s->data.mapping.pairs.start != 1) {
      ld_problem(l, s, "a step must be a mapping with one key: launch, copy, fill or loop");
      st->kind = ST_FILL; /* empty; never recorded since the load fails */
      continue;
    }
    node *k = ld_get(l, s->data.mapping.pairs.start->key), *v = ld_get(l, s->data.mapping.pairs.start->value);
    const char *kind = k && k->type == YAML_SCALAR_NODE ? ld_sval(k) : "";
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
    } else if (strcmp(kind, "host") == 0) {
      st->kind = ST_FILL; /* empty, unless it loads */
      c = load_host(l, v, depth, st);
    } else {
      st->kind = ST_FILL;
      ld_problem(l, k, "unknown step '%s' (known: launch, copy, fill, loop)", kind);
      c = 0;
    }
    nodes += c;
    if (nodes > PROG_MAX_NODES) nodes = PROG_MAX_NODES + 1;
  }
  return nodes;
}

