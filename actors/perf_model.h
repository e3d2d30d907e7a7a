/*
 * History-based performance models, as StarPU's: for one program, per kind
 * of device and size of the job's buffers, how long its jobs took to
 * execute there (their count, mean and variance, kept in Welford's running
 * form), and the choice made from them: the device where a job is expected
 * to finish first. The scheduler keeps one model per program it places by
 * model (actors/scheduler_model.c) and saves it in the cache directory,
 * models/<program key>, so that a later process starts calibrated.
 *
 * Not thread-safe: one model belongs to the scheduler actor.
 */
#ifndef SCHEDRUN_PERF_MODEL_H
#define SCHEDRUN_PERF_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* Samples a kind needs before its mean is believed; until then the
 * program is calibrating there. */
#define PERF_CALIBRATE 3
/* Histories one model keeps (kinds x sizes); more are not recorded. */
#define PERF_MAX_HISTS 256
#define PERF_KIND_MAX 48

typedef struct perf_hist {
  char kind[PERF_KIND_MAX]; /* "host", "cuda sm_90" */
  uint64_t size;            /* bytes of the job's buffers */
  uint64_t n;
  double mean, m2; /* of the execute time, ns; m2: the sum of squared deviations */
} perf_hist;

typedef struct perf_model {
  char key[65]; /* the program's (perf_model_key) */
  perf_hist *v;
  size_t n, cap;
  bool dirty; /* changed since loaded or saved */
} perf_model;

/* An empty model for the program whose key is `key` (64 hex digits). */
void perf_model_init(perf_model *m, const char *key);
void perf_model_free(perf_model *m);

/* The history of (kind, size); with `create`, made empty when there is
 * none (NULL when the model is full or out of memory). */
perf_hist *perf_model_find(perf_model *m, const char *kind, uint64_t size, bool create);
/* One more execute time. */
void perf_hist_add(perf_hist *h, double ns);
/* The standard deviation of the samples (0 below two). */
double perf_hist_sd(const perf_hist *h);

/* The model as msgpack: [1, [[kind, size, n, mean, m2], ...]]. */
int perf_model_encode(const perf_model *m, char **out, size_t *len);
/* Replaces m's histories by those of an encoded model; false (m
 * unchanged) when the bytes are not one whole, well-formed model. */
bool perf_model_decode(perf_model *m, const void *data, size_t len);

/* models/<key> in cache_dir: read (false when there is none, or it is not
 * whole), and written atomically (an artifact, published by rename). */
bool perf_model_load(perf_model *m, const char *cache_dir);
int perf_model_save(perf_model *m, const char *cache_dir, schedrun_error_t *err);

/* A device as the choice sees it. */
typedef struct perf_device {
  bool usable;        /* may run the job (not lost, its target compiled) */
  int kind;           /* devices of one kind share their history: an index */
  double queued_ns;   /* the work placed on it and not done, as expected */
  const perf_hist *h; /* its kind's history for the job's size, or NULL */
  uint32_t out;       /* the program's jobs placed on its kind and not done */
  uint32_t load;      /* every job placed on it and not done */
} perf_device;

/* Where a job goes (the device's index), or -1 when it should wait:
 *  - a kind with fewer than PERF_CALIBRATE samples, counting the jobs out
 *    there, calibrates: the job goes to its least loaded device;
 *  - otherwise the earliest expected finish (queued work plus the kind's
 *    mean) among kinds with PERF_CALIBRATE samples;
 *  - when no kind has them yet and every kind has its calibration jobs out,
 *    -1: the job waits for their times.
 * *expect_ns is the expected execute time on the chosen device (0 unknown). */
int perf_choose(const perf_device *d, int n, double *expect_ns);

#endif
