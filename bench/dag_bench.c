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
 *   chain of 100: a graph of 100 jobs, each adding 1 to one float it takes
 *           from the job before it, submitted and waited for, 50 times: the
 *           median cost per job (StarPU's peer: 100 tasks on one read-write
 *           handle, submitted and waited for, 50 times).
 *   diamond: four saxpy jobs on 4,096 floats, A -> B, C -> D (B and C take
 *           A's y as their x, D takes B's y as x and C's as y), submitted
 *           and waited for, 200 times: the median time per diamond; D's y
 *           is checked element by element.
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

static const char tiny_program[] =
    "version: 1\nname: tiny\n"
    "kernels:\n  tiny:\n    params: [ptr]\n    source: |\n"
    "      extern \"C\" __global__ void tiny(float *p) { if (threadIdx.x == 0) p[0] += 1.0f; }\n"
    "buffers:\n  p: {type: f32, count: 1}\n"
    "program:\n  - launch: {kernel: tiny, grid: 1, block: 1, args: [p]}\n"
    "expect:\n  p: {at: {0: \"$job + 1\"}}\n";

#define SAXPY_N 4096
static const char saxpy_program[] =
    "version: 1\nname: saxpy\n"
    "kernels:\n  saxpy:\n    params: [f32, ptr, ptr, i32]\n    source: |\n"
    "      extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) y[i] = a * x[i] + y[i];\n"
    "      }\n"
    "buffers:\n  x: {type: f32, count: 4096, init: {iota: {start: 0, step: 1}}}\n"
    "  y: {type: f32, count: 4096, init: {fill: 1.0}}\n"
    "program:\n  - launch: {kernel: saxpy, grid: 16, block: 256, args: [2.0, x, y, 4096]}\n";

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

/* Graph node k is job k (o.job = k, so that "$job + 1" is its value). */
static int add_node(schedrun_graph_t *g, schedrun_program_t *p, int k, int keep) {
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.job = k;
  o.keep_outputs = keep;
  int node;
  schedrun_error_t err = {0};
  if (schedrun_graph_job(g, p, &o, &node, &err)) bench_die("graph job", &err);
  return node;
}

static void handoff(schedrun_graph_t *g, int from, const char *fb, int to, const char *tb) {
  schedrun_error_t err = {0};
  if (schedrun_graph_handoff(g, from, fb, to, tb, &err)) bench_die("hand-off", &err);
}

/* n host devices, a program loaded from yaml and an empty graph. */
static schedrun_t *open_with(int devices, const char *yaml, const char *name, schedrun_program_t **p,
                             schedrun_graph_t **g) {
  schedrun_t *s = bench_open_host(devices, NULL);
  schedrun_error_t err = {0};
  if (schedrun_program_load_string(s, yaml, name, p, &err)) bench_die("load", &err);
  if (schedrun_graph_new(g, &err)) bench_die("graph", &err);
  return s;
}

/* A chain of 100 dependent jobs, submitted and waited for at a time,
 * `rounds` times (at most 50). */
static void deps100(int devices, int rounds) {
  enum { LEN = 100, ROUNDS = 50 };
  if (rounds > ROUNDS) rounds = ROUNDS;
  schedrun_program_t *p;
  schedrun_graph_t *g;
  schedrun_t *s = open_with(devices, tiny_program, "tiny", &p, &g);
  schedrun_error_t err = {0};
  for (int k = 0; k < LEN; k++) {
    int node = add_node(g, p, k, 0);
    if (k) handoff(g, node - 1, "p", node, "p");
  }
  schedrun_job_t ids[LEN];
  schedrun_job_result_t *rs[LEN];
  double per[ROUNDS];
  for (int r = -3; r < rounds; r++) { /* 3 to warm: compiled and recorded */
    uint64_t t0 = bench_ns();
    if (schedrun_graph_submit(s, g, ids, &err)) bench_die("submit", &err);
    if (schedrun_wait_many(s, LEN, ids, -1, rs, &err)) bench_die("wait", &err);
    if (r >= 0) per[r] = (double)(bench_ns() - t0) / LEN;
    for (int k = 0; k < LEN; k++) { /* each verified its own value, $job + 1 */
      if (schedrun_job_result_info(rs[k])->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(rs[k]), NULL);
      schedrun_job_result_free(&rs[k]);
    }
  }
  printf("dag_deps100_%ddev_ns_per_job=%.0f\n", devices, bench_median(per, rounds));
  schedrun_graph_free(&g);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* Four saxpy jobs in a diamond, submitted and waited for at a time,
 * `rounds` times (at most 200). */
static void diamond(int devices, int rounds) {
  enum { ROUNDS = 200 };
  if (rounds > ROUNDS) rounds = ROUNDS;
  schedrun_program_t *p;
  schedrun_graph_t *g;
  schedrun_t *s = open_with(devices, saxpy_program, "saxpy", &p, &g);
  schedrun_error_t err = {0};
  int a = add_node(g, p, 0, 0), b = add_node(g, p, 1, 0), c = add_node(g, p, 2, 0), d = add_node(g, p, 3, 1);
  handoff(g, a, "y", b, "x");
  handoff(g, a, "y", c, "x");
  handoff(g, b, "y", d, "x");
  handoff(g, c, "y", d, "y");
  schedrun_job_t ids[4];
  schedrun_job_result_t *rs[4];
  double us[ROUNDS];
  for (int r = -3; r < rounds; r++) {
    uint64_t t0 = bench_ns();
    if (schedrun_graph_submit(s, g, ids, &err)) bench_die("submit", &err);
    if (schedrun_wait_many(s, 4, ids, -1, rs, &err)) bench_die("wait", &err);
    if (r >= 0) us[r] = (double)(bench_ns() - t0) / 1e3;
    for (int k = 0; k < 4; k++)
      if (schedrun_job_result_info(rs[k])->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(rs[k]), NULL);
    /* A: y = 2i + 1; B, C: 2(2i + 1) + 1; D: 2(4i + 3) + (4i + 3) */
    size_t bytes;
    const float *y = schedrun_job_result_output(rs[3], "y", &bytes);
    if (!y || bytes != SAXPY_N * sizeof(float)) bench_die("diamond: D's y is missing", NULL);
    for (int i = 0; i < SAXPY_N; i++)
      if (y[i] != 12.0f * (float)i + 9.0f) {
        fprintf(stderr, "diamond: y[%d] is %g, not %g\n", i, y[i], 12.0 * i + 9.0);
        exit(1);
      }
    for (int k = 0; k < 4; k++) schedrun_job_result_free(&rs[k]);
  }
  printf("dag_diamond_%ddev_us=%.1f\n", devices, bench_median(us, rounds));
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
  if (argc == 3 && !strcmp(argv[1], "--chain-only")) { /* R rounds of the chain on one device (callgrind) */
    deps100(1, atoi(argv[2]));
    return 0;
  }
  if (argc == 4 && !strcmp(argv[1], "--diamond-only")) { /* R diamonds on D devices (callgrind) */
    diamond(atoi(argv[2]), atoi(argv[3]));
    return 0;
  }
  if (argc == 2 && !strcmp(argv[1], "--deps-only")) { /* the chain of 100 and the diamond (run under load) */
    for (int d = 1; d <= 2; d++) {
      deps100(d, 50);
      diamond(d, 200);
    }
    return 0;
  }
  if (argc < 2 || strcmp(argv[1], "--wide-only") != 0)
    for (int d = 1; d <= 2; d++) {
      chains(d);
      deps100(d, 50);
      diamond(d, 200);
    }
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
