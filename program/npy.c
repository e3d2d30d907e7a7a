/* See npy.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program/npy.h"

static const char magic[] = "\x93NUMPY";

static const char *descr_of(prog_type t) {
  switch (t) {
  case PT_F32: return "<f4";
  case PT_F64: return "<f8";
  case PT_I32: return "<i4";
  case PT_U32: return "<u4";
  case PT_I64: return "<i8";
  case PT_U64: return "<u8";
  case PT_U8: return "|u1";
  default: return NULL;
  }
}

bool npy_is(const uint8_t *data, size_t len) { return len >= 10 && memcmp(data, magic, 6) == 0; }

size_t npy_header(prog_type t, uint32_t ndims, const uint64_t *dims, uint64_t count, uint8_t *out, size_t cap) {
  char shape[PROG_MAX_DIMS * 22 + 4] = "";
  size_t at = 0;
  uint32_t nd = ndims ? ndims : 1;
  for (uint32_t d = 0; d < nd && d < PROG_MAX_DIMS; d++) /* a Python tuple: (n,) or (a, b) */
    at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%" PRIu64 "%s", d ? ", " : "", ndims ? dims[d] : count,
                           nd == 1 ? "," : "");
  char dict[320];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                   descr_of(t) ? descr_of(t) : "<f4", shape);
  if (n < 0 || (size_t)n >= sizeof dict) return 0;
  /* magic (6) + version (2) + length (2) + dict + spaces + '\n', to a multiple of 64 */
  size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
  if (total > cap || total - 10 > 65535) return 0;
  memcpy(out, magic, 6);
  out[6] = 1;
  out[7] = 0;
  uint16_t hl = (uint16_t)(total - 10);
  out[8] = (uint8_t)(hl & 0xff);
  out[9] = (uint8_t)(hl >> 8);
  memcpy(out + 10, dict, (size_t)n);
  memset(out + 10 + n, ' ', total - 10 - (size_t)n - 1);
  out[total - 1] = '\n';
  return total;
}

/* The value after 'key': in the dict, or NULL. */
static const char *value_of(const char *dict, const char *key) {
  char k[32];
  snprintf(k, sizeof k, "'%s'", key);
  const char *p = strstr(dict, k);
  if (!p) return NULL;
  p += strlen(k);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

const char *npy_check(const uint8_t *data, size_t len, prog_type t, uint64_t count, uint32_t ndims,
                      const uint64_t *dims, size_t *offset, char *why, size_t why_len) {
  if (!npy_is(data, len)) return snprintf(why, why_len, "is not a .npy file"), why;
  unsigned major = data[6];
  size_t hl, start;
  if (major == 1) {
    hl = (size_t)data[8] | (size_t)data[9] << 8;
    start = 10;
  } else if ((major == 2 || major == 3) && len >= 12) {
    hl = (size_t)data[8] | (size_t)data[9] << 8 | (size_t)data[10] << 16 | (size_t)data[11] << 24;
    start = 12;
  } else {
    return snprintf(why, why_len, "is a .npy file of version %u.%u, which is not known", major, data[7]), why;
  }
  if (hl > len - start || hl > 1 << 20) return snprintf(why, why_len, "is a .npy file cut short in its header"), why;
  char *dict = malloc(hl + 1);
  if (!dict) return snprintf(why, why_len, "cannot be read: out of memory"), why;
  memcpy(dict, data + start, hl);
  dict[hl] = '\0';
  const char *bad = NULL;
  const char *d = value_of(dict, "descr"), *fo = value_of(dict, "fortran_order"), *sh = value_of(dict, "shape");
  const char *want = descr_of(t);
  char got[16] = "";
  if (d && *d == '\'') sscanf(d + 1, "%15[^']", got);
  /* a one-byte type may be written with '<' or '|' */
  bool same = want && (strcmp(got, want) == 0 || (t == PT_U8 && (!strcmp(got, "<u1") || !strcmp(got, "u1"))));
  uint64_t n = 1, got_dims[PROG_MAX_DIMS];
  uint32_t nd = 0;
  bool too_many = false;
  if (!d || !fo || !sh || *sh != '(') {
    bad = "has a header without descr, fortran_order and shape";
  } else if (!same) {
    snprintf(why, why_len, "holds elements of dtype '%s'; the buffer is %s ('%s')", got, prog_type_name(t),
             want ? want : "?");
    bad = why;
  } else {
    for (const char *p = sh + 1; *p && *p != ')';) {
      while (*p == ' ' || *p == ',') p++;
      if (*p == ')') break;
      char *end;
      unsigned long long v = strtoull(p, &end, 10);
      if (end == p || __builtin_mul_overflow(n, (uint64_t)v, &n)) {
        bad = "has a shape that cannot be read";
        break;
      }
      if (nd < PROG_MAX_DIMS) got_dims[nd] = v;
      else too_many = true;
      nd++;
      p = end;
    }
    bool same_shape = !too_many && nd == ndims;
    for (uint32_t k = 0; same_shape && k < nd; k++) same_shape = got_dims[k] == dims[k];
    if (!bad && nd > 1 && strncmp(fo, "True", 4) == 0) bad = "is in Fortran order; only C order is read";
    else if (!bad && ndims && !same_shape) {
      char gs[PROG_MAX_DIMS * 22 + 8] = "(", ws[PROG_MAX_DIMS * 22 + 8] = "[";
      size_t ga = 1, wa = 1;
      for (uint32_t k = 0; k < nd && k < PROG_MAX_DIMS; k++)
        ga += (size_t)snprintf(gs + ga, sizeof gs - ga, "%s%" PRIu64, k ? ", " : "", got_dims[k]);
      snprintf(gs + ga, sizeof gs - ga, "%s)", nd == 1 ? "," : too_many ? ", ..." : "");
      for (uint32_t k = 0; k < ndims; k++) wa += (size_t)snprintf(ws + wa, sizeof ws - wa, "%s%" PRIu64, k ? ", " : "", dims[k]);
      snprintf(ws + wa, sizeof ws - wa, "]");
      snprintf(why, why_len, "has shape %s; the buffer's shape is %s", gs, ws);
      bad = why;
    } else if (!bad && n != count) {
      snprintf(why, why_len, "holds %" PRIu64 " elements; the buffer has %" PRIu64, n, count);
      bad = why;
    } else if (!bad && len - start - hl != count * prog_type_size(t)) {
      snprintf(why, why_len, "has %zu bytes of data; %" PRIu64 " elements of %s take %" PRIu64, len - start - hl, count,
               prog_type_name(t), count * prog_type_size(t));
      bad = why;
    }
  }
  if (bad && bad != why) snprintf(why, why_len, "%s", bad);
  free(dict);
  if (bad) return why;
  *offset = start + hl;
  return NULL;
}
