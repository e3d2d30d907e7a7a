/*
 * The same three workloads as bench/jobs_bench.c, in StarPU, for a side by
 * side comparison in one run (built only by `make bench`):
 *   (a) N independent empty tasks: tasks per second (best of 3);
 *   (b) one empty task submitted synchronously: submit-to-done latency;
 *   (c) chains of 100 tiny tasks on one piece of data (read-write, so each
 *       depends on the previous), 1000 chains: cost per task.
 *   (d) 1,000 chains of 10 tasks, each chain on its own vector of 1,024
 *       floats, all submitted at once: cost per task (bench/dag_bench.c's
 *       job graph chains).
 *   (e) a chain of 100 tiny tasks on one read-write handle, submitted and
 *       waited for, 50 times: the median cost per task (dag_bench's chain
 *       of 100 dependent jobs);
 *   (f) a diamond of four saxpy tasks on 4,096 floats (A -> B, C -> D, as
 *       in dag_bench), submitted and waited for, 200 times: the median time
 *       per diamond, D's result checked element by element.
 *   (g) data-carrying tasks: N saxpy tasks on 1,024 floats, each on its own
 *       x and y, registered in place (starpu_vector_data_register), in
 *       windows of 256: register, submit, unregister (which brings y home),
 *       every result checked as bench/data_bench.c checks its jobs': CPU
 *       time and page faults per task (`--data N` runs only this).
 * With (a), the CPU time and the context switches of the whole process (its
 * workers are threads) per task.
 * Prints key=value lines.
 */
#include <starpu.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU seconds and context switches of this process so far. */
static void usage_now(double *cpu, long *csw) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  *cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  *csw = ru.ru_nvcsw + ru.ru_nivcsw;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void empty(void *buffers[], void *arg) {
  (void)buffers;
  (void)arg;
}

static void tiny(void *buffers[], void *arg) {
  (void)arg;
  float *p = (float *)STARPU_VARIABLE_GET_PTR(buffers[0]);
  p[0] += 1.0f;
}

static void incr_vec(void *buffers[], void *arg) {
  (void)arg;
  float *v = (float *)STARPU_VECTOR_GET_PTR(buffers[0]);
  unsigned n = STARPU_VECTOR_GET_NX(buffers[0]);
  for (unsigned i = 0; i < n; i++) v[i] += 1.0f;
}

/* y = 2x + y */
static void saxpy(void *buffers[], void *arg) {
  (void)arg;
  const float *x = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
  float *y = (float *)STARPU_VECTOR_GET_PTR(buffers[1]);
  unsigned n = STARPU_VECTOR_GET_NX(buffers[0]);
  for (unsigned i = 0; i < n; i++) y[i] = 2.0f * x[i] + y[i];
}

static struct starpu_codelet saxpy_cl = {
    .cpu_funcs = {saxpy}, .nbuffers = 2, .modes = {STARPU_R, STARPU_RW}, .name = "saxpy"};

static int submit2(struct starpu_codelet *cl, starpu_data_handle_t a, starpu_data_handle_t b) {
  struct starpu_task *t = starpu_task_create();
  t->cl = cl;
  t->handles[0] = a;
  t->handles[1] = b;
  return starpu_task_submit(t);
}

static struct starpu_codelet incr_cl = {.cpu_funcs = {incr_vec}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "incr"};
static struct starpu_codelet empty_cl = {.cpu_funcs = {empty}, .nbuffers = 0, .name = "empty"};
static struct starpu_codelet tiny_cl = {.cpu_funcs = {tiny}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "tiny"};

/* CPU seconds and page faults of this process so far. */
static void cpu_faults(double *cpu, double *faults) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  *cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  *faults = (double)(ru.ru_minflt + ru.ru_majflt);
}

/* (g): n saxpy tasks on their own data, in windows of 256 */
static int data_tasks(int n) {
  enum { DX = 1024, WIN = 256 };
  float *xs = malloc((size_t)WIN * DX * sizeof *xs), *ys = malloc((size_t)WIN * DX * sizeof *ys);
  starpu_data_handle_t hx[WIN], hy[WIN];
  if (!xs || !ys) return 1;
  double cpu0 = 0, cpu1, f0 = 0, f1;
  for (int first = -WIN; first < n; first += WIN) { /* the first window warms up */
    if (first == 0) cpu_faults(&cpu0, &f0);
    int w = n - first < WIN ? n - first : WIN;
    for (int k = 0; k < w; k++) {
      float *x = xs + (size_t)k * DX, *y = ys + (size_t)k * DX;
      for (int i = 0; i < DX; i++) {
        x[i] = (float)i;
        y[i] = (float)(first + k);
      }
      starpu_vector_data_register(&hx[k], STARPU_MAIN_RAM, (uintptr_t)x, DX, sizeof(float));
      starpu_vector_data_register(&hy[k], STARPU_MAIN_RAM, (uintptr_t)y, DX, sizeof(float));
      if (submit2(&saxpy_cl, hx[k], hy[k])) return 1;
    }
    for (int k = 0; k < w; k++) {
      starpu_data_unregister(hx[k]);
      starpu_data_unregister(hy[k]);
      const float *y = ys + (size_t)k * DX;
      if (y[0] != (float)(first + k) || y[DX - 1] != 2.0f * (DX - 1) + (float)(first + k)) return 1;
      if ((first + k) % 64 == 0)
        for (int i = 0; i < DX; i++)
          if (y[i] != 2.0f * (float)i + (float)(first + k)) {
            fprintf(stderr, "data: task %d: y[%d] is %g\n", first + k, i, y[i]);
            return 1;
          }
    }
  }
  cpu_faults(&cpu1, &f1);
  printf("starpu_data_cpu_us_per_task=%.2f\nstarpu_data_faults_per_task=%.2f\n", (cpu1 - cpu0) * 1e6 / n,
         (f1 - f0) / n);
  free(xs);
  free(ys);
  return 0;
}

/* (e) a chain of 100 tiny tasks on one read-write handle, submitted and
 * waited for, `rounds` times (at most 50) after 3 to warm: the median cost
 * per task into *per (when not NULL). */
static int chain100(int rounds, double *per) {
  enum { LEN = 100, ROUNDS = 50 };
  if (rounds > ROUNDS) rounds = ROUNDS;
  double chain_ns[ROUNDS];
  float value = 0;
  starpu_data_handle_t h;
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&value, sizeof value);
  for (int r = -3; r < rounds; r++) {
    double t0 = now_s();
    for (int k = 0; k < LEN; k++) {
      struct starpu_task *t = starpu_task_create();
      t->cl = &tiny_cl;
      t->handles[0] = h;
      if (starpu_task_submit(t) != 0) return 1;
    }
    starpu_task_wait_for_all();
    if (r >= 0) chain_ns[r] = (now_s() - t0) / LEN * 1e9;
  }
  starpu_data_unregister(h);
  if (value != (float)(LEN * (rounds + 3))) {
    fprintf(stderr, "chain of 100: %g runs counted\n", value);
    return 1;
  }
  qsort(chain_ns, (size_t)rounds, sizeof *chain_ns, cmp);
  if (per) *per = chain_ns[rounds / 2];
  return 0;
}

int main(int argc, char **argv) {
  bool only = argc == 3 && !strcmp(argv[1], "--only-tasks"); /* N empty tasks and nothing else */
  bool data = argc == 3 && !strcmp(argv[1], "--data");       /* (g) alone */
  bool chain = argc == 3 && !strcmp(argv[1], "--chain-only"); /* (e) alone, N rounds (callgrind) */
  int n = only || data ? atoi(argv[2]) : argc > 1 ? atoi(argv[1]) : 100000;
  if (starpu_init(NULL) != 0) {
    fprintf(stderr, "starpu_init failed\n");
    return 1;
  }
  if (chain) {
    int rc = chain100(atoi(argv[2]), NULL);
    starpu_shutdown();
    return rc;
  }
  if (data) {
    int rc = data_tasks(n);
    starpu_shutdown();
    return rc;
  }
  if (only) {
    for (int i = 0; i < n; i++) {
      struct starpu_task *t = starpu_task_create();
      t->cl = &empty_cl;
      if (starpu_task_submit(t) != 0) return 1;
    }
    starpu_task_wait_for_all();
    starpu_shutdown();
    return 0;
  }
  double best = 0, cpu0, cpu1;
  long csw0, csw1;
  usage_now(&cpu0, &csw0);
  for (int round = 0; round < 3; round++) {
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
      struct starpu_task *t = starpu_task_create();
      t->cl = &empty_cl;
      if (starpu_task_submit(t) != 0) return 1;
    }
    starpu_task_wait_for_all();
    double rate = n / (now_s() - t0);
    if (rate > best) best = rate;
  }
  usage_now(&cpu1, &csw1);
  printf("starpu_throughput_tasks_per_s=%.0f\n", best);
  printf("starpu_cpu_us_per_task=%.2f\nstarpu_csw_per_task=%.2f\n", (cpu1 - cpu0) * 1e6 / (3.0 * n),
         (double)(csw1 - csw0) / (3.0 * n));

  int m = n / 20;
  double *lat = malloc((size_t)m * sizeof *lat);
  for (int i = 0; i < m; i++) {
    struct starpu_task *t = starpu_task_create();
    t->cl = &empty_cl;
    t->synchronous = 1;
    double t0 = now_s();
    if (starpu_task_submit(t) != 0) return 1;
    lat[i] = (now_s() - t0) * 1e6;
  }
  qsort(lat, (size_t)m, sizeof *lat, cmp);
  printf("starpu_latency_median_us=%.1f\nstarpu_latency_p99_us=%.1f\n", lat[m / 2], lat[m * 99 / 100]);
  free(lat);

  float value = 0;
  starpu_data_handle_t h;
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&value, sizeof value);
  double t0 = now_s();
  for (int chain = 0; chain < 1000; chain++)
    for (int k = 0; k < 100; k++) {
      struct starpu_task *t = starpu_task_create();
      t->cl = &tiny_cl;
      t->handles[0] = h;
      if (starpu_task_submit(t) != 0) return 1;
    }
  starpu_task_wait_for_all();
  double per = (now_s() - t0) / 100000.0 * 1e9;
  starpu_data_unregister(h);
  if (value != 100000.0f) {
    fprintf(stderr, "chain: %g runs counted\n", value);
    return 1;
  }
  printf("starpu_chain_ns_per_task=%.1f\n", per);

  /* (d) 1,000 chains of 10 tasks, each chain read-writing its own vector of
   * 1,024 floats (each task depends on the one before it), all submitted at
   * once: time per task */
  enum { CHAINS = 1000, CHAIN = 10, NX = 1024 };
  float *vec = calloc((size_t)CHAINS * NX, sizeof *vec);
  starpu_data_handle_t *hv = calloc(CHAINS, sizeof *hv);
  for (int c = 0; c < CHAINS; c++)
    starpu_vector_data_register(&hv[c], STARPU_MAIN_RAM, (uintptr_t)(vec + (size_t)c * NX), NX, sizeof(float));
  t0 = now_s();
  for (int c = 0; c < CHAINS; c++)
    for (int k = 0; k < CHAIN; k++) {
      struct starpu_task *t = starpu_task_create();
      t->cl = &incr_cl;
      t->handles[0] = hv[c];
      if (starpu_task_submit(t) != 0) return 1;
    }
  starpu_task_wait_for_all();
  per = (now_s() - t0) / (CHAINS * CHAIN) * 1e9;
  for (int c = 0; c < CHAINS; c++) starpu_data_unregister(hv[c]);
  for (size_t i = 0; i < (size_t)CHAINS * NX; i++)
    if (vec[i] != (float)CHAIN) {
      fprintf(stderr, "chains: element %zu is %g\n", i, vec[i]);
      return 1;
    }
  printf("starpu_dag_ns_per_task=%.1f\n", per);
  free(vec);
  free(hv);

  /* (e) a chain of 100 on one read-write handle, at a time */
  double per100 = 0;
  if (chain100(50, &per100)) return 1;
  printf("starpu_deps100_ns_per_task=%.1f\n", per100);

  /* (f) diamonds of saxpy: A's y is B's and C's x, B's y D's x, C's y D's y */
  enum { SN = 4096, DROUNDS = 200 };
  float *xs = malloc(SN * sizeof *xs), *ya = malloc(SN * sizeof *ya), *yb = malloc(SN * sizeof *yb),
        *yc = malloc(SN * sizeof *yc);
  starpu_data_handle_t hx, ha, hb, hc;
  starpu_vector_data_register(&hx, STARPU_MAIN_RAM, (uintptr_t)xs, SN, sizeof(float));
  starpu_vector_data_register(&ha, STARPU_MAIN_RAM, (uintptr_t)ya, SN, sizeof(float));
  starpu_vector_data_register(&hb, STARPU_MAIN_RAM, (uintptr_t)yb, SN, sizeof(float));
  starpu_vector_data_register(&hc, STARPU_MAIN_RAM, (uintptr_t)yc, SN, sizeof(float));
  double dia_us[DROUNDS];
  for (int r = -3; r < DROUNDS; r++) {
    /* fresh inputs, outside the timed span, as a job's buffers start from
     * their init */
    starpu_data_handle_t all[] = {hx, ha, hb, hc};
    for (int k = 0; k < 4; k++) starpu_data_acquire(all[k], STARPU_W);
    for (int i = 0; i < SN; i++) {
      xs[i] = (float)i;
      ya[i] = yb[i] = yc[i] = 1.0f;
    }
    for (int k = 0; k < 4; k++) starpu_data_release(all[k]);
    t0 = now_s();
    if (submit2(&saxpy_cl, hx, ha) || submit2(&saxpy_cl, ha, hb) || submit2(&saxpy_cl, ha, hc) ||
        submit2(&saxpy_cl, hb, hc))
      return 1;
    starpu_task_wait_for_all();
    if (r >= 0) dia_us[r] = (now_s() - t0) * 1e6;
    starpu_data_acquire(hc, STARPU_R);
    for (int i = 0; i < SN; i++)
      if (yc[i] != 12.0f * (float)i + 9.0f) {
        fprintf(stderr, "diamond: y[%d] is %g\n", i, yc[i]);
        return 1;
      }
    starpu_data_release(hc);
  }
  starpu_data_unregister(hx);
  starpu_data_unregister(ha);
  starpu_data_unregister(hb);
  starpu_data_unregister(hc);
  free(xs);
  free(ya);
  free(yb);
  free(yc);
  qsort(dia_us, DROUNDS, sizeof *dia_us, cmp);
  printf("starpu_diamond_us=%.1f\n", dia_us[DROUNDS / 2]);
  if (data_tasks(n / 2)) return 1;
  starpu_shutdown();
  return 0;
}
