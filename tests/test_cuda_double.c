/* The CUDA path on the driver double (tests/cuda_double/): sched-run with
 * --devices cuda verifies every shipped config and the copy and fill edge
 * cases under the rules of a 13.x and a 12.x driver, on one and on two
 * devices, and never falls back to the host; a while loop is one graph
 * launch per job where conditional nodes exist; and every driver call the
 * backend makes, failing once, gives a clear error naming the call, no leak
 * (the double makes the process exit 86 on one), no crash, and the next job
 * works. The environment (set by ctest) selects the double as the driver
 * and as NVRTC. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define LEAK_STATUS 86

typedef struct result {
  int status;
  char *out, *err;
  json_object *json; /* --json output, or NULL */
} result;

static void run_cuda(const char *config, result *r) {
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "cuda", "--json", (char *)config, NULL};
  r->status = tu_run(argv, &r->out, &r->err);
  r->json = r->out ? json_tokener_parse(r->out) : NULL;
  if (r->status < 0) fail_msg("%s: sched-run crashed or could not run\n%s", config, r->err ? r->err : "");
  if (r->status == LEAK_STATUS || (r->err && strstr(r->err, "cuda-double: leak")))
    fail_msg("%s: the driver double found leaks:\n%s", config, r->err);
}

static void result_free(result *r) {
  free(r->out);
  free(r->err);
  if (r->json) json_object_put(r->json);
  memset(r, 0, sizeof *r);
}

static json_object *get(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!o || !json_object_object_get_ex(o, key, &v)) fail_msg("the JSON has no \"%s\"", key);
  return v;
}

static void set_double(const char *driver, const char *devices) {
  setenv("SCHEDRUN_CUDA_DOUBLE_DRIVER", driver, 1);
  setenv("SCHEDRUN_CUDA_DOUBLE_DEVICES", devices, 1);
  unsetenv("SCHEDRUN_CUDA_DOUBLE_FAIL");
}

/* ---- every config on the double ---- */

static void verify_on_cuda(const char *path, void *ctx) {
  (void)ctx;
  static const char *const drivers[] = {"13000", "12040"}, *const counts[] = {"1", "2"};
  for (int d = 0; d < 2; d++)
    for (int c = 0; c < 2; c++) {
      set_double(drivers[d], counts[c]);
      result r;
      run_cuda(path, &r);
      if (r.status != 0 || !r.json || !json_object_get_boolean(get(r.json, "verified")))
        fail_msg("%s on the double (driver %s, %s devices): exit %d\n%s%s", path, drivers[d], counts[c], r.status,
                 r.out ? r.out : "", r.err ? r.err : "");
      json_object *devs = get(r.json, "devices");
      assert_int_equal(json_object_array_length(devs), atoi(counts[c]));
      uint64_t jobs = 0;
      for (size_t i = 0; i < json_object_array_length(devs); i++) {
        json_object *dv = json_object_array_get_idx(devs, i);
        const char *name = json_object_get_string(get(dv, "name"));
        if (strncmp(name, "cuda:", 5) != 0) fail_msg("%s ran on %s, not on a cuda device", path, name);
        jobs += (uint64_t)json_object_get_int64(get(dv, "jobs"));
      }
      assert_int_equal(jobs, json_object_get_int64(get(r.json, "jobs")));
      result_free(&r);
    }
  printf("  %s: verified on the double (13.x and 12.x rules, 1 and 2 devices)\n", path);
}

static void test_configs_verify_on_cuda(void **st) {
  (void)st;
  assert_true(tu_for_each_config(verify_on_cuda, NULL) >= 5);
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/configs/copy_fill_edges.yaml", tu_env("SCHEDRUN_SOURCE_DIR"));
  verify_on_cuda(path, NULL);
}

/* ---- while loops ---- */

static void loops_on(const char *driver, bool conditional) {
  set_double(driver, "1");
  char path[4096];
  snprintf(path, sizeof path, "%s/while_countdown.yaml", tu_env("SCHEDRUN_CONFIGS"));
  result r;
  run_cuda(path, &r);
  assert_int_equal(r.status, 0);
  json_object *dv = json_object_array_get_idx(get(r.json, "devices"), 0);
  int64_t jobs = json_object_get_int64(get(dv, "jobs")), launches = json_object_get_int64(get(dv, "launches")),
          syncs = json_object_get_int64(get(dv, "loop_syncs"));
  const char *loops = json_object_get_string(get(dv, "loops"));
  if (conditional) {
    /* the loop and the unrolled steps around it: one graph, one launch */
    if (launches != jobs || syncs != 0 || !strstr(loops, "conditional WHILE nodes"))
      fail_msg("driver %s: %lld jobs took %lld launches and %lld host syncs; loops %s", driver, (long long)jobs,
               (long long)launches, (long long)syncs, loops);
  } else {
    /* 10 trips per job, each a synchronisation; loops say why */
    if (syncs < 10 * jobs || launches <= jobs || !strstr(loops, "on the host") || !strstr(loops, "12.3"))
      fail_msg("driver %s: %lld jobs took %lld launches and %lld host syncs; loops %s", driver, (long long)jobs,
               (long long)launches, (long long)syncs, loops);
  }
  result_free(&r);
}

static void test_while_loop_is_one_launch_per_job(void **st) {
  (void)st;
  loops_on("13000", true);
  loops_on("12020", false); /* no conditional nodes before 12.3: host-driven, still right */
}

/* ---- failures of each driver call ---- */

typedef enum {
  AT_OPEN,  /* the backend does not open: exit 4, the call named */
  ONE_JOB,  /* one job fails naming the call; the others verify */
  ABSORBED, /* handled: every job verifies (a refused update rebuilds; loops fall back to the host) */
  LOST,     /* the device is lost naming the call; jobs after it fail with that reason */
} outcome;

static const struct {
  const char *call;
  int nth;
  const char *config; /* in $SCHEDRUN_CONFIGS, or tests/configs with a leading '+' */
  outcome want;
} failures[] = {
    {"cuInit", 1, "saxpy.yaml", AT_OPEN},
    {"cuDriverGetVersion", 1, "saxpy.yaml", AT_OPEN},
    {"cuDeviceGetCount", 1, "saxpy.yaml", AT_OPEN},
    {"cuDeviceGet", 1, "saxpy.yaml", AT_OPEN},
    {"cuDeviceGetAttribute", 1, "saxpy.yaml", AT_OPEN},
    {"cuDevicePrimaryCtxRetain", 1, "saxpy.yaml", AT_OPEN},
    {"cuCtxSetCurrent", 1, "saxpy.yaml", AT_OPEN},
    {"cuStreamCreate", 1, "saxpy.yaml", AT_OPEN},
    {"cuMemAlloc", 1, "saxpy.yaml", ONE_JOB},
    {"cuMemcpyHtoD", 2, "saxpy.yaml", ONE_JOB},
    {"cuMemcpyDtoH", 2, "saxpy.yaml", ONE_JOB},
    {"cuMemsetD8", 1, "while_countdown.yaml", ONE_JOB},
    {"cuStreamSynchronize", 2, "saxpy.yaml", ONE_JOB},
    {"cuModuleLoadData", 1, "saxpy.yaml", ONE_JOB},
    {"cuModuleGetFunction", 1, "saxpy.yaml", ONE_JOB},
    {"cuGraphCreate", 1, "saxpy.yaml", ONE_JOB},
    {"cuGraphAddKernelNode", 1, "saxpy.yaml", ONE_JOB},
    {"cuGraphAddMemcpyNode", 1, "saxpy.yaml", ONE_JOB},
    {"cuGraphAddMemsetNode", 1, "+copy_fill_edges.yaml", ONE_JOB},
    {"cuGraphAddEmptyNode", 1, "+copy_fill_edges.yaml", ONE_JOB},
    {"cuGraphInstantiateWithFlags", 1, "saxpy.yaml", ONE_JOB},
    {"cuGraphLaunch", 2, "saxpy.yaml", ONE_JOB},
    {"cuGraphExecKernelNodeSetParams", 1, "saxpy.yaml", ABSORBED},
    {"cuGraphExecMemcpyNodeSetParams", 1, "+copy_fill_edges.yaml", ABSORBED},
    {"cuGraphExecMemsetNodeSetParams", 1, "+copy_fill_edges.yaml", ABSORBED},
    {"cuLinkCreate", 1, "while_countdown.yaml", ABSORBED},
    {"cuLinkAddData", 1, "while_countdown.yaml", ABSORBED},
    {"cuLinkAddFile", 1, "while_countdown.yaml", ABSORBED},
    {"cuLinkComplete", 1, "while_countdown.yaml", ABSORBED},
    {"cuGraphConditionalHandleCreate", 1, "while_countdown.yaml", ONE_JOB},
    {"cuGraphAddNode", 1, "while_countdown.yaml", ONE_JOB},
    {"cuStreamQuery", 2, "saxpy.yaml", LOST},
};

static void test_each_driver_call_failing_once(void **st) {
  (void)st;
  for (size_t i = 0; i < sizeof failures / sizeof failures[0]; i++) {
    set_double("13000", "1");
    char spec[128], path[4096];
    snprintf(spec, sizeof spec, "%s@%d", failures[i].call, failures[i].nth);
    setenv("SCHEDRUN_CUDA_DOUBLE_FAIL", spec, 1);
    if (failures[i].config[0] == '+')
      snprintf(path, sizeof path, "%s/tests/configs/%s", tu_env("SCHEDRUN_SOURCE_DIR"), failures[i].config + 1);
    else
      snprintf(path, sizeof path, "%s/%s", tu_env("SCHEDRUN_CONFIGS"), failures[i].config);
    result r;
    run_cuda(path, &r);
    const char *call = failures[i].call;
    switch (failures[i].want) {
    case AT_OPEN:
      if (r.status != 4 || !r.err || !strstr(r.err, call))
        fail_msg("%s failing: exit %d, stderr: %s", spec, r.status, r.err ? r.err : "");
      break;
    case ONE_JOB:
    case LOST:
    case ABSORBED: {
      if (!r.json) fail_msg("%s failing: no JSON (exit %d)\n%s", spec, r.status, r.err ? r.err : "");
      int64_t jobs = json_object_get_int64(get(r.json, "jobs")), ok = json_object_get_int64(get(r.json, "jobs_verified"));
      json_object *fl = get(r.json, "failures");
      const char *first = json_object_array_length(fl) ? json_object_get_string(json_object_array_get_idx(fl, 0)) : "";
      const char *loops = json_object_get_string(get(json_object_array_get_idx(get(r.json, "devices"), 0), "loops"));
      if (failures[i].want == ABSORBED) {
        if (r.status != 0 || ok != jobs) fail_msg("%s failing: exit %d, %lld of %lld verified: %s", spec, r.status,
                                                   (long long)ok, (long long)jobs, first);
        /* a condition kernel that cannot be built sends loops to the host, saying why */
        if (strncmp(call, "cuLink", 6) == 0 && !strstr(loops, call))
          fail_msg("%s failing: loops run %s", spec, loops);
      } else if (failures[i].want == ONE_JOB) {
        if (r.status == 0 || ok != jobs - 1 || !strstr(first, call))
          fail_msg("%s failing: exit %d, %lld of %lld verified, first failure: %s", spec, r.status, (long long)ok,
                   (long long)jobs, first);
      } else {
        if (r.status == 0 || ok >= jobs || !strstr(first, call) || !strstr(first, "unusable"))
          fail_msg("%s failing: exit %d, %lld of %lld verified, first failure: %s", spec, r.status, (long long)ok,
                   (long long)jobs, first);
      }
      break;
    }
    }
    result_free(&r);
  }
  unsetenv("SCHEDRUN_CUDA_DOUBLE_FAIL");
}

/* ---- architectures NVRTC does not know ---- */

/* A GPU newer than NVRTC gets PTX for the newest architecture it knows,
 * which the driver compiles; a driver older than NVRTC cannot load it, and
 * says what to do; a GPU older than NVRTC supports is refused by name. */
static void test_architectures(void **st) {
  (void)st;
  char path[4096];
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  set_double("13000", "1");
  setenv("SCHEDRUN_CUDA_DOUBLE_ARCH", "200", 1);
  result r;
  run_cuda(path, &r);
  if (r.status != 0) fail_msg("sm_200: exit %d\n%s", r.status, r.err ? r.err : "");
  result_free(&r);
  set_double("12080", "1");
  run_cuda(path, &r);
  if (r.status == 0 || !r.out || !strstr(r.out, "cuModuleLoadData") || !strstr(r.out, "driver is CUDA 12.8") ||
      !strstr(r.out, "SCHEDRUN_NVRTC_LIBRARY"))
    fail_msg("PTX 9 on a 12.8 driver: exit %d\n%s", r.status, r.out ? r.out : "");
  result_free(&r);
  set_double("13000", "1");
  setenv("SCHEDRUN_CUDA_DOUBLE_ARCH", "30", 1);
  run_cuda(path, &r);
  if (r.status == 0 || !r.out || !strstr(r.out, "cannot compile for sm_30; it supports sm_"))
    fail_msg("sm_30: exit %d\n%s", r.status, r.out ? r.out : "");
  result_free(&r);
  unsetenv("SCHEDRUN_CUDA_DOUBLE_ARCH");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_configs_verify_on_cuda),
      cmocka_unit_test(test_while_loop_is_one_launch_per_job),
      cmocka_unit_test(test_each_driver_call_failing_once),
      cmocka_unit_test(test_architectures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
