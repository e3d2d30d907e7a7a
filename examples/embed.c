/* Embedding libsched: load a program from a string, run it, read a result. */
#include <stdio.h>

#include "sched.h"

static const char *config =
    "version: 1\n"
    "name: embed\n"
    "repeat: 2\n"
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
    "  - launch: {kernel: scale, grid: 1, block: 128, args: [v, 3.0, 100]}\n"
    "expect:\n"
    "  v: {at: {0: 0, 1: 3, 99: 297}}\n";

int main(void) {
  sched_error_t err = {0};
  sched_t *s = NULL;
  sched_program_t *p = NULL;
  sched_report_t *r = NULL;
  int rc = sched_open(&s, NULL, &err);
  if (rc == SCHED_OK) rc = sched_program_load_string(s, config, "embed.yaml", &p, &err);
  if (rc == SCHED_OK) {
    sched_run_options_t o;
    sched_run_options_init(&o);
    o.keep_outputs = 1;
    rc = sched_run(s, p, &o, &r, &err);
  }
  if (rc == SCHED_OK) {
    size_t n = 0;
    const float *v = sched_report_output(r, 1, 0, "v", &n);
    printf("embed: %u runs verified; v[10] = %g (%zu bytes)\n", sched_report_summary(r)->verified,
           v ? v[10] : -1.0, n);
  } else {
    fprintf(stderr, "embed: %s: %s\n", sched_strerror(rc), err.message ? err.message : "");
  }
  sched_error_clear(&err);
  sched_report_free(&r);
  sched_program_free(&p);
  sched_close(&s);
  return rc == SCHED_OK ? 0 : 1;
}
