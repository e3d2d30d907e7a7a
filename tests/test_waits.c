/*
 * The threading contract of the API: many threads waiting on one job (by id
 * and by any, in every mix) get it handed over exactly once; every call from a
 * completion callback works or answers at once; a million submissions from one
 * thread stay within bounded memory under max_inflight.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "lib/api.h"

#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif
#ifdef ASAN
/* ASan holds freed memory back (its quarantine, 256 MiB by default) to catch
 * uses after free; resident memory then grows with what was freed, not with
 * what is held. A small quarantine keeps the bounded-memory check about the
 * library's memory. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "quarantine_size_mb=4"; }
#endif

/* A job that finishes only once the test lets it (a gate file appears), so
 * that every waiter is waiting when it completes: "$run" numbers the gate. */
static char gate_dir[] = "/tmp/schedrun-gate-XXXXXX";
static char slow_yaml[2048];

static void make_slow_yaml(void) {
  assert_non_null(mkdtemp(gate_dir));
  snprintf(slow_yaml, sizeof slow_yaml,
           "version: 1\n"
           "kernels:\n"
           "  slow:\n"
           "    params: [ptr, i32]\n"
           "    source: |\n"
           "      extern \"C\" int access(const char *path, int mode);\n"
           "      extern \"C\" int usleep(unsigned us);\n"
           "      extern \"C\" int snprintf(char *s, unsigned long n, const char *f, ...);\n"
           "      extern \"C\" __global__ void slow(int *out, int gate) {\n"
           "        char path[256];\n"
           "        snprintf(path, sizeof path, \"%s/%%d\", gate);\n"
           "        while (access(path, 0) != 0) usleep(1000);\n"
           "        out[0] = 42;\n"
           "      }\n"
           "buffers:\n"
           "  out: {type: i32, count: 1}\n"
           "program:\n"
           "  - launch: {kernel: slow, grid: 1, block: 1, args: [out, \"$run\"]}\n"
           "expect:\n"
           "  out: {values: [42]}\n",
           gate_dir);
}

static void open_gate(int n) {
  char path[300];
  snprintf(path, sizeof path, "%s/%d", gate_dir, n);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
}

static schedrun_t *open_host(int devices, int max_inflight) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = devices == 1 ? "host" : "host:2";
  o.max_inflight = max_inflight;
  return tu_open(&o);
}

/* ---- many waiters, one job ---- */

typedef struct waiter {
  pthread_barrier_t *ready;
  schedrun_t *s;
  schedrun_job_t job;
  bool by_id;
  int rc;
  schedrun_job_t got;
  schedrun_job_result_t *r;
  uint64_t waited_ns;
} waiter;

static void *wait_main(void *arg) {
  waiter *w = arg;
  schedrun_error_t err = {0};
  pthread_barrier_wait(w->ready);
  uint64_t t0 = now_ns();
  if (w->by_id) {
    w->rc = schedrun_wait(w->s, w->job, TU_PATIENCE_MS, &w->r, &err);
    w->got = w->rc == SCHEDRUN_OK ? w->job : 0;
  } else {
    w->rc = schedrun_wait_any(w->s, TU_PATIENCE_MS, &w->got, &w->r, &err);
  }
  w->waited_ns = now_ns() - t0;
  schedrun_error_clear(&err);
  return NULL;
}

/* How many threads are in schedrun_wait for job id (the library's count). */
static uint32_t waiting_by_id(schedrun_t *s, schedrun_job_t id) {
  pthread_mutex_lock(&s->lock);
  pending_job *pj = idmap_get(&s->jobs, id);
  uint32_t n = pj ? pj->waiters : 0;
  pthread_mutex_unlock(&s->lock);
  return n;
}

static void many_waiters(schedrun_t *s, schedrun_program_t *p, int n, int mix, int round) {
  schedrun_job_t id;
  schedrun_error_t err = {0};
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.run = round; /* its gate */
  assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
  pthread_barrier_t ready;
  pthread_barrier_init(&ready, NULL, (unsigned)n + 1);
  waiter *w = calloc(8, sizeof *w); /* on the heap: each test's stack is its own */
  pthread_t t[8];
  assert_non_null(w);
  for (int i = 0; i < n; i++) {
    /* mix 0: all by id; 1: all any; 2: alternating */
    w[i] = (waiter){.ready = &ready, .s = s, .job = id, .by_id = mix == 0 || (mix == 2 && i % 2 == 0)};
    assert_int_equal(pthread_create(&t[i], NULL, wait_main, &w[i]), 0);
  }
  /* every waiter by id is in its wait (one that came later would find the job
   * handed over, not EALREADY): then the job may finish. Waiters for any job
   * cannot be counted; one that comes late finds nothing to wait for. */
  pthread_barrier_wait(&ready);
  uint32_t by_id = 0;
  for (int i = 0; i < n; i++) by_id += w[i].by_id;
  TU_WAIT_FOR(waiting_by_id(s, id) == by_id, "every waiter by id to be waiting");
  usleep(10000);
  open_gate(round);
  int took = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    if (w[i].rc == SCHEDRUN_OK) {
      took++;
      assert_int_equal(w[i].got, id);
      assert_true(schedrun_job_result_info(w[i].r)->verified);
      schedrun_job_result_free(&w[i].r);
    } else if (w[i].by_id) {
      assert_int_equal(w[i].rc, SCHEDRUN_EALREADY); /* another thread took it */
    } else {
      assert_int_equal(w[i].rc, SCHEDRUN_EINVAL); /* nothing left to wait for */
    }
    assert_true(w[i].waited_ns < TU_PATIENCE_NS / 2); /* nobody waited out its timeout */
  }
  free(w);
  pthread_barrier_destroy(&ready);
  if (took != 1) fail_msg("%d threads (mix %d): %d got the job", n, mix, took);
  /* and it is gone: one more wait says so */
  schedrun_job_result_t *r;
  assert_int_equal(schedrun_wait(s, id, 0, &r, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
}

static void test_many_waiters_one_job(void **st) {
  (void)st;
  make_slow_yaml();
  schedrun_t *s = open_host(1, 0);
  schedrun_program_t *p = tu_load(s, slow_yaml, "t.yaml");
  const int counts[] = {2, 4, 8};
  int round = 0;
  for (int c = 0; c < 3; c++)
    for (int mix = 0; mix < 3; mix++)
      for (int rep = 0; rep < 2; rep++) many_waiters(s, p, counts[c], mix, round++);
  schedrun_program_free(&p);
  schedrun_close(&s);
  fs_remove_tree(gate_dir);
}

/* ---- every call from a callback ---- */

typedef struct from_cb {
  schedrun_t *s;
  schedrun_program_t *p, *spare;
  schedrun_job_t other;
  int wait_rc, wait0_rc, any_rc, all_rc, all0_rc, shutdown_rc, close_rc, run_rc, status_rc, counters_rc, stats_rc;
  int submit_rc, submit_full_rc, inner_rc;
  bool close_left_s;
  int active_sessions;
  schedrun_job_t submitted;
  uint64_t took_ns;
  _Atomic int done;
} from_cb;

static void inner_cb(schedrun_job_t job, schedrun_job_result_t *r, void *user) {
  (void)job;
  from_cb *c = user;
  c->inner_rc = schedrun_job_result_info(r)->status;
  schedrun_job_result_free(&r);
  atomic_fetch_add(&c->done, 1);
}

static void outer_cb(schedrun_job_t job, schedrun_job_result_t *r, void *user) {
  (void)job;
  from_cb *c = user;
  schedrun_job_result_free(&r);
  schedrun_error_t err = {0};
  uint64_t t0 = now_ns();
  schedrun_job_result_t *x = NULL;
  schedrun_job_t id;
  c->wait_rc = schedrun_wait(c->s, c->other, TU_PATIENCE_MS, &x, &err);
  schedrun_error_clear(&err);
  c->any_rc = schedrun_wait_any(c->s, -1, &id, &x, &err);
  schedrun_error_clear(&err);
  c->all_rc = schedrun_wait_all(c->s, -1, &err);
  schedrun_error_clear(&err);
  c->all0_rc = schedrun_wait_all(c->s, 0, &err); /* this job is not complete yet */
  schedrun_error_clear(&err);
  c->shutdown_rc = schedrun_shutdown(c->s, -1, &err);
  schedrun_error_clear(&err);
  schedrun_t *copy = c->s;
  c->close_rc = schedrun_close(&copy);
  c->close_left_s = copy == c->s;
  schedrun_report_t *rep = NULL;
  c->run_rc = schedrun_run(c->s, c->p, NULL, &rep, &err);
  schedrun_error_clear(&err);
  c->status_rc = schedrun_compile_status(c->s, &c->active_sessions, NULL, &err);
  schedrun_error_clear(&err);
  schedrun_counters_t cn;
  c->counters_rc = schedrun_record_counters(c->s, c->p, 0, 0, &cn, &err);
  schedrun_error_clear(&err);
  schedrun_stats_t sts;
  c->stats_rc = schedrun_get_stats(c->s, &sts, &err);
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.on_complete = inner_cb;
  jo.user = c;
  c->submit_rc = schedrun_submit(c->s, c->p, &jo, &c->submitted, &err);
  schedrun_error_clear(&err);
  /* max_inflight is 2 here: this callback's job (complete once the callback
   * returns) and the one just submitted are in flight, so there is no room,
   * and a callback may not wait for some */
  schedrun_job_t extra;
  c->submit_full_rc = schedrun_submit(c->s, c->p, &jo, &extra, &err);
  schedrun_error_clear(&err);
  c->wait0_rc = schedrun_wait(c->s, c->other, 0, &x, &err); /* looking is fine */
  schedrun_job_result_free(&x);
  schedrun_error_clear(&err);
  schedrun_program_free(&c->spare);
  (void)schedrun_device_name(c->s, 0);
  (void)schedrun_device_lost(c->s, 0);
  c->took_ns = now_ns() - t0;
  atomic_fetch_add(&c->done, 1);
}

static void test_every_call_from_a_callback(void **st) {
  (void)st;
  schedrun_t *s = open_host(1, 2);
  from_cb c = {.s = s, .p = tu_load(s, tu_tiny_yaml, "t.yaml"), .spare = tu_load(s, tu_tiny_yaml, "t.yaml")};
  schedrun_error_t err = {0};
  /* a job that completes and stays held (nobody waits for it yet) */
  assert_int_equal(schedrun_submit(s, c.p, NULL, &c.other, &err), SCHEDRUN_OK);
  schedrun_stats_t sts;
  do {
    usleep(1000);
    assert_int_equal(schedrun_get_stats(s, &sts, &err), SCHEDRUN_OK);
  } while (sts.in_flight > 0);
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.on_complete = outer_cb;
  jo.user = &c;
  schedrun_job_t outer;
  assert_int_equal(schedrun_submit(s, c.p, &jo, &outer, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait_all(s, TU_PATIENCE_MS, &err), SCHEDRUN_OK);
  while (atomic_load(&c.done) < 2) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(c.wait_rc, SCHEDRUN_EDEADLK);
  assert_true(c.wait0_rc == SCHEDRUN_OK || c.wait0_rc == SCHEDRUN_ETIMEOUT);
  assert_int_equal(c.any_rc, SCHEDRUN_EDEADLK);
  assert_int_equal(c.all_rc, SCHEDRUN_EDEADLK);
  assert_int_equal(c.all0_rc, SCHEDRUN_ETIMEOUT);
  assert_int_equal(c.shutdown_rc, SCHEDRUN_EDEADLK);
  assert_int_equal(c.close_rc, SCHEDRUN_EDEADLK);
  assert_true(c.close_left_s);
  assert_int_equal(c.run_rc, SCHEDRUN_EDEADLK);
  assert_int_equal(c.status_rc, SCHEDRUN_OK);
  assert_int_equal(c.active_sessions, 0);
  assert_int_equal(c.counters_rc, SCHEDRUN_OK);
  assert_int_equal(c.stats_rc, SCHEDRUN_OK);
  assert_int_equal(c.submit_rc, SCHEDRUN_OK);
  assert_int_equal(c.submit_full_rc, SCHEDRUN_EAGAIN);
  assert_int_equal(c.inner_rc, SCHEDRUN_OK);
  assert_true(c.took_ns < TU_PATIENCE_NS / 2); /* nothing waited for its timeout */
  schedrun_program_free(&c.p);
  uint64_t t0 = now_ns();
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
  assert_true(now_ns() - t0 < TU_PATIENCE_NS); /* never a hang */
}

/* ---- a million submissions ---- */

typedef struct counter {
  _Atomic uint64_t completed, failed;
  uint8_t *seen; /* per job: completions */
} counter;

static void count_cb(schedrun_job_t job, schedrun_job_result_t *r, void *user) {
  counter *c = user;
  const schedrun_job_info_t *info = schedrun_job_result_info(r);
  if (info->status != SCHEDRUN_OK || !info->verified) atomic_fetch_add(&c->failed, 1);
  c->seen[(size_t)info->job]++; /* one job index per submission: only this thread writes it */
  (void)job;
  schedrun_job_result_free(&r);
  atomic_fetch_add(&c->completed, 1);
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

static void test_a_million_submissions_bounded(void **st) {
  (void)st;
#ifdef SANITIZED
  const int n = 100000;
#else
  const int n = 1000000;
#endif
  schedrun_t *s = open_host(1, 1024);
  schedrun_program_t *p = tu_load(s, tu_tiny_yaml, "t.yaml");
  counter c = {.seen = calloc((size_t)n, 1)};
  assert_non_null(c.seen);
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.on_complete = count_cb;
  jo.user = &c;
  schedrun_error_t err = {0};
  long rss_early = 0;
  for (int i = 0; i < n; i++) {
    jo.job = i;
    schedrun_job_t id;
    assert_int_equal(schedrun_submit(s, p, &jo, &id, &err), SCHEDRUN_OK);
    if (i == n / 10) rss_early = rss_kib();
    if (i % 4096 == 0) {
      schedrun_stats_t sts;
      assert_int_equal(schedrun_get_stats(s, &sts, NULL), SCHEDRUN_OK);
      assert_true(sts.in_flight <= 1024);
    }
  }
  assert_int_equal(schedrun_wait_all(s, 120000, &err), SCHEDRUN_OK);
  long rss_late = rss_kib();
  assert_int_equal(atomic_load(&c.completed), (uint64_t)n);
  assert_int_equal(atomic_load(&c.failed), 0);
  for (int i = 0; i < n; i++)
    if (c.seen[i] != 1) fail_msg("job %d completed %d times", i, c.seen[i]);
  /* memory grew by no more than a few MiB between a tenth and all of it */
  printf("resident: %ld KiB after %d submissions, %ld KiB after %d\n", rss_early, n / 10, rss_late, n);
  assert_true(rss_late - rss_early < 16 * 1024);
  free(c.seen);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* One thread submits far more jobs than max_inflight before it collects any:
 * completions make room, so it never waits for itself. */
static void test_submit_past_the_bound_then_collect(void **st) {
  (void)st;
  schedrun_t *s = open_host(1, 8);
  schedrun_program_t *p = tu_load(s, tu_tiny_yaml, "t.yaml");
  schedrun_error_t err = {0};
  for (int i = 0; i < 500; i++) {
    schedrun_job_t id;
    assert_int_equal(schedrun_submit(s, p, NULL, &id, &err), SCHEDRUN_OK);
  }
  for (int i = 0; i < 500; i++) {
    schedrun_job_t id;
    schedrun_job_result_t *r;
    assert_int_equal(schedrun_wait_any(s, TU_PATIENCE_MS, &id, &r, &err), SCHEDRUN_OK);
    assert_true(schedrun_job_result_info(r)->verified);
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_many_waiters_one_job),
      cmocka_unit_test(test_every_call_from_a_callback),
      cmocka_unit_test(test_a_million_submissions_bounded),
      cmocka_unit_test(test_submit_past_the_bound_then_collect),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
