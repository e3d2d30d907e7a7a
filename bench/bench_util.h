/* What every benchmark here needs: a clock and a median. */
#ifndef SCHEDRUN_BENCH_UTIL_H
#define SCHEDRUN_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "schedrun.h"

static inline uint64_t bench_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sorts v in place. */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Says what failed, and why when err knows, and ends the benchmark. */
static inline void bench_die(const char *what, const schedrun_error_t *err) {
  fprintf(stderr, "%s: %s\n", what, err && err->message ? err->message : "failed");
  exit(1);
}

/* Opens n host devices with options o (NULL: the defaults; its devices are
 * set here); ends the benchmark when it cannot. */
static inline schedrun_t *bench_open_host(int n, schedrun_options_t *o) {
  schedrun_options_t d;
  if (!o) {
    schedrun_options_init(&d);
    o = &d;
  }
  char spec[16];
  snprintf(spec, sizeof spec, "host:%d", n);
  o->devices = spec;
  schedrun_t *s;
  schedrun_error_t err = {0};
  if (schedrun_open(&s, o, &err)) bench_die("open", &err);
  o->devices = NULL;
  return s;
}

#endif
