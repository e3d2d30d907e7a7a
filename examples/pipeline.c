/*
 * A three-stage pipeline as a job graph: produce on one device, transform on
 * another, reduce in a host task. The buffer moves from stage to stage
 * without the caller copying anything: device 0's result reaches device 1
 * in one copy, and the host task sees device 1's result as host memory.
 *
 *   cc pipeline.c $(pkg-config --cflags --libs schedrun) -o pipeline
 *   ./pipeline            (host:2; ./pipeline cuda on two GPUs)
 */
#include <stdio.h>
#include <stdlib.h>

#include <schedrun.h>

#define N 4096

/* A program of one buffer of N floats and one launch of `kernel` over it. */
static schedrun_program_t *one_kernel(const char *name, const char *kernel, const char *buffer, const char *source,
                                      schedrun_error_t *err) {
  schedrun_builder_t *b;
  if (schedrun_builder_new(&b, name, err)) return NULL;
  schedrun_builder_kernel(b, kernel, "ptr, i32", source, NULL);
  schedrun_builder_buffer(b, buffer, "f32", N, NULL, 0, 0);
  const unsigned grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
  const char *args[] = {buffer, "4096"};
  schedrun_builder_launch(b, kernel, grid, block, args, 2);
  schedrun_program_t *p = NULL;
  schedrun_builder_finish(b, &p, err);
  schedrun_builder_free(&b);
  return p;
}

/* x[i] = (i + 1)^2 */
static schedrun_program_t *produce(schedrun_error_t *err) {
  return one_kernel("produce", "square", "x",
                    "extern \"C\" __global__ void square(float *x, int n) {\n"
                    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    "  if (i < n) x[i] = (i + 1.0f) * (i + 1.0f);\n"
                    "}\n",
                    err);
}

/* v[i] = v[i] / 2 + 1 */
static schedrun_program_t *transform(schedrun_error_t *err) {
  return one_kernel("transform", "halve", "v",
                    "extern \"C\" __global__ void halve(float *v, int n) {\n"
                    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    "  if (i < n) v[i] = v[i] * 0.5f + 1.0f;\n"
                    "}\n",
                    err);
}

/* The reduction, on the host: the sum of v, as a double, in buffer "sum". */
static int reduce(schedrun_host_task_t *t, void *user) {
  (void)user;
  size_t bytes = 0;
  const float *v = schedrun_host_task_buffer(t, "v", &bytes);
  double *sum = schedrun_host_task_output(t, "sum", sizeof *sum);
  if (!v || bytes != N * sizeof(float)) return schedrun_host_task_fail(t, "no buffer v of 4096 floats");
  if (!sum) return SCHEDRUN_ENOMEM;
  for (size_t i = 0; i < N; i++) *sum += v[i];
  return 0;
}

int main(int argc, char **argv) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = argc > 1 ? argv[1] : "host:2";
  schedrun_t *s = NULL;
  schedrun_error_t err = {0};
  schedrun_program_t *pp = NULL, *pt = NULL;
  schedrun_graph_t *g = NULL;
  int status = 1;
  if (schedrun_open(&s, &o, &err) || !(pp = produce(&err)) || !(pt = transform(&err)) || schedrun_graph_new(&g, &err))
    goto out;
  int two = schedrun_device_count(s) > 1;
  schedrun_job_options_t on0, on1;
  schedrun_job_options_init(&on0);
  schedrun_job_options_init(&on1);
  on0.device = 0;
  on1.device = two ? 1 : 0;
  int a, b, c;
  if (schedrun_graph_job(g, pp, &on0, &a, &err) || schedrun_graph_job(g, pt, &on1, &b, &err) ||
      schedrun_graph_host(g, "reduce", reduce, NULL, &c, &err) ||
      schedrun_graph_handoff(g, a, "x", b, "v", &err) || schedrun_graph_handoff(g, b, "v", c, "v", &err))
    goto out;
  schedrun_job_t ids[3];
  if (schedrun_graph_submit(s, g, ids, &err)) goto out;
  schedrun_job_result_t *rs[3] = {NULL, NULL, NULL};
  int ok = 1;
  for (int i = 0; i < 3; i++)
    if (schedrun_wait(s, ids[i], -1, &rs[i], &err) || schedrun_job_result_info(rs[i])->status != SCHEDRUN_OK) {
      fprintf(stderr, "pipeline: %s: %s\n", schedrun_graph_node_name(g, (size_t)i),
              rs[i] ? schedrun_job_result_error(rs[i]) : err.message);
      ok = 0;
    }
  if (ok) {
    const double *sum = schedrun_job_result_output(rs[2], "sum", NULL);
    double want = 0;
    for (int i = 1; i <= N; i++) want += (double)i * i * 0.5 + 1.0;
    const schedrun_job_info_t *ib = schedrun_job_result_info(rs[1]);
    printf("pipeline: produce on %s, transform on %s (its input %s), reduce on the host: sum %.0f "
           "(expected %.0f)\n",
           schedrun_device_name(s, schedrun_job_result_info(rs[0])->device), schedrun_device_name(s, ib->device),
           ib->handoffs_peer ? "from its peer, device to device"
           : ib->handoffs_copied ? "copied through the host" : "on its device",
           sum ? *sum : -1.0, want);
    status = sum && *sum == want ? 0 : 1;
  }
  for (int i = 0; i < 3; i++) schedrun_job_result_free(&rs[i]);
out:
  if (err.message) fprintf(stderr, "pipeline: %s\n", err.message);
  schedrun_error_clear(&err);
  schedrun_graph_free(&g);
  schedrun_program_free(&pp);
  schedrun_program_free(&pt);
  schedrun_close(&s);
  return status;
}
