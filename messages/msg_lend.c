/*
 * Bytes lent to a message instead of copied into it (msg.h, "Lent bytes").
 *
 * A table of the blocks in flight, keyed by ticket: an open-addressing hash
 * table with linear probing and backward-shift deletion (no tombstones), under
 * one mutex. Tickets count up from 1 and are never reused, so a message that
 * names a block twice, or a stale message, finds nothing instead of another
 * message's block. The table holds only what is between an encoder and a
 * decoder: a job's inputs and outputs while they travel.
 */
#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "messages/msg.h"

typedef struct lent {
  uint64_t ticket; /* 0: empty */
  uint8_t *data;
  size_t len;
} lent;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static lent *slots;
static size_t cap, count; /* cap a power of two, or 0 */
static uint64_t next_ticket = 1;

static size_t home(uint64_t ticket) { return (size_t)((ticket * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1); }

static bool grow(void) {
  size_t ncap = cap ? cap * 2 : 64;
  lent *n = calloc(ncap, sizeof *n);
  if (!n) return false;
  lent *old = slots;
  size_t ocap = cap;
  slots = n;
  cap = ncap;
  for (size_t i = 0; i < ocap; i++)
    if (old[i].ticket) {
      size_t j = home(old[i].ticket);
      while (slots[j].ticket) j = (j + 1) & (cap - 1);
      slots[j] = old[i];
    }
  free(old);
  return true;
}

/* The slot holding ticket, or cap when none does. Under the lock. */
static size_t find(uint64_t ticket) {
  if (!cap) return 0;
  for (size_t j = home(ticket);; j = (j + 1) & (cap - 1)) {
    if (slots[j].ticket == ticket) return j;
    if (!slots[j].ticket) return cap;
  }
}

/* Empties slot j, moving later entries of its run back so that every entry
 * stays reachable from its home. Under the lock. */
static void remove_at(size_t j) {
  assert(slots[j].ticket && count > 0);
  count--;
  for (size_t k = (j + 1) & (cap - 1);; k = (k + 1) & (cap - 1)) {
    if (!slots[k].ticket) break;
    size_t h = home(slots[k].ticket);
    /* k's entry may fill the hole at j when its home is not in (j, k] */
    bool stays = j < k ? (h > j && h <= k) : (h > j || h <= k);
    if (!stays) {
      slots[j] = slots[k];
      j = k;
    }
  }
  slots[j] = (lent){0, NULL, 0};
}

uint64_t msg_lend(uint8_t *data, size_t len) {
  assert(data);
  pthread_mutex_lock(&lock);
  uint64_t t = 0;
  if ((count + 1) * 4 <= cap * 3 || grow()) {
    t = next_ticket++;
    size_t j = home(t);
    while (slots[j].ticket) j = (j + 1) & (cap - 1);
    slots[j] = (lent){t, data, len};
    count++;
  }
  pthread_mutex_unlock(&lock);
  return t;
}

uint8_t *msg_claim(uint64_t ticket, size_t len) {
  uint8_t *data = NULL;
  pthread_mutex_lock(&lock);
  size_t j = ticket ? find(ticket) : cap;
  if (j < cap && slots[j].len == len) {
    data = slots[j].data;
    remove_at(j);
  }
  pthread_mutex_unlock(&lock);
  return data;
}

void msg_reclaim(uint64_t ticket) {
  pthread_mutex_lock(&lock);
  size_t j = ticket ? find(ticket) : cap;
  uint8_t *data = NULL;
  size_t len = 0;
  if (j < cap) {
    data = slots[j].data;
    len = slots[j].len;
    remove_at(j);
  }
  pthread_mutex_unlock(&lock);
  msg_bytes_free(data, len);
}

size_t msg_lent_count(void) {
  pthread_mutex_lock(&lock);
  size_t n = count;
  pthread_mutex_unlock(&lock);
  return n;
}

/* ---- the pool of freed blocks ----
 *
 * Blocks of a job's bytes (inputs, outputs) freed by one thread and made
 * again by another, job after job: glibc gives a thread arena's freed top
 * back to the kernel, and the next batch's blocks then fault their pages in
 * again (0.45 faults per 4 KiB-output job in bench/data_bench). Freed blocks
 * of MSG_LEND_MIN bytes or more wait here instead, by exact length (so that
 * any malloc'ed block of at least that length may be put, and freeing one
 * with plain free() is always right), up to POOL_BYTES in all, and are
 * handed out again for the same length. Under AddressSanitizer blocks are
 * never kept, so that a use after free is still caught. */
#if defined(__SANITIZE_ADDRESS__)
#define POOL_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_OFF 1
#endif
#endif
#ifndef POOL_OFF
#define POOL_OFF 0
#endif

#define POOL_BYTES (64ull << 20)
#define POOL_SIZES 16    /* lengths kept at once */
#define POOL_PER_SIZE 4096 /* blocks kept per length (its array is only touched as it fills) */

typedef struct pool_size {
  size_t len; /* 0: unused */
  uint32_t n;
  void *v[POOL_PER_SIZE];
} pool_size;

#define HUGE_BLOCK_BYTES (32u << 20)
#define HUGE_ALIGN (2u << 20)

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pool_size pool[POOL_SIZES];
static uint64_t pool_bytes;
static uint32_t pool_next; /* the slot a new length takes when all are used */

uint8_t *msg_bytes_alloc(size_t len) {
  if (!POOL_OFF && len >= MSG_LEND_MIN) {
    void *p = NULL;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL_SIZES; i++)
      if (pool[i].len == len && pool[i].n) {
        p = pool[i].v[--pool[i].n];
        pool_bytes -= len;
        break;
      }
    pthread_mutex_unlock(&pool_lock);
    if (p) return p;
  }
  uint8_t *p = malloc(len ? len : 1);
#ifdef MADV_HUGEPAGE
  /* a block this large is mapped for itself: huge pages where the system
   * gives them on request, so that filling it faults once per 2 MiB rather
   * than once per page (a 3 GiB output read back: 786,432 faults, or 1,536) */
  if (p && len >= HUGE_BLOCK_BYTES) {
    uintptr_t from = ((uintptr_t)p + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1);
    uintptr_t to = ((uintptr_t)p + len) & ~(uintptr_t)(HUGE_ALIGN - 1);
    if (to > from) (void)madvise((void *)from, to - from, MADV_HUGEPAGE); /* advice: refused is fine */
  }
#endif
  return p;
}

void msg_bytes_free(uint8_t *data, size_t len) {
  if (!data) return;
  if (!POOL_OFF && len >= MSG_LEND_MIN) {
    bool kept = false;
    pthread_mutex_lock(&pool_lock);
    if (pool_bytes + len <= POOL_BYTES) {
      pool_size *ps = NULL;
      for (int i = 0; i < POOL_SIZES && !ps; i++)
        if (pool[i].len == len) ps = &pool[i];
      for (int i = 0; i < POOL_SIZES && !ps; i++)
        if (!pool[i].len || !pool[i].n) ps = &pool[i];
      if (!ps) { /* every slot holds blocks of other lengths: the oldest length goes */
        ps = &pool[pool_next++ % POOL_SIZES];
        for (uint32_t k = 0; k < ps->n; k++) free(ps->v[k]);
        pool_bytes -= (uint64_t)ps->n * ps->len;
        ps->n = 0;
      }
      if (ps->len != len) {
        assert(ps->n == 0);
        ps->len = len;
      }
      if (ps->n < POOL_PER_SIZE) {
        ps->v[ps->n++] = data;
        pool_bytes += len;
        kept = true;
      }
    }
    pthread_mutex_unlock(&pool_lock);
    if (kept) return;
  }
  free(data);
}
