/*
 * The allocator of one host device's memory arena: offsets into a region of
 * `size` bytes, in blocks aligned to HOST_ARENA_ALIGN. Its bookkeeping lives in
 * the library's memory, never in the arena, so a kernel that writes out of
 * bounds can corrupt data but not the allocator.
 *
 * Free space is a sorted array of extents (first fit, merged with its
 * neighbours on free); the size of each live block is kept in a hash map by
 * offset. Safe from several threads.
 */
#ifndef SCHEDRUN_HOST_ARENA_H
#define SCHEDRUN_HOST_ARENA_H

#include <pthread.h>
#include <stdint.h>

#include "common/hmap.h"

#define HOST_ARENA_ALIGN 256

typedef struct host_extent {
  uint64_t off, len;
} host_extent;

typedef struct host_arena {
  pthread_mutex_t lock;
  uint64_t size, in_use;
  host_extent *free; /* sorted by offset, never adjacent */
  uint32_t nfree, cap;
  hmap live; /* offset -> length (as a uintptr_t) */
} host_arena;

/* Manages [start, size). */
int host_arena_init(host_arena *a, uint64_t start, uint64_t size);
void host_arena_destroy(host_arena *a);
/* 0 and *off, or -1 when no free extent is large enough (or bytes is 0). */
int host_arena_alloc(host_arena *a, uint64_t bytes, uint64_t *off);
/* Frees a block from host_arena_alloc; returns its length, or 0 when off is
 * not a live block (nothing changes then). */
uint64_t host_arena_free(host_arena *a, uint64_t off);
/* The length of the live block at off, or 0. */
uint64_t host_arena_size_of(host_arena *a, uint64_t off);

#endif
