/*
 * A launch's `autotune:` map: the candidate blocks, the grid (expressions
 * that may read a candidate's x size as $block) and the key, the scalar
 * arguments whose values the choice depends on, named as the kernel's source
 * names its parameters. The choice itself is made when the launch is
 * recorded (actors/record_tune.c).
 */
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

static bool load_blocks(ld *l, node *n, node *f, prog_tune *t, strbuf *spec) {
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
    uint32_t *b = t->blocks[i];
    if (!c || !ld_read_block(l, c, what, b)) {
      ok = false;
      continue;
    }
    for (size_t j = 0; j < i; j++)
      if (!memcmp(t->blocks[j], b, sizeof t->blocks[j])) {
        ld_problem(l, c, "%s is candidate %zu again ([%u, %u, %u])", what, j + 1, b[0], b[1], b[2]);
        ok = false;
      }
    sb_addf(spec, " %u,%u,%u", b[0], b[1], b[2]);
  }
  t->nblocks = (uint32_t)nb;
  return ok;
}

static bool load_grid(ld *l, node *n, node *f, int depth, prog_tune *t, strbuf *spec) {
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
    if (!g[d] || !ld_parse_expr_node(l, g[d], depth, "autotune grid", &t->grid[d])) {
      ok = false;
      continue;
    }
    sb_addf(spec, " grid%zu %s", d, ld_sval(g[d]));
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

bool ld_load_tune(ld *l, node *n, int depth, const prog_kernel *k, prog_step *st) {
  static const char *const keys[] = {"block", "grid", "key", NULL};
  node *f[3];
  if (!ld_read_map(l, n, "autotune", keys, f)) return false;
  prog_tune *t = ld_calloc(l, n, 1, sizeof *t, "the launch's autotune");
  if (!t) return false;
  st->u.launch.tune = t;
  strbuf spec;
  sb_init(&spec);
  bool ok = load_blocks(l, n, f[0], t, &spec);
  ok = load_grid(l, n, f[1], depth, t, &spec) && ok;
  if (f[2]) ok = load_key(l, f[2], k, t, &spec) && ok;
  if (spec.failed) {
    ld_problem(l, n, "out of memory");
    ok = false;
  }
  t->spec = sb_take(&spec);
  return ok;
}
