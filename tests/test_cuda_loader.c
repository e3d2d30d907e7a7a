/* The CUDA backend where no GPU is: the driver loader fails with one clear
 * sentence and "auto" falls back to the host; device specs are checked; and
 * kernel arguments are marshalled right for every parameter type; waits
 * for a device spin, then sleep a share of the wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "gpu/cuda/cuda_backend.h"
#include "test_util.h"

/* A wait for a device spins (looks again at once) for the spin time while
 * spinning pays, then sleeps an eighth of the wait so far, 2 us to 1 ms. */
static void test_wait_policy(void **st) {
  (void)st;
  const uint64_t spin = 30000;
  for (uint64_t w = 0; w < spin; w += 1000) {
    assert_int_equal(cuda_wait_nap(spin, true, w), 0);       /* spins */
    uint64_t nap = w / 8 < 2000 ? 2000 : w / 8;
    assert_int_equal(cuda_wait_nap(spin, false, w), nap); /* the gauge says no: sleeps */
    assert_int_equal(cuda_wait_nap(0, true, w), nap);     /* spinning off */
  }
  assert_int_equal(cuda_wait_nap(spin, true, spin), spin / 8);
  assert_int_equal(cuda_wait_nap(spin, true, 1700000), 212500); /* a 1.7 ms wait: noticed within 0.22 ms */
  assert_int_equal(cuda_wait_nap(spin, true, 8000000), 1000000);
  assert_int_equal(cuda_wait_nap(spin, true, 60000000000ull), 1000000);
}

static void expect_open_fails(const char *lib, const char *spec, const char *needle) {
  if (lib) setenv("SCHEDRUN_CUDA_LIBRARY", lib, 1);
  else unsetenv("SCHEDRUN_CUDA_LIBRARY");
  gpu_backend *b = NULL;
  schedrun_error_t err = {0};
  int rc = gpu_backend_open(spec, tu_gpu_opts(), &b, NULL, &err);
  if (rc == SCHEDRUN_OK) {
    /* a machine with a GPU: the loader works, nothing to check here */
    gpu_backend_close(&b);
    return;
  }
  assert_null(b);
  if (!err.message || !strstr(err.message, needle)) fail_msg("'%s' lacks '%s'", err.message, needle);
  assert_null(strchr(err.message, '\n')); /* one line */
  schedrun_error_clear(&err);
}

static void test_loader_failures(void **st) {
  (void)st;
  expect_open_fails("/no/such/libcuda.so.1", "cuda", "no CUDA driver (/no/such/libcuda.so.1 cannot be loaded)");
  expect_open_fails("libm.so.6", "cuda", "has no cuGetProcAddress");
  if (access("/usr/local/cuda/lib64/stubs/libcuda.so", R_OK) == 0)
    expect_open_fails("/usr/local/cuda/lib64/stubs/libcuda.so", "cuda:0", "cannot give cuInit");
  expect_open_fails("/no/such/libcuda.so.1", "cuda:0,1", "no CUDA driver");
  expect_open_fails(NULL, "cuda:", "needs device numbers");
  expect_open_fails(NULL, "cuda:a", "needs device numbers");
  expect_open_fails(NULL, "cuda:1,,2", "needs device numbers");
  expect_open_fails(NULL, "cuda:0;1", "needs device numbers");
  unsetenv("SCHEDRUN_CUDA_LIBRARY");
}

static void test_auto_falls_back(void **st) {
  (void)st;
  setenv("SCHEDRUN_CUDA_LIBRARY", "/no/such/libcuda.so.1", 1);
  for (int all = 0; all < 2; all++) {
    gpu_backend *b = NULL;
    char *why = NULL;
    schedrun_error_t err = {0};
    assert_int_equal(gpu_backend_open(all ? "all" : "auto", tu_gpu_opts(), &b, &why, &err), SCHEDRUN_OK);
    assert_string_equal(b->ops->name, "host");
    assert_non_null(why);
    assert_non_null(strstr(why, "no CUDA driver"));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(b->ops->device_count(b), all ? (int)cores : 1);
    free(why);
    gpu_backend_close(&b);
  }
  /* the same through the public API */
  schedrun_t *s;
  schedrun_options_t o;
  schedrun_options_init(&o);
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_open(&s, &o, &err), SCHEDRUN_OK);
  assert_non_null(strstr(schedrun_device_fallback(s), "no CUDA driver"));
  assert_string_equal(schedrun_device_name(s, 0), "host:0");
  schedrun_close(&s);
  unsetenv("SCHEDRUN_CUDA_LIBRARY");
}

static void test_marshal_every_type(void **st) {
  (void)st;
  /* slots as the record actor packs them: the value in the low bytes */
  uint64_t slots[7] = {0};
  int32_t i32 = -123456;
  uint32_t u32 = 4000000000u;
  int64_t i64 = -9000000000000ll;
  uint64_t u64 = 18000000000000000000ull;
  float f32 = 3.25f;
  double f64 = -1e300;
  uint64_t ptr = 0x7f1234567890ull;
  memcpy(&slots[0], &i32, 4);
  memcpy(&slots[1], &u32, 4);
  memcpy(&slots[2], &i64, 8);
  memcpy(&slots[3], &u64, 8);
  memcpy(&slots[4], &f32, 4);
  memcpy(&slots[5], &f64, 8);
  slots[6] = ptr;
  void *params[7];
  cuda_marshal_args(slots, 7, params);
  /* what the driver reads through each pointer, at the parameter's size */
  assert_int_equal(*(int32_t *)params[0], i32);
  assert_true(*(uint32_t *)params[1] == u32);
  assert_true(*(int64_t *)params[2] == i64);
  assert_true(*(uint64_t *)params[3] == u64);
  assert_true(*(float *)params[4] == f32);
  assert_true(*(double *)params[5] == f64);
  assert_true((uint64_t)(uintptr_t)*(void **)params[6] == ptr);
  for (int i = 0; i < 7; i++) assert_ptr_equal(params[i], &slots[i]);
}

/* A libnvrtc loaded by path from a directory of its own finds the builtins
 * library beside it, not another one the loader knows. */
static void test_nvrtc_builtins_beside_it(void **st) {
  (void)st;
  const char *lib = "/usr/local/cuda/lib64/libnvrtc.so";
  if (access(lib, R_OK) != 0) {
    skip();
    return;
  }
  char real[4096];
  assert_non_null(realpath(lib, real));
  char dir[] = "/tmp/schedrun-nvrtc-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char cmd[12000];
  snprintf(cmd, sizeof cmd, "cp '%s' %s/libnvrtc.so && cp \"$(dirname '%s')\"/libnvrtc-builtins.so.*.* %s/", real,
           dir, real, dir);
  assert_int_equal(system(cmd), 0);
  char path[4200];
  snprintf(path, sizeof path, "%s/libnvrtc.so", dir);
  setenv("SCHEDRUN_NVRTC_LIBRARY", path, 1);
  void *ctx = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(gpu_cuda_target.open(&ctx, &err), SCHEDRUN_OK);
  gpu_cuda_target.close(ctx);
  unsetenv("SCHEDRUN_NVRTC_LIBRARY");
  char *maps = NULL;
  size_t len = 0;
  assert_int_equal(fs_read_file("/proc/self/maps", &maps, &len, &err), SCHEDRUN_OK);
  char want[4300];
  snprintf(want, sizeof want, "%s/libnvrtc-builtins.so.", dir);
  if (!strstr(maps, want)) fail_msg("the builtins beside %s were not loaded", path);
  free(maps);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wait_policy),
      cmocka_unit_test(test_loader_failures),
      cmocka_unit_test(test_auto_falls_back),
      cmocka_unit_test(test_marshal_every_type),
      cmocka_unit_test(test_nvrtc_builtins_beside_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
