/* Encoding, driven by the schema tables (msg_schema.h). See msg.h. */
#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "common/common.h"
#include "messages/msg.h"
#include "messages/msg_schema.h"

/* The encoder's output: grows from a small start (msgpack-c's sbuffer
 * starts at 8 KiB, far more than a typical message). msgpack-c's packer
 * writes each value in its shortest form through `ob_write`; the encoder
 * refuses what the decoder would refuse, so that a message that cannot
 * arrive is never sent. */
typedef struct outbuf {
  uint8_t *data;
  size_t len, cap;
  size_t start; /* where this message begins (the buffer may hold others before it) */
  bool failed;
  const char *too_big; /* which limit was passed */
  msg_lending *lent;   /* NULL: every byte in the message */
} outbuf;

static void over(outbuf *o, const char *what) {
  if (!o->too_big) o->too_big = what;
}

/* Room for n more bytes at o->data + o->len, growing the buffer; false
 * (and the buffer failed) past the message limit or out of memory. */
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

/* Appends n bytes, or marks the buffer failed (later writes are then
 * dropped). The packer writes a value's header or a number at a time, 1 to
 * 9 bytes of a size known where it is called: inlined, each is a copy of a
 * constant size. */
static inline int ob_write(outbuf *o, const char *buf, size_t n) {
  if (o->failed) return -1;
  if ((n > o->cap - o->len || o->len - o->start + n > MSG_MAX_BYTES) && !room(o, n)) return -1;
  memcpy(o->data + o->len, buf, n);
  o->len += n;
  return 0;
}

/* msgpack-c's packing routines (its pack_template.h, the code behind
 * msgpack_pack_*), instantiated to append to an outbuf: the bytes
 * msgpack_packer writes, without an indirect call to a write callback per
 * value (a third of the encoder's instructions went there). */
#define msgpack_pack_inline_func(name) static inline int ob_pack##name
#define msgpack_pack_inline_func_cint(name) static inline int ob_pack##name
#define msgpack_pack_inline_func_fixint(name) static inline int ob_pack_fix##name
#define msgpack_pack_user outbuf *
#define msgpack_pack_append_buffer(user, buf, len) return ob_write(user, (const char *)(buf), len)
#include <msgpack/pack_template.h>

static void pack_str(outbuf *o, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > MSG_MAX_STRING) over(o, "a string is over 16 MiB");
  ob_pack_str(o, n);
  ob_pack_str_body(o, s ? s : "", n);
}

static void pack_array(outbuf *o, size_t n) {
  if (n > MSG_MAX_ARRAY) over(o, "an array is over its limit");
  ob_pack_array(o, n);
}

/* Lends b's block (msg.h, "Lent bytes"): its ticket and length in an
 * extension, the block out of the message, the ticket in o->lent. */
static void lend(outbuf *o, msg_bytes *b) {
  msg_lending *l = o->lent;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 4;
    msg_lent *v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      o->failed = true;
      return;
    }
    l->v = v;
    l->cap = cap;
  }
  uint64_t t = msg_lend(b->data, b->len);
  if (!t) {
    o->failed = true;
    return;
  }
  l->v[l->n++] = (msg_lent){b, t};
  uint8_t body[16];
  uint64_t len = b->len;
  for (int i = 0; i < 8; i++) {
    body[i] = (uint8_t)(t >> (8 * i));
    body[8 + i] = (uint8_t)(len >> (8 * i));
  }
  b->data = NULL;
  ob_pack_ext(o, sizeof body, MSG_EXT_LENT);
  ob_pack_ext_body(o, body, sizeof body);
}

static void pack_struct(outbuf *o, const schema *s, const void *base) {
  ob_pack_array(o, s->nfields); /* the fields' values, in the schema's order */
  for (size_t i = 0; i < s->nfields; i++) {
    const field *f = &s->fields[i];
    const void *p = (const char *)base + f->off;
    switch (f->kind) {
    case FK_U32: ob_pack_uint32(o, *(const uint32_t *)p); break;
    case FK_I32: ob_pack_int32(o, *(const int32_t *)p); break;
    case FK_U64: ob_pack_uint64(o, *(const uint64_t *)p); break;
    case FK_I64: ob_pack_int64(o, *(const int64_t *)p); break;
    case FK_STR: pack_str(o, *(char *const *)p); break;
    case FK_BIN: {
      const msg_bytes *b = p;
      if (b->len && !b->data) {
        over(o, "its bytes were lent already (a message is sent once)");
      } else if (o->lent && b->len >= MSG_LEND_MIN) {
        lend(o, (msg_bytes *)(uintptr_t)b); /* the encoder's to take: msg_encode_append has m writable */
      } else {
        ob_pack_bin(o, b->len);
        if (b->len) ob_pack_bin_body(o, b->data, b->len);
      }
      break;
    }
    case FK_U64S: {
      /* a column: bytes, 8 per element, little-endian (msg.h) */
      const msg_u64s *a = p;
      if (a->n > MSG_MAX_ARRAY) over(o, "an array is over its limit");
      ob_pack_bin(o, a->n * 8);
      if (a->n && room(o, a->n * 8)) {
        uint8_t *d = o->data + o->len;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(d, a->v, a->n * 8);
#else
        for (size_t k = 0; k < a->n; k++)
          for (int b = 0; b < 8; b++) d[8 * k + (size_t)b] = (uint8_t)(a->v[k] >> (8 * b));
#endif
        o->len += a->n * 8;
      }
      break;
    }
    case FK_STRS: {
      const msg_strs *a = p;
      pack_array(o, a->n);
      for (size_t k = 0; k < a->n; k++) pack_str(o, a->v[k]);
      break;
    }
    case FK_ARR: {
      const any_arr *a = p;
      pack_array(o, a->n);
      for (size_t k = 0; k < a->n; k++) pack_struct(o, f->sub, (const char *)a->v + k * f->sub->size);
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
  ob_pack_array(ob, 5); /* [v, type, job, from, body] */
  ob_pack_uint32(ob, m->v);
  ob_pack_uint32(ob, (uint32_t)m->type);
  ob_pack_uint64(ob, m->job);
  pack_str(ob, m->from);
  pack_struct(ob, msg_body_schema[m->type], &m->body);
  if (ob->too_big || ob->failed || !ob->data) {
    ob->len = start;
    if (ob->lent) msg_lending_return(ob->lent); /* nothing leaves m after all */
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
  outbuf ob = {NULL, 0, 0, 0, false, NULL, NULL};
  int rc = encode_into(m, &ob, err);
  if (rc) {
    free(ob.data);
    return rc;
  }
  *len = ob.len;
  *out = ob.data;
  return SCHEDRUN_OK;
}

int msg_encode_append(msg *m, uint8_t **buf, size_t *len, size_t *cap, msg_lending *lent, schedrun_error_t *err) {
  assert(lent);
  lent->n = 0;
  outbuf ob = {*buf, *len, *cap, *len, false, NULL, lent};
  int rc = encode_into(m, &ob, err);
  *buf = ob.data; /* it may have grown even when the message did not fit */
  *len = ob.len;
  *cap = ob.cap;
  return rc;
}

void msg_lending_return(msg_lending *lent) {
  for (size_t i = 0; i < lent->n; i++) {
    msg_lent *l = &lent->v[i];
    l->slot->data = msg_claim(l->ticket, l->slot->len);
    assert(l->slot->data); /* nobody else knew the ticket */
  }
  lent->n = 0;
}

void msg_lending_reclaim(const msg_lending *lent) {
  for (size_t i = 0; i < lent->n; i++) msg_reclaim(lent->v[i].ticket);
}
