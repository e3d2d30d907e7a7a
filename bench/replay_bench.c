/*
 * Replay benchmarks:
 *   1. 1000 tiny launches on the host backend: called directly (the kernel's
 *      own cost), replayed from a recorded sequence, and run eagerly (each
 *      launch's arguments evaluated and packed, then launched on its own):
 *      ns per launch, and the dispatch cost of replay beside the kernel. Once
 *      with the kernels in this process (where a direct call is possible) and
 *      once in the device's worker process (replay and eager only: one
 *      request per sequence, one per eager launch).
 *   2. Recording that 1000-launch program through the record actor: create
 *      vs update in place (every node's scalar changed) vs reuse.
 *   3. Memory per recorded node, from the allocator's counters.
 */
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/backend.h"
#include "program/program.h"
#include "bench/bench_util.h"
#include "schedrun.h"

#define N 1000

static double md_in_process; /* the direct cost measured in-process, for the worker's dispatch */



typedef void (*tramp)(const uint32_t *, const uint32_t *, const uint64_t *);

static void backend_bench(bool in_process) {
  schedrun_error_t err = {0};
  gpu_backend *b;
  gpu_open_opts o = {NULL, 30000, in_process};
  if (gpu_host_open(1, &o, &b, &err)) bench_die("host", &err);
  prog_type params[] = {PT_PTR, PT_I32};
  gpu_compile_req req = {"tiny", "tiny",
                         "extern \"C\" __global__ void tiny(float *p, int i) { if (threadIdx.x == 0) p[i] += 1.0f; }\n",
                         "bench.cu", 1, params, 2, "x86_64"};
  uint8_t *img;
  size_t len;
  char *log = NULL;
  if (gpu_host_target.compile(NULL, &req, "/tmp", &img, &len, &log, &err)) bench_die("compile", &err);
  free(log);
  gpu_module *m;
  gpu_function fn;
  if (b->ops->module_load(b, 0, img, len, &m, &err) || b->ops->module_function(b, m, "tiny", &fn, &err))
    bench_die("load", &err);
  free(img);
  uint64_t buf;
  b->ops->mem_alloc(b, 0, 64 * 4, &buf, &err);
  b->ops->mem_zero(b, 0, buf, 64 * 4, &err);

  static uint64_t args[N][2];
  uint32_t one[3] = {1, 1, 1};
  gpu_seq *s;
  b->ops->seq_create(b, 0, &s, &err);
  for (int i = 0; i < N; i++) {
    args[i][0] = buf;
    int32_t v = i % 64;
    args[i][1] = 0;
    memcpy(&args[i][1], &v, 4);
    gpu_node n = {.kind = GN_LAUNCH};
    n.u.launch.fn = fn;
    memcpy(n.u.launch.grid, one, sizeof one);
    memcpy(n.u.launch.block, one, sizeof one);
    n.u.launch.args = args[i];
    n.u.launch.nargs = 2;
    uint32_t idx;
    if (b->ops->seq_add(s, &n, &idx, &err)) bench_die("seq_add", &err);
  }
  prog_expr e;
  char why[128];
  if (prog_expr_parse("$iter % 64", 1, &e, why, sizeof why)) bench_die(why, NULL);

  enum { REPS = 300, BATCHES = 9 };
  double direct[BATCHES], replay[BATCHES], eager[BATCHES];
  for (int bt = 0; bt < BATCHES; bt++) {
    uint64_t t0 = bench_ns();
    for (int r = 0; in_process && r < REPS; r++) /* the function lives in this process */
      for (int i = 0; i < N; i++) ((tramp)fn)(one, one, args[i]);
    uint64_t t1 = bench_ns();
    for (int r = 0; r < REPS; r++) b->ops->seq_launch(s, 0, NULL, &err);
    uint64_t t2 = bench_ns();
    prog_env env = {{0}};
    for (int r = 0; r < REPS; r++)
      for (int i = 0; i < N; i++) {
        /* what a runtime without recording does per launch */
        env.v[0] = i;
        prog_value v;
        prog_expr_eval(&e, &env, &v);
        uint64_t a[2] = {buf, 0};
        int32_t iv = (int32_t)v.i;
        memcpy(&a[1], &iv, 4);
        gpu_node n = {.kind = GN_LAUNCH};
        n.u.launch.fn = fn;
        memcpy(n.u.launch.grid, one, sizeof one);
        memcpy(n.u.launch.block, one, sizeof one);
        n.u.launch.args = a;
        n.u.launch.nargs = 2;
        b->ops->launch(b, 0, &n, true, &err);
      }
    uint64_t t3 = bench_ns();
    direct[bt] = (double)(t1 - t0) / (REPS * N);
    replay[bt] = (double)(t2 - t1) / (REPS * N);
    eager[bt] = (double)(t3 - t2) / (REPS * N);
  }
  /* every launch ran, every time: element k was incremented once per launch
   * i with i % 64 == k, per repetition of each way of running */
  float h[64];
  b->ops->copy_dtoh(b, 0, h, buf, sizeof h, &err);
  for (int k = 0; k < 64; k++) {
    double want = (double)BATCHES * (in_process ? 3 : 2) * REPS * (N / 64 + (k < N % 64));
    if (h[k] != (float)want) {
      fprintf(stderr, "element %d is %.0f, expected %.0f\n", k, h[k], want);
      bench_die("the launches did not all run", NULL);
    }
  }
  double md = bench_median(direct, BATCHES), mr = bench_median(replay, BATCHES), me = bench_median(eager, BATCHES);
  if (in_process) md_in_process = md;
  if (in_process)
    printf("direct_ns=%.2f\nreplay_ns=%.2f\neager_ns=%.2f\ndispatch_ns=%.2f\neager_over_replay=%.2f\n", md, mr, me,
           mr - md, me / mr);
  else
    printf("worker_replay_ns=%.2f\nworker_eager_ns=%.2f\nworker_dispatch_ns=%.2f\n", mr, me, mr - md_in_process);
  prog_expr_free(&e);
  b->ops->seq_destroy(s);
  b->ops->module_unload(b, m);
  b->ops->mem_free(b, 0, buf);
  gpu_backend_close(&b);
}

static char *loop_program(int trips) {
  char *s = malloc(2048);
  snprintf(s, 2048,
           "version: 1\n"
           "kernels:\n  tiny:\n    params: [ptr, i32]\n    source: |\n"
           "      extern \"C\" __global__ void tiny(float *p, int i) { if (threadIdx.x == 0) p[i] += 1.0f; }\n"
           "buffers:\n  p: {type: f32, count: 64}\n"
           "program:\n  - loop:\n      trips: %d\n      body:\n"
           "        - launch: {kernel: tiny, grid: 1, block: 1, args: [p, \"($iter + $job) %% 64\"]}\n",
           trips);
  return s;
}

static void record_bench(void) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  o.record_always = 1; /* every job goes through the record actor: what is timed */
  schedrun_t *s;
  schedrun_error_t err = {0};
  if (schedrun_open(&s, &o, &err)) bench_die("open", &err);
  char *text = loop_program(N);
  enum { ROUNDS = 9 };
  double create[ROUNDS], update[ROUNDS], reuse[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    schedrun_program_t *p;
    if (schedrun_program_load_string(s, text, "loop.yaml", &p, &err)) bench_die("load", &err);
    schedrun_run_options_t ro;
    schedrun_run_options_init(&ro);
    schedrun_report_t *rep;
    schedrun_job_info_t j0, j1;
    ro.jobs = 1;
    if (schedrun_run(s, p, &ro, &rep, &err)) bench_die("run", &err);
    schedrun_report_job(rep, 0, 0, &j0);
    if (j0.nodes_created != N) bench_die("expected a create", NULL);
    create[r] = j0.record_ns / 1e3;
    schedrun_report_free(&rep);
    ro.jobs = 2; /* job 0 as recorded: reuse; job 1: every node's scalar changes */
    if (schedrun_run(s, p, &ro, &rep, &err)) bench_die("run", &err);
    schedrun_report_job(rep, 0, 0, &j0);
    schedrun_report_job(rep, 0, 1, &j1);
    if (j0.nodes_reused != N || j1.nodes_updated != N) bench_die("expected reuse then update", NULL);
    reuse[r] = j0.record_ns / 1e3;
    update[r] = j1.record_ns / 1e3;
    schedrun_report_free(&rep);
    schedrun_program_free(&p);
  }
  printf("record_create_us=%.1f\nrecord_update_us=%.1f\nrecord_reuse_us=%.1f\n", bench_median(create, ROUNDS),
         bench_median(update, ROUNDS), bench_median(reuse, ROUNDS));
  free(text);

  /* memory per recorded node: two recordings that differ by 100,000 nodes */
  size_t used[2];
  int trips[2] = {1000, 101000};
  schedrun_program_t *keep[2];
  for (int k = 0; k < 2; k++) {
    text = loop_program(trips[k]);
    malloc_trim(0);
    struct mallinfo2 mi = mallinfo2();
    size_t before = mi.uordblks + mi.hblkhd;
    if (schedrun_program_load_string(s, text, "mem.yaml", &keep[k], &err)) bench_die("load", &err);
    schedrun_report_t *rep;
    if (schedrun_run(s, keep[k], NULL, &rep, &err)) bench_die("run", &err);
    schedrun_report_free(&rep);
    mi = mallinfo2();
    used[k] = mi.uordblks + mi.hblkhd - before;
    free(text);
  }
  double per_node = (double)(used[1] - used[0]) / 100000.0;
  /* each node's two 8-byte argument slots are kept twice: in the record
   * actor (to compare) and in the backend's sequence (to replay) */
  printf("bytes_per_node=%.1f\nbytes_per_node_beside_args=%.1f\n", per_node, per_node - 32.0);
  schedrun_program_free(&keep[0]);
  schedrun_program_free(&keep[1]);
  schedrun_close(&s);
}

int main(void) {
  /* one malloc arena, so the allocator's counters see every thread */
  mallopt(M_ARENA_MAX, 1);
  backend_bench(true);
  backend_bench(false);
  record_bench();
  return 0;
}
