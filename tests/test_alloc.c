/* The library's allocator (common/alloc.h): blocks of every size class and
 * past them keep what was written, are aligned as malloc's, grow and shrink
 * with their contents; calloc zeroes a block that was used before; the
 * string functions give blocks free() takes; and blocks freed on another
 * thread come back, through the shared depot, to a third, none of them
 * handed out twice. Without the caches (sanitizer builds) the same calls
 * are the C library's, and the same results hold. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "test_util.h"

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i * 7);
}

static void check(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed + i * 7)) fail_msg("byte %zu of %zu: %u, not %u", i, n, p[i], (unsigned char)(seed + i * 7));
}

static void test_every_size_keeps_its_bytes(void **st) {
  (void)st;
  enum { MAX = 2100 };
  static unsigned char *live[MAX + 1];
  for (size_t n = 0; n <= MAX; n++) { /* all at once: none overlaps another */
    live[n] = malloc(n);
    assert_non_null(live[n]);
    assert_int_equal((uintptr_t)live[n] % 16, 0);
    fill(live[n], n, (unsigned)n);
  }
  for (size_t n = 0; n <= MAX; n++) check(live[n], n, (unsigned)n);
  for (size_t n = 0; n <= MAX; n++) free(live[n]);
  /* again: blocks come back from the lists, still whole */
  for (size_t n = 0; n <= MAX; n += 3) {
    live[n] = malloc(n);
    fill(live[n], n, (unsigned)n + 1);
  }
  for (size_t n = 0; n <= MAX; n += 3) {
    check(live[n], n, (unsigned)n + 1);
    free(live[n]);
  }
  free(NULL);
}

static void test_calloc_zeroes_used_blocks(void **st) {
  (void)st;
  for (size_t n = 1; n <= 1500; n += 13) {
    unsigned char *p = malloc(n);
    memset(p, 0xAB, n);
    free(p);
    unsigned char *z = calloc(1, n); /* likely p again */
    assert_non_null(z);
    for (size_t i = 0; i < n; i++) assert_int_equal(z[i], 0);
    free(z);
  }
#ifdef SCHEDRUN_ALLOC_CACHE /* (ASan stops the program at such a calloc) */
  volatile size_t huge = SIZE_MAX / 2;
  errno = 0;
  assert_null(calloc(huge, 4)); /* the product overflows */
  assert_int_equal(errno, ENOMEM);
#endif
}

static void test_realloc_keeps_contents(void **st) {
  (void)st;
  /* grows through every class and past them, then shrinks back */
  size_t n = 1;
  unsigned char *p = malloc(n);
  fill(p, n, 3);
  for (size_t m = 2; m <= 5000; m = m * 5 / 4 + 1) {
    p = realloc(p, m);
    assert_non_null(p);
    check(p, n, 3);
    fill(p, m, 3);
    n = m;
  }
  for (size_t m = n; m > 1; m = m * 3 / 4) {
    p = realloc(p, m);
    assert_non_null(p);
    check(p, m, 3);
  }
  free(p);
  unsigned char *q = realloc(NULL, 40); /* realloc(NULL) is malloc */
  assert_non_null(q);
  fill(q, 40, 9);
  check(q, 40, 9);
  assert_null(realloc(q, 0)); /* and realloc(p, 0) frees p, as the C library's does */
}

static void test_aligned_blocks(void **st) {
  (void)st;
  size_t aligns[] = {16, 64, 256, 4096};
  for (size_t a = 0; a < 4; a++) {
    unsigned char *p = aligned_alloc(aligns[a], 3 * aligns[a]);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % aligns[a], 0);
    fill(p, 3 * aligns[a], 5);
    check(p, 3 * aligns[a], 5);
    free(p);
    void *q = NULL;
    assert_int_equal(posix_memalign(&q, aligns[a], 100), 0);
    assert_int_equal((uintptr_t)q % aligns[a], 0);
    free(q);
  }
#ifdef SCHEDRUN_ALLOC_CACHE /* (ASan stops the program at such an alignment) */
  void *q = NULL;
  assert_int_equal(posix_memalign(&q, 24, 100), EINVAL); /* not a power of two */
  assert_null(q);
#endif
}

static void test_strings_free_as_blocks(void **st) {
  (void)st;
  char *a = strdup("scheduler");
  char *b = strndup("execute.0 and more", 9);
  char *c = NULL;
  assert_int_equal(asprintf(&c, "%s/%d", "execute", 12), 10);
  char *r = realpath("/", NULL);
  assert_string_equal(a, "scheduler");
  assert_string_equal(b, "execute.0");
  assert_string_equal(c, "execute/12");
  assert_string_equal(r, "/");
  free(a);
  free(b);
  free(c);
  free(r);
  char *s = sys_strdup("for the C library's free()");
  assert_string_equal(s, "for the C library's free()");
  (free)(s); /* the C library's own */
  assert_null(sys_strdup(NULL));
}

/* ---- blocks that cross threads ---- */

/* a burst: 20,000 blocks of a class (2.5 MiB), which the depot keeps whole */
enum { N = 20000, SIZE = 100 };
static unsigned char *blocks[N];

static void *make_all(void *arg) {
  (void)arg;
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc(SIZE);
    fill(blocks[i], SIZE, (unsigned)i);
  }
  return NULL;
}

static void *free_all(void *arg) {
  (void)arg;
  for (int i = 0; i < N; i++) {
    check(blocks[i], SIZE, (unsigned)i); /* nothing wrote over another's block */
    free(blocks[i]);
  }
  return NULL;
}

static void *take_again(void *arg) {
  unsigned char **got = arg;
  for (int i = 0; i < N; i++) {
    got[i] = malloc(SIZE);
    assert_non_null(got[i]);
    fill(got[i], SIZE, (unsigned)i + 11);
  }
  for (int i = 0; i < N; i++) check(got[i], SIZE, (unsigned)i + 11);
  return NULL;
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)*(unsigned char *const *)a, y = (uintptr_t)*(unsigned char *const *)b;
  return x < y ? -1 : x > y;
}

static void run(void *(*fn)(void *), void *arg) {
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
}

static void test_blocks_cross_threads(void **st) {
  (void)st;
  static unsigned char *made[N], *got[N];
  run(make_all, NULL);
  memcpy(made, blocks, sizeof made);
#ifdef SCHEDRUN_ALLOC_CACHE
  size_t before = sr_depot_bytes();
#endif
  run(free_all, NULL);
#ifdef SCHEDRUN_ALLOC_CACHE
  /* the whole burst but the freeing thread's 128 is in the depot, none of
   * it given back to the C library (which would hand the same addresses
   * out again, so the reuse below cannot tell) */
  assert_true(sr_depot_bytes() - before >= (size_t)(N - 128) * 128);
#endif
  run(take_again, got);
  /* every block live at once is distinct */
  qsort(got, N, sizeof got[0], by_address);
  for (int i = 1; i < N; i++) assert_true(got[i - 1] != got[i]);
#ifdef SCHEDRUN_ALLOC_CACHE
  /* the freeing thread handed what it could not keep (all but at most its
   * 128 of a class) to the depot, and the third thread took them from there */
  qsort(made, N, sizeof made[0], by_address);
  int reused = 0;
  for (int i = 0; i < N; i++) reused += bsearch(&got[i], made, N, sizeof made[0], by_address) != NULL;
  assert_true(reused >= N - 128);
#endif
  for (int i = 0; i < N; i++) free(got[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_size_keeps_its_bytes), cmocka_unit_test(test_calloc_zeroes_used_blocks),
      cmocka_unit_test(test_realloc_keeps_contents),     cmocka_unit_test(test_aligned_blocks),
      cmocka_unit_test(test_strings_free_as_blocks),     cmocka_unit_test(test_blocks_cross_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
