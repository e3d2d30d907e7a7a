/*
 * The performance model's class (actors/perf_model.h): its histories (mean
 * and variance as samples come), its msgpack form (read back whole, refused
 * when cut, corrupted or of another version), its file in the cache, and
 * the choice of a device: calibration first, then the earliest expected
 * finish, whichever kind is the faster, a busy fast device passed over for
 * an idle slow one, and waiting while every kind's calibration is out.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/perf_model.h"
#include "test_util.h"

static void test_history(void **st) {
  (void)st;
  perf_model m;
  perf_model_init(&m, "ab");
  assert_null(perf_model_find(&m, "host", 64, false));
  perf_hist *h = perf_model_find(&m, "host", 64, true);
  assert_non_null(h);
  assert_true(m.dirty);
  static const double xs[] = {10, 20, 30, 40};
  for (int i = 0; i < 4; i++) {
    perf_hist_add(h, xs[i]);
    /* the mean after each sample: 10, 15, 20, 25 */
    assert_true(fabs(h->mean - (10 + 5.0 * i)) < 1e-9);
  }
  assert_int_equal(h->n, 4);
  assert_true(fabs(perf_hist_sd(h) - sqrt(500.0 / 3)) < 1e-9); /* sample standard deviation of 10..40 */
  /* kinds and sizes are apart */
  perf_hist *c = perf_model_find(&m, "cuda sm_90", 64, true);
  perf_hist *h2 = perf_model_find(&m, "host", 128, true);
  assert_true(c != NULL && h2 != NULL && m.n == 3);
  assert_int_equal(perf_model_find(&m, "host", 64, false)->n, 4);
  assert_int_equal(perf_model_find(&m, "cuda sm_90", 64, false)->n, 0);
  /* a kind too long to keep is not made */
  char longer[PERF_KIND_MAX + 1];
  memset(longer, 'k', sizeof longer - 1);
  longer[PERF_KIND_MAX] = '\0';
  assert_null(perf_model_find(&m, longer, 1, true));
  perf_model_free(&m);
}

static void filled(perf_model *m) {
  perf_model_init(m, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  perf_hist *h = perf_model_find(m, "host", 4096, true);
  perf_hist_add(h, 1000);
  perf_hist_add(h, 3000);
  perf_hist *c = perf_model_find(m, "cuda sm_90", 4096, true);
  perf_hist_add(c, 250.5);
}

static void test_encoding(void **st) {
  (void)st;
  perf_model m, back;
  filled(&m);
  char *data;
  size_t len;
  assert_int_equal(perf_model_encode(&m, &data, &len), SCHEDRUN_OK);
  perf_model_init(&back, m.key);
  assert_true(perf_model_decode(&back, data, len));
  assert_int_equal(back.n, 2);
  for (size_t i = 0; i < 2; i++) {
    assert_string_equal(back.v[i].kind, m.v[i].kind);
    assert_int_equal(back.v[i].size, m.v[i].size);
    assert_int_equal(back.v[i].n, m.v[i].n);
    assert_true(back.v[i].mean == m.v[i].mean && back.v[i].m2 == m.v[i].m2);
  }
  assert_false(back.dirty);
  /* every cut of the bytes is refused, and leaves the model as it was */
  for (size_t cut = 0; cut < len; cut++) {
    assert_false(perf_model_decode(&back, data, cut));
    assert_int_equal(back.n, 2);
  }
  /* trailing bytes, another version, a history of no samples */
  char *more = malloc(len + 1);
  memcpy(more, data, len);
  more[len] = 0;
  assert_false(perf_model_decode(&back, more, len + 1));
  memcpy(more, data, len);
  assert_true((unsigned char)more[1] == 1); /* [version, ...]: the version's byte */
  more[1] = 2;
  assert_false(perf_model_decode(&back, more, len));
  free(more);
  perf_model_free(&back);
  free(data);
  perf_hist *h = perf_model_find(&m, "host", 4096, false);
  h->n = 0;
  assert_int_equal(perf_model_encode(&m, &data, &len), SCHEDRUN_OK);
  perf_model_init(&back, m.key);
  assert_false(perf_model_decode(&back, data, len));
  perf_model_free(&back);
  free(data);
  perf_model_free(&m);
}

static void test_file(void **st) {
  (void)st;
  char dir[512];
  snprintf(dir, sizeof dir, "%s", tu_write_temp(0, "x", ""));
  *strrchr(dir, '/') = '\0';
  strcat(dir, "/modelcache");
  perf_model m, back;
  filled(&m);
  perf_model_init(&back, m.key);
  assert_false(perf_model_load(&back, dir)); /* none yet */
  schedrun_error_t err = {0};
  assert_int_equal(perf_model_save(&m, dir, &err), SCHEDRUN_OK);
  assert_false(m.dirty);
  assert_true(perf_model_load(&back, dir));
  assert_int_equal(back.n, 2);
  assert_int_equal(perf_model_find(&back, "host", 4096, false)->n, 2);
  /* a file cut short is no model */
  char path[700];
  snprintf(path, sizeof path, "%s/models/%s", dir, m.key);
  size_t len;
  char *data = tu_slurp(path, &len);
  assert_non_null(data);
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, len - 3, f);
  fclose(f);
  free(data);
  perf_model none;
  perf_model_init(&none, m.key);
  assert_false(perf_model_load(&none, dir));
  assert_int_equal(none.n, 0);
  perf_model_free(&none);
  perf_model_free(&back);
  perf_model_free(&m);
}

/* Two kinds: devices 0, 1 of kind 0 and device 2 of kind 1. */
static perf_hist hist(const char *kind, uint64_t n, double mean) {
  perf_hist h = {.size = 1, .n = n, .mean = mean};
  snprintf(h.kind, sizeof h.kind, "%s", kind);
  return h;
}

static void test_choice(void **st) {
  (void)st;
  perf_hist host = hist("host", 0, 0), cuda = hist("cuda sm_90", 0, 0);
  perf_device d[3] = {
      {.usable = true, .kind = 0, .h = NULL},
      {.usable = true, .kind = 0, .h = NULL},
      {.usable = true, .kind = 1, .h = NULL},
  };
  double expect = -1;
  /* nothing known: kind 0 calibrates first, on its least loaded device */
  d[0].load = 2;
  assert_int_equal(perf_choose(d, 3, &expect), 1);
  assert_true(expect == 0);
  /* kind 0 has its calibration jobs out: kind 1 calibrates */
  d[0].out = d[1].out = PERF_CALIBRATE;
  assert_int_equal(perf_choose(d, 3, &expect), 2);
  /* both out and no samples back: the job waits */
  d[2].out = PERF_CALIBRATE;
  assert_int_equal(perf_choose(d, 3, &expect), -1);
  /* kind 1 (CUDA) calibrated and 10 times faster: it takes the job */
  host = hist("host", 1, 1000);
  cuda = hist("cuda sm_90", PERF_CALIBRATE, 100);
  d[0].h = d[1].h = &host;
  d[2].h = &cuda;
  d[0].out = d[1].out = PERF_CALIBRATE - 1;
  d[2].out = 0;
  assert_int_equal(perf_choose(d, 3, &expect), 2);
  assert_true(expect == 100);
  /* with host calibrated too, CUDA still wins until its queue is longer
   * than the host's mean */
  host.n = PERF_CALIBRATE;
  d[0].out = d[1].out = 0;
  d[2].queued_ns = 850;
  assert_int_equal(perf_choose(d, 3, &expect), 2);
  d[2].queued_ns = 950; /* 950 + 100 > 1000: an idle host device finishes first */
  d[0].queued_ns = 500;
  assert_int_equal(perf_choose(d, 3, &expect), 1);
  assert_true(expect == 1000);
  /* the other way round: host 10 times faster */
  host.mean = 100;
  cuda.mean = 1000;
  d[0].queued_ns = d[1].queued_ns = d[2].queued_ns = 0;
  d[1].load = 1;
  int c = perf_choose(d, 3, &expect);
  assert_true(c == 0 || c == 1);
  assert_true(expect == 100);
  /* a device that cannot run it is never chosen, nor calibrated */
  d[0].usable = d[1].usable = false;
  assert_int_equal(perf_choose(d, 3, &expect), 2);
  d[2].usable = false;
  assert_int_equal(perf_choose(d, 3, &expect), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_history),
      cmocka_unit_test(test_encoding),
      cmocka_unit_test(test_file),
      cmocka_unit_test(test_choice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
