/*
 * Sharing compiled kernels between schedulers with different caches (what
 * MPI ranks do): a program's artifacts once a job compiled them, published
 * into another cache with the usual verification, after which that
 * scheduler compiles nothing; bad names and bad bytes are refused and leave
 * the cache as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/api.h"
#include "test_util.h"

typedef struct found {
  char names[8][256];
  char paths[8][512];
  int n;
} found;

static void collect(const char *name, const char *path, void *user) {
  found *f = user;
  assert_true(f->n < 8);
  snprintf(f->names[f->n], sizeof f->names[f->n], "%s", name);
  snprintf(f->paths[f->n], sizeof f->paths[f->n], "%s", path);
  f->n++;
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *d = malloc((size_t)n);
  assert_int_equal(fread(d, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return d;
}

static schedrun_t *open_private(void) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:2";
  o.no_disk_cache = 1; /* a cache of its own, removed at close */
  return tu_open(&o);
}

static schedrun_program_t *demo(schedrun_t *s) {
  char path[512];
  snprintf(path, sizeof path, "%s/multi_device_demo.yaml", tu_env("SCHEDRUN_CONFIGS"));
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  (void)s; /* loaded without a scheduler: the demo runs on the devices it is submitted to */
  if (schedrun_program_load_file(NULL, path, &p, &err) != SCHEDRUN_OK) fail_msg("%s", err.message);
  return p;
}

static void compile_with_one_job(schedrun_t *s, schedrun_program_t *p) {
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.record_only = 1;
  schedrun_job_t id;
  schedrun_job_result_t *r = NULL;
  assert_int_equal(schedrun_submit(s, p, &o, &id, NULL), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait(s, id, -1, &r, NULL), SCHEDRUN_OK);
  assert_int_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
  schedrun_job_result_free(&r);
}

static void test_artifacts_make_a_second_cache_warm(void **st) {
  (void)st;
  schedrun_t *a = open_private(), *b = open_private();
  assert_string_equal(schedrun_compile_target(a), schedrun_compile_target(b));
  assert_non_null(strstr(schedrun_compile_target(a), "host"));
  schedrun_program_t *pa = demo(a), *pb = demo(b);
  found f = {.n = 0};
  schedrun_error_t err = {0};
  /* nothing compiled yet: nothing to give */
  assert_int_equal(schedrun_program_artifacts(a, pa, collect, &f, &err), SCHEDRUN_EINVAL);
  assert_non_null(strstr(err.message, "has not been compiled here"));
  schedrun_error_clear(&err);
  compile_with_one_job(a, pa);
  uint64_t compiled = 99;
  assert_int_equal(schedrun_compile_count(a, &compiled, NULL), SCHEDRUN_OK);
  assert_int_equal(compiled, 2); /* the demo's two kernels */
  assert_int_equal(schedrun_program_artifacts(a, pa, collect, &f, NULL), SCHEDRUN_OK);
  assert_int_equal(f.n, 2);
  for (int i = 0; i < f.n; i++) {
    size_t len;
    char *bytes = read_all(f.paths[i], &len);
    assert_non_null(strstr(f.paths[i], f.names[i]));
    assert_int_equal(schedrun_cache_publish(b, f.names[i], bytes, len, &err), SCHEDRUN_OK);
    free(bytes);
  }
  /* b runs the whole config and compiles nothing */
  schedrun_report_t *rep = NULL;
  assert_int_equal(schedrun_run(b, pb, NULL, &rep, &err), SCHEDRUN_OK);
  const schedrun_summary_t *sum = schedrun_report_summary(rep);
  assert_int_equal(sum->verified, sum->jobs);
  assert_int_equal(sum->cache_misses, 0);
  assert_int_equal(schedrun_compile_count(b, &compiled, NULL), SCHEDRUN_OK);
  assert_int_equal(compiled, 0);
  schedrun_report_free(&rep);
  schedrun_program_free(&pa);
  schedrun_program_free(&pb);
  schedrun_close(&a);
  schedrun_close(&b);
}

static void test_bad_artifacts_refused(void **st) {
  (void)st;
  schedrun_t *a = open_private(), *b = open_private();
  schedrun_program_t *pa = demo(a);
  compile_with_one_job(a, pa);
  found f = {.n = 0};
  assert_int_equal(schedrun_program_artifacts(a, pa, collect, &f, NULL), SCHEDRUN_OK);
  size_t len;
  char *good = read_all(f.paths[0], &len);
  schedrun_error_t err = {0};
  /* names that are not TARGET/xx/KEY.ext, or that leave the cache */
  const char *key = strrchr(f.names[0], '/') + 1;
  char name[512];
  const char *bad_names[] = {"../../etc/x", "/abs/ab/x.so", "host", "host/zz/", ""};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    assert_int_equal(schedrun_cache_publish(b, bad_names[i], good, len, &err), SCHEDRUN_EINVAL);
    assert_non_null(strstr(err.message, "schedrun_cache_publish"));
    schedrun_error_clear(&err);
  }
  snprintf(name, sizeof name, "host/00/%s", key); /* the directory is not the key's */
  if (strncmp(key, "00", 2) != 0) {
    assert_int_equal(schedrun_cache_publish(b, name, good, len, &err), SCHEDRUN_EINVAL);
    assert_non_null(strstr(err.message, "first two digits"));
    schedrun_error_clear(&err);
  }
  snprintf(name, sizeof name, "..%s", f.names[0]); /* a target name that climbs */
  assert_int_equal(schedrun_cache_publish(b, name, good, len, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  /* bad bytes: corrupted payload, truncated, another key's */
  char *bad = malloc(len);
  memcpy(bad, good, len);
  bad[len - 1] ^= 0x5a;
  assert_int_equal(schedrun_cache_publish(b, f.names[0], bad, len, &err), SCHEDRUN_EIO);
  assert_non_null(strstr(err.message, "corrupted"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_cache_publish(b, f.names[0], good, len - 1, &err), SCHEDRUN_EIO);
  assert_non_null(strstr(err.message, "truncated"));
  schedrun_error_clear(&err);
  assert_int_equal(schedrun_cache_publish(b, f.names[1], good, len, &err), SCHEDRUN_EIO);
  assert_non_null(strstr(err.message, "another key"));
  schedrun_error_clear(&err);
  /* nothing was written for what was refused */
  char where[1024];
  snprintf(where, sizeof where, "%s/%s", b->core.cache_dir, f.names[0]);
  struct stat sb;
  assert_int_equal(stat(where, &sb), -1);
  /* a good one published, then bad bytes for it: the good one stays */
  assert_int_equal(schedrun_cache_publish(b, f.names[0], good, len, NULL), SCHEDRUN_OK);
  assert_int_equal(schedrun_cache_publish(b, f.names[0], bad, len, NULL), SCHEDRUN_EIO);
  size_t now_len;
  char *now = read_all(where, &now_len);
  assert_int_equal(now_len, len);
  assert_memory_equal(now, good, len);
  assert_int_equal(schedrun_cache_publish(NULL, f.names[0], good, len, NULL), SCHEDRUN_EINVAL);
  assert_int_equal(schedrun_cache_publish(b, NULL, good, len, NULL), SCHEDRUN_EINVAL);
  assert_int_equal(schedrun_program_artifacts(a, NULL, collect, &f, NULL), SCHEDRUN_EINVAL);
  free(now);
  free(bad);
  free(good);
  schedrun_program_free(&pa);
  schedrun_close(&a);
  schedrun_close(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_artifacts_make_a_second_cache_warm),
      cmocka_unit_test(test_bad_artifacts_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
