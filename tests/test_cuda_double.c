/* The CUDA path on the driver double (tests/cuda_double/): sched-run with
 * --devices cuda verifies every shipped config and the copy and fill edge
 * cases under the rules of a 13.x and a 12.x driver, on one and on two
 * devices, and never falls back to the host; a while loop is one graph
 * launch per job where conditional nodes exist, and the nodes of its body
 * are updated in place through the whole graph; fills that change size
 * are updated in place; and every driver call the
 * backend makes, failing once, gives a clear error naming the call, no leak
 * (the double makes the process exit 86 on one), no crash, and the next job
 * works; NVRTC compiles run in a process of their own that a shutdown, a
 * deadline and the compile timeout stop; a while loop run from the host
 * stops at the job's deadline; the double refuses copies between
 * overlapping ranges, as a driver may; a kernel that never returns costs
 * its device and its job, and the run still ends. The environment (set by ctest)
 * selects the double as the driver and as NVRTC. */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_app.h"

#include "cuda_double_run.h"

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

/* ---- updates inside a while loop's body ---- */

/* Every job after the first changes a kernel's argument and a fill's value
 * inside the loop's body. The body's nodes belong to the conditional node's
 * graph, not to the graph instantiated: they are updated through the graph
 * and one cuGraphExecUpdate per job, never through the per-node setters the
 * documentation does not promise for them. With the double refusing those
 * (SCHEDRUN_CUDA_DOUBLE_STRICT=body-setparams) every job still updates in
 * place: no refusal, no rebuild, one launch and one update per job, and
 * every run's values right. */
static void body_updates_on(const char *driver, const char *strict) {
  set_double(driver, "1");
  if (strict) setenv("SCHEDRUN_CUDA_DOUBLE_STRICT", strict, 1);
  result r;
  char *text = run_logged("tests/configs/while_body_updates.yaml", &r);
  unsetenv("SCHEDRUN_CUDA_DOUBLE_STRICT");
  int64_t jobs = json_object_get_int64(get(r.json, "jobs"));
  assert_int_equal(jobs, 6);
  json_object *dv = json_object_array_get_idx(get(r.json, "devices"), 0);
  if (!strstr(json_object_get_string(get(dv, "loops")), "conditional WHILE nodes"))
    fail_msg("driver %s: loops ran %s", driver, json_object_get_string(get(dv, "loops")));
  /* three nodes change per job: the body's kernel and fill, the fill after */
  assert_int_equal(json_object_get_int64(get(r.json, "nodes_updated")), 3 * (jobs - 1));
  int rejected = tu_count(text, "update-rejected"), updates = tu_count(text, "graph-update"),
      launches = tu_count(text, "graph-launch");
  if (rejected != 0 || updates != jobs - 1 || launches != jobs)
    fail_msg("driver %s, strict %s: %d updates refused, %d graph updates, %d launches for %lld jobs", driver,
             strict ? strict : "-", rejected, updates, launches, (long long)jobs);
  free(text);
  result_free(&r);
}

static void test_while_body_updates_in_place(void **st) {
  (void)st;
  body_updates_on("13000", "body-setparams");
  body_updates_on("13000", NULL);
  body_updates_on("12040", "body-setparams");
}

/* ---- fills whose size changes from job to job ---- */

/* Fills growing, shrinking and emptying from run to run (4- and 8-byte
 * elements, one in a while loop's body) stay one node each, updated in
 * place every job under every driver's rules: as many nodes created and
 * updated as on a host device, no update refused, every run's values
 * right. A memset node could not: a 13.x driver may refuse to grow one, a
 * 12.x driver any 2-D one, and no driver turns an empty node into one. */
static void fills_on(const char *driver) {
  set_double(driver, "1");
  result r;
  char *text = run_logged("tests/configs/fill_resizes.yaml", &r);
  int64_t jobs = json_object_get_int64(get(r.json, "jobs")), created = json_object_get_int64(get(r.json, "nodes_created")),
          updated = json_object_get_int64(get(r.json, "nodes_updated"));
  /* 10 nodes recorded once; the 4 resizing fills updated in 5 jobs */
  if (jobs != 6 || created != 10 || updated != 20 || tu_count(text, "update-rejected") != 0)
    fail_msg("driver %s: %lld jobs, %lld nodes created, %lld updated; the double's log:\n%s", driver, (long long)jobs,
             (long long)created, (long long)updated, text);
  free(text);
  result_free(&r);
}

static void test_fills_that_resize_update_in_place(void **st) {
  (void)st;
  fills_on("13000");
  fills_on("12040");
  fills_on("12020"); /* loops driven from the host */
}

/* ---- an NVRTC newer than the driver ---- */

/* NVRTC 13.0 beside a 12.4 driver: what it compiles needs a 13 driver, so
 * opening the devices says so, naming both versions and the way out;
 * "auto" falls back to the host with that reason. */
static void test_nvrtc_newer_than_the_driver(void **st) {
  (void)st;
  set_double("12040", "1");
  setenv("SCHEDRUN_CUDA_DOUBLE_NVRTC_VERSION", "13.0", 1);
  char path[4096];
  snprintf(path, sizeof path, "%s/saxpy.yaml", tu_env("SCHEDRUN_CONFIGS"));
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "cuda", (char *)path, NULL};
  char *out = NULL, *errs = NULL;
  int rc = tu_run(argv, &out, &errs);
  const char *want = "NVRTC 13.0 is newer than the driver (CUDA 12.4): what it compiles needs a CUDA 13 driver; "
                     "set SCHEDRUN_NVRTC_LIBRARY to an NVRTC 12.x";
  if (rc != 4 || !errs || !strstr(errs, want)) fail_msg("--devices cuda: exit %d\n%s%s", rc, out, errs);
  free(out);
  free(errs);
  char *argv2[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "auto", (char *)path, NULL};
  rc = tu_run(argv2, &out, &errs);
  if (rc != 0 || (!strstr(out, want) && !strstr(errs, want))) fail_msg("--devices auto: exit %d\n%s%s", rc, out, errs);
  free(out);
  free(errs);
  unsetenv("SCHEDRUN_CUDA_DOUBLE_NVRTC_VERSION");
}

/* ---- devices of two architectures ---- */

/* Devices of different compute capabilities (sm_90 and sm_80) share one
 * artifact per kernel holding a cubin for each architecture; each device
 * loads its own. Every job verifies on both (the double refuses a cubin of
 * another architecture with CUDA_ERROR_NO_BINARY_FOR_GPU, as a driver does). */
static void test_devices_of_two_architectures(void **st) {
  (void)st;
  set_double("13000", "2");
  setenv("SCHEDRUN_CUDA_DOUBLE_ARCH", "90,80", 1);
  static const char *const configs[] = {"saxpy.yaml", "multi_device_demo.yaml"};
  for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tu_env("SCHEDRUN_CONFIGS"), configs[c]);
    result r;
    run_cuda(path, &r);
    if (r.status != 0 || !r.json || !json_object_get_boolean(get(r.json, "verified")))
      fail_msg("%s on sm_90 and sm_80: exit %d\n%s%s", configs[c], r.status, r.out ? r.out : "", r.err ? r.err : "");
    json_object *devs = get(r.json, "devices");
    assert_int_equal(json_object_array_length(devs), 2);
    for (size_t d = 0; d < 2; d++)
      if (json_object_get_int64(get(json_object_array_get_idx(devs, d), "jobs")) == 0)
        fail_msg("%s: device %zu ran no job", configs[c], d);
    /* a cubin per architecture, oldest first, each device loading its own */
    assert_string_equal(json_object_get_string(get(r.json, "target")), "cuda sm_80+sm_90");
    printf("  %s: verified on sm_90 and sm_80\n", configs[c]);
    result_free(&r);
  }
  unsetenv("SCHEDRUN_CUDA_DOUBLE_ARCH");
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
  int code; /* the CUresult it fails with; 0: CUDA_ERROR_UNKNOWN */
} failures[] = {
    {"cuInit", 1, "saxpy.yaml", AT_OPEN},
    {"cuDriverGetVersion", 1, "saxpy.yaml", AT_OPEN},
    {"cuDeviceGetCount", 1, "saxpy.yaml", AT_OPEN},
    {"cuDeviceGet", 1, "saxpy.yaml", AT_OPEN},
    {"cuDeviceGetAttribute", 1, "saxpy.yaml", AT_OPEN},
    {"cuDevicePrimaryCtxRetain", 1, "saxpy.yaml", AT_OPEN},
    {"cuCtxGetCurrent", 1, "saxpy.yaml", AT_OPEN},
    {"cuCtxSetCurrent", 1, "saxpy.yaml", AT_OPEN},
    {"cuStreamCreate", 1, "saxpy.yaml", AT_OPEN},
    {"cuMemAlloc", 1, "saxpy.yaml", ONE_JOB},
    {"cuMemcpyHtoD", 2, "saxpy.yaml", ONE_JOB},
    {"cuMemcpyDtoH", 2, "saxpy.yaml", ONE_JOB},
    {"cuMemsetD8", 1, "while_countdown.yaml", ONE_JOB},
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
    /* a while body's nodes: set in the graph, carried over by cuGraphExecUpdate */
    {"cuGraphKernelNodeSetParams", 1, "+while_body_updates.yaml", ABSORBED},
    {"cuGraphMemsetNodeSetParams", 1, "+while_body_updates.yaml", ABSORBED},
    {"cuGraphExecUpdate", 1, "+while_body_updates.yaml", ONE_JOB},
    {"cuGraphExecUpdate", 2, "+while_body_updates.yaml", ABSORBED, 910}, /* refused: instantiated afresh */
    {"cuLinkCreate", 1, "while_countdown.yaml", ABSORBED},
    {"cuLinkAddData", 1, "while_countdown.yaml", ABSORBED},
    {"cuLinkAddFile", 1, "while_countdown.yaml", ABSORBED},
    {"cuLinkComplete", 1, "while_countdown.yaml", ABSORBED},
    {"cuGraphConditionalHandleCreate", 1, "while_countdown.yaml", ONE_JOB},
    {"cuGraphAddNode", 1, "while_countdown.yaml", ONE_JOB},
    {"cuStreamQuery", 2, "saxpy.yaml", LOST},
    /* batches: refused before anything is queued, the jobs run again alone;
     * a step refused after a job's graph was queued fails that job alone
     * (the first event recorded is the first batch's first graph's end,
     * whatever the batches hold) */
    {"cuEventCreate", 1, "+same_jobs.yaml", ABSORBED},
    {"cuMemHostAlloc", 1, "+same_jobs.yaml", ABSORBED},
    {"cuMemcpyDtoHAsync", 5, "+same_jobs.yaml", ONE_JOB},
    {"cuEventRecord", 1, "+same_jobs.yaml", ONE_JOB},
    /* a kernel's fault surfaces at the next call on its context, and stays:
     * CUDA_ERROR_ILLEGAL_ADDRESS (700) from the next launch, the next
     * synchronize, the next copy back; CUDA_ERROR_LAUNCH_FAILED (719) */
    {"cuGraphLaunch", 2, "saxpy.yaml", LOST, 700},
    {"cuStreamQuery", 2, "saxpy.yaml", LOST, 719},
    {"cuMemcpyDtoH", 2, "saxpy.yaml", LOST, 700},
};

static void test_each_driver_call_failing_once(void **st) {
  (void)st;
  for (size_t i = 0; i < sizeof failures / sizeof failures[0]; i++) {
    set_double("13000", "1");
    char spec[128], path[4096];
    if (failures[i].code)
      snprintf(spec, sizeof spec, "%s@%d=%d", failures[i].call, failures[i].nth, failures[i].code);
    else
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

/* ---- NVRTC compiles that are stopped ---- */

/* A kernel only these tests compile: never in the cache. */
static char slow_yaml[1024];

static void make_slow_yaml(const char *tag) {
  snprintf(slow_yaml, sizeof slow_yaml,
           "version: 1\n"
           "kernels:\n"
           "  slow_nvrtc_k:\n"
           "    params: [ptr]\n"
           "    source: |\n"
           "      extern \"C\" __global__ void slow_nvrtc_k(int *o) { o[0] = 3; } // %s %llu\n"
           "buffers:\n"
           "  o: {type: i32, count: 1}\n"
           "program:\n"
           "  - launch: {kernel: slow_nvrtc_k, grid: 1, block: 1, args: [o]}\n",
           tag, (unsigned long long)tu_now_ns());
}

/* The NVRTC compile process of slow_nvrtc_k (gpu/cuda/nvrtc_worker.c:
 * argv[4] is the kernel's name). */
static int is_slow_compile(int argc, char *const *argv, void *ctx) {
  (void)ctx;
  return argc >= 8 && strstr(argv[0], "/proc/self/fd/") && !strcmp(argv[4], "slow_nvrtc_k");
}

/* One device of the double with the rules of `driver` ("13000", "12000"). */
static schedrun_t *open_cuda(const char *driver, int compile_timeout_ms) {
  set_double(driver, "1");
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "cuda";
  o.compile_timeout_ms = compile_timeout_ms;
  return tu_open(&o);
}

static int run_slow(schedrun_t *s, int timeout_ms, bool shut_down, char *text, size_t n) {
  schedrun_program_t *p = tu_load(s, slow_yaml, "slow.yaml");
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.timeout_ms = timeout_ms;
  schedrun_job_t id;
  schedrun_error_t err = {0};
  if (schedrun_submit(s, p, &jo, &id, &err)) fail_msg("%s", err.message);
  if (shut_down) {
    TU_WAIT_FOR(tu_count_processes(is_slow_compile, NULL) == 1, "the NVRTC compile process to start");
    uint64_t t0 = tu_now_ns();
    assert_int_equal(schedrun_shutdown(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
    printf("the shutdown stopped the NVRTC compile in %.1f ms\n", (double)(tu_now_ns() - t0) / 1e6);
  }
  schedrun_job_result_t *r = NULL;
  if (schedrun_wait(s, id, TU_PATIENCE_MS, &r, &err)) fail_msg("%s", err.message);
  int status = schedrun_job_result_info(r)->status;
  snprintf(text, n, "%s", schedrun_job_result_error(r));
  schedrun_job_result_free(&r);
  schedrun_program_free(&p);
  return status;
}

/* A shutdown while NVRTC compiles (for ten minutes) kills its compile
 * process: the job completes SCHEDRUN_ECLOSED with the teardown, and no
 * compile process is left. */
static void test_shutdown_stops_an_nvrtc_compile(void **st) {
  (void)st;
  setenv("SCHEDRUN_CUDA_DOUBLE_COMPILE_MS", "600000", 1);
  make_slow_yaml("shutdown");
  schedrun_t *s = open_cuda("13000", 0);
  char text[2048];
  assert_int_equal(run_slow(s, 0, true, text, sizeof text), SCHEDRUN_ECLOSED);
  if (!strstr(text, "teardown: reset the active compile mode; stop 1 running compiles"))
    fail_msg("the shut-down job's error: %s", text);
  assert_int_equal(tu_count_processes(is_slow_compile, NULL), 0);
  schedrun_close(&s);
  unsetenv("SCHEDRUN_CUDA_DOUBLE_COMPILE_MS");
}

/* A job's deadline stops an NVRTC compile that no other job waits for; a
 * compile past the compile timeout is killed and fails as a compile. */
static void test_deadline_and_timeout_stop_nvrtc(void **st) {
  (void)st;
  setenv("SCHEDRUN_CUDA_DOUBLE_COMPILE_MS", "600000", 1);
  make_slow_yaml("deadline");
  schedrun_t *s = open_cuda("13000", 0);
  char text[2048];
  assert_int_equal(run_slow(s, 500, false, text, sizeof text), SCHEDRUN_ETIMEOUT);
  if (!strstr(text, "still compiling kernel 'slow_nvrtc_k' (slow.yaml:3:3) after "))
    fail_msg("the late job's error: %s", text);
  TU_WAIT_FOR(tu_count_processes(is_slow_compile, NULL) == 0, "the stopped compile process to be killed");
  schedrun_close(&s);
  make_slow_yaml("timeout");
  s = open_cuda("13000", 300);
  assert_int_equal(run_slow(s, 0, false, text, sizeof text), SCHEDRUN_ECOMPILE);
  if (!strstr(text, "the NVRTC compile process ran for more than the compile timeout (0.3 s) and was killed"))
    fail_msg("the compile past its timeout: %s", text);
  assert_int_equal(tu_count_processes(is_slow_compile, NULL), 0);
  schedrun_close(&s);
  unsetenv("SCHEDRUN_CUDA_DOUBLE_COMPILE_MS");
}

/* A while loop run from the host (a 12.0 driver has no conditional nodes)
 * that would run for hours stops at the job's deadline, between trips: the
 * job fails with SCHEDRUN_ETIMEOUT naming the loop, and the device, idle
 * there, is not lost and runs the next job. */
static const char spin_yaml[] =
    "version: 1\nname: spin\nkernels:\n  keep:\n    params: [ptr]\n    source: |\n"
    "      extern \"C\" __global__ void keep(int *flag) { if (threadIdx.x == 0) flag[0] = 1; }\n"
    "buffers:\n  flag: {type: i32, count: 1, init: {fill: 1}}\n"
    "program:\n  - loop:\n      while: {buffer: flag, index: 0}\n      max_trips: 2000000000\n      body:\n"
    "        - launch: {kernel: keep, grid: 1, block: 1, args: [flag]}\n";

static const char fill_yaml[] = "version: 1\nname: fill\nbuffers:\n  a: {type: i32, count: 4}\n"
                                "program:\n  - fill: {buffer: a, value: 7}\nexpect:\n  a: {values: [7, 7, 7, 7]}\n";

static void test_deadline_in_a_host_driven_loop(void **st) {
  (void)st;
  schedrun_t *s = open_cuda("12000", 0);
  schedrun_program_t *p = tu_load(s, spin_yaml, "spin.yaml"), *fill = tu_load(s, fill_yaml, "fill.yaml");
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.record_only = 1; /* compiled and recorded first, with no deadline: only the loop runs against it */
  schedrun_job_result_t *r;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
  if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) fail_msg("record: %s", schedrun_job_result_error(r));
  schedrun_job_result_free(&r);
  jo.record_only = 0;
  jo.timeout_ms = 200;
  assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
  const char *text = schedrun_job_result_error(r);
  /* (on a machine too busy to start the job within 200 ms, the deadline
   * may pass before the loop: the error then says where it was instead) */
  if (schedrun_job_result_info(r)->status != SCHEDRUN_ETIMEOUT)
    fail_msg("status %d: %s", schedrun_job_result_info(r)->status, text);
  printf("  the deadline: %s\n", text);
  schedrun_job_result_free(&r);
  assert_null(schedrun_device_lost(s, 0));
  assert_int_equal(schedrun_submit_wait(s, fill, NULL, &r, &err), SCHEDRUN_OK);
  if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) fail_msg("after the deadline: %s", schedrun_job_result_error(r));
  schedrun_job_result_free(&r);
  schedrun_program_free(&fill);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* ---- a kernel that never returns ---- */

static const char hang_yaml[] =
    "version: 1\nname: hang\nkernels:\n  spin_forever:\n    params: [ptr]\n    source: |\n"
    "      extern \"C\" __global__ void spin_forever(int *x) { x[threadIdx.x] += 1; }\n"
    "buffers:\n  x: {type: i32, count: 32}\n  flag: {type: i32, count: 1, init: {values: [1]}}\n"
    "program:\n%s";
static const char hang_launch[] = "  - launch: {kernel: spin_forever, grid: 1, block: 32, args: [x]}\n";
static const char hang_loop[] = "  - loop:\n      while: {buffer: flag, index: 0}\n      max_trips: 8\n"
                                "      body:\n        - launch: {kernel: spin_forever, grid: 1, block: 32, args: [x]}\n";

/* A job whose kernel never returns (the double's SCHEDRUN_CUDA_DOUBLE_HANG:
 * its stream stops there for good) runs past its deadline; the device is
 * lost, and the run ends: no call that could wait for that context is made
 * again (the double ends the process with status 87 on one, naming it), and
 * nothing leaks but what that context holds. As one launch, as a while
 * loop in a conditional node, and as a loop run from the host. */
static void hang_once(const char *driver, const char *program, const char *what, bool job_deadline) {
  set_double(driver, "1");
  char yaml[2048];
  snprintf(yaml, sizeof yaml, hang_yaml, program);
  const char *path = tu_write_temp(5, "hang.yaml", yaml);
  char *check[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "cuda", "--check", (char *)path, NULL};
  char *out = NULL, *errs = NULL;
  if (tu_run(check, &out, &errs) != 0) fail_msg("%s: --check: %s%s", what, out ? out : "", errs ? errs : "");
  free(out);
  free(errs);
  /* the job's own deadline (from 200 ms), or the run's (from 1 s: a close
   * abandoning the device). A deadline that passed before the job reached
   * its kernel (a busy machine, the condition kernel's compile) proves
   * nothing here: the run is tried again with twice the time. */
  for (int t = job_deadline ? 200 : 1;; t *= 2) {
    const char *log = tu_write_temp(4, "double.log", "");
    setenv("SCHEDRUN_CUDA_DOUBLE_LOG", log, 1);
    setenv("SCHEDRUN_CUDA_DOUBLE_HANG", "spin_forever", 1);
    char bound[32];
    snprintf(bound, sizeof bound, "%d", t);
    char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "cuda", "--json", "--timeout", job_deadline ? "120" : bound,
                    job_deadline ? "--job-timeout" : (char *)path, job_deadline ? bound : NULL, (char *)path, NULL};
    result r = {0};
    r.status = tu_run(argv, &r.out, &r.err);
    r.json = r.out ? json_tokener_parse(r.out) : NULL;
    unsetenv("SCHEDRUN_CUDA_DOUBLE_HANG");
    unsetenv("SCHEDRUN_CUDA_DOUBLE_LOG");
    if (r.status != 4)
      fail_msg("%s (driver %s): exit %d\n%s%s", what, driver, r.status, r.out ? r.out : "", r.err ? r.err : "");
    char *text = tu_slurp(log, NULL);
    assert_non_null(text);
    bool reached = tu_count(text, "hang\n") == 1;
    free(text);
    json_object *fl = r.json ? get(r.json, "failures") : NULL;
    const char *first = fl && json_object_array_length(fl) ? json_object_get_string(json_object_array_get_idx(fl, 0))
                        : r.err                               ? r.err
                                                              : "";
    if (!reached && t < (job_deadline ? 64000 : 64)) {
      printf("  %s: the deadline passed before the kernel ran (%s): again, with twice the time\n", what, first);
      result_free(&r);
      continue;
    }
    if (!reached) fail_msg("%s (driver %s): the kernel never ran: %s", what, driver, first);
    if (!strstr(first, job_deadline ? "ran past its deadline (the device is lost)" : "timed out"))
      fail_msg("%s (driver %s): the failure: %s", what, driver, first);
    printf("  %s: %s\n", what, first);
    result_free(&r);
    return;
  }
}

static void test_close_after_a_kernel_that_never_returns(void **st) {
  (void)st;
  hang_once("13000", hang_launch, "one launch, past its deadline", true);
  hang_once("13000", hang_launch, "one launch, the run past --timeout", false);
  hang_once("13000", hang_loop, "a while loop as a conditional node", true);
  hang_once("12020", hang_loop, "a while loop run from the host", true);
}

/* The double's driver calls, straight: a copy between overlapping ranges of
 * one allocation is refused (a driver leaves its result undefined), one
 * between ranges that do not overlap copies. */
static void test_double_refuses_overlapping_copies(void **st) {
  (void)st;
  cu_app a;
  cu_app_open(&a);
  enum { OK = 0, INVALID_VALUE = 1 };
  int dev;
  void *ctx;
  unsigned long long p;
  assert_int_equal(a.init(0), OK);
  assert_int_equal(a.get(&dev, 0), OK);
  assert_int_equal(a.retain(&ctx, dev), OK);
  assert_int_equal(a.set(ctx), OK);
  assert_int_equal(a.alloc(&p, 64), OK);
  assert_int_equal(a.memset_d8(p, 7, 16), OK);
  assert_int_equal(a.memset_d8(p + 16, 0, 48), OK);
  assert_int_equal(a.dtod(p + 8, p, 16), INVALID_VALUE); /* forwards over itself */
  assert_int_equal(a.dtod(p, p + 8, 16), INVALID_VALUE); /* backwards */
  assert_int_equal(a.dtod(p, p, 16), INVALID_VALUE);     /* onto itself */
  assert_int_equal(a.dtod(p + 16, p, 16), OK);           /* adjacent: no overlap */
  unsigned char back[64];
  assert_int_equal(a.dtoh(back, p, sizeof back), OK);
  for (int i = 0; i < 64; i++) assert_int_equal(back[i], i < 32 ? 7 : 0);
  assert_int_equal((a.free)(p), OK);
  assert_int_equal(a.set(NULL), OK);
  assert_int_equal(a.release(dev), OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      /* first: the double it loads into this process has no conditional
       * nodes (the others here run sched-run, or do not mind) */
      cmocka_unit_test(test_deadline_in_a_host_driven_loop),
      cmocka_unit_test(test_configs_verify_on_cuda),
      cmocka_unit_test(test_while_loop_is_one_launch_per_job),
      cmocka_unit_test(test_while_body_updates_in_place),
      cmocka_unit_test(test_fills_that_resize_update_in_place),
      cmocka_unit_test(test_each_driver_call_failing_once),
      cmocka_unit_test(test_architectures),
      cmocka_unit_test(test_devices_of_two_architectures),
      cmocka_unit_test(test_nvrtc_newer_than_the_driver),
      cmocka_unit_test(test_shutdown_stops_an_nvrtc_compile),
      cmocka_unit_test(test_deadline_and_timeout_stop_nvrtc),
      cmocka_unit_test(test_double_refuses_overlapping_copies),
      cmocka_unit_test(test_close_after_a_kernel_that_never_returns),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
