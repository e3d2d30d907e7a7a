/*
 * Decoding: msgpack-c's unpacker, its state machine (unpack_template.h, the
 * code behind msgpack_unpack), instantiated with callbacks that check each
 * value against what the message's schema expects where it stands and
 * write it into the message at once. One pass over the bytes: no tree of
 * msgpack objects, no zone, no pass before it.
 *
 * The unpacker calls back in the order of the bytes: a value (a number, a
 * string, the header of an array) as it is read, and `array_item` when a
 * value inside an array is complete. The visitor keeps a stack of what it
 * is filling (the envelope, a struct, an array of strings or of structs)
 * beside the unpacker's own, and each value takes the next place in the
 * innermost one. What the schema does not expect there is refused where it
 * is read, with the field named, so nothing deeper than a schema can be
 * built and the unpacker's stack never grows past it.
 *
 * A container's header claims a number of elements, each at least one
 * byte: claims are added up over the message and refused past its length
 * before anything is allocated, so a 5-byte message claiming 2^32 elements
 * allocates nothing. Strings and bytes are checked by the unpacker to lie
 * within the message before they are called back.
 */
#include <assert.h>
#include <msgpack.h>
#include <msgpack/unpack_define.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "messages/msg_decode.h"
#include "messages/msg_schema.h"

/* ---- what is being filled ---- */

typedef enum { VF_ROOT, VF_ENVELOPE, VF_STRUCT, VF_STRS, VF_ARR } vframe_kind;

typedef struct vframe {
  vframe_kind kind;
  const schema *s; /* VF_STRUCT: its schema; VF_ARR: its elements' */
  const field *f;  /* VF_STRS, VF_ARR: the field they fill */
  void *base;      /* VF_STRUCT: the struct; VF_STRS, VF_ARR: the array */
  uint32_t next;   /* the next value's place */
  uint32_t left;   /* values not yet complete */
} vframe;

/* root, envelope, body, an array of structs, one of its structs */
enum { VISIT_DEPTH = 5 };

typedef struct visitor {
  msg *m;
  schedrun_error_t *err;
  const char *type; /* the message's, for errors: "?" until its body */
  bool local;       /* lent blocks may be claimed */
  int rc;           /* the first error's code */
  size_t len;
  uint64_t claimed; /* elements all containers so far claim */
  int depth;
  vframe f[VISIT_DEPTH];
} visitor;

/* Where the next value goes. */
typedef enum { S_ROOT, S_V, S_TYPE, S_JOB, S_FROM, S_BODY, S_FIELD, S_STR_ELEM, S_STRUCT_ELEM } slot_kind;

typedef struct slot {
  slot_kind kind;
  const field *f;  /* S_FIELD: the field; S_STR_ELEM, S_STRUCT_ELEM: the array's */
  const schema *s; /* S_BODY, S_STRUCT_ELEM: the struct's schema */
  void *p;         /* where the value goes */
  void *arr;       /* S_STR_ELEM, S_STRUCT_ELEM: the array it goes into */
} slot;

static int fail(visitor *v, const char *where, const char *what) {
  v->rc = err_set(v->err, SCHEDRUN_EPROTO, "malformed %s message: %s: %s", v->type, where, what);
  return -1;
}

static int out_of_memory(visitor *v) {
  v->rc = err_set(v->err, SCHEDRUN_ENOMEM, "out of memory decoding %s", v->type);
  return -1;
}

/* Takes the next place of the innermost thing being filled. */
static void next_slot(visitor *v, slot *s) {
  vframe *t = &v->f[v->depth - 1];
  uint32_t i = t->next++;
  s->kind = S_ROOT;
  s->f = NULL;
  s->s = NULL;
  s->p = s->arr = NULL;
  switch (t->kind) {
  case VF_ROOT:
    return;
  case VF_ENVELOPE: {
    static const slot_kind env[] = {S_V, S_TYPE, S_JOB, S_FROM, S_BODY};
    assert(i < SCHEDRUN__ARRAY_LEN(env)); /* the envelope's header said 5 */
    s->kind = env[i];
    if (s->kind == S_BODY) s->s = msg_body_schema[v->m->type];
    return;
  }
  case VF_STRUCT:
    assert(i < t->s->nfields); /* its header said nfields */
    s->kind = S_FIELD;
    s->f = &t->s->fields[i];
    s->p = (char *)t->base + s->f->off;
    return;
  case VF_STRS:
    s->kind = S_STR_ELEM;
    s->f = t->f;
    s->arr = t->base;
    s->p = &((msg_strs *)t->base)->v[i];
    return;
  case VF_ARR:
    s->kind = S_STRUCT_ELEM;
    s->f = t->f;
    s->s = t->s;
    s->arr = t->base;
    s->p = (char *)((any_arr *)t->base)->v + (size_t)i * t->s->size;
    return;
  }
}

static void push(visitor *v, vframe_kind kind, const schema *s, const field *f, void *base, uint32_t n) {
  assert(v->depth < VISIT_DEPTH); /* no schema nests deeper */
  v->f[v->depth++] = (vframe){kind, s, f, base, 0, n};
}

/* A value of the wrong type at s. */
static int wrong(visitor *v, const slot *s) {
  switch (s->kind) {
  case S_ROOT: return fail(v, "envelope", "expected an array of v, type, job, from, body");
  case S_V: return fail(v, "v", "expected an integer");
  case S_TYPE: return fail(v, "type", "expected an integer");
  case S_JOB: return fail(v, "job", "expected an integer");
  case S_FROM: return fail(v, "from", "expected a string");
  case S_BODY:
  case S_STRUCT_ELEM: return fail(v, s->s->name, "expected an array of its fields");
  case S_STR_ELEM: return fail(v, s->f->name, "expected a string");
  case S_FIELD: break;
  }
  switch (s->f->kind) {
  case FK_U32: case FK_I32: case FK_U64: case FK_I64: return fail(v, s->f->name, "expected an integer");
  case FK_STR: return fail(v, s->f->name, "expected a string");
  case FK_BIN: return fail(v, s->f->name, "expected bytes");
  case FK_U64S: return fail(v, s->f->name, "expected a column (bytes)");
  case FK_STRS: case FK_ARR: return fail(v, s->f->name, "expected an array");
  }
  return fail(v, s->f->name, "unknown field kind");
}

/* ---- the values ---- */

/* An integer into field f at p. */
static inline int int_field(visitor *v, const field *f, void *p, bool neg, uint64_t u, int64_t sv) {
  const char *w = f->name;
  switch (f->kind) {
  case FK_U32:
    if (neg || u > UINT32_MAX) return fail(v, w, "integer out of range");
    *(uint32_t *)p = (uint32_t)u;
    return 0;
  case FK_I32:
    if (neg ? sv < INT32_MIN : u > INT32_MAX) return fail(v, w, "integer out of range");
    *(int32_t *)p = neg ? (int32_t)sv : (int32_t)u;
    return 0;
  case FK_U64:
    if (neg) return fail(v, w, "integer out of range");
    *(uint64_t *)p = u;
    return 0;
  case FK_I64:
    if (!neg && u > INT64_MAX) return fail(v, w, "integer out of range");
    *(int64_t *)p = neg ? sv : (int64_t)u;
    return 0;
  default: {
    slot s = {S_FIELD, f, NULL, p, NULL};
    return wrong(v, &s);
  }
  }
}

/* An integer: u when it is not negative, else sv. */
static int on_int(visitor *v, bool neg, uint64_t u, int64_t sv) {
  vframe *t = &v->f[v->depth - 1];
  if (t->kind == VF_STRUCT) { /* most values: a struct's field */
    assert(t->next < t->s->nfields);
    const field *f = &t->s->fields[t->next++];
    return int_field(v, f, (char *)t->base + f->off, neg, u, sv);
  }
  slot s;
  next_slot(v, &s);
  msg *m = v->m;
  switch (s.kind) {
  case S_V:
    if (neg || u > UINT32_MAX) return fail(v, "v", "integer out of range");
    m->v = (uint32_t)u;
    return u == MSG_VERSION ? 0 : fail(v, "v", "unsupported version");
  case S_TYPE:
    if (neg || u > UINT32_MAX) return fail(v, "type", "integer out of range");
    if (u == 0 || u >= MSG__END) return fail(v, "type", "unknown message type");
    m->type = (int)u;
    return 0;
  case S_JOB:
    if (neg) return fail(v, "job", "integer out of range");
    m->job = u;
    return 0;
  default: return wrong(v, &s);
  }
}

static int on_other(visitor *v) { /* nil, true, false, a float */
  slot s;
  next_slot(v, &s);
  return wrong(v, &s);
}

static int copy_str(visitor *v, const char *where, const char *p, size_t l, char **out) {
  if (l > MSG_MAX_STRING) return fail(v, where, "string too long");
  if (!(*out = malloc(l + 1))) return out_of_memory(v);
  if (l) memcpy(*out, p, l); /* an empty one may have no bytes */
  (*out)[l] = '\0';
  return 0;
}

static int on_str(visitor *v, const char *p, size_t l) {
  slot s;
  next_slot(v, &s);
  if (s.kind == S_FROM) return copy_str(v, "from", p, l, &v->m->from);
  if (s.kind == S_STR_ELEM) {
    msg_strs *a = s.arr;
    if (copy_str(v, s.f->name, p, l, s.p)) return -1;
    a->n++;
    return 0;
  }
  if (s.kind == S_FIELD && s.f->kind == FK_STR) return copy_str(v, s.f->name, p, l, s.p);
  return wrong(v, &s);
}

static int on_bin(visitor *v, const char *p, size_t l) {
  slot s;
  next_slot(v, &s);
  if (s.kind != S_FIELD) return wrong(v, &s);
  const char *w = s.f->name;
  if (s.f->kind == FK_BIN) {
    msg_bytes *b = s.p;
    b->len = l;
    if (!(b->data = msg_bytes_alloc(l))) return out_of_memory(v);
    if (l) memcpy(b->data, p, l);
    return 0;
  }
  if (s.f->kind != FK_U64S) return wrong(v, &s);
  /* a column: bytes, 8 per element, little-endian (msg.h) */
  msg_u64s *a = s.p;
  if (l % 8) return fail(v, w, "a column's length is not a multiple of 8 bytes");
  size_t n = l / 8;
  if (n > MSG_MAX_ARRAY) return fail(v, w, "array too long");
  if (n == 0) return 0;
  if (!(a->v = malloc(n * sizeof *a->v))) return out_of_memory(v);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(a->v, p, l);
#else
  const uint8_t *b = (const uint8_t *)p;
  for (size_t k = 0; k < n; k++) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | b[8 * k + (size_t)i];
    a->v[k] = x;
  }
#endif
  a->n = n;
  return 0;
}

/* An extension (p: its type byte, then its l - 1 bytes): only lent bytes
 * (msg.h, "Lent bytes"), where bytes go, claimed from the table and owned
 * by the message from now on. */
static int on_ext(visitor *v, const char *p, size_t l) {
  slot s;
  next_slot(v, &s);
  if (s.kind != S_FIELD || s.f->kind != FK_BIN) return wrong(v, &s);
  const char *w = s.f->name;
  if (!v->local) return fail(v, w, "lent bytes cannot come from another process");
  if (l != 17 || (int8_t)p[0] != MSG_EXT_LENT) return fail(v, w, "expected bytes");
  const uint8_t *e = (const uint8_t *)p + 1;
  uint64_t t = 0, len = 0;
  for (int i = 0; i < 8; i++) {
    t |= (uint64_t)e[i] << (8 * i);
    len |= (uint64_t)e[8 + i] << (8 * i);
  }
  msg_bytes *b = s.p;
  if (len > SIZE_MAX || !(b->data = msg_claim(t, (size_t)len)))
    return fail(v, w, "names lent bytes that are not lent (claimed already, or never lent)");
  b->len = (size_t)len;
  return 0;
}

/* A container's elements, each at least a byte, all claims together
 * within the message. */
static int claim(visitor *v, uint64_t elements) {
  v->claimed += elements;
  return v->claimed > v->len ? fail(v, "envelope", "a container claims more elements than there are bytes") : 0;
}

/* A struct's array of n fields at s, into base. */
static int open_struct(visitor *v, const schema *sc, uint32_t n, void *base) {
  if (n != sc->nfields) {
    char what[80];
    snprintf(what, sizeof what, "expected %zu field%s, got %u", sc->nfields, sc->nfields == 1 ? "" : "s", n);
    return fail(v, sc->name, what);
  }
  if (n) push(v, VF_STRUCT, sc, NULL, base, n);
  return 0;
}

static int on_array(visitor *v, uint32_t n) {
  if (claim(v, n)) return -1;
  slot s;
  next_slot(v, &s);
  switch (s.kind) {
  case S_ROOT:
    if (n != 5) return wrong(v, &s);
    push(v, VF_ENVELOPE, NULL, NULL, NULL, n);
    return 0;
  case S_BODY:
    v->type = msg_type_name(v->m->type);
    return open_struct(v, s.s, n, &v->m->body);
  case S_STRUCT_ELEM:
    ((any_arr *)s.arr)->n++; /* counted first, so that a failure inside frees it */
    return open_struct(v, s.s, n, s.p);
  case S_FIELD: break;
  default: return wrong(v, &s);
  }
  if (s.f->kind != FK_STRS && s.f->kind != FK_ARR) return wrong(v, &s);
  if (n > MSG_MAX_ARRAY) return fail(v, s.f->name, "array too long");
  any_arr *a = s.p; /* msg_strs has the same layout */
  if (n == 0) return 0;
  size_t elem = s.f->kind == FK_STRS ? sizeof(char *) : s.f->sub->size;
  if (!(a->v = calloc(n, elem))) return out_of_memory(v);
  push(v, s.f->kind == FK_STRS ? VF_STRS : VF_ARR, s.f->sub, s.f, a, n);
  return 0;
}

static int on_map(visitor *v, uint32_t n) {
  if (claim(v, 2 * (uint64_t)n)) return -1;
  return on_other(v);
}

/* A value inside the innermost container is complete. */
static int on_item(visitor *v) {
  vframe *t = &v->f[v->depth - 1];
  assert(t->kind != VF_ROOT && t->left > 0);
  if (--t->left == 0) v->depth--;
  return 0;
}

/* ---- msgpack-c's unpacker, calling the above ---- */

typedef int visit_object; /* nothing is built: each callback leaves a 0 */

static inline visit_object visit_root(visitor *v) {
  (void)v;
  return 0;
}
#define VISIT_UINT(bits)                                                                     \
  static inline int visit_uint##bits(visitor *v, uint##bits##_t d, visit_object *o) {        \
    *o = 0;                                                                                 \
    return on_int(v, false, d, 0);                                                           \
  }                                                                                          \
  static inline int visit_int##bits(visitor *v, int##bits##_t d, visit_object *o) {          \
    *o = 0;                                                                                 \
    return d < 0 ? on_int(v, true, 0, d) : on_int(v, false, (uint64_t)d, 0);                \
  }
VISIT_UINT(8)
VISIT_UINT(16)
VISIT_UINT(32)
VISIT_UINT(64)
static inline int visit_float(visitor *v, float d, visit_object *o) {
  (void)d, *o = 0;
  return on_other(v);
}
static inline int visit_double(visitor *v, double d, visit_object *o) {
  (void)d, *o = 0;
  return on_other(v);
}
static inline int visit_nil(visitor *v, visit_object *o) {
  *o = 0;
  return on_other(v);
}
static inline int visit_true(visitor *v, visit_object *o) {
  *o = 0;
  return on_other(v);
}
static inline int visit_false(visitor *v, visit_object *o) {
  *o = 0;
  return on_other(v);
}
static inline int visit_array(visitor *v, unsigned int n, visit_object *o) {
  *o = 0;
  return on_array(v, n);
}
static inline int visit_array_item(visitor *v, visit_object *c, visit_object o) {
  (void)c, (void)o;
  return on_item(v);
}
static inline int visit_map(visitor *v, unsigned int n, visit_object *o) {
  *o = 0;
  return on_map(v, n);
}
static inline int visit_map_item(visitor *v, visit_object *c, visit_object k, visit_object val) {
  (void)v, (void)c, (void)k, (void)val;
  assert(0); /* on_map refused every map */
  return -1;
}
#define VISIT_VARIABLE(what)                                                                                  \
  static inline int visit_##what(visitor *v, const char *b, const char *p, unsigned int l, visit_object *o) { \
    (void)b, *o = 0;                                                                                         \
    return on_##what(v, p, l);                                                                                \
  }
VISIT_VARIABLE(str)
VISIT_VARIABLE(bin)
VISIT_VARIABLE(ext)

#define msgpack_unpack_struct(name) struct visit##name
#define msgpack_unpack_func(ret, name) static inline ret visit##name
#define msgpack_unpack_callback(name) visit##name
#define msgpack_unpack_object visit_object
#define msgpack_unpack_user visitor
#include <msgpack/unpack_template.h>

int msg_visit(const uint8_t *p, size_t n, msg *m, bool local, schedrun_error_t *err) {
  struct visit_context ctx;
  visit_init(&ctx);
  ctx.user = (visitor){.m = m, .err = err, .type = "?", .local = local, .len = n, .depth = 1};
  ctx.user.f[0] = (vframe){VF_ROOT, NULL, NULL, NULL, 0, 1};
  size_t off = 0;
  int r = visit_execute(&ctx, (const char *)p, n, &off);
  visitor *v = &ctx.user;
  if (v->rc) return v->rc;
  const char *why = r == 0                          ? "truncated message"
                    : r == MSGPACK_UNPACK_PARSE_ERROR ? "invalid msgpack byte"
                    : r < 0                           ? "message nested too deeply"
                    : off != n                        ? "trailing bytes after the message"
                                                      : NULL;
  if (why) {
    fail(v, "envelope", why);
    return v->rc;
  }
  assert(v->depth == 1); /* everything opened was completed */
  return SCHEDRUN_OK;
}
