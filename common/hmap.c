/* See hmap.h. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/hmap.h"

struct hmap_entry {
  hmap_entry *next;
  void *val;
  uint64_t hash;
  unsigned char key[]; /* key_size bytes */
};

void hmap_init(hmap *h, size_t key_size) {
  memset(h, 0, sizeof *h);
  h->key_size = key_size;
}

void hmap_destroy(hmap *h) {
  for (size_t i = 0; i < h->nbuckets; i++) {
    hmap_entry *e = h->buckets[i];
    while (e) {
      hmap_entry *n = e->next;
      free(e);
      e = n;
    }
  }
  free(h->buckets);
  hmap_init(h, h->key_size);
}

static hmap_entry **find(const hmap *h, const void *key, uint64_t hash) {
  if (!h->nbuckets) return NULL;
  hmap_entry **pp = &h->buckets[hash & (h->nbuckets - 1)];
  while (*pp && !((*pp)->hash == hash && memcmp((*pp)->key, key, h->key_size) == 0))
    pp = &(*pp)->next;
  return pp;
}

void *hmap_get(const hmap *h, const void *key) {
  hmap_entry **pp = find(h, key, hash_fnv1a(key, h->key_size));
  return pp && *pp ? (*pp)->val : NULL;
}

static int grow(hmap *h) {
  size_t nb = h->nbuckets ? h->nbuckets * 2 : 16;
  hmap_entry **b = calloc(nb, sizeof *b);
  if (!b) return -1;
  for (size_t i = 0; i < h->nbuckets; i++) {
    hmap_entry *e = h->buckets[i];
    while (e) {
      hmap_entry *n = e->next;
      e->next = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
      e = n;
    }
  }
  free(h->buckets);
  h->buckets = b;
  h->nbuckets = nb;
  return 0;
}

int hmap_put(hmap *h, const void *key, void *val) {
  uint64_t hash = hash_fnv1a(key, h->key_size);
  hmap_entry **pp = find(h, key, hash);
  if (pp && *pp) {
    (*pp)->val = val;
    return 0;
  }
  if (h->count + 1 > h->nbuckets && grow(h) != 0) return -1;
  hmap_entry *e = malloc(sizeof *e + h->key_size);
  if (!e) return -1;
  memcpy(e->key, key, h->key_size);
  e->hash = hash;
  e->val = val;
  size_t i = hash & (h->nbuckets - 1);
  e->next = h->buckets[i];
  h->buckets[i] = e;
  h->count++;
  return 0;
}

void *hmap_remove(hmap *h, const void *key) {
  hmap_entry **pp = find(h, key, hash_fnv1a(key, h->key_size));
  if (!pp || !*pp) return NULL;
  hmap_entry *e = *pp;
  void *v = e->val;
  *pp = e->next;
  free(e);
  h->count--;
  return v;
}

/* pos encodes bucket << 20 | index in the bucket's chain (chains are short). */
int hmap_next(const hmap *h, size_t *pos, const void **key, void **val) {
  size_t b = *pos >> 20, k = *pos & 0xfffff;
  for (; b < h->nbuckets; b++, k = 0) {
    hmap_entry *e = h->buckets[b];
    for (size_t i = 0; e && i < k; i++) e = e->next;
    if (e) {
      *pos = (b << 20) | (k + 1);
      if (key) *key = e->key;
      if (val) *val = e->val;
      return 1;
    }
  }
  *pos = h->nbuckets << 20;
  return 0;
}
