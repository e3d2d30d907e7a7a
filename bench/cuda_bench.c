/*
 * GPU benchmark (run by tests/gpu/run.sh): 1000 tiny kernels
 *   - launched one by one on a stream (one synchronisation at the end),
 *   - replayed as one recorded sequence (a CUDA graph),
 * in microseconds per kernel; and updating every node of the graph in place
 * vs building and instantiating it again. Exits 77 where there is no GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"
#include "gpu/backend.h"

#define N 1000

static double now_us(void) { return bench_ns() / 1e3; }


static uint64_t args[N][2];

/* Launch i of the benchmark: one block of 32 threads of `tiny`. */
static gpu_node launch_node(gpu_function fn, int i) {
  gpu_node n = {.kind = GN_LAUNCH};
  n.u.launch.fn = fn;
  n.u.launch.grid[0] = n.u.launch.grid[1] = n.u.launch.grid[2] = 1;
  n.u.launch.block[0] = 32, n.u.launch.block[1] = n.u.launch.block[2] = 1;
  n.u.launch.args = args[i];
  n.u.launch.nargs = 2;
  return n;
}

static gpu_seq *build(gpu_backend *b, gpu_function fn, schedrun_error_t *err) {
  gpu_seq *s;
  if (b->ops->seq_create(b, 0, &s, err)) bench_die("seq_create", err);
  for (int i = 0; i < N; i++) {
    gpu_node n = launch_node(fn, i);
    uint32_t idx;
    if (b->ops->seq_add(s, &n, &idx, err)) bench_die("seq_add", err);
  }
  if (b->ops->seq_finalize(s, err)) bench_die("seq_finalize", err);
  return s;
}

int main(void) {
  gpu_backend *b;
  schedrun_error_t err = {0};
  if (gpu_cuda_open(NULL, 0, 30000, &b, &err)) {
    printf("skipped: %s\n", err.message);
    return 77;
  }
  void *ctx;
  char *log = NULL;
  if (gpu_cuda_target.open(&ctx, &err)) bench_die("nvrtc", &err);
  prog_type params[] = {PT_PTR, PT_I32};
  gpu_compile_req req = {"tiny", "tiny",
                         "extern \"C\" __global__ void tiny(float *p, int i) { if (threadIdx.x == 0) p[i] += 1.0f; }\n",
                         "bench.cu", 1, params, 2, b->ops->arch(b, 0)};
  uint8_t *img;
  size_t len;
  if (gpu_cuda_target.compile(ctx, &req, "/tmp", &img, &len, &log, &err)) bench_die("compile", &err);
  gpu_module *m;
  gpu_function fn;
  if (b->ops->module_load(b, 0, img, len, &m, &err) || b->ops->module_function(b, m, "tiny", &fn, &err)) bench_die("load", &err);
  uint64_t buf;
  if (b->ops->mem_alloc(b, 0, 64 * 4, &buf, &err) || b->ops->mem_zero(b, 0, buf, 64 * 4, &err)) bench_die("alloc", &err);
  for (int i = 0; i < N; i++) {
    args[i][0] = buf;
    int32_t v = i % 64;
    memcpy(&args[i][1], &v, 4);
  }
  enum { REPS = 15 };
  double stream[REPS], graph[REPS], update[REPS], rebuild[REPS];
  gpu_seq *s = build(b, fn, &err);
  for (int r = 0; r < REPS; r++) {
    double t0 = now_us();
    for (int i = 0; i < N; i++) {
      gpu_node n = launch_node(fn, i);
      if (b->ops->launch(b, 0, &n, i == N - 1, &err)) bench_die("launch", &err);
    }
    double t1 = now_us();
    if (b->ops->seq_launch(s, 0, NULL, &err)) bench_die("seq_launch", &err);
    double t2 = now_us();
    for (int i = 0; i < N; i++) {
      int32_t v = (i + r + 1) % 64;
      memcpy(&args[i][1], &v, 4);
      gpu_node n = launch_node(fn, i);
      if (b->ops->seq_update(s, (uint32_t)i, &n, &err)) bench_die("seq_update", &err);
    }
    double t3 = now_us();
    gpu_seq *fresh = build(b, fn, &err);
    double t4 = now_us();
    b->ops->seq_destroy(fresh);
    stream[r] = (t1 - t0) / N;
    graph[r] = (t2 - t1) / N;
    update[r] = t3 - t2;
    rebuild[r] = t4 - t3;
  }
  /* every launch added 1 somewhere: the total proves they all ran */
  float h[64];
  if (b->ops->copy_dtoh(b, 0, h, buf, sizeof h, &err)) bench_die("copy", &err);
  double total = 0;
  for (int i = 0; i < 64; i++) total += h[i];
  if (total != 2.0 * REPS * N) {
    fprintf(stderr, "cuda_bench: %g kernel runs counted, expected %d\n", total, 2 * REPS * N);
    return 1;
  }
  double ms = bench_median(stream, REPS), mg = bench_median(graph, REPS), mu = bench_median(update, REPS), mr = bench_median(rebuild, REPS);
  printf("gpu %s (%s): stream %.2f us/kernel, graph replay %.2f us/kernel (%.1fx); update 1000 nodes %.0f us, "
         "rebuild+instantiate %.0f us (%.1fx)\n",
         b->ops->device_name(b, 0), b->ops->arch(b, 0), ms, mg, ms / mg, mu, mr, mr / mu);
  b->ops->seq_destroy(s);
  b->ops->module_unload(b, m);
  b->ops->mem_free(b, 0, buf);
  free(img);
  free(log);
  gpu_cuda_target.close(ctx);
  gpu_backend_close(&b);
  return 0;
}
