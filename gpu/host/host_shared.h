/*
 * Host memory every host device reaches directly (schedrun_host_alloc): one
 * memory file, made when the backend opens and given to every worker, from
 * which each allocation is a page-aligned range mapped here, where the
 * caller uses it. A job's buffer bound to memory of this file runs on it in
 * place: the buffer's pages in the worker (and in the library, for host
 * tasks) are mapped onto the same range of the file for that job
 * (host_device_bind), and back onto the arena before the next job that does
 * not bind it runs (host_device_unbind), so nothing is copied.
 *
 * Offsets grow and are never reused: a freed range's pages go back to the
 * system (hole punching), and a worker whose mapping still names a freed
 * range (between a job's end and its next request) can never see another
 * allocation's bytes there.
 */
#ifndef SCHEDRUN_HOST_SHARED_H
#define SCHEDRUN_HOST_SHARED_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"

typedef struct host_shared_block {
  uint8_t *data;
  uint64_t offset, len; /* in the file; len in whole pages */
  struct host_shared_block *next;
} host_shared_block;

typedef struct host_shared {
  int fd; /* -1 when there is none */
  uint64_t page;
  pthread_mutex_t lock; /* guards end and blocks */
  uint64_t end;         /* the file's size: the next allocation's offset */
  host_shared_block *blocks;
} host_shared;

/* Makes the memory file (close-on-exec, on a descriptor of 10 or more). */
int host_shared_open(host_shared *h, uint64_t page, schedrun_error_t *err);
/* Unmaps every allocation and closes the file. */
void host_shared_close(host_shared *h);
/* `bytes` (more than 0), rounded up to whole pages, zeroed; refused with the
 * numbers when the machine has less memory left. */
int host_shared_alloc(host_shared *h, uint64_t bytes, void **data, schedrun_error_t *err);
/* Frees an allocation by its start; false when data is not one. */
bool host_shared_free(host_shared *h, void *data);
/* Where [data, data + bytes) lies in the file, when it lies in one
 * allocation and starts on a page: true and its offset. */
bool host_shared_find(host_shared *h, const void *data, uint64_t bytes, uint64_t *offset);

#endif
