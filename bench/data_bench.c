/*
 * Data-carrying jobs: N saxpy jobs (y = 2x + y) on 1,024 floats each, every
 * job with its own x and y, given as the job's inputs; y comes back in its
 * result, checked by the program's expectations (its first and last
 * element) and by this benchmark (every element of every 64th job). Jobs
 * go in windows of 256 (schedrun_submit_many, schedrun_wait_many), as
 * bench/peers/starpu_bench.c's (g) registers, submits and unregisters
 * 256 tasks' vectors at a time.
 *
 * Prints the CPU time per job (this process's threads and the host
 * devices' worker processes, from open to close) and the page faults per
 * job (minor and major, the same processes), on 1 device or on 2; then,
 * on 1 device, the same jobs on the caller's memory, registered and bound
 * (each job its own arrays, or all of them one pair in a chain): from
 * malloc (copied in and back) and from schedrun_host_alloc (used in place,
 * nothing copied).
 *   data_bench [N]
 * Prints key=value lines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/bench_util.h"
#include "schedrun.h"

enum { NX = 1024, WINDOW = 256 };

/* y = 2x + y over 1,024 floats: the kernel, buffers and launch both
 * programs share after their name */
#define SAXPY_BODY                                                                \
  "kernels:\n  saxpy:\n    params: [ptr, ptr, i32]\n    source: |\n"               \
  "      extern \"C\" __global__ void saxpy(const float *x, float *y, int n) {\n" \
  "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"                     \
  "        if (i < n) y[i] = 2.0f * x[i] + y[i];\n"                              \
  "      }\n"                                                                    \
  "buffers:\n  x: {type: f32, count: 1024}\n  y: {type: f32, count: 1024}\n"      \
  "program:\n  - launch: {kernel: saxpy, grid: 4, block: 256, args: [x, y, 1024]}\n"

static const char saxpy_program[] = "version: 1\nname: saxpy_data\n" SAXPY_BODY
                                    "expect:\n  y: {at: {0: \"$job\", 1023: \"2 * 1023 + $job\"}}\n";

/* CPU seconds and page faults of this process and of its children that
 * have ended (the host devices' workers, once the scheduler is closed). */
static void usage_now(double *cpu, double *faults) {
  *cpu = *faults = 0;
  const int who[] = {RUSAGE_SELF, RUSAGE_CHILDREN};
  for (int k = 0; k < 2; k++) {
    struct rusage ru;
    getrusage(who[k], &ru);
    *cpu += ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    *faults += (double)(ru.ru_minflt + ru.ru_majflt);
  }
}

/* Runs n jobs in windows; every result verified. */
static void run(schedrun_t *s, schedrun_program_t *p, int n, float *xs, float *ys) {
  schedrun_job_options_t o[WINDOW];
  schedrun_input_t in[WINDOW][2];
  schedrun_job_t ids[WINDOW];
  schedrun_job_result_t *res[WINDOW];
  schedrun_error_t err = {0};
  for (int first = 0; first < n; first += WINDOW) {
    int w = n - first < WINDOW ? n - first : WINDOW;
    for (int k = 0; k < w; k++) {
      float *x = xs + (size_t)k * NX, *y = ys + (size_t)k * NX;
      for (int i = 0; i < NX; i++) {
        x[i] = (float)i;
        y[i] = (float)(first + k);
      }
      in[k][0] = (schedrun_input_t){"x", x, NX * sizeof(float)};
      in[k][1] = (schedrun_input_t){"y", y, NX * sizeof(float)};
      schedrun_job_options_init(&o[k]);
      o[k].job = first + k;
      o[k].inputs = in[k];
      o[k].ninputs = 2;
    }
    if (schedrun_submit_many(s, p, (size_t)w, o, ids, &err)) bench_die("submit_many", &err);
    if (schedrun_wait_many(s, (size_t)w, ids, -1, res, &err)) bench_die("wait_many", &err);
    for (int k = 0; k < w; k++) {
      const schedrun_job_info_t *info = schedrun_job_result_info(res[k]);
      if (info->status != SCHEDRUN_OK || !info->verified) bench_die(schedrun_job_result_error(res[k]), NULL);
      if ((first + k) % 64 == 0) {
        size_t bytes = 0;
        const float *y = schedrun_job_result_output(res[k], "y", &bytes);
        if (!y || bytes != NX * sizeof(float)) bench_die("no y in the result", NULL);
        for (int i = 0; i < NX; i++)
          if (y[i] != 2.0f * (float)i + (float)(first + k)) {
            fprintf(stderr, "job %d: y[%d] is %g\n", first + k, i, y[i]);
            exit(1);
          }
      }
      schedrun_job_result_free(&res[k]);
    }
  }
}

/* The same jobs on the caller's memory, registered (schedrun_buffer_register)
 * and bound, y checked in that memory after every window: each job of a
 * window with its own x and y, or (`chain`) every job on one x and one y,
 * each after the one before (y = 2x + y, 256 times). xs and ys come from
 * malloc (copied in and back) or from schedrun_host_alloc (used in place on
 * host devices). The program has no expectations: nothing is read back. */
static const char saxpy_bound_program[] = "version: 1\nname: saxpy_bound\n" SAXPY_BODY;

static void run_bound(schedrun_t *s, schedrun_program_t *p, int n, float *xs, float *ys, int chain) {
  schedrun_job_options_t o[WINDOW];
  schedrun_bind_t bd[WINDOW][2];
  schedrun_buffer_t *reg[WINDOW][2];
  schedrun_job_t ids[WINDOW];
  schedrun_job_result_t *res[WINDOW];
  schedrun_error_t err = {0};
  int nreg = chain ? 1 : WINDOW;
  for (int k = 0; k < nreg; k++)
    if (schedrun_buffer_register(s, xs + (size_t)k * NX, NX * sizeof(float), &reg[k][0], &err) ||
        schedrun_buffer_register(s, ys + (size_t)k * NX, NX * sizeof(float), &reg[k][1], &err))
      bench_die("register", &err);
  for (int first = 0; first < n; first += WINDOW) {
    int w = n - first < WINDOW ? n - first : WINDOW;
    for (int k = 0; k < nreg; k++)
      for (int i = 0; i < NX; i++) {
        xs[(size_t)k * NX + i] = (float)i;
        ys[(size_t)k * NX + i] = chain ? 0.0f : (float)(first + k);
      }
    for (int k = 0; k < w; k++) {
      int r = chain ? 0 : k;
      bd[k][0] = (schedrun_bind_t){"x", reg[r][0]};
      bd[k][1] = (schedrun_bind_t){"y", reg[r][1]};
      schedrun_job_options_init(&o[k]);
      o[k].job = first + k;
      o[k].binds = bd[k];
      o[k].nbinds = 2;
      if (chain && k) {
        o[k].after = &ids[k - 1];
        o[k].nafter = 1;
      }
    }
    if (chain) {
      for (int k = 0; k < w; k++)
        if (schedrun_submit(s, p, &o[k], &ids[k], &err)) bench_die("submit", &err);
    } else if (schedrun_submit_many(s, p, (size_t)w, o, ids, &err)) {
      bench_die("submit_many", &err);
    }
    if (schedrun_wait_many(s, (size_t)w, ids, -1, res, &err)) bench_die("wait_many", &err);
    for (int k = 0; k < w; k++) {
      if (schedrun_job_result_info(res[k])->status != SCHEDRUN_OK) bench_die(schedrun_job_result_error(res[k]), NULL);
      schedrun_job_result_free(&res[k]);
    }
    for (int k = 0; k < (chain ? 1 : w); k++)
      for (int i = 0; i < NX; i++) {
        float want = chain ? 2.0f * (float)i * (float)w : 2.0f * (float)i + (float)(first + k);
        if (ys[(size_t)k * NX + i] != want) {
          fprintf(stderr, "bound jobs from %d: y[%d] of %d is %g, wanted %g\n", first, i, k, ys[(size_t)k * NX + i], want);
          exit(1);
        }
      }
  }
  for (int k = 0; k < nreg; k++)
    if (schedrun_buffer_unregister(&reg[k][0], &err) || schedrun_buffer_unregister(&reg[k][1], &err))
      bench_die("unregister", &err);
}

/* CPU and faults per bound job on one device, the memory from malloc
 * (in_place 0) or from schedrun_host_alloc (1). */
static void bound_figures(int n, int in_place, int chain, float *heap_x, float *heap_y) {
  schedrun_error_t err = {0};
  double cpu0, cpu1, f0, f1;
  usage_now(&cpu0, &f0);
  schedrun_t *s = bench_open_host(1, NULL);
  schedrun_program_t *p;
  if (schedrun_program_load_string(s, saxpy_bound_program, "data_bench_bound.yaml", &p, &err)) bench_die("load", &err);
  float *xs = heap_x, *ys = heap_y;
  if (in_place && (schedrun_host_alloc(s, (size_t)WINDOW * NX * sizeof *xs, (void **)&xs, &err) ||
                   schedrun_host_alloc(s, (size_t)WINDOW * NX * sizeof *ys, (void **)&ys, &err)))
    bench_die("host_alloc", &err);
  run_bound(s, p, WINDOW, xs, ys, chain); /* warm */
  uint64_t t0 = bench_ns();
  run_bound(s, p, n, xs, ys, chain);
  double wall = (double)(bench_ns() - t0);
  if (in_place && (schedrun_host_free(s, xs, &err) || schedrun_host_free(s, ys, &err))) bench_die("host_free", &err);
  schedrun_program_free(&p);
  schedrun_close(&s);
  usage_now(&cpu1, &f1);
  char what[32];
  snprintf(what, sizeof what, "%s_%s", chain ? "chain" : "each", in_place ? "inplace" : "copied");
  printf("data_bound_%s_cpu_us_per_job=%.2f\ndata_bound_%s_faults_per_job=%.2f\ndata_bound_%s_jobs_per_s=%.0f\n", what,
         (cpu1 - cpu0) * 1e6 / (n + WINDOW), what, (f1 - f0) / (n + WINDOW), what, n / (wall / 1e9));
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 50000;
  float *xs = malloc((size_t)WINDOW * NX * sizeof *xs), *ys = malloc((size_t)WINDOW * NX * sizeof *ys);
  if (!xs || !ys) bench_die("out of memory", NULL);
  for (int devices = 1; devices <= 2; devices++) {
    schedrun_error_t err = {0};
    double cpu0, cpu1, f0, f1;
    usage_now(&cpu0, &f0);
    schedrun_t *s = bench_open_host(devices, NULL);
    schedrun_program_t *p;
    if (schedrun_program_load_string(s, saxpy_program, "data_bench.yaml", &p, &err)) bench_die("load", &err);
    run(s, p, WINDOW, xs, ys); /* warm: compiled, recorded, the workers' pages touched */
    uint64_t t0 = bench_ns();
    run(s, p, n, xs, ys);
    double wall = (double)(bench_ns() - t0);
    schedrun_program_free(&p);
    schedrun_close(&s);
    usage_now(&cpu1, &f1);
    printf("data_%ddev_cpu_us_per_job=%.2f\ndata_%ddev_faults_per_job=%.2f\ndata_%ddev_jobs_per_s=%.0f\n", devices,
           (cpu1 - cpu0) * 1e6 / (n + WINDOW), devices, (f1 - f0) / (n + WINDOW), devices, n / (wall / 1e9));
  }
  for (int chain = 0; chain <= 1; chain++)
    for (int in_place = 0; in_place <= 1; in_place++) bound_figures(n, in_place, chain, xs, ys);
  free(xs);
  free(ys);
  return 0;
}
