/* See host_device.h. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/spin_gauge.h"
#include "gpu/host/host_device.h"

extern char **environ;

#define ARENA_BYTES (1ull << 36) /* address space; pages are taken as they are touched */
#define START_TIMEOUT_NS (10ull * 1000000000ull)
#define SLEEP_SLICE_NS 20000000L /* how often a sleeping request looks at the worker */

_Static_assert(sizeof(hw_ctl) <= HW_CTL_BYTES, "the control block fits its page");
_Static_assert(sizeof(hw_node) == 48, "a recorded node is 48 bytes");

static void futex_wait(uint32_t *word, uint32_t seen, long timeout_ns) {
  struct timespec ts = {timeout_ns / 1000000000L, timeout_ns % 1000000000L};
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void futex_wake(uint32_t *word) { syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0); }

/* Records why the device is lost, once; later reasons are dropped. */
static void set_lost(host_device *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_lost(host_device *d, const char *fmt, ...) {
  if (atomic_load(&d->lost)) return;
  va_list ap;
  char why[sizeof d->lost_why];
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&d->lock_why);
  if (!atomic_load(&d->lost)) {
    memcpy(d->lost_why, why, sizeof why);
    atomic_store(&d->lost, true);
  }
  pthread_mutex_unlock(&d->lock_why);
}

static const char *sig_name(int sig) {
  switch (sig) {
  case SIGSEGV: return "SIGSEGV";
  case SIGBUS: return "SIGBUS";
  case SIGFPE: return "SIGFPE";
  case SIGILL: return "SIGILL";
  case SIGABRT: return "SIGABRT";
  case SIGTRAP: return "SIGTRAP";
  case SIGSYS: return "SIGSYS";
  case SIGKILL: return "SIGKILL";
  case SIGTERM: return "SIGTERM";
  default: return "a signal";
  }
}

/* What the worker's fault handler left, as words. */
static void describe_fault(const hw_ctl *c, char *out, size_t n) {
  int sig = c->fault_signo;
  const char *what = sig == SIGSEGV   ? "invalid memory access"
                     : sig == SIGBUS  ? "bus error"
                     : sig == SIGFPE  ? (c->fault_code == FPE_INTDIV ? "integer division by zero" : "arithmetic exception")
                     : sig == SIGILL  ? "illegal instruction"
                     : sig == SIGABRT ? "abort()"
                     : sig == SIGTRAP ? "trap"
                                      : "fatal signal";
  if (sig == SIGSEGV || sig == SIGBUS)
    snprintf(out, n, "%s (%s at address 0x%llx)", what, sig_name(sig), (unsigned long long)c->fault_addr);
  else
    snprintf(out, n, "%s (%s)", what, sig_name(sig));
}

/* Kills the worker and whatever its kernels started in its process group. */
static void kill_worker(pid_t pid) {
  if (pid <= 0) return;
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
}

static pid_t reap(host_device *d, int *status) {
  pid_t pid = atomic_exchange(&d->pid, 0);
  *status = 0;
  if (pid <= 0) return 0;
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
  return pid;
}

/* The worker has ended: say how, and lose the device. */
static int died(host_device *d, gpu_failure *f, schedrun_error_t *err) {
  int status;
  kill_worker(atomic_load(&d->pid)); /* what is left of its group */
  reap(d, &status);
  f->tag = __atomic_load_n(&d->ctl->running_tag, __ATOMIC_RELAXED);
  f->lost = true;
  char how[256];
  int code = SCHEDRUN_EFAULT;
  if (d->ctl->fault_signo) describe_fault(d->ctl, how, sizeof how);
  else if (WIFEXITED(status) && WEXITSTATUS(status) == HW_EXIT_NOTIFY)
    snprintf(how, sizeof how, "the device's process could no longer announce its answers (a kernel closed its "
                              "descriptor %d)", HW_NOTIFY_FD);
  else if (WIFEXITED(status))
    snprintf(how, sizeof how, "the device's process ended with exit status %d (a kernel may not end it)",
             WEXITSTATUS(status));
  else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
    snprintf(how, sizeof how, "the device's process was killed by SIGKILL, not by schedrun: the system's "
                              "out-of-memory killer does this when memory runs out (the kernel log says), or "
                              "another process did");
  else if (WIFSIGNALED(status))
    snprintf(how, sizeof how, "the device's process was killed by %s", sig_name(WTERMSIG(status)));
  else
    snprintf(how, sizeof how, "the device's process ended");
  if (atomic_load(&d->lost)) code = SCHEDRUN_ELOST; /* abandoned: that reason stands */
  set_lost(d, "%s: %s", d->name, how);
  return err_set(err, code, "%s", d->lost_why);
}

static int timed_out(host_device *d, gpu_failure *f, schedrun_error_t *err) {
  kill_worker(atomic_load(&d->pid));
  int status;
  reap(d, &status);
  f->tag = __atomic_load_n(&d->ctl->running_tag, __ATOMIC_RELAXED);
  f->lost = true;
  set_lost(d, "%s: a job ran past its deadline; the device's process was killed", d->name);
  return err_set(err, SCHEDRUN_ETIMEOUT, "%s: the job ran past its deadline (the device is lost)", d->name);
}

/* Whether the worker process has ended, asked of the kernel without reaping
 * it (a descriptor could be closed by a kernel, or kept open by a process it
 * started: neither says anything about the worker). */
static bool worker_ended(const host_device *d) {
  pid_t pid = atomic_load(&d->pid);
  if (pid <= 0) return true;
  siginfo_t info;
  memset(&info, 0, sizeof info);
  if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == ECHILD;
  return info.si_pid == pid;
}


int hw_handle(hw_ctl *ctl, uint32_t op, uint64_t arena); /* gpu/host/host_inprocess.c */

/* Appends a change for the worker (lock_prot held); -1 when out of memory. */
static int push_prot(host_device *d, hw_prot p) {
  if (d->nprot == d->prot_cap) {
    uint32_t cap = d->prot_cap ? 2 * d->prot_cap : 64;
    hw_prot *v = realloc(d->prot_pending, cap * sizeof *v);
    if (!v) return -1;
    d->prot_pending = v;
    d->prot_cap = cap;
  }
  d->prot_pending[d->nprot++] = p;
  return 0;
}

int host_device_guard(host_device *d, uint64_t addr, uint64_t len, bool writable) {
  assert(addr % d->page == 0 && len % d->page == 0 && addr - d->wbase >= d->zone);
  if (d->in_process || len == 0) return 0; /* one mapping, the library's: nothing to guard */
  pthread_mutex_lock(&d->lock_prot);
  int rc = 0;
  /* the latest pending change that touches the range: when it is the same
   * range made the other way, the two cancel (a buffer freed and another
   * allocated in its place before the worker heard of either) */
  uint32_t i = d->nprot;
  while (i > 0 && (d->prot_pending[i - 1].addr >= addr + len || addr >= d->prot_pending[i - 1].addr + d->prot_pending[i - 1].len))
    i--;
  if (i > 0 && d->prot_pending[i - 1].source == HW_PROT && d->prot_pending[i - 1].addr == addr &&
      d->prot_pending[i - 1].len == len && (d->prot_pending[i - 1].writable != 0) != writable) {
    memmove(&d->prot_pending[i - 1], &d->prot_pending[i], (d->nprot - i) * sizeof *d->prot_pending);
    d->nprot--;
  } else {
    rc = push_prot(d, (hw_prot){addr, len, writable, HW_PROT, 0});
  }
  pthread_mutex_unlock(&d->lock_prot);
  return rc;
}

/* Maps the library's view of buffer [addr, addr + len) onto the host
 * memory file fd at offset, or back onto the arena (fd -1). */
static int remap_here(host_device *d, uint64_t addr, uint64_t len, int fd, uint64_t offset, schedrun_error_t *err) {
  bool host = fd >= 0;
  if (mmap(host_device_ptr(d, addr), len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
           host ? fd : d->arena_fd, host ? (off_t)offset : (off_t)(addr - d->wbase)) != MAP_FAILED)
    return SCHEDRUN_OK;
  return err_set(err, SCHEDRUN_EBACKEND, "%s: cannot map %llu bytes of a buffer onto %s: %s", d->name,
                 (unsigned long long)len, host ? "the caller's memory" : "device memory again", strerror(errno));
}

static host_alias *alias_of(host_device *d, uint64_t addr) {
  for (uint32_t i = 0; i < d->nalias; i++)
    if (d->alias[i].addr == addr) return &d->alias[i];
  return NULL;
}

/* Sends the worker's mapping of alias i back onto the arena and forgets it
 * (lock_prot held); a device that cannot be told is lost. */
static void alias_restore(host_device *d, uint32_t i) {
  host_alias a = d->alias[i];
  assert(!a.bound);
  d->alias[i] = d->alias[--d->nalias];
  if (push_prot(d, (hw_prot){a.addr, a.len, 1, HW_MAP_ARENA, 0}) != 0)
    host_device_abandon(d, "out of memory for a buffer's mapping back onto device memory");
}

int host_device_bind(host_device *d, uint64_t addr, uint64_t len, int fd, uint64_t offset, bool here,
                     schedrun_error_t *err) {
  assert(fd >= 0 && addr % d->page == 0 && len % d->page == 0 && addr - d->wbase >= d->zone &&
         addr - d->wbase + len <= d->size);
  if ((here || d->in_process) && remap_here(d, addr, len, fd, offset, err)) return SCHEDRUN_EBACKEND;
  if (d->in_process) return SCHEDRUN_OK; /* the library's view is the device's */
  pthread_mutex_lock(&d->lock_prot);
  host_alias *a = alias_of(d, addr);
  int rc = 0;
  assert(!a || !a->bound); /* one job at a time has a buffer */
  if (a && a->offset == offset && a->len == len) {
    a->bound = true; /* the worker maps it there still: nothing to do */
  } else if ((rc = push_prot(d, (hw_prot){addr, len, 1, HW_MAP_HOST, offset})) == 0) {
    if (a) a->offset = offset, a->len = len, a->bound = true;
    else if (d->nalias < HOST_ALIAS_MAX) d->alias[d->nalias++] = (host_alias){addr, len, offset, true};
    /* else not remembered: unbinding maps it back at once */
  }
  pthread_mutex_unlock(&d->lock_prot);
  if (rc == 0) return SCHEDRUN_OK;
  if (here) remap_here(d, addr, len, -1, 0, &(schedrun_error_t){0}); /* the worker would not follow: undo ours */
  return err_set(err, SCHEDRUN_ENOMEM, "%s: out of memory", d->name);
}

int host_device_unbind(host_device *d, uint64_t addr, uint64_t len, bool here, schedrun_error_t *err) {
  int rc = here || d->in_process ? remap_here(d, addr, len, -1, 0, err) : SCHEDRUN_OK;
  if (rc) host_device_abandon(d, "a buffer's memory could not be mapped back");
  if (d->in_process) return rc;
  pthread_mutex_lock(&d->lock_prot);
  host_alias *a = alias_of(d, addr);
  if (a) a->bound = false; /* mapped back before anything else runs (host_device_request) */
  else if (push_prot(d, (hw_prot){addr, len, 1, HW_MAP_ARENA, 0}) != 0)
    host_device_abandon(d, "out of memory for a buffer's mapping back onto device memory");
  pthread_mutex_unlock(&d->lock_prot);
  return rc;
}

void host_device_forget_alias(host_device *d, uint64_t addr) {
  pthread_mutex_lock(&d->lock_prot);
  for (uint32_t i = 0; i < d->nalias; i++)
    if (d->alias[i].addr == addr) {
      alias_restore(d, i);
      break;
    }
  pthread_mutex_unlock(&d->lock_prot);
}

/* Moves up to HW_PROT_MAX pending protection changes into the control block
 * (the worker is between requests: d->lock is held); true when more remain. */
static bool stage_prot(host_device *d, uint32_t op) {
  pthread_mutex_lock(&d->lock_prot);
  /* before anything runs, buffers left on the caller's memory by the jobs
   * before go back onto the arena, unless the job about to run bound them
   * again */
  if (op == HW_OP_RUN_SEQ || op == HW_OP_RUN_NODE || op == HW_OP_RUN_STEPS)
    for (uint32_t i = d->nalias; i-- > 0;)
      if (!d->alias[i].bound) alias_restore(d, i);
  uint32_t n = d->nprot < HW_PROT_MAX ? d->nprot : HW_PROT_MAX;
  d->ctl->nprot = n;
  if (n) {
    memcpy(d->ctl->prot, d->prot_pending, n * sizeof *d->prot_pending);
    memmove(d->prot_pending, d->prot_pending + n, (d->nprot - n) * sizeof *d->prot_pending);
    d->nprot -= n;
  }
  bool more = d->nprot > 0;
  pthread_mutex_unlock(&d->lock_prot);
  return more;
}

static int post(host_device *d, uint32_t op, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err);

int host_device_request(host_device *d, uint32_t op, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  f->tag = HW_NO_TAG;
  f->lost = false;
  /* the pending protection changes go first: HW_PROT_MAX with each request
   * (a change made after this goes with the next one) */
  while (!d->in_process && stage_prot(d, op)) {
    int rc = post(d, HW_OP_PROTECT, deadline_ns, f, err);
    if (rc) return rc;
  }
  return post(d, op, deadline_ns, f, err);
}

/* Posts op (ctl->a[] filled), a lone job's or not: the request's number. */
static uint32_t begin(host_device *d, uint32_t op, bool lone) {
  hw_ctl *c = d->ctl;
  c->op = op;
  c->status = 0; /* ctl->text may carry the request's argument (a symbol) */
  c->lone = lone; /* before `req`, which publishes it */
  uint32_t r = c->req + 1;
  __atomic_store_n(&c->req, r, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&c->worker_sleeping, __ATOMIC_SEQ_CST)) futex_wake(&c->req);
  return r;
}

/* Waits for request r's answer until deadline_ns (0: none): past it, the
 * device is lost, or with give_up the wait ends (SCHEDRUN_EAGAIN), the
 * request still running. */
static int finish(host_device *d, uint32_t r, uint64_t deadline_ns, bool give_up, gpu_failure *f,
                  schedrun_error_t *err) {
  hw_ctl *c = d->ctl;
  uint64_t t0 = now_ns(), look = t0;
  bool spin = spin_gauge_may_spin(&spin_gauge_process, t0);
  while (__atomic_load_n(&c->done, __ATOMIC_ACQUIRE) != r) {
    bool over = give_up && deadline_ns && look >= deadline_ns;
    if (spin && look - t0 < d->spin_ns && !over) {
      spin = spin_gauge_yield(&spin_gauge_process, &look, now_ns); /* false: the core went elsewhere */
      continue;
    }
    uint64_t now = now_ns();
    if (give_up && deadline_ns && now >= deadline_ns) return SCHEDRUN_EAGAIN;
    long slice = SLEEP_SLICE_NS;
    if (deadline_ns && deadline_ns > now && (long)(deadline_ns - now) < slice) slice = (long)(deadline_ns - now);
    __atomic_store_n(&c->library_sleeping, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&c->done, __ATOMIC_SEQ_CST) != r && slice > 0) futex_wait(&c->done, r - 1, slice);
    __atomic_store_n(&c->library_sleeping, 0, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&c->done, __ATOMIC_ACQUIRE) == r) break;
    if (worker_ended(d)) return died(d, f, err);
    if (deadline_ns && now_ns() >= deadline_ns) return give_up ? SCHEDRUN_EAGAIN : timed_out(d, f, err);
  }
  if (c->status != 0) {
    c->text[HW_TEXT - 1] = '\0';
    return err_set(err, SCHEDRUN_EBACKEND, "%s: %s", d->name, c->text);
  }
  return SCHEDRUN_OK;
}

static int post(host_device *d, uint32_t op, uint64_t deadline_ns, gpu_failure *f, schedrun_error_t *err) {
  if (d->in_process) {
    d->ctl->op = op;
    d->ctl->status = hw_handle(d->ctl, op, (uint64_t)(uintptr_t)d->base);
    if (d->ctl->status != 0) {
      d->ctl->text[HW_TEXT - 1] = '\0';
      return err_set(err, SCHEDRUN_EBACKEND, "%s: %s", d->name, d->ctl->text);
    }
    return SCHEDRUN_OK;
  }
  if (atomic_load(&d->lost) || atomic_load(&d->pid) == 0) {
    f->lost = true;
    return err_set(err, SCHEDRUN_ELOST, "%s is lost: %s", d->name, atomic_load(&d->lost) ? d->lost_why : "no worker");
  }
  return finish(d, begin(d, op, false), deadline_ns, false, f, err);
}

void host_device_lock(host_device *d) {
  pthread_mutex_lock(&d->lock);
  while (d->posted) pthread_cond_wait(&d->posted_cv, &d->lock);
}

bool host_device_post(host_device *d, uint32_t op) {
  assert(!d->posted); /* host_device_lock waited for the last one */
  if (d->in_process || d->notify_fd < 0 || d->pid_fd < 0 || atomic_load(&d->lost) || atomic_load(&d->pid) == 0)
    return false;
  gpu_failure f;
  while (stage_prot(d, op)) /* as host_device_request: the changes that do not fit go first */
    if (post(d, HW_OP_PROTECT, 0, &f, NULL)) return false;
  /* before the request: the worker reads it after answering */
  __atomic_store_n(&d->ctl->notify, 1, __ATOMIC_SEQ_CST);
  d->posted_req = begin(d, op, true);
  d->posted = true;
  return true;
}

int host_device_collect(host_device *d, uint64_t until_ns, gpu_failure *f, schedrun_error_t *err) {
  f->tag = HW_NO_TAG;
  f->lost = false;
  pthread_mutex_lock(&d->lock);
  assert(d->posted); /* one collect per post, by whoever holds the device's turn */
  /* whoever clears it first hears the answer: the worker, after this,
   * writes nothing (and one that cleared it already has written, or will:
   * the wake it gives then finds nothing posted) */
  __atomic_store_n(&d->ctl->notify, 0, __ATOMIC_SEQ_CST);
  int rc = finish(d, d->posted_req, until_ns, true, f, err);
  if (rc == SCHEDRUN_EAGAIN) {
    /* not ended by until_ns: announced again when it ends (the worker looks
     * at `notify` before it sleeps, or is woken here to) */
    __atomic_store_n(&d->ctl->notify, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&d->ctl->worker_sleeping, __ATOMIC_SEQ_CST)) futex_wake(&d->ctl->req);
    pthread_mutex_unlock(&d->lock);
    return rc;
  }
  d->posted = false;
  pthread_cond_broadcast(&d->posted_cv);
  pthread_mutex_unlock(&d->lock);
  return rc;
}

int host_device_wake_fds(host_device *d, int fds[2]) {
  int n = 0;
  if (d->notify_fd >= 0) fds[n++] = d->notify_fd;
  if (d->pid_fd >= 0 && !atomic_load(&d->lost) && atomic_load(&d->pid) != 0) fds[n++] = d->pid_fd;
  return n;
}

void host_device_woken(host_device *d) {
  uint64_t count;
  if (d->notify_fd >= 0) (void)!read(d->notify_fd, &count, sizeof count); /* non-blocking */
  if (d->pid_fd < 0 || atomic_load(&d->lost) || !worker_ended(d)) return;
  /* ended between requests: lost now, so that its pidfd, readable for good,
   * leaves the set (a request in flight would have said so itself) */
  pthread_mutex_lock(&d->lock);
  if (!d->posted && !atomic_load(&d->lost)) {
    gpu_failure f;
    schedrun_error_t e = {0};
    died(d, &f, &e);
    schedrun_error_clear(&e);
  }
  pthread_mutex_unlock(&d->lock);
}

int host_fd_high(int fd) {
  if (fd < 0) return -1;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  int e = errno;
  close(fd);
  errno = e;
  return high;
}

static int spawn(host_device *d, const char *worker, int worker_fd, schedrun_error_t *err) {
  int lib[2];
  if (pipe2(lib, O_CLOEXEC) != 0) return err_set(err, SCHEDRUN_EBACKEND, "%s: pipe: %s", d->name, strerror(errno));
  /* held, never written: it closes when this process ends, however it ends;
   * kept clear of the descriptors the worker is given (0, 3, 4 and 5), as the
   * arena's and the worker program's are */
  d->lib_fd = host_fd_high(lib[1]);
  int lib_read = host_fd_high(lib[0]);
  if (d->lib_fd < 0 || lib_read < 0) {
    if (lib_read >= 0) close(lib_read);
    return err_set(err, SCHEDRUN_EBACKEND, "%s: fcntl: %s", d->name, strerror(errno));
  }
  /* without it (or without a pidfd, below) requests are not posted to be
   * collected later (host_device_post): each is waited for where it is made */
  d->notify_fd = host_fd_high(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  assert(d->arena_fd >= 10 && worker_fd >= 10 && (d->host_fd < 0 || d->host_fd >= 10));
  char size[32], library[32], spin[32], zone[32], exe[64];
  snprintf(size, sizeof size, "%llu", (unsigned long long)d->size);
  snprintf(library, sizeof library, "%d", (int)getpid());
  snprintf(spin, sizeof spin, "%llu", (unsigned long long)d->spin_ns);
  snprintf(zone, sizeof zone, "%llu", (unsigned long long)d->zone);
  /* what runs is the file checked to be this user's (host_worker_program),
   * through its descriptor: the path could have been swapped since */
  snprintf(exe, sizeof exe, "/proc/self/fd/%d", worker_fd);
  char *argv[] = {(char *)worker, size, library, spin, zone, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, d->arena_fd, 3);
  posix_spawn_file_actions_adddup2(&fa, lib_read, 4);
  if (d->host_fd >= 0) posix_spawn_file_actions_adddup2(&fa, d->host_fd, HW_HOST_FD);
  if (d->notify_fd >= 0) posix_spawn_file_actions_adddup2(&fa, d->notify_fd, HW_NOTIFY_FD);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t none, faults;
  sigemptyset(&none);
  sigemptyset(&faults);
  const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGPIPE, SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(sigs); i++) sigaddset(&faults, sigs[i]);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &faults);
  /* its own process group: a terminal's ^C is the library user's to handle,
   * and must not take the devices away in the middle of it; and ending the
   * device ends the whole group */
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid;
  int rc = posix_spawn(&pid, exe, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(lib_read);
  if (rc != 0) return err_set(err, SCHEDRUN_EBACKEND, "%s: cannot start its worker process %s: %s", d->name, worker, strerror(rc));
  atomic_store(&d->pid, pid);
#ifdef SYS_pidfd_open
  d->pid_fd = host_fd_high((int)syscall(SYS_pidfd_open, pid, 0));
#endif
  return SCHEDRUN_OK;
}

int host_device_start(host_device *d, int index, const char *worker, int worker_fd, int host_fd, uint64_t spin_ns,
                      schedrun_error_t *err) {
  memset(d, 0, sizeof *d);
  d->host_fd = host_fd;
  d->index = index;
  snprintf(d->name, sizeof d->name, "host:%d", index);
  pthread_mutex_init(&d->lock, NULL);
  pthread_mutex_init(&d->lock_why, NULL);
  pthread_mutex_init(&d->lock_prot, NULL);
  pthread_cond_init(&d->posted_cv, NULL);
  d->arena_fd = d->lib_fd = d->notify_fd = d->pid_fd = -1;
  d->spin_ns = spin_ns;
  d->base = MAP_FAILED;
  d->arena_fd = host_fd_high(memfd_create("schedrun-device", MFD_CLOEXEC));
  for (d->size = ARENA_BYTES; d->arena_fd >= 0 && d->size >= (1ull << 30); d->size /= 4) {
    if (ftruncate(d->arena_fd, (off_t)d->size) != 0) continue;
    d->base = mmap(NULL, d->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, d->arena_fd, 0);
    if (d->base != MAP_FAILED) break;
  }
  if (d->base == MAP_FAILED) {
    int e = errno;
    host_device_stop(d);
    return err_set(err, SCHEDRUN_EBACKEND, "%s: cannot map device memory: %s", d->name, strerror(e));
  }
  d->ctl = (hw_ctl *)d->base;
  d->ctl->abi = HW_ABI_VERSION;
  d->in_process = worker == NULL;
  /* a quarter for the worker's own data, the rest for buffers, the zone
   * starting with a guard page */
  long page = sysconf(_SC_PAGESIZE);
  d->page = page > 0 ? (uint64_t)page : 4096;
  d->zone = d->size / 4 / d->page * d->page;
  int rc = host_arena_init(&d->alloc, HW_CTL_BYTES, d->zone) || host_arena_init(&d->bufs, d->zone + d->page, d->size)
               ? err_set(err, SCHEDRUN_ENOMEM, "out of memory")
           : d->in_process ? SCHEDRUN_OK
                           : spawn(d, worker, worker_fd, err);
  gpu_failure f;
  if (rc == SCHEDRUN_OK) {
    host_device_lock(d);
    rc = host_device_request(d, HW_OP_HELLO, now_ns() + START_TIMEOUT_NS, &f, err);
    d->wbase = d->ctl->a[0];
    pthread_mutex_unlock(&d->lock);
    if (rc) err_append(err, rc, "%s: its worker process did not start (%s)", d->name, worker);
  }
  if (rc) host_device_stop(d);
  return rc;
}

void host_device_abandon(host_device *d, const char *why) {
  set_lost(d, "%s: %s", d->name, why);
  kill_worker(atomic_load(&d->pid)); /* a request in flight sees the worker end */
}

void host_device_stop(host_device *d) {
  kill_worker(atomic_load(&d->pid));
  int status;
  reap(d, &status);
  assert(!d->posted); /* collected by the device's execute actor before it stopped */
  if (d->lib_fd >= 0) close(d->lib_fd);
  if (d->notify_fd >= 0) close(d->notify_fd);
  if (d->pid_fd >= 0) close(d->pid_fd);
  if (d->base != MAP_FAILED && d->base) munmap(d->base, d->size);
  if (d->arena_fd >= 0) close(d->arena_fd);
  host_arena_destroy(&d->alloc);
  host_arena_destroy(&d->bufs);
  free(d->prot_pending);
  d->prot_pending = NULL;
  d->nprot = d->prot_cap = 0;
  pthread_mutex_destroy(&d->lock);
  pthread_mutex_destroy(&d->lock_why);
  pthread_mutex_destroy(&d->lock_prot);
  pthread_cond_destroy(&d->posted_cv);
  d->base = MAP_FAILED;
  d->arena_fd = d->lib_fd = d->notify_fd = d->pid_fd = -1;
}
