/* The asynchronous API: many jobs with their own inputs and scalars, wait for
 * one / any / all, callbacks, pinning, shutdown in the middle of a run, and
 * every kind of wrong use. Every job must complete exactly once. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedrun.h"
#include "test_util.h"

#define NJOBS 10000

/* The test program; SLOW adds tens of microseconds of busy work per job, so
 * that a shutdown right after submitting finds most jobs not started. */
#define JOBS_PROGRAM(SLOW)                                                                   \
  "version: 1\nbuffer_sets: 3\n"                                                             \
  "kernels:\n"                                                                               \
  "  twice:\n"                                                                               \
  "    params: [ptr, ptr, i32, i32]\n"                                                       \
  "    source: |\n"                                                                          \
  "      extern \"C\" __global__ void twice(const float *in, float *out, int n, int add) {\n" \
  "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n" SLOW                           \
  "        if (i < n) out[i] = in[i] * 2.0f + add;\n"                                        \
  "      }\n"                                                                                \
  "buffers:\n"                                                                               \
  "  in:  {type: f32, count: 16, init: {iota: {start: 0, step: 1}}}\n"                       \
  "  out: {type: f32, count: 16}\n"                                                          \
  "program:\n"                                                                               \
  "  - launch: {kernel: twice, grid: 1, block: 16, args: [in, out, 16, \"$job + 1000 * $run\"]}\n"

static const char program[] = JOBS_PROGRAM("");
static const char slow_program[] = JOBS_PROGRAM("        volatile int spin = 0;\n"
                                                "        for (int k = 0; k < 5000; k++) spin = spin + k;\n");

static schedrun_t *open_host(int n, int no_cache) {
  char spec[16];
  snprintf(spec, sizeof spec, "host:%d", n);
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = spec;
  o.no_disk_cache = no_cache;
  schedrun_t *s;
  schedrun_error_t err = {0};
  if (schedrun_open(&s, &o, &err)) fail_msg("%s", err.message);
  return s;
}

/* Checks a result of job j (inputs j..j+15, or the iota init when j < 0). */
static bool correct(const schedrun_job_result_t *r, int j, int run, char *why, size_t len) {
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  if (in->status != SCHEDRUN_OK) {
    snprintf(why, len, "status %d: %s", in->status, schedrun_job_result_error(r));
    return false;
  }
  size_t bytes;
  const float *out = schedrun_job_result_output(r, "out", &bytes);
  if (!out || bytes != 64) {
    snprintf(why, len, "no output");
    return false;
  }
  for (int i = 0; i < 16; i++) {
    float x = j >= 0 ? (float)(j + i) : (float)i;
    float want = x * 2.0f + (float)((j >= 0 ? j : 0) + 1000 * run);
    if (out[i] != want) {
      snprintf(why, len, "job %d: out[%d] = %g, want %g", j, i, out[i], want);
      return false;
    }
  }
  return true;
}

typedef struct tally {
  atomic_int calls[NJOBS];
  atomic_int good, closed, bad;
  schedrun_job_t ids[NJOBS];
} tally;

static tally T;

static void on_done(schedrun_job_t job, schedrun_job_result_t *r, void *user) {
  int j = (int)(intptr_t)user;
  atomic_fetch_add(&T.calls[j], 1);
  (void)job;
  char why[128];
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  if (in->status == SCHEDRUN_ECLOSED) atomic_fetch_add(&T.closed, 1);
  else if (in->job == j && in->run == j % 3 && correct(r, j, j % 3, why, sizeof why)) atomic_fetch_add(&T.good, 1);
  else atomic_fetch_add(&T.bad, 1);
  schedrun_job_result_free(&r);
}

static void submit_all(schedrun_t *s, schedrun_program_t *p, int n, bool callbacks_for_all) {
  float data[16];
  for (int j = 0; j < n; j++) {
    for (int i = 0; i < 16; i++) data[i] = (float)(j + i);
    schedrun_input_t in = {"in", data, sizeof data};
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.run = j % 3;
    o.job = j;
    o.keep_outputs = 1;
    o.inputs = &in;
    o.ninputs = 1;
    if (callbacks_for_all || j % 2 == 0) {
      o.on_complete = on_done;
      o.user = (void *)(intptr_t)j;
    }
    schedrun_error_t err = {0};
    if (schedrun_submit(s, p, &o, &T.ids[j], &err)) fail_msg("submit %d: %s", j, err.message);
  }
}

static void test_ten_thousand_jobs(void **st) {
  (void)st;
  memset(&T, 0, sizeof T);
  schedrun_t *s = open_host(2, 0);
  schedrun_program_t *p;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_program_load_string(s, program, "jobs.yaml", &p, &err), SCHEDRUN_OK);
  submit_all(s, p, NJOBS, false);
  /* odd jobs: collected with wait_any, each exactly once */
  static char seen[NJOBS];
  memset(seen, 0, sizeof seen);
  int per_device[2] = {0, 0};
  for (int k = 0; k < NJOBS / 2; k++) {
    schedrun_job_t id;
    schedrun_job_result_t *r;
    if (schedrun_wait_any(s, TU_PATIENCE_MS, &id, &r, &err)) fail_msg("wait_any after %d: %s", k, err.message);
    const schedrun_job_info_t *in = schedrun_job_result_info(r);
    int j = in->job;
    assert_true(j >= 0 && j < NJOBS && j % 2 == 1);
    assert_true(T.ids[j] == id);
    assert_int_equal(seen[j], 0);
    seen[j] = 1;
    assert_int_equal(in->run, j % 3);
    char why[128];
    if (!correct(r, j, j % 3, why, sizeof why)) fail_msg("%s", why);
    per_device[in->device]++;
    schedrun_job_result_free(&r);
  }
  assert_int_equal(schedrun_wait_all(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  for (int j = 0; j < NJOBS; j += 2) assert_int_equal(atomic_load(&T.calls[j]), 1);
  for (int j = 1; j < NJOBS; j += 2) assert_int_equal(seen[j], 1);
  assert_int_equal(atomic_load(&T.good), NJOBS / 2);
  assert_int_equal(atomic_load(&T.bad), 0);
  assert_true(per_device[0] > 0 && per_device[1] > 0);
  /* nothing left: wait_any says so, waiting again for a job says so */
  schedrun_job_result_t *r;
  schedrun_job_t id;
  assert_int_equal(schedrun_wait_any(s, 10, &id, &r, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_wait(s, T.ids[1], 10, &r, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "already handed over"));
  schedrun_error_clear(&err);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_shutdown_in_the_middle(void **st) {
  (void)st;
  memset(&T, 0, sizeof T);
  schedrun_t *s = open_host(2, 0);
  schedrun_program_t *p;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_program_load_string(s, slow_program, "slow.yaml", &p, &err), SCHEDRUN_OK);
  submit_all(s, p, NJOBS, true);
  assert_int_equal(schedrun_shutdown(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  /* every job reported exactly once: finished and correct, or failed as closed */
  for (int j = 0; j < NJOBS; j++)
    if (atomic_load(&T.calls[j]) != 1) fail_msg("job %d reported %d times", j, atomic_load(&T.calls[j]));
  assert_int_equal(atomic_load(&T.good) + atomic_load(&T.closed), NJOBS);
  assert_int_equal(atomic_load(&T.bad), 0);
  /* both outcomes happened: TERM follows 10,000 SUBMITs through one pipe, and
   * the scheduler takes them in far faster than a device runs them */
  print_message("shutdown: %d jobs finished, %d failed as closed\n", atomic_load(&T.good), atomic_load(&T.closed));
  assert_true(atomic_load(&T.closed) > 0);
  /* a closed scheduler takes nothing more */
  schedrun_job_t id;
  assert_int_equal(schedrun_submit(s, p, NULL, &id, &err), SCHEDRUN_ECLOSED);
  assert_int_equal(id, 0);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_shutdown(s, 1000, &err), SCHEDRUN_OK); /* twice is harmless */
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void test_drain_then_close(void **st) {
  (void)st;
  memset(&T, 0, sizeof T);
  schedrun_t *s = open_host(2, 0);
  schedrun_program_t *p;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_program_load_string(s, program, "jobs.yaml", &p, &err), SCHEDRUN_OK);
  submit_all(s, p, 2000, true);
  assert_int_equal(schedrun_wait_all(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  assert_int_equal(atomic_load(&T.good), 2000);
  schedrun_program_free(&p);
  schedrun_close(&s); /* nothing pending: nothing fails */
  assert_int_equal(atomic_load(&T.closed), 0);
}

static void test_pin_wait_and_misuse(void **st) {
  (void)st;
  schedrun_t *s = open_host(2, 1);
  schedrun_program_t *p, *other;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_program_load_string(s, program, "jobs.yaml", &p, &err), SCHEDRUN_OK);
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.device = 1;
  o.keep_outputs = 1;
  schedrun_job_t id;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_OK);
  schedrun_job_result_t *r = NULL;
  /* a fresh private cache: the kernel is still compiling */
  assert_int_equal(schedrun_wait(s, id, 0, &r, &err), SCHEDRUN_ETIMEOUT);
  assert_null(r);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_wait(s, id, -1, &r, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->device, 1);
  char why[128];
  if (!correct(r, -1, 0, why, sizeof why)) fail_msg("%s", why);
  assert_string_equal(schedrun_job_result_error(r), "");
  assert_null(schedrun_job_result_output(r, "nope", NULL));
  schedrun_job_result_free(&r);
  assert_null(r);

  /* wrong use */
  assert_int_equal(schedrun_submit(NULL, p, NULL, &id, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_submit(s, NULL, NULL, &id, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  o.device = 2;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "no device 2"));
  schedrun_error_clear(&err);
  float small[4] = {0};
  schedrun_input_t bad_size = {"in", small, sizeof small}, bad_name = {"nope", small, sizeof small};
  schedrun_job_options_init(&o);
  o.inputs = &bad_size;
  o.ninputs = 1;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "buffer 'in' has 16 bytes; it holds 64"));
  schedrun_error_clear(&err);
  o.inputs = &bad_name;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "names no buffer"));
  schedrun_error_clear(&err);
  o.inputs = NULL;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL); /* ninputs 1, inputs NULL */
  schedrun_error_clear(&err);
  o.ninputs = 0;
  o.run = -1;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_wait(s, 0, 10, &r, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_wait(s, 999999, 10, &r, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "no job 999999"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_wait(s, id, 10, NULL, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  /* a job with a callback is not waited for */
  memset(&T, 0, sizeof T);
  schedrun_job_options_init(&o);
  o.on_complete = on_done;
  o.user = (void *)(intptr_t)0;
  o.keep_outputs = 1;
  float data[16];
  for (int i = 0; i < 16; i++) data[i] = (float)i;
  schedrun_input_t in = {"in", data, sizeof data};
  o.inputs = &in;
  o.ninputs = 1;
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_OK);
  int rc = schedrun_wait(s, id, 1000, &r, &err);
  assert_true(rc == SCHEDRUN_EINVAL); /* pending with a callback, or already reported: no wait either way */
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_wait_all(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  assert_int_equal(atomic_load(&T.calls[0]), 1);
  assert_int_equal(atomic_load(&T.good), 1);
  /* a program of another scheduler */
  schedrun_t *s2 = open_host(1, 0);
  assert_int_equal(schedrun_program_load_string(s2, program, "other.yaml", &other, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_submit(s2, other, NULL, &id, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_submit(s, other, NULL, &id, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "another scheduler"));
  schedrun_error_clear(&err);
  schedrun_program_free(&other); /* s2 still has its job: freed with s2 */
  schedrun_close(&s2);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* Freeing a program while its jobs run: they finish and are verified
 * against it (it lives until the actors release it), and the scheduler goes
 * on with other programs. Under ASan this also proves no use after free. */
static void test_free_program_with_jobs_in_flight(void **st) {
  (void)st;
  schedrun_t *s = open_host(2, 0);
  schedrun_error_t err = {0};
  for (int round = 0; round < 20; round++) {
    schedrun_program_t *p;
    assert_int_equal(schedrun_program_load_string(s, program, "free.yaml", &p, &err), SCHEDRUN_OK);
    schedrun_job_t ids[50];
    float data[16];
    for (int i = 0; i < 16; i++) data[i] = (float)i;
    schedrun_input_t in = {"in", data, sizeof data};
    for (int j = 0; j < 50; j++) {
      schedrun_job_options_t o;
      schedrun_job_options_init(&o);
      o.job = j;
      o.keep_outputs = 1;
      o.inputs = &in;
      o.ninputs = 1;
      assert_int_equal(schedrun_submit(s, p, &o, &ids[j], &err), SCHEDRUN_OK);
    }
    schedrun_program_free(&p);
    assert_null(p);
    for (int j = 0; j < 50; j++) {
      schedrun_job_result_t *r;
      assert_int_equal(schedrun_wait(s, ids[j], TU_PATIENCE_MS, &r, &err), SCHEDRUN_OK);
      const schedrun_job_info_t *info = schedrun_job_result_info(r);
      assert_int_equal(info->status, SCHEDRUN_OK);
      const float *out = schedrun_job_result_output(r, "out", NULL);
      for (int i = 0; i < 16; i++) assert_true(out[i] == (float)i * 2.0f + (float)j);
      schedrun_job_result_free(&r);
    }
  }
  schedrun_close(&s);
}

/* 100,000 jobs in one schedrun_submit_many call, each with its own input,
 * run, job index and half of them a callback, under a max_inflight smaller
 * than the batch (so submitting waits for room); the rest collected with one
 * schedrun_wait_many: every result exactly once, every element right. Then
 * the errors: a bad job anywhere refuses the whole call before submitting
 * any; wait_many on an unknown, a duplicate or a callback job. */
#define NMANY 50000
static void test_submit_many(void **st) {
  (void)st;
  memset(&T, 0, sizeof T);
  schedrun_options_t so;
  schedrun_options_init(&so);
  so.devices = "host:2";
  so.max_inflight = 20000;
  schedrun_t *s = tu_open(&so);
  schedrun_program_t *p = tu_load(s, program, "jobs.yaml");
  schedrun_job_options_t *o = calloc(NMANY, sizeof *o);
  float(*data)[16] = calloc(NMANY, sizeof *data);
  schedrun_input_t *in = calloc(NMANY, sizeof *in);
  schedrun_job_t *ids = calloc(NMANY, sizeof *ids);
  assert_true(o && data && in && ids);
  for (int j = 0; j < NMANY; j++) {
    for (int i = 0; i < 16; i++) data[j][i] = (float)(j + i);
    in[j] = (schedrun_input_t){"in", data[j], sizeof data[j]};
    schedrun_job_options_init(&o[j]);
    o[j].run = j % 3;
    o[j].job = j;
    o[j].keep_outputs = 1;
    o[j].inputs = &in[j];
    o[j].ninputs = 1;
    if (j % 2 == 0 && j < NJOBS) { /* the tally holds NJOBS callbacks */
      o[j].on_complete = on_done;
      o[j].user = (void *)(intptr_t)j;
    }
  }
  schedrun_error_t err = {0};
  if (schedrun_submit_many(s, p, NMANY, o, ids, &err)) fail_msg("submit_many: %s", err.message);
  for (int j = 1; j < NMANY; j++) assert_true(ids[j] == ids[j - 1] + 1);
  /* the jobs without a callback, in one wait */
  size_t nwait = 0;
  schedrun_job_t *wait_ids = calloc(NMANY, sizeof *wait_ids);
  int *index = calloc(NMANY, sizeof *index);
  schedrun_job_result_t **res = calloc(NMANY, sizeof *res);
  for (int j = 0; j < NMANY; j++)
    if (!o[j].on_complete) {
      index[nwait] = j;
      wait_ids[nwait++] = ids[j];
    }
  if (schedrun_wait_many(s, nwait, wait_ids, 120000, res, &err)) fail_msg("wait_many: %s", err.message);
  char *seen = calloc(NMANY, 1);
  for (size_t k = 0; k < nwait; k++) {
    int j = index[k];
    assert_non_null(res[k]);
    const schedrun_job_info_t *info = schedrun_job_result_info(res[k]);
    assert_int_equal(info->job, j);
    assert_int_equal(info->run, j % 3);
    assert_int_equal(seen[j], 0);
    seen[j] = 1;
    char why[128];
    if (!correct(res[k], j, j % 3, why, sizeof why)) fail_msg("%s", why);
    schedrun_job_result_free(&res[k]);
  }
  assert_int_equal(schedrun_wait_all(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  for (int j = 0; j < NJOBS; j += 2) assert_int_equal(atomic_load(&T.calls[j]), 1);
  assert_int_equal(atomic_load(&T.good), NJOBS / 2);
  assert_int_equal(atomic_load(&T.bad), 0);
  /* each handed over once: waiting again says so */
  assert_int_equal(schedrun_wait_many(s, 1, &wait_ids[0], 0, res, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "already handed over"));
  schedrun_error_clear(&err);

  /* a bad job refuses the whole call: nothing is submitted */
  schedrun_stats_t before, after;
  assert_int_equal(schedrun_get_stats(s, &before, &err), SCHEDRUN_OK);
  o[7].device = 9;
  assert_int_equal(schedrun_submit_many(s, p, 10, o, ids, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "job 7: no device 9"));
  schedrun_error_clear(&err);
  for (int j = 0; j < 10; j++) assert_true(ids[j] == 0);
  o[7].device = -1;
  in[3].bytes = 4;
  assert_int_equal(schedrun_submit_many(s, p, 10, o, ids, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "job 3: input for buffer 'in' has 4 bytes"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_get_stats(s, &after, &err), SCHEDRUN_OK);
  assert_true(after.submitted == before.submitted);
  in[3].bytes = sizeof data[3];
  /* wait_many: unknown, listed twice, a callback's job */
  assert_int_equal(schedrun_submit_many(s, p, 3, &o[1], ids, &err), SCHEDRUN_OK); /* jobs 1, 2 (a callback), 3 */
  schedrun_job_t twice[2] = {ids[0], ids[0]}, unknown = ids[2] + 1000;
  assert_int_equal(schedrun_wait_many(s, 2, twice, -1, res, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "listed twice"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_wait_many(s, 1, &unknown, -1, res, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "unknown"));
  schedrun_error_clear(&err);
  schedrun_job_t two[2] = {ids[0], ids[2]};
  assert_int_equal(schedrun_wait_many(s, 2, two, TU_PATIENCE_MS, res, &err), SCHEDRUN_OK);
  for (int k = 0; k < 2; k++) {
    char why[128];
    int j = k ? 3 : 1;
    if (!correct(res[k], j, j % 3, why, sizeof why)) fail_msg("%s", why);
    schedrun_job_result_free(&res[k]);
  }
  assert_int_equal(schedrun_wait_all(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  /* a job that reports to its callback cannot be waited for: one queued
   * behind 1,000 slow jobs, so that it is still pending when asked */
  schedrun_program_t *slow = tu_load(s, slow_program, "slow.yaml");
  schedrun_job_t *slow_ids = calloc(1000, sizeof *slow_ids), cb_id;
  assert_int_equal(schedrun_submit_many(s, slow, 1000, NULL, slow_ids, &err), SCHEDRUN_OK);
  schedrun_job_options_t cbo = o[2];
  cbo.inputs = NULL;
  cbo.ninputs = 0;
  assert_int_equal(schedrun_submit(s, slow, &cbo, &cb_id, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait_many(s, 1, &cb_id, -1, res, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "callback"));
  schedrun_error_clear(&err);
  schedrun_job_result_t **slow_res = calloc(1000, sizeof *slow_res);
  assert_int_equal(schedrun_wait_many(s, 1000, slow_ids, 120000, slow_res, &err), SCHEDRUN_OK);
  for (int k = 0; k < 1000; k++) schedrun_job_result_free(&slow_res[k]);
  assert_int_equal(schedrun_wait_all(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  free(slow_res);
  free(slow_ids);
  schedrun_program_free(&slow);
  free(seen);
  free(res);
  free(index);
  free(wait_ids);
  free(ids);
  free(in);
  free(data);
  free(o);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_free_program_with_jobs_in_flight),
      cmocka_unit_test(test_ten_thousand_jobs),
      cmocka_unit_test(test_submit_many),
      cmocka_unit_test(test_shutdown_in_the_middle),
      cmocka_unit_test(test_drain_then_close),
      cmocka_unit_test(test_pin_wait_and_misuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
