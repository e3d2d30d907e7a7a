/*
 * What a RECORD costs as programs grow, through the record actor on one host
 * device (every job sent to the record actor): for programs of N launches,
 * N = 100 to 100,000,
 *   create      the first job: the whole program recorded;
 *   update-one  a job whose one launch that reads $job changes (the other
 *               N - 1 cannot);
 *   update-all  a job whose every launch changes ($job in every one);
 *   reuse       a job that changes nothing.
 * Each with the record actor as shipped (only the steps that depend on the
 * job are evaluated again) and walking the whole program on every RECORD
 * (record_whole_program), in this one run. Medians of ROUNDS; record_ns is
 * the job's time from RECORD sent to RECORDED received.
 *
 * Prints record_<N>_<what>_us=<median> and record_<N>_<what>_whole_us=...
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "schedrun.h"

enum { ROUNDS = 5 };

/* N launches: all but one reading only constants and $iter (`one`), or
 * every one reading $job. */
static char *program(int n, bool one) {
  char *s = malloc(4096);
  snprintf(s, 4096,
           "version: 1\n"
           "kernels:\n  tiny:\n    params: [ptr, i32]\n    source: |\n"
           "      extern \"C\" __global__ void tiny(float *p, int i) { if (threadIdx.x == 0) p[i] += 1.0f; }\n"
           "buffers:\n  p: {type: f32, count: 64}\n"
           "program:\n  - loop:\n      trips: %d\n      body:\n"
           "        - launch: {kernel: tiny, grid: 1, block: 1, args: [p, \"%s\"]}\n"
           "%s",
           one ? n - 1 : n, one ? "$iter % 64" : "($iter + $job) % 64",
           one ? "  - launch: {kernel: tiny, grid: 1, block: 1, args: [p, \"$job % 64\"]}\n" : "");
  return s;
}

/* Runs one job, with job index `index`, and waits for it. */
static void job(schedrun_t *s, schedrun_program_t *p, int index, schedrun_job_info_t *info) {
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.job = index;
  schedrun_error_t err = {0};
  uint64_t id;
  if (schedrun_submit(s, p, &o, &id, &err)) bench_die("submit", &err);
  schedrun_job_result_t *r;
  if (schedrun_wait(s, id, -1, &r, &err)) bench_die("wait", &err);
  const schedrun_job_info_t *i = schedrun_job_result_info(r);
  if (i->status != SCHEDRUN_OK) bench_die("a job failed", NULL);
  *info = *i;
  schedrun_job_result_free(&r);
}

static double us(const schedrun_job_info_t *i) { return (double)i->record_ns / 1e3; }

static void measure(int n, bool whole) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  o.record_always = 1;
  o.record_whole_program = whole;
  schedrun_t *s;
  schedrun_error_t err = {0};
  if (schedrun_open(&s, &o, &err)) bench_die("open", &err);
  char *one = program(n, true), *all = program(n, false);
  double create[ROUNDS], upd1[ROUNDS], updn[ROUNDS], reuse[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    schedrun_program_t *p1, *pn;
    schedrun_job_info_t i;
    if (schedrun_program_load_string(s, one, "one.yaml", &p1, &err)) bench_die("load", &err);
    if (schedrun_program_load_string(s, all, "all.yaml", &pn, &err)) bench_die("load", &err);
    job(s, p1, 0, &i);
    if (i.nodes_created != (uint64_t)n) bench_die("expected a create", NULL);
    create[r] = us(&i);
    job(s, p1, 1, &i);
    if (i.nodes_updated != 1 || i.nodes_reused != (uint64_t)n - 1) bench_die("expected one update", NULL);
    upd1[r] = us(&i);
    job(s, p1, 1, &i);
    if (i.nodes_reused != (uint64_t)n) bench_die("expected reuse", NULL);
    reuse[r] = us(&i);
    job(s, pn, 0, &i);
    job(s, pn, 1, &i);
    if (i.nodes_updated != (uint64_t)n) bench_die("expected every node updated", NULL);
    updn[r] = us(&i);
    schedrun_program_free(&p1);
    schedrun_program_free(&pn);
  }
  const char *w = whole ? "_whole" : "";
  printf("record_%d_create%s_us=%.1f\nrecord_%d_update_one%s_us=%.1f\nrecord_%d_update_all%s_us=%.1f\n"
         "record_%d_reuse%s_us=%.1f\n",
         n, w, bench_median(create, ROUNDS), n, w, bench_median(upd1, ROUNDS), n, w, bench_median(updn, ROUNDS), n, w,
         bench_median(reuse, ROUNDS));
  fflush(stdout);
  free(one);
  free(all);
  schedrun_close(&s);
}

int main(void) {
  static const int sizes[] = {100, 1000, 10000, 100000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    measure(sizes[k], false);
    measure(sizes[k], true);
  }
  return 0;
}
