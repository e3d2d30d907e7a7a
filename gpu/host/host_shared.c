/* See host_shared.h. */
#define _GNU_SOURCE 1
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu/host/host_device.h"
#include "gpu/host/host_shared.h"

int host_shared_open(host_shared *h, uint64_t page, schedrun_error_t *err) {
  memset(h, 0, sizeof *h);
  h->page = page;
  pthread_mutex_init(&h->lock, NULL);
  h->fd = host_fd_high(memfd_create("schedrun-host", MFD_CLOEXEC));
  int e = errno;
  if (h->fd < 0) {
    pthread_mutex_destroy(&h->lock);
    return err_set(err, SCHEDRUN_EBACKEND, "host memory: cannot make its memory file: %s", strerror(e));
  }
  return SCHEDRUN_OK;
}

void host_shared_close(host_shared *h) {
  if (h->fd < 0) return;
  for (host_shared_block *b = h->blocks, *next; b; b = next) {
    next = b->next;
    munmap(b->data, b->len);
    free(b);
  }
  h->blocks = NULL;
  close(h->fd);
  h->fd = -1;
  pthread_mutex_destroy(&h->lock);
}

int host_shared_alloc(host_shared *h, uint64_t bytes, void **data, schedrun_error_t *err) {
  *data = NULL;
  assert(h->fd >= 0 && h->page && bytes > 0);
  if (bytes > UINT64_MAX - h->page) return err_set(err, SCHEDRUN_ENOMEM, "host memory: %llu bytes is too many",
                                                   (unsigned long long)bytes);
  uint64_t len = (bytes + h->page - 1) / h->page * h->page, avail, total;
  host_memory_room(&avail, &total);
  if (len > avail)
    return err_set(err, SCHEDRUN_ENOMEM, "host memory: cannot allocate %llu bytes (%.1f GiB): the machine has %llu "
                   "left (%.1f GiB, of %.1f GiB)", (unsigned long long)bytes, bytes / 1073741824.0,
                   (unsigned long long)avail, avail / 1073741824.0, total / 1073741824.0);
  host_shared_block *b = calloc(1, sizeof *b);
  if (!b) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  pthread_mutex_lock(&h->lock);
  int rc = SCHEDRUN_OK;
  b->offset = h->end;
  b->len = len;
  if (b->offset > (uint64_t)INT64_MAX - len || ftruncate(h->fd, (off_t)(b->offset + len)) != 0)
    rc = err_set(err, SCHEDRUN_ENOMEM, "host memory: cannot grow its memory file to %llu bytes: %s",
                 (unsigned long long)(b->offset + len), strerror(errno));
  if (rc == SCHEDRUN_OK) {
    b->data = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd, (off_t)b->offset);
    if (b->data == MAP_FAILED)
      rc = err_set(err, SCHEDRUN_ENOMEM, "host memory: cannot map %llu bytes: %s", (unsigned long long)len,
                   strerror(errno));
  }
  if (rc == SCHEDRUN_OK) {
    h->end = b->offset + len;
    b->next = h->blocks;
    h->blocks = b;
    *data = b->data;
  }
  pthread_mutex_unlock(&h->lock);
  if (rc) free(b);
  return rc;
}

bool host_shared_free(host_shared *h, void *data) {
  if (h->fd < 0) return false;
  pthread_mutex_lock(&h->lock);
  host_shared_block *b = NULL;
  for (host_shared_block **at = &h->blocks; *at; at = &(*at)->next)
    if ((*at)->data == data) {
      b = *at;
      *at = b->next;
      break;
    }
  pthread_mutex_unlock(&h->lock);
  if (!b) return false;
  munmap(b->data, b->len);
  /* the pages go back now; a worker still mapping them sees zeros */
  fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)b->offset, (off_t)b->len);
  free(b);
  return true;
}

bool host_shared_find(host_shared *h, const void *data, uint64_t bytes, uint64_t *offset) {
  if (h->fd < 0) return false;
  const uint8_t *p = data;
  bool found = false;
  pthread_mutex_lock(&h->lock);
  for (const host_shared_block *b = h->blocks; b && !found; b = b->next)
    if (p >= b->data && p < b->data + b->len && bytes <= (uint64_t)(b->data + b->len - p) &&
        (uint64_t)(p - b->data) % h->page == 0) {
      *offset = b->offset + (uint64_t)(p - b->data);
      found = true;
    }
  pthread_mutex_unlock(&h->lock);
  return found;
}
