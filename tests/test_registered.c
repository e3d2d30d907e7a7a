/*
 * The caller's memory, registered (schedrun_buffer_register): a job bound to
 * it reads it and writes it back in place, every element checked; jobs
 * bound to one registration run in order, and one that does not say it runs
 * after the job holding the memory is refused; the memory cannot be
 * unregistered while a job bound to it has not completed; every bad
 * argument is refused naming what is wrong. Memory from schedrun_host_alloc
 * is used in place, with nothing copied, on host devices, in worker
 * processes and in process, and on CUDA as pinned memory; memory the
 * caller allocated on a CUDA device is the buffer itself
 * (schedrun_buffer_register_device). SCHEDRUN_REGISTERED_DEVICES
 * picks the devices (default host:2; "cuda" on the driver double).
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_app.h"
#include "test_util.h"

enum { N = 1024 };

static const char triple_yaml[] = "version: 1\nname: triple\n"
                                  "kernels:\n  k:\n    params: [ptr, i32]\n    source: |\n"
                                  "      extern \"C\" __global__ void k(int *x, int n) {\n"
                                  "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                  "        if (i < n) x[i] = 3 * x[i] + 1;\n"
                                  "      }\n"
                                  "buffers:\n  x: {type: i32, count: 1024, init: {fill: -5}}\n"
                                  "  other: {type: i32, count: 16}\n"
                                  "program:\n  - launch: {kernel: k, grid: 4, block: 256, args: [x, 1024]}\n";

static schedrun_t *open_here(void) { return tu_open_devices("SCHEDRUN_REGISTERED_DEVICES", "host:2", 2, NULL); }

static schedrun_job_options_t bound(const schedrun_bind_t *b, const schedrun_job_t *after, size_t nafter) {
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.binds = b;
  o.nbinds = 1;
  o.after = after;
  o.nafter = nafter;
  return o;
}

/* A job bound to the caller's array updates it in place: every element,
 * on every device; the bytes move between the array and the device (counted
 * in and out), none in a message (no output comes back unless asked). Jobs
 * bound to one array run in the order they were submitted, each after the
 * one before. */
static void test_updated_in_place(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  schedrun_program_t *p = tu_load(s, triple_yaml, "triple.yaml");
  int *x = malloc(N * sizeof *x);
  for (int i = 0; i < N; i++) x[i] = i;
  schedrun_buffer_t *m;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_buffer_register(s, x, N * sizeof *x, &m, &err), SCHEDRUN_OK);
  schedrun_bind_t b = {"x", m};
  for (int dev = 0; dev < schedrun_device_count(s); dev++) {
    schedrun_job_options_t o = bound(&b, NULL, 0);
    o.device = dev;
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_submit_wait(s, p, &o, &r, &err), SCHEDRUN_OK);
    const schedrun_job_info_t *in = schedrun_job_result_info(r);
    assert_int_equal(in->status, SCHEDRUN_OK);
    assert_int_equal(in->device, dev);
    assert_int_equal(in->bytes_in, N * sizeof(int));  /* the array in (other is zeroed there) */
    assert_int_equal(in->bytes_out, N * sizeof(int)); /* and back */
    assert_null(schedrun_job_result_output(r, "x", NULL));
    schedrun_job_result_free(&r);
  }
  for (int i = 0; i < N; i++) {
    int want = i;
    for (int d = 0; d < schedrun_device_count(s); d++) want = 3 * want + 1;
    if (x[i] != want) fail_msg("x[%d] is %d, wanted %d", i, x[i], want);
  }
  /* three in a row, each after the one before, submitted at once */
  for (int i = 0; i < N; i++) x[i] = i;
  schedrun_job_t ids[3];
  for (int k = 0; k < 3; k++) {
    schedrun_job_options_t o = bound(&b, k ? &ids[k - 1] : NULL, k ? 1 : 0);
    assert_int_equal(schedrun_submit(s, p, &o, &ids[k], &err), SCHEDRUN_OK);
  }
  schedrun_job_result_t *rs[3];
  assert_int_equal(schedrun_wait_many(s, 3, ids, -1, rs, &err), SCHEDRUN_OK);
  for (int k = 0; k < 3; k++) {
    assert_int_equal(schedrun_job_result_info(rs[k])->status, SCHEDRUN_OK);
    schedrun_job_result_free(&rs[k]);
  }
  for (int i = 0; i < N; i++)
    if (x[i] != 27 * i + 13) fail_msg("after three jobs x[%d] is %d, wanted %d", i, x[i], 27 * i + 13);
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  assert_null(m);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  free(x);
}

/* While a job bound to it has not completed, the registration cannot end,
 * and a job that binds it without running after that job is refused, both
 * naming the job; once it completed, both can. */
static void test_lifetimes(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  tu_gate g = TU_GATE_INIT;
  schedrun_builder_t *bl;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_builder_new(&bl, "held", &err), SCHEDRUN_OK);
  schedrun_builder_buffer(bl, "x", "i32", 64, NULL, 0, 0);
  schedrun_builder_fill(bl, "x", "7", NULL, NULL);
  schedrun_builder_host(bl, "hold", tu_gate_hold, &g);
  schedrun_program_t *p;
  assert_int_equal(schedrun_builder_finish(bl, &p, &err), SCHEDRUN_OK);
  schedrun_builder_free(&bl);
  int x[64] = {0};
  schedrun_buffer_t *m;
  assert_int_equal(schedrun_buffer_register(s, x, sizeof x, &m, &err), SCHEDRUN_OK);
  schedrun_bind_t b = {"x", m};
  schedrun_job_options_t o = bound(&b, NULL, 0);
  schedrun_job_t id, other;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_OK);
  tu_gate_wait_entered(&g); /* it runs, and holds */
  char job[32];
  snprintf(job, sizeof job, "job %llu", (unsigned long long)id);
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_EBUSY);
  if (!strstr(err.message, "bound to 1 job(s) not yet complete") || !strstr(err.message, job)) fail_msg("%s", err.message);
  schedrun_error_clear(&err);
  assert_non_null(m);
  assert_int_equal(schedrun_submit(s, p, &o, &other, &err), SCHEDRUN_EBUSY);
  if (!strstr(err.message, job) || !strstr(err.message, "run this job after it")) fail_msg("%s", err.message);
  schedrun_error_clear(&err);
  tu_gate_open(&g);
  schedrun_job_result_t *r;
  assert_int_equal(schedrun_wait(s, id, -1, &r, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
  schedrun_job_result_free(&r);
  for (int i = 0; i < 64; i++) assert_int_equal(x[i], 7); /* written back once it ran */
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

static const char add_yaml[] = "version: 1\nname: add\n"
                               "kernels:\n  k:\n    params: [ptr, i32]\n    source: |\n"
                               "      extern \"C\" __global__ void k(int *x, int n) {\n"
                               "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                               "        if (i < n) x[i] += i + 1;\n"
                               "      }\n"
                               "buffers:\n  x: {type: i32, count: 1024, init: {fill: -5}}\n"
                               "program:\n  - launch: {kernel: k, grid: 4, block: 256, args: [x, 1024]}\n";

static bool on_host(const schedrun_t *s) { return !strncmp(schedrun_device_name(s, 0), "host:", 5); }

/* Runs one job of p bound to m on device dev; checks its copies: none when
 * `inplace`, else the buffer in and back out. */
static void run_bound(schedrun_t *s, schedrun_program_t *p, schedrun_buffer_t *m, const int *mem, int dev, bool inplace,
                      int keep) {
  schedrun_bind_t b = {"x", m};
  schedrun_job_options_t o = bound(&b, NULL, 0);
  o.device = dev;
  o.keep_outputs = keep;
  schedrun_job_result_t *r;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit_wait(s, p, &o, &r, &err), SCHEDRUN_OK);
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  if (in->status != SCHEDRUN_OK) fail_msg("job on device %d: %s", dev, schedrun_job_result_error(r));
  assert_int_equal(in->device, dev);
  assert_int_equal(in->bytes_in, inplace ? 0 : N * sizeof(int));
  assert_int_equal(in->bytes_out, (inplace ? 0 : N * sizeof(int)) + (keep ? N * sizeof(int) : 0)); /* write-back, outputs */
  if (keep) { /* what came back is what the memory holds now */
    size_t n;
    const int *got = schedrun_job_result_output(r, "x", &n);
    assert_int_equal(n, N * sizeof(int));
    for (int i = 0; i < N; i++) assert_int_equal(got[i], mem[i]);
  }
  schedrun_job_result_free(&r);
}

/* A job of add bound to nothing, on each device, starts from x's init
 * (-5) and leaves x[i] = -5 + i + 1, every element checked. */
static void unbound_from_init(schedrun_t *s, schedrun_program_t *p) {
  for (int dev = 0; dev < schedrun_device_count(s); dev++) {
    schedrun_job_result_t *r = tu_job_on(s, p, dev, 0);
    const int *x = schedrun_job_result_output(r, "x", NULL);
    for (int i = 0; i < N; i++)
      if (x[i] != -5 + i + 1) fail_msg("device %d, unbound job: x[%d] is %d, wanted %d", dev, i, x[i], -4 + i);
    schedrun_job_result_free(&r);
  }
}

/* Memory from schedrun_host_alloc, registered at its start, is the buffer
 * itself (host devices: mapped over the buffer in the worker; CUDA: pinned
 * memory every device reaches): 100 jobs in a row on each device update it
 * with nothing copied in or out (each checked, element by element), and a
 * job that keeps its outputs reads them from it; the buffer's own memory is
 * untouched (a job not bound to it starts from its init). Registered inside
 * the allocation off a page boundary, it is copied, counted, on host
 * devices, and still used in place on CUDA. */
static void in_place_on(schedrun_t *s) {
  schedrun_program_t *p = tu_load(s, add_yaml, "add.yaml");
  bool host = on_host(s);
  size_t bytes = N * sizeof(int) + 64;
  int *mem;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_host_alloc(s, bytes, (void **)&mem, &err), SCHEDRUN_OK);
  for (size_t i = 0; i < bytes / sizeof(int); i++) assert_int_equal(mem[i], 0); /* zeroed */
  for (int i = 0; i < N; i++) mem[i] = i;
  schedrun_buffer_t *m;
  assert_int_equal(schedrun_buffer_register(s, mem, N * sizeof(int), &m, &err), SCHEDRUN_OK);
  int runs = 0;
  for (int dev = 0; dev < schedrun_device_count(s); dev++)
    for (int k = 0; k < 100; k++) {
      run_bound(s, p, m, mem, dev, true, k == 99);
      runs++;
      for (int i = 0; i < N; i++)
        if (mem[i] != i + runs * (i + 1)) fail_msg("after job %d, mem[%d] is %d, wanted %d", runs, i, mem[i], i + runs * (i + 1));
    }
  /* a job bound to nothing starts from the buffer's init, on every device;
   * the caller's memory stays as the last bound job left it */
  unbound_from_init(s, p);
  for (int i = 0; i < N; i++) assert_int_equal(mem[i], i + runs * (i + 1));
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  /* off a page boundary: copied in and back, counted, on host devices;
   * pinned memory is reached at any address on CUDA */
  int *off = mem + 16;
  for (int i = 0; i < N; i++) off[i] = 2 * i;
  assert_int_equal(schedrun_buffer_register(s, off, N * sizeof(int), &m, &err), SCHEDRUN_OK);
  run_bound(s, p, m, off, 0, !host, 0);
  for (int i = 0; i < N; i++) assert_int_equal(off[i], 2 * i + i + 1);
  for (int i = 0; i < 16; i++) assert_int_equal(mem[i], i + runs * (i + 1)); /* before it: untouched */
  /* the allocation cannot be freed while a registration lies in it */
  assert_int_equal(schedrun_host_free(s, mem, &err), SCHEDRUN_EBUSY);
  if (!strstr(err.message, "registered") || !strstr(err.message, "nothing was freed")) fail_msg("%s", err.message);
  schedrun_error_clear(&err);
  assert_int_equal(off[0], 3 * 0 + 1); /* still there */
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_host_free(s, mem, &err), SCHEDRUN_OK);
  schedrun_program_free(&p);
}

static void test_host_memory_in_place(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  in_place_on(s);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  if (getenv("SCHEDRUN_REGISTERED_DEVICES")) return; /* in-process devices are host devices */
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.host_in_process = 1;
  s = tu_open_devices("SCHEDRUN_REGISTERED_DEVICES", "host:2", 2, &o);
  in_place_on(s);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

/* schedrun_host_alloc's and schedrun_host_free's mistakes, named; memory
 * still allocated at close is freed with the scheduler. */
static void test_host_memory_mistakes(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  schedrun_error_t err = {0};
  void *mem = (void *)1;
  assert_int_equal(schedrun_host_alloc(s, 0, &mem, &err), SCHEDRUN_EINVAL);
  assert_null(mem);
  assert_non_null(strstr(err.message, "bytes is 0"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_host_alloc(NULL, 16, &mem, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "the scheduler is NULL"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_host_alloc(s, 16, NULL, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "data is NULL"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_host_alloc(s, (size_t)1 << 62, &mem, &err), SCHEDRUN_ENOMEM);
  assert_null(mem);
  assert_non_null(strstr(err.message, "4611686018427387904 bytes"));
  schedrun_error_clear(&err);
  int stack[4];
  assert_int_equal(schedrun_host_free(s, stack, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "not memory schedrun_host_alloc gave"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_host_free(s, NULL, &err), SCHEDRUN_OK);
  void *a, *b;
  assert_int_equal(schedrun_host_alloc(s, 100, &a, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_host_alloc(s, 5000, &b, &err), SCHEDRUN_OK);
  memset(a, 1, 100);
  memset(b, 2, 5000);
  assert_int_equal(schedrun_host_free(s, (char *)a + 8, &err), SCHEDRUN_EINVAL); /* not its start */
  schedrun_error_clear(&err);
  assert_int_equal(((unsigned char *)a)[99], 1);
  assert_int_equal(schedrun_host_free(s, a, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_host_free(s, a, &err), SCHEDRUN_EINVAL); /* twice */
  assert_non_null(strstr(err.message, "or it was freed"));
  schedrun_error_clear(&err);
  assert_int_equal(((unsigned char *)b)[4999], 2);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK); /* b goes with it */
}

/* Every bad argument, refused naming it; a registration left at close is
 * detached and its handle still freed by unregister. */
static void test_mistakes(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  schedrun_program_t *p = tu_load(s, triple_yaml, "triple.yaml");
  int x[N], small[16];
  schedrun_buffer_t *m, *ms, *none = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_buffer_register(s, NULL, 8, &m, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_buffer_register(s, x, 0, &m, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_buffer_register(s, x, sizeof x, &m, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_buffer_register(s, small, sizeof small, &ms, &err), SCHEDRUN_OK);
  static const struct {
    const char *buffer;
    int which; /* 0: x's memory, 1: the small one, 2: NULL */
    const char *says;
  } bad[] = {
      {"x", 1, "binds[0]: buffer 'x' holds 4096 bytes; the memory bound to it 64"},
      {"nope", 0, "binds[0] names no buffer of 'triple' (nope)"},
      {"x", 2, "memory is NULL"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    schedrun_bind_t b = {bad[k].buffer, bad[k].which == 0 ? m : bad[k].which == 1 ? ms : none};
    schedrun_job_options_t o = bound(&b, NULL, 0);
    schedrun_job_t id;
    assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL);
    if (!strstr(err.message, bad[k].says)) fail_msg("case %zu: %s", k, err.message);
    schedrun_error_clear(&err);
  }
  schedrun_bind_t two[] = {{"x", m}, {"x", m}};
  schedrun_job_options_t o = bound(two, NULL, 0);
  o.nbinds = 2;
  schedrun_job_t id;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "binds[1] binds the same memory again"));
  schedrun_error_clear(&err);
  schedrun_input_t in = {"x", x, sizeof x};
  o = bound(two, NULL, 0);
  o.inputs = &in;
  o.ninputs = 1;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "buffer 'x' is both bound and given as an input"));
  schedrun_error_clear(&err);
  schedrun_graph_t *g;
  int node;
  assert_int_equal(schedrun_graph_new(&g, &err), SCHEDRUN_OK);
  o = bound(two, NULL, 0);
  assert_int_equal(schedrun_graph_job(g, p, &o, &node, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "binds are for jobs submitted alone"));
  schedrun_error_clear(&err);
  schedrun_graph_free(&g);
  /* another scheduler's registration */
  schedrun_t *s2 = open_here();
  schedrun_buffer_t *m2;
  assert_int_equal(schedrun_buffer_register(s2, x, sizeof x, &m2, &err), SCHEDRUN_OK);
  schedrun_bind_t b2 = {"x", m2};
  o = bound(&b2, NULL, 0);
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "registered with another scheduler"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_close(&s2), SCHEDRUN_OK); /* m2 is detached */
  assert_int_equal(schedrun_buffer_unregister(&m2, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_buffer_unregister(&none, &err), SCHEDRUN_OK); /* NULL is fine */
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_buffer_unregister(&ms, &err), SCHEDRUN_OK);
}


/* ---- the caller's device memory (schedrun_buffer_register_device) ---- */

/* Retains device 1's primary context (released by cu_app_close). */
static void cu_app_retain(cu_app *a) {
  assert_int_equal(a->get(&a->dev, 1), 0);
  assert_int_equal(a->retain(&a->ctx, a->dev), 0);
}

/* Device 1's primary context, current on this thread (the scheduler's
 * threads make theirs current on theirs). */
static void cu_app_use(cu_app *a) { assert_int_equal(a->set(a->ctx), 0); }

static void cu_app_close(cu_app *a) {
  assert_int_equal(a->set(NULL), 0);
  assert_int_equal(a->release(a->dev), 0);
  dlclose(a->dl);
}

/* Device 1's memory at p: `n` ints, each what `runs` jobs of add leave. */
static void check_device(cu_app *a, unsigned long long p, int n, int runs, const char *when) {
  int *got = malloc((size_t)n * sizeof *got);
  cu_app_use(a);
  assert_int_equal(a->dtoh(got, p, (size_t)n * sizeof *got), 0);
  for (int i = 0; i < n; i++)
    if (got[i] != i + runs * (i + 1)) fail_msg("%s: element %d is %d, wanted %d", when, i, got[i], i + runs * (i + 1));
  free(got);
}

/* One job of p bound to m: on device 1, nothing copied, and its recording
 * made once for the memory (`first`) and replayed after. */
static void run_on_device_memory(schedrun_t *s, schedrun_program_t *p, schedrun_buffer_t *m, bool first, int keep,
                                 const char *when) {
  schedrun_bind_t b = {"x", m};
  schedrun_job_options_t o = bound(&b, NULL, 0);
  o.keep_outputs = keep;
  schedrun_job_result_t *r;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit_wait(s, p, &o, &r, &err), SCHEDRUN_OK);
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  if (in->status != SCHEDRUN_OK) fail_msg("%s: %s", when, schedrun_job_result_error(r));
  if (in->device != 1) fail_msg("%s: ran on device %d, not on its memory's device 1", when, in->device);
  if (in->bytes_in || in->bytes_out != (keep ? N * sizeof(int) : 0) || in->bytes_peer)
    fail_msg("%s: %llu bytes in, %llu out, %llu across", when, (unsigned long long)in->bytes_in,
             (unsigned long long)in->bytes_out, (unsigned long long)in->bytes_peer);
  if (in->nodes_created != (first ? 1u : 0u) || in->nodes_updated != 0 || in->nodes_reused != (first ? 0u : 1u))
    fail_msg("%s: nodes %llu created, %llu updated, %llu reused", when, (unsigned long long)in->nodes_created,
             (unsigned long long)in->nodes_updated, (unsigned long long)in->nodes_reused);
  schedrun_job_result_free(&r);
}

/* On CUDA: memory the caller allocated on device 1 is the buffer itself.
 * 100 jobs in a row bound to it run on device 1, copy nothing, replay one
 * recording, and leave the right values after every job; two allocations
 * taken in turns each keep their own recording and values; a job bound to
 * nothing still starts from the buffer's init; a job pinned to the other
 * device, a pointer of the wrong device, past its allocation's end or not
 * the driver's, and a program with resident buffers are refused, naming
 * what. On host devices it is refused, saying what to use instead. */
static void test_device_memory(void **st) {
  (void)st;
  schedrun_t *s = open_here();
  schedrun_error_t err = {0};
  schedrun_buffer_t *m = NULL, *m2 = NULL;
  if (on_host(s)) {
    assert_int_equal(schedrun_buffer_register_device(s, 0, 4096, 64, &m, &err), SCHEDRUN_EINVAL);
    if (!strstr(err.message, "host devices have no memory of their own") || !strstr(err.message, "schedrun_host_alloc"))
      fail_msg("%s", err.message);
    schedrun_error_clear(&err);
    assert_null(m);
    assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
    return;
  }
  assert_true(schedrun_device_count(s) >= 2);
  schedrun_program_t *p = tu_load(s, add_yaml, "add.yaml");
  cu_app a;
  cu_app_open(&a);
  cu_app_retain(&a);
  cu_app_use(&a);
  unsigned long long x = 0, y = 0;
  size_t bytes = N * sizeof(int);
  assert_int_equal(a.alloc(&x, bytes), 0);
  assert_int_equal(a.alloc(&y, bytes), 0);
  int *init = malloc(bytes);
  for (int i = 0; i < N; i++) init[i] = i;
  assert_int_equal(a.htod(x, init, bytes), 0);
  assert_int_equal(a.htod(y, init, bytes), 0);
  assert_int_equal(schedrun_buffer_register_device(s, 1, x, bytes, &m, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_buffer_register_device(s, 1, y, bytes, &m2, &err), SCHEDRUN_OK);
  char when[64];
  for (int k = 1; k <= 100; k++) {
    snprintf(when, sizeof when, "x, job %d", k);
    run_on_device_memory(s, p, m, k == 1, k == 100, when);
    check_device(&a, x, N, k, when);
  }
  for (int k = 1; k <= 4; k++) { /* y's context is made once, x's replayed */
    snprintf(when, sizeof when, "y, job %d", k);
    run_on_device_memory(s, p, m2, k == 1, 0, when);
    check_device(&a, y, N, k, when);
    snprintf(when, sizeof when, "x, job %d", 100 + k);
    run_on_device_memory(s, p, m, false, 0, when);
    check_device(&a, x, N, 100 + k, when);
  }
  unbound_from_init(s, p); /* the buffer set's own memory */
  check_device(&a, x, N, 104, "after the unbound jobs");
  /* pinned to the other device */
  schedrun_bind_t b = {"x", m};
  schedrun_job_options_t o = bound(&b, NULL, 0);
  o.device = 0;
  schedrun_job_t id;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL);
  if (!strstr(err.message, "bound to memory of device 1, but the job runs on device 0")) fail_msg("%s", err.message);
  schedrun_error_clear(&err);
  /* bad registrations */
  static const struct {
    int device;
    int offset; /* bytes from x; -1: a host address */
    size_t bytes;
    const char *says;
  } bad[] = {
      {0, 0, N * sizeof(int), "is memory of CUDA device 1, not of cuda:0"},
      {1, 8, N * sizeof(int), "the allocation holding it ends 4088 bytes after it, not 4096"},
      {1, -1, 64, "is not memory the CUDA driver allocated"},
      {2, 0, 64, "no device 2 (the scheduler has 2)"},
      {1, 0, 0, "bytes is 0"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    schedrun_buffer_t *none = (schedrun_buffer_t *)&k;
    unsigned long long at = bad[k].offset < 0 ? (unsigned long long)(uintptr_t)init : x + (unsigned)bad[k].offset;
    assert_int_equal(schedrun_buffer_register_device(s, bad[k].device, at, bad[k].bytes, &none, &err), SCHEDRUN_EINVAL);
    assert_null(none);
    if (!strstr(err.message, bad[k].says)) fail_msg("case %zu: %s", k, err.message);
    schedrun_error_clear(&err);
  }
  schedrun_buffer_t *refused = NULL;
  assert_int_equal(schedrun_buffer_register_device(s, 1, 0, 64, &refused, &err), SCHEDRUN_EINVAL);
  if (!strstr(err.message, "address is 0")) fail_msg("%s", err.message);
  assert_null(refused);
  schedrun_error_clear(&err);
  /* resident buffers keep their sets' memory */
  static const char resident_yaml[] = "version: 1\nname: res\n"
                                      "kernels:\n  k:\n    params: [ptr, i32]\n    source: |\n"
                                      "      extern \"C\" __global__ void k(int *x, int n) {\n"
                                      "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                      "        if (i < n) x[i] += 1;\n"
                                      "      }\n"
                                      "buffers:\n  x: {type: i32, count: 1024}\n"
                                      "  acc: {type: i32, count: 4, resident: true}\n"
                                      "program:\n  - launch: {kernel: k, grid: 4, block: 256, args: [x, 1024]}\n";
  schedrun_program_t *pr = tu_load(s, resident_yaml, "res.yaml");
  o = bound(&b, NULL, 0);
  assert_int_equal(schedrun_submit(s, pr, &o, &id, &err), SCHEDRUN_EINVAL);
  if (!strstr(err.message, "program 'res' has resident buffers")) fail_msg("%s", err.message);
  schedrun_error_clear(&err);
  schedrun_program_free(&pr);
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_buffer_unregister(&m2, &err), SCHEDRUN_OK);
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  cu_app_use(&a);
  assert_int_equal((a.free)(x), 0);
  assert_int_equal((a.free)(y), 0);
  cu_app_close(&a);
  free(init);
}

/* The context current on the caller's thread. */
static void *current_ctx(cu_app *a) {
  void *c = (void *)1;
  assert_int_equal(a->current(&c), 0);
  return c;
}

/* On CUDA: what the library does on the caller's thread (open, host
 * memory, the checks of the caller's memory, close) leaves the context the
 * caller had current there, none included; the devices' contexts are made
 * current on the scheduler's threads only. */
static void test_callers_context_kept(void **st) {
  (void)st;
  const char *which = getenv("SCHEDRUN_REGISTERED_DEVICES");
  if (!which || strncmp(which, "cuda", 4) != 0) return; /* host devices have no contexts */
  cu_app a;
  cu_app_open(&a);
  cu_app_retain(&a); /* device 1's */
  int dev0;
  void *ctx0;
  assert_int_equal(a.get(&dev0, 0), 0);
  assert_int_equal(a.retain(&ctx0, dev0), 0);
  assert_int_equal(a.set(NULL), 0);
  schedrun_t *s = open_here(); /* retains both devices' contexts, ending on device 1's */
  assert_null(current_ctx(&a));
  assert_int_equal(a.set(a.ctx), 0);
  schedrun_error_t err = {0};
  void *host = NULL;
  assert_int_equal(schedrun_host_alloc(s, 4096, &host, &err), SCHEDRUN_OK); /* on device 0 */
  assert_ptr_equal(current_ctx(&a), a.ctx);
  schedrun_buffer_t *m = NULL;
  assert_int_equal(schedrun_buffer_register(s, host, 4096, &m, &err), SCHEDRUN_OK);
  assert_ptr_equal(current_ctx(&a), a.ctx);
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  unsigned long long mem;
  assert_int_equal(a.alloc(&mem, 64), 0); /* device 1's, with its context current */
  assert_int_equal(a.set(ctx0), 0);
  assert_int_equal(schedrun_buffer_register_device(s, 1, mem, 64, &m, &err), SCHEDRUN_OK);
  assert_ptr_equal(current_ctx(&a), ctx0);
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_host_free(s, host, &err), SCHEDRUN_OK);
  assert_ptr_equal(current_ctx(&a), ctx0);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK); /* releases both, device 1's last */
  assert_ptr_equal(current_ctx(&a), ctx0);
  cu_app_use(&a);
  assert_int_equal((a.free)(mem), 0);
  assert_int_equal(a.release(dev0), 0);
  cu_app_close(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_updated_in_place),
      cmocka_unit_test(test_lifetimes),
      cmocka_unit_test(test_mistakes),
      cmocka_unit_test(test_host_memory_in_place),
      cmocka_unit_test(test_host_memory_mistakes),
      cmocka_unit_test(test_device_memory),
      cmocka_unit_test(test_callers_context_kept),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
