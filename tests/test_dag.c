/* Job graphs: a diamond over two devices with its hand-offs counted, a
 * failure that ends every path through it, cycles and unknown nodes refused,
 * host tasks between jobs, and 10,000 jobs in chains of 10, each completing
 * exactly once. SCHEDRUN_DAG_DEVICES picks the devices (default host:2; the
 * driver double runs it as "cuda"). */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/api.h"
#include "schedrun.h"
#include "test_util.h"

#define N 64

#define KERNEL_PROGRAM(NAME, PARAMS, SRC, BUFFERS, ARGS, EXPECT)                                             \
  "version: 1\nname: " NAME "\nkernels:\n  k:\n    params: [" PARAMS "]\n    source: |\n      extern \"C\" " \
  "__global__ void k(" SRC "\nbuffers:\n" BUFFERS "program:\n  - launch: {kernel: k, grid: 1, block: 64, args: [" \
  ARGS "]}\n" EXPECT

/* out[i] = i + 1 + $job */
static const char produce_yaml[] = KERNEL_PROGRAM(
    "produce", "ptr, f32", "float *out, float add) { int i = threadIdx.x; out[i] = i + 1 + add; }",
    "  out: {type: f32, count: 64}\n", "out, \"$job\"",
    "expect:\n  out: {at: {0: \"1 + $job\", 63: \"64 + $job\"}}\n");
/* the same, with an expectation that never holds */
static const char produce_bad_yaml[] = KERNEL_PROGRAM(
    "produce-bad", "ptr, f32", "float *out, float add) { int i = threadIdx.x; out[i] = i + 1 + add; }",
    "  out: {type: f32, count: 64}\n", "out, 0", "expect:\n  out: {at: {0: -1}}\n");
/* x[i] = x[i] * 2 */
static const char twice_yaml[] = KERNEL_PROGRAM("twice", "ptr", "float *x) { x[threadIdx.x] *= 2.0f; }",
                                                "  x: {type: f32, count: 64}\n", "x", "");
/* x[i] = x[i] * x[i] */
static const char square_yaml[] = KERNEL_PROGRAM("square", "ptr", "float *x) { x[threadIdx.x] *= x[threadIdx.x]; }",
                                                 "  x: {type: f32, count: 64}\n", "x", "");
/* out[i] = a[i] + b[i] */
static const char add_yaml[] = KERNEL_PROGRAM(
    "add", "ptr, ptr, ptr", "const float *a, const float *b, float *out) { int i = threadIdx.x; out[i] = a[i] + b[i]; }",
    "  a: {type: f32, count: 64}\n  b: {type: f32, count: 64}\n  out: {type: f32, count: 64}\n", "a, b, out", "");
/* y[i] = s[0] + i */
static const char spread_yaml[] = KERNEL_PROGRAM(
    "spread", "ptr, ptr", "const float *s, float *y) { int i = threadIdx.x; y[i] = s[0] + i; }",
    "  s: {type: f32, count: 1}\n  y: {type: f32, count: 64}\n", "s, y", "");
/* x[i] += 1: after k jobs in a chain, k; each job expects $job + 1 */
static const char incr_yaml[] = KERNEL_PROGRAM("incr", "ptr", "float *x) { x[threadIdx.x] += 1.0f; }",
                                               "  x: {type: f32, count: 64}\n", "x",
                                               "expect:\n  x: {at: {0: \"$job + 1\", 63: \"$job + 1\"}}\n");

/* spin_us as schedrun_options_t has it: -1 where a test counts what ran on
 * guest threads (a device's thread that never polls takes its queue only
 * when rung, so a guest finds the turn free whatever the machine's speed) */
static schedrun_t *open_dag_spin(int spin_us) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.spin_us = spin_us;
  return tu_open_devices("SCHEDRUN_DAG_DEVICES", "host:2", 2, &o);
}

static schedrun_t *open_dag(void) { return open_dag_spin(0); }

/* Until no thread holds the scheduler's turn or a device's: opened with
 * spin_us -1, their threads then sleep until rung, and what a test does
 * next finds the turns free for a guest, however busy the machine is. The
 * probe runs anything still queued; the guest rounds it counts come before
 * the test counts its own. Nothing to wait for where guests never run. */
static void wait_turns_free(schedrun_t *s) {
  actor_t *sched = api_guest_enter(s);
  if (!sched) return;
  TU_WAIT_FOR(actor_run_queue_here(sched) == ACTOR_TURN_RAN && actor_run_queue_here(s->execute[0]) == ACTOR_TURN_RAN &&
                  actor_run_queue_here(s->execute[1]) == ACTOR_TURN_RAN,
              "the actors' threads to let go of their turns");
  api_guest_leave(s);
}

static schedrun_job_result_t *wait_ok(schedrun_t *s, schedrun_job_t id, int want_status) {
  schedrun_job_result_t *r = NULL;
  schedrun_error_t err = {0};
  if (schedrun_wait(s, id, TU_PATIENCE_MS, &r, &err)) fail_msg("wait %llu: %s", (unsigned long long)id, err.message);
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  if (in->status != want_status)
    fail_msg("job %llu: status %d (%s), wanted %d", (unsigned long long)id, in->status, schedrun_job_result_error(r),
             want_status);
  return r;
}

static const float *output(const schedrun_job_result_t *r, const char *name, size_t n) {
  size_t bytes = 0;
  const float *v = schedrun_job_result_output(r, name, &bytes);
  if (!v || bytes != n * sizeof(float)) fail_msg("no output '%s' of %zu floats (%zu bytes)", name, n, bytes);
  return v;
}

static int add_job(schedrun_graph_t *g, schedrun_program_t *p, int device, int job) {
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.device = device;
  o.job = job;
  o.keep_outputs = 1;
  int node = -1;
  schedrun_error_t err = {0};
  if (schedrun_graph_job(g, p, &o, &node, &err)) fail_msg("%s", err.message);
  return node;
}

static void handoff(schedrun_graph_t *g, int from, const char *fb, int to, const char *tb) {
  schedrun_error_t err = {0};
  if (schedrun_graph_handoff(g, from, fb, to, tb, &err)) fail_msg("%s", err.message);
}

/* ---- the diamond ---- */

/* A (device 0) -> B (device 1) and C (unpinned) -> D (unpinned): A's out is
 * B's and C's x, B's x is D's a, C's x D's b. Node i is n[i]. */
static schedrun_graph_t *diamond_graph(schedrun_program_t *const p[4], int job, int n[4]) {
  schedrun_graph_t *g;
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  n[0] = add_job(g, p[0], 0, job);
  n[1] = add_job(g, p[1], 1, 0);
  n[2] = add_job(g, p[2], -1, 0);
  n[3] = add_job(g, p[3], -1, 0);
  handoff(g, n[0], "out", n[1], "x");
  handoff(g, n[0], "out", n[2], "x");
  handoff(g, n[1], "x", n[3], "a");
  handoff(g, n[2], "x", n[3], "b");
  return g;
}

/* A (device 0) -> B (device 1, twice) and C (unpinned: A's device, square)
 * -> D (add, unpinned: it goes where one of its inputs is). */
/* Whether the devices hand buffers on device to device: host devices
 * always; the driver double's unless SCHEDRUN_CUDA_DOUBLE_PEER=none (then
 * through the host). */
static bool peers_here(void) {
  const char *p = getenv("SCHEDRUN_CUDA_DOUBLE_PEER");
  return !(getenv("SCHEDRUN_DAG_DEVICES") && p && !strcmp(p, "none"));
}

/* On the driver double: a file it logs its counted events to (peer copies
 * among them), emptied; NULL on host devices. */
static const char *double_log(void) {
  if (!getenv("SCHEDRUN_DAG_DEVICES")) return NULL;
  const char *path = tu_write_temp(3, "double.log", "");
  setenv("SCHEDRUN_CUDA_DOUBLE_LOG", path, 1);
  return path;
}

static void diamond(void **state) {
  (void)state;
  const char *log = double_log();
  bool peer = peers_here();
  schedrun_t *s = open_dag();
  schedrun_program_t *ps[] = {tu_load(s, produce_yaml, "produce"), tu_load(s, twice_yaml, "twice"),
                              tu_load(s, square_yaml, "square"), tu_load(s, add_yaml, "add")};
  for (int rep = 0; rep < 3; rep++) {
    int n[4];
    schedrun_graph_t *g = diamond_graph(ps, rep, n);
    int a = n[0], b = n[1], c = n[2], d = n[3];
    schedrun_job_t ids[4];
    schedrun_error_t err = {0};
    if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
    schedrun_graph_free(&g);
    schedrun_job_result_t *ra = wait_ok(s, ids[a], SCHEDRUN_OK), *rb = wait_ok(s, ids[b], SCHEDRUN_OK),
                          *rc = wait_ok(s, ids[c], SCHEDRUN_OK), *rd = wait_ok(s, ids[d], SCHEDRUN_OK);
    const float *va = output(ra, "out", N), *vb = output(rb, "x", N), *vc = output(rc, "x", N),
                *vd = output(rd, "out", N);
    for (int i = 0; i < N; i++) {
      float x = (float)(i + 1 + rep);
      if (va[i] != x || vb[i] != 2 * x || vc[i] != x * x || vd[i] != 2 * x + x * x)
        fail_msg("rep %d, element %d: A %g B %g C %g D %g (want %g %g %g %g)", rep, i, va[i], vb[i], vc[i], vd[i], x,
                 2 * x, x * x, 2 * x + x * x);
    }
    const schedrun_job_info_t *ia = schedrun_job_result_info(ra), *ib = schedrun_job_result_info(rb),
                              *ic = schedrun_job_result_info(rc), *id = schedrun_job_result_info(rd);
    /* placement: B where pinned, C where its data is, D where one input is */
    assert_int_equal(ia->device, 0);
    assert_int_equal(ib->device, 1);
    assert_int_equal(ic->device, 0);
    assert_true(id->device == 0 || id->device == 1);
    /* hand-offs: A's buffer reaches C on device 0 without the host, B
     * straight from device 0's memory (host devices' arenas are peers); D
     * has one input on its device and one from the other. None goes through
     * the host; each peer hand-off moves its N floats across. */
    assert_int_equal(ia->handoffs_local + ia->handoffs_copied + ia->handoffs_peer, 0);
    assert_int_equal(ib->handoffs_local, 0);
    assert_int_equal(ib->handoffs_peer, peer ? 1 : 0);
    assert_int_equal(ib->handoffs_copied, peer ? 0 : 1);
    assert_int_equal(ic->handoffs_local, 1);
    assert_int_equal(ic->handoffs_copied + ic->handoffs_peer, 0);
    assert_int_equal(id->handoffs_local, 1);
    assert_int_equal(id->handoffs_peer, peer ? 1 : 0);
    assert_int_equal(id->handoffs_copied, peer ? 0 : 1);
    assert_int_equal(ib->bytes_peer, peer ? N * sizeof(float) : 0);
    assert_int_equal(id->bytes_peer, peer ? N * sizeof(float) : 0);
    assert_int_equal(ia->bytes_peer + ic->bytes_peer, 0);
    /* through the host: out of one device and into the other, on top of
     * the outputs read back */
    if (!peer) assert_true(ib->bytes_in >= N * sizeof(float) && ib->bytes_out >= 2 * N * sizeof(float));
    if (log) { /* the driver saw the copies it was asked for, over peer access or not at all */
      char *text = tu_slurp(log, NULL);
      assert_int_equal(tu_count(text, "memcpy-peer\n"), peer ? 2 * (rep + 1) : 0);
      assert_int_equal(tu_count(text, "memcpy-peer-staged"), 0);
      free(text);
    }
    schedrun_job_result_t *all[] = {ra, rb, rc, rd};
    for (int k = 0; k < 4; k++) schedrun_job_result_free(&all[k]);
  }
  for (int k = 0; k < 4; k++) schedrun_program_free(&ps[k]);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A fails its expectation: B, C and D complete with SCHEDRUN_EDEPEND, each
 * naming A; nothing of them ran. */
static void failure_ends_every_path(void **state) {
  (void)state;
  schedrun_t *s = open_dag();
  schedrun_program_t *ps[] = {tu_load(s, produce_bad_yaml, "bad"), tu_load(s, twice_yaml, "twice"),
                              tu_load(s, square_yaml, "square"), tu_load(s, add_yaml, "add")};
  schedrun_program_t *pa = ps[0], *pb = ps[1];
  int n[4];
  schedrun_graph_t *g = diamond_graph(ps, 0, n);
  int a = n[0], b = n[1], c = n[2], d = n[3];
  schedrun_job_t ids[4];
  schedrun_error_t err = {0};
  if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
  schedrun_graph_free(&g);
  schedrun_job_result_t *ra = wait_ok(s, ids[a], SCHEDRUN_EVERIFY);
  char named[64];
  snprintf(named, sizeof named, "job %llu ('produce-bad')", (unsigned long long)ids[a]);
  int nodes[] = {b, c, d};
  for (int k = 0; k < 3; k++) {
    schedrun_job_result_t *r = wait_ok(s, ids[nodes[k]], SCHEDRUN_EDEPEND);
    const char *why = schedrun_job_result_error(r);
    if (!strstr(why, named)) fail_msg("node %d's error does not name A (%s): %s", nodes[k], named, why);
    assert_int_equal(schedrun_job_result_info(r)->device, -1);
    assert_null(schedrun_job_result_output(r, "x", NULL));
    schedrun_job_result_free(&r);
  }
  schedrun_job_result_free(&ra);
  /* a plain job after a failed one fails at once, naming it */
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  schedrun_job_t bad, after;
  assert_int_equal(schedrun_submit(s, pa, NULL, &bad, NULL), SCHEDRUN_OK);
  o.after = &bad;
  o.nafter = 1;
  assert_int_equal(schedrun_submit(s, pb, &o, &after, NULL), SCHEDRUN_OK);
  schedrun_job_result_t *r = wait_ok(s, after, SCHEDRUN_EDEPEND);
  snprintf(named, sizeof named, "job %llu ('produce-bad')", (unsigned long long)bad);
  assert_non_null(strstr(schedrun_job_result_error(r), named));
  schedrun_job_result_free(&r);
  r = wait_ok(s, bad, SCHEDRUN_EVERIFY);
  schedrun_job_result_free(&r);
  for (int k = 0; k < 4; k++) schedrun_program_free(&ps[k]);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A producer whose kernel faults (its device is lost): the jobs after it
 * complete with SCHEDRUN_EDEPEND naming the fault, nothing is handed on from
 * the lost device, and a graph submitted afterwards runs on the other one. */
static const char faulting_yaml[] = KERNEL_PROGRAM(
    "faulting", "ptr", "float *out) { if (threadIdx.x == 0) *(volatile int *)0 = 1; out[threadIdx.x] = 1; }",
    "  out: {type: f32, count: 64}\n", "out", "");

static void faulting_producer(void **state) {
  (void)state;
  if (getenv("SCHEDRUN_CUDA_DOUBLE_DEVICES")) skip(); /* on the double a fault ends the process */
  schedrun_t *s = open_dag();
  schedrun_program_t *pf = tu_load(s, faulting_yaml, "faulting"), *pb = tu_load(s, twice_yaml, "twice"),
                     *pa = tu_load(s, produce_yaml, "produce");
  schedrun_graph_t *g;
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  int f = add_job(g, pf, 0, 0), b = add_job(g, pb, -1, 0), c = add_job(g, pb, 1, 0);
  handoff(g, f, "out", b, "x");
  handoff(g, f, "out", c, "x");
  schedrun_job_t ids[3];
  assert_int_equal(schedrun_graph_submit(s, g, ids, NULL), SCHEDRUN_OK);
  schedrun_graph_free(&g);
  schedrun_job_result_t *rf = wait_ok(s, ids[f], SCHEDRUN_EFAULT);
  char named[64];
  snprintf(named, sizeof named, "runs after job %llu ('faulting'), which failed", (unsigned long long)ids[f]);
  for (int k = 1; k < 3; k++) {
    schedrun_job_result_t *r = wait_ok(s, ids[k], SCHEDRUN_EDEPEND);
    if (!strstr(schedrun_job_result_error(r), named) || !strstr(schedrun_job_result_error(r), "SIGSEGV"))
      fail_msg("node %d: %s", k, schedrun_job_result_error(r));
    schedrun_job_result_free(&r);
  }
  schedrun_job_result_free(&rf);
  assert_non_null(schedrun_device_lost(s, 0));
  /* the same graph shape from a good producer: everything on device 1 */
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  int a = add_job(g, pa, -1, 0);
  b = add_job(g, pb, -1, 0);
  handoff(g, a, "out", b, "x");
  assert_int_equal(schedrun_graph_submit(s, g, ids, NULL), SCHEDRUN_OK);
  schedrun_graph_free(&g);
  schedrun_job_result_t *ra = wait_ok(s, ids[a], SCHEDRUN_OK), *rb = wait_ok(s, ids[b], SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(ra)->device, 1);
  assert_int_equal(schedrun_job_result_info(rb)->device, 1);
  assert_int_equal(schedrun_job_result_info(rb)->handoffs_local, 1);
  const float *vb = output(rb, "x", N);
  for (int i = 0; i < N; i++) assert_true(vb[i] == 2.0f * (float)(i + 1));
  schedrun_job_result_free(&ra);
  schedrun_job_result_free(&rb);
  schedrun_program_t *ps[] = {pf, pb, pa};
  for (int k = 0; k < 3; k++) schedrun_program_free(&ps[k]);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* ---- refusals ---- */

static void cycles_and_unknowns_are_refused(void **state) {
  (void)state;
  schedrun_t *s = open_dag();
  schedrun_program_t *pa = tu_load(s, produce_yaml, "produce"), *pb = tu_load(s, twice_yaml, "twice"),
                     *pd = tu_load(s, add_yaml, "add"), *ps1 = tu_load(s, spread_yaml, "spread");
  schedrun_graph_t *g;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  int a = add_job(g, pa, -1, 0), b = add_job(g, pb, -1, 0), c = add_job(g, pb, -1, 0);
  handoff(g, a, "out", b, "x");
  handoff(g, b, "x", c, "x");
  assert_int_equal(schedrun_graph_after(g, a, c, &err), SCHEDRUN_OK); /* a -> b -> c -> a */
  schedrun_job_t ids[3];
  assert_int_equal(schedrun_graph_submit(s, g, ids, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "cycle"));
  assert_non_null(strstr(err.message, "node 0 (a job of 'produce')"));
  assert_non_null(strstr(err.message, "node 2 (a job of 'twice')"));
  for (int k = 0; k < 3; k++) assert_int_equal(ids[k], 0);
  schedrun_error_clear(&err);
  /* unknown nodes, buffers, sizes, a buffer handed twice, itself */
  assert_int_equal(schedrun_graph_after(g, 7, a, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "node 7; the graph has 3"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_graph_after(g, a, a, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_graph_handoff(g, a, "nope", b, "x", &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "node 0 (a job of 'produce') has no buffer 'nope'"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_graph_handoff(g, a, "out", b, "x", &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "already handed to it by node 0"));
  schedrun_error_clear(&err);
  int sp = add_job(g, ps1, -1, 0);
  assert_int_equal(schedrun_graph_handoff(g, a, "out", sp, "s", &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "has 256 bytes"));
  schedrun_error_clear(&err);
  schedrun_graph_free(&g);
  /* a graph whose job names a device that is not there */
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  add_job(g, pa, 5, 0);
  assert_int_equal(schedrun_graph_submit(s, g, ids, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "node 0: no device 5"));
  schedrun_error_clear(&err);
  schedrun_graph_free(&g);
  /* plain submits after unknown jobs, or jobs already handed over */
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  schedrun_job_t unknown = 999999, done, j;
  o.after = &unknown;
  o.nafter = 1;
  assert_int_equal(schedrun_submit(s, pa, &o, &j, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "no job 999999 was submitted"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_submit(s, pa, NULL, &done, NULL), SCHEDRUN_OK);
  schedrun_job_result_t *r = wait_ok(s, done, SCHEDRUN_OK);
  schedrun_job_result_free(&r);
  o.after = &done;
  assert_int_equal(schedrun_submit(s, pa, &o, &j, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "already handed over"));
  schedrun_error_clear(&err);
  schedrun_stats_t st;
  assert_int_equal(schedrun_get_stats(s, &st, NULL), SCHEDRUN_OK);
  assert_int_equal(st.in_flight, 0); /* nothing refused is left behind */
  schedrun_program_t *ps[] = {pa, pb, pd, ps1};
  for (int k = 0; k < 4; k++) schedrun_program_free(&ps[k]);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

static int nothing_task(schedrun_host_task_t *t, void *user) {
  (void)t;
  (void)user;
  return 0;
}

/* Every wrong use of the graph calls: SCHEDRUN_EINVAL and a sentence that
 * names the call and what is wrong; nothing is submitted. */
static void graph_misuse_is_named(void **state) {
  (void)state;
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host";
  o.max_inflight = 2;
  schedrun_t *s = tu_open(&o);
  schedrun_program_t *pa = tu_load(s, produce_yaml, "produce"), *pb = tu_load(s, twice_yaml, "twice");
  schedrun_graph_t *g;
  schedrun_error_t err = {0};
  int node = -1;
  schedrun_job_t ids[4];
#define MISUSE(call, text)                                                                                 \
  do {                                                                                                     \
    int rc_ = (call);                                                                                      \
    if (rc_ != SCHEDRUN_EINVAL || !err.message || !strstr(err.message, text))                             \
      fail_msg("%s: status %d, message '%s'; wanted '%s'", #call, rc_, err.message ? err.message : "", text); \
    schedrun_error_clear(&err);                                                                            \
  } while (0)
  MISUSE(schedrun_graph_new(NULL, &err), "schedrun_graph_new: out is NULL");
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  MISUSE(schedrun_graph_submit(s, g, ids, &err), "schedrun_graph_submit: the graph has no nodes");
  MISUSE(schedrun_graph_job(g, NULL, NULL, &node, &err), "schedrun_graph_job: the program is NULL");
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.nafter = 1;
  MISUSE(schedrun_graph_job(g, pa, &jo, &node, &err), "schedrun_graph_job: after is NULL");
  MISUSE(schedrun_graph_host(g, NULL, nothing_task, NULL, &node, &err), "schedrun_graph_host: name is NULL");
  MISUSE(schedrun_graph_host(g, "h", NULL, NULL, &node, &err), "schedrun_graph_host: fn is NULL");
  schedrun_job_options_init(&jo);
  jo.record_only = 1;
  int a = -1, b = -1, c = -1, d = -1;
  assert_int_equal(schedrun_graph_job(g, pa, &jo, &a, NULL), SCHEDRUN_OK);
  schedrun_input_t in = {"x", (float[N]){0}, N * sizeof(float)};
  schedrun_job_options_init(&jo);
  jo.inputs = &in;
  jo.ninputs = 1;
  assert_int_equal(schedrun_graph_job(g, pb, &jo, &b, NULL), SCHEDRUN_OK);
  assert_int_equal(schedrun_graph_job(g, pa, NULL, &c, NULL), SCHEDRUN_OK);
  assert_int_equal(schedrun_graph_job(g, pb, NULL, &d, NULL), SCHEDRUN_OK);
  MISUSE(schedrun_graph_handoff(g, a, "out", d, "x", &err), "node 0 (a job of 'produce') is record_only: it runs nothing to hand on");
  MISUSE(schedrun_graph_handoff(g, c, "out", b, "x", &err), "node 1 (a job of 'twice')'s buffer 'x' is one of its inputs already");
  MISUSE(schedrun_graph_handoff(g, c, NULL, b, "x", &err), "schedrun_graph_handoff: from_buffer is NULL");
  MISUSE(schedrun_graph_submit(s, g, NULL, &err), "schedrun_graph_submit: ids is NULL");
  MISUSE(schedrun_graph_submit(s, g, ids, &err), "4 nodes; at most max_inflight (2) jobs can be in flight");
  MISUSE(schedrun_graph_write_dot(g, NULL, &err), "schedrun_graph_write_dot: path is NULL");
  schedrun_graph_t *none = NULL;
  MISUSE(schedrun_graph_load_file(NULL, &none, &err), "schedrun_graph_load_file: path is NULL");
#undef MISUSE
  assert_int_equal(schedrun_graph_load_file("/no/such/stages.yaml", &none, &err), SCHEDRUN_ECONFIG);
  assert_null(none);
  assert_non_null(strstr(err.message, "/no/such/stages.yaml"));
  schedrun_error_clear(&err);
  assert_true(schedrun_config_is_graph("/no/such/stages.yaml", NULL) < 0);
  schedrun_stats_t st;
  assert_int_equal(schedrun_get_stats(s, &st, NULL), SCHEDRUN_OK);
  assert_int_equal(st.submitted, 0); /* nothing was submitted */
  schedrun_graph_free(&g);
  schedrun_graph_free(&g); /* NULL is fine */
  schedrun_program_free(&pa);
  schedrun_program_free(&pb);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* ---- host tasks ---- */

/* sums buffer x into a new buffer sum[0]; user non-NULL: fails instead */
static int sum_task(schedrun_host_task_t *t, void *user) {
  if (user) return schedrun_host_task_fail(t, "told to fail");
  size_t bytes = 0;
  float *x = schedrun_host_task_buffer(t, "x", &bytes);
  if (!x || bytes != N * sizeof(float)) return schedrun_host_task_fail(t, "no x");
  float *sum = schedrun_host_task_output(t, "sum", sizeof(float));
  if (!sum) return SCHEDRUN_ENOMEM;
  for (int i = 0; i < N; i++) sum[0] += x[i];
  x[0] = -1; /* its own copy: the producer's result keeps its values */
  return 0;
}

static void host_tasks_between_jobs(void **state) {
  (void)state;
  schedrun_t *s = open_dag();
  schedrun_program_t *pa = tu_load(s, produce_yaml, "produce"), *pe = tu_load(s, spread_yaml, "spread");
  for (int failing = 0; failing < 2; failing++)
    for (int dev = 0; dev < 2; dev++) {
      schedrun_graph_t *g;
      assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
      int a = add_job(g, pa, dev, 0), h = -1, e = add_job(g, pe, -1, 0);
      schedrun_error_t err = {0};
      assert_int_equal(schedrun_graph_host(g, "sum", sum_task, failing ? (void *)1 : NULL, &h, &err), SCHEDRUN_OK);
      handoff(g, a, "out", h, "x");
      handoff(g, h, "sum", e, "s");
      schedrun_job_t ids[3];
      if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
      schedrun_graph_free(&g);
      schedrun_job_result_t *ra = wait_ok(s, ids[a], SCHEDRUN_OK);
      schedrun_job_result_t *rh = wait_ok(s, ids[h], failing ? SCHEDRUN_EHOST : SCHEDRUN_OK);
      schedrun_job_result_t *re = wait_ok(s, ids[e], failing ? SCHEDRUN_EDEPEND : SCHEDRUN_OK);
      const float *va = output(ra, "out", N);
      for (int i = 0; i < N; i++) assert_true(va[i] == (float)(i + 1));
      if (failing) {
        assert_non_null(strstr(schedrun_job_result_error(rh), "told to fail"));
        assert_non_null(strstr(schedrun_job_result_error(re), "('sum')"));
      } else {
        const float *sum = output(rh, "sum", 1), *hx = output(rh, "x", N), *y = output(re, "y", N);
        assert_true(sum[0] == 2080.0f); /* 1 + 2 + ... + 64 */
        assert_true(hx[0] == -1.0f && hx[1] == 2.0f);
        for (int i = 0; i < N; i++)
          if (y[i] != 2080.0f + (float)i) fail_msg("y[%d] = %g, not %g", i, y[i], 2080.0 + i);
        assert_int_equal(schedrun_job_result_info(rh)->device, -1);
        assert_int_equal(schedrun_job_result_info(re)->handoffs_copied, 1);
        assert_int_equal(schedrun_job_result_info(re)->handoffs_local, 0);
      }
      schedrun_job_result_t *all[] = {ra, rh, re};
      for (int k = 0; k < 3; k++) schedrun_job_result_free(&all[k]);
    }
  schedrun_program_free(&pa);
  schedrun_program_free(&pe);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A gate: returns once *user is set (the caller's thread sets it). */
static int gate_task(schedrun_host_task_t *t, void *user) {
  (void)t;
  while (!atomic_load((_Atomic int *)user)) sched_yield();
  return 0;
}

/* Programs freed while jobs of theirs still wait for the jobs before them:
 * the jobs run all the same, and the programs go once they have. */
static void programs_freed_while_jobs_wait(void **state) {
  (void)state;
  schedrun_t *s = open_dag();
  schedrun_program_t *pa = tu_load(s, produce_yaml, "produce"), *pb = tu_load(s, twice_yaml, "twice");
  _Atomic int open_gate = 0;
  schedrun_graph_t *g;
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  int gate = -1;
  assert_int_equal(schedrun_graph_host(g, "gate", gate_task, &open_gate, &gate, NULL), SCHEDRUN_OK);
  int a = add_job(g, pa, 0, 0), b = add_job(g, pb, -1, 0);
  assert_int_equal(schedrun_graph_after(g, a, gate, NULL), SCHEDRUN_OK);
  handoff(g, a, "out", b, "x");
  schedrun_job_t ids[3];
  assert_int_equal(schedrun_graph_submit(s, g, ids, NULL), SCHEDRUN_OK);
  schedrun_graph_free(&g);
  schedrun_program_free(&pa); /* a and b are held behind the gate */
  schedrun_program_free(&pb);
  atomic_store(&open_gate, 1);
  schedrun_job_result_t *rg = wait_ok(s, ids[gate], SCHEDRUN_OK), *ra = wait_ok(s, ids[a], SCHEDRUN_OK),
                        *rb = wait_ok(s, ids[b], SCHEDRUN_OK);
  const float *vb = output(rb, "x", N);
  for (int i = 0; i < N; i++) assert_true(vb[i] == 2.0f * (float)(i + 1));
  schedrun_job_result_free(&rg);
  schedrun_job_result_free(&ra);
  schedrun_job_result_free(&rb);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* ---- host steps inside a program ---- */

typedef struct step_seen {
  _Atomic int ok, bad, calls;
  int fail; /* 1: the step fails */
} step_seen;

/* Between the launches: x must hold i + $job (the first launch's results);
 * it becomes ten times that, which the second launch reads. */
static int scale_step(schedrun_host_task_t *t, void *user) {
  step_seen *seen = user;
  atomic_fetch_add(&seen->calls, 1);
  if (seen->fail) return schedrun_host_task_fail(t, "told to fail");
  size_t bytes = 0, jbytes = 0;
  float *x = schedrun_host_task_buffer(t, "x", &bytes);
  int32_t *job = schedrun_host_task_buffer(t, "job", &jbytes);
  if (!x || bytes != N * sizeof(float) || !job || jbytes != sizeof(int32_t)) return schedrun_host_task_fail(t, "no x");
  bool ok = true;
  for (int i = 0; i < N; i++) {
    ok = ok && x[i] == (float)(i + job[0]);
    x[i] *= 10.0f;
  }
  atomic_fetch_add(ok ? &seen->ok : &seen->bad, 1);
  assert_null(schedrun_host_task_output(t, "new", 4)); /* a program's buffers only */
  return 0;
}

static schedrun_program_t *host_step_program(schedrun_t *s, step_seen *seen) {
  schedrun_builder_t *b;
  assert_int_equal(schedrun_builder_new(&b, "host-step", NULL), SCHEDRUN_OK);
  schedrun_builder_runs(b, 0, 2, 0);
  schedrun_builder_kernel(b, "fill", "ptr, ptr, i32",
                          "extern \"C\" __global__ void fill(float *x, int *job, int j) {\n"
                          "  x[threadIdx.x] = threadIdx.x + j; job[0] = j; }\n",
                          NULL);
  schedrun_builder_kernel(b, "plus1", "ptr, ptr",
                          "extern \"C\" __global__ void plus1(const float *x, float *z) {\n"
                          "  z[threadIdx.x] = x[threadIdx.x] + 1; }\n",
                          NULL);
  schedrun_builder_buffer(b, "x", "f32", N, NULL, 0, 0);
  schedrun_builder_buffer(b, "z", "f32", N, NULL, 0, 1);
  schedrun_builder_buffer(b, "job", "i32", 1, NULL, 0, 0);
  const unsigned grid[3] = {1, 1, 1}, block[3] = {N, 1, 1};
  const char *fill_args[] = {"x", "job", "$job"}, *plus_args[] = {"x", "z"};
  schedrun_builder_launch(b, "fill", grid, block, fill_args, 3);
  schedrun_builder_host(b, "scale", scale_step, seen);
  schedrun_builder_launch(b, "plus1", grid, block, plus_args, 2);
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  if (schedrun_builder_finish(b, &p, &err)) fail_msg("%s", err.message);
  schedrun_builder_free(&b);
  (void)s;
  return p;
}

static void host_step_between_launches(void **state) {
  (void)state;
  schedrun_t *s = open_dag();
  step_seen seen = {0};
  schedrun_program_t *p = host_step_program(s, &seen);
  enum { JOBS = 8 };
  schedrun_job_t ids[JOBS];
  for (int j = 0; j < JOBS; j++) {
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.job = j;
    o.run = j;
    o.device = j % 2;
    o.keep_outputs = 1;
    assert_int_equal(schedrun_submit(s, p, &o, &ids[j], NULL), SCHEDRUN_OK);
  }
  for (int j = 0; j < JOBS; j++) {
    schedrun_job_result_t *r = wait_ok(s, ids[j], SCHEDRUN_OK);
    const float *z = output(r, "z", N);
    for (int i = 0; i < N; i++)
      if (z[i] != 10.0f * (float)(i + j) + 1.0f) fail_msg("job %d: z[%d] = %g, not %g", j, i, z[i], 10.0 * (i + j) + 1);
    assert_int_equal(schedrun_job_result_info(r)->device, j % 2);
    schedrun_job_result_free(&r);
  }
  assert_int_equal(atomic_load(&seen.calls), JOBS);
  assert_int_equal(atomic_load(&seen.ok), JOBS);
  assert_int_equal(atomic_load(&seen.bad), 0);
  /* a step that fails fails its job, naming the step; the next job runs */
  seen.fail = 1;
  schedrun_job_t id;
  assert_int_equal(schedrun_submit(s, p, NULL, &id, NULL), SCHEDRUN_OK);
  schedrun_job_result_t *r = wait_ok(s, id, SCHEDRUN_EHOST);
  assert_non_null(strstr(schedrun_job_result_error(r), "told to fail"));
  assert_non_null(strstr(schedrun_job_result_error(r), "host step 'scale' (step 2 of 'host-step')"));
  schedrun_job_result_free(&r);
  seen.fail = 0;
  assert_int_equal(schedrun_submit(s, p, NULL, &id, NULL), SCHEDRUN_OK);
  r = wait_ok(s, id, SCHEDRUN_OK);
  schedrun_job_result_free(&r);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A config cannot name a C function; a host step stands at the top level. */
static void host_steps_where_they_cannot_be(void **state) {
  (void)state;
  schedrun_t *s = open_dag();
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  static const char yaml[] = "version: 1\nname: h\nbuffers:\n  x: {type: f32, count: 4}\n"
                             "program:\n  - host: {name: a, task: 0}\n";
  assert_int_equal(schedrun_program_load_string(s, yaml, "h.yaml", &p, &err), SCHEDRUN_ECONFIG);
  assert_non_null(strstr(err.message, "h.yaml:6:"));
  assert_non_null(strstr(err.message, "host steps are for programs made with the builder"));
  schedrun_error_clear(&err);
  schedrun_builder_t *b;
  assert_int_equal(schedrun_builder_new(&b, "in-loop", NULL), SCHEDRUN_OK);
  schedrun_builder_buffer(b, "x", "f32", 4, NULL, 0, 0);
  schedrun_builder_loop(b, 2);
  schedrun_builder_fill(b, "x", "1", NULL, NULL);
  step_seen seen = {0};
  schedrun_builder_host(b, "inner", scale_step, &seen);
  schedrun_builder_end(b);
  assert_int_equal(schedrun_builder_finish(b, &p, &err), SCHEDRUN_ECONFIG);
  assert_non_null(strstr(err.message, "step 1.2 (host step 'inner')"));
  assert_non_null(strstr(err.message, "not inside a loop"));
  schedrun_error_clear(&err);
  schedrun_builder_free(&b);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* ---- chains ---- */

#define CHAINS 1000
#define CHAIN 10

/* 10,000 jobs in chains of 10, all in flight at once: half hand their buffer
 * down the chain (a graph each: every job adds 1, so job k finds k + 1), half
 * only run after the one before (plain submits with `after`). Every job is
 * handed over exactly once, verified, and after the job before it. */
static void chains_complete_exactly_once(void **state) {
  (void)state;
  schedrun_t *s = open_dag();
  schedrun_program_t *pi = tu_load(s, incr_yaml, "incr"), *pa = tu_load(s, produce_yaml, "produce");
  schedrun_job_t *ids = calloc(CHAINS * CHAIN, sizeof *ids);
  unsigned char *seen = calloc(CHAINS * CHAIN, 1);
  int *next = calloc(CHAINS, sizeof *next);
  assert_true(ids && seen && next);
  schedrun_error_t err = {0};
  for (int c = 0; c < CHAINS; c++) {
    if (c % 2 == 0) {
      schedrun_graph_t *g;
      assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
      for (int k = 0; k < CHAIN; k++) {
        int node = add_job(g, pi, -1, k);
        if (k) handoff(g, node - 1, "x", node, "x");
      }
      if (schedrun_graph_submit(s, g, &ids[c * CHAIN], &err)) fail_msg("chain %d: %s", c, err.message);
      schedrun_graph_free(&g);
    } else {
      for (int k = 0; k < CHAIN; k++) {
        schedrun_job_options_t o;
        schedrun_job_options_init(&o);
        o.run = c;
        o.job = k;
        if (k) {
          o.after = &ids[c * CHAIN + k - 1];
          o.nafter = 1;
        }
        if (schedrun_submit(s, pa, &o, &ids[c * CHAIN + k], &err)) fail_msg("chain %d job %d: %s", c, k, err.message);
      }
    }
  }
  for (int n = 0; n < CHAINS * CHAIN; n++) {
    schedrun_job_t id;
    schedrun_job_result_t *r;
    if (schedrun_wait_any(s, TU_PATIENCE_MS, &id, &r, &err)) fail_msg("after %d results: %s", n, err.message);
    /* ids of one chain are consecutive: found from the first's */
    int at = -1;
    for (int c = 0; c < CHAINS && at < 0; c++)
      if (id >= ids[c * CHAIN] && id < ids[c * CHAIN] + CHAIN) at = c * CHAIN + (int)(id - ids[c * CHAIN]);
    if (at < 0 || ids[at] != id) fail_msg("job %llu is none of the chains'", (unsigned long long)id);
    if (seen[at]++) fail_msg("job %llu handed over twice", (unsigned long long)id);
    const schedrun_job_info_t *in = schedrun_job_result_info(r);
    if (in->status != SCHEDRUN_OK || !in->verified)
      fail_msg("chain %d job %d: status %d: %s", at / CHAIN, at % CHAIN, in->status, schedrun_job_result_error(r));
    int c = at / CHAIN, k = at % CHAIN;
    if (next[c] != k) fail_msg("chain %d: job %d completed before job %d", c, k, next[c]);
    next[c]++;
    if (c % 2 == 0 && k > 0 && in->handoffs_local + in->handoffs_copied != 1)
      fail_msg("chain %d job %d: %u hand-offs", c, k, in->handoffs_local + in->handoffs_copied);
    schedrun_job_result_free(&r);
  }
  schedrun_job_t id;
  schedrun_job_result_t *r;
  assert_int_equal(schedrun_wait_any(s, 0, &id, &r, &err), SCHEDRUN_EINVAL); /* nothing more */
  schedrun_error_clear(&err);
  for (int c = 0; c < CHAINS; c++) assert_int_equal(next[c], CHAIN);
  free(ids);
  free(seen);
  free(next);
  schedrun_program_free(&pi);
  schedrun_program_free(&pa);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A shutdown while chains are half done: every job still completes exactly
 * once (run, cancelled, or not run because the one before it was not), and
 * a close with jobs still held loses nothing (the sanitizers watch). */
static void shutdown_cuts_graphs_short(void **state) {
  (void)state;
  for (int close_only = 0; close_only < 2; close_only++) {
    schedrun_t *s = open_dag();
    schedrun_program_t *pi = tu_load(s, incr_yaml, "incr");
    enum { SCHAINS = 200 };
    schedrun_job_t ids[SCHAINS * CHAIN];
    schedrun_error_t err = {0};
    for (int c = 0; c < SCHAINS; c++) {
      schedrun_graph_t *g;
      assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
      for (int k = 0; k < CHAIN; k++) {
        int node = add_job(g, pi, -1, k);
        if (k) handoff(g, node - 1, "x", node, "x");
      }
      if (schedrun_graph_submit(s, g, &ids[c * CHAIN], &err)) fail_msg("%s", err.message);
      schedrun_graph_free(&g);
    }
    if (close_only) {
      schedrun_program_free(&pi);
      assert_int_equal(schedrun_close(&s), SCHEDRUN_OK); /* held jobs, parcels: all freed */
      continue;
    }
    assert_int_equal(schedrun_shutdown(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
    int ran = 0, cut = 0;
    bool chain_cut = false;
    for (int i = 0; i < SCHAINS * CHAIN; i++) {
      if (i % CHAIN == 0) chain_cut = false;
      schedrun_job_result_t *r = NULL;
      if (schedrun_wait(s, ids[i], 0, &r, &err)) fail_msg("job %d of %d: %s", i, SCHAINS * CHAIN, err.message);
      int st = schedrun_job_result_info(r)->status;
      if (st == SCHEDRUN_OK) ran++;
      else if (st == SCHEDRUN_ECLOSED || st == SCHEDRUN_EDEPEND) cut++;
      else fail_msg("job %d: status %d: %s", i, st, schedrun_job_result_error(r));
      /* within a chain nothing runs after a job that did not */
      if (st == SCHEDRUN_OK && chain_cut) fail_msg("chain %d: job %d ran after one that did not", i / CHAIN, i % CHAIN);
      if (st != SCHEDRUN_OK) chain_cut = true;
      schedrun_job_result_free(&r);
    }
    assert_int_equal(ran + cut, SCHAINS * CHAIN);
    print_message("  shutdown: %d jobs ran, %d were cut short\n", ran, cut);
    schedrun_program_free(&pi);
    assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  }
}

/* A lone job's SUBMIT and EXECUTED run on the caller's thread (the
 * scheduler's guest, lib/api_guest.c), and schedrun_submit_wait's job too, on
 * host devices; on CUDA devices never, since the backend's calls would leave
 * a context current on the caller's thread. Either way each job's output is
 * right. */
static void callers_run_the_scheduler_where_it_is_safe(void **st) {
  (void)st;
  schedrun_t *s = open_dag();
  bool cuda = strncmp(schedrun_device_name(s, 0), "cuda", 4) == 0;
  schedrun_program_t *p = tu_load(s, spread_yaml, "spread.yaml");
  uint64_t before = actor_guest_rounds(s->scheduler);
  for (int i = 0; i < 60; i++) {
    float seed = (float)i;
    schedrun_job_options_t jo;
    schedrun_job_options_init(&jo);
    jo.keep_outputs = 1;
    jo.device = i % 2;
    schedrun_input_t in = {"s", &seed, sizeof seed};
    jo.inputs = &in;
    jo.ninputs = 1;
    schedrun_job_t id;
    schedrun_error_t err = {0};
    schedrun_job_result_t *r = NULL;
    if (i % 3 == 2) { /* run on this thread where it can be */
      assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
      assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
    } else {
      assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
      r = wait_ok(s, id, SCHEDRUN_OK);
    }
    assert_int_equal(schedrun_job_result_info(r)->device, i % 2);
    const float *y = output(r, "y", 64);
    for (int k = 0; k < 64; k++)
      if (y[k] != seed + (float)k) fail_msg("job %d, y[%d] = %g, not %g", i, k, y[k], seed + (float)k);
    schedrun_job_result_free(&r);
  }
  uint64_t rounds = actor_guest_rounds(s->scheduler) - before;
  uint64_t ran_here = actor_guest_rounds(s->execute[0]) + actor_guest_rounds(s->execute[1]);
  if (cuda) {
    assert_int_equal(rounds, 0);
    assert_int_equal(ran_here, 0);
  } else if (rounds < 30 || ran_here < 10) {
    fail_msg("60 lone jobs: the caller ran the scheduler's queue %llu times and %llu jobs itself",
             (unsigned long long)rounds, (unsigned long long)ran_here);
  }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A host task before eight jobs pinned to device 0: its completion, on the
 * completion thread, releases all eight at once; they are placed there in
 * one round and, no device having work, run there too (lib/api_guest.c,
 * api_guest_unhold). Every job's x is right; on host devices the execute
 * actors' queues were taken by guests (on the CUDA double, never). */
static void a_fan_out_runs_where_it_is_released(void **st) {
  (void)st;
  schedrun_t *s = open_dag_spin(-1);
  bool cuda = strncmp(schedrun_device_name(s, 0), "cuda", 4) == 0;
  schedrun_program_t *p = tu_load(s, incr_yaml, "incr.yaml");
  uint64_t ran_here = 0;
  enum { FAN = 8 };
  for (int round = 0; round < 3; round++) {
    wait_turns_free(s);
    uint64_t before = actor_guest_rounds(s->execute[0]) + actor_guest_rounds(s->execute[1]);
    schedrun_graph_t *g;
    schedrun_error_t err = {0};
    assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
    int h = -1;
    assert_int_equal(schedrun_graph_host(g, "start", nothing_task, NULL, &h, &err), SCHEDRUN_OK);
    for (int k = 0; k < FAN; k++)
      assert_int_equal(schedrun_graph_after(g, add_job(g, p, 0, 0), h, &err), SCHEDRUN_OK);
    schedrun_job_t ids[1 + FAN];
    if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
    schedrun_graph_free(&g);
    schedrun_job_result_t *hr = wait_ok(s, ids[0], SCHEDRUN_OK);
    schedrun_job_result_free(&hr);
    for (int k = 1; k <= FAN; k++) {
      schedrun_job_result_t *r = wait_ok(s, ids[k], SCHEDRUN_OK);
      assert_int_equal(schedrun_job_result_info(r)->device, 0);
      const float *x = output(r, "x", 64);
      for (int i = 0; i < 64; i++)
        if (x[i] != 1.0f) fail_msg("round %d, job %d: x[%d] = %g, not 1", round, k, i, x[i]);
      schedrun_job_result_free(&r);
    }
    ran_here += actor_guest_rounds(s->execute[0]) + actor_guest_rounds(s->execute[1]) - before;
  }
  if (cuda) assert_int_equal(ran_here, 0);
  else if (ran_here == 0) fail_msg("3 fan-outs of %d: none ran on the thread that released them", FAN);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A node whose options cannot be submitted is named in the error, and
 * nothing of the graph is submitted. */
static void graph_submit_names_the_node(void **st) {
  (void)st;
  schedrun_t *s = open_dag();
  schedrun_program_t *p = tu_load(s, incr_yaml, "incr.yaml");
  schedrun_graph_t *g;
  assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
  int a = add_job(g, p, 0, 0), b = add_job(g, p, 9, 1);
  handoff(g, a, "x", b, "x");
  schedrun_stats_t before, after;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_get_stats(s, &before, &err), SCHEDRUN_OK);
  schedrun_job_t ids[2];
  assert_int_equal(schedrun_graph_submit(s, g, ids, &err), SCHEDRUN_EINVAL);
  if (!err.message || !strstr(err.message, "schedrun_graph_submit: node 1: no device 9"))
    fail_msg("'%s' does not name node 1", err.message ? err.message : "");
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_get_stats(s, &after, &err), SCHEDRUN_OK);
  assert_true(after.submitted == before.submitted);
  schedrun_graph_free(&g);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* A chain of jobs handing x on, x[i] += 1 each: every step's result is
 * right, element by element, and on host devices the thread that files a
 * step's completion runs the next step itself (lib/api_deps.c, deps_send)
 * instead of waking the device's thread for it: over three chains of 100,
 * the execute actors' queues were taken by guests (on the CUDA double,
 * never). */
static void a_chain_runs_where_its_steps_complete(void **st) {
  (void)st;
  schedrun_t *s = open_dag_spin(-1);
  bool cuda = strncmp(schedrun_device_name(s, 0), "cuda", 4) == 0;
  schedrun_program_t *p = tu_load(s, incr_yaml, "incr.yaml");
  uint64_t ran_here = 0;
  enum { STEPS = 100 };
  for (int chain = 0; chain < 3; chain++) {
    wait_turns_free(s);
    uint64_t before = actor_guest_rounds(s->execute[0]) + actor_guest_rounds(s->execute[1]);
    schedrun_graph_t *g;
    assert_int_equal(schedrun_graph_new(&g, NULL), SCHEDRUN_OK);
    int n[STEPS];
    for (int k = 0; k < STEPS; k++) {
      n[k] = add_job(g, p, k ? -1 : chain % 2, k);
      if (k) handoff(g, n[k - 1], "x", n[k], "x");
    }
    schedrun_job_t ids[STEPS];
    schedrun_error_t err = {0};
    if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
    schedrun_graph_free(&g);
    for (int k = 0; k < STEPS; k++) {
      schedrun_job_result_t *r = wait_ok(s, ids[k], SCHEDRUN_OK);
      assert_int_equal(schedrun_job_result_info(r)->device, chain % 2); /* where its x is */
      const float *x = output(r, "x", 64);
      for (int i = 0; i < 64; i++)
        if (x[i] != (float)(k + 1)) fail_msg("chain %d, step %d: x[%d] = %g, not %d", chain, k, i, x[i], k + 1);
      schedrun_job_result_free(&r);
    }
    ran_here += actor_guest_rounds(s->execute[0]) + actor_guest_rounds(s->execute[1]) - before;
  }
  if (cuda) assert_int_equal(ran_here, 0);
  else if (ran_here == 0) fail_msg("3 chains of %d: no step ran on the thread that released it", STEPS);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* 10,000 host tasks, each after the 50 before it (half a million edges):
 * each runs once, and only after all 50 (graph submission is linear in
 * nodes and edges; bench/dag_bench.c times it). */
#define WIDE 10000
#define WIDE_BEFORE 50
static _Atomic int wide_runs[WIDE], wide_early;

static int wide_task(schedrun_host_task_t *t, void *user) {
  (void)t;
  int k = (int)(intptr_t)user;
  for (int b = k - WIDE_BEFORE < 0 ? 0 : k - WIDE_BEFORE; b < k; b++)
    if (!atomic_load(&wide_runs[b])) atomic_fetch_add(&wide_early, 1);
  atomic_fetch_add(&wide_runs[k], 1);
  return 0;
}

static void wide_graph_in_order(void **state) {
  (void)state;
  schedrun_t *s = open_dag();
  schedrun_graph_t *g;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_graph_new(&g, &err), SCHEDRUN_OK);
  for (int k = 0; k < WIDE; k++) {
    int node;
    assert_int_equal(schedrun_graph_host(g, "wide", wide_task, (void *)(intptr_t)k, &node, &err), SCHEDRUN_OK);
    assert_int_equal(node, k);
    for (int b = k - WIDE_BEFORE < 0 ? 0 : k - WIDE_BEFORE; b < k; b++)
      assert_int_equal(schedrun_graph_after(g, k, b, &err), SCHEDRUN_OK);
  }
  /* a cycle through the far end is found, and named */
  assert_int_equal(schedrun_graph_after(g, 0, WIDE - 1, &err), SCHEDRUN_OK);
  schedrun_job_t *ids = calloc(WIDE, sizeof *ids);
  assert_int_equal(schedrun_graph_submit(s, g, ids, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "cycle"));
  schedrun_error_clear(&err);
  schedrun_graph_free(&g);
  assert_int_equal(schedrun_graph_new(&g, &err), SCHEDRUN_OK);
  for (int k = 0; k < WIDE; k++) {
    int node;
    assert_int_equal(schedrun_graph_host(g, "wide", wide_task, (void *)(intptr_t)k, &node, &err), SCHEDRUN_OK);
    for (int b = k - WIDE_BEFORE < 0 ? 0 : k - WIDE_BEFORE; b < k; b++)
      assert_int_equal(schedrun_graph_after(g, k, b, &err), SCHEDRUN_OK);
  }
  if (schedrun_graph_submit(s, g, ids, &err)) fail_msg("%s", err.message);
  for (int k = 0; k < WIDE; k++) {
    schedrun_job_result_t *r = wait_ok(s, ids[k], SCHEDRUN_OK);
    schedrun_job_result_free(&r);
  }
  for (int k = 0; k < WIDE; k++)
    if (atomic_load(&wide_runs[k]) != 1) fail_msg("task %d ran %d times", k, atomic_load(&wide_runs[k]));
  assert_int_equal(atomic_load(&wide_early), 0);
  free(ids);
  schedrun_graph_free(&g);
  schedrun_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(wide_graph_in_order),
      cmocka_unit_test(diamond),
      cmocka_unit_test(failure_ends_every_path),
      cmocka_unit_test(faulting_producer),
      cmocka_unit_test(cycles_and_unknowns_are_refused),
      cmocka_unit_test(graph_misuse_is_named),
      cmocka_unit_test(host_tasks_between_jobs),
      cmocka_unit_test(programs_freed_while_jobs_wait),
      cmocka_unit_test(host_step_between_launches),
      cmocka_unit_test(host_steps_where_they_cannot_be),
      cmocka_unit_test(chains_complete_exactly_once),
      cmocka_unit_test(shutdown_cuts_graphs_short),
      cmocka_unit_test(callers_run_the_scheduler_where_it_is_safe),
      cmocka_unit_test(a_chain_runs_where_its_steps_complete),
      cmocka_unit_test(graph_submit_names_the_node),
      cmocka_unit_test(a_fan_out_runs_where_it_is_released),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
