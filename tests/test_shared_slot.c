/*
 * The recording test against a record actor with the bug the design rules out
 * (one recorded state per command, not per execution context): the run
 * completes, and the loop's data is wrong in the way that bug makes it wrong,
 * stale bindings from the other buffer set. Anything else (an error, a
 * mismatch elsewhere, no mismatch at all) fails this test.
 */
#include <stdio.h>
#include <string.h>

#include "record_loop.h"
#include "test_util.h"

static void test_shared_slot_shows_stale_data(void **st) {
  (void)st;
  schedrun_t *s = NULL;
  schedrun_program_t *p = NULL;
  char why[256];
  int rc = loop_run_and_compare(&s, &p, why, sizeof why);
  if (rc != SCHEDRUN_OK) fail_msg("the run itself failed (%d): %s", rc, why);
  /* run 2 uses buffer set 0 again, but the single recording still points at
   * set 1's buffer, so set 0 keeps what run 0 wrote there */
  const char *stale = "run 2 (buffer set 0), iteration 0: out[0] = 1000, expected 1002";
  if (strcmp(why, stale) != 0) fail_msg("expected the stale-binding mismatch\n  %s\ngot\n  %s", stale, why);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_shared_slot_shows_stale_data)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
