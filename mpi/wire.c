/* See mpi_internal.h: reading and packing the ranks' msgpack arrays. */
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_internal.h"

void wire_rd_init(wire_rd *r, const msgpack_object *a) {
  r->v = a && a->type == MSGPACK_OBJECT_ARRAY ? a->via.array.ptr : NULL;
  r->n = a && a->type == MSGPACK_OBJECT_ARRAY ? a->via.array.size : 0;
  r->i = 0;
  r->bad = a && a->type == MSGPACK_OBJECT_ARRAY ? NULL : "not an array";
}

static const msgpack_object *next(wire_rd *r) {
  if (r->bad) return NULL;
  if (r->i >= r->n) {
    r->bad = "too few elements";
    return NULL;
  }
  return &r->v[r->i++];
}

bool wire_u64(wire_rd *r, uint64_t *out) {
  const msgpack_object *o = next(r);
  if (!o) return false;
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
    r->bad = "an element that should be an unsigned integer";
    return false;
  }
  *out = o->via.u64;
  return true;
}

bool wire_i64(wire_rd *r, int64_t *out) {
  const msgpack_object *o = next(r);
  if (!o) return false;
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) *out = o->via.i64;
  else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) *out = (int64_t)o->via.u64;
  else {
    r->bad = "an element that should be an integer";
    return false;
  }
  return true;
}

bool wire_bytes(wire_rd *r, const char **data, size_t *len) {
  const msgpack_object *o = next(r);
  if (!o) return false;
  if (o->type == MSGPACK_OBJECT_STR) {
    *data = o->via.str.ptr;
    *len = o->via.str.size;
  } else if (o->type == MSGPACK_OBJECT_BIN) {
    *data = o->via.bin.ptr;
    *len = o->via.bin.size;
  } else {
    r->bad = "an element that should be a string";
    return false;
  }
  return true;
}

bool wire_array(wire_rd *r, wire_rd *inner) {
  const msgpack_object *o = next(r);
  if (!o) return false;
  wire_rd_init(inner, o);
  if (inner->bad) r->bad = "an element that should be an array";
  return inner->bad == NULL;
}

char *wire_strdup(wire_rd *r) {
  const char *d;
  size_t n;
  if (!wire_bytes(r, &d, &n)) return NULL;
  if (n && memchr(d, 0, n)) {
    r->bad = "a string with a NUL in it";
    return NULL;
  }
  char *s = malloc(n + 1);
  if (!s) {
    r->bad = "out of memory";
    return NULL;
  }
  if (n) memcpy(s, d, n);
  s[n] = '\0';
  return s;
}

void wire_pack_begin(msgpack_sbuffer *sb, msgpack_packer *pk, int kind, uint32_t elements) {
  msgpack_sbuffer_init(sb);
  msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
  msgpack_pack_array(pk, elements);
  msgpack_pack_uint32(pk, (uint32_t)kind);
}

void wire_pack_str(msgpack_packer *pk, const char *s) {
  size_t n = s ? strlen(s) : 0;
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s ? s : "", n);
}

void wire_pack_bin(msgpack_packer *pk, const void *data, size_t len) {
  msgpack_pack_bin(pk, len);
  msgpack_pack_bin_body(pk, data, len);
}
