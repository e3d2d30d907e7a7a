/* See msg_parse.h. */
#include <pthread.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "messages/msg.h"
#include "messages/msg_parse.h"

/* ---- the thread's arena: chunks kept from message to message ---- */

typedef struct chunk {
  struct chunk *next;
  size_t cap, used;
  alignas(max_align_t) unsigned char data[];
} chunk;

typedef struct arena {
  chunk *head, *cur;
  size_t total; /* bytes in all chunks */
} arena;

enum { CHUNK_MIN = 16 << 10, ARENA_KEEP = 1 << 20 };

static pthread_key_t arena_key;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;

static void arena_free_chunks(chunk *c) {
  while (c) {
    chunk *next = c->next;
    free(c);
    c = next;
  }
}

static void arena_destroy(void *p) {
  arena *a = p;
  arena_free_chunks(a->head);
  free(a);
}

static void arena_key_init(void) {
  if (pthread_key_create(&arena_key, arena_destroy) != 0) arena_key = (pthread_key_t)-1;
}

static arena *thread_arena(void) {
  pthread_once(&arena_once, arena_key_init);
  if (arena_key == (pthread_key_t)-1) return NULL;
  arena *a = pthread_getspecific(arena_key);
  if (!a && (a = calloc(1, sizeof *a)) && pthread_setspecific(arena_key, a) != 0) {
    free(a);
    a = NULL;
  }
  return a;
}

/* bytes, aligned for msgpack objects, from the current chunk or a later one
 * with room (a new one when none has) */
static void *arena_alloc(arena *a, size_t bytes) {
  bytes = (bytes + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
  chunk *last = NULL;
  for (chunk *c = a->cur; c; c = c->next) {
    if (c->cap - c->used >= bytes) {
      a->cur = c;
      void *p = c->data + c->used;
      c->used += bytes;
      return p;
    }
    last = c;
  }
  size_t cap = bytes > CHUNK_MIN ? bytes : CHUNK_MIN;
  chunk *c = malloc(sizeof *c + cap);
  if (!c) return NULL;
  c->cap = cap;
  c->used = bytes;
  c->next = NULL;
  if (last) last->next = c;
  else a->head = c;
  a->cur = c;
  a->total += cap;
  return c->data;
}

/* Every chunk empty again, for the next message; past ARENA_KEEP bytes (a
 * huge message had them) only the first chunk is kept. */
static void arena_reset(arena *a) {
  if (a->total > ARENA_KEEP && a->head) {
    arena_free_chunks(a->head->next);
    a->head->next = NULL;
    a->total = a->head->cap;
  }
  for (chunk *c = a->head; c; c = c->next) c->used = 0;
  a->cur = a->head;
}

/* ---- the parser ---- */

typedef struct pctx {
  const uint8_t *p;
  size_t n, i;
  uint64_t claimed; /* elements all containers so far claim */
  arena *a;
  const char *why;
} pctx;

static uint64_t be(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int k = 0; k < bytes; k++) v = v << 8 | p[k];
  return v;
}

static bool fail(pctx *c, const char *why) {
  c->why = why;
  return false;
}

/* `bytes` more bytes of payload are there */
static bool have(pctx *c, uint64_t bytes) {
  return bytes <= c->n - c->i ? true : fail(c, "truncated message (a length runs past the end)");
}

static bool parse(pctx *c, msgpack_object *o, int depth);

/* A container of `count` elements (2 * pairs for a map) at `depth`. */
static bool container(pctx *c, msgpack_object *o, bool map, uint64_t pairs, int depth) {
  uint64_t elements = map ? 2 * pairs : pairs;
  o->type = map ? MSGPACK_OBJECT_MAP : MSGPACK_OBJECT_ARRAY;
  if (map) o->via.map.size = (uint32_t)pairs;
  else o->via.array.size = (uint32_t)pairs;
  if (elements == 0) {
    if (map) o->via.map.ptr = NULL;
    else o->via.array.ptr = NULL;
    return true;
  }
  /* every element takes at least one byte: of this container's, and of all
   * the message's (so claims that cannot all be true allocate nothing, even
   * nested: what is allocated stays under one object per byte) */
  c->claimed += elements;
  if (elements > c->n - c->i || c->claimed > c->n)
    return fail(c, "a container claims more elements than there are bytes");
  if (depth >= MSG_MAX_DEPTH) return fail(c, "message nested too deeply");
  if (map) {
    msgpack_object_kv *kv = arena_alloc(c->a, (size_t)pairs * sizeof *kv);
    if (!kv) return fail(c, "out of memory");
    o->via.map.ptr = kv;
    for (uint64_t k = 0; k < pairs; k++)
      if (!parse(c, &kv[k].key, depth + 1) || !parse(c, &kv[k].val, depth + 1)) return false;
  } else {
    msgpack_object *v = arena_alloc(c->a, (size_t)pairs * sizeof *v);
    if (!v) return fail(c, "out of memory");
    o->via.array.ptr = v;
    for (uint64_t k = 0; k < pairs; k++)
      if (!parse(c, &v[k], depth + 1)) return false;
  }
  return true;
}

/* A string, bytes or extension payload of `len` bytes. */
static bool payload(pctx *c, msgpack_object *o, msgpack_object_type type, uint64_t len) {
  if (!have(c, len)) return false;
  o->type = type;
  const char *at = (const char *)c->p + c->i;
  if (type == MSGPACK_OBJECT_STR) o->via.str = (msgpack_object_str){(uint32_t)len, at};
  else if (type == MSGPACK_OBJECT_BIN) o->via.bin = (msgpack_object_bin){(uint32_t)len, at};
  else o->via.ext = (msgpack_object_ext){(int8_t)0, (uint32_t)len, at};
  c->i += (size_t)len;
  return true;
}

/* A length of `bytes` bytes, big-endian. */
static bool length(pctx *c, int bytes, uint64_t *len) {
  if (c->n - c->i < (size_t)bytes) return fail(c, "truncated message");
  *len = be(c->p + c->i, bytes);
  c->i += (size_t)bytes;
  return true;
}

static bool parse(pctx *c, msgpack_object *o, int depth) {
  if (c->i >= c->n) return fail(c, "truncated message");
  uint8_t b = c->p[c->i++];
  uint64_t len = 0;
  if (b <= 0x7f) {
    o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
    o->via.u64 = b;
    return true;
  }
  if (b >= 0xe0) {
    o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
    o->via.i64 = (int8_t)b;
    return true;
  }
  if (b <= 0x8f) return container(c, o, true, b & 0x0f, depth);
  if (b <= 0x9f) return container(c, o, false, b & 0x0f, depth);
  if (b <= 0xbf) return payload(c, o, MSGPACK_OBJECT_STR, b & 0x1f);
  switch (b) {
  case 0xc0: o->type = MSGPACK_OBJECT_NIL; return true;
  case 0xc2: case 0xc3:
    o->type = MSGPACK_OBJECT_BOOLEAN;
    o->via.boolean = b == 0xc3;
    return true;
  case 0xc4: case 0xc5: case 0xc6: /* bin 8, 16, 32 */
    return length(c, 1 << (b - 0xc4), &len) && payload(c, o, MSGPACK_OBJECT_BIN, len);
  case 0xc7: case 0xc8: case 0xc9: /* ext 8, 16, 32: a length, a type byte, the data */
    return length(c, 1 << (b - 0xc7), &len) && have(c, len + 1) && (c->i++, payload(c, o, MSGPACK_OBJECT_EXT, len));
  case 0xca: case 0xcb: /* float 32, 64: no field takes one, so the value is not kept */
    if (!have(c, b == 0xca ? 4 : 8)) return false;
    c->i += b == 0xca ? 4 : 8;
    o->type = b == 0xca ? MSGPACK_OBJECT_FLOAT32 : MSGPACK_OBJECT_FLOAT64;
    o->via.f64 = 0;
    return true;
  case 0xcc: case 0xcd: case 0xce: case 0xcf: { /* uint 8 .. 64 */
    int bytes = 1 << (b - 0xcc);
    if (!have(c, (uint64_t)bytes)) return false;
    o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
    o->via.u64 = be(c->p + c->i, bytes);
    c->i += (size_t)bytes;
    return true;
  }
  case 0xd0: case 0xd1: case 0xd2: case 0xd3: { /* int 8 .. 64 */
    int bytes = 1 << (b - 0xd0);
    if (!have(c, (uint64_t)bytes)) return false;
    uint64_t u = be(c->p + c->i, bytes);
    c->i += (size_t)bytes;
    int64_t v = bytes == 1 ? (int8_t)u : bytes == 2 ? (int16_t)u : bytes == 4 ? (int32_t)u : (int64_t)u;
    /* as msgpack-c: a signed value that is not negative is a positive integer */
    o->type = v < 0 ? MSGPACK_OBJECT_NEGATIVE_INTEGER : MSGPACK_OBJECT_POSITIVE_INTEGER;
    if (v < 0) o->via.i64 = v;
    else o->via.u64 = (uint64_t)v;
    return true;
  }
  case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: /* fixext 1 .. 16: a type byte, the data */
    return have(c, 1) && (c->i++, payload(c, o, MSGPACK_OBJECT_EXT, 1u << (b - 0xd4)));
  case 0xd9: case 0xda: case 0xdb: /* str 8, 16, 32 */
    return length(c, 1 << (b - 0xd9), &len) && payload(c, o, MSGPACK_OBJECT_STR, len);
  case 0xdc: case 0xdd: /* array 16, 32 */
    return length(c, b == 0xdc ? 2 : 4, &len) && container(c, o, false, len, depth);
  case 0xde: case 0xdf: /* map 16, 32 */
    return length(c, b == 0xde ? 2 : 4, &len) && container(c, o, true, len, depth);
  default: return fail(c, "invalid msgpack byte"); /* 0xc1, never used */
  }
}

const char *msg_parse(const uint8_t *p, size_t n, msgpack_object *root) {
  arena *a = thread_arena();
  if (!a) return "out of memory";
  arena_reset(a);
  pctx c = {p, n, 0, 0, a, NULL};
  if (!parse(&c, root, 0)) return c.why;
  if (c.i != n) return "trailing bytes after the message";
  return NULL;
}
