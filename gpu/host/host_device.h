/*
 * One host device: its worker process and its memory arena.
 *
 * The library side of gpu/host/host_worker_abi.h. A request is posted in the
 * control block and waited for with a deadline; when the worker dies (a
 * kernel faulted, aborted or called exit) or the deadline passes (the worker
 * is killed), the device is lost for good, with a sentence saying why and the
 * tag of the node that was running. Device memory stays readable after that:
 * it is the library's mapping of the arena.
 *
 * The arena has two zones. The first holds what the worker itself reads and
 * writes (the control block, modules, recorded sequences, staging), allocated
 * from `alloc`. The second, from `zone` on, holds buffers, allocated from
 * `bufs` in whole pages each followed by a guard page: in the worker only the
 * live buffers are accessible (host_device_guard), so that a kernel writing
 * past its buffer or into free space faults, as it would on a GPU. The
 * library's own mapping is accessible everywhere.
 */
#ifndef SCHEDRUN_HOST_DEVICE_H
#define SCHEDRUN_HOST_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "gpu/backend.h"
#include "gpu/host/host_arena.h"
#include "gpu/host/host_worker_abi.h"

#define HOST_KEPT_MAX 64
#define HOST_KEPT_BYTES (64ull << 20)
/* the largest staging block kept for the next batch */
#define HOST_STAGE_KEEP_BYTES (64ull << 20)

/* A buffer the worker maps onto the host memory file (host_device_bind). */
#define HOST_ALIAS_MAX 64
typedef struct host_alias {
  uint64_t addr, len, offset;
  bool bound; /* a job runs on it now; else left for the next job of that memory */
} host_alias;

typedef struct host_device {
  int index;
  char name[16];
  pthread_mutex_t lock; /* one request at a time */
  int arena_fd;
  uint8_t *base;      /* the library's mapping */
  uint64_t wbase;     /* the worker's mapping: device addresses */
  uint64_t size;
  hw_ctl *ctl;
  host_arena alloc;   /* [HW_CTL_BYTES, zone) */
  host_arena bufs;    /* [zone + page, size): buffers */
  uint64_t zone, page;
  pthread_mutex_t lock_prot; /* guards prot_*, kept[] and alias[] */
  hw_prot *prot_pending;     /* changes not yet sent to the worker, in order */
  uint32_t nprot, prot_cap;
  /* freed buffers' blocks kept open for the next buffer of the same size
   * (host_backend.c), so that buffers freed and made again job after job
   * (hand-offs) cost the worker no mprotect */
  host_extent kept[HOST_KEPT_MAX];
  uint32_t nkept;
  uint64_t kept_bytes;
  host_alias alias[HOST_ALIAS_MAX]; /* under lock_prot */
  uint32_t nalias;
  /* the staging block batches reuse (host_backend.c): its pages stay
   * touched from batch to batch; 0 while a batch holds it or none was made */
  uint64_t stage_addr, stage_len;
  _Atomic pid_t pid;  /* 0 when there is no live worker */
  int lib_fd;         /* the worker's watchdog sees this close when we end */
  int host_fd;        /* the host memory file (host_shared.h), lent; -1: none */
  _Atomic bool lost;
  _Atomic uint64_t launches; /* sequence launches */
  pthread_mutex_t lock_why;
  char lost_why[512]; /* written once, under lock_why, before `lost` is set */
  uint64_t spin_ns;
  bool in_process; /* no worker: requests run on the calling thread */
  /* A request posted by host_device_post and not yet collected: no other is
   * posted (host_device_lock waits on posted_cv) until it is. Under lock. */
  bool posted;
  uint32_t posted_req;
  pthread_cond_t posted_cv;
  int notify_fd; /* eventfd the worker writes after answering a posted request; -1: none */
  int pid_fd;    /* pidfd of the worker, readable once it has ended; -1: none */
} host_device;

/* fd moved to a descriptor of 10 or more (close-on-exec), clear of those a
 * worker is given (0 to 6); the original is closed. -1, with errno from
 * the move, when fd is -1 or cannot be moved. */
int host_fd_high(int fd);

/* Maps an arena and starts the worker program `worker` for it, run from
 * worker_fd (see host_worker_program), given the host memory file host_fd
 * (-1: none); with worker NULL the device runs its requests in this process
 * (host_in_process). */
int host_device_start(host_device *d, int index, const char *worker, int worker_fd, int host_fd, uint64_t spin_ns,
                      schedrun_error_t *err);
/* ---- host_memory.c: a device's memory ---- */

/* This machine's memory: what is still available (RAM the kernel can give
 * without swapping, within the process's cgroup limit) and its total;
 * UINT64_MAX for what cannot be read. */
void host_memory_room(uint64_t *avail, uint64_t *total);
/* What d's buffer zone can still give (within the machine's memory), and
 * its size (at most the machine's). */
void host_device_room(host_device *d, uint64_t *free_bytes, uint64_t *total);
/* A block of the worker's zone (modules, sequences, staging): 0 and its
 * device address, or -1 without room (the kept staging block is given up
 * first). */
int host_dev_alloc(host_device *d, uint64_t bytes, uint64_t *addr);
/* A buffer: whole pages of the buffer zone and a guard page, open to the
 * worker's kernels; a kept block of its size first. */
int host_buf_alloc(host_device *d, uint64_t bytes, uint64_t *addr);
/* Frees either kind (0 is ignored): a buffer's block is kept open for the
 * next of its size when there is room, else closed; large blocks give their
 * pages back. */
void host_dev_free(host_device *d, uint64_t addr);
/* Moves a worker-zone array to a block of new_bytes, keeping its first keep bytes. */
int host_dev_realloc(host_device *d, uint64_t *addr, uint64_t keep, uint64_t new_bytes);
/* The library's pointer to [addr, addr + n) of d, which must lie in its arena. */
void *host_dev_range(host_device *d, uint64_t addr, uint64_t n);
/* Zeroes [addr, addr + n) of d's arena: a large range only where the memory
 * file holds pages (the rest reads as zero without being touched). */
void host_dev_zero(host_device *d, uint64_t addr, uint64_t n);
/* Copies n bytes out of d's arena at addr, and into it. */
void host_dev_read(host_device *d, void *dst, uint64_t addr, uint64_t n);
void host_dev_write(host_device *d, uint64_t addr, const void *src, uint64_t n);
/* A staging block of at least `bytes` for one batch (the kept one when it
 * is large enough), and its length; 0, or -1 without room. */
int host_stage_take(host_device *d, uint64_t bytes, uint64_t *addr, uint64_t *len);
/* Gives it back: kept for the next batch (the largest, up to
 * HOST_STAGE_KEEP_BYTES), else freed. */
void host_stage_give(host_device *d, uint64_t addr, uint64_t len);
/* Kills the worker (if any) and unmaps everything. */
void host_device_stop(host_device *d);
/* Kills the worker from any thread: a request in flight fails with the
 * device lost, and so does every later one. */
void host_device_abandon(host_device *d, const char *why);

/* Opens [addr, addr + len) of the buffer zone to the worker's kernels
 * (writable) or closes it again; page-aligned. The change reaches the worker
 * with its next request, before that request runs anything, so it may be
 * made from any thread while a request is in flight. A change that undoes the
 * last pending change of the same range cancels it instead. 0, or -1 when
 * out of memory. */
int host_device_guard(host_device *d, uint64_t addr, uint64_t len, bool writable);

/* Makes buffer [addr, addr + len) (page-aligned) the host memory file fd's
 * bytes at `offset`, for one job that runs on the caller's memory in place:
 * the worker's mapping of the buffer's pages and, when `here`, the
 * library's view of them too (host tasks read and write buffers through it;
 * in process there is one view, always remapped). The worker follows with
 * its next request, before it runs anything; the buffer's own bytes in the
 * arena stay as they were. Nothing changes on failure. */
int host_device_bind(host_device *d, uint64_t addr, uint64_t len, int fd, uint64_t offset, bool here,
                     schedrun_error_t *err);
/* Ends the job's binding (`here` as it was then). The worker keeps its
 * mapping onto the caller's memory until it would run something else: the
 * next job bound to the same memory costs nothing; any other run request
 * first maps the buffer back onto the arena. A device whose buffer cannot
 * be mapped back is lost. */
int host_device_unbind(host_device *d, uint64_t addr, uint64_t len, bool here, schedrun_error_t *err);
/* A buffer at addr is freed: a mapping the worker keeps for it goes back
 * onto the arena before its pages serve another buffer. */
void host_device_forget_alias(host_device *d, uint64_t addr);

/* Takes d->lock for a request: once it is held, and no posted request is
 * waiting to be collected, ctl->op and ctl->a[] are the caller's to fill. */
void host_device_lock(host_device *d);
/* Posts one request (ctl->op and ctl->a[] filled by the caller under
 * host_device_lock) and waits for its answer until deadline_ns (0: no
 * deadline). Called with d->lock held. */
int host_device_request(host_device *d, uint32_t op, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err);
/* host_device_request in two halves, for a request another thread may
 * finish: host_device_post (d->lock held, as for a request) posts it and
 * returns at once; false when it cannot be (no worker process, or no way to
 * hear the answer: nothing was posted). Its answer is announced on
 * host_device_wake_fds's eventfd unless a thread collects it first (within
 * HW_NOTIFY_GRACE_NS of the answer). host_device_collect waits for it, until
 * until_ns at most (0: no limit; the request has no deadline), and says
 * what host_device_request would have; SCHEDRUN_EAGAIN when it had not
 * ended by until_ns (it is still posted, and announced when it ends). It
 * takes d->lock itself. */
bool host_device_post(host_device *d, uint32_t op);
int host_device_collect(host_device *d, uint64_t until_ns, gpu_failure *f, schedrun_error_t *err);
/* The descriptors a thread that collects posted requests sleeps on: the
 * eventfd the worker writes after answering one, and the worker's pidfd
 * while its end has not been noticed. Returns how many (0 to 2). */
int host_device_wake_fds(host_device *d, int fds[2]);
/* After one of them woke the thread: empties the eventfd, and notes a
 * worker that has ended (the device is lost; its pidfd leaves the set). */
void host_device_woken(host_device *d);

/* The library's pointer to device address addr (which must lie in the arena). */
static inline void *host_device_ptr(const host_device *d, uint64_t addr) {
  return d->base + (addr - d->wbase);
}

#endif
