/*
 * Embedding libschedrun: load a program from a string, submit jobs with their own
 * inputs, collect them as they complete, and read a result.
 */
#include <stdio.h>

#include "schedrun.h"

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
  schedrun_error_t err = {0};
  schedrun_t *s = NULL;
  schedrun_program_t *p = NULL;
  int rc = schedrun_open(&s, NULL, &err);
  if (rc == SCHEDRUN_OK) rc = schedrun_program_load_string(s, config, "embed.yaml", &p, &err);

  /* four jobs; job j scales its own copy of v (all ones) by j + 1 */
  float ones[100];
  for (int i = 0; i < 100; i++) ones[i] = 1.0f;
  schedrun_input_t in = {"v", ones, sizeof ones};
  for (int j = 0; rc == SCHEDRUN_OK && j < 4; j++) {
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.job = j;
    o.keep_outputs = 1;
    o.inputs = &in;
    o.ninputs = 1;
    schedrun_job_t id;
    rc = schedrun_submit(s, p, &o, &id, &err);
  }
  float total = 0;
  int seen = 0; /* one bit per job: each completes exactly once */
  for (int k = 0; rc == SCHEDRUN_OK && k < 4; k++) {
    schedrun_job_t id;
    schedrun_job_result_t *r = NULL;
    rc = schedrun_wait_any(s, 60000, &id, &r, &err);
    if (rc) break;
    size_t bytes = 0;
    const float *v = schedrun_job_result_output(r, "v", &bytes);
    const schedrun_job_info_t *info = schedrun_job_result_info(r);
    if (!v || bytes != sizeof ones || info->status != SCHEDRUN_OK || info->job < 0 || info->job > 3 ||
        (seen & (1 << info->job)))
      rc = SCHEDRUN_EVERIFY;
    /* every element: ones scaled by job + 1 */
    for (int i = 0; rc == SCHEDRUN_OK && i < 100; i++)
      if (v[i] != (float)(info->job + 1)) {
        fprintf(stderr, "embed: job %d: v[%d] = %g, expected %d\n", info->job, i, v[i], info->job + 1);
        rc = SCHEDRUN_EVERIFY;
      }
    if (rc == SCHEDRUN_OK) {
      seen |= 1 << info->job;
      total += v[0];
    }
    schedrun_job_result_free(&r);
  }
  if (rc == SCHEDRUN_OK && seen != 0xf) rc = SCHEDRUN_EVERIFY;
  if (rc == SCHEDRUN_OK) printf("embed: 4 jobs done, every element verified; sum of v[0] over the jobs = %g\n", total);
  else fprintf(stderr, "embed: %s: %s\n", schedrun_strerror(rc), err.message ? err.message : "");
  schedrun_error_clear(&err);
  schedrun_program_free(&p);
  schedrun_close(&s);
  return rc == SCHEDRUN_OK ? 0 : 1;
}
