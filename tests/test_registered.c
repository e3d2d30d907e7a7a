/*
 * The caller's memory, registered (schedrun_buffer_register): a job bound to
 * it reads it and writes it back in place, every element checked; jobs
 * bound to one registration run in order, and one that does not say it runs
 * after the job holding the memory is refused; the memory cannot be
 * unregistered while a job bound to it has not completed; every bad
 * argument is refused naming what is wrong. SCHEDRUN_REGISTERED_DEVICES
 * picks the devices (default host:2; "cuda" on the driver double).
 */
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
