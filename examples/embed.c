/*
 * Embedding libsched: load a program from a string, submit jobs with their own
 * inputs, collect them as they complete, and read a result.
 */
#include <stdio.h>

#include "sched.h"

static const char *config =
    "version: 1\n"
    "name: embed\n"
    "kernels:\n"
    "  scale:\n"
    "    params: [ptr, f32, i32]\n"
    "    source: |\n"
    "      extern \"C\" __global__ void scale(float *p, float k, int n) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) p[i] = p[i] * k;\n"
    "      }\n"
    "buffers:\n"
    "  v: {type: f32, count: 100, init: {iota: {start: 0, step: 1}}}\n"
    "program:\n"
    "  - launch: {kernel: scale, grid: 1, block: 128, args: [v, \"$job + 1\", 100]}\n";

int main(void) {
  sched_error_t err = {0};
  sched_t *s = NULL;
  sched_program_t *p = NULL;
  int rc = sched_open(&s, NULL, &err);
  if (rc == SCHED_OK) rc = sched_program_load_string(s, config, "embed.yaml", &p, &err);

  /* four jobs; job j scales its own copy of v (all ones) by j + 1 */
  float ones[100];
  for (int i = 0; i < 100; i++) ones[i] = 1.0f;
  sched_input_t in = {"v", ones, sizeof ones};
  for (int j = 0; rc == SCHED_OK && j < 4; j++) {
    sched_job_options_t o;
    sched_job_options_init(&o);
    o.job = j;
    o.keep_outputs = 1;
    o.inputs = &in;
    o.ninputs = 1;
    sched_job_t id;
    rc = sched_submit(s, p, &o, &id, &err);
  }
  float total = 0;
  for (int k = 0; rc == SCHED_OK && k < 4; k++) {
    sched_job_t id;
    sched_job_result_t *r = NULL;
    rc = sched_wait_any(s, 60000, &id, &r, &err);
    if (rc) break;
    size_t bytes = 0;
    const float *v = sched_job_result_output(r, "v", &bytes);
    const sched_job_info_t *info = sched_job_result_info(r);
    if (!v || info->status != SCHED_OK || v[99] != (float)(info->job + 1)) rc = SCHED_EVERIFY;
    else total += v[0];
    sched_job_result_free(&r);
  }
  if (rc == SCHED_OK) printf("embed: 4 jobs done; sum of v[0] over the jobs = %g\n", total);
  else fprintf(stderr, "embed: %s: %s\n", sched_strerror(rc), err.message ? err.message : "");
  sched_error_clear(&err);
  sched_program_free(&p);
  sched_close(&s);
  return rc == SCHED_OK ? 0 : 1;
}
