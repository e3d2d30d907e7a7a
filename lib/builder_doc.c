/* The program builder's document: its nodes and their places (builder_doc.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/builder_doc.h"

void bd_misuse(schedrun_builder_t *b, const char *fmt, ...) {
  if (b->misuse) return;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&b->misuse, fmt, ap) < 0) b->misuse = NULL, b->failed = true;
  va_end(ap);
}

/* A new builder call: its number (the place of the nodes it makes). */
int bd_call(schedrun_builder_t *b, const char *part, const char *fmt, ...) {
  if (b->ncalls == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 32;
    char **w = realloc(b->what, cap * sizeof *w);
    if (w) b->what = w;
    const char **pt = w ? realloc(b->part, cap * sizeof *pt) : NULL;
    if (pt) b->part = pt;
    if (!w || !pt) {
      b->failed = true;
      return 0;
    }
    b->cap = cap;
  }
  va_list ap;
  va_start(ap, fmt);
  char *w = NULL;
  if (vasprintf(&w, fmt, ap) < 0) w = NULL;
  va_end(ap);
  if (!w) b->failed = true;
  b->what[b->ncalls] = w;
  b->part[b->ncalls] = part;
  return (int)++b->ncalls;
}

void bd_place(schedrun_builder_t *b, int id, int at, int sub) {
  yaml_node_t *n = yaml_document_get_node(&b->doc, id);
  if (!n) return;
  n->start_mark.line = at > 0 ? (size_t)at - 1 : 0;
  n->start_mark.column = (size_t)sub;
  n->end_mark = n->start_mark;
}

/* Folded style: the loader takes no column inside it, so the place stays
 * the builder call's. */
int bd_scalar(schedrun_builder_t *b, const char *text, int at, int sub) {
  int id = yaml_document_add_scalar(&b->doc, NULL, (yaml_char_t *)(text ? text : ""), -1, YAML_FOLDED_SCALAR_STYLE);
  if (!id) b->failed = true;
  else bd_place(b, id, at, sub);
  return id;
}

int bd_number(schedrun_builder_t *b, double v, bool integer, int at, int sub) {
  char s[64];
  if (integer) snprintf(s, sizeof s, "%.0f", v);
  else snprintf(s, sizeof s, "%.17g", v);
  return bd_scalar(b, s, at, sub);
}

int bd_map(schedrun_builder_t *b, int at) {
  int id = yaml_document_add_mapping(&b->doc, NULL, YAML_BLOCK_MAPPING_STYLE);
  if (!id) b->failed = true;
  else bd_place(b, id, at, 0);
  return id;
}

int bd_seq(schedrun_builder_t *b, int at) {
  int id = yaml_document_add_sequence(&b->doc, NULL, YAML_BLOCK_SEQUENCE_STYLE);
  if (!id) b->failed = true;
  else bd_place(b, id, at, 0);
  return id;
}

void bd_pair(schedrun_builder_t *b, int m, const char *key, int value, int at) {
  int k = bd_scalar(b, key, at, 0);
  if (!m || !k || !value || !yaml_document_append_mapping_pair(&b->doc, m, k, value)) b->failed = true;
}

void bd_item(schedrun_builder_t *b, int s, int value) {
  if (!s || !value || !yaml_document_append_sequence_item(&b->doc, s, value)) b->failed = true;
}

bool bd_usable(schedrun_builder_t *b, const char *fn, const char *what, const void *p) {
  if (!b) return false;
  if (!p) {
    bd_misuse(b, "%s: %s is NULL", fn, what);
    return false;
  }
  return true;
}
