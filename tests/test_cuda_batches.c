/* The CUDA path's batches and node times on the driver double: jobs that
 * share a recording go to the device in batches through pinned staging;
 * with --trace the first jobs run node by node, timed with events; and the
 * double's asynchronous copies and events follow the documented rules the
 * backend relies on for both. The environment (set by ctest) selects the
 * double as the driver and as NVRTC. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_app.h"
#include "cuda_double_run.h"
#include "gpu/backend.h"

/* ---- batches ---- */

/* Jobs that differ in nothing (tests/configs/same_jobs.yaml, 48 a run) go
 * to one device as batches: every fill and read back
 * an asynchronous copy through pinned staging (none from pageable memory,
 * which would wait for the stream), one event per job's graph and one per
 * batch, one wait per batch; every job verifies. The double reads a pinned
 * source when the copy runs, not when it was queued: staging reused before
 * the batch's wait would give wrong results. */
static void test_batches_copy_through_pinned_staging(void **st) {
  (void)st;
  result r;
  set_double("13000", "1");
  char *text = run_logged("tests/configs/same_jobs.yaml", &r);
  int64_t jobs = json_object_get_int64(get(r.json, "jobs"));
  assert_int_equal(jobs, 2 * 48);
  assert_int_equal(json_object_get_int64(get(r.json, "jobs_verified")), jobs);
  int pinned = tu_count(text, "copy-async-pinned"), pageable = tu_count(text, "copy-async-pageable"),
      events = tu_count(text, "event-record"), launches = tu_count(text, "graph-launch");
  /* each job reads y back (x is copied on the device from its init, y
   * zeroed); the first, recorded, goes alone */
  if (pinned < jobs - 2 || pageable != 0 || events <= jobs || launches < jobs)
    fail_msg("%lld jobs: %d pinned and %d pageable asynchronous copies, %d event records, %d graph launches",
             (long long)jobs, pinned, pageable, events, launches);
  printf("  %lld jobs: %d copies through pinned staging, %d events\n", (long long)jobs, pinned, events);
  free(text);
  result_free(&r);
}

/* Two batches out at once (batch_begin, batch_finish): the second's fills,
 * said to touch nothing of the first, go on the copy stream, which the
 * device's stream waits for with an event (counted by the double) before
 * the rest of that batch; each batch's bytes come back as sent, in the
 * order begun. A second batch not said to be beside queues behind the
 * first on the device's stream alone: no wait, nothing counted. */
static void fill_and_copy(gpu_batch_op *ops, uint64_t in, uint64_t out, const int32_t *x, int32_t *y, uint64_t bytes) {
  ops[0] = (gpu_batch_op){GB_HTOD, in, bytes, x, NULL, NULL, 0, 0};
  ops[1] = (gpu_batch_op){GB_DTOD, out, bytes, NULL, NULL, NULL, 0, in};
  ops[2] = (gpu_batch_op){GB_DTOH, out, bytes, NULL, y, NULL, 0, 0};
}

static void test_batch_fills_beside_the_batch_before(void **st) {
  (void)st;
  set_double("13000", "1");
  const char *log = tu_write_temp(4, "beside.log", "");
  setenv("SCHEDRUN_CUDA_DOUBLE_LOG", log, 1);
  gpu_backend *b = NULL;
  schedrun_error_t err = {0};
  if (gpu_backend_open("cuda", tu_gpu_opts(), &b, NULL, &err) != SCHEDRUN_OK) fail_msg("open: %s", err.message);
  assert_non_null(b->ops->batch_begin);
  enum { N = 4096 };
  const uint64_t bytes = N * sizeof(int32_t);
  uint64_t mem[4];
  for (int i = 0; i < 4; i++) assert_int_equal(b->ops->mem_alloc(b, 0, bytes, &mem[i], &err), SCHEDRUN_OK);
  static int32_t xa[N], xb[N], ya[N], yb[N];
  for (int round = 0; round < 2; round++) {
    bool beside = round == 0;
    for (int i = 0; i < N; i++) {
      xa[i] = 7 * i + round;
      xb[i] = -3 * i - round;
      ya[i] = yb[i] = 0;
    }
    gpu_batch_op opa[3], opb[3];
    fill_and_copy(opa, mem[0], mem[1], xa, ya, bytes);
    fill_and_copy(opb, mem[2], mem[3], xb, yb, bytes);
    assert_int_equal(b->ops->batch_begin(b, 0, opa, 3, 0, false, &err), SCHEDRUN_OK);
    assert_int_equal(b->ops->batch_begin(b, 0, opb, 3, 0, beside, &err), SCHEDRUN_OK);
    size_t done = 0;
    gpu_failure f;
    assert_int_equal(b->ops->batch_finish(b, 0, &done, &f, &err), SCHEDRUN_OK);
    assert_int_equal(done, 3);
    for (int i = 0; i < N; i++)
      if (ya[i] != xa[i]) fail_msg("round %d, first batch: y[%d] = %d, not %d", round, i, ya[i], xa[i]);
    assert_int_equal(b->ops->batch_finish(b, 0, &done, &f, &err), SCHEDRUN_OK);
    assert_int_equal(done, 3);
    for (int i = 0; i < N; i++)
      if (yb[i] != xb[i]) fail_msg("round %d, second batch: y[%d] = %d, not %d", round, i, yb[i], xb[i]);
    gpu_counters c = {0};
    b->ops->counters(b, 0, &c);
    assert_int_equal(c.beside, 1); /* the first round's second batch only */
  }
  for (int i = 0; i < 4; i++) b->ops->mem_free(b, 0, mem[i]);
  gpu_backend_close(&b);
  unsetenv("SCHEDRUN_CUDA_DOUBLE_LOG");
  char *text = tu_slurp(log, NULL);
  assert_non_null(text);
  assert_int_equal(tu_count(text, "stream-wait-event"), 1);
  free(text);
}

/* Jobs of two buffer sets on one device (tests/configs/two_sets.yaml):
 * each set's batches may be queued while the other set's run, and every
 * job of both sets verifies, element by element. */
static void test_two_buffer_sets_verify(void **st) {
  (void)st;
  set_double("13000", "1");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/configs/two_sets.yaml", tu_env("SCHEDRUN_SOURCE_DIR"));
  result r;
  run_cuda(path, &r);
  if (r.status != 0 || !r.json || !json_object_get_boolean(get(r.json, "verified")))
    fail_msg("two_sets.yaml on one device: exit %d\n%s%s", r.status, r.out ? r.out : "", r.err ? r.err : "");
  assert_int_equal(json_object_get_int64(get(r.json, "jobs")), 6 * 24);
  assert_int_equal(json_object_get_int64(get(r.json, "jobs_verified")), 6 * 24);
  /* how many went beside depends on what was queued when: said, not asserted */
  json_object *dev = json_object_array_get_idx(get(r.json, "devices"), 0);
  printf("  two buffer sets: %lld of the batches copied in beside the batch before\n",
         (long long)json_object_get_int64(get(dev, "batches_beside")));
  result_free(&r);
}

/* Jobs on 12 MiB buffers of two buffer sets (tests/gpu/overlap.yaml), every
 * one verified. x's `init` (12 MiB) is uploaded to the device once and
 * kept while the program runs, not again for every job. Which jobs run
 * alone and which in batches depends on when they reach the scheduler, so
 * the counts are checked against each other: a job in a batch (each a
 * submission of its own, over 8 MiB) copies y's zeros in and y back by
 * asynchronous pinned copies and x from the kept image on the device; a
 * job alone fills x and y by synchronous uploads and reads y back by a
 * synchronous copy; and the image itself is one upload. */
static void test_large_jobs_keep_their_image(void **st) {
  (void)st;
  result r;
  set_double("13000", "1");
  char *text = run_logged("tests/gpu/overlap.yaml", &r);
  assert_int_equal(json_object_get_int64(get(r.json, "jobs_verified")), 8 * 4);
  int uploads = tu_count(text, "copy-sync-htod"), pinned = tu_count(text, "copy-async-pinned"),
      alone = tu_count(text, "copy-sync-dtoh");
  json_object *dev = json_object_array_get_idx(get(r.json, "devices"), 0);
  printf("  32 jobs of 12 MiB: %d alone, %d synchronous uploads, %d asynchronous copies, %lld copied in beside\n",
         alone, uploads, pinned, (long long)json_object_get_int64(get(dev, "batches_beside")));
  if (pinned != 2 * (32 - alone)) fail_msg("%d jobs alone but %d asynchronous copies for the other jobs", alone, pinned);
  if (uploads > 2 * alone + 1)
    fail_msg("%d synchronous uploads for %d jobs alone: the init image is uploaded again", uploads, alone);
  free(text);
  result_free(&r);
}

/* ---- node times for the trace ---- */

/* With --trace, a CUDA device's first jobs run node by node with events
 * around each (no graph launch), and the trace has a span per node on the
 * device's launch lane, in order, each job's nodes one after another; the
 * results are those of the graph (every job verifies: saxpy's unrolled loop,
 * and while_countdown's loop, driven from the host in a timed job). */
static void trace_nodes_on(const char *config, int want_jobs) {
  set_double("13000", "1");
  const char *log = tu_write_temp(4, "double.log", "");
  char trace[4096];
  snprintf(trace, sizeof trace, "%s", log);
  strcpy(strrchr(trace, '/') + 1, "trace.json");
  setenv("SCHEDRUN_CUDA_DOUBLE_LOG", log, 1);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", tu_env("SCHEDRUN_CONFIGS"), config);
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "cuda", "--json", "--trace", trace, path, NULL};
  result r = {0};
  r.status = tu_run(argv, &r.out, &r.err);
  r.json = r.out ? json_tokener_parse(r.out) : NULL;
  unsetenv("SCHEDRUN_CUDA_DOUBLE_LOG");
  if (r.status != 0 || !r.json || !json_object_get_boolean(get(r.json, "verified")))
    fail_msg("%s --trace on the double: exit %d\n%s%s", config, r.status, r.out ? r.out : "", r.err ? r.err : "");
  assert_int_equal(json_object_get_int64(get(r.json, "jobs")), want_jobs);
  char *text = tu_slurp(log, NULL);
  assert_non_null(text);
  /* at most 16 jobs are timed: these ran as kernel launches, not graphs */
  int graphs = tu_count(text, "graph-launch"), kernels = tu_count(text, "\nlaunch") + !strncmp(text, "launch", 6);
  if (graphs != 0 || kernels < want_jobs)
    fail_msg("%s: %d graph launches and %d kernel launches for %d timed jobs", config, graphs, kernels, want_jobs);
  free(text);
  char *tt = tu_slurp(trace, NULL);
  assert_non_null(tt);
  json_object *tr = json_tokener_parse(tt);
  free(tt);
  assert_non_null(tr);
  json_object *events = get(tr, "traceEvents");
  int lane = -1, spans = 0;
  double last_end = -1;
  for (size_t i = 0; i < json_object_array_length(events); i++) {
    json_object *ev = json_object_array_get_idx(events, i), *args = NULL, *cat = NULL, *name = NULL;
    const char *ph = json_object_get_string(get(ev, "ph"));
    if (!strcmp(ph, "M") && json_object_object_get_ex(ev, "args", &args) && json_object_object_get_ex(args, "name", &name) &&
        !strcmp(json_object_get_string(name), "launches cuda:0"))
      lane = json_object_get_int(get(ev, "tid"));
    if (strcmp(ph, "X") || !json_object_object_get_ex(ev, "cat", &cat) || strcmp(json_object_get_string(cat), "launch"))
      continue;
    assert_int_equal(json_object_get_int(get(ev, "tid")), lane);
    double ts = json_object_get_double(get(ev, "ts")), dur = json_object_get_double(get(ev, "dur"));
    /* the nodes of one device run one after another */
    if (dur < 0 || ts + 1e-3 < last_end) fail_msg("%s: node span %d at %.3f (%.3f us) overlaps the one before (to %.3f)",
                                                 config, spans, ts, dur, last_end);
    last_end = ts + dur;
    spans++;
  }
  if (lane < 0 || spans < want_jobs) fail_msg("%s: %d node spans on lane %d", config, spans, lane);
  printf("  %s: %d node spans, %d kernel launches, no graph launch\n", config, spans, kernels);
  json_object_put(tr);
  result_free(&r);
}

static void test_trace_times_each_node(void **st) {
  (void)st;
  trace_nodes_on("saxpy.yaml", 3);
  trace_nodes_on("while_countdown.yaml", 3);
}

/* The double's asynchronous copies and events, as the CUDA documentation
 * says a driver behaves: a copy from or to pageable memory is done when the
 * call returns (the source may be reused at once); one through pinned
 * memory is done once its stream is; an event never recorded is complete
 * and has no time; one made without timing has none either; times follow
 * the order of the records; an event destroyed with its record still queued
 * is freed when the record has run (no leak at exit). */
static void test_double_async_copies_and_events(void **st) {
  (void)st;
  cu_app a;
  cu_app_open(&a);
  enum { OK = 0, INVALID_VALUE = 1, INVALID_HANDLE = 400 };
  int dev;
  void *ctx, *stream, *e1, *e2, *quiet, *early;
  unsigned long long p;
  assert_int_equal(a.init(0), OK);
  assert_int_equal(a.get(&dev, 0), OK);
  assert_int_equal(a.retain(&ctx, dev), OK);
  assert_int_equal(a.set(ctx), OK);
  assert_int_equal(a.stream_create(&stream, 0), OK);
  assert_int_equal(a.alloc(&p, 256), OK);
  /* pageable: the bytes as they were at the call */
  unsigned char host[256], back[256];
  memset(host, 5, sizeof host);
  assert_int_equal(a.htod_async(p, host, sizeof host, stream), OK);
  memset(host, 9, sizeof host);
  memset(back, 0, sizeof back);
  assert_int_equal(a.dtoh_async(back, p, sizeof back, stream), OK);
  for (int i = 0; i < 256; i++) assert_int_equal(back[i], 5); /* done when it returned */
  /* pinned: done once the stream is */
  void *pinned;
  assert_int_equal(a.host_alloc(&pinned, 256, 0), OK);
  memset(pinned, 7, 256);
  assert_int_equal(a.htod_async(p, pinned, 256, stream), OK);
  assert_int_equal(a.dtoh_async(back, p, sizeof back, stream), OK); /* pageable again: waits */
  for (int i = 0; i < 256; i++) assert_int_equal(back[i], 7);
  memset(pinned, 0, 256);
  assert_int_equal(a.dtoh_async(pinned, p, 256, stream), OK);
  assert_int_equal(a.stream_sync(stream), OK);
  for (int i = 0; i < 256; i++) assert_int_equal(((unsigned char *)pinned)[i], 7);
  /* events */
  assert_int_equal(a.event_create(&e1, 0), OK);
  assert_int_equal(a.event_create(&e2, 0), OK);
  assert_int_equal(a.event_create(&quiet, 2 /* CU_EVENT_DISABLE_TIMING */), OK);
  assert_int_equal(a.event_create(&early, 0x40), INVALID_VALUE); /* no such flag */
  float ms = -1;
  assert_int_equal(a.event_query(e1), OK);                      /* never recorded: complete */
  assert_int_equal(a.event_elapsed(&ms, e1, e2), INVALID_HANDLE); /* but no time */
  assert_int_equal(a.event_record(e1, stream), OK);
  assert_int_equal(a.htod_async(p, pinned, 256, stream), OK);
  assert_int_equal(a.event_record(e2, stream), OK);
  assert_int_equal(a.event_record(quiet, stream), OK);
  assert_int_equal(a.event_sync(e2), OK);
  assert_int_equal(a.event_query(e1), OK);
  assert_int_equal(a.event_query(e2), OK);
  assert_int_equal(a.event_elapsed(&ms, e1, e2), OK);
  assert_true(ms >= 0);
  assert_int_equal(a.event_elapsed(&ms, e2, e1), OK);
  assert_true(ms <= 0);
  assert_int_equal(a.event_sync(quiet), OK);
  assert_int_equal(a.event_elapsed(&ms, e1, quiet), INVALID_HANDLE);
  assert_int_equal(a.event_elapsed(NULL, e1, e2), INVALID_VALUE);
  /* destroyed with a record queued behind a copy: freed once it ran */
  assert_int_equal(a.htod_async(p, pinned, 256, stream), OK);
  assert_int_equal(a.event_record(e1, stream), OK);
  assert_int_equal(a.event_destroy(e1), OK);
  assert_int_equal(a.event_destroy(e1), INVALID_HANDLE);
  assert_int_equal(a.stream_sync(stream), OK);
  assert_int_equal(a.event_destroy(e2), OK);
  assert_int_equal(a.event_destroy(quiet), OK);
  assert_int_equal(a.host_free(pinned), OK);
  assert_int_equal((a.free)(p), OK);
  assert_int_equal(a.stream_destroy(stream), OK);
  assert_int_equal(a.set(NULL), OK);
  assert_int_equal(a.release(dev), OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batches_copy_through_pinned_staging),
      cmocka_unit_test(test_batch_fills_beside_the_batch_before),
      cmocka_unit_test(test_two_buffer_sets_verify),
      cmocka_unit_test(test_large_jobs_keep_their_image),
      cmocka_unit_test(test_trace_times_each_node),
      cmocka_unit_test(test_double_async_copies_and_events),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
