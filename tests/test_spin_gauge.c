/* The spin gauge (common/spin_gauge.h) on a clock of its own: looks that
 * come back at once keep a spin going; a lost slice stops it and starts a
 * quiet time of 1 ms, doubling while lost slices keep coming and capped at
 * 100 ms, back to 1 ms after a long calm; spinning is allowed again once the
 * quiet time is over. */
#include "common/spin_gauge.h"
#include "test_util.h"

#define MS 1000000ull

static void test_quick_looks_keep_spinning(void **st) {
  (void)st;
  spin_gauge g = {0};
  uint64_t t = 5 * MS;
  assert_true(spin_gauge_may_spin(&g, t));
  for (int k = 0; k < 1000; k++, t += 1000) assert_true(spin_gauge_step(&g, t, t + 1000));
  /* a look of exactly the limit is still quick */
  assert_true(spin_gauge_step(&g, t, t + SPIN_GAP_NS));
  assert_true(spin_gauge_may_spin(&g, t + SPIN_GAP_NS));
}

static void test_lost_slices_back_off(void **st) {
  (void)st;
  spin_gauge g = {0};
  uint64_t t = 10 * MS;
  /* a slice lost: no spin for 1 ms from the look's end */
  assert_false(spin_gauge_step(&g, t, t + 4 * MS));
  t += 4 * MS;
  assert_false(spin_gauge_may_spin(&g, t));
  assert_false(spin_gauge_may_spin(&g, t + MS - 1));
  assert_true(spin_gauge_may_spin(&g, t + MS));
  /* and again at once, every time: 2, 4, ... up to 100 ms, then 100 ms */
  uint64_t want = MS;
  for (int k = 0; k < 12; k++) {
    t += want; /* tries again when allowed */
    assert_true(spin_gauge_may_spin(&g, t));
    assert_false(spin_gauge_step(&g, t, t + 4 * MS));
    t += 4 * MS;
    want = want * 2 > SPIN_QUIET_MAX_NS ? SPIN_QUIET_MAX_NS : want * 2;
    assert_false(spin_gauge_may_spin(&g, t + want - 1));
    assert_true(spin_gauge_may_spin(&g, t + want));
  }
  assert_int_equal(want, SPIN_QUIET_MAX_NS);
  /* calm for longer than twice the cap: the next lost slice costs 1 ms again */
  t += 2 * SPIN_QUIET_MAX_NS + 1;
  assert_false(spin_gauge_step(&g, t, t + 2 * MS));
  t += 2 * MS;
  assert_false(spin_gauge_may_spin(&g, t + MS - 1));
  assert_true(spin_gauge_may_spin(&g, t + MS));
}

/* The library's gauge is one for the process: what one wait learns, the
 * next one knows. */
static void test_process_gauge_is_shared(void **st) {
  (void)st;
  uint64_t t = 1000 * MS;
  assert_true(spin_gauge_may_spin(&spin_gauge_process, t));
  assert_false(spin_gauge_step(&spin_gauge_process, t, t + 5 * MS));
  assert_false(spin_gauge_may_spin(&spin_gauge_process, t + 5 * MS));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_quick_looks_keep_spinning),
      cmocka_unit_test(test_lost_slices_back_off),
      cmocka_unit_test(test_process_gauge_is_shared),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
