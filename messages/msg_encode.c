/* Encoding, driven by the schema tables (msg_schema.h). See msg.h. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "messages/msg.h"
#include "messages/msg_schema.h"

/* The encoder's output: grows from a small start (msgpack-c's own buffer
 * starts at 8 KiB, far more than a typical message). It refuses what the
 * decoder would refuse, so that a message that cannot arrive is never sent.
 * The msgpack is written here directly, each value in its shortest form, as
 * msgpack-c's packer writes it (which called a function per value: half
 * the cost of encoding a SUBMIT). */
typedef struct outbuf {
  uint8_t *data;
  size_t len, cap;
  size_t start; /* where this message begins (the buffer may hold others before it) */
  bool failed;
  const char *too_big; /* which limit was passed */
} outbuf;

static void over(outbuf *o, const char *what) {
  if (!o->too_big) o->too_big = what;
}

/* Room for n more bytes at o->data + o->len; false (and failed) when there
 * is none. */
static bool room(outbuf *o, size_t n) {
  if (o->failed) return false;
  if (o->len - o->start + n > MSG_MAX_BYTES) {
    o->too_big = "the message is over 1 GiB";
    o->failed = true;
    return false;
  }
  if (o->cap - o->len >= n) return true;
  size_t cap = o->cap ? o->cap : 256;
  while (cap - o->len < n) cap *= 2;
  uint8_t *p = realloc(o->data, cap);
  if (!p) {
    o->failed = true;
    return false;
  }
  o->data = p;
  o->cap = cap;
  return true;
}

/* a type byte, then v in `bytes` big-endian bytes */
static void put_be(outbuf *o, uint8_t type, uint64_t v, int bytes) {
  if (!room(o, 1 + (size_t)bytes)) return;
  uint8_t *p = o->data + o->len;
  p[0] = type;
  for (int k = bytes; k > 0; k--, v >>= 8) p[k] = (uint8_t)v;
  o->len += 1 + (size_t)bytes;
}

static void pack_uint(outbuf *o, uint64_t v) {
  if (v < 128) put_be(o, (uint8_t)v, 0, 0);
  else if (v <= UINT8_MAX) put_be(o, 0xcc, v, 1);
  else if (v <= UINT16_MAX) put_be(o, 0xcd, v, 2);
  else if (v <= UINT32_MAX) put_be(o, 0xce, v, 4);
  else put_be(o, 0xcf, v, 8);
}

static void pack_int(outbuf *o, int64_t v) {
  if (v >= 0) pack_uint(o, (uint64_t)v);
  else if (v >= -32) put_be(o, (uint8_t)(int8_t)v, 0, 0);
  else if (v >= INT8_MIN) put_be(o, 0xd0, (uint64_t)v, 1);
  else if (v >= INT16_MIN) put_be(o, 0xd1, (uint64_t)v, 2);
  else if (v >= INT32_MIN) put_be(o, 0xd2, (uint64_t)v, 4);
  else put_be(o, 0xd3, (uint64_t)v, 8);
}

/* a container's or a payload's header: fix form (fix_base | n) up to
 * fix_max (when there is one: fix_base not 0), then 8 (when there is one),
 * 16 and 32-bit lengths */
static void pack_header(outbuf *o, size_t n, uint8_t fix_base, size_t fix_max, uint8_t t8, uint8_t t16, uint8_t t32) {
  if (fix_base && n <= fix_max) put_be(o, (uint8_t)(fix_base | n), 0, 0);
  else if (t8 && n <= UINT8_MAX) put_be(o, t8, n, 1);
  else if (n <= UINT16_MAX) put_be(o, t16, n, 2);
  else put_be(o, t32, n, 4);
}

static void pack_map(outbuf *o, size_t n) { pack_header(o, n, 0x80, 15, 0, 0xde, 0xdf); }
static void pack_array(outbuf *o, size_t n) { pack_header(o, n, 0x90, 15, 0, 0xdc, 0xdd); }

static void pack_raw(outbuf *o, const void *p, size_t n) {
  if (n && room(o, n)) {
    memcpy(o->data + o->len, p, n);
    o->len += n;
  }
}

static void pack_strn(outbuf *o, const char *s, size_t n) {
  pack_header(o, n, 0xa0, 31, 0xd9, 0xda, 0xdb);
  pack_raw(o, s, n);
}

static void pack_str(outbuf *o, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > MSG_MAX_STRING) over(o, "a string is over 16 MiB");
  pack_strn(o, s ? s : "", n);
}

static void pack_struct(outbuf *o, const schema *s, const void *base) {
  pack_map(o, s->nfields);
  for (size_t i = 0; i < s->nfields; i++) {
    const field *f = &s->fields[i];
    const void *p = (const char *)base + f->off;
    pack_strn(o, f->wire, f->wire_len);
    switch (f->kind) {
    case FK_U32: pack_uint(o, *(const uint32_t *)p); break;
    case FK_I32: pack_int(o, *(const int32_t *)p); break;
    case FK_U64: pack_uint(o, *(const uint64_t *)p); break;
    case FK_I64: pack_int(o, *(const int64_t *)p); break;
    case FK_STR: pack_str(o, *(char *const *)p); break;
    case FK_BIN: {
      const msg_bytes *b = p;
      pack_header(o, b->len, 0, 0, 0xc4, 0xc5, 0xc6);
      pack_raw(o, b->data, b->len);
      break;
    }
    case FK_U64S: {
      const msg_u64s *a = p;
      if (a->n > MSG_MAX_ARRAY) over(o, "an array is over its limit");
      pack_array(o, a->n);
      for (size_t k = 0; k < a->n; k++) pack_uint(o, a->v[k]);
      break;
    }
    case FK_STRS: {
      const msg_strs *a = p;
      if (a->n > MSG_MAX_ARRAY) over(o, "an array is over its limit");
      pack_array(o, a->n);
      for (size_t k = 0; k < a->n; k++) pack_str(o, a->v[k]);
      break;
    }
    case FK_ARR: {
      const any_arr *a = p;
      if (a->n > MSG_MAX_ARRAY) over(o, "an array is over its limit");
      pack_array(o, a->n);
      for (size_t k = 0; k < a->n; k++)
        pack_struct(o, f->sub, (const char *)a->v + k * f->sub->size);
      break;
    }
    }
  }
}

/* Encodes m after the ob->len bytes ob holds. */
static int encode_into(const msg *m, outbuf *ob, schedrun_error_t *err) {
  if (m->type <= 0 || m->type >= MSG__END)
    return err_set(err, SCHEDRUN_EINVAL, "cannot encode a message of unknown type %d", m->type);
  size_t start = ob->start = ob->len;
  pack_map(ob, 5);
  pack_strn(ob, "v", 1);
  pack_uint(ob, m->v);
  pack_strn(ob, "type", 4);
  pack_uint(ob, (uint32_t)m->type);
  pack_strn(ob, "job", 3);
  pack_uint(ob, m->job);
  pack_strn(ob, "from", 4);
  pack_str(ob, m->from);
  pack_strn(ob, "body", 4);
  pack_struct(ob, msg_body_schema[m->type], &m->body);
  if (ob->too_big || ob->failed || !ob->data) {
    ob->len = start;
    if (ob->too_big)
      return err_set(err, SCHEDRUN_EPROTO, "%s for job %llu cannot be sent: %s", msg_type_name(m->type),
                     (unsigned long long)m->job, ob->too_big);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory encoding %s", msg_type_name(m->type));
  }
  return SCHEDRUN_OK;
}

int msg_encode(const msg *m, uint8_t **out, size_t *len, schedrun_error_t *err) {
  *out = NULL;
  *len = 0;
  outbuf ob = {NULL, 0, 0, 0, false, NULL};
  int rc = encode_into(m, &ob, err);
  if (rc) {
    free(ob.data);
    return rc;
  }
  *len = ob.len;
  *out = ob.data;
  return SCHEDRUN_OK;
}

int msg_encode_append(const msg *m, uint8_t **buf, size_t *len, size_t *cap, schedrun_error_t *err) {
  outbuf ob = {*buf, *len, *cap, *len, false, NULL};
  int rc = encode_into(m, &ob, err);
  *buf = ob.data; /* it may have grown even when the message did not fit */
  *len = ob.len;
  *cap = ob.cap;
  return rc;
}
