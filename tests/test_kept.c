/*
 * Buffers kept on a device from one job to a later one (actors/execute_kept.c),
 * planned against a backend that only hands out addresses: which device
 * copies each job's plan makes, in which order, and what the device's table
 * holds after a commit, for jobs that ran, failed, or never got there.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/execute_state.h"
#include "program/program.h"
#include "test_util.h"

/* ---- a backend with memory and nothing else ---- */

typedef struct stub {
  gpu_backend base;
  uint64_t next;    /* the next address handed out */
  int live;         /* allocations not freed */
  uint64_t freed[64];
  int nfreed;
  int fail_allocs;  /* fail allocations once this many more have succeeded (-1: never) */
} stub;

static int stub_alloc(gpu_backend *b, int dev, uint64_t bytes, uint64_t *addr, schedrun_error_t *err) {
  (void)dev;
  stub *s = (stub *)b;
  if (s->fail_allocs == 0) return err_set(err, SCHEDRUN_ENOMEM, "stub: no memory");
  if (s->fail_allocs > 0) s->fail_allocs--;
  *addr = s->next;
  s->next += (bytes + 4095) / 4096 * 4096;
  s->live++;
  return SCHEDRUN_OK;
}

static void stub_free(gpu_backend *b, int dev, uint64_t addr) {
  (void)dev;
  stub *s = (stub *)b;
  assert_true(s->live > 0);
  s->live--;
  if (s->nfreed < 64) s->freed[s->nfreed++] = addr;
}

static const char *stub_name(const gpu_backend *b, int dev) {
  (void)b;
  (void)dev;
  return "stub:0";
}

static const gpu_ops stub_ops = {.name = "stub", .mem_alloc = stub_alloc, .mem_free = stub_free, .device_name = stub_name};

/* two buffers of 64 floats: x and y */
static const char two_yaml[] = "version: 1\nname: two\nkernels:\n  k:\n    params: [ptr, ptr]\n    source: |\n"
                               "      extern \"C\" __global__ void k(float *x, float *y) {}\n"
                               "buffers:\n  x: {type: f32, count: 64}\n  y: {type: f32, count: 64}\n"
                               "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [x, y]}\n";

typedef struct fixture {
  stub be;
  schedrun_core core;
  execute_state *s;
  prog_program *p;
  uint64_t ctx_a[2], ctx_b[2]; /* two execution contexts' buffers */
  msg_u64s bind_a, bind_b;
} fixture;

static fixture *fx_new(void) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->be.base.ops = &stub_ops;
  f->be.next = 0x100000;
  f->be.fail_allocs = -1;
  f->core.backend = &f->be.base;
  f->core.ndevices = 1;
  assert_non_null(f->s = execute_state_new(&f->core, 0));
  schedrun_error_t err = {0};
  if (prog_load_string(two_yaml, strlen(two_yaml), "two.yaml", &f->p, &err)) fail_msg("%s", err.message);
  f->ctx_a[0] = 0x1000, f->ctx_a[1] = 0x2000, f->ctx_b[0] = 0x3000, f->ctx_b[1] = 0x4000;
  f->bind_a = (msg_u64s){f->ctx_a, 2};
  f->bind_b = (msg_u64s){f->ctx_b, 2};
  return f;
}

static void fx_free(fixture *f) {
  execute_state_free(f->s);
  prog_free(f->p);
  free(f);
}

static context_run ctx(fixture *f, bool b) { return (context_run){f->p, b ? &f->bind_b : &f->bind_a, 1}; }

/* A job: its id, what it keeps (buffer indices, MSG_PARK_LOCAL added) and
 * takes ({buffer, producer, park entry} triples, as MSG_TAKE_LOCAL takes). */
typedef struct test_job {
  job_run jr;
  uint64_t park[4], takes[12];
  job_traffic traffic;
} test_job;

static void job_init(test_job *t, uint64_t id, const uint32_t *keeps, size_t nkeeps, const uint64_t *takes,
                     size_t ntakes) {
  memset(t, 0, sizeof *t);
  for (size_t i = 0; i < nkeeps; i++) t->park[i] = keeps[i] | MSG_PARK_LOCAL;
  for (size_t i = 0; i < ntakes; i++) {
    t->takes[3 * i] = takes[3 * i] | takes[3 * i + 2] << 32;
    t->takes[3 * i + 1] = MSG_TAKE_LOCAL;
    t->takes[3 * i + 2] = takes[3 * i + 1];
  }
  t->jr = (job_run){.id = id, .park = {t->park, nkeeps}, .takes = {t->takes, 3 * ntakes}, .traffic = &t->traffic};
}

/* Plans one job alone against the device's table and commits it as `failed` says. */
static int plan_commit(fixture *f, test_job *t, bool b, kept_plan *pl, size_t failed, size_t copies_ran,
                       schedrun_error_t *err) {
  kept_table scratch;
  assert_true(kept_scratch(f->s, &scratch));
  context_run c = ctx(f, b);
  int rc = kept_plan_job(f->s, &scratch, &c, &t->jr, 0, pl, err);
  kept_table_free(&scratch);
  kept_commit(f->s, pl, failed, copies_ran);
  return rc;
}

static void expect_copy(const kept_plan *pl, size_t i, uint64_t dst, uint64_t src) {
  assert_true(3 * i + 2 < pl->ncopies);
  assert_int_equal(pl->copies[3 * i], dst);
  assert_int_equal(pl->copies[3 * i + 1], src);
  assert_int_equal(pl->copies[3 * i + 2], 64 * sizeof(float));
}

/* A chain on one context: each job keeps x, the next takes it into x. Nothing
 * is copied: the buffer stays where it is from job to job. */
static void chain_in_place(void **state) {
  (void)state;
  fixture *f = fx_new();
  uint32_t keep_x[] = {0};
  for (uint64_t id = 1; id <= 5; id++) {
    test_job t;
    uint64_t take[] = {0, id - 1, 0}; /* x from job id - 1's first park entry */
    job_init(&t, id, keep_x, 1, take, id > 1 ? 1 : 0);
    kept_plan pl = {0};
    schedrun_error_t err = {0};
    assert_int_equal(plan_commit(f, &t, false, &pl, SIZE_MAX, 0, &err), SCHEDRUN_OK);
    assert_int_equal(pl.ncopies, 0);
    assert_int_equal(t.traffic.local, id > 1 ? 1u : 0u); /* taken on its device, in place */
    kept_plan_free(&pl);
    /* the table holds exactly this job's x, in its context's buffer */
    assert_int_equal(f->s->kept.n, 1);
    assert_int_equal(f->s->kept.v[0].job, id);
    assert_true(f->s->kept.v[0].in_context);
    assert_int_equal(f->s->kept.v[0].at, f->ctx_a[0]);
  }
  assert_int_equal(f->be.live, 0);
  fx_free(f);
}

/* Another job of the producer's context runs first: the kept buffer moves
 * to a parcel before it (its fills would overwrite it); the taker, in the
 * other context, copies it in from there and the parcel is freed. */
static void spilled_before_the_context_runs_again(void **state) {
  (void)state;
  fixture *f = fx_new();
  uint32_t keep_y[] = {1};
  test_job x, other, taker;
  job_init(&x, 10, keep_y, 1, NULL, 0);
  job_init(&other, 11, NULL, 0, NULL, 0);
  uint64_t take[] = {0, 10, 0};
  job_init(&taker, 12, NULL, 0, take, 1);
  kept_plan pl = {0};
  schedrun_error_t err = {0};
  assert_int_equal(plan_commit(f, &x, false, &pl, SIZE_MAX, 0, &err), SCHEDRUN_OK);
  kept_plan_free(&pl);
  assert_int_equal(plan_commit(f, &other, false, &pl, SIZE_MAX, 1, &err), SCHEDRUN_OK);
  assert_int_equal(pl.ncopies, 3); /* one spill: y to a fresh parcel */
  uint64_t parcel = pl.copies[0];
  expect_copy(&pl, 0, parcel, f->ctx_a[1]);
  kept_plan_free(&pl);
  assert_int_equal(f->be.live, 1);
  assert_false(f->s->kept.v[0].in_context);
  assert_int_equal(f->s->kept.v[0].at, parcel);
  /* a job of another context leaves it alone */
  test_job stranger;
  job_init(&stranger, 13, NULL, 0, NULL, 0);
  assert_int_equal(plan_commit(f, &stranger, true, &pl, SIZE_MAX, 0, &err), SCHEDRUN_OK);
  assert_int_equal(pl.ncopies, 0);
  kept_plan_free(&pl);
  assert_int_equal(plan_commit(f, &taker, true, &pl, SIZE_MAX, 1, &err), SCHEDRUN_OK);
  assert_int_equal(pl.ncopies, 3);
  expect_copy(&pl, 0, f->ctx_b[0], parcel);
  kept_plan_free(&pl);
  assert_int_equal(f->s->kept.n, 0);
  assert_int_equal(f->be.live, 0);
  assert_int_equal(f->be.freed[f->be.nfreed - 1], parcel);
  fx_free(f);
}

/* One buffer kept twice (a fork, A's y for B and for C), B in A's context
 * taking it into x: B copies y into x directly, before anything writes y,
 * and C's copy moves to a parcel first. */
static void fork_from_one_buffer(void **state) {
  (void)state;
  fixture *f = fx_new();
  uint32_t keep_yy[] = {1, 1};
  test_job a, b, c;
  job_init(&a, 20, keep_yy, 2, NULL, 0);
  uint64_t tb[] = {0, 20, 0}, tc[] = {0, 20, 1};
  job_init(&b, 21, NULL, 0, tb, 1);
  job_init(&c, 22, NULL, 0, tc, 1);
  kept_plan pl = {0};
  schedrun_error_t err = {0};
  assert_int_equal(plan_commit(f, &a, false, &pl, SIZE_MAX, 0, &err), SCHEDRUN_OK);
  kept_plan_free(&pl);
  assert_int_equal(f->s->kept.n, 2);
  assert_int_equal(plan_commit(f, &b, false, &pl, SIZE_MAX, 2, &err), SCHEDRUN_OK);
  assert_int_equal(pl.ncopies, 6);
  uint64_t parcel = pl.copies[0];
  expect_copy(&pl, 0, parcel, f->ctx_a[1]);    /* C's, out of the way first */
  expect_copy(&pl, 1, f->ctx_a[0], f->ctx_a[1]); /* B's: y into x, in place */
  kept_plan_free(&pl);
  assert_int_equal(f->s->kept.n, 1);
  assert_int_equal(plan_commit(f, &c, false, &pl, SIZE_MAX, 1, &err), SCHEDRUN_OK);
  assert_int_equal(pl.ncopies, 3);
  expect_copy(&pl, 0, f->ctx_a[0], parcel);
  kept_plan_free(&pl);
  assert_int_equal(f->s->kept.n, 0);
  assert_int_equal(f->be.live, 0);
  fx_free(f);
}

/* A job takes x from y and y from x of the job before it, in its own context:
 * one of the two would overwrite the other's source, so that one goes
 * through a parcel. */
static void swapped_buffers_do_not_clobber(void **state) {
  (void)state;
  fixture *f = fx_new();
  uint32_t keep_xy[] = {0, 1};
  test_job a, b;
  job_init(&a, 30, keep_xy, 2, NULL, 0);
  uint64_t swap[] = {0, 30, 1, 1, 30, 0}; /* x <- a's y (entry 1), y <- a's x (entry 0) */
  job_init(&b, 31, NULL, 0, swap, 2);
  kept_plan pl = {0};
  schedrun_error_t err = {0};
  assert_int_equal(plan_commit(f, &a, false, &pl, SIZE_MAX, 0, &err), SCHEDRUN_OK);
  kept_plan_free(&pl);
  assert_int_equal(plan_commit(f, &b, false, &pl, SIZE_MAX, 4, &err), SCHEDRUN_OK);
  /* both sources are written by the other take: both are spilled, then copied in */
  assert_int_equal(pl.ncopies, 12);
  for (size_t i = 0; i < 2; i++) /* the spills read the context before any take writes it */
    assert_true(pl.copies[3 * i + 1] == f->ctx_a[0] || pl.copies[3 * i + 1] == f->ctx_a[1]);
  for (size_t i = 2; i < 4; i++) /* the takes read parcels only */
    assert_true(pl.copies[3 * i + 1] != f->ctx_a[0] && pl.copies[3 * i + 1] != f->ctx_a[1]);
  kept_plan_free(&pl);
  assert_int_equal(f->s->kept.n, 0);
  assert_int_equal(f->be.live, 0);
  fx_free(f);
}

/* A take of something the device does not hold fails the job with
 * SCHEDRUN_EDEPEND, naming the job and the buffer; what it did find is
 * still taken (the taker consumes its hand-offs, ran or not). */
static void missing_producer_is_named(void **state) {
  (void)state;
  fixture *f = fx_new();
  uint32_t keep_x[] = {0};
  test_job a, b;
  job_init(&a, 40, keep_x, 1, NULL, 0);
  uint64_t takes[] = {0, 40, 0, 1, 39, 0}; /* x from 40 (here), y from 39 (never ran) */
  job_init(&b, 41, NULL, 0, takes, 2);
  kept_plan pl = {0};
  schedrun_error_t err = {0};
  assert_int_equal(plan_commit(f, &a, false, &pl, SIZE_MAX, 0, &err), SCHEDRUN_OK);
  kept_plan_free(&pl);
  assert_int_equal(plan_commit(f, &b, true, &pl, 0, 0, &err), SCHEDRUN_EDEPEND);
  assert_non_null(strstr(err.message, "job 39"));
  assert_non_null(strstr(err.message, "'y'"));
  assert_non_null(strstr(err.message, "stub:0"));
  schedrun_error_clear(&err);
  kept_plan_free(&pl);
  assert_int_equal(f->s->kept.n, 0);
  assert_int_equal(f->be.live, 0);
  fx_free(f);
}

/* A job that failed keeps nothing; jobs planned after it in one submission
 * change nothing; a spill whose copy never ran gives its parcel back and
 * leaves the buffer where it was. */
static void a_failed_job_commits_only_what_ran(void **state) {
  (void)state;
  fixture *f = fx_new();
  uint32_t keep_y[] = {1};
  test_job a, b, c;
  job_init(&a, 50, keep_y, 1, NULL, 0);
  uint64_t tc[] = {1, 50, 0};
  job_init(&b, 51, keep_y, 1, NULL, 0); /* same context: spills a's y, keeps its own */
  job_init(&c, 52, NULL, 0, tc, 1);
  kept_plan pl = {0};
  schedrun_error_t err = {0};
  assert_int_equal(plan_commit(f, &a, false, &pl, SIZE_MAX, 0, &err), SCHEDRUN_OK);
  kept_plan_free(&pl);
  /* b and c planned as one submission (positions 0 and 1) on a scratch table */
  kept_table t;
  assert_true(kept_scratch(f->s, &t));
  context_run ca = ctx(f, false), cb = ctx(f, true);
  assert_int_equal(kept_plan_job(f->s, &t, &ca, &b.jr, 0, &pl, &err), SCHEDRUN_OK);
  assert_int_equal(kept_plan_job(f->s, &t, &cb, &c.jr, 1, &pl, &err), SCHEDRUN_OK);
  kept_table_free(&t);
  assert_int_equal(pl.ncopies, 6); /* b's spill, c's take from the parcel */
  assert_int_equal(f->be.live, 1);
  /* b failed before its spill ran: nothing changes, the parcel goes back */
  kept_commit(f->s, &pl, 0, 0);
  kept_plan_free(&pl);
  assert_int_equal(f->be.live, 0);
  assert_int_equal(f->s->kept.n, 1);
  assert_int_equal(f->s->kept.v[0].job, 50);
  assert_true(f->s->kept.v[0].in_context);
  /* planned again, b fails after its spill ran: a's y stays, in its parcel,
   * and b keeps nothing */
  assert_true(kept_scratch(f->s, &t));
  assert_int_equal(kept_plan_job(f->s, &t, &ca, &b.jr, 0, &pl, &err), SCHEDRUN_OK);
  kept_table_free(&t);
  kept_commit(f->s, &pl, 0, 1);
  kept_plan_free(&pl);
  assert_int_equal(f->s->kept.n, 1);
  assert_false(f->s->kept.v[0].in_context);
  assert_int_equal(f->be.live, 1);
  /* c takes it and frees it */
  assert_int_equal(plan_commit(f, &c, true, &pl, SIZE_MAX, 1, &err), SCHEDRUN_OK);
  kept_plan_free(&pl);
  assert_int_equal(f->s->kept.n, 0);
  assert_int_equal(f->be.live, 0);
  fx_free(f);
}

/* Without memory for a spill the job fails, and nothing is lost: the buffer
 * stays in its context for the next try. */
static void no_memory_for_a_spill(void **state) {
  (void)state;
  fixture *f = fx_new();
  uint32_t keep_x[] = {0};
  test_job a, b;
  job_init(&a, 60, keep_x, 1, NULL, 0);
  job_init(&b, 61, NULL, 0, NULL, 0);
  kept_plan pl = {0};
  schedrun_error_t err = {0};
  assert_int_equal(plan_commit(f, &a, false, &pl, SIZE_MAX, 0, &err), SCHEDRUN_OK);
  kept_plan_free(&pl);
  f->be.fail_allocs = 0;
  assert_int_equal(plan_commit(f, &b, false, &pl, 0, 0, &err), SCHEDRUN_ENOMEM);
  schedrun_error_clear(&err);
  kept_plan_free(&pl);
  assert_int_equal(f->s->kept.n, 1);
  assert_true(f->s->kept.v[0].in_context);
  assert_int_equal(f->be.live, 0);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chain_in_place),
      cmocka_unit_test(spilled_before_the_context_runs_again),
      cmocka_unit_test(fork_from_one_buffer),
      cmocka_unit_test(swapped_buffers_do_not_clobber),
      cmocka_unit_test(missing_producer_is_named),
      cmocka_unit_test(a_failed_job_commits_only_what_ran),
      cmocka_unit_test(no_memory_for_a_spill),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
