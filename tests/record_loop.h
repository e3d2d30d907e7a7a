/*
 * The recording test both record actors face: a loop of 8 unrolled launches,
 * 2 buffer sets and 4 runs, every slice of every run compared. The real
 * actor must pass it; the shared-slot one (one state per command) must fail
 * it with stale per-iteration data, and only that way.
 */
#ifndef SCHEDRUN_TEST_RECORD_LOOP_H
#define SCHEDRUN_TEST_RECORD_LOOP_H

#include <stdio.h>

#include "schedrun.h"

#define LOOP_PROGRAM                                                                                     \
  "version: 1\nrepeat: 4\nbuffer_sets: 2\n"                                                              \
  "kernels:\n  fill_slice:\n    params: [ptr, i32, f32]\n    source: |\n"                              \
  "      extern \"C\" __global__ void fill_slice(float *p, int n, float v) {\n"                          \
  "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n        if (i < n) p[i] = v;\n      }\n"     \
  "buffers:\n  out: {type: f32, count: 1024}\n"                                                          \
  "program:\n  - loop:\n      trips: 8\n      body:\n"                                                  \
  "        - launch: {kernel: fill_slice, grid: 2, block: 64,\n"                                         \
  "                   args: [{buffer: out, offset: \"$iter * 128\"}, 128, \"($iter + 1) * 1000 + $run\"]}\n"

/* Runs LOOP_PROGRAM on one host device and writes the first element that
 * differs from what it should hold into why ("" when every one matched).
 * Returns the run's status; *s and *p stay open for the caller's counters. */
static inline int loop_run_and_compare(schedrun_t **s, schedrun_program_t **p, char *why, size_t n) {
  why[0] = '\0';
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  schedrun_error_t err = {0};
  int rc = schedrun_open(s, &o, &err);
  if (rc == SCHEDRUN_OK) rc = schedrun_program_load_string(*s, LOOP_PROGRAM, "loop.yaml", p, &err);
  schedrun_run_options_t ro;
  schedrun_run_options_init(&ro);
  ro.keep_outputs = 1;
  schedrun_report_t *r = NULL;
  if (rc == SCHEDRUN_OK) rc = schedrun_run(*s, *p, &ro, &r, &err);
  if (rc != SCHEDRUN_OK) {
    snprintf(why, n, "the run failed: %s", err.message ? err.message : "?");
    schedrun_error_clear(&err);
    schedrun_report_free(&r);
    return rc;
  }
  for (int run = 0; run < 4 && !why[0]; run++) {
    size_t bytes = 0;
    const float *out = (const float *)schedrun_report_output(r, run, 0, "out", &bytes);
    if (!out || bytes != 4096) {
      snprintf(why, n, "run %d: no output", run);
      break;
    }
    for (int it = 0; it < 8 && !why[0]; it++)
      for (int t = 0; t < 128; t++) {
        float want = (float)((it + 1) * 1000 + run);
        if (out[it * 128 + t] != want) {
          snprintf(why, n, "run %d (buffer set %d), iteration %d: out[%d] = %g, expected %g", run, run % 2, it,
                   it * 128 + t, out[it * 128 + t], want);
          break;
        }
      }
  }
  schedrun_report_free(&r);
  return SCHEDRUN_OK;
}

#endif
