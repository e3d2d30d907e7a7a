/*
 * A map from 64-bit ids (not 0, not UINT64_MAX) to pointers, for ids handed
 * out in sequence (jobs): open addressing with linear probing, slot = id
 * modulo the table's size, so the ids in flight at once sit next to each
 * other in one array and a lookup costs one cache line, however many are in
 * flight. A removed entry leaves a marker that lookups probe past (shifting
 * entries back instead would scan the whole window of ids in flight, one
 * run of occupied slots, on every removal); the table is rebuilt, without
 * markers, when used and removed slots pass half of it. Not thread-safe:
 * every map lives inside one actor or behind its owner's lock.
 */
#ifndef SCHEDRUN_IDMAP_H
#define SCHEDRUN_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct idmap_slot {
  uint64_t id; /* 0: empty */
  void *val;
} idmap_slot;

typedef struct idmap {
  idmap_slot *slots;
  size_t cap, count; /* cap: 0 or a power of two */
  size_t gone;       /* slots marked removed */
} idmap;

void idmap_init(idmap *m);
/* Frees the table; values are the caller's to free first (see idmap_next). */
void idmap_destroy(idmap *m);
void *idmap_get(const idmap *m, uint64_t id);
/* Inserts or replaces; returns 0, or -1 when out of memory. */
int idmap_put(idmap *m, uint64_t id, void *val);
/* Removes and returns the value (NULL when absent). */
void *idmap_remove(idmap *m, uint64_t id);
/* Iterates: start with *pos = 0; returns 0 at the end. The map must not
 * change during an iteration. */
int idmap_next(const idmap *m, size_t *pos, uint64_t *id, void **val);

#endif
