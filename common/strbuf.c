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

/* The length of the UTF-8 sequence at p (1 to 4), or 0 when it is not one
 * (a stray byte, an overlong form, a surrogate, past U+10FFFF). */
static size_t utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
  for (size_t k = 1; k < n; k++)
    if ((p[k] & 0xc0) != 0x80) return 0;
  if ((n == 2 && c < 0xc2) || (n == 3 && c == 0xe0 && p[1] < 0xa0) || (n == 3 && c == 0xed && p[1] >= 0xa0) ||
      (n == 4 && ((c == 0xf0 && p[1] < 0x90) || c > 0xf4 || (c == 0xf4 && p[1] >= 0x90))))
    return 0;
  return n;
}

void sb_add_json(strbuf *sb, const char *s) {
  sb_adds(sb, "\"");
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
    size_t n = utf8_len(p);
    if (*p == '"' || *p == '\\') sb_addf(sb, "\\%c", *p);
    else if (*p < 0x20) sb_addf(sb, "\\u%04x", *p);
    else if (n == 0) sb_adds(sb, "\\ufffd");
    else sb_add(sb, p, n);
    p += n ? n : 1;
  }
  sb_adds(sb, "\"");
}
