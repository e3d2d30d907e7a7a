/*
 * The host backend's block runner: the threads of a CUDA block run as
 * cooperating fibers on one CPU thread, so that __syncthreads() is a real
 * barrier, __shared__ memory is one per block, and warp operations exchange
 * values between the 32 lanes of a warp. It is compiled into a kernel's
 * module (C++17, after the prelude) only when the kernel's source uses one of
 * these built-ins; other kernels run a block's threads as a plain loop.
 *
 * Scheduling: a block's fibers run in order, each until it waits (at a block
 * barrier or a warp operation) or returns. After every pass, the waits that
 * can end end: a warp operation when every lane it names waits at one, a
 * block barrier when every thread still running waits at one. A pass that
 * ends no wait while threads are still running is a deadlock, and a barrier
 * some threads of the block returned before reaching is divergent: the
 * launch fails with a text naming the kernel and the block, rather than
 * hanging (CUDA leaves both undefined; a GPU hangs or computes garbage).
 *
 * Memory: one runtime per CPU thread that runs the module's kernels (made on
 * first use, freed when the module is unloaded): 1024 fiber stacks of 64 KiB
 * (address space only, touched as used, a guard page under each), the
 * lanes' exchange slots, and the launch's dynamic shared memory. Static __shared__ variables are
 * thread_local statics: the blocks one CPU thread runs, it runs one after
 * another, so each block has them to itself.
 *
 * The switch is a few instructions on x86-64 (the callee-saved registers and
 * the stack pointer) and ucontext elsewhere.
 */
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace __sr {

enum : unsigned { MAX_THREADS = 1024, STACK = 64 * 1024, PAGE = 4096 };
enum : unsigned { F_RUN, F_BLOCK, F_WARP, F_DONE };

struct fiber {
  void *sp;
  unsigned state, mask;  /* mask: the lanes a warp operation waits for */
  unsigned wpar, bpar;   /* parity of the fiber's warp and block operations */
  uint3 idx;
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
};

struct runtime {
  fiber f[MAX_THREADS];
  uint64_t wslot[2][MAX_THREADS]; /* a warp operation's values, by parity */
  int bslot[2][MAX_THREADS];      /* a block barrier's predicates, by parity */
  void *main_sp;
#if !defined(__x86_64__)
  ucontext_t main_uc;
#endif
  unsigned n, cur;
  void (*body)(void *);
  void *ctx;
  unsigned char *stacks, *dyn;
  size_t dyn_len;
  runtime *next; /* in all_runtimes */
};

static thread_local runtime *rt;

/* Every runtime this module made, freed when the module is unloaded. No
 * thread_local object here has a destructor: one would make glibc keep the
 * module loaded after dlclose, and a later module opened under the same
 * path name (/proc/self/fd/N) would then be this one. A thread that ends
 * before the module is unloaded leaves its runtime here until then. */
static runtime *all_runtimes;
static int all_lock;

__attribute__((destructor)) static void free_runtimes() {
  for (runtime *r = all_runtimes, *next; r; r = next) {
    next = r->next;
    munmap(r->stacks, (size_t)MAX_THREADS * STACK);
    if (r->dyn) munmap(r->dyn, r->dyn_len);
    munmap(r, sizeof *r);
  }
  all_runtimes = nullptr;
}

#if defined(__x86_64__)
extern "C" void __sr_swap(void **save, void *to);
asm(".text\n"
    ".p2align 4\n"
    ".hidden __sr_swap\n"
    ".type __sr_swap,@function\n"
    "__sr_swap:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size __sr_swap, .-__sr_swap\n");
#endif

/* Where every fiber starts, on its own stack; it never returns. */
extern "C" __attribute__((used, noreturn)) void __sr_fiber_main() {
  for (;;) {
    runtime *r = rt;
    r->body(r->ctx);
    fiber *me = &r->f[r->cur];
    me->state = F_DONE;
#if defined(__x86_64__)
    __sr_swap(&me->sp, r->main_sp);
#else
    swapcontext(&me->uc, &r->main_uc);
#endif
  }
}

/* Back to the block's scheduler, waiting in `state`. */
static inline void park(unsigned state) {
  runtime *r = rt;
  fiber *me = &r->f[r->cur];
  me->state = state;
#if defined(__x86_64__)
  __sr_swap(&me->sp, r->main_sp);
#else
  swapcontext(&me->uc, &r->main_uc);
#endif
  __asm__ __volatile__("" ::: "memory"); /* threadIdx and shared memory were changed by others */
}

static runtime *get() {
  if (rt) return rt;
  void *m = mmap(nullptr, sizeof(runtime), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  runtime *r = (runtime *)m;
  void *s = mmap(nullptr, (size_t)MAX_THREADS * STACK, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s == MAP_FAILED) {
    munmap(m, sizeof(runtime));
    return nullptr;
  }
  r->stacks = (unsigned char *)s;
  for (unsigned i = 0; i < MAX_THREADS; i++) /* a stack overflow faults, not another fiber's stack */
    mprotect(r->stacks + (size_t)i * STACK, PAGE, PROT_NONE);
  while (__atomic_test_and_set(&all_lock, __ATOMIC_ACQUIRE)) {
  }
  r->next = all_runtimes;
  all_runtimes = r;
  __atomic_clear(&all_lock, __ATOMIC_RELEASE);
  rt = r;
  return r;
}

/* ---- the launch's error text, without stdio ---- */

struct text {
  char *p;
  unsigned cap, len;
  void s(const char *x) {
    while (*x && len + 1 < cap) p[len++] = *x++;
    if (cap) p[len] = 0;
  }
  void u(unsigned long long v) {
    char b[24];
    int i = 0;
    do b[i++] = (char)('0' + v % 10); while ((v /= 10) && i < 23);
    while (i && len + 1 < cap) p[len++] = b[--i];
    if (cap) p[len] = 0;
  }
};

static void where(text &t, const char *kernel) {
  t.s("kernel '");
  t.s(kernel);
  t.s("', block (");
  t.u(blockIdx.x);
  t.s(",");
  t.u(blockIdx.y);
  t.s(",");
  t.u(blockIdx.z);
  t.s("): ");
}

/* Ends the waits that can end after a pass; 0 when one did or the block is
 * done, -1 (with text) when the block can go no further. */
static int release(runtime *r, const char *kernel, text &t) {
  unsigned n = r->n, done = 0, at_block = 0, at_warp = 0;
  for (unsigned i = 0; i < n; i++) {
    unsigned st = r->f[i].state;
    done += st == F_DONE;
    at_block += st == F_BLOCK;
    at_warp += st == F_WARP;
  }
  if (done == n) return 0;
  bool moved = false;
  for (unsigned w = 0; at_warp && w * 32 < n; w++) {
    unsigned lanes = n - w * 32 >= 32 ? 0xffffffffu : (1u << (n - w * 32)) - 1, waiting = 0, exited = 0;
    for (unsigned l = 0; l < 32 && w * 32 + l < n; l++) {
      unsigned st = r->f[w * 32 + l].state;
      waiting |= (unsigned)(st == F_WARP) << l;
      exited |= (unsigned)(st == F_DONE) << l;
    }
    if (!waiting) continue;
    bool ready = true;
    for (unsigned l = 0; l < 32; l++)
      if (waiting >> l & 1) {
        unsigned need = r->f[w * 32 + l].mask & lanes;
        if (need & exited) {
          where(t, kernel);
          t.s("a warp operation of thread ");
          t.u(w * 32 + l);
          t.s(" names lanes of warp ");
          t.u(w);
          t.s(" that have returned");
          return -1;
        }
        if ((need & waiting) != need) ready = false;
      }
    if (!ready) continue;
    for (unsigned l = 0; l < 32; l++)
      if (waiting >> l & 1) r->f[w * 32 + l].state = F_RUN;
    moved = true;
  }
  if (moved) return 0;
  if (at_block && done) {
    where(t, kernel);
    t.s("__syncthreads() was reached by ");
    t.u(at_block);
    t.s(" of its ");
    t.u(n);
    t.s(" threads; ");
    t.u(done);
    t.s(" had returned (a barrier every thread of the block must reach)");
    return -1;
  }
  if (at_block == n - done && !at_warp) {
    for (unsigned i = 0; i < n; i++) r->f[i].state = F_RUN;
    return 0;
  }
  where(t, kernel);
  t.s("its threads wait for each other: ");
  t.u(at_block);
  t.s(" at __syncthreads(), ");
  t.u(at_warp);
  t.s(" at warp operations whose lanes wait elsewhere");
  return -1;
}

static void start(runtime *r, unsigned i) {
  fiber *f = &r->f[i];
  /* stack tops 64 KiB apart would all fall in the same cache sets, and each
   * switch would miss: each is moved down by its own number of cache lines
   * (under 16 KiB, so the stack keeps most of its room) */
  unsigned char *top = r->stacks + (size_t)(i + 1) * STACK - (size_t)(i * 37u % 256u) * 64u;
#if defined(__x86_64__)
  uint64_t *sp = (uint64_t *)top;
  *--sp = 0;                                     /* __sr_fiber_main's return address: none */
  *--sp = (uint64_t)(uintptr_t)&__sr_fiber_main; /* where __sr_swap's ret goes */
  for (int k = 0; k < 6; k++) *--sp = 0;         /* rbp rbx r12 r13 r14 r15 */
  f->sp = sp;
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = top - STACK + PAGE;
  f->uc.uc_stack.ss_size = STACK - PAGE;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, (void (*)())__sr_fiber_main, 0);
#endif
}

static int run_grid(const unsigned *g, const unsigned *b, unsigned shared, const char *kernel, char *msg,
                    unsigned cap, void (*body)(void *), void *ctx) {
  text t = {msg, cap, 0};
  if (cap) msg[0] = 0;
  unsigned long long n = (unsigned long long)b[0] * b[1] * b[2];
  if (n == 0 || n > MAX_THREADS) {
    t.s("kernel '");
    t.s(kernel);
    t.s("': a block of ");
    t.u(n);
    t.s(" threads (1 to 1024 run)");
    return -1;
  }
  runtime *r = get();
  if (!r) {
    t.s("kernel '");
    t.s(kernel);
    t.s("': no memory for its block's threads");
    return -1;
  }
  if (shared > r->dyn_len) {
    if (r->dyn) munmap(r->dyn, r->dyn_len);
    size_t len = ((size_t)shared + PAGE - 1) / PAGE * PAGE;
    void *d = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    r->dyn = d == MAP_FAILED ? nullptr : (unsigned char *)d;
    r->dyn_len = d == MAP_FAILED ? 0 : len;
    if (!r->dyn) {
      t.s("kernel '");
      t.s(kernel);
      t.s("': no memory for ");
      t.u(shared);
      t.s(" bytes of dynamic shared memory");
      return -1;
    }
  }
  r->n = (unsigned)n;
  r->body = body;
  r->ctx = ctx;
  gridDim = dim3(g[0], g[1], g[2]);
  blockDim = dim3(b[0], b[1], b[2]);
  for (unsigned bz = 0; bz < g[2]; bz++)
    for (unsigned by = 0; by < g[1]; by++)
      for (unsigned bx = 0; bx < g[0]; bx++) {
        blockIdx = uint3{bx, by, bz};
        for (unsigned i = 0; i < n; i++) {
          fiber *f = &r->f[i];
          f->state = F_RUN;
          f->wpar = f->bpar = 0;
          f->idx = uint3{i % b[0], i / b[0] % b[1], i / (b[0] * b[1])};
          start(r, i);
        }
        for (;;) {
          bool live = false;
          for (unsigned i = 0; i < n; i++) {
            fiber *f = &r->f[i];
            if (f->state != F_RUN) continue;
            r->cur = i;
            threadIdx = f->idx;
#if defined(__x86_64__)
            __sr_swap(&r->main_sp, f->sp);
#else
            swapcontext(&r->main_uc, &f->uc);
#endif
            live |= f->state != F_DONE;
          }
          if (!live) {
            bool all = true;
            for (unsigned i = 0; i < n && all; i++) all = r->f[i].state == F_DONE;
            if (all) break;
          }
          if (release(r, kernel, t)) return -1;
        }
      }
  return 0;
}

/* ---- what kernels call ---- */

static inline unsigned tid() { return rt->cur; }
static inline unsigned char *dyn_shared() { return rt->dyn; }

static inline void sync_block() {
  rt->f[rt->cur].bpar ^= 1;
  park(F_BLOCK);
}

/* A block barrier that also counts (op 0), ands (1) or ors (2) a predicate. */
static inline int sync_block_op(int pred, int op) {
  runtime *r = rt;
  fiber *me = &r->f[r->cur];
  unsigned p = me->bpar ^= 1;
  r->bslot[p][r->cur] = pred != 0;
  park(F_BLOCK);
  int c = 0;
  for (unsigned i = 0; i < r->n; i++) c += r->bslot[p][i];
  return op == 0 ? c : op == 1 ? c == (int)r->n : c != 0;
}

/* Puts this lane's value in, waits for the lanes of mask, and returns the
 * slots of its parity (the lanes' values for this operation). */
static inline uint64_t *exchange(unsigned mask, uint64_t v) {
  runtime *r = rt;
  fiber *me = &r->f[r->cur];
  unsigned p = me->wpar ^= 1;
  r->wslot[p][r->cur] = v;
  me->mask = mask | 1u << (r->cur % 32);
  park(F_WARP);
  return &r->wslot[p][r->cur - r->cur % 32];
}

template <class T> static inline uint64_t bits(T v) {
  static_assert(sizeof(T) <= 8, "warp operations move values of at most 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof v);
  return u;
}
template <class T> static inline T unbits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

static inline unsigned lane() { return rt->cur % 32; }
static inline unsigned lanes_here() {
  unsigned base = rt->cur - rt->cur % 32, left = rt->n - base;
  return left >= 32 ? 0xffffffffu : (1u << left) - 1;
}

/* src: the lane (of a segment of `width` lanes) to read; out of the warp or of
 * the segment, the lane's own value. */
template <class T> static inline T shfl(unsigned mask, T v, int src, int width) {
  uint64_t *s = exchange(mask, bits(v));
  unsigned l = lane();
  if (width <= 0 || width > 32) width = 32;
  unsigned seg = l - l % (unsigned)width;
  if (src < (int)seg || src >= (int)(seg + (unsigned)width) || !(lanes_here() >> src & 1)) return v;
  return unbits<T>(s[src]);
}

static inline unsigned vote(unsigned mask, int pred) {
  uint64_t *s = exchange(mask, pred != 0);
  unsigned m = (mask | 1u << lane()) & lanes_here(), out = 0;
  for (unsigned l = 0; l < 32; l++)
    if ((m >> l & 1) && s[l]) out |= 1u << l;
  return out;
}

} // namespace __sr

#undef __shared__
#define __shared__ static thread_local
#undef __syncthreads
#define __syncthreads() __sr::sync_block()
static inline int __syncthreads_count(int p) { return __sr::sync_block_op(p, 0); }
static inline int __syncthreads_and(int p) { return __sr::sync_block_op(p, 1); }
static inline int __syncthreads_or(int p) { return __sr::sync_block_op(p, 2); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)__sr::exchange(mask, 0); }
static inline unsigned __activemask() { return __sr::lanes_here(); }
static inline unsigned __ballot_sync(unsigned mask, int p) { return __sr::vote(mask, p); }
static inline int __any_sync(unsigned mask, int p) { return __sr::vote(mask, p) != 0; }
static inline int __all_sync(unsigned mask, int p) {
  return __sr::vote(mask, p) == ((mask | 1u << __sr::lane()) & __sr::lanes_here());
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  if (width <= 0 || width > 32) width = 32;
  unsigned l = __sr::lane();
  return __sr::shfl(mask, v, (int)(l - l % (unsigned)width) + ((src % width) + width) % width, width);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  if (width <= 0 || width > 32) width = 32;
  unsigned l = __sr::lane();
  int src = (int)l - (int)d;
  if (src < (int)(l - l % (unsigned)width)) src = (int)l; /* below the segment: its own value */
  return __sr::shfl(mask, v, src, width);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  if (width <= 0 || width > 32) width = 32;
  unsigned l = __sr::lane();
  unsigned end = l - l % (unsigned)width + (unsigned)width;
  int src = l + d < end ? (int)(l + d) : (int)l;
  return __sr::shfl(mask, v, src, width);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int x, int width = 32) {
  if (width <= 0 || width > 32) width = 32;
  unsigned l = __sr::lane();
  int src = (int)(l ^ (unsigned)x);
  if (src / width != (int)l / width) src = (int)l;
  return __sr::shfl(mask, v, src, width);
}
