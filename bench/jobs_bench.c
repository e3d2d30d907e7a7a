/*
 * Job benchmarks through the whole pipeline (SUBMIT -> RECORD -> EXECUTE ->
 * COMPLETE), on warm caches:
 *   throughput: N independent single-launch jobs of an empty kernel, jobs/s;
 *   latency: one such job submitted and waited for, median and p99; and the
 *            same through schedrun_submit_wait;
 *   chain: one job of 100 tiny launches (a recorded sequence), run many
 *          times; cost per kernel.
 * With 1 and with 2 host devices, and in six modes measured in this one
 * run: as shipped, without batches, also without the receive spin, also
 * without the reuse fast path, as shipped but with the kernels in this
 * process (host_in_process: what containing faults in worker processes
 * costs), and as shipped but with the scheduler's messages on its own
 * thread only (no_caller_scheduling); and the cost per job with 10 to
 * 300,000 jobs kept in flight.
 * Prints key=value lines.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench/bench_util.h"
#include "schedrun.h"


static const char empty_program[] =
    "version: 1\nname: empty\n"
    "kernels:\n  empty:\n    params: []\n    source: |\n      extern \"C\" __global__ void empty() {}\n"
    "program:\n  - launch: {kernel: empty, grid: 1, block: 1, args: []}\n";

static const char chain_program[] =
    "version: 1\nname: chain\n"
    "kernels:\n  tiny:\n    params: [ptr]\n    source: |\n"
    "      extern \"C\" __global__ void tiny(float *p) { if (threadIdx.x == 0) p[0] += 1.0f; }\n"
    "buffers:\n  p: {type: f32, count: 1}\n"
    "program:\n  - loop:\n      trips: 100\n      body:\n"
    "        - launch: {kernel: tiny, grid: 1, block: 1, args: [p]}\n"
    "expect:\n  p: {values: [100]}\n";

/* mode 0: as shipped; 1: without batches; 2: also without the receive
 * spin; 3: also without the reuse fast path (every job RECORDed), i.e. the
 * pipeline as first built; 4: as shipped, kernels in this process (no fault
 * containment); 5: as shipped, but callers never run the scheduler's
 * messages (before that change) */
static int mode;
static const char *mode_name[] = {"", "nobatch_", "nospin_", "plain_", "inprocess_", "noguest_"};
#define NMODES 6

/* n host devices in the current mode */
static schedrun_t *open_host(int n) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.no_batching = mode >= 1 && mode <= 3;
  o.spin_us = mode == 2 || mode == 3 ? -1 : 0;
  o.record_always = mode == 3;
  o.host_in_process = mode == 4;
  o.no_caller_scheduling = mode == 5;
  return bench_open_host(n, &o);
}

static schedrun_program_t *load(schedrun_t *s, const char *text) {
  schedrun_program_t *p;
  schedrun_error_t err = {0};
  if (schedrun_program_load_string(s, text, "bench.yaml", &p, &err)) bench_die("load", &err);
  /* warm: compile and record once */
  schedrun_job_t id;
  schedrun_job_result_t *r;
  if (schedrun_submit(s, p, NULL, &id, &err) || schedrun_wait(s, id, -1, &r, &err)) bench_die("warm-up", &err);
  if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(r), NULL);
  schedrun_job_result_free(&r);
  return p;
}

/* Cost per job with W jobs kept in flight (a completion collected, another
 * submitted), W from 10 to 300,000: flat when the bookkeeping is. */
static void in_flight(int devices) {
  static const int windows[] = {10, 1000, 100000, 300000};
  char spec[16];
  snprintf(spec, sizeof spec, "host:%d", devices);
  schedrun_options_t so;
  schedrun_options_init(&so);
  so.devices = spec;
  so.max_inflight = 400000;
  schedrun_t *s;
  schedrun_error_t err = {0};
  if (schedrun_open(&s, &so, &err)) bench_die("open", &err);
  schedrun_program_t *p = load(s, empty_program);
  for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
    int window = windows[w], total = window * 2 < 200000 ? 200000 : window * 2;
    schedrun_job_options_t *o = calloc((size_t)window, sizeof *o);
    schedrun_job_t *ids = calloc((size_t)window, sizeof *ids);
    if (!o || !ids) bench_die("out of memory", NULL);
    for (int j = 0; j < window; j++) schedrun_job_options_init(&o[j]);
    uint64_t t0 = bench_ns();
    if (schedrun_submit_many(s, p, (size_t)window, o, ids, &err)) bench_die("submit_many", &err);
    for (int done = 0, sent = window; done < total; done++) {
      schedrun_job_t id;
      schedrun_job_result_t *r;
      if (schedrun_wait_any(s, -1, &id, &r, &err)) bench_die("wait", &err);
      if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(r), NULL);
      schedrun_job_result_free(&r);
      if (sent < total) {
        if (schedrun_submit(s, p, NULL, &id, &err)) bench_die("submit", &err);
        sent++;
      }
    }
    printf("inflight_%ddev_%d_ns_per_job=%.0f\n", devices, window, (double)(bench_ns() - t0) / total);
    free(o);
    free(ids);
  }
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static long resident_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return res * 4;
}

/* Submits n jobs of p ($job = 0..n-1), then collects every result. */
static void run_jobs(schedrun_t *s, schedrun_program_t *p, int n) {
  schedrun_error_t err = {0};
  for (int j = 0; j < n; j++) {
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.job = j;
    schedrun_job_t id;
    if (schedrun_submit(s, p, &o, &id, &err)) bench_die("submit", &err);
  }
  for (int j = 0; j < n; j++) {
    schedrun_job_t id;
    schedrun_job_result_t *r;
    if (schedrun_wait_any(s, -1, &id, &r, &err)) bench_die("wait", &err);
    if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(r), NULL);
    schedrun_job_result_free(&r);
  }
}

/* The same n jobs through schedrun_submit_many and schedrun_wait_many. */
static void run_jobs_many(schedrun_t *s, schedrun_program_t *p, int n, schedrun_job_options_t *o, schedrun_job_t *ids,
                          schedrun_job_result_t **res) {
  schedrun_error_t err = {0};
  for (int j = 0; j < n; j++) {
    schedrun_job_options_init(&o[j]);
    o[j].job = j;
  }
  if (schedrun_submit_many(s, p, (size_t)n, o, ids, &err)) bench_die("submit_many", &err);
  if (schedrun_wait_many(s, (size_t)n, ids, -1, res, &err)) bench_die("wait_many", &err);
  for (int j = 0; j < n; j++) {
    if (schedrun_job_result_info(res[j])->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(res[j]), NULL);
    schedrun_job_result_free(&res[j]);
  }
}

static void throughput_many(int devices, int n) {
  schedrun_t *s = open_host(devices);
  schedrun_program_t *p = load(s, empty_program);
  schedrun_job_options_t *o = calloc((size_t)n, sizeof *o);
  schedrun_job_t *ids = calloc((size_t)n, sizeof *ids);
  schedrun_job_result_t **res = calloc((size_t)n, sizeof *res);
  if (!o || !ids || !res) bench_die("out of memory", NULL);
  double best = 0;
  for (int round = 0; round < 3; round++) {
    uint64_t t0 = bench_ns();
    run_jobs_many(s, p, n, o, ids, res);
    double rate = n / ((bench_ns() - t0) / 1e9);
    if (rate > best) best = rate;
  }
  printf("many_throughput_%ddev_jobs_per_s=%.0f\n", devices, best);
  free(o);
  free(ids);
  free(res);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* CPU seconds and context switches of this process and of its children that
 * have ended (the host devices' workers, once the scheduler is closed). */
static void usage_now(double *cpu, long *csw) {
  *cpu = 0;
  *csw = 0;
  const int who[] = {RUSAGE_SELF, RUSAGE_CHILDREN};
  for (int k = 0; k < 2; k++) {
    struct rusage ru;
    getrusage(who[k], &ru);
    *cpu += ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    *csw += ru.ru_nvcsw + ru.ru_nivcsw;
  }
}

/* What n jobs cost the machine: CPU time and context switches per job, the
 * scheduler's threads and the device's worker process together, from open
 * to close (warm caches, so start-up is a small part of n jobs). */
static void cost(int devices, int n) {
  double cpu0, cpu1;
  long csw0, csw1;
  usage_now(&cpu0, &csw0);
  schedrun_t *s = open_host(devices);
  schedrun_program_t *p = load(s, empty_program);
  run_jobs(s, p, n);
  schedrun_program_free(&p);
  schedrun_close(&s);
  usage_now(&cpu1, &csw1);
  printf("cpu_%ddev_us_per_job=%.2f\ncsw_%ddev_per_job=%.2f\n", devices, (cpu1 - cpu0) * 1e6 / n, devices,
         (double)(csw1 - csw0) / n);
}

static void throughput(int devices, int n) {
  schedrun_t *s = open_host(devices);
  schedrun_program_t *p = load(s, empty_program);
  double best = 0;
  for (int round = 0; round < 3; round++) {
    uint64_t t0 = bench_ns();
    run_jobs(s, p, n);
    double rate = n / ((bench_ns() - t0) / 1e9);
    if (rate > best) best = rate;
  }
  printf("%sthroughput_%ddev_jobs_per_s=%.0f\n", mode_name[mode], devices, best);

  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* Resident memory over 100,000 jobs in waves of 1,000, after as many to warm
 * up: a leak or per-job growth would show as KiB per wave. */
static void memory(int devices) {
  schedrun_t *s = open_host(devices);
  schedrun_program_t *p = load(s, empty_program);
  long before = 0;
  for (int phase = 0; phase < 2; phase++) {
    if (phase == 1) before = resident_kib();
    for (int wave = 0; wave < 100; wave++) run_jobs(s, p, 1000);
  }
  long after = resident_kib();
  printf("rss_%ddev_kib=%ld\nrss_%ddev_growth_kib=%ld\n", devices, after, devices, after - before);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* One job at a time, n times: submitted and waited for; and (sync) through
 * schedrun_submit_wait, which runs a lone job on the calling thread. */
static void latency_run(schedrun_t *s, schedrun_program_t *p, int devices, int n, bool sync) {
  schedrun_error_t err = {0};
  double *v = malloc((size_t)n * sizeof *v);
  if (!v) bench_die("latency: out of memory", NULL);
  for (int i = 0; i < n; i++) {
    uint64_t t0 = bench_ns();
    schedrun_job_t id;
    schedrun_job_result_t *r;
    if (sync ? schedrun_submit_wait(s, p, NULL, &r, &err)
             : schedrun_submit(s, p, NULL, &id, &err) || schedrun_wait(s, id, -1, &r, &err))
      bench_die("latency", &err);
    v[i] = (bench_ns() - t0) / 1e3;
    if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(r), NULL);
    schedrun_job_result_free(&r);
  }
  qsort(v, (size_t)n, sizeof *v, bench_cmp);
  const char *what = sync ? "sync_" : "";
  printf("%s%slatency_%ddev_median_us=%.1f\n%s%slatency_%ddev_p99_us=%.1f\n", mode_name[mode], what, devices,
         v[n / 2], mode_name[mode], what, devices, v[n * 99 / 100]);
  free(v);
}

static void latency(int devices, int n) {
  schedrun_t *s = open_host(devices);
  schedrun_program_t *p = load(s, empty_program);
  latency_run(s, p, devices, n, false);
  latency_run(s, p, devices, n, true);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void chain(int devices, int n) {
  schedrun_t *s = open_host(devices);
  schedrun_program_t *p = load(s, chain_program);
  uint64_t t0 = bench_ns();
  run_jobs(s, p, n); /* each verifies its 100 increments */
  double per_kernel = (bench_ns() - t0) / (double)n / 100.0;
  printf("%schain_%ddev_ns_per_kernel=%.1f\n", mode_name[mode], devices, per_kernel);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--only-jobs")) {
    /* N jobs on D devices and nothing else, for a counter run around it
     * (bench/run.sh counts system calls with perf) */
    mode = 0;
    cost(atoi(argv[3]), atoi(argv[2]));
    return 0;
  }
  if (argc == 2 && !strcmp(argv[1], "--in-flight")) {
    for (int d = 1; d <= 2; d++) in_flight(d);
    return 0;
  }
  if (argc == 4 && !strcmp(argv[1], "--only-latency")) {
    /* N lone jobs on D devices, waited for one by one, and nothing else */
    mode = 0;
    latency(atoi(argv[2]), atoi(argv[3]) < 100 ? 100 : atoi(argv[3]));
    return 0;
  }
  if (argc == 4 && !strcmp(argv[1], "--only-many")) {
    throughput_many(atoi(argv[3]), atoi(argv[2]));
    return 0;
  }
  if ((argc == 3 || argc == 4) && !strcmp(argv[1], "--shipped")) {
    /* the shipped pipeline's figures only (or another mode's), for a quick look */
    int n = atoi(argv[2]) < 100 ? 100 : atoi(argv[2]);
    mode = argc == 4 ? atoi(argv[3]) : 0;
    if (mode < 0 || mode >= NMODES) mode = 0;
    for (int d = 1; d <= 2; d++) {
      throughput(d, n);
      throughput_many(d, n);
      latency(d, 5000);
      chain(d, 1000);
    }
    return 0;
  }
  int n = argc > 1 ? atoi(argv[1]) : 100000;
  if (n < 100) n = 100;
  /* resident memory first, while the heap holds nothing of the other phases */
  for (int d = 1; d <= 2; d++) memory(d);
  for (int d = 1; d <= 2; d++) in_flight(d);
  for (mode = 0; mode < NMODES; mode++) {
    int jobs = mode >= 1 && mode <= 3 ? n / 5 : n; /* the slower pipelines get fewer jobs */
    for (int d = 1; d <= 2; d++) {
      throughput(d, jobs);
      latency(d, 5000);
      chain(d, 1000);
      if (mode == 0) throughput_many(d, jobs);
      if (mode == 0) cost(d, jobs);
    }
  }
  return 0;
}
