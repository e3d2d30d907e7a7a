/* The artifact of several architectures (gpu/arch_bundle.h): what is packed
 * is picked back byte for byte, per architecture; an architecture it lacks
 * is answered with the ones it has; every truncation and every malformed
 * field is refused, never read past the end. */
#include <stdlib.h>
#include <string.h>

#include "gpu/arch_bundle.h"
#include "test_util.h"

static const char *const archs[] = {"sm_80", "sm_90", "sm_120"};
static const uint8_t img0[] = {1, 2, 3}, img1[] = {9, 8, 7, 6, 5}, img2[] = {42};
static const uint8_t *const imgs[] = {img0, img1, img2};
static const size_t lens[] = {sizeof img0, sizeof img1, sizeof img2};

static uint8_t *packed(size_t *len) {
  uint8_t *b = NULL;
  assert_int_equal(arch_bundle_pack(3, archs, imgs, lens, &b, len), 0);
  assert_non_null(b);
  return b;
}

static void test_pick_each(void **st) {
  (void)st;
  size_t len;
  uint8_t *b = packed(&len);
  assert_true(arch_bundle_is(b, len));
  assert_int_equal(len, 16 + 3 * 32 + 3 + 5 + 1);
  for (size_t i = 0; i < 3; i++) {
    const uint8_t *img;
    size_t n;
    char have[64];
    assert_int_equal(arch_bundle_pick(b, len, archs[i], &img, &n, have, sizeof have), 0);
    assert_int_equal(n, lens[i]);
    assert_memory_equal(img, imgs[i], n);
    assert_string_equal(have, "sm_80 sm_90 sm_120");
  }
  free(b);
}

static void test_missing_arch_names_what_it_has(void **st) {
  (void)st;
  size_t len;
  uint8_t *b = packed(&len);
  const uint8_t *img = (const uint8_t *)"x";
  size_t n = 7;
  char have[64];
  /* a prefix of a name is not the name */
  static const char *const absent[] = {"sm_86", "sm_8", "sm_1200", ""};
  for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
    assert_int_equal(arch_bundle_pick(b, len, absent[i], &img, &n, have, sizeof have), 1);
    assert_null(img);
    assert_int_equal(n, 0);
    assert_string_equal(have, "sm_80 sm_90 sm_120");
  }
  /* a small list buffer holds whole names only */
  char small[12];
  assert_int_equal(arch_bundle_pick(b, len, "sm_86", &img, &n, small, sizeof small), 1);
  assert_string_equal(small, "sm_80 sm_90");
  free(b);
}

static void test_pack_refuses_bad_arguments(void **st) {
  (void)st;
  uint8_t *b = (uint8_t *)"x";
  size_t len = 3;
  assert_int_equal(arch_bundle_pack(0, archs, imgs, lens, &b, &len), -1);
  assert_null(b);
  assert_int_equal(len, 0);
  const char *twice[] = {"sm_80", "sm_80"};
  assert_int_equal(arch_bundle_pack(2, twice, imgs, lens, &b, &len), -1);
  const char *empty[] = {""}, *longer[] = {"sm_0123456789abc"};
  assert_int_equal(arch_bundle_pack(1, empty, imgs, lens, &b, &len), -1);
  assert_int_equal(arch_bundle_pack(1, longer, imgs, lens, &b, &len), -1);
  const size_t zero[] = {0};
  assert_int_equal(arch_bundle_pack(1, archs, imgs, zero, &b, &len), -1);
  assert_int_equal(arch_bundle_pack(ARCH_BUNDLE_MAX + 1, archs, imgs, lens, &b, &len), -1);
  assert_null(b);
}

/* Every shorter length is refused (or, once the images before the one asked
 * for are whole, still refused: entries point past the end). */
static void test_truncated_is_malformed(void **st) {
  (void)st;
  size_t len;
  uint8_t *b = packed(&len);
  for (size_t cut = 0; cut < len; cut++) {
    uint8_t *t = malloc(cut ? cut : 1);
    memcpy(t, b, cut);
    const uint8_t *img;
    size_t n;
    int rc = arch_bundle_pick(t, cut, "sm_80", &img, &n, NULL, 0);
    if (rc != -1) fail_msg("%zu of %zu bytes: %d, not refused", cut, len, rc);
    free(t);
  }
  free(b);
}

static void test_malformed_fields(void **st) {
  (void)st;
  size_t len;
  uint8_t *b = packed(&len);
  const uint8_t *img;
  size_t n;
  struct {
    size_t at;
    uint8_t value;
    const char *what;
  } breaks[] = {
      {0, 'X', "magic"},
      {8, 0, "count 0"},
      {8, ARCH_BUNDLE_MAX + 1, "count over the most"},
      {8, 4, "count past the entries"},
      {12, 1, "reserved word"},
      {16, 0, "empty name"},
      {16 + 10, 'x', "name not NUL-padded"},
      {16 + 16, 0, "image inside the entries"},
      {16 + 16, 0xff, "image past the end"},
      {16 + 23, 0x80, "offset overflowing"},
      {16 + 24, 0, "empty image"},
      {16 + 31, 0x80, "length overflowing"},
      {16 + 32 + 24, 200, "second image past the end"},
  };
  for (size_t i = 0; i < sizeof breaks / sizeof breaks[0]; i++) {
    uint8_t *t = malloc(len);
    memcpy(t, b, len);
    t[breaks[i].at] = breaks[i].value;
    /* asked for the first architecture: a later bad entry still refuses the whole */
    int rc = arch_bundle_pick(t, len, "sm_80", &img, &n, NULL, 0);
    if (rc != -1) fail_msg("%s: %d, not refused", breaks[i].what, rc);
    assert_null(img);
    free(t);
  }
  assert_false(arch_bundle_is(NULL, 0));
  assert_false(arch_bundle_is((const uint8_t *)"\x7f" "ELF", 4));
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pick_each),
      cmocka_unit_test(test_missing_arch_names_what_it_has),
      cmocka_unit_test(test_pack_refuses_bad_arguments),
      cmocka_unit_test(test_truncated_is_malformed),
      cmocka_unit_test(test_malformed_fields),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
