/*
 * Job graph benchmarks, on warm caches, one and two host devices:
 *   chains: 1,000 chains of 10 jobs, each job adding 1 to a buffer of 1,024
 *           floats it takes from the job before it (a graph per chain, a
 *           hand-off per edge), all submitted at once: time per job;
 *   step latency: one chain of 10 at a time, submitted as a graph and its
 *           last job waited for, against the same 10 steps driven by the
 *           caller (submit, wait, take the output, submit the next job with
 *           it as input): time per step, median of 200 chains.
 *   wide submit: graphs of 800, 3,200 and 10,000 jobs, each after the 50
 *           before it (schedrun_graph_after): the time schedrun_graph_submit
 *           takes (checks, registration, edges), median of 3.
 * Every job's result is checked. Prints key=value lines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "schedrun.h"

#define N 1024
#define CHAIN 10
#define CHAINS 1000
#define LAT_CHAINS 200

static const char incr_program[] =
    "version: 1\nname: incr\n"
    "kernels:\n  incr:\n    params: [ptr, i32]\n    source: |\n"
    "      extern \"C\" __global__ void incr(float *x, int n) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) x[i] += 1.0f;\n"
    "      }\n"
    "buffers:\n  x: {type: f32, count: 1024}\n"
    "program:\n  - launch: {kernel: incr, grid: 4, block: 256, args: [x, 1024]}\n"
    "expect:\n  x: {at: {0: \"$job + 1\", 1023: \"$job + 1\"}}\n";

static schedrun_graph_t *chain_graph(schedrun_program_t *p) {
  schedrun_graph_t *g;
  schedrun_error_t err = {0};
  if (schedrun_graph_new(&g, &err)) bench_die("graph", &err);
  for (int k = 0; k < CHAIN; k++) {
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.job = k;
    int node;
    if (schedrun_graph_job(g, p, &o, &node, &err)) bench_die("graph job", &err);
    if (k && schedrun_graph_handoff(g, node - 1, "x", node, "x", &err)) bench_die("hand-off", &err);
  }
  return g;
}

static void check(schedrun_t *s, schedrun_job_t id) {
  schedrun_job_result_t *r;
  schedrun_error_t err = {0};
  if (schedrun_wait(s, id, -1, &r, &err)) bench_die("wait", &err);
  if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) {
    fprintf(stderr, "job %llu: %s\n", (unsigned long long)id, schedrun_job_result_error(r));
    exit(1);
  }
  schedrun_job_result_free(&r);
}

static void chains(int devices) {
  schedrun_t *s = bench_open_host(devices, NULL);
  schedrun_error_t err = {0};
  schedrun_program_t *p;
  if (schedrun_program_load_string(s, incr_program, "incr", &p, &err)) bench_die("load", &err);
  schedrun_graph_t *g = chain_graph(p);
  schedrun_job_t *ids = malloc(CHAINS * CHAIN * sizeof *ids);
  /* warm: compiled, recorded on every device */
  for (int c = 0; c < 4; c++) {
    if (schedrun_graph_submit(s, g, ids, &err)) bench_die("submit", &err);
    for (int k = 0; k < CHAIN; k++) check(s, ids[k]);
  }
  uint64_t t0 = bench_ns();
  for (int c = 0; c < CHAINS; c++)
    if (schedrun_graph_submit(s, g, &ids[c * CHAIN], &err)) bench_die("submit", &err);
  for (int i = 0; i < CHAINS * CHAIN; i++) check(s, ids[i]);
  double per_job = (double)(bench_ns() - t0) / (CHAINS * CHAIN);
  printf("dag_chains_%ddev_ns_per_job=%.0f\n", devices, per_job);

  /* one chain at a time: as a graph, and driven by the caller */
  double graph_us[LAT_CHAINS], caller_us[LAT_CHAINS];
  schedrun_job_t one[CHAIN];
  for (int c = 0; c < LAT_CHAINS; c++) {
    uint64_t a = bench_ns();
    if (schedrun_graph_submit(s, g, one, &err)) bench_die("submit", &err);
    schedrun_job_result_t *rs[CHAIN];
    if (schedrun_wait_many(s, CHAIN, one, -1, rs, &err)) bench_die("wait", &err);
    graph_us[c] = (double)(bench_ns() - a) / 1e3 / CHAIN;
    for (int k = 0; k < CHAIN; k++) {
      if (schedrun_job_result_info(rs[k])->status != SCHEDRUN_OK) bench_die("graph chain", NULL);
      schedrun_job_result_free(&rs[k]);
    }
  }
  for (int c = 0; c < LAT_CHAINS; c++) {
    uint64_t a = bench_ns();
    float *x = NULL;
    for (int k = 0; k < CHAIN; k++) {
      schedrun_job_options_t o;
      schedrun_job_options_init(&o);
      o.job = k;
      o.keep_outputs = 1;
      schedrun_input_t in = {"x", x, N * sizeof(float)};
      if (x) {
        o.inputs = &in;
        o.ninputs = 1;
      }
      schedrun_job_t id;
      schedrun_job_result_t *r;
      if (schedrun_submit(s, p, &o, &id, &err) || schedrun_wait(s, id, -1, &r, &err)) bench_die("step", &err);
      if (schedrun_job_result_info(r)->status != SCHEDRUN_OK) bench_die("step result", NULL);
      size_t bytes;
      const float *out = schedrun_job_result_output(r, "x", &bytes);
      if (!x) x = malloc(N * sizeof(float));
      memcpy(x, out, bytes);
      schedrun_job_result_free(&r);
    }
    if (x[0] != (float)CHAIN) bench_die("caller chain", NULL);
    free(x);
    caller_us[c] = (double)(bench_ns() - a) / 1e3 / CHAIN;
  }
  printf("dag_graph_%ddev_us_per_step=%.1f\n", devices, bench_median(graph_us, LAT_CHAINS));
  printf("dag_caller_%ddev_us_per_step=%.1f\n", devices, bench_median(caller_us, LAT_CHAINS));
  free(ids);
  schedrun_graph_free(&g);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

static void wide(schedrun_t *s, schedrun_program_t *p, int n) {
  schedrun_error_t err = {0};
  schedrun_graph_t *g;
  if (schedrun_graph_new(&g, &err)) bench_die("graph", &err);
  for (int k = 0; k < n; k++) {
    schedrun_job_options_t o;
    schedrun_job_options_init(&o); /* job 0: its buffer starts at 0 and ends at 1 */
    int node;
    if (schedrun_graph_job(g, p, &o, &node, &err)) bench_die("graph job", &err);
    for (int b = node - 50 < 0 ? 0 : node - 50; b < node; b++)
      if (schedrun_graph_after(g, node, b, &err)) bench_die("after", &err);
  }
  schedrun_job_t *ids = malloc((size_t)n * sizeof *ids);
  double ms[3];
  for (int r = 0; r < 3; r++) {
    uint64_t t0 = bench_ns();
    if (schedrun_graph_submit(s, g, ids, &err)) bench_die("submit", &err);
    ms[r] = (double)(bench_ns() - t0) / 1e6;
    for (int i = 0; i < n; i++) check(s, ids[i]);
  }
  printf("dag_submit_%d_nodes_ms=%.1f\n", n, bench_median(ms, 3));
  free(ids);
  schedrun_graph_free(&g);
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--wide-only") != 0)
    for (int d = 1; d <= 2; d++) chains(d);
  schedrun_t *s = bench_open_host(2, NULL);
  schedrun_error_t err = {0};
  schedrun_program_t *p;
  if (schedrun_program_load_string(s, incr_program, "incr", &p, &err)) bench_die("load", &err);
  const int sizes[] = {800, 3200, 10000};
  for (int i = 0; i < 3; i++) wide(s, p, sizes[i]);
  schedrun_program_free(&p);
  schedrun_close(&s);
  return 0;
}
