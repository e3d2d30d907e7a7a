/* See idmap.h. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/idmap.h"

#define EMPTY 0
#define GONE UINT64_MAX /* a removed entry: lookups probe past it */

void idmap_init(idmap *m) { memset(m, 0, sizeof *m); }

void idmap_destroy(idmap *m) {
  free(m->slots);
  idmap_init(m);
}

static bool live(uint64_t id) { return id != EMPTY && id != GONE; }

/* The slot holding id, else SIZE_MAX. */
static size_t find(const idmap *m, uint64_t id) {
  if (!m->cap || !live(id)) return SIZE_MAX;
  size_t mask = m->cap - 1;
  for (size_t i = (size_t)id & mask;; i = (i + 1) & mask) {
    if (m->slots[i].id == id) return i;
    if (m->slots[i].id == EMPTY) return SIZE_MAX;
  }
}

void *idmap_get(const idmap *m, uint64_t id) {
  size_t i = find(m, id);
  return i == SIZE_MAX ? NULL : m->slots[i].val;
}

/* A table of `cap` slots with the live entries only. */
static int rehash(idmap *m, size_t cap) {
  idmap_slot *fresh = calloc(cap, sizeof *fresh);
  if (!fresh) return -1;
  size_t mask = cap - 1;
  for (size_t i = 0; i < m->cap; i++) {
    if (!live(m->slots[i].id)) continue;
    size_t j = (size_t)m->slots[i].id & mask;
    while (fresh[j].id != EMPTY) j = (j + 1) & mask;
    fresh[j] = m->slots[i];
  }
  free(m->slots);
  m->slots = fresh;
  m->cap = cap;
  m->gone = 0;
  return 0;
}

int idmap_put(idmap *m, uint64_t id, void *val) {
  assert(live(id)); /* 0 and UINT64_MAX mark empty and removed slots */
  size_t at = find(m, id);
  if (at != SIZE_MAX) {
    m->slots[at].val = val;
    return 0;
  }
  /* at most half the slots used or removed: probes stay short */
  if (2 * (m->count + m->gone + 1) > m->cap) {
    size_t cap = m->cap ? m->cap : 64;
    while (4 * (m->count + 1) > cap) cap *= 2; /* a quarter full after */
    if (rehash(m, cap) != 0) return -1;
  }
  size_t mask = m->cap - 1, i = (size_t)id & mask;
  while (live(m->slots[i].id)) i = (i + 1) & mask;
  if (m->slots[i].id == GONE) m->gone--;
  m->slots[i].id = id;
  m->slots[i].val = val;
  m->count++;
  return 0;
}

void *idmap_remove(idmap *m, uint64_t id) {
  size_t i = find(m, id);
  if (i == SIZE_MAX) return NULL;
  void *val = m->slots[i].val;
  size_t mask = m->cap - 1, next = (i + 1) & mask;
  m->slots[i].val = NULL;
  m->count--;
  if (m->slots[next].id != EMPTY) {
    m->slots[i].id = GONE;
    m->gone++;
    return val;
  }
  /* before an empty slot no probe needs to pass this one, nor the removed
   * ones just before it: a probe that reached them ended at the empty slot.
   * Ids removed in the order they came (a batch of jobs) so leave no
   * markers once the last is gone, and the table is not rebuilt for them. */
  m->slots[i].id = EMPTY;
  for (size_t k = (i + mask) & mask; m->slots[k].id == GONE; k = (k + mask) & mask) {
    m->slots[k].id = EMPTY;
    m->gone--;
  }
  return val;
}

int idmap_next(const idmap *m, size_t *pos, uint64_t *id, void **val) {
  while (*pos < m->cap) {
    const idmap_slot *s = &m->slots[(*pos)++];
    if (live(s->id)) {
      if (id) *id = s->id;
      if (val) *val = s->val;
      return 1;
    }
  }
  return 0;
}
