/*
 * A hash map from fixed-size keys (compared byte for byte) to pointers.
 * Chained buckets; the table doubles when the load passes 1. Keys are copied
 * into the entries; values belong to the caller. Not thread-safe: every map
 * lives inside one actor or behind its owner's lock.
 */
#ifndef SCHEDRUN_HMAP_H
#define SCHEDRUN_HMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct hmap_entry hmap_entry;
typedef struct hmap {
  size_t key_size;
  hmap_entry **buckets;
  size_t nbuckets, count;
} hmap;

void hmap_init(hmap *h, size_t key_size);
/* Frees the table; values are the caller's to free first (see hmap_next). */
void hmap_destroy(hmap *h);
void *hmap_get(const hmap *h, const void *key);
/* Inserts or replaces; returns 0, or -1 when out of memory. */
int hmap_put(hmap *h, const void *key, void *val);
/* Removes and returns the value (NULL when absent). */
void *hmap_remove(hmap *h, const void *key);
/* Iterates: start with *pos = 0; returns 0 at the end. The map must not change
 * during an iteration. */
int hmap_next(const hmap *h, size_t *pos, const void **key, void **val);

#endif
