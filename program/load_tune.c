/*
 * A launch's `autotune:` map: the candidate blocks, the grid (expressions
 * that may read a candidate's x size as $block) and the key, the scalar
 * arguments whose values the choice depends on, named as the kernel's source
 * names its parameters; and `constants`, candidate values of named
 * constants of the kernel's source. The candidates are every block with
 * every combination of the constants' values: each combination is a kernel
 * of the program of its own (a variant, "work[TILE=8]", its source behind
 * `#define TILE 8`, compiled with the others), and the grid, read once per
 * combination, sees each constant's value as $NAME. The choice itself is
 * made when the launch is recorded (actors/record_tune.c).
 */
#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/load_util.h"

#define NAME_MAX_CHARS 64

static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The name a parameter's declaration text [s, e) gives it: its last
 * identifier, before any default value and array bounds; "" when none. */
static void param_name(const char *s, const char *e, char out[NAME_MAX_CHARS]) {
  out[0] = '\0';
  const char *eq = memchr(s, '=', (size_t)(e - s));
  if (eq) e = eq;
  while (e > s && isspace((unsigned char)e[-1])) e--;
  while (e > s && e[-1] == ']') { /* array bounds: float x[] */
    while (e > s && e[-1] != '[') e--;
    if (e > s) e--;
    while (e > s && isspace((unsigned char)e[-1])) e--;
  }
  const char *b = e;
  while (b > s && ident_char(b[-1])) b--;
  size_t n = (size_t)(e - b);
  if (n == 0 || n >= NAME_MAX_CHARS || isdigit((unsigned char)*b)) return;
  memcpy(out, b, n);
  out[n] = '\0';
}

/* The kernel's parameter names, read from its source: the parameter list
 * after its entry's name, the first such list with k->nparams entries.
 * Returns how many (k->nparams), or 0 when there is none. */
static uint32_t param_names(const prog_kernel *k, char names[][NAME_MAX_CHARS]) {
  const char *src = k->source, *entry = k->entry ? k->entry : k->name;
  size_t el = strlen(entry);
  if (!src || el == 0) return 0;
  for (const char *p = strstr(src, entry); p; p = strstr(p + 1, entry)) {
    if ((p > src && ident_char(p[-1])) || ident_char(p[el])) continue;
    const char *q = p + el;
    while (isspace((unsigned char)*q)) q++;
    if (*q != '(') continue;
    const char *start = ++q;
    uint32_t n = 0;
    int depth = 0;
    bool whole = false;
    for (; *q && !whole; q++) {
      char c = *q;
      if (c == '(' || c == '[' || c == '<' || c == '{') depth++;
      else if (depth > 0 && (c == ')' || c == ']' || c == '>' || c == '}')) depth--;
      else if (depth == 0 && (c == ',' || c == ')')) {
        if (n == PROG_MAX_PARAMS) break;
        param_name(start, q, names[n++]);
        start = q + 1;
        whole = c == ')';
      }
    }
    if (whole && n == k->nparams) return n;
  }
  return 0;
}

static bool load_blocks(ld *l, node *n, node *f, uint32_t blocks[][3], uint32_t *nblocks, strbuf *spec) {
  if (!f) {
    ld_problem(l, n, "autotune needs block: a list of candidate blocks");
    return false;
  }
  if (f->type != YAML_SEQUENCE_NODE) {
    ld_problem(l, f, "autotune block must be a list of candidate blocks (each an integer or a list of up to 3)");
    return false;
  }
  size_t nb = ld_items(f);
  if (nb == 0) {
    ld_problem(l, f, "autotune block lists no candidates");
    return false;
  }
  if (nb > PROG_MAX_CANDIDATES) {
    ld_problem(l, f, "autotune block lists %zu candidates; at most %d", nb, PROG_MAX_CANDIDATES);
    return false;
  }
  bool ok = true;
  sb_adds(spec, "block");
  for (size_t i = 0; i < nb; i++) {
    node *c = ld_get(l, f->data.sequence.items.start[i]);
    char what[48];
    snprintf(what, sizeof what, "autotune candidate %zu", i + 1);
    uint32_t *b = blocks[i];
    if (!c || !ld_read_block(l, c, what, b)) {
      ok = false;
      continue;
    }
    for (size_t j = 0; j < i; j++)
      if (!memcmp(blocks[j], b, sizeof blocks[j])) {
        ld_problem(l, c, "%s is candidate %zu again ([%u, %u, %u])", what, j + 1, b[0], b[1], b[2]);
        ok = false;
      }
    sb_addf(spec, " %u,%u,%u", b[0], b[1], b[2]);
  }
  *nblocks = (uint32_t)nb;
  return ok;
}

/* The constants' candidate values (`constants: {TILE: [8, 16]}`). */
typedef struct tune_constants {
  char names[PROG_MAX_CONSTANTS][NAME_MAX_CHARS];
  int64_t values[PROG_MAX_CONSTANTS][PROG_MAX_CANDIDATES];
  uint32_t nvalues[PROG_MAX_CONSTANTS];
  uint32_t n;
  uint32_t ncombos; /* the product of the nvalues */
} tune_constants;

static bool is_ident(const char *s) {
  if (!*s || isdigit((unsigned char)*s)) return false;
  for (; *s; s++)
    if (!ident_char(*s)) return false;
  return true;
}

static bool load_constants(ld *l, node *f, tune_constants *tc, strbuf *spec) {
  tc->ncombos = 1;
  if (!f) return true;
  if (f->type != YAML_MAPPING_NODE) {
    ld_problem(l, f, "autotune constants must be a mapping of constant names to lists of candidate values");
    return false;
  }
  bool ok = true;
  for (yaml_node_pair_t *pr = f->data.mapping.pairs.start; pr < f->data.mapping.pairs.top; pr++) {
    node *k = ld_get(l, pr->key), *v = ld_get(l, pr->value);
    const char *name = k ? ld_read_str(l, k, "an autotune constant's name") : NULL;
    if (!name || !v) {
      ok = false;
      continue;
    }
    if (!is_ident(name) || strlen(name) >= NAME_MAX_CHARS || !strcmp(name, "block")) {
      ld_problem(l, k, "autotune constant '%s' is not a name a kernel's source can use (a C identifier, not 'block')",
                 name);
      ok = false;
      continue;
    }
    if (tc->n == PROG_MAX_CONSTANTS) {
      ld_problem(l, k, "autotune names more than %d constants", PROG_MAX_CONSTANTS);
      return false;
    }
    uint32_t c = tc->n;
    size_t nv = v->type == YAML_SEQUENCE_NODE ? ld_items(v) : 0;
    if (v->type != YAML_SEQUENCE_NODE || nv == 0 || nv > PROG_MAX_CANDIDATES) {
      ld_problem(l, v, "autotune constant '%s' needs a list of 1 to %d candidate values", name, PROG_MAX_CANDIDATES);
      ok = false;
      continue;
    }
    snprintf(tc->names[c], NAME_MAX_CHARS, "%s", name);
    sb_addf(spec, " constant %s", name);
    for (size_t i = 0; i < nv; i++) {
      node *x = ld_get(l, v->data.sequence.items.start[i]);
      int64_t val;
      char what[96];
      snprintf(what, sizeof what, "autotune constant '%s'", name);
      if (!x || !ld_read_int(l, x, what, INT32_MIN, INT32_MAX, &val)) {
        ok = false;
        continue;
      }
      for (size_t j = 0; j < tc->nvalues[c]; j++)
        if (tc->values[c][j] == val) {
          ld_problem(l, x, "autotune constant '%s' lists %lld twice", name, (long long)val);
          ok = false;
        }
      tc->values[c][tc->nvalues[c]++] = val;
      sb_addf(spec, " %lld", (long long)val);
    }
    tc->n++;
    if (tc->nvalues[c]) tc->ncombos *= tc->nvalues[c];
    if (tc->ncombos > PROG_MAX_CANDIDATES) {
      ld_problem(l, f, "autotune constants make %u combinations of values; at most %d", tc->ncombos,
                 PROG_MAX_CANDIDATES);
      return false;
    }
  }
  return ok;
}

/* Combination c's value of each constant: the first constant varies slowest. */
static void combo_values(const tune_constants *tc, uint32_t c, int64_t *out) {
  for (uint32_t i = tc->n; i-- > 0;) {
    out[i] = tc->values[i][c % tc->nvalues[i]];
    c /= tc->nvalues[i];
  }
}

/* text with every $NAME of a constant replaced by its value in `vals`. */
static char *substitute(const char *text, const tune_constants *tc, const int64_t *vals) {
  strbuf sb;
  sb_init(&sb);
  for (const char *p = text; *p;) {
    uint32_t hit = tc->n;
    for (uint32_t i = 0; i < tc->n && hit == tc->n; i++) {
      size_t len = strlen(tc->names[i]);
      if (*p == '$' && !strncmp(p + 1, tc->names[i], len) && !ident_char(p[1 + len])) hit = i;
    }
    if (hit < tc->n) {
      sb_addf(&sb, "%lld", (long long)vals[hit]);
      p += 1 + strlen(tc->names[hit]);
    } else {
      sb_add(&sb, p, 1);
      p++;
    }
  }
  return sb.failed ? (sb_free(&sb), NULL) : sb_take(&sb);
}

static bool load_grid(ld *l, node *n, node *f, int depth, const tune_constants *tc, prog_tune *t, strbuf *spec) {
  if (!f) {
    ld_problem(l, n, "autotune needs grid: the grid of a candidate, whose x size it may read as $block");
    return false;
  }
  node *g[3] = {f, NULL, NULL};
  size_t ng = 1;
  if (f->type == YAML_SEQUENCE_NODE) {
    ng = ld_items(f);
    if (ng < 1 || ng > 3) {
      ld_problem(l, f, "autotune grid must list 1 to 3 sizes, not %zu", ng);
      return false;
    }
    for (size_t d = 0; d < ng; d++) g[d] = ld_get(l, f->data.sequence.items.start[d]);
  }
  bool ok = true;
  l->block_ok = true;
  for (size_t d = 0; d < ng; d++) {
    if (!g[d] || !ld_is_scalar(l, g[d], "autotune grid")) {
      ok = false;
      continue;
    }
    sb_addf(spec, " grid%zu %s", d, ld_sval(g[d]));
    for (uint32_t c = 0; c < tc->ncombos && ok; c++) {
      int64_t vals[PROG_MAX_CONSTANTS];
      combo_values(tc, c, vals);
      char *text = tc->n ? substitute(ld_sval(g[d]), tc, vals) : NULL;
      if (tc->n && !text) {
        ld_problem(l, g[d], "out of memory");
        ok = false;
      } else if (!ld_parse_expr_text(l, g[d], text, depth, "autotune grid", &t->grid[c][d])) {
        ok = false;
      }
      free(text);
    }
  }
  l->block_ok = false;
  return ok;
}

static bool load_key(ld *l, node *f, const prog_kernel *k, prog_tune *t, strbuf *spec) {
  if (f->type != YAML_SEQUENCE_NODE) {
    ld_problem(l, f, "autotune key must be a list of the kernel's argument names");
    return false;
  }
  char(*names)[NAME_MAX_CHARS] = calloc(PROG_MAX_PARAMS, sizeof *names);
  if (!names) {
    ld_problem(l, f, "out of memory");
    return false;
  }
  uint32_t nn = param_names(k, names);
  bool ok = true;
  for (size_t i = 0; i < ld_items(f); i++) {
    node *e = ld_get(l, f->data.sequence.items.start[i]);
    const char *name = e ? ld_read_str(l, e, "autotune key") : NULL;
    if (!name) {
      ok = false;
      continue;
    }
    uint32_t j = 0;
    while (j < nn && strcmp(names[j], name) != 0) j++;
    if (nn == 0) {
      ld_problem(l, e, "autotune key '%s': the parameter names of kernel '%s' cannot be read from its source (a "
                       "parameter list after '%s' with %u parameters)", name, k->name, k->entry ? k->entry : k->name,
                 k->nparams);
      ok = false;
    } else if (j == nn) {
      strbuf all;
      sb_init(&all);
      for (uint32_t a = 0; a < nn; a++) sb_addf(&all, "%s%s", a ? ", " : "", names[a][0] ? names[a] : "(unnamed)");
      ld_problem(l, e, "autotune key '%s' is not an argument of kernel '%s' (its arguments: %s)", name, k->name,
                 all.data ? all.data : "");
      sb_free(&all);
      ok = false;
    } else if (k->params[j] == PT_PTR) {
      ld_problem(l, e, "autotune key '%s' is a buffer argument of kernel '%s'; a key names scalar arguments, whose "
                       "values the choice depends on", name, k->name);
      ok = false;
    } else {
      bool again = false;
      for (uint32_t m = 0; m < t->nkey; m++) again |= t->key[m] == j;
      if (!again) {
        if (!(t->key_names[t->nkey] = xstrdup(name))) {
          ld_problem(l, e, "out of memory");
          ok = false;
          continue;
        }
        t->key[t->nkey++] = j;
      }
      sb_addf(spec, " key %s", name);
    }
  }
  free(names);
  return ok;
}

/* The variant of kernel `kidx` for combination `c` of the constants: made
 * (appended to the program's kernels) unless a launch before made it.
 * Returns its index, or -1 (a problem said). */
static int64_t variant(ld *l, node *n, uint32_t kidx, const tune_constants *tc, uint32_t c, char **text) {
  int64_t vals[PROG_MAX_CONSTANTS];
  combo_values(tc, c, vals);
  strbuf what, defs;
  sb_init(&what);
  sb_init(&defs);
  for (uint32_t i = 0; i < tc->n; i++) {
    sb_addf(&what, "%s%s=%lld", i ? " " : "", tc->names[i], (long long)vals[i]);
    sb_addf(&defs, "#define %s %lld\n", tc->names[i], (long long)vals[i]);
  }
  prog_program *p = l->p;
  const prog_kernel *k = &p->kernels[kidx];
  strbuf name;
  sb_init(&name);
  sb_addf(&name, "%s[%s]", k->name, what.data ? what.data : "");
  /* after the defines, the source's own lines keep their numbers (in the
   * file the compile's wrapper names) */
  sb_addf(&defs, "#line %u\n%s", k->first_line ? k->first_line : 1, k->source ? k->source : "");
  int64_t found = -1;
  for (uint32_t i = 0; i < p->nkernels && found < 0 && name.data; i++)
    if (!strcmp(p->kernels[i].name, name.data)) found = i;
  prog_kernel *v = NULL;
  if (found < 0 && !what.failed && !defs.failed && !name.failed) {
    prog_kernel *grown = realloc(p->kernels, (p->nkernels + 1) * sizeof *grown);
    if (grown) {
      p->kernels = grown;
      k = &p->kernels[kidx];
      v = &p->kernels[p->nkernels];
      memset(v, 0, sizeof *v);
      v->name = sb_take(&name);
      v->entry = xstrdup(k->entry);
      v->source = sb_take(&defs);
      v->source_file = xstrdup(k->source_file);
      v->first_line = k->first_line;
      v->params = k->nparams ? malloc(k->nparams * sizeof *v->params) : NULL;
      if (v->params) memcpy(v->params, k->params, k->nparams * sizeof *v->params);
      v->nparams = k->nparams;
      v->params_text = xstrdup(k->params_text);
      v->loc = k->loc;
      found = p->nkernels++;
      if ((k->entry && !v->entry) || (k->source_file && !v->source_file) || (k->nparams && !v->params) ||
          (k->params_text && !v->params_text))
        found = -1; /* freed with the program */
    }
  }
  *text = found >= 0 ? sb_take(&what) : NULL;
  sb_free(&what);
  sb_free(&defs);
  sb_free(&name);
  if (found < 0) ld_problem(l, n, "out of memory");
  return found;
}

bool ld_load_tune(ld *l, node *n, int depth, const prog_kernel *k, prog_step *st) {
  static const char *const keys[] = {"block", "grid", "key", "constants", NULL};
  node *f[4];
  if (!ld_read_map(l, n, "autotune", keys, f)) return false;
  prog_tune *t = ld_calloc(l, n, 1, sizeof *t, "the launch's autotune");
  if (!t) return false;
  st->u.launch.tune = t;
  strbuf spec;
  sb_init(&spec);
  uint32_t blocks[PROG_MAX_CANDIDATES][3], nb = 0;
  tune_constants *tc = ld_calloc(l, n, 1, sizeof *tc, "the launch's autotune");
  if (!tc) return false;
  bool ok = load_blocks(l, n, f[0], blocks, &nb, &spec);
  bool constants_ok = load_constants(l, f[3], tc, &spec);
  if (constants_ok && nb * tc->ncombos > PROG_MAX_CANDIDATES) {
    ld_problem(l, f[3], "autotune has %u candidates (%u blocks times %u combinations of constants); at most %d",
               nb * tc->ncombos, nb, tc->ncombos, PROG_MAX_CANDIDATES);
    constants_ok = false;
  }
  ok = ok && constants_ok;
  t->ncombos = constants_ok ? tc->ncombos : 1;
  assert(t->ncombos <= PROG_MAX_CANDIDATES); /* the grids' room */
  /* a grid reads the constants: with none to read it is not parsed (its
   * $NAMEs would only be reported again) */
  if (constants_ok) ok = load_grid(l, n, f[1], depth, tc, t, &spec) && ok;
  if (f[2]) ok = load_key(l, f[2], k, t, &spec) && ok;
  /* every block with every combination; the launch's own kernel without constants */
  uint32_t kidx = st->u.launch.kernel;
  for (uint32_t c = 0; ok && c < t->ncombos; c++) {
    int64_t kv = kidx;
    if (tc->n) kv = variant(l, n, kidx, tc, c, &t->constants[c]);
    if (kv < 0) {
      ok = false;
      break;
    }
    for (uint32_t b = 0; b < nb; b++) {
      uint32_t i = c * nb + b;
      memcpy(t->blocks[i], blocks[b], sizeof t->blocks[i]);
      t->kernels[i] = (uint32_t)kv;
      t->combo[i] = (uint8_t)c;
    }
  }
  t->nblocks = ok ? nb * t->ncombos : nb;
  for (uint32_t i = 0; !ok && i < nb; i++) {
    memcpy(t->blocks[i], blocks[i], sizeof t->blocks[i]);
    t->kernels[i] = kidx;
  }
  free(tc);
  if (spec.failed) {
    ld_problem(l, n, "out of memory");
    ok = false;
  }
  t->spec = sb_take(&spec);
  return ok;
}
