/*
 * A host device's memory (host_backend.c has the rest of the backend): the
 * worker's zone (modules, sequences, staging) and the buffer zone of its
 * arena, a freed buffer's block kept open for the next of its size, the
 * staging block kept for the next batch, and how much the machine can still
 * give: the arena is a memory file, whose pages come from RAM as they are
 * touched, so a buffer larger than what is left would not fail when
 * allocated but later, as a SIGBUS in the worker or the kernel's OOM killer
 * ending a process. The backend checks here first and refuses with the
 * numbers.
 */
#define _GNU_SOURCE 1
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu/host/host_device.h"

/* A number in a one-line file (a cgroup's limit or usage); false when the
 * file is absent or says "max". */
static bool read_u64_file(const char *path, uint64_t *v) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fscanf(f, "%" SCNu64, v) == 1;
  fclose(f);
  return ok;
}

void host_memory_room(uint64_t *avail, uint64_t *total) {
  *avail = *total = UINT64_MAX;
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    uint64_t kib;
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "MemTotal: %" SCNu64 " kB", &kib) == 1) *total = kib << 10;
      else if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1) *avail = kib << 10;
    }
    fclose(f);
  }
  /* a container's limit (cgroup v2, then v1) */
  uint64_t limit, used;
  if ((read_u64_file("/sys/fs/cgroup/memory.max", &limit) && read_u64_file("/sys/fs/cgroup/memory.current", &used)) ||
      (read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", &limit) &&
       read_u64_file("/sys/fs/cgroup/memory/memory.usage_in_bytes", &used))) {
    if (limit < *total) *total = limit;
    uint64_t left = used < limit ? limit - used : 0;
    if (left < *avail) *avail = left;
  }
  if (*avail > *total) *avail = *total;
}

void host_device_room(host_device *d, uint64_t *free_bytes, uint64_t *total) {
  uint64_t zone = d->size - d->zone - d->page, avail, ram;
  pthread_mutex_lock(&d->bufs.lock);
  uint64_t used = d->bufs.in_use;
  pthread_mutex_unlock(&d->bufs.lock);
  host_memory_room(&avail, &ram);
  *free_bytes = used < zone ? zone - used : 0;
  if (avail < *free_bytes) *free_bytes = avail;
  *total = ram < zone ? ram : zone;
}

#define PUNCH_BYTES (64u << 10) /* freed buffers this large give their pages back */
/* and freed blocks of the worker's zone (module images, sequences, staging
 * past HOST_STAGE_KEEP_BYTES) this large */
#define PUNCH_STAGING_BYTES (1u << 20)


/* A block of the worker's zone; when there is no room, the staging block
 * kept for the next batch (host_stage_give) is given up first. */
int host_dev_alloc(host_device *d, uint64_t bytes, uint64_t *addr) {
  uint64_t off;
  if (host_arena_alloc(&d->alloc, bytes ? bytes : 1, &off)) {
    pthread_mutex_lock(&d->lock_prot);
    uint64_t kept = d->stage_addr;
    d->stage_addr = d->stage_len = 0;
    pthread_mutex_unlock(&d->lock_prot);
    if (!kept) return -1;
    host_dev_free(d, kept);
    if (host_arena_alloc(&d->alloc, bytes ? bytes : 1, &off)) return -1;
  }
  *addr = d->wbase + off;
  return 0;
}

/* Frees a buffer's block (its length with the guard page): closed to the
 * worker again, its pages given back when large. */
static void buf_release(host_device *d, uint64_t off, uint64_t len) {
  if (host_device_guard(d, d->wbase + off, len - d->page, false))
    host_device_abandon(d, "out of memory while closing a freed buffer to the kernels");
  host_arena_free(&d->bufs, off);
  if (len >= PUNCH_BYTES) fallocate(d->arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
}

/* Gives back every kept block, when the zone has no room for a new buffer
 * (at the end they go with the arena). */
static void buf_release_kept(host_device *d) {
  pthread_mutex_lock(&d->lock_prot);
  host_extent kept[HOST_KEPT_MAX];
  uint32_t n = d->nkept;
  memcpy(kept, d->kept, n * sizeof *kept);
  d->nkept = 0;
  d->kept_bytes = 0;
  pthread_mutex_unlock(&d->lock_prot);
  for (uint32_t i = 0; i < n; i++) buf_release(d, kept[i].off, kept[i].len);
}

/* A buffer: whole pages in the buffer zone, then a guard page, opened to the
 * worker; a kept block of the same size first, already open. */
int host_buf_alloc(host_device *d, uint64_t bytes, uint64_t *addr) {
  uint64_t pages = ((bytes ? bytes : 1) + d->page - 1) / d->page * d->page, off = 0;
  if (pages > UINT64_MAX - d->page) return -1;
  bool kept = false;
  pthread_mutex_lock(&d->lock_prot);
  for (uint32_t i = d->nkept; i-- > 0 && !kept;)
    if (d->kept[i].len == pages + d->page) {
      off = d->kept[i].off;
      d->kept_bytes -= d->kept[i].len;
      d->kept[i] = d->kept[--d->nkept];
      kept = true;
    }
  pthread_mutex_unlock(&d->lock_prot);
  if (!kept) {
    if (host_arena_alloc(&d->bufs, pages + d->page, &off)) {
      buf_release_kept(d);
      if (host_arena_alloc(&d->bufs, pages + d->page, &off)) return -1;
    }
    if (host_device_guard(d, d->wbase + off, pages, true)) {
      host_arena_free(&d->bufs, off);
      return -1;
    }
  }
  assert(off % d->page == 0 && off >= d->zone && host_arena_size_of(&d->bufs, off) == pages + d->page);
  *addr = d->wbase + off;
  return 0;
}

void host_dev_free(host_device *d, uint64_t addr) {
  if (!addr) return;
  uint64_t off = addr - d->wbase, len;
  if (off >= d->zone) { /* a buffer: kept open for the next of its size, or closed and freed */
    len = host_arena_size_of(&d->bufs, off);
    if (!len) return;
    host_device_forget_alias(d, addr);
    pthread_mutex_lock(&d->lock_prot);
    bool keep = !d->in_process && d->nkept < HOST_KEPT_MAX && d->kept_bytes + len <= HOST_KEPT_BYTES;
    for (uint32_t i = 0; i < d->nkept; i++)
      if (d->kept[i].off == off) keep = false, len = 0; /* freed twice: it is kept already */
    if (keep) {
      d->kept[d->nkept++] = (host_extent){off, len};
      d->kept_bytes += len;
    }
    pthread_mutex_unlock(&d->lock_prot);
    if (!keep && len) buf_release(d, off, len);
    return;
  }
  len = host_arena_free(&d->alloc, off);
  if (len >= PUNCH_STAGING_BYTES) fallocate(d->arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
}

/* Moves an arena array to a block of new_bytes, keeping the first keep bytes. */
int host_dev_realloc(host_device *d, uint64_t *addr, uint64_t keep, uint64_t new_bytes) {
  uint64_t fresh;
  if (host_dev_alloc(d, new_bytes, &fresh)) return -1;
  if (*addr && keep) memcpy(host_device_ptr(d, fresh), host_device_ptr(d, *addr), keep);
  host_dev_free(d, *addr);
  *addr = fresh;
  return 0;
}

/* The library's pointer to [addr, addr + n) of a device, which must lie in a
 * block of its arena. */
void *host_dev_range(host_device *d, uint64_t addr, uint64_t n) {
  (void)n;
  assert(addr >= d->wbase + HW_CTL_BYTES && addr - d->wbase + n <= d->size);
  return host_device_ptr(d, addr);
}

/* Ranges this large are zeroed only where the memory file holds pages, and
 * copied in and out through the file rather than through this process's
 * mapping of it. */
#define FILE_IO_BYTES (1u << 20)

void host_dev_zero(host_device *d, uint64_t addr, uint64_t n) {
  uint8_t *p = host_dev_range(d, addr, n);
  if (n < FILE_IO_BYTES || d->arena_fd < 0) {
    memset(p, 0, n);
    return;
  }
  /* a page the file does not hold (never touched, or given back) reads as
   * zero already: only the extents with pages are written, so a large
   * buffer's first job does not fault in all of its pages to clear them */
  off_t start = (off_t)(addr - d->wbase), end = start + (off_t)n, at = start;
  while (at < end) {
    off_t data = lseek(d->arena_fd, at, SEEK_DATA);
    if (data < 0) {
      if (errno != ENXIO) memset(p + (at - start), 0, (size_t)(end - at)); /* cannot tell: all of the rest */
      break;                                                               /* ENXIO: only holes to the end */
    }
    if (data >= end) break;
    off_t hole = lseek(d->arena_fd, data, SEEK_HOLE);
    if (hole <= data || hole > end) hole = end;
    memset(p + (data - start), 0, (size_t)(hole - data));
    at = hole;
  }
}

/* Copies between the arena and this process's memory. A large copy goes
 * through the memory file (pread/pwrite): the kernel copies page by page
 * from the file's pages, with none of the 4 KiB faults that touching them
 * through a mapping costs here the first time (786,432 for 3 GiB). */
static void file_copy(host_device *d, void *mem, uint64_t addr, uint64_t n, bool out) {
  uint8_t *m = mem, *p = host_dev_range(d, addr, n);
  uint64_t done = 0;
  while (n >= FILE_IO_BYTES && d->arena_fd >= 0 && done < n) {
    off_t at = (off_t)(addr - d->wbase + done);
    size_t chunk = n - done > (1u << 30) ? (1u << 30) : (size_t)(n - done);
    ssize_t got = out ? pread(d->arena_fd, m + done, chunk, at) : pwrite(d->arena_fd, m + done, chunk, at);
    if (got <= 0) break; /* the rest through the mapping */
    done += (uint64_t)got;
  }
  if (done < n) {
    if (out) memcpy(m + done, p + done, n - done);
    else memcpy(p + done, m + done, n - done);
  }
}

void host_dev_read(host_device *d, void *dst, uint64_t addr, uint64_t n) { file_copy(d, dst, addr, n, true); }

void host_dev_write(host_device *d, uint64_t addr, const void *src, uint64_t n) {
  file_copy(d, (void *)(uintptr_t)src, addr, n, false);
}

/* A staging block of at least `bytes` for one batch: the device's kept
 * block when it is large enough (its pages were touched by the batches
 * before, in both processes, so the batch costs no page fault), else a new
 * one of the next power of two, at least 64 KiB, so that a growing load
 * settles on one size. */
int host_stage_take(host_device *d, uint64_t bytes, uint64_t *addr, uint64_t *len) {
  pthread_mutex_lock(&d->lock_prot);
  uint64_t a = d->stage_addr, l = d->stage_len;
  if (a && l >= bytes) d->stage_addr = d->stage_len = 0;
  pthread_mutex_unlock(&d->lock_prot);
  if (a && l >= bytes) {
    *addr = a;
    *len = l;
    return 0;
  }
  uint64_t want = 64u << 10;
  while (want < bytes && want <= UINT64_MAX / 2) want *= 2;
  if (host_dev_alloc(d, want, addr) == 0) {
    *len = want;
    return 0;
  }
  *len = bytes; /* no room for the rounded size: exactly what it needs */
  return host_dev_alloc(d, bytes, addr);
}

/* Gives a batch's staging block back: kept for the next batch when it is the
 * largest there is and not over HOST_STAGE_KEEP_BYTES (the high-water mark
 * of the device's batches), else freed, its pages given back when large. */
void host_stage_give(host_device *d, uint64_t addr, uint64_t len) {
  uint64_t drop = addr;
  pthread_mutex_lock(&d->lock_prot);
  if (len <= HOST_STAGE_KEEP_BYTES && len > d->stage_len) {
    drop = d->stage_addr; /* the smaller one goes */
    d->stage_addr = addr;
    d->stage_len = len;
  }
  pthread_mutex_unlock(&d->lock_prot);
  host_dev_free(d, drop);
}
