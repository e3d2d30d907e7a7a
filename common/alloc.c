/*
 * The allocator of alloc.h: a header before every block, and for blocks of
 * up to ALLOC_SMALL_MAX bytes a free list per size class that each thread
 * keeps. A block freed on another thread than the one that made it joins
 * the freeing thread's list; a list that reaches KEEP blocks hands BATCH of
 * them to a depot all threads share, where a thread whose list is empty
 * takes them (a job's objects are often made on one thread and freed on
 * another). What the depot has no room for, and everything a thread keeps
 * when it ends, goes back to the C library.
 * Inside this file (malloc), (free) and the like are the C library's own:
 * the parentheses keep alloc.h's macros out.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/alloc.h"

char *sys_strdup(const char *s) { return s ? (strdup)(s) : NULL; }

#ifdef SCHEDRUN_ALLOC_CACHE
/* classes: 16 to 256 bytes by 16, then to ALLOC_SMALL_MAX by 64 */
#define NCLASS (16 + (ALLOC_SMALL_MAX - 256) / 64)
#define BATCH 64        /* blocks that move between a thread and the depot at a time */
#define KEEP (2 * BATCH) /* blocks a thread keeps of a class: a burst of a hundred jobs */
#define DEPOT_BYTES (64u << 20) /* what the depot keeps, all classes together */
#define MAGIC 0x5c4ed0a1u

/* The slow paths stay out of line, so that the fast ones need no frame. */
#define SLOW __attribute__((noinline, cold))

enum { CLS_BIG = 0, CLS_ALIGNED = NCLASS + 1 };

/* 16 bytes, so that the block after it is aligned as malloc's are */
typedef struct head {
  uint32_t cls; /* 1..NCLASS: a cached class; CLS_BIG; CLS_ALIGNED */
  uint32_t magic;
  uint64_t word; /* CLS_BIG: the bytes asked for; CLS_ALIGNED: the C library's block */
} head;
_Static_assert(sizeof(head) == 16, "the header keeps blocks 16-byte aligned");

typedef struct tcache {
  void *top[NCLASS + 1]; /* a free block's first word links to the next */
  uint32_t n[NCLASS + 1];
  bool keyed; /* registered to be flushed when the thread ends */
} tcache;

static __thread tcache tc;

static pthread_mutex_t depot_lock = PTHREAD_MUTEX_INITIALIZER;
/* A class's batches, each a list of BATCH blocks, chained through the
 * second word of each batch's first block (every class has room for two). */
static void *depot[NCLASS + 1];
static size_t depot_bytes; /* what the batches hold, headers included */
#define NEXT_BATCH(b) (((void **)(b))[1])
_Static_assert(2 * sizeof(void *) <= 16, "the smallest class holds a block's link and its batch's");
static pthread_key_t flush_key;
static pthread_once_t flush_once = PTHREAD_ONCE_INIT;
static bool flush_ok;

static void flush(tcache *t) {
  for (int c = 1; c <= NCLASS; c++) {
    while (t->top[c]) {
      void *p = t->top[c];
      t->top[c] = *(void **)p;
      (free)((head *)p - 1);
    }
    t->n[c] = 0;
  }
  t->keyed = false; /* a free after this (another key's destructor) registers again */
}

static void on_thread_end(void *t) { flush(t); }

static void make_key(void) { flush_ok = pthread_key_create(&flush_key, on_thread_end) == 0; }

/* Registers the calling thread's lists to be flushed when it ends; false
 * where that cannot be done (it then keeps no blocks). */
static SLOW bool key_here(void) {
  pthread_once(&flush_once, make_key);
  tc.keyed = flush_ok && pthread_setspecific(flush_key, &tc) == 0;
  return tc.keyed;
}

static head *head_of(void *p) {
  head *h = (head *)p - 1;
  assert(h->magic == MAGIC); /* a block of this allocator, not the C library's */
  return h;
}

static inline uint32_t class_of(size_t n) {
  if (n <= 256) return n ? (uint32_t)((n + 15) / 16) : 1;
  return 16 + (uint32_t)((n - 256 + 63) / 64);
}

static inline size_t class_bytes(uint32_t c) {
  assert(c >= 1 && c <= NCLASS);
  return c <= 16 ? 16 * (size_t)c : 256 + 64 * (size_t)(c - 16);
}

static SLOW void *big(size_t n, bool zero) {
  if (n > SIZE_MAX - sizeof(head)) {
    errno = ENOMEM;
    return NULL;
  }
  head *h = zero ? (calloc)(1, sizeof(head) + n) : (malloc)(sizeof(head) + n);
  if (!h) return NULL;
  *h = (head){CLS_BIG, MAGIC, n};
  return h + 1;
}

/* A new block of class c, from the C library. */
static SLOW void *fresh(uint32_t c) {
  head *h = (malloc)(sizeof(head) + class_bytes(c));
  if (!h) return NULL;
  *h = (head){c, MAGIC, 0};
  return h + 1;
}

/* A block of class c for a thread whose list is empty: from the depot, or
 * new from the C library. */
static SLOW void *refill(uint32_t c) {
  assert(!tc.top[c] && tc.n[c] == 0);
  pthread_mutex_lock(&depot_lock);
  void *b = depot[c];
  if (b) {
    depot[c] = NEXT_BATCH(b);
    assert(depot_bytes >= BATCH * (sizeof(head) + class_bytes(c))); /* counted when it came in */
    depot_bytes -= BATCH * (sizeof(head) + class_bytes(c));
    tc.top[c] = b;
    tc.n[c] = BATCH;
  }
  pthread_mutex_unlock(&depot_lock);
  void *p = tc.top[c];
  if (!p) return fresh(c);
  tc.top[c] = *(void **)p;
  tc.n[c]--;
  return p;
}

/* Hands BATCH blocks of the calling thread's full list of class c to the
 * depot, or to the C library when the depot has enough of them. */
static SLOW void give_batch(uint32_t c) {
  assert(tc.n[c] >= BATCH);
  void *first = tc.top[c], *last = first;
  for (int i = 1; i < BATCH; i++) last = *(void **)last;
  tc.top[c] = *(void **)last;
  tc.n[c] -= BATCH;
  *(void **)last = NULL;
  size_t bytes = BATCH * (sizeof(head) + class_bytes(c));
  pthread_mutex_lock(&depot_lock);
  bool kept = depot_bytes + bytes <= DEPOT_BYTES;
  if (kept) {
    NEXT_BATCH(first) = depot[c];
    depot[c] = first;
    depot_bytes += bytes;
  }
  pthread_mutex_unlock(&depot_lock);
  while (!kept && first) {
    void *next = *(void **)first;
    (free)((head *)first - 1);
    first = next;
  }
}

size_t sr_depot_bytes(void) {
  pthread_mutex_lock(&depot_lock);
  size_t n = depot_bytes;
  pthread_mutex_unlock(&depot_lock);
  return n;
}

void *sr_malloc(size_t n) {
  if (__builtin_expect(n > ALLOC_SMALL_MAX, 0)) return big(n, false);
  uint32_t c = class_of(n);
  void *p = tc.top[c];
  if (__builtin_expect(!p, 0)) return refill(c);
  assert(head_of(p)->cls == c);
  tc.top[c] = *(void **)p;
  tc.n[c]--;
  return p;
}

void *sr_cache_calloc(size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  if (bytes > ALLOC_SMALL_MAX) return big(bytes, true); /* the C library's calloc spares fresh pages */
  void *p = sr_malloc(bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

__attribute__((weak)) void *sr_calloc(size_t n, size_t size) { return sr_cache_calloc(n, size); }

/* sr_free's other cases: a block the calling thread cannot keep, a full
 * list, a thread not registered yet. */
static SLOW void free_slow(void *p) {
  head *h = head_of(p);
  uint32_t c = h->cls;
  if (c >= 1 && c <= NCLASS && (tc.keyed || key_here())) {
    if (tc.n[c] == KEEP) give_batch(c);
    *(void **)p = tc.top[c];
    tc.top[c] = p;
    tc.n[c]++;
    return;
  }
  (free)(c == CLS_ALIGNED ? (void *)(uintptr_t)h->word : (void *)h);
}

void sr_free(void *p) {
  if (!p) return;
  uint32_t c = head_of(p)->cls;
  if (__builtin_expect(c < 1 || c > NCLASS || !tc.keyed || tc.n[c] == KEEP, 0)) {
    free_slow(p);
    return;
  }
  *(void **)p = tc.top[c];
  tc.top[c] = p;
  tc.n[c]++;
}

void *sr_realloc(void *p, size_t n) {
  if (!p) return sr_malloc(n);
  if (n == 0) { /* as the C library does */
    sr_free(p);
    return NULL;
  }
  head *h = head_of(p);
  assert(h->cls != CLS_ALIGNED); /* nothing reallocates an aligned block */
  if (h->cls == CLS_BIG && n > ALLOC_SMALL_MAX) {
    if (n > SIZE_MAX - sizeof(head)) {
      errno = ENOMEM;
      return NULL;
    }
    head *g = (realloc)(h, sizeof(head) + n);
    if (!g) return NULL;
    g->word = n;
    return g + 1;
  }
  size_t have = h->cls == CLS_BIG ? (size_t)h->word : class_bytes(h->cls);
  if (h->cls != CLS_BIG && n <= have) return p; /* it fits its class */
  void *q = sr_malloc(n);
  if (!q) return NULL;
  memcpy(q, p, have < n ? have : n);
  sr_free(p);
  return q;
}

char *sr_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = sr_malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

char *sr_strndup(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  char *d = sr_malloc(len + 1);
  if (d) {
    memcpy(d, s, len);
    d[len] = '\0';
  }
  return d;
}

char *sr_realpath(const char *path, char *resolved) {
  if (resolved) return (realpath)(path, resolved);
  char *r = (realpath)(path, NULL);
  if (!r) return NULL;
  char *d = sr_strdup(r);
  (free)(r);
  if (!d) errno = ENOMEM;
  return d;
}

void *sr_aligned_alloc(size_t align, size_t n) {
  if (align < sizeof(head)) align = sizeof(head);
  if ((align & (align - 1)) || n > SIZE_MAX - align - sizeof(head)) {
    errno = align & (align - 1) ? EINVAL : ENOMEM;
    return NULL;
  }
  uint8_t *raw = (malloc)(n + align + sizeof(head));
  if (!raw) return NULL;
  uintptr_t at = ((uintptr_t)raw + sizeof(head) + align - 1) & ~(uintptr_t)(align - 1);
  head *h = (head *)at - 1;
  *h = (head){CLS_ALIGNED, MAGIC, (uint64_t)(uintptr_t)raw};
  return (void *)at;
}

int sr_posix_memalign(void **out, size_t align, size_t n) {
  if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
  void *p = sr_aligned_alloc(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

int sr_vasprintf(char **out, const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  char *s = n >= 0 ? sr_malloc((size_t)n + 1) : NULL;
  if (s) {
    int m = vsnprintf(s, (size_t)n + 1, fmt, again);
    assert(m == n); /* the same format and arguments */
    (void)m;
  }
  va_end(again);
  *out = s;
  return s ? n : -1;
}

int sr_asprintf(char **out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = sr_vasprintf(out, fmt, ap);
  va_end(ap);
  return n;
}
#endif
