/*
 * Running sched-run on the CUDA driver double, for the tests that do
 * (test_cuda_double.c, test_cuda_batches.c): its result with the --json
 * object, and the double's settings.
 */
#ifndef SCHEDRUN_TESTS_CUDA_DOUBLE_RUN_H
#define SCHEDRUN_TESTS_CUDA_DOUBLE_RUN_H

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define LEAK_STATUS 86

typedef struct result {
  int status;
  char *out, *err;
  json_object *json; /* --json output, or NULL */
} result;

static inline void run_cuda(const char *config, result *r) {
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--devices", "cuda", "--json", (char *)config, NULL};
  r->status = tu_run(argv, &r->out, &r->err);
  r->json = r->out ? json_tokener_parse(r->out) : NULL;
  if (r->status < 0) fail_msg("%s: sched-run crashed or could not run\n%s", config, r->err ? r->err : "");
  if (r->status == LEAK_STATUS || (r->err && strstr(r->err, "cuda-double: leak")))
    fail_msg("%s: the driver double found leaks:\n%s", config, r->err);
}

static inline void result_free(result *r) {
  free(r->out);
  free(r->err);
  if (r->json) json_object_put(r->json);
  memset(r, 0, sizeof *r);
}

static inline json_object *get(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!o || !json_object_object_get_ex(o, key, &v)) fail_msg("the JSON has no \"%s\"", key);
  return v;
}

/* Runs the config at `rel` under the source tree on the double (as set)
 * into *r, with the double's log of counted events: the result (verified,
 * or the test fails) and the log's text, the caller's to free. */
static inline char *run_logged(const char *rel, result *r) {
  const char *log = tu_write_temp(4, "double.log", "");
  setenv("SCHEDRUN_CUDA_DOUBLE_LOG", log, 1);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", tu_env("SCHEDRUN_SOURCE_DIR"), rel);
  run_cuda(path, r);
  unsetenv("SCHEDRUN_CUDA_DOUBLE_LOG");
  char *text = tu_slurp(log, NULL);
  assert_non_null(text);
  if (r->status != 0 || !r->json || !json_object_get_boolean(get(r->json, "verified")))
    fail_msg("%s on the double: exit %d\n%s%s", rel, r->status, r->out ? r->out : "", r->err ? r->err : "");
  return text;
}

static inline void set_double(const char *driver, const char *devices) {
  setenv("SCHEDRUN_CUDA_DOUBLE_DRIVER", driver, 1);
  setenv("SCHEDRUN_CUDA_DOUBLE_DEVICES", devices, 1);
  unsetenv("SCHEDRUN_CUDA_DOUBLE_FAIL");
}

#endif
