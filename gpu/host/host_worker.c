/*
 * The worker process of one host device: it loads kernel modules and runs
 * recorded sequences, so that a kernel that faults, aborts, calls exit() or
 * never returns takes down this process and not the program that uses
 * schedrun. The library builds this file at run time with the host compiler
 * (with "#define _GNU_SOURCE 1" and the texts of common/spin_gauge.h and
 * gpu/host/host_worker_abi.h put in front of it) and caches the program
 * beside the kernels.
 *
 *   worker ARENA_SIZE LIBRARY_PID SPIN_NS BUFFER_ZONE
 *
 * The arena is mapped readable and writable up to BUFFER_ZONE (the control
 * block, modules, recorded sequences, staging) and without access from there
 * on, except for the buffers the library allocates, which each request's
 * protection changes open and close (see hw_prot in the ABI header).
 *
 * fd 3 is the device's memory arena. fd 4 is the read end of a pipe whose
 * write end only the library's process holds: a watchdog thread here ends
 * this process when it closes, even while a kernel that never returns keeps
 * the main thread. The library learns that this process ended from the
 * kernel (waitid, or a pidfd), not from a descriptor a kernel could close or
 * pass on. fd 6 is an eventfd this process writes when a request the library
 * posted with `notify` set (one that no library thread may be waiting for:
 * the thread that posted it has gone on) is still not collected
 * HW_NOTIFY_GRACE_NS after its answer.
 * Requests arrive through the control block at the arena's start (see the
 * ABI header).
 *
 * Kernels cannot start processes or replace this one: a seccomp filter makes
 * fork, vfork, clone without CLONE_THREAD, execve and execveat fail with
 * EPERM (threads still start: clone3, whose flags a filter cannot read,
 * fails with ENOSYS, and the C library then uses clone). A process a kernel
 * started would outlive the device, hold what the device held, and run on
 * after the library ended the device. Where the filter cannot be installed,
 * the process group still ends with the device. A fault signal is recorded in the
 * control block (signal, code, address, and the tag of the node that was
 * running) and then kills the process as it would have.
 */
#include <dlfcn.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_FOLLOW_MAX_NS 250000ull /* a wait's spin follows the last wait up to this */

#ifndef HW_IN_PROCESS
static hw_ctl *fault_ctl; /* where the fault handler writes; this process has one device */

static uint64_t hw_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void futex_wait(uint32_t *word, uint32_t seen, long timeout_ns) {
  struct timespec ts = {timeout_ns / 1000000000L, timeout_ns % 1000000000L};
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void futex_wake(uint32_t *word) { syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0); }

static void on_fault(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  fault_ctl->fault_code = si->si_code;
  fault_ctl->fault_addr = (uint64_t)(uintptr_t)si->si_addr;
  __atomic_store_n(&fault_ctl->fault_signo, sig, __ATOMIC_SEQ_CST); /* last: the library reads it first */
  /* the handler was reset to the default: dying is what the signal meant */
  raise(sig);
}

static void catch_faults(void) {
  static char stack[1 << 16];
  stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
    sigaction(sigs[i], &sa, NULL);
  }
}
#endif /* HW_IN_PROCESS */

static void fill(const hw_node *n) {
  uint64_t c = n->u.fill.count;
  if (n->u.fill.elem_size == 1) {
    memset((void *)(uintptr_t)n->u.fill.dst, (int)(n->u.fill.pattern & 0xff), c);
  } else if (n->u.fill.elem_size == 4) {
    uint32_t v = (uint32_t)n->u.fill.pattern, *d = (uint32_t *)(uintptr_t)n->u.fill.dst;
    for (uint64_t i = 0; i < c; i++) d[i] = v;
  } else {
    uint64_t v = n->u.fill.pattern, *d = (uint64_t *)(uintptr_t)n->u.fill.dst;
    for (uint64_t i = 0; i < c; i++) d[i] = v;
  }
}

/* The node runners answer 0, or -1 with ctl->text when a kernel's launch
 * failed; what comes after it does not run, and running_tag still names it. */
static int run_node(hw_ctl *ctl, const hw_node *n, const uint64_t *args);

static int run_seq(hw_ctl *ctl, const hw_seq *s) {
  const hw_node *n = (const hw_node *)(uintptr_t)s->nodes, *end = n + s->n;
  const uint64_t *args = (const uint64_t *)(uintptr_t)s->args;
  for (; n < end; n++)
    if (run_node(ctl, n, args + n->arg0)) return -1;
  return 0;
}

static uint64_t clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* run_seq, writing {tag, start, end} of each of the first `max` nodes to
 * `times` (a while loop is one node: its trips inside its span). */
static int run_seq_timed(hw_ctl *ctl, const hw_seq *s, uint64_t *times, uint64_t max) {
  const hw_node *n = (const hw_node *)(uintptr_t)s->nodes;
  const uint64_t *args = (const uint64_t *)(uintptr_t)s->args;
  for (uint32_t i = 0; i < s->n; i++) {
    if (i < max) {
      times[3 * i] = n[i].tag;
      times[3 * i + 1] = clock_ns();
    }
    if (run_node(ctl, &n[i], args + n[i].arg0)) return -1;
    if (i < max) times[3 * i + 2] = clock_ns();
  }
  return 0;
}

static int run_node(hw_ctl *ctl, const hw_node *n, const uint64_t *args) {
  __atomic_store_n(&ctl->running_tag, n->tag, __ATOMIC_RELAXED);
  switch (n->kind) {
  case HW_LAUNCH:
    return ((hw_launcher)(uintptr_t)n->u.launch.fn)(n->u.launch.grid, n->u.launch.block, args, n->shared, ctl->text,
                                                     HW_TEXT);
  case HW_COPY:
    memmove((void *)(uintptr_t)n->u.copy.dst, (const void *)(uintptr_t)n->u.copy.src, n->u.copy.bytes);
    break;
  case HW_FILL: fill(n); break;
  case HW_WHILE: {
    const volatile int32_t *flag = (const volatile int32_t *)(uintptr_t)n->u.loop.flag;
    const hw_seq *body = (const hw_seq *)(uintptr_t)n->u.loop.body;
    for (uint32_t t = 0; t < n->u.loop.max_trips && *flag != 0; t++)
      if (run_seq(ctl, body)) return -1;
    break;
  }
  default: break;
  }
  return 0;
}

/* A batch of jobs' steps; a[2] tells which one runs, for a fault, and which
 * one failed. */
static int run_steps(hw_ctl *ctl, hw_step *steps, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    hw_step *st = &steps[i];
    __atomic_store_n(&ctl->a[2], i, __ATOMIC_RELAXED);
    switch (st->kind) {
    case HW_STEP_COPY: memmove((void *)(uintptr_t)st->dst, (const void *)(uintptr_t)st->src, st->bytes); break;
    case HW_STEP_ZERO: memset((void *)(uintptr_t)st->dst, 0, st->bytes); break;
    case HW_STEP_SEQ:
      if (run_seq(ctl, (const hw_seq *)(uintptr_t)st->src)) return -1;
      break;
    default: break;
    }
    if (st->kind == HW_STEP_SEQ) st->t_end = clock_ns();
  }
  __atomic_store_n(&ctl->a[2], n, __ATOMIC_RELAXED);
  return 0;
}

typedef struct module {
  void *dl;
  int fd; /* kept open while loaded: dlopen knows modules by path name */
} module;

static int load(hw_ctl *ctl, uint64_t image, uint64_t len) {
  module *m = calloc(1, sizeof *m);
  int fd = m ? memfd_create("schedrun-module", MFD_CLOEXEC) : -1;
  const char *p = (const char *)(uintptr_t)image;
  while (fd >= 0 && len) {
    ssize_t w = write(fd, p, len);
    if (w <= 0) break;
    p += w;
    len -= (uint64_t)w;
  }
  if (!m || fd < 0 || len) {
    snprintf(ctl->text, HW_TEXT, "cannot stage a module in the worker");
    if (fd >= 0) close(fd);
    free(m);
    return -1;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  m->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!m->dl) {
    const char *why = dlerror();
    snprintf(ctl->text, HW_TEXT, "cannot load module: %s", why ? why : "?");
    close(fd);
    free(m);
    return -1;
  }
  m->fd = fd;
  ctl->a[0] = (uint64_t)(uintptr_t)m;
  return 0;
}

/* Answers one request; the worker's loop and, in-process, the library call it. */
#ifdef HW_IN_PROCESS
int hw_handle(hw_ctl *ctl, uint32_t op, uint64_t arena);
#else
static
#endif
int hw_handle(hw_ctl *ctl, uint32_t op, uint64_t arena) {
  switch (op) {
  case HW_OP_HELLO: ctl->a[0] = arena; return 0;
  case HW_OP_LOAD: return load(ctl, ctl->a[0], ctl->a[1]);
  case HW_OP_SYM: {
    module *m = (module *)(uintptr_t)ctl->a[0];
    ctl->text[HW_TEXT - 1] = '\0';
    void *f = dlsym(m->dl, ctl->text);
    if (!f) return -1;
    ctl->a[0] = (uint64_t)(uintptr_t)f;
    return 0;
  }
  case HW_OP_UNLOAD: {
    module *m = (module *)(uintptr_t)ctl->a[0];
    dlclose(m->dl);
    close(m->fd);
    free(m);
    return 0;
  }
  case HW_OP_RUN_SEQ:
    if (ctl->a[1] ? run_seq_timed(ctl, (const hw_seq *)(uintptr_t)ctl->a[0], (uint64_t *)(uintptr_t)ctl->a[1], ctl->a[2])
                  : run_seq(ctl, (const hw_seq *)(uintptr_t)ctl->a[0]))
      return -1;
    break;
  case HW_OP_RUN_NODE:
    if (run_node(ctl, (const hw_node *)(uintptr_t)ctl->a[0], (const uint64_t *)(uintptr_t)ctl->a[1])) return -1;
    break;
  case HW_OP_RUN_STEPS:
    if (run_steps(ctl, (hw_step *)(uintptr_t)ctl->a[0], ctl->a[1])) return -1;
    break;
#ifndef HW_IN_PROCESS
  case HW_OP_EXIT: _exit(0);
#endif
  default: snprintf(ctl->text, HW_TEXT, "unknown request %u", op); return -1;
  }
  __atomic_store_n(&ctl->running_tag, HW_NO_TAG, __ATOMIC_RELAXED);
  return 0;
}

#ifndef HW_IN_PROCESS
/* Applies the protection changes a request carries, in order. Should the
 * kernel refuse a protection change (it limits the number of mappings), the
 * whole buffer zone becomes writable and stays so: buffers keep working,
 * unguarded, and the library can tell from ctl->unguarded. A mapping that
 * fails fails the request, with text: a buffer that could not be mapped onto
 * the caller's memory must not run on the arena's stale bytes, and one that
 * could not be mapped back is closed (a kernel touching it faults) rather
 * than left on memory the caller may reuse. 0, or -1. */
static int apply_prot(hw_ctl *ctl, uint8_t *arena, uint64_t zone, uint64_t size) {
  uint32_t n = ctl->nprot < HW_PROT_MAX ? ctl->nprot : HW_PROT_MAX;
  int rc = 0;
  for (uint32_t i = 0; i < n; i++) {
    const hw_prot *p = &ctl->prot[i];
    void *at = (void *)(uintptr_t)p->addr;
    if (p->source != HW_PROT) {
      int fd = p->source == HW_MAP_HOST ? HW_HOST_FD : 3;
      uint64_t off = p->source == HW_MAP_HOST ? p->offset : p->addr - (uint64_t)(uintptr_t)arena;
      /* the caller's pages are the job's: the worker's page tables are
       * filled at once rather than fault by fault */
      int flags = MAP_SHARED | MAP_FIXED | (p->source == HW_MAP_HOST ? MAP_POPULATE : MAP_NORESERVE);
      if (mmap(at, p->len, PROT_READ | PROT_WRITE, flags, fd, (off_t)off) == MAP_FAILED) {
        int e = errno;
        if (p->source == HW_MAP_ARENA) mprotect(at, p->len, PROT_NONE);
        if (rc == 0)
          snprintf(ctl->text, HW_TEXT, "cannot map %llu bytes of a buffer at 0x%llx onto %s: %s",
                   (unsigned long long)p->len, (unsigned long long)p->addr,
                   p->source == HW_MAP_HOST ? "the caller's memory" : "device memory again", strerror(e));
        rc = -1;
      }
    } else if (!ctl->unguarded &&
               mprotect(at, p->len, p->writable ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
      mprotect(arena + zone, size - zone, PROT_READ | PROT_WRITE);
      ctl->unguarded = 1;
    }
  }
  ctl->nprot = 0;
  return rc;
}

/* Ends this process when the library's process has ended (its pipe closes). */
static void *watchdog(void *arg) {
  pid_t library = *(const pid_t *)arg;
  char c;
  ssize_t r;
  while ((r = read(4, &c, 1)) != 0)
    if (r < 0 && errno != EINTR) break;
  /* a kernel closed the descriptor: the parent is watched instead */
  while (r != 0 && getppid() == library) {
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
  }
  _exit(0);
}

#if defined(__x86_64__)
#define HW_AUDIT_ARCH 0xc000003eu /* AUDIT_ARCH_X86_64 */
#elif defined(__aarch64__)
#define HW_AUDIT_ARCH 0xc00000b7u /* AUDIT_ARCH_AARCH64 */
#endif

/* See the comment at the top. 0, or -1 where no filter was installed. */
static int forbid_processes(void) {
#if defined(HW_AUDIT_ARCH) && defined(SYS_clone) && defined(SYS_execve)
#define HW_LD(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, field))
#define HW_RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
  struct sock_filter f[] = {
      HW_LD(arch),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, HW_AUDIT_ARCH, 1, 0),
      HW_RET(SECCOMP_RET_ERRNO | EPERM), /* another ABI's system calls */
      HW_LD(nr),
#if defined(__x86_64__)
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1), /* x32 */
      HW_RET(SECCOMP_RET_ERRNO | EPERM),
#endif
#ifdef SYS_clone3
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
      HW_RET(SECCOMP_RET_ERRNO | ENOSYS),
#endif
#ifdef SYS_fork
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fork, 0, 1),
      HW_RET(SECCOMP_RET_ERRNO | EPERM),
#endif
#ifdef SYS_vfork
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_vfork, 0, 1),
      HW_RET(SECCOMP_RET_ERRNO | EPERM),
#endif
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_execve, 0, 1),
      HW_RET(SECCOMP_RET_ERRNO | EPERM),
#ifdef SYS_execveat
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_execveat, 0, 1),
      HW_RET(SECCOMP_RET_ERRNO | EPERM),
#endif
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 1, 0),
      HW_RET(SECCOMP_RET_ALLOW),
      /* clone: a thread (CLONE_THREAD, 0x10000, in the flags, its first
       * argument's low word on both ABIs) or nothing */
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x00010000u, 0, 1),
      HW_RET(SECCOMP_RET_ALLOW),
      HW_RET(SECCOMP_RET_ERRNO | EPERM),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0 ? 0 : -1;
#else
  return -1;
#endif
}

/* Writes the eventfd for an answer nobody collected, unless a library
 * thread cleared `notify` first (it then found the answer in `done`). */
static void announce(hw_ctl *ctl) {
  if (!__atomic_exchange_n(&ctl->notify, 0, __ATOMIC_SEQ_CST)) return;
  uint64_t one = 1;
  ssize_t wrote;
  while ((wrote = write(HW_NOTIFY_FD, &one, sizeof one)) < 0 && errno == EINTR) {
  }
  if (wrote != (ssize_t)sizeof one) _exit(HW_EXIT_NOTIFY); /* a kernel closed it: nobody would hear the answer */
}

int main(int argc, char **argv) {
  if (argc != 5) return 2;
  uint64_t size = strtoull(argv[1], NULL, 10), spin_ns = strtoull(argv[3], NULL, 10);
  uint64_t zone = strtoull(argv[4], NULL, 10);
  static pid_t library;
  library = (pid_t)strtol(argv[2], NULL, 10);
  pthread_t w;
  if (pthread_create(&w, NULL, watchdog, &library) != 0) return 5;
  forbid_processes();
  void *arena = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, 3, 0);
  if (arena == MAP_FAILED || zone < HW_CTL_BYTES || zone > size) return 3;
  if (zone < size && mprotect((uint8_t *)arena + zone, size - zone, PROT_NONE) != 0) return 3;
  hw_ctl *ctl = (hw_ctl *)arena;
  fault_ctl = ctl;
  if (ctl->abi != HW_ABI_VERSION) return 4;
  catch_faults();
  spin_gauge gauge = {0};
  uint32_t seen = __atomic_load_n(&ctl->done, __ATOMIC_ACQUIRE);
  /* how long the next wait spins: spin_ns, or twice the last wait when
   * that was longer but still short (requests that come every 50 us, a
   * graph's submissions with the library's work between them, find the
   * worker awake instead of paying a wake each), up to SPIN_FOLLOW_MAX_NS */
  uint64_t window = spin_ns;
  uint64_t answered = 0; /* when the last request was answered */
  bool lone = false;     /* it was a lone job's (ctl->lone) */
  for (;;) {
    uint32_t r;
    uint64_t t0 = hw_now_ns(), look = t0;
    /* after a lone job the next one is expected within the window even where
     * the cores are shared: asleep, the worker would be woken for it by a
     * caller that goes on running, and wait for a core */
    bool spin = lone || spin_gauge_may_spin(&gauge, t0);
    while ((r = __atomic_load_n(&ctl->req, __ATOMIC_ACQUIRE)) == seen) {
      /* an answer nobody has collected is announced once the grace is
       * over: the thread that posted it usually collects it before */
      uint64_t due = answered + HW_NOTIFY_GRACE_NS;
      bool pending = __atomic_load_n(&ctl->notify, __ATOMIC_ACQUIRE) != 0;
      if (pending && look >= due) {
        announce(ctl);
        continue;
      }
      if (spin && look - t0 < window) {
        spin = spin_gauge_yield(&gauge, &look, hw_now_ns) || lone; /* false: the core went elsewhere */
        continue;
      }
      __atomic_store_n(&ctl->worker_sleeping, 1, __ATOMIC_SEQ_CST);
      /* `notify` set again meanwhile (a thread that gave up collecting)
       * is seen here, or that thread sees worker_sleeping and wakes us */
      if (__atomic_load_n(&ctl->req, __ATOMIC_SEQ_CST) == seen &&
          (pending || !__atomic_load_n(&ctl->notify, __ATOMIC_SEQ_CST)))
        futex_wait(&ctl->req, seen, pending ? (long)(due - look) : 250000000L);
      __atomic_store_n(&ctl->worker_sleeping, 0, __ATOMIC_SEQ_CST);
      if (getppid() != library) _exit(0); /* the library's process is gone */
      look = hw_now_ns();
    }
    seen = r;
    lone = __atomic_load_n(&ctl->lone, __ATOMIC_RELAXED) != 0;
    uint64_t waited = hw_now_ns() - t0;
    window = spin_ns && waited <= SPIN_FOLLOW_MAX_NS / 2 && 2 * waited > spin_ns ? 2 * waited : spin_ns;
    int prot = ctl->nprot ? apply_prot(ctl, (uint8_t *)arena, zone, size) : 0;
    ctl->status = prot ? -1 : ctl->op == HW_OP_PROTECT ? 0 : hw_handle(ctl, ctl->op, (uint64_t)(uintptr_t)arena);
    __atomic_store_n(&ctl->done, r, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&ctl->library_sleeping, __ATOMIC_SEQ_CST)) futex_wake(&ctl->done);
    answered = hw_now_ns();
  }
}
#endif /* HW_IN_PROCESS */
