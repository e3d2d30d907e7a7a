/* See yaml_depth.h. */
#include <stdbool.h>

#include "common/common.h"
#include "program/yaml_depth.h"

/* Whether the line from `p` (its first non-blank character) to the end
 * introduces a block scalar: it ends, after a "-" or ":", with "|" or ">"
 * and optional chomping or indentation indicators. */
static int opens_block_scalar(const char *p, const char *end) {
  const char *e = p;
  while (e < end && *e != '\n') e++;
  /* drop a trailing comment and blanks */
  for (const char *c = p; c < e; c++)
    if (*c == '#' && (c == p || c[-1] == ' ' || c[-1] == '\t')) {
      e = c;
      break;
    }
  while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
  while (e > p && (e[-1] == '-' || e[-1] == '+' || (e[-1] >= '0' && e[-1] <= '9'))) e--;
  if (e == p || (e[-1] != '|' && e[-1] != '>')) return 0;
  const char *before = e - 1;
  while (before > p && (before[-1] == ' ' || before[-1] == '\t')) before--;
  return before == p ? 0 : (before[-1] == ':' || before[-1] == '-');
}

int prog_yaml_depth_check(const char *text, size_t len, int max_depth, size_t *line, size_t *col) {
  const char *p = text, *end = text + len;
  int depth = 0;
  long block_parent = -1; /* indentation of the line that opened a block scalar */
  size_t ln = 1;
  while (p < end) {
    /* at the start of a line: its indentation */
    const char *start = p;
    long indent = 0;
    while (p < end && *p == ' ') p++, indent++;
    bool blank = p >= end || *p == '\n' || *p == '\r';
    if (block_parent >= 0) {
      if (blank || indent > block_parent) {
        while (p < end && *p != '\n') p++;
        if (p < end) p++;
        ln++;
        continue;
      }
      block_parent = -1;
    }
    if (depth == 0 && !blank && opens_block_scalar(p, end)) block_parent = indent;
    while (p < end && *p != '\n') {
      char c = *p;
      if (c == '#' && (p == start || p[-1] == ' ' || p[-1] == '\t')) {
        while (p < end && *p != '\n') p++;
        break;
      }
      if (c == '"' || c == '\'') {
        /* a quoted scalar, possibly over several lines */
        p++;
        while (p < end && *p != c) {
          if (c == '"' && *p == '\\' && p + 1 < end) p++;
          else if (c == '\'' && *p == '\'' && p + 1 < end && p[1] == '\'') p++;
          if (*p == '\n') ln++, start = p + 1;
          p++;
        }
        if (p < end) p++;
        continue;
      }
      if (c == '[' || c == '{') {
        if (++depth > max_depth) {
          *line = ln;
          *col = (size_t)(p - start) + 1;
          return -1;
        }
      } else if ((c == ']' || c == '}') && depth > 0) {
        depth--;
      }
      p++;
    }
    if (p < end) p++;
    ln++;
  }
  return 0;
}

/* Whether libyaml stopped at a tab, or on a line indented with one. */
static bool tab_at(const char *text, size_t len, size_t index) {
  if (index < len && text[index] == '\t') return true;
  size_t start = index < len ? index : len;
  while (start > 0 && text[start - 1] != '\n') start--;
  for (size_t i = start; i < len && (text[i] == ' ' || text[i] == '\t'); i++)
    if (text[i] == '\t') return true;
  return false;
}

bool prog_yaml_parse(const char *path, const char *text, size_t len, yaml_document_t *doc, schedrun_error_t *err) {
  size_t dl, dc;
  if (prog_yaml_depth_check(text, len, PROG_MAX_YAML_DEPTH, &dl, &dc) != 0) {
    err_set(err, SCHEDRUN_ECONFIG, "%s:%zu:%zu: collections nest more than %d deep", path, dl, dc, PROG_MAX_YAML_DEPTH);
    return false;
  }
  yaml_parser_t parser;
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  bool ok = yaml_parser_load(&parser, doc) != 0;
  if (!ok && parser.error == YAML_MEMORY_ERROR) {
    /* the document's nodes do not fit in memory: not a mistake in it */
    err_set(err, SCHEDRUN_ENOMEM, "%s: out of memory parsing its %zu bytes of YAML", path, len);
  } else if (!ok && parser.error == YAML_READER_ERROR) {
    /* libyaml places a reader's error by byte offset only */
    size_t at = parser.problem_offset < len ? parser.problem_offset : len, line = 1, col = 1;
    for (size_t i = 0; i < at; i++) {
      if (text[i] == '\n') line++, col = 1;
      else col++;
    }
    err_set(err, SCHEDRUN_ECONFIG, "%s:%zu:%zu: %s (byte 0x%02x at offset %zu): a config is UTF-8 text", path, line,
            col, parser.problem ? parser.problem : "invalid input", (unsigned)(parser.problem_value & 0xff), at);
  } else if (!ok) {
    bool tab = tab_at(text, len, parser.problem_mark.index);
    err_set(err, SCHEDRUN_ECONFIG, "%s:%zu:%zu: %s%s%s%s", path, parser.problem_mark.line + 1,
            parser.problem_mark.column + 1, parser.context ? parser.context : "", parser.context ? ": " : "",
            parser.problem ? parser.problem : "invalid YAML",
            tab ? " (a tab character: YAML indents with spaces, never tabs)" : "");
  }
  yaml_parser_delete(&parser);
  return ok;
}
