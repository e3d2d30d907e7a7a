/*
 * What a host device's worker process and the library share: the layout of
 * the control block and of recorded nodes in the device's memory arena.
 *
 * Every host device is a worker process. Its memory is an arena (a memory
 * file) mapped by the library and by the worker; device addresses are the
 * worker's addresses, and the library reaches the same bytes through its own
 * mapping at the same offset. The control block sits at the arena's start:
 * the library posts one request at a time (bumping `req`), the worker answers
 * (setting `done` to it); both spin briefly, then sleep on the word with a
 * futex. Recorded sequences live in the arena too, so the library builds and
 * updates them in place and the worker replays them without a copy.
 *
 * This header is compiled into the library and, as text, into the worker
 * program (gpu/host/host_worker.c), which the library builds at run time with
 * the host compiler: it must stay plain C with no other includes than
 * <stdint.h>.
 */
#ifndef SCHEDRUN_HOST_WORKER_ABI_H
#define SCHEDRUN_HOST_WORKER_ABI_H

#include <stdint.h>

#define HW_ABI_VERSION 9
#define HW_CTL_BYTES 4096 /* the control block's share of the arena's start */
#define HW_TEXT 1024
#define HW_PROT_MAX 80 /* protection changes carried by one request */
#define HW_NO_TAG 0xffffffffu

/* Requests. Addresses are device (worker) addresses. */
enum {
  HW_OP_HELLO = 1, /* -> a[0]: the arena's address in the worker */
  HW_OP_LOAD,      /* a[0], a[1]: a module image in the arena -> a[0]: handle */
  HW_OP_SYM,       /* a[0]: handle, text: symbol -> a[0]: its address */
  HW_OP_UNLOAD,    /* a[0]: handle */
  HW_OP_RUN_SEQ,   /* a[0]: a hw_seq; a[1]: 0, or where to write {tag, start, end}
                      (CLOCK_MONOTONIC ns) of each of its first a[2] nodes */
  HW_OP_RUN_NODE,  /* a[0]: one hw_node, a[1]: its argument slots */
  HW_OP_RUN_STEPS, /* a[0]: hw_step[a[1]], run in order; a[2]: the step running */
  HW_OP_EXIT,
  HW_OP_PROTECT /* nothing but the protection changes every request carries */
};

/* Buffers' memory. The arena's buffer zone, from the offset the worker is
 * started with to its end, is mapped without access in the worker except for
 * the buffers allocated there, each followed by a guard page: a kernel that
 * writes past its buffer or into unallocated space faults, as on a GPU.
 * Before a request's operation the worker applies the changes it carries, in
 * order: [addr, addr + len) readable and writable, or no access (HW_PROT);
 * or a buffer's pages mapped, readable and writable, onto the host memory
 * file (descriptor 5) at `offset`, for a job that runs on the caller's memory
 * in place (HW_MAP_HOST), and back onto the arena after it (HW_MAP_ARENA). */
enum { HW_PROT = 0, HW_MAP_HOST = 1, HW_MAP_ARENA = 2 };
#define HW_HOST_FD 5
/* An eventfd of the library's, written when the answer to a request posted
 * with `notify` is still not collected HW_NOTIFY_GRACE_NS after it was
 * given: the thread that posted it usually collects it sooner, and nobody
 * else need wake. A worker that cannot write it ends with HW_EXIT_NOTIFY. */
#define HW_NOTIFY_FD 6
#define HW_EXIT_NOTIFY 7
#define HW_NOTIFY_GRACE_NS 200000ull
typedef struct hw_prot {
  uint64_t addr, len; /* device addresses, page-aligned */
  uint32_t writable, source; /* source: HW_PROT, HW_MAP_HOST or HW_MAP_ARENA */
  uint64_t offset;    /* HW_MAP_HOST: where in the host memory file */
} hw_prot;

/* Node kinds: the values of gpu_node_kind. */
enum { HW_LAUNCH = 0, HW_COPY = 1, HW_FILL = 2, HW_WHILE = 3 };

typedef struct hw_ctl {
  uint32_t abi;
  uint32_t req;  /* futex word: the library bumps it to post a request */
  uint32_t done; /* futex word: the worker sets it to `req` when answered */
  uint32_t worker_sleeping, library_sleeping;
  /* set by the library with a request nobody may be waiting for; cleared by
   * whoever collects the answer: the library's thread, or the worker once the
   * grace is over (it then writes to HW_NOTIFY_FD) */
  uint32_t notify;
  /* set by the library with each request: 1 for a lone job posted by the
   * thread that submitted it (a loop that submits and waits posts the next
   * one microseconds after it collects this one), else 0 */
  uint32_t lone;
  uint32_t op;
  int32_t status; /* 0, or -1 with text */
  uint32_t running_tag; /* the tag of the node running now, HW_NO_TAG between nodes */
  uint64_t a[4];
  /* written by the worker's fault handler just before it dies */
  int32_t fault_signo, fault_code;
  uint64_t fault_addr;
  char text[HW_TEXT];
  uint32_t nprot; /* protection changes to apply before `op`; the worker zeroes it */
  uint32_t unguarded; /* set by the worker when it could not protect (the zone is then all writable) */
  hw_prot prot[HW_PROT_MAX];
} hw_ctl;

/* A recorded node: 64 bytes; a launch's argument slots are in its sequence's
 * argument array from arg0. */
typedef struct hw_node {
  uint8_t kind;
  uint8_t pad;
  uint16_t nargs; /* at most 64 (PROG_MAX_PARAMS) */
  uint32_t tag;   /* the caller's: which command of its program this node is */
  uint32_t arg0;
  uint32_t shared; /* a launch's dynamic shared memory, bytes; 0 for other kinds */
  union {
    struct {
      uint64_t fn; /* the kernel's launcher in the worker */
      uint32_t grid[3], block[3];
    } launch;
    struct {
      uint64_t dst, src, bytes;
    } copy;
    struct {
      uint64_t dst, count, pattern;
      uint32_t elem_size;
    } fill;
    struct {
      uint64_t flag; /* an i32: the body repeats while it is non-zero */
      uint64_t body; /* a hw_seq */
      uint32_t max_trips;
    } loop;
  } u;
} hw_node;

/* A sequence: its nodes and argument slots, all in the arena. */
typedef struct hw_seq {
  uint64_t nodes; /* hw_node[n] */
  uint64_t args;  /* uint64_t[] */
  uint32_t n, pad;
} hw_seq;

/* A step of a batch of jobs (HW_OP_RUN_STEPS): copy bytes within the arena
 * (a job's buffers from staged contents, or back to staging), zero them, or
 * run a sequence. The worker writes when each step ended. */
enum { HW_STEP_COPY = 1, HW_STEP_ZERO = 2, HW_STEP_SEQ = 3 };
typedef struct hw_step {
  uint32_t kind, pad;
  uint64_t dst, src, bytes; /* SEQ: src is the hw_seq */
  uint64_t t_end;           /* CLOCK_MONOTONIC ns, written by the worker */
} hw_step;

/* The launcher each kernel module exports per kernel ("__sched_launch_<entry>"):
 * 0, or -1 with a NUL-terminated text in text[cap] naming the kernel (a
 * block whose threads cannot all reach a barrier, say). */
typedef int (*hw_launcher)(const uint32_t *grid, const uint32_t *block, const uint64_t *args, uint32_t shared,
                           char *text, uint32_t cap);

#endif
