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

/* msgpack-c's write callback, once per value: appends n bytes, or marks the
 * buffer failed (the packer's later writes are then dropped). The usual
 * write is a few bytes into room there is, copied inline. */
static int ob_write(void *data, const char *buf, size_t n) {
  outbuf *o = data;
  if (o->failed) return -1;
  if ((n > o->cap - o->len || o->len - o->start + n > MSG_MAX_BYTES) && !room(o, n)) return -1;
  uint8_t *d = o->data + o->len;
  /* the packer writes a value's header or a number at a time, 1 to 9
   * bytes: copies of a constant size, without a call */
  switch (n) {
  case 1: d[0] = (uint8_t)buf[0]; break;
  case 2: memcpy(d, buf, 2); break;
  case 3: memcpy(d, buf, 3); break;
  case 5: memcpy(d, buf, 5); break;
  case 9: memcpy(d, buf, 9); break;
  default: memcpy(d, buf, n); break;
  }
  o->len += n;
  return 0;
}

/* The packer writes into an outbuf (its data). */
static outbuf *out_of(msgpack_packer *pk) { return pk->data; }

static void pack_str(msgpack_packer *pk, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > MSG_MAX_STRING) over(out_of(pk), "a string is over 16 MiB");
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s ? s : "", n);
}

static void pack_array(msgpack_packer *pk, size_t n) {
  if (n > MSG_MAX_ARRAY) over(out_of(pk), "an array is over its limit");
  msgpack_pack_array(pk, n);
}

/* Lends b's block (msg.h, "Lent bytes"): its ticket and length in an
 * extension, the block out of the message, the ticket in o->lent. */
static void lend(msgpack_packer *pk, outbuf *o, msg_bytes *b) {
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
  msgpack_pack_ext(pk, sizeof body, MSG_EXT_LENT);
  msgpack_pack_ext_body(pk, body, sizeof body);
}

static void pack_struct(msgpack_packer *pk, const schema *s, const void *base) {
  msgpack_pack_array(pk, s->nfields); /* the fields' values, in the schema's order */
  for (size_t i = 0; i < s->nfields; i++) {
    const field *f = &s->fields[i];
    const void *p = (const char *)base + f->off;
    switch (f->kind) {
    case FK_U32: msgpack_pack_uint32(pk, *(const uint32_t *)p); break;
    case FK_I32: msgpack_pack_int32(pk, *(const int32_t *)p); break;
    case FK_U64: msgpack_pack_uint64(pk, *(const uint64_t *)p); break;
    case FK_I64: msgpack_pack_int64(pk, *(const int64_t *)p); break;
    case FK_STR: pack_str(pk, *(char *const *)p); break;
    case FK_BIN: {
      const msg_bytes *b = p;
      outbuf *o = out_of(pk);
      if (b->len && !b->data) {
        over(o, "its bytes were lent already (a message is sent once)");
      } else if (o->lent && b->len >= MSG_LEND_MIN) {
        lend(pk, o, (msg_bytes *)(uintptr_t)b); /* the encoder's to take: msg_encode_append has m writable */
      } else {
        msgpack_pack_bin(pk, b->len);
        if (b->len) msgpack_pack_bin_body(pk, b->data, b->len);
      }
      break;
    }
    case FK_U64S: {
      /* a column: bytes, 8 per element, little-endian (msg.h) */
      const msg_u64s *a = p;
      outbuf *o = out_of(pk);
      if (a->n > MSG_MAX_ARRAY) over(o, "an array is over its limit");
      msgpack_pack_bin(pk, a->n * 8);
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
      pack_array(pk, a->n);
      for (size_t k = 0; k < a->n; k++) pack_str(pk, a->v[k]);
      break;
    }
    case FK_ARR: {
      const any_arr *a = p;
      pack_array(pk, a->n);
      for (size_t k = 0; k < a->n; k++) pack_struct(pk, f->sub, (const char *)a->v + k * f->sub->size);
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
  msgpack_packer pk;
  msgpack_packer_init(&pk, ob, ob_write);
  msgpack_pack_array(&pk, 5); /* [v, type, job, from, body] */
  msgpack_pack_uint32(&pk, m->v);
  msgpack_pack_uint32(&pk, (uint32_t)m->type);
  msgpack_pack_uint64(&pk, m->job);
  pack_str(&pk, m->from);
  pack_struct(&pk, msg_body_schema[m->type], &m->body);
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
