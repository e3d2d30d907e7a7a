/*
 * The backend interface: devices, memory, modules, and recorded sequences.
 *
 * A backend is an object the library holds (never a global); the execute,
 * record and scheduler actors call into it from their own threads, so every
 * operation here is safe to call concurrently for different objects. Device
 * memory is named by a 64-bit device address, as in CUDA; a sequence is a
 * prepared list of nodes (a CUDA graph on GPUs, a launch list on the host)
 * that is built once, updated node by node, and launched many times.
 */
#ifndef SCHEDRUN_GPU_BACKEND_H
#define SCHEDRUN_GPU_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/common.h"
#include "program/program.h"

typedef struct gpu_backend gpu_backend;
typedef struct gpu_module gpu_module;
typedef struct gpu_seq gpu_seq;
typedef void *gpu_function;

typedef enum { GN_LAUNCH, GN_COPY, GN_FILL, GN_WHILE } gpu_node_kind;

/* What a node does. Arguments are 8-byte slots: a scalar in its native
 * representation in the low bytes, a pointer as its device address. */
typedef struct gpu_node {
  gpu_node_kind kind;
  uint32_t tag; /* the caller's label (the program's command), reported on failure */
  union {
    struct {
      gpu_function fn;
      uint32_t grid[3], block[3];
      uint32_t shared; /* dynamic shared memory per block, bytes (at most PROG_MAX_SHARED) */
      const uint64_t *args;
      uint32_t nargs;
    } launch;
    struct {
      uint64_t dst, src, bytes;
    } copy;
    struct {
      uint64_t dst, count, pattern;
      uint32_t elem_size; /* 1, 4 or 8 */
      bool resizes; /* its element count may change from job to job (a backend
                       may then make it a node whose size updates in place) */
    } fill;
    struct {
      uint64_t flag; /* address of an i32; the body repeats while it is non-zero */
      uint32_t max_trips;
      gpu_seq *body;
    } loop;
  } u;
} gpu_node;

/* What a failed launch leaves beside its error sentence. */
typedef struct gpu_failure {
  uint32_t tag; /* the tag of the node that was running, or GPU_NO_TAG */
  bool lost;    /* the device is lost: nothing more runs on it */
} gpu_failure;
#define GPU_NO_TAG 0xffffffffu

/* What a device has done since it opened, for the run summary. */
typedef struct gpu_counters {
  uint64_t launches;   /* submissions of work: one per sequence launch when its loops run on the device */
  uint64_t host_trips; /* while-loop trips driven from the host, a synchronisation each */
  const char *loops;   /* how while loops run on this device, or "" before the first */
  uint64_t beside;     /* batches whose first fills ran beside the batch before (batch_begin) */
} gpu_counters;

/* One step of a batch of jobs (gpu_ops.run_batch): a job's buffer filled
 * from host bytes or zeroed, or copied on the device from other device
 * bytes (a buffer handed on), a sequence run, a buffer read back. */
typedef enum { GB_HTOD, GB_ZERO, GB_SEQ, GB_DTOH, GB_DTOD } gpu_batch_kind;
typedef struct gpu_batch_op {
  gpu_batch_kind kind;
  uint64_t addr;   /* the device bytes (not GB_SEQ); GB_DTOD: the destination */
  uint64_t bytes;
  const void *src; /* GB_HTOD */
  void *dst;       /* GB_DTOH */
  gpu_seq *seq;    /* GB_SEQ */
  uint64_t t_end;  /* GB_SEQ: when it ended (CLOCK_MONOTONIC ns), set by run_batch */
  uint64_t from;   /* GB_DTOD: the device bytes copied */
} gpu_batch_op;

typedef struct gpu_ops {
  const char *name;
  /* Its memory calls leave nothing behind on the calling thread (no current
   * context), so they may run on an application's thread: the scheduler's,
   * when a caller runs it (lib/api_guest.c). */
  bool any_thread;
  void (*destroy)(gpu_backend *b);
  int (*device_count)(const gpu_backend *b);
  const char *(*device_name)(const gpu_backend *b, int dev);
  /* the compile target and architecture its kernels need ("host", "") */
  const char *(*target)(const gpu_backend *b, int dev);
  const char *(*arch)(const gpu_backend *b, int dev);
  /* the architecture kernels are compiled for, one artifact for every
   * device (NULL: device 0's arch) */
  const char *(*compile_arch)(const gpu_backend *b);

  int (*mem_alloc)(gpu_backend *b, int dev, uint64_t bytes, uint64_t *addr, schedrun_error_t *err);
  void (*mem_free)(gpu_backend *b, int dev, uint64_t addr);
  /* How many bytes the device can still allocate, and how many it has in all
   * (host: the arena's buffer zone and the machine's free memory; CUDA:
   * cuMemGetInfo). */
  int (*mem_room)(gpu_backend *b, int dev, uint64_t *free_bytes, uint64_t *total, schedrun_error_t *err);
  int (*mem_zero)(gpu_backend *b, int dev, uint64_t addr, uint64_t n, schedrun_error_t *err);
  int (*copy_htod)(gpu_backend *b, int dev, uint64_t dst, const void *src, uint64_t n,
                   schedrun_error_t *err);
  int (*copy_dtoh)(gpu_backend *b, int dev, void *dst, uint64_t src, uint64_t n,
                   schedrun_error_t *err);
  /* Copies n bytes between two allocations of one device, on the device (a
   * job's buffer handed on to the next job there never visits the host). */
  int (*copy_dtod)(gpu_backend *b, int dev, uint64_t dst, uint64_t src, uint64_t n, schedrun_error_t *err);
  /* Copies n bytes from device src_dev's memory straight into dst_dev's,
   * with no copy through the host: *peer true when it did (host devices:
   * from arena to arena; CUDA: cuMemcpyPeer, for a pair whose peer access
   * cuDeviceCanAccessPeer allows and cuCtxEnablePeerAccess turned on), false
   * with nothing copied when the pair has no such path (the caller then goes
   * through the host). NULL: no pair has one. */
  int (*copy_peer)(gpu_backend *b, int dst_dev, uint64_t dst, int src_dev, uint64_t src, uint64_t n, bool *peer,
                   schedrun_error_t *err);

  /* Host memory every device of the backend reaches directly (host: a
   * memory file each worker maps), zeroed; host_free takes its start.
   * Both NULL where the backend has none: the library then hands out plain
   * page-aligned memory, which jobs copy. */
  int (*host_alloc)(gpu_backend *b, uint64_t bytes, void **data, schedrun_error_t *err);
  void (*host_free)(gpu_backend *b, void *data);
  /* Makes device dev's buffer [addr, addr + bytes) the host memory at
   * `host` itself until mem_unbind, so that a job's kernels run on that
   * memory in place, and, when `viewed`, so do this process's reads and
   * writes of the buffer (copies, host tasks); unviewed, those see the
   * buffer's own memory and must not be made. *inplace true when done;
   * false, with nothing changed, when `host` is not a page-aligned start
   * within host_alloc'd memory holding `bytes` (the caller copies
   * instead). NULL: never. */
  int (*mem_bind)(gpu_backend *b, int dev, uint64_t addr, const void *host, uint64_t bytes, bool viewed,
                  bool *inplace, schedrun_error_t *err);
  /* Gives a bound buffer its own memory back, as it was before mem_bind
   * (`viewed` as it was then). */
  int (*mem_unbind)(gpu_backend *b, int dev, uint64_t addr, uint64_t bytes, bool viewed, schedrun_error_t *err);
  /* The address at which every device's kernels reach the host memory
   * [host, host + bytes) itself, when the backend maps such memory into the
   * devices' address space (CUDA: host_alloc'd pinned memory, the same
   * address on every device under unified addressing): true and *addr set;
   * false when they do not reach it. NULL: never. */
  bool (*host_address)(gpu_backend *b, const void *host, uint64_t bytes, uint64_t *addr);
  /* Checks that [addr, addr + bytes) lies in one allocation of device dev's
   * own memory, made by the caller (CUDA: cuMemAlloc in dev's context):
   * SCHEDRUN_OK, or SCHEDRUN_EINVAL saying what it is instead. NULL: the
   * backend has no memory a caller can allocate on a device. */
  int (*mem_reach)(gpu_backend *b, int dev, uint64_t addr, uint64_t bytes, schedrun_error_t *err);

  /* Loads a compiled artifact's payload (a shared object, a cubin). */
  int (*module_load)(gpu_backend *b, int dev, const void *image, size_t len, gpu_module **out,
                     schedrun_error_t *err);
  void (*module_unload)(gpu_backend *b, gpu_module *m);
  int (*module_function)(gpu_backend *b, gpu_module *m, const char *entry, gpu_function *out,
                         schedrun_error_t *err);

  /* Runs one launch node now, without a sequence (eager execution); waits for
   * it when `wait`, else queues it on the device's stream. */
  int (*launch)(gpu_backend *b, int dev, const gpu_node *n, bool wait, schedrun_error_t *err);

  int (*seq_create)(gpu_backend *b, int dev, gpu_seq **out, schedrun_error_t *err);
  /* Appends a node; *index is its position, for seq_update. For GN_WHILE the
   * backend creates the (empty) body sequence, owned by s, and stores it in
   * n->u.loop.body for the caller to fill. */
  int (*seq_add)(gpu_seq *s, gpu_node *n, uint32_t *index, schedrun_error_t *err);
  /* Changes a node's parameters in place; its kind must not change (nor, for
   * GN_WHILE, its body). */
  int (*seq_update)(gpu_seq *s, uint32_t index, const gpu_node *n, schedrun_error_t *err);
  /* Makes a built sequence ready to launch (instantiates a CUDA graph, trims
   * the host arrays); called once after the last seq_add. */
  int (*seq_finalize)(gpu_seq *s, schedrun_error_t *err);
  /* Runs the sequence on its device and waits for it to finish, until
   * deadline_ns (CLOCK_MONOTONIC; 0: none). Past the deadline, or when a kernel
   * faults, the device is lost (f says so, with the running node's tag). */
  int (*seq_launch)(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err);
  /* seq_launch that also times the sequence's first `max` nodes: times gets
   * {tag, start, end} (CLOCK_MONOTONIC ns) for each, *n how many. NULL where
   * the backend cannot time nodes. */
  int (*seq_launch_timed)(gpu_seq *s, uint64_t deadline_ns, gpu_failure *f, uint64_t *times, uint32_t max, uint32_t *n,
                          schedrun_error_t *err);
  /* seq_launch in two halves, the second on any thread that holds the
   * device's turn: seq_post starts the sequence, with no deadline, and
   * returns at once (false: it cannot be started so here, and nothing was);
   * seq_collect waits for it, until until_ns at most (0: no limit), and says
   * what seq_launch would have, or SCHEDRUN_EAGAIN when it had not ended by
   * until_ns (it is still posted). The
   * device takes no other request until it is collected (other threads'
   * requests wait), so whoever posted collects before its next use of the
   * device. When nobody collects, the end is announced on the device's
   * wake descriptors (device_wake_fds). NULL all four where the backend has
   * no such way (posting is for guests: backends with any_thread). */
  bool (*seq_post)(gpu_seq *s);
  int (*seq_collect)(gpu_seq *s, uint64_t until_ns, gpu_failure *f, schedrun_error_t *err);
  /* The descriptors that become readable when a posted sequence ends, or
   * the device's worker does: how many (at most 2) are in fds. */
  int (*device_wake_fds)(gpu_backend *b, int dev, int fds[2]);
  /* One of them was readable: empties what needs emptying, and notes a
   * device lost meanwhile. */
  void (*device_woken)(gpu_backend *b, int dev);
  void (*seq_destroy)(gpu_seq *s);
  /* Runs ops in order on device dev as one submission, until deadline_ns;
   * *done is how many finished (all of them on success; on failure the one
   * that failed is ops[*done], and f says whether the device is lost). NULL
   * where the backend has no cheaper way than the ops one by one. */
  int (*run_batch)(gpu_backend *b, int dev, gpu_batch_op *ops, size_t n, uint64_t deadline_ns, size_t *done,
                   gpu_failure *f, schedrun_error_t *err);
  /* run_batch in two halves, so that a batch can be queued while the one
   * before still runs: batch_begin queues ops (the caller keeps them, and
   * queues nothing else on the device, until their batch_finish) and
   * returns at once; batch_finish waits for the oldest batch begun and says
   * what run_batch would have of it. At most two are out per device,
   * finished in the order begun. With `beside` the caller vouches that the
   * steps before the batch's first sequence write only memory that the
   * batch out before it neither reads nor writes, and read nothing it
   * writes: they may then run while it runs (on a GPU, copies on a copy
   * engine beside the kernels). batch_begin failing has queued nothing.
   * NULL both where the backend has no such way. */
  int (*batch_begin)(gpu_backend *b, int dev, gpu_batch_op *ops, size_t n, uint64_t deadline_ns, bool beside,
                     schedrun_error_t *err);
  int (*batch_finish)(gpu_backend *b, int dev, size_t *done, gpu_failure *f, schedrun_error_t *err);

  /* Why device dev was lost (a fault, a deadline), or NULL. Any thread. */
  const char *(*device_lost)(const gpu_backend *b, int dev);
  /* Gives up on whatever the devices are running, from any thread: launches
   * in flight fail at once and their devices are lost (used at close). */
  void (*abandon)(gpu_backend *b);
  /* The device's counters; any thread. */
  void (*counters)(const gpu_backend *b, int dev, gpu_counters *out);
  /* A backend made of others (gpu/mixed_backend.c): its part i, whose
   * devices are this one's [*first, *first + their count), or NULL past the
   * last. NULL: the backend is one part, itself. */
  const gpu_backend *(*part)(const gpu_backend *b, int i, int *first);
} gpu_ops;

struct gpu_backend {
  const gpu_ops *ops;
};

/* Every backend's struct gpu_seq and struct gpu_module begins with the
 * backend that made it (a gpu_backend *), so that a backend made of others
 * passes a sequence or a module to the part it came from. */
static inline gpu_backend *gpu_owner(const void *seq_or_module) {
  gpu_backend *b;
  memcpy(&b, seq_or_module, sizeof b);
  return b;
}

/* The compile targets of a backend's devices, one per part: at most
 * GPU_MAX_TARGETS (a host part and a CUDA part). */
#define GPU_MAX_TARGETS 2
/* How many targets b's devices need, and target i's part (b itself for a
 * backend of one part), its name ("host", "cuda") and the architecture its
 * kernels are compiled for. */
int gpu_target_count(const gpu_backend *b);
const gpu_backend *gpu_target_part(const gpu_backend *b, int i);
/* The index of device dev's target. */
int gpu_device_target(const gpu_backend *b, int dev);
/* Device dev's kind: its target and architecture ("host", "cuda sm_90"), as
 * autotuned choices and performance models key what they measure. */
void gpu_device_kind(const gpu_backend *b, int dev, char *out, size_t n);

/* How to open a backend. */
typedef struct gpu_open_opts {
  const char *cache_dir; /* where the host devices' worker program is kept */
  uint64_t spin_ns;      /* how long a waiting side polls before it sleeps */
  bool host_in_process;  /* host devices run kernels in this process (no containment) */
} gpu_open_opts;

/* The architecture kernels are compiled for on b (gpu_ops.compile_arch). */
const char *gpu_compile_arch(const gpu_backend *b);

/* Opens the backend a device spec asks for ("auto", "host", "host:N", ...).
 * `why_fallback` (may be NULL) receives the reason when "auto" fell back to
 * the host. */
/* Whether a program asking for devices `want` (a config's devices:) runs on
 * backend b, opened for devices `opened` (fell_back: auto or all found no GPU
 * and opened host devices): the same spec, or the same devices; "auto", the
 * default, runs anywhere. */
bool gpu_devices_fit(const char *want, const char *opened, const gpu_backend *b, bool fell_back);
int gpu_backend_open(const char *devices, const gpu_open_opts *o, gpu_backend **out, char **why_fallback,
                     schedrun_error_t *err);
void gpu_backend_close(gpu_backend **b);

/* Host devices: each a worker process running the kernels (gpu/host/). */
int gpu_host_open(int ndevices, const gpu_open_opts *o, gpu_backend **out, schedrun_error_t *err);
/* Builds (once, into the cache) the host devices' worker program: its path,
 * and a descriptor (close-on-exec) of the file checked to be the user's own,
 * which is what runs. */
int host_worker_program(const char *cache_dir, char **path, int *fd, schedrun_error_t *err);
/* The CUDA devices listed in which[0..nwhich) (all when nwhich is 0);
 * waits for a device poll it spin_ns before they sleep. */
int gpu_cuda_open(const int *which, int nwhich, uint64_t spin_ns, gpu_backend **out, schedrun_error_t *err);
/* Devices of several kinds in one backend ("cuda+host:1"): the parts,
 * taken over (closed on failure too), their devices numbered in order. */
int gpu_mixed_open(gpu_backend **parts, int nparts, gpu_backend **out, schedrun_error_t *err);

/* ---- compile targets ---- */

typedef struct gpu_compile_req {
  const char *name, *entry, *source;
  const char *source_file; /* for compiler messages */
  uint32_t first_line;
  const prog_type *params;
  uint32_t nparams;
  const char *arch;
  const _Atomic int *cancel; /* set non-zero (any thread): stop, killing the compiler; may be NULL */
  uint64_t timeout_ns;       /* the compiler is killed after this long; 0: the default (300 s) */
  const char *cache_dir;     /* the kernel cache, where a target may keep the programs it runs; may be NULL */
} gpu_compile_req;

typedef struct gpu_compile_target {
  const char *name;
  const char *ext; /* artifact file name ending */
  /* Prepares the target (loads its compiler library, say); *ctx is passed to
   * the calls below and may be used from several threads at once. */
  int (*open)(void **ctx, schedrun_error_t *err);
  void (*close)(void *ctx);
  /* The compiler's identity and version, part of every cache key. */
  int (*identity)(void *ctx, char **out, schedrun_error_t *err);
  /* A cheap fingerprint of the compiler (its file, size and time) under which
   * a slow identity() may be remembered on disk; NULL when identity() is cheap. */
  int (*stamp)(void *ctx, char **out, schedrun_error_t *err);
  /* Everything besides the compiler and the request that shapes an artifact:
   * the options, and the generated wrapper (prelude, trampolines) applied to
   * a fixed sample kernel. Part of every cache key, so that a change to any
   * of it never reuses an old artifact. Heap text. */
  int (*recipe)(void *ctx, char **out, schedrun_error_t *err);
  /* Compiles req into *out (malloc'ed bytes: the artifact). *log gets the
   * compiler's messages (may be NULL). tmp_dir is private to this call. */
  int (*compile)(void *ctx, const gpu_compile_req *req, const char *tmp_dir, uint8_t **out,
                 size_t *out_len, char **log, schedrun_error_t *err);
} gpu_compile_target;

/* The sample kernel every recipe applies its wrapper to. */
extern const gpu_compile_req gpu_recipe_sample;

extern const gpu_compile_target gpu_host_target;
extern const gpu_compile_target gpu_cuda_target;
const gpu_compile_target *gpu_compile_target_find(const char *name);
/* The sm_XX a cubin is built for (90 for sm_90), or -1 when it is not one. */
int gpu_cubin_arch(const uint8_t *img, size_t len);

/* Parses "f32,ptr,i32" into types; returns the count or -1. */
int gpu_params_parse(const char *text, prog_type *out, int max);

#endif
