/*
 * A library configured without cuda.h: cuda device specs say so, auto falls
 * back to the host with that reason, and host devices run as usual.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

#include "test_util.h"

static const char *built_without = "built without the CUDA backend";

static void test_cuda_specs_name_the_build(void **st) {
  (void)st;
  const char *specs[] = {"cuda", "cuda:0", "cuda:0,1"};
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(specs); i++) {
    schedrun_options_t o;
    schedrun_options_init(&o);
    o.devices = specs[i];
    schedrun_t *s = NULL;
    schedrun_error_t err = {0};
    assert_int_equal(schedrun_open(&s, &o, &err), SCHEDRUN_EBACKEND);
    assert_null(s);
    if (!err.message || !strstr(err.message, built_without)) fail_msg("%s: %s", specs[i], err.message);
    schedrun_error_clear(&err);
  }
}

static void test_auto_falls_back_with_the_reason(void **st) {
  (void)st;
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "auto";
  schedrun_t *s = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_open(&s, &o, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_device_count(s), 1);
  assert_string_equal(schedrun_device_name(s, 0), "host:0");
  assert_non_null(schedrun_device_fallback(s));
  assert_non_null(strstr(schedrun_device_fallback(s), built_without));
  schedrun_close(&s);
}

static void test_cli_devices_cuda(void **st) {
  (void)st;
  char cfg[4096];
  snprintf(cfg, sizeof cfg, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "cuda", cfg, NULL};
  char *out, *err;
  int rc = tu_run(argv, &out, &err);
  if (rc != 4 || !strstr(err, built_without)) fail_msg("exit %d\n%s%s", rc, out, err);
  free(out);
  free(err);
  char *argv2[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "auto", cfg, NULL};
  rc = tu_run(argv2, &out, &err);
  if (rc != 0 || !strstr(out, "verified on 1 device (host:0)") || !strstr(out, built_without))
    fail_msg("exit %d\n%s%s", rc, out, err);
  free(out);
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_specs_name_the_build),
      cmocka_unit_test(test_auto_falls_back_with_the_reason),
      cmocka_unit_test(test_cli_devices_cuda),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
