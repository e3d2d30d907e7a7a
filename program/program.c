/* The program model: types and release. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/program.h"

size_t prog_type_size(prog_type t) {
  switch (t) {
  case PT_I32: case PT_U32: case PT_F32: return 4;
  case PT_U8: return 1;
  default: return 8;
  }
}

const char *prog_type_name(prog_type t) {
  static const char *const names[] = {"i32", "u32", "i64", "u64", "f32", "f64", "ptr", "u8"};
  return (unsigned)t < SCHEDRUN__ARRAY_LEN(names) ? names[t] : "?";
}

bool prog_type_is_float(prog_type t) { return t == PT_F32 || t == PT_F64; }

void prog_index_text(const prog_buffer *b, uint64_t flat, char *out, size_t n) {
  if (b->ndims <= 1) {
    snprintf(out, n, "%llu", (unsigned long long)flat);
    return;
  }
  uint64_t idx[PROG_MAX_DIMS];
  for (uint32_t d = b->ndims; d-- > 0;) {
    assert(b->dims[d] > 0);
    idx[d] = flat % b->dims[d];
    flat /= b->dims[d];
  }
  size_t at = 0;
  for (uint32_t d = 0; d < b->ndims && at < n; d++) {
    int w = snprintf(out + at, n - at, "%s%llu", d ? ", " : "", (unsigned long long)idx[d]);
    if (w < 0) break;
    at += (size_t)w;
  }
}

void prog_shape_text(const prog_buffer *b, char *out, size_t n) {
  if (!b->ndims) {
    snprintf(out, n, "[%llu]", (unsigned long long)b->count);
    return;
  }
  size_t at = 0;
  for (uint32_t d = 0; d < b->ndims && at < n; d++) {
    int w = snprintf(out + at, n - at, "%s%llu", d ? ", " : "[", (unsigned long long)b->dims[d]);
    if (w < 0) return;
    at += (size_t)w;
  }
  if (at < n) snprintf(out + at, n - at, "]");
}

int prog_find_buffer(const prog_program *p, const char *name) {
  for (uint32_t i = 0; i < p->nbuffers; i++)
    if (p->buffers[i].name && strcmp(p->buffers[i].name, name) == 0) return (int)i;
  return -1;
}

void prog_tune_free(prog_tune *t) {
  if (!t) return;
  for (uint32_t c = 0; c < PROG_MAX_CANDIDATES; c++) {
    for (int d = 0; d < 3; d++) prog_expr_free(&t->grid[c][d]);
    free(t->constants[c]);
  }
  for (uint32_t i = 0; i < t->nkey; i++) free(t->key_names[i]);
  free(t->spec);
  free(t);
}

static void free_steps(prog_step *s, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    switch (s[i].kind) {
    case ST_LAUNCH:
      for (uint32_t a = 0; a < s[i].u.launch.nargs; a++) prog_expr_free(&s[i].u.launch.args[a].expr);
      free(s[i].u.launch.args);
      prog_tune_free(s[i].u.launch.tune);
      break;
    case ST_COPY:
      prog_expr_free(&s[i].u.copy.count);
      prog_expr_free(&s[i].u.copy.from_offset);
      prog_expr_free(&s[i].u.copy.to_offset);
      break;
    case ST_FILL:
      prog_expr_free(&s[i].u.fill.value);
      prog_expr_free(&s[i].u.fill.count);
      prog_expr_free(&s[i].u.fill.offset);
      break;
    case ST_LOOP:
    case ST_WHILE:
      free_steps(s[i].u.loop.body, s[i].u.loop.nbody);
      break;
    case ST_HOST: break;
    }
  }
  free(s);
}

void prog_free(prog_program *p) {
  if (!p) return;
  for (uint32_t i = 0; i < p->nkernels; i++) {
    prog_kernel *k = &p->kernels[i];
    free(k->name);
    free(k->entry);
    free(k->source);
    free(k->source_file);
    free(k->params);
    free(k->params_text);
  }
  free(p->kernels);
  for (uint32_t i = 0; i < p->nbuffers; i++) {
    free(p->buffers[i].name);
    free(p->buffers[i].image);
  }
  free(p->buffers);
  free_steps(p->steps, p->nsteps);
  for (uint32_t i = 0; i < p->nhosts; i++) free(p->hosts[i].name);
  free(p->hosts);
  for (uint32_t i = 0; i < p->nexpects; i++) {
    free(p->expects[i].index);
    free(p->expects[i].values);
    free(p->expects[i].bits);
    for (size_t j = 0; p->expects[i].exprs && j < p->expects[i].n; j++) prog_expr_free(&p->expects[i].exprs[j]);
    free(p->expects[i].exprs);
    prog_expr_free(&p->expects[i].sum_expr);
  }
  free(p->expects);
  free(p->name);
  free(p->path);
  free(p->text);
  free(p->devices);
  free(p);
}

static const prog_step *find_command(const prog_step *steps, uint32_t n, uint32_t cmd) {
  for (uint32_t i = 0; i < n; i++) {
    const prog_step *st = &steps[i];
    if (st->command == cmd) return st;
    if (st->kind == ST_LOOP || st->kind == ST_WHILE) {
      const prog_step *in = find_command(st->u.loop.body, st->u.loop.nbody, cmd);
      if (in) return in;
    }
  }
  return NULL;
}

void prog_where(const prog_program *p, prog_loc loc, char *out, size_t n) {
  snprintf(out, n, "%s:%d:%d", p->path, loc.line, loc.col);
}

void prog_describe_command(const prog_program *p, uint32_t cmd, char *out, size_t n) {
  const prog_step *st = p ? find_command(p->steps, p->nsteps, cmd) : NULL;
  if (!st) {
    snprintf(out, n, "a step of '%s'", p ? p->name : "?");
    return;
  }
  if (st->kind == ST_LAUNCH)
    snprintf(out, n, "kernel '%s' (%s:%d:%d)", p->kernels[st->u.launch.kernel].name, p->path, st->loc.line,
             st->loc.col);
  else if (st->kind == ST_HOST)
    snprintf(out, n, "host step '%s' (step %u of '%s')", p->hosts[st->u.host.index].name, st->command + 1, p->name);
  else
    snprintf(out, n, "the %s step at %s:%d:%d", st->kind == ST_COPY ? "copy" : st->kind == ST_FILL ? "fill" : "loop",
             p->path, st->loc.line, st->loc.col);
}
