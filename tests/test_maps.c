/* The maps: idmap against a plain array as the model, through the patterns
 * jobs make (a sliding window of sequential ids), ids far apart that share
 * slots, removal in every order, growth, iteration; hmap's basics; and str_copy. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/hmap.h"
#include "common/idmap.h"
#include "test_util.h"

#define N 5000

/* Every id in [1, N] is in m exactly when model says so, with its value. */
static void check(const idmap *m, const char *model, size_t count) {
  assert_int_equal(m->count, count);
  for (uint64_t id = 1; id <= N; id++) {
    void *v = idmap_get(m, id);
    if (model[id]) assert_ptr_equal(v, (void *)(uintptr_t)(id * 3));
    else assert_null(v);
  }
  size_t pos = 0, seen = 0;
  uint64_t id;
  void *v;
  while (idmap_next(m, &pos, &id, &v)) {
    assert_true(id >= 1 && id <= N && model[id]);
    assert_ptr_equal(v, (void *)(uintptr_t)(id * 3));
    seen++;
  }
  assert_int_equal(seen, count);
}

static void test_idmap_window(void **st) {
  (void)st;
  idmap m;
  idmap_init(&m);
  char *model = calloc(N + 1, 1);
  size_t count = 0;
  assert_null(idmap_get(&m, 1));
  assert_null(idmap_remove(&m, 1));
  /* a window of 700 ids in flight sliding over 1..N, completing out of order */
  for (uint64_t id = 1; id <= N; id++) {
    assert_int_equal(idmap_put(&m, id, (void *)(uintptr_t)(id * 3)), 0);
    model[id] = 1;
    count++;
    if (id > 700) {
      uint64_t gone = id - 700 + (id % 7 == 0 ? 0 : 3) * (id % 2);
      if (gone >= 1 && model[gone]) {
        assert_ptr_equal(idmap_remove(&m, gone), (void *)(uintptr_t)(gone * 3));
        model[gone] = 0;
        count--;
      }
    }
    if (id % 997 == 0) check(&m, model, count);
  }
  check(&m, model, count);
  /* the rest, from the middle outwards */
  for (uint64_t d = 0; d <= N; d++) {
    uint64_t ids[2] = {N / 2 + d, N / 2 - d};
    for (int k = 0; k < 2; k++)
      if (ids[k] >= 1 && ids[k] <= N && model[ids[k]]) {
        assert_non_null(idmap_remove(&m, ids[k]));
        model[ids[k]] = 0;
        count--;
      }
  }
  check(&m, model, 0);
  free(model);
  idmap_destroy(&m);
}

/* Ids a multiple of the table's size apart land on one slot: each must
 * still be found, and removing any of them must not lose the others. */
static void test_idmap_collisions(void **st) {
  (void)st;
  for (int drop = 0; drop < 8; drop++) {
    idmap m;
    idmap_init(&m);
    assert_int_equal(idmap_put(&m, 1000, (void *)1), 0); /* a first entry sizes the table */
    size_t stride = m.cap;
    for (uint64_t k = 0; k < 8; k++) assert_int_equal(idmap_put(&m, 5 + k * stride, (void *)(uintptr_t)(k + 10)), 0);
    assert_int_equal(idmap_put(&m, 6, (void *)99), 0); /* its home is taken by the run above */
    assert_ptr_equal(idmap_remove(&m, 5 + (uint64_t)drop * stride), (void *)(uintptr_t)(drop + 10));
    for (uint64_t k = 0; k < 8; k++)
      if ((int)k != drop) assert_ptr_equal(idmap_get(&m, 5 + k * stride), (void *)(uintptr_t)(k + 10));
    assert_null(idmap_get(&m, 5 + (uint64_t)drop * stride));
    assert_ptr_equal(idmap_get(&m, 6), (void *)99);
    assert_ptr_equal(idmap_get(&m, 1000), (void *)1);
    assert_int_equal(m.count, 9);
    /* replacing keeps one entry */
    assert_int_equal(idmap_put(&m, 6, (void *)98), 0);
    assert_ptr_equal(idmap_get(&m, 6), (void *)98);
    assert_int_equal(m.count, 9);
    idmap_destroy(&m);
  }
}

/* 100 ids in flight sliding over 200,000: the table is rebuilt without its
 * removed markers as it goes, and never grows past what 100 need. */
static void test_idmap_sliding_window_stays_small(void **st) {
  (void)st;
  idmap m;
  idmap_init(&m);
  for (uint64_t id = 1; id <= 200000; id++) {
    assert_int_equal(idmap_put(&m, id, (void *)(uintptr_t)id), 0);
    if (id > 100) assert_ptr_equal(idmap_remove(&m, id - 100), (void *)(uintptr_t)(id - 100));
    assert_true(m.cap <= 512);
  }
  assert_int_equal(m.count, 100);
  for (uint64_t id = 199901; id <= 200000; id++) assert_ptr_equal(idmap_get(&m, id), (void *)(uintptr_t)id);
  idmap_destroy(&m);
}

/* Batches of 4 ids put, then removed in the order they came, 10,000 times:
 * once a batch's last id is removed no removed marker is left (they were
 * cleared, not left for a rebuild), and every id was found until removed. */
static void test_idmap_batches_leave_no_markers(void **st) {
  (void)st;
  idmap m;
  idmap_init(&m);
  for (uint64_t id = 1; id <= 40000; id += 4) {
    for (uint64_t k = 0; k < 4; k++) assert_int_equal(idmap_put(&m, id + k, (void *)(uintptr_t)(id + k)), 0);
    for (uint64_t k = 0; k < 4; k++) {
      for (uint64_t j = k; j < 4; j++) assert_ptr_equal(idmap_get(&m, id + j), (void *)(uintptr_t)(id + j));
      assert_ptr_equal(idmap_remove(&m, id + k), (void *)(uintptr_t)(id + k));
    }
    assert_int_equal(m.count, 0);
    assert_int_equal(m.gone, 0);
    assert_int_equal(m.cap, 64);
  }
  idmap_destroy(&m);
}

static void test_hmap_basics(void **st) {
  (void)st;
  hmap h;
  hmap_init(&h, sizeof(uint64_t));
  for (uint64_t k = 0; k < 300; k++) assert_int_equal(hmap_put(&h, &k, (void *)(uintptr_t)(k + 1)), 0);
  for (uint64_t k = 0; k < 300; k += 2) assert_ptr_equal(hmap_remove(&h, &k), (void *)(uintptr_t)(k + 1));
  assert_int_equal(h.count, 150);
  for (uint64_t k = 0; k < 300; k++) {
    if (k % 2) assert_ptr_equal(hmap_get(&h, &k), (void *)(uintptr_t)(k + 1));
    else assert_null(hmap_get(&h, &k));
  }
  hmap_destroy(&h);
}

/* str_copy: what fits is copied and terminated, what does not is cut at the
 * last byte; NULL is the empty string; bytes past the end are untouched. */
static void test_str_copy(void **st) {
  (void)st;
  char b[8];
  memset(b, 'x', sizeof b);
  str_copy(b, 5, "abc");
  assert_string_equal(b, "abc");
  assert_int_equal(b[4], 'x');
  str_copy(b, 5, "abcdefgh");
  assert_string_equal(b, "abcd");
  assert_int_equal(b[5], 'x');
  str_copy(b, 5, NULL);
  assert_string_equal(b, "");
  str_copy(b, 1, "abc");
  assert_string_equal(b, "");
  assert_int_equal(b[1], 'b'); /* left from before */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idmap_window),
      cmocka_unit_test(test_idmap_collisions),
      cmocka_unit_test(test_idmap_sliding_window_stays_small),
      cmocka_unit_test(test_idmap_batches_leave_no_markers),
      cmocka_unit_test(test_hmap_basics),
      cmocka_unit_test(test_str_copy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
