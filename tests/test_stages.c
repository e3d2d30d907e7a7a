/* Job graphs from YAML and the examples: sched-run on a stages config (its
 * summary, --json, --dot, exit statuses), each kind of mistake in one named
 * by file, line and column, and examples/pipeline (produce, transform,
 * reduce in a host task) run as a user runs it. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedrun.h"
#include "test_util.h"

static int run_cli(const char *a1, const char *a2, const char *a3, char **out, char **err) {
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), (char *)a1, (char *)a2, (char *)a3, NULL};
  return tu_run(argv, out, err);
}

static char pipeline[1024];

static const char *pipeline_yaml(void) {
  snprintf(pipeline, sizeof pipeline, "%s/pipeline/pipeline.yaml", tu_env("SCHEDRUN_EXAMPLES"));
  return pipeline;
}

static json_object *get(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v)) fail_msg("no '%s' in %s", key, json_object_to_json_string(o));
  return v;
}

static void shipped_pipeline_runs(void **state) {
  (void)state;
  char *out = NULL, *err = NULL;
  int rc = run_cli("--json", pipeline_yaml(), NULL, &out, &err);
  if (rc != 0) fail_msg("exit %d\n%s%s", rc, out, err);
  json_object *j = json_tokener_parse(out);
  assert_non_null(j);
  assert_string_equal(json_object_get_string(get(j, "status")), "verified");
  json_object *stages = get(j, "stages");
  assert_int_equal(json_object_array_length(stages), 6); /* 3 stages, repeat 2 */
  for (size_t i = 0; i < 6; i++) {
    json_object *st = json_object_array_get_idx(stages, i);
    const char *name = json_object_get_string(get(st, "stage"));
    assert_int_equal((int)i / 3, json_object_get_int(get(st, "run")));
    assert_true(json_object_get_boolean(get(st, "verified")));
    int local = json_object_get_int(get(st, "handoffs_local")), copied = json_object_get_int(get(st, "handoffs_copied")),
        peer = json_object_get_int(get(st, "handoffs_peer"));
    const char *dev = json_object_get_string(get(st, "device"));
    if (!strcmp(name, "produce")) {
      assert_string_equal(dev, "host:0");
      assert_int_equal(local + copied + peer, 0);
    } else if (!strcmp(name, "transform")) {
      assert_string_equal(dev, "host:1");
      assert_int_equal(peer, 1); /* from host:0, arena to arena */
      assert_int_equal(local + copied, 0);
    } else {
      assert_string_equal(name, "combine");
      assert_int_equal(local, 1); /* where one of its inputs was */
      assert_int_equal(peer, 1);
      assert_int_equal(copied, 0);
    }
  }
  json_object_put(j);
  free(out);
  free(err);
  /* --dot draws the graph; the summary names every stage */
  rc = run_cli("--dot", "-", pipeline_yaml(), &out, &err);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "digraph jobs {"));
  assert_non_null(strstr(out, "n0 -> n1 [label=\"x -> v\"];"));
  assert_non_null(strstr(out, "n1 -> n2 [label=\"v -> b\"];"));
  assert_non_null(strstr(out, "pipeline: verified on 2 devices"));
  assert_non_null(strstr(out, "2 runs of 3 stages: 6 jobs, 6 verified, 0 failed"));
  free(out);
  free(err);
  /* options that are for program configs are refused */
  rc = run_cli("--jobs", "2", pipeline_yaml(), &out, &err);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(err, "--jobs is for program configs, not for a stages config"));
  free(out);
  free(err);
  rc = run_cli("--job-timeout", "200", pipeline_yaml(), &out, &err);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(err, "--job-timeout is for program configs, not for a stages config"));
  free(out);
  free(err);
  /* the program loader says what the file is */
  schedrun_program_t *p = NULL;
  schedrun_error_t e = {0};
  assert_int_equal(schedrun_program_load_file(NULL, pipeline_yaml(), &p, &e), SCHEDRUN_ECONFIG);
  assert_non_null(strstr(e.message, "pipeline.yaml:10:1: this is a stages config"));
  schedrun_error_clear(&e);
}

static const char stage_a[] = "version: 1\nname: a\n"
                              "kernels:\n  k:\n    params: [ptr]\n    source: |\n"
                              "      extern \"C\" __global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n"
                              "buffers:\n  x: {type: f32, count: 4}\n"
                              "program:\n  - launch: {kernel: k, grid: 1, block: 4, args: [x]}\n";

/* A stages config in slot 1's directory, beside a.yaml; the problem expected. */
static void mistake(const char *stages, int want_exit, const char *want) {
  tu_write_temp(1, "a.yaml", stage_a);
  tu_write_temp(1, "wrong.yaml", "version: 1\nname: wrong\nbuffers:\n  x: {type: f32, count: 4}\n"
                                 "program:\n  - fill: {buffer: x, value: 1}\nexpect:\n  x: {at: {0: 2}}\n");
  const char *path = tu_write_temp(1, "stages.yaml", stages);
  char *out = NULL, *err = NULL;
  int rc = run_cli(path, NULL, NULL, &out, &err);
  if (rc != want_exit || !strstr(err, want))
    fail_msg("%s: exit %d (want %d), wanted \"%s\" in:\n%s%s", stages, rc, want_exit, want, out, err);
  free(out);
  free(err);
}

/* --timeout bounds a stages run as it bounds a program's: a stage still
 * running then fails (its device lost), the stages after it do not run,
 * and the exit status is 4. */
static void timeout_ends_the_run(void **state) {
  (void)state;
  char *endless = strdup(tu_write_temp(1, "endless.yaml",
                "version: 1\nname: endless\n"
                "kernels:\n  k:\n    params: [ptr]\n    source: |\n"
                "      extern \"C\" __global__ void k(float *x) { volatile int go = 1; while (go) {} x[0] = 1; }\n"
                "buffers:\n  x: {type: f32, count: 4}\n"
                "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [x]}\n"));
  const char *path = tu_write_temp(1, "stages.yaml", "version: 1\ndevices: host\nstages:\n"
                                                     "  e: {config: endless.yaml}\n  f: {config: endless.yaml, after: [e]}\n");
  char *out = NULL, *err = NULL;
  /* A job's deadline counts from its submission, compile included: compile
   * the kernel into the suite's cache first (--check runs nothing), so that
   * the deadline is spent in the kernel however busy the machine is. */
  int rc = run_cli("--check", endless, NULL, &out, &err);
  if (rc != 0) fail_msg("--check: exit %d\n%s%s", rc, out, err);
  free(endless);
  free(out);
  free(err);
  /* --timeout counts from the process's start: on a very busy machine it
   * can run out while the devices start, before the stage began; that
   * outcome names its phase and is tried again with twice the seconds */
  for (int secs = 2;; secs *= 2) {
    char value[16];
    snprintf(value, sizeof value, "%d", secs);
    rc = run_cli("--timeout", value, path, &out, &err);
    if (!tu_timeout_ran_out_early(rc, err) || secs >= 64) break;
    free(out);
    free(err);
  }
  if (rc != 4 || !strstr(err, "stage 'e' (run 0): timed out:") || !strstr(err, "ran past its deadline") ||
      !strstr(err, "stage 'f' (run 0): a job it runs after failed"))
    fail_msg("exit %d (want 4)\n%s%s", rc, out, err);
  free(out);
  free(err);
}

static void mistakes_are_named(void **state) {
  (void)state;
  mistake("version: 1\nstages:\n  a: {config: a.yaml}\n  b: {config: a.yaml, after: [nope]}\n", 2,
          "stages.yaml:4:31: stage 'b' runs after 'nope', which is no stage");
  mistake("version: 1\nstages:\n  a: {config: a.yaml}\n  b: {config: a.yaml, inputs: {x: a.zz}}\n", 2,
          "stages.yaml:4:35: stage 'a' has no buffer 'zz'");
  mistake("version: 1\nstages:\n  a: {config: a.yaml}\n  b: {config: a.yaml, inputs: {x: nope.x}}\n", 2,
          "input 'nope.x' comes from 'nope', which is no stage");
  mistake("version: 1\nstages:\n  a: {config: a.yaml, inputs: {x: b.x}}\n  b: {config: a.yaml, after: [a]}\n", 2,
          "stages.yaml:3:3: the graph has a cycle (each node runs after the next): stage 'a' <- stage 'b' <- stage 'a'");
  mistake("version: 1\nstages:\n  a: {config: missing.yaml}\n", 2,
          "stages.yaml:3:15: stage 'a': its config does not load:");
  mistake("version: 1\nstages:\n  a: {config: a.yaml, colour: red}\n", 2,
          "stages.yaml:3:23: unknown key 'colour' in a stage");
  mistake("version: 1\nstages:\n  a: {config: a.yaml}\n  a: {config: a.yaml}\n", 2, "stage 'a' appears twice");
  mistake("version: 1\nstages:\n  a: {config: a.yaml, device: 3}\n", 2, "stage 'a': no device 3 (there are 1)");
  /* in the config's words (stages), not the C API's (nodes) */
  mistake("version: 1\nstages:\n  a: {config: a.yaml, after: [a]}\n", 2,
          "stages.yaml:3:31: stage 'a' cannot run after itself");
  mistake("version: 1\nstages:\n  a: {config: a.yaml, inputs: {x: a.x}}\n", 2,
          "stages.yaml:3:35: stage 'a' cannot take an input from itself ('a.x')");
  /* a stage that fails its expectation: exit 1; the stage after it did not run */
  mistake("version: 1\ndevices: host\nstages:\n  w: {config: wrong.yaml}\n  a: {config: a.yaml, after: [w]}\n", 1,
          "stage 'a' (run 0): a job it runs after failed: runs after job");
}

/* --json for a stages config is the one schema of docs/config.md: schema,
 * exit, errors with file, line and column, failures, and the stages. */
static void json_is_the_one_schema(void **state) {
  (void)state;
  tu_write_temp(1, "a.yaml", stage_a);
  tu_write_temp(1, "wrong.yaml", "version: 1\nname: wrong\nbuffers:\n  x: {type: f32, count: 4}\n"
                                 "program:\n  - fill: {buffer: x, value: 1}\nexpect:\n  x: {at: {0: 2}}\n");
  const char *path = tu_write_temp(1, "stages.yaml", "version: 1\nstages:\n  a: {config: a.yaml, after: [nope]}\n");
  char *out = NULL, *err = NULL;
  assert_int_equal(run_cli("--json", path, NULL, &out, &err), 2);
  json_object *j = json_tokener_parse(out);
  if (!j) fail_msg("not JSON: %s", out);
  assert_int_equal(json_object_get_int(get(j, "schema")), 1);
  assert_int_equal(json_object_get_int(get(j, "exit")), 2);
  assert_string_equal(json_object_get_string(get(j, "status")), "config-error");
  json_object *e = json_object_array_get_idx(get(j, "errors"), 0);
  assert_non_null(e);
  assert_int_equal(json_object_get_int(get(e, "line")), 3);
  assert_int_equal(json_object_get_int(get(e, "column")), 31);
  assert_non_null(strstr(json_object_get_string(get(e, "message")), "which is no stage"));
  assert_non_null(strstr(json_object_get_string(get(e, "file")), "stages.yaml"));
  json_object_put(j);
  free(out);
  free(err);
  path = tu_write_temp(1, "stages.yaml", "version: 1\nname: two\ndevices: host\nstages:\n  w: {config: wrong.yaml}\n"
                                         "  a: {config: a.yaml, after: [w]}\n");
  assert_int_equal(run_cli("--json", path, NULL, &out, &err), 1);
  j = json_tokener_parse(out);
  if (!j) fail_msg("not JSON: %s", out);
  assert_int_equal(json_object_get_int(get(j, "schema")), 1);
  assert_int_equal(json_object_get_int(get(j, "exit")), 1);
  assert_string_equal(json_object_get_string(get(j, "program")), "two");
  assert_false(json_object_get_boolean(get(j, "verified")));
  assert_int_equal(json_object_array_length(get(j, "stages")), 2);
  json_object *f = get(j, "failures");
  assert_int_equal(json_object_array_length(f), 2);
  assert_non_null(strstr(json_object_get_string(json_object_array_get_idx(f, 0)), "stage 'w' (run 0)"));
  json_object_put(j);
  free(out);
  free(err);
}

static void pipeline_example_runs(void **state) {
  (void)state;
  char *argv[] = {(char *)tu_env("SCHEDRUN_PIPELINE"), NULL};
  char *out = NULL, *err = NULL;
  int rc = tu_run(argv, &out, &err);
  if (rc != 0) fail_msg("exit %d\n%s%s", rc, out, err);
  assert_non_null(strstr(out, "produce on host:0, transform on host:1 (its input from its peer, device to device), reduce on the host"));
  free(out);
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(shipped_pipeline_runs),
      cmocka_unit_test(mistakes_are_named), cmocka_unit_test(json_is_the_one_schema),
      cmocka_unit_test(timeout_ends_the_run),
      cmocka_unit_test(pipeline_example_runs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
