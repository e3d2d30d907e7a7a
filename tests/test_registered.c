/*
 * The caller's memory, registered (schedrun_buffer_register): a job bound to
 * it reads it and writes it back in place, every element checked; jobs
 * bound to one registration run in order, and one that does not say it runs
 * after the job holding the memory is refused; the memory cannot be
 * unregistered while a job bound to it has not completed; every bad
 * argument is refused naming what is wrong. Memory from schedrun_host_alloc
 * is used in place, with nothing copied, on host devices, in worker
 * processes and in process. SCHEDRUN_REGISTERED_DEVICES
 * picks the devices (default host:2; "cuda" on the driver double).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Memory from schedrun_host_alloc, registered at its start, is the buffer
 * itself on host devices: 100 jobs in a row on each device update it with
 * nothing copied in or out (each checked, element by element), and a job
 * that keeps its outputs reads them from it; the buffer's own memory is
 * untouched (a job not bound to it starts from its init). Registered inside
 * the allocation off a page boundary, or on a backend without such memory,
 * it is copied, counted. */
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
      run_bound(s, p, m, mem, dev, host, k == 99);
      runs++;
      for (int i = 0; i < N; i++)
        if (mem[i] != i + runs * (i + 1)) fail_msg("after job %d, mem[%d] is %d, wanted %d", runs, i, mem[i], i + runs * (i + 1));
    }
  /* a job bound to nothing starts from the buffer's init, on every device;
   * the caller's memory stays as the last bound job left it */
  for (int dev = 0; dev < schedrun_device_count(s); dev++) {
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.device = dev;
    o.keep_outputs = 1;
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_submit_wait(s, p, &o, &r, &err), SCHEDRUN_OK);
    assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
    const int *x = schedrun_job_result_output(r, "x", NULL);
    for (int i = 0; i < N; i++)
      if (x[i] != -5 + i + 1) fail_msg("device %d, unbound job: x[%d] is %d, wanted %d", dev, i, x[i], -4 + i);
    schedrun_job_result_free(&r);
  }
  for (int i = 0; i < N; i++) assert_int_equal(mem[i], i + runs * (i + 1));
  assert_int_equal(schedrun_buffer_unregister(&m, &err), SCHEDRUN_OK);
  /* off a page boundary: copied in and back, counted */
  int *off = mem + 16;
  for (int i = 0; i < N; i++) off[i] = 2 * i;
  assert_int_equal(schedrun_buffer_register(s, off, N * sizeof(int), &m, &err), SCHEDRUN_OK);
  run_bound(s, p, m, off, 0, false, 0);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_updated_in_place),
      cmocka_unit_test(test_lifetimes),
      cmocka_unit_test(test_mistakes),
      cmocka_unit_test(test_host_memory_in_place),
      cmocka_unit_test(test_host_memory_mistakes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
