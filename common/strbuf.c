/* A growable, always NUL-terminated byte buffer. An allocation failure marks
 * the buffer failed instead of aborting; callers check `failed` once at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

void sb_init(strbuf *sb) { memset(sb, 0, sizeof *sb); }

void sb_free(strbuf *sb) {
  free(sb->data);
  sb_init(sb);
}

static bool sb_reserve(strbuf *sb, size_t extra) {
  if (sb->failed) return false;
  if (sb->len + extra + 1 <= sb->cap) return true;
  size_t cap = sb->cap ? sb->cap : 64;
  while (cap < sb->len + extra + 1) cap *= 2;
  char *p = realloc(sb->data, cap);
  if (!p) {
    sb->failed = true;
    return false;
  }
  sb->data = p;
  sb->cap = cap;
  return true;
}

void sb_add(strbuf *sb, const void *p, size_t n) {
  if (!sb_reserve(sb, n)) return;
  if (n) memcpy(sb->data + sb->len, p, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
}

void sb_adds(strbuf *sb, const char *s) { sb_add(sb, s, strlen(s)); }

void sb_vaddf(strbuf *sb, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0 || !sb_reserve(sb, (size_t)n)) return;
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
  sb->len += (size_t)n;
}

void sb_addf(strbuf *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_vaddf(sb, fmt, ap);
  va_end(ap);
}

char *sb_take(strbuf *sb) {
  char *p = sb->data;
  if (!p) p = calloc(1, 1);
  sb_init(sb);
  return p;
}
