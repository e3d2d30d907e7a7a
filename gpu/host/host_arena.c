/* See host_arena.h. */
#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/host/host_arena.h"

#ifndef NDEBUG
/* The invariant every operation keeps: extents sorted, inside the arena,
 * non-empty and never touching (touching ones are merged). */
static int extents_ok(const host_arena *a) {
  for (uint32_t i = 0; i < a->nfree; i++) {
    const host_extent *e = &a->free[i];
    if (e->len == 0 || e->off + e->len > a->size) return 0;
    if (i && a->free[i - 1].off + a->free[i - 1].len >= e->off) return 0;
  }
  return 1;
}
#endif

int host_arena_init(host_arena *a, uint64_t start, uint64_t size) {
  memset(a, 0, sizeof *a);
  pthread_mutex_init(&a->lock, NULL);
  hmap_init(&a->live, sizeof(uint64_t));
  a->size = size;
  start = (start + HOST_ARENA_ALIGN - 1) / HOST_ARENA_ALIGN * HOST_ARENA_ALIGN;
  a->cap = 16;
  a->free = calloc(a->cap, sizeof *a->free);
  if (!a->free) return -1;
  if (start < size) a->free[a->nfree++] = (host_extent){start, size - start};
  return 0;
}

void host_arena_destroy(host_arena *a) {
  free(a->free);
  hmap_destroy(&a->live);
  pthread_mutex_destroy(&a->lock);
  memset(a, 0, sizeof *a);
}

int host_arena_alloc(host_arena *a, uint64_t bytes, uint64_t *off) {
  if (bytes == 0 || bytes > UINT64_MAX - HOST_ARENA_ALIGN) return -1;
  uint64_t len = (bytes + HOST_ARENA_ALIGN - 1) / HOST_ARENA_ALIGN * HOST_ARENA_ALIGN;
  int rc = -1;
  pthread_mutex_lock(&a->lock);
  for (uint32_t i = 0; i < a->nfree; i++) {
    host_extent *e = &a->free[i];
    if (e->len < len) continue;
    uint64_t at = e->off;
    if (hmap_put(&a->live, &at, (void *)(uintptr_t)len) != 0) break;
    e->off += len;
    e->len -= len;
    if (e->len == 0) {
      memmove(e, e + 1, (a->nfree - i - 1) * sizeof *e);
      a->nfree--;
    }
    a->in_use += len;
    *off = at;
    rc = 0;
    break;
  }
  assert(extents_ok(a));
  pthread_mutex_unlock(&a->lock);
  return rc;
}

uint64_t host_arena_free(host_arena *a, uint64_t off) {
  pthread_mutex_lock(&a->lock);
  uint64_t len = (uint64_t)(uintptr_t)hmap_get(&a->live, &off);
  if (len && a->nfree == a->cap) {
    host_extent *f = realloc(a->free, 2 * a->cap * sizeof *f);
    if (f) {
      a->free = f;
      a->cap *= 2;
    } else {
      len = 0; /* keep the block rather than lose track of it */
    }
  }
  if (len) {
    hmap_remove(&a->live, &off);
    a->in_use -= len;
    uint32_t i = 0; /* the first extent after the block */
    while (i < a->nfree && a->free[i].off < off) i++;
    bool joins_prev = i > 0 && a->free[i - 1].off + a->free[i - 1].len == off;
    bool joins_next = i < a->nfree && off + len == a->free[i].off;
    if (joins_prev && joins_next) {
      a->free[i - 1].len += len + a->free[i].len;
      memmove(&a->free[i], &a->free[i + 1], (a->nfree - i - 1) * sizeof *a->free);
      a->nfree--;
    } else if (joins_prev) {
      a->free[i - 1].len += len;
    } else if (joins_next) {
      a->free[i].off = off;
      a->free[i].len += len;
    } else {
      memmove(&a->free[i + 1], &a->free[i], (a->nfree - i) * sizeof *a->free);
      a->free[i] = (host_extent){off, len};
      a->nfree++;
    }
  }
  assert(extents_ok(a));
  pthread_mutex_unlock(&a->lock);
  return len;
}

uint64_t host_arena_size_of(host_arena *a, uint64_t off) {
  pthread_mutex_lock(&a->lock);
  uint64_t len = (uint64_t)(uintptr_t)hmap_get(&a->live, &off);
  pthread_mutex_unlock(&a->lock);
  return len;
}
