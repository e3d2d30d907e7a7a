/* See msg_parse.h. */
#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "messages/msg.h"
#include "messages/msg_parse.h"

/* ---- the thread's zone, kept from message to message ---- */

enum { ZONE_CHUNK = 16 << 10 };

static pthread_key_t zone_key;
static pthread_once_t zone_once = PTHREAD_ONCE_INIT;

static void zone_destroy(void *z) { msgpack_zone_free(z); }

static void zone_key_init(void) {
  if (pthread_key_create(&zone_key, zone_destroy) != 0) zone_key = (pthread_key_t)-1;
}

static msgpack_zone *thread_zone(void) {
  pthread_once(&zone_once, zone_key_init);
  if (zone_key == (pthread_key_t)-1) return NULL;
  msgpack_zone *z = pthread_getspecific(zone_key);
  if (!z && (z = msgpack_zone_new(ZONE_CHUNK)) && pthread_setspecific(zone_key, z) != 0) {
    msgpack_zone_free(z);
    z = NULL;
  }
  return z;
}

/* ---- the scan ---- */

static uint64_t be(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int k = 0; k < bytes; k++) v = v << 8 | p[k];
  return v;
}

/* What follows a type byte: `head` bytes of length (or value), then, for a
 * payload, that many bytes plus `extra` (an extension's type byte); for a
 * container, that many elements (twice as many for a map). */
typedef enum { K_FIXED, K_PAYLOAD, K_ARRAY, K_MAP, K_BAD } kind;

static kind classify(uint8_t b, int *head, uint64_t *fixed, int *extra) {
  *head = 0;
  *fixed = 0;
  *extra = 0;
  if (b <= 0x7f || b >= 0xe0) return K_FIXED;
  if (b <= 0x8f) return (*fixed = b & 0x0f), K_MAP;
  if (b <= 0x9f) return (*fixed = b & 0x0f), K_ARRAY;
  if (b <= 0xbf) return (*fixed = b & 0x1f), K_PAYLOAD;
  switch (b) {
  case 0xc0: case 0xc2: case 0xc3: return K_FIXED;
  case 0xc4: case 0xc5: case 0xc6: return (*head = 1 << (b - 0xc4)), K_PAYLOAD; /* bin 8, 16, 32 */
  case 0xc7: case 0xc8: case 0xc9: return (*head = 1 << (b - 0xc7)), (*extra = 1), K_PAYLOAD; /* ext */
  case 0xca: return (*fixed = 4), K_PAYLOAD; /* float 32 */
  case 0xcb: return (*fixed = 8), K_PAYLOAD; /* float 64 */
  case 0xcc: case 0xcd: case 0xce: case 0xcf: return (*fixed = 1u << (b - 0xcc)), K_PAYLOAD; /* uint */
  case 0xd0: case 0xd1: case 0xd2: case 0xd3: return (*fixed = 1u << (b - 0xd0)), K_PAYLOAD; /* int */
  case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: return (*fixed = 1 + (1u << (b - 0xd4))), K_PAYLOAD;
  case 0xd9: case 0xda: case 0xdb: return (*head = 1 << (b - 0xd9)), K_PAYLOAD; /* str 8, 16, 32 */
  case 0xdc: case 0xdd: return (*head = b == 0xdc ? 2 : 4), K_ARRAY;
  case 0xde: case 0xdf: return (*head = b == 0xde ? 2 : 4), K_MAP;
  default: return K_BAD; /* 0xc1, never used */
  }
}

const char *msg_scan(const uint8_t *p, size_t n) {
  /* left[d]: objects still to read in the container open at depth d
   * (left[0]: the message itself, one object) */
  uint64_t left[MSG_MAX_DEPTH + 1];
  int depth = 0;
  left[0] = 1;
  uint64_t claimed = 0; /* elements all containers so far claim */
  size_t i = 0;
  while (depth >= 0) {
    if (left[depth] == 0) {
      depth--;
      continue;
    }
    left[depth]--;
    if (i >= n) return "truncated message";
    int head, extra;
    uint64_t len;
    kind k = classify(p[i++], &head, &len, &extra);
    if (k == K_BAD) return "invalid msgpack byte";
    if (head) {
      if (n - i < (size_t)head) return "truncated message";
      len = be(p + i, head);
      i += (size_t)head;
    }
    if (k == K_PAYLOAD) {
      if (len + (uint64_t)extra > n - i) return "truncated message (a length runs past the end)";
      i += (size_t)(len + (uint64_t)extra);
    } else if (k == K_ARRAY || k == K_MAP) {
      uint64_t elements = k == K_MAP ? 2 * len : len;
      if (elements == 0) continue;
      /* every element takes at least one byte: of this container's, and of
       * all the message's (so claims that cannot all be true allocate
       * nothing, even nested: msgpack-c's tree stays under one object per
       * byte) */
      claimed += elements;
      if (elements > n - i || claimed > n) return "a container claims more elements than there are bytes";
      if (depth >= MSG_MAX_DEPTH) return "message nested too deeply";
      left[++depth] = elements;
    }
  }
  if (i != n) return "trailing bytes after the message";
  return NULL;
}

const char *msg_parse(const uint8_t *p, size_t n, msgpack_object *root) {
  const char *why = msg_scan(p, n);
  if (why) return why;
  msgpack_zone *z = thread_zone();
  if (!z) return "out of memory";
  msgpack_zone_clear(z);
  size_t off = 0;
  msgpack_unpack_return r = msgpack_unpack((const char *)p, n, &off, z, root);
  if (r == MSGPACK_UNPACK_NOMEM_ERROR) return "out of memory";
  /* the scan has checked what msgpack-c checks, and more */
  assert(r == MSGPACK_UNPACK_SUCCESS && off == n);
  if (r != MSGPACK_UNPACK_SUCCESS || off != n) return "msgpack-c refused the message";
  return NULL;
}
