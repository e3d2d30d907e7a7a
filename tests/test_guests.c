/*
 * Callers' threads as the actors' guests (lib/api_guest.c): a lone job's
 * SUBMIT is placed on the submitting thread and its EXECUTED handled by the
 * waiting one; schedrun_submit_wait also runs a lone job on its device from
 * the calling thread. Results stay right, element by element; jobs under
 * load, held jobs, deadlines, misuse, callbacks and a shutdown racing many
 * callers all behave as with the library's own threads.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "lib/api.h"

#include "test_util.h"

/* y[i] = s[0] * i; the kernel spins for ever while s[1] is not 0 */
static const char scale_yaml[] =
    "version: 1\n"
    "kernels:\n"
    "  scale:\n"
    "    params: [ptr, ptr]\n"
    "    source: |\n"
    "      extern \"C\" __global__ void scale(const float *s, float *y) {\n"
    "        volatile float stuck = s[1];\n"
    "        while (stuck != 0.0f) {}\n"
    "        int i = threadIdx.x;\n"
    "        y[i] = s[0] * i;\n"
    "      }\n"
    "buffers:\n"
    "  s: {type: f32, count: 2}\n"
    "  y: {type: f32, count: 32}\n"
    "program:\n"
    "  - launch: {kernel: scale, grid: 1, block: 32, args: [s, y]}\n";

static schedrun_t *open_host2(void) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:2";
  return tu_open(&o);
}

/* One job of scale_yaml with seed k (stuck when `stuck`). */
static void scale_options(schedrun_job_options_t *jo, float *s, float k, bool stuck) {
  schedrun_job_options_init(jo);
  static _Thread_local schedrun_input_t in;
  s[0] = k;
  s[1] = stuck ? 1.0f : 0.0f;
  in = (schedrun_input_t){"s", s, 2 * sizeof(float)};
  jo->inputs = &in;
  jo->ninputs = 1;
  jo->keep_outputs = 1;
}

static void check_scaled(const schedrun_job_result_t *r, float k) {
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  if (in->status != SCHEDRUN_OK) fail_msg("seed %g: status %d: %s", k, in->status, schedrun_job_result_error(r));
  size_t bytes = 0;
  const float *y = schedrun_job_result_output(r, "y", &bytes);
  assert_non_null(y);
  assert_int_equal(bytes, 32 * sizeof(float));
  for (int i = 0; i < 32; i++)
    if (y[i] != k * (float)i) fail_msg("seed %g: y[%d] = %g, not %g", k, i, y[i], k * (float)i);
}

/* One job on `device`, so that its program is compiled and recorded there. */
static void warm_up(schedrun_t *s, schedrun_program_t *p, int device) {
  float seed[2];
  schedrun_job_options_t jo;
  schedrun_job_result_t *r;
  schedrun_error_t err = {0};
  scale_options(&jo, seed, 2.0f, false);
  jo.device = device;
  assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
  check_scaled(r, 2.0f);
  schedrun_job_result_free(&r);
}

static uint64_t execute_rounds(schedrun_t *s) {
  uint64_t n = 0;
  for (int d = 0; d < s->core.ndevices; d++) n += actor_guest_rounds(s->execute[d]);
  return n;
}

/* ---- lone jobs ---- */

static void lone_jobs_run_on_the_callers_thread(void **st) {
  (void)st;
  schedrun_t *s = open_host2();
  schedrun_program_t *p = tu_load(s, scale_yaml, "scale.yaml");
  schedrun_error_t err = {0};
  float seed[2];
  schedrun_stats_t st0;
  assert_int_equal(schedrun_get_stats(s, &st0, &err), SCHEDRUN_OK);
  uint64_t sched0 = actor_guest_rounds(s->scheduler), exec0 = execute_rounds(s);
  /* submit + wait: placed and posted to the device here, collected by the
   * wait (actors/execute_posted.c) */
  for (int i = 0; i < 150; i++) {
    schedrun_job_options_t jo;
    scale_options(&jo, seed, (float)i, false);
    schedrun_job_t id;
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
    assert_int_equal(schedrun_wait(s, id, TU_PATIENCE_MS, &r, &err), SCHEDRUN_OK);
    check_scaled(r, (float)i);
    schedrun_job_result_free(&r);
  }
  uint64_t sched1 = actor_guest_rounds(s->scheduler), exec1 = execute_rounds(s);
  schedrun_stats_t st1;
  assert_int_equal(schedrun_get_stats(s, &st1, &err), SCHEDRUN_OK);
  /* each SUBMIT ran here unless the scheduler's own thread was busy then;
   * each job was posted here (the first ones of a device, timed node by
   * node, are not), and its wait took the execute actor's turn to collect it */
  if (sched1 - sched0 < 75) fail_msg("150 lone jobs: the callers ran the scheduler %llu times", (unsigned long long)(sched1 - sched0));
  if (st1.posted - st0.posted < 75) fail_msg("150 lone jobs: the callers posted %llu", (unsigned long long)(st1.posted - st0.posted));
  if (exec1 - exec0 < 75) fail_msg("150 lone jobs: the callers took the execute actors' turns %llu times", (unsigned long long)(exec1 - exec0));
  /* submit_wait: run here too */
  for (int i = 0; i < 150; i++) {
    schedrun_job_options_t jo;
    scale_options(&jo, seed, (float)i + 0.5f, false);
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
    check_scaled(r, (float)i + 0.5f);
    schedrun_job_result_free(&r);
  }
  uint64_t exec2 = execute_rounds(s);
  print_message("  150 lone jobs: the scheduler ran on the caller %llu times; 150 schedrun_submit_wait: %llu jobs ran on the caller\n",
                (unsigned long long)(sched1 - sched0), (unsigned long long)(exec2 - exec1));
  if (exec2 - exec1 < 75) fail_msg("150 schedrun_submit_wait: the caller ran %llu jobs itself", (unsigned long long)(exec2 - exec1));
  schedrun_stats_t stats;
  assert_int_equal(schedrun_get_stats(s, &stats, &err), SCHEDRUN_OK);
  assert_int_equal(stats.completed, stats.submitted);
  assert_int_equal(stats.held, 0);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* ---- a wait that does not spin runs a lone job still queued ---- */

/* With spinning off, a caller about to sleep in schedrun_wait for a lone
 * job whose EXECUTE nobody has taken runs it itself. Here the execute
 * actors are never rung for it (this thread polls their queues while it
 * submits), so only the waiting thread can run it: without that the wait
 * would never end, and the alarm ends the test. The jobs have a timeout,
 * so that they are queued, not posted by the submitting thread. */
static void a_wait_that_does_not_spin_runs_the_queued_job(void **st) {
  (void)st;
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:2";
  o.spin_us = -1;
  schedrun_t *s = tu_open(&o);
  schedrun_program_t *p = tu_load(s, scale_yaml, "scale.yaml");
  schedrun_error_t err = {0};
  float seed[2];
  schedrun_job_options_t jo;
  schedrun_job_result_t *r;
  warm_up(s, p, 1);
  /* that job may have run on the execute actor's thread (its EXECUTE came
   * after the recording, from the scheduler's thread): once the thread lets
   * go of its turn, nothing rings it again */
  for (int d = 0; d < 2; d++)
    while (actor_run_queue_here(s->execute[d]) == ACTOR_TURN_BUSY) sched_yield();
  alarm(TU_PATIENCE_MS / 1000);
  for (int i = 0; i < 20; i++) {
    uint64_t exec0 = execute_rounds(s);
    scale_options(&jo, seed, 3.0f + (float)i, false);
    jo.device = 1;
    jo.timeout_ms = TU_PATIENCE_MS;
    for (int d = 0; d < 2; d++) msgq_poll_begin(&s->core.to_execute[d]);
    schedrun_job_t id;
    assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
    /* placed (here, or by the scheduler's thread when its turn was busy):
     * its EXECUTE queued, and nobody rung for it */
    TU_WAIT_FOR(msgq_any(&s->core.to_execute[1]), "the job's EXECUTE to be queued");
    for (int d = 0; d < 2; d++) msgq_poll_end(&s->core.to_execute[d]);
    assert_int_equal(schedrun_wait(s, id, -1, &r, &err), SCHEDRUN_OK);
    check_scaled(r, 3.0f + (float)i);
    assert_int_equal(schedrun_job_result_info(r)->device, 1);
    schedrun_job_result_free(&r);
    assert_int_equal(execute_rounds(s) - exec0, 1); /* on this thread */
  }
  alarm(0);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* ---- schedrun_submit_wait beside other jobs ---- */

static void submit_wait_under_load_and_after(void **st) {
  (void)st;
  schedrun_t *s = open_host2();
  schedrun_program_t *p = tu_load(s, scale_yaml, "scale.yaml");
  schedrun_error_t err = {0};
  float seed[2];
  enum { N = 200 };
  schedrun_job_t ids[N];
  for (int i = 0; i < N; i++) {
    schedrun_job_options_t jo;
    scale_options(&jo, seed, (float)i, false);
    assert_int_equal(schedrun_submit(s, p, &jo, &ids[i], &err), SCHEDRUN_OK);
  }
  /* not alone: it goes through the scheduler's thread, and still returns its own result */
  schedrun_job_options_t jo;
  scale_options(&jo, seed, 1000.0f, false);
  jo.after = &ids[N - 1];
  jo.nafter = 1;
  schedrun_job_result_t *r;
  assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
  check_scaled(r, 1000.0f);
  schedrun_job_result_free(&r);
  for (int i = 0; i < N; i++) {
    assert_int_equal(schedrun_wait(s, ids[i], TU_PATIENCE_MS, &r, &err), SCHEDRUN_OK);
    check_scaled(r, (float)i);
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* ---- a deadline, on the caller's thread ---- */

static void submit_wait_deadline_ends_a_stuck_job(void **st) {
  (void)st;
  schedrun_t *s = open_host2();
  schedrun_program_t *p = tu_load(s, scale_yaml, "scale.yaml");
  schedrun_error_t err = {0};
  float seed[2];
  schedrun_job_options_t jo;
  schedrun_job_result_t *r;
  warm_up(s, p, 0);
  /* the execute actor's thread, idle for a while, sleeps: this thread runs the next job */
  usleep(100000);
  uint64_t exec0 = execute_rounds(s);
  scale_options(&jo, seed, 3.0f, true);
  jo.device = 0;
  jo.timeout_ms = 300;
  uint64_t t0 = now_ns();
  assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
  uint64_t took = now_ns() - t0;
  const schedrun_job_info_t *in = schedrun_job_result_info(r);
  if (in->status != SCHEDRUN_ETIMEOUT || !strstr(schedrun_job_result_error(r), "deadline"))
    fail_msg("a stuck job: status %d: %s", in->status, schedrun_job_result_error(r));
  schedrun_job_result_free(&r);
  assert_true(took >= 300000000ull && took < TU_PATIENCE_NS); /* ended at its deadline, not before */
  assert_true(execute_rounds(s) > exec0);                      /* it ran on this thread */
  assert_non_null(schedrun_device_lost(s, 0));
  /* the next one goes to the device left */
  scale_options(&jo, seed, 4.0f, false);
  assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_OK);
  check_scaled(r, 4.0f);
  assert_int_equal(schedrun_job_result_info(r)->device, 1);
  schedrun_job_result_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* ---- wrong uses ---- */

typedef struct from_callback {
  schedrun_t *s;
  schedrun_program_t *p;
  _Atomic int rc;
} from_callback;

static void call_submit_wait(schedrun_job_t job, schedrun_job_result_t *r, void *user) {
  (void)job;
  schedrun_job_result_free(&r);
  from_callback *fc = user;
  schedrun_job_result_t *res = NULL;
  int rc = schedrun_submit_wait(fc->s, fc->p, NULL, &res, NULL);
  atomic_store(&fc->rc, res ? -2 : rc);
}

static void submit_wait_misuse(void **st) {
  (void)st;
  schedrun_t *s = open_host2();
  schedrun_program_t *p = tu_load(s, tu_tiny_yaml, "tiny.yaml");
  schedrun_error_t err = {0};
  schedrun_job_result_t *r = (schedrun_job_result_t *)1;
  assert_int_equal(schedrun_submit_wait(NULL, p, NULL, &r, &err), SCHEDRUN_EINVAL);
  assert_null(r);
  assert_non_null(strstr(err.message, "schedrun_submit_wait: the scheduler is NULL"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_submit_wait(s, NULL, NULL, &r, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "the program is NULL"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_submit_wait(s, p, NULL, NULL, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "out is NULL"));
  schedrun_error_clear(&err);
  from_callback fc = {s, p, -1};
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.on_complete = call_submit_wait;
  jo.user = &fc;
  assert_int_equal(schedrun_submit_wait(s, p, &jo, &r, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "on_complete must be NULL"));
  schedrun_error_clear(&err);
  schedrun_stats_t stats;
  assert_int_equal(schedrun_get_stats(s, &stats, &err), SCHEDRUN_OK);
  assert_int_equal(stats.submitted, 0); /* none of those submitted anything */
  /* from a completion callback: it would wait for its own thread */
  schedrun_job_t id;
  assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
  TU_WAIT_FOR(atomic_load(&fc.rc) != -1, "the callback's schedrun_submit_wait to answer");
  assert_int_equal(atomic_load(&fc.rc), SCHEDRUN_EDEADLK);
  assert_int_equal(schedrun_get_stats(s, &stats, &err), SCHEDRUN_OK);
  assert_int_equal(stats.submitted, 1);
  /* after the shutdown */
  assert_int_equal(schedrun_shutdown(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_submit_wait(s, p, NULL, &r, &err), SCHEDRUN_ECLOSED);
  assert_null(r);
  schedrun_error_clear(&err);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* ---- many callers, and a shutdown among them ---- */

typedef struct caller {
  schedrun_t *s;
  schedrun_program_t *p;
  bool submit_wait;
  int ran, closed, other, submitted;
} caller;

static void *caller_main(void *arg) {
  caller *c = arg;
  schedrun_error_t err = {0};
  for (int i = 0; i < 100000; i++) {
    schedrun_job_result_t *r = NULL;
    if (c->submit_wait) {
      int rc = schedrun_submit_wait(c->s, c->p, NULL, &r, &err);
      if (rc == SCHEDRUN_ECLOSED) break; /* shut down before it was submitted */
      c->submitted++;
      if (rc != SCHEDRUN_OK) {
        c->other++;
        break;
      }
    } else {
      schedrun_job_t id;
      if (schedrun_submit(c->s, c->p, NULL, &id, &err) != SCHEDRUN_OK) break;
      c->submitted++;
      if (schedrun_wait(c->s, id, TU_PATIENCE_MS, &r, &err) != SCHEDRUN_OK) {
        c->other++;
        break;
      }
    }
    const schedrun_job_info_t *in = schedrun_job_result_info(r);
    if (in->status == SCHEDRUN_OK && in->verified) c->ran++;
    else if (in->status == SCHEDRUN_ECLOSED) c->closed++;
    else c->other++;
    schedrun_job_result_free(&r);
  }
  schedrun_error_clear(&err);
  return NULL;
}

static void many_callers_and_a_shutdown(void **st) {
  (void)st;
  schedrun_t *s = open_host2();
  schedrun_program_t *p = tu_load(s, tu_tiny_yaml, "tiny.yaml");
  schedrun_error_t err = {0};
  enum { T = 4 };
  caller c[T];
  pthread_t t[T];
  for (int k = 0; k < T; k++) {
    c[k] = (caller){.s = s, .p = p, .submit_wait = k % 2 == 0};
    assert_int_equal(pthread_create(&t[k], NULL, caller_main, &c[k]), 0);
  }
  usleep(300000);
  assert_int_equal(schedrun_shutdown(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  for (int k = 0; k < T; k++) {
    pthread_join(t[k], NULL);
    if (c[k].other) fail_msg("caller %d: %d jobs neither ran nor were cut short", k, c[k].other);
    assert_int_equal(c[k].ran + c[k].closed, c[k].submitted); /* each once */
    assert_true(c[k].ran > 0);
  }
  schedrun_stats_t stats;
  assert_int_equal(schedrun_get_stats(s, &stats, &err), SCHEDRUN_OK);
  assert_int_equal(stats.in_flight, 0);
  assert_int_equal(stats.held, 0);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(lone_jobs_run_on_the_callers_thread),
      cmocka_unit_test(a_wait_that_does_not_spin_runs_the_queued_job),
      cmocka_unit_test(submit_wait_under_load_and_after),
      cmocka_unit_test(submit_wait_deadline_ends_a_stuck_job),
      cmocka_unit_test(submit_wait_misuse),
      cmocka_unit_test(many_callers_and_a_shutdown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
