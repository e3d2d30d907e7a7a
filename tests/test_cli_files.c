/* What sched-run writes and reports, checked against the library and the
 * project's own files: output paths that cannot be written are refused
 * before anything runs; --json is schedrun_report_json with the command's
 * keys added; --version, schedrun_version(), the header, the build and the
 * CHANGELOG name one version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "test_util.h"

/* A config whose kernel creates the file `marker` when it runs. */
static const char *marker_config(char *marker, size_t n) {
  const char *dir_file = tu_write_temp(2, "probe", "");
  snprintf(marker, n, "%s.ran", dir_file);
  unlink(marker);
  static char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "version: 1\nname: marker\ndevices: host\n"
           "kernels:\n  k:\n    params: [ptr]\n    source: |\n"
           "      extern \"C\" int creat(const char *, unsigned);\n"
           "      extern \"C\" int close(int);\n"
           "      extern \"C\" __global__ void k(int *o) { close(creat(\"%s\", 0644)); o[0] = 1; }\n"
           "buffers:\n  o: {type: i32, count: 1}\n"
           "program:\n  - launch: {kernel: k, grid: 1, block: 1, args: [o]}\n"
           "expect:\n  o: {values: [1]}\n",
           marker);
  return tu_write_temp(2, "marker.yaml", yaml);
}

/* --trace, --dot and --output that cannot be written: exit 2 with the
 * option, the path and why, and no job ran (the kernel would have left its
 * marker); --json says the same as JSON. */
static void test_unwritable_outputs_refused_before_running(void **st) {
  (void)st;
  char marker[512];
  char *cfg = strdup(marker_config(marker, sizeof marker));
  /* the marker works: a run that may write makes it */
  char *out, *err;
  char *ok[] = {(char *)tu_env("SCHEDRUN_RUN"), "-q", cfg, NULL};
  if (tu_run(ok, &out, &err) != 0) fail_msg("the marker config does not run:\n%s%s", out, err);
  struct stat sb;
  assert_int_equal(stat(marker, &sb), 0);
  unlink(marker);
  free(out);
  free(err);
  char under_file[600];
  snprintf(under_file, sizeof under_file, "%s/npy", cfg); /* a directory under a file */
  const struct {
    const char *opt, *path, *why;
  } bad[] = {
      {"--trace", "/missing/dir/t.json", "/missing/dir: No such file or directory"},
      {"--dot", "/tmp", "/tmp: is a directory"},
      {"--output", under_file, "Not a directory"},
      {"--output-all", "/proc/no/such/dir", "cannot be created in /proc"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), (char *)bad[i].opt, (char *)bad[i].path, cfg, NULL};
    int rc = tu_run(argv, &out, &err);
    char want[128];
    snprintf(want, sizeof want, "sched-run: %s: ", bad[i].opt);
    if (rc != 2 || !strstr(err, want) || !strstr(err, bad[i].why) || !strstr(err, "nothing was run") || *out)
      fail_msg("%s %s: exit %d (wanted 2)\n%s%s", bad[i].opt, bad[i].path, rc, out, err);
    if (stat(marker, &sb) == 0) fail_msg("%s %s: a job ran before the path was refused", bad[i].opt, bad[i].path);
    free(out);
    free(err);
  }
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--json", "--trace", "/missing/dir/t.json", cfg, NULL};
  assert_int_equal(tu_run(argv, &out, &err), 2);
  json_object *j = json_tokener_parse(out), *v;
  if (!j) fail_msg("--json printed no JSON: %s", out);
  assert_true(json_object_object_get_ex(j, "status", &v));
  assert_string_equal(json_object_get_string(v), "usage-error");
  assert_true(json_object_object_get_ex(j, "errors", &v));
  assert_non_null(strstr(json_object_to_json_string_ext(v, JSON_C_TO_STRING_NOSLASHESCAPE), "/missing/dir"));
  assert_int_not_equal(stat(marker, &sb), 0);
  json_object_put(j);
  free(out);
  free(err);
  free(cfg);
}

static json_object *get(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v)) fail_msg("no '%s' in %s", key, json_object_to_json_string(o));
  return v;
}

/* Keys whose values change from one run to the next: times and the cache. */
static int varies(const char *key) {
  return strstr(key, "_ms") != NULL || !strncmp(key, "cache_", 6);
}

/* --json on a config, and schedrun_report_json of the same config run
 * through the API: every key of the library's object is in --json with the
 * same value (times and cache counts aside), and --json adds only the
 * command's own keys. */
static void test_json_is_the_report_json(void **st) {
  (void)st;
  char path[512];
  snprintf(path, sizeof path, "%s/nested_loops.yaml", tu_env("SCHEDRUN_CONFIGS"));
  char *out, *err;
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--json", path, NULL};
  if (tu_run(argv, &out, &err) != 0) fail_msg("%s%s", out, err);
  json_object *cli = json_tokener_parse(out);
  if (!cli) fail_msg("not JSON: %s", out);
  free(out);
  free(err);

  schedrun_error_t e = {0};
  schedrun_program_t *p = NULL;
  if (schedrun_program_load_file(NULL, path, &p, &e)) fail_msg("%s", e.message);
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = schedrun_program_devices(p);
  schedrun_t *s = tu_open(&o);
  schedrun_report_t *r = NULL;
  if (schedrun_run(s, p, NULL, &r, &e)) fail_msg("%s", e.message);
  char *text = schedrun_report_json(r);
  json_object *lib = text ? json_tokener_parse(text) : NULL;
  if (!lib) fail_msg("schedrun_report_json is not JSON: %s", text ? text : "(NULL)");
  (free)(text); /* the C library's free, as the header says: not alloc.h's */

  int shared = 0;
  json_object_object_foreach(lib, key, val) {
    json_object *c = get(cli, key);
    shared++;
    if (!strcmp(key, "devices")) {
      assert_int_equal(json_object_array_length(c), json_object_array_length(val));
      for (size_t d = 0; d < json_object_array_length(val); d++) {
        json_object *ld = json_object_array_get_idx(val, d), *cd = json_object_array_get_idx(c, d);
        json_object_object_foreach(ld, dk, dv) {
          if (!varies(dk) && !json_object_equal(dv, get(cd, dk)))
            fail_msg("devices[%zu].%s: %s in --json, %s from the library", d, dk,
                     json_object_to_json_string(get(cd, dk)), json_object_to_json_string(dv));
        }
        assert_int_equal(json_object_object_length(cd), json_object_object_length(ld));
      }
    } else if (!varies(key) && !json_object_equal(c, val)) {
      fail_msg("%s: %s in --json, %s from the library", key, json_object_to_json_string(c),
               json_object_to_json_string(val));
    }
  }
  /* the keys the header and docs/config.md promise, no more */
  static const char *const documented[] = {"schema",        "program",        "verified",      "runs",
                                           "jobs",          "jobs_verified",  "jobs_failed",   "compile_ms_sum",
                                           "record_ms_sum", "execute_ms_sum", "wall_ms",       "cache_hits",
                                           "cache_misses",  "nodes_created",  "nodes_updated", "nodes_reused",
                                           "devices",       "failures"};
  for (size_t i = 0; i < sizeof documented / sizeof documented[0]; i++) (void)get(lib, documented[i]);
  assert_int_equal(shared, (int)(sizeof documented / sizeof documented[0]));
  assert_int_equal(json_object_get_int(get(lib, "schema")), SCHEDRUN_REPORT_SCHEMA);
  static const char *const own[] = {"status", "exit", "config", "fallback", "target", "placement", "errors"};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) (void)get(cli, own[i]);
  assert_int_equal(json_object_object_length(cli), shared + (int)(sizeof own / sizeof own[0]));
  json_object_put(lib);
  json_object_put(cli);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* One version everywhere: sched-run --version, schedrun_version(), the
 * header's macros, the build's (CMake's project version) and the newest
 * entry of CHANGELOG.md. */
static void test_one_version(void **st) {
  (void)st;
  char want[64];
  snprintf(want, sizeof want, "%d.%d.%d", SCHEDRUN_VERSION_MAJOR, SCHEDRUN_VERSION_MINOR, SCHEDRUN_VERSION_PATCH);
  assert_string_equal(schedrun_version(), want);
  assert_string_equal(tu_env("SCHEDRUN_VERSION"), want);
  char *out, *err;
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--version", NULL};
  assert_int_equal(tu_run(argv, &out, &err), 0);
  char line[96];
  snprintf(line, sizeof line, "sched-run %s\n", want);
  assert_string_equal(out, line);
  free(out);
  free(err);
  char path[512];
  snprintf(path, sizeof path, "%s/CHANGELOG.md", tu_env("SCHEDRUN_SOURCE_DIR"));
  char *log = tu_slurp(path, NULL);
  if (!log) fail_msg("%s cannot be read", path);
  const char *entry = strstr(log, "\n## ");
  if (!entry) fail_msg("CHANGELOG.md has no '## VERSION' entry");
  char heading[96];
  snprintf(heading, sizeof heading, "\n## %s ", want);
  if (strncmp(entry, heading, strlen(heading)) != 0)
    fail_msg("the newest CHANGELOG.md entry is not %s: %.40s", want, entry + 1);
  free(log);
}

/* The installed man page names every option of --help and every
 * environment variable the code reads. */
static void test_man_page_complete(void **st) {
  (void)st;
  char path[512];
  snprintf(path, sizeof path, "%s/docs/sched-run.1.in", tu_env("SCHEDRUN_SOURCE_DIR"));
  char *man = tu_slurp(path, NULL);
  if (!man) fail_msg("%s cannot be read", path);
  char *out, *err;
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "--help", NULL};
  assert_int_equal(tu_run(argv, &out, &err), 0);
  int options = 0;
  for (const char *p = strstr(out, "\n  "); p; p = strstr(p + 1, "\n  ")) {
    const char *o = strstr(p + 1, "--");
    if (!o || o > strchr(p + 1, '\n') || o[2] == ' ') continue; /* a continuation line */
    char name[64], want[80];
    if (sscanf(o + 2, "%63[a-z-]", name) != 1) continue;
    /* man writes each - of an option as \- */
    snprintf(want, sizeof want, "\\-\\-");
    for (char *c = name; *c; c++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s", *c == '-' ? "\\-" : (char[]){*c, 0});
    if (!strstr(man, want)) fail_msg("the man page lacks --%s (%s)", name, want);
    options++;
  }
  assert_true(options >= 16);
  free(out);
  free(err);
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "cd '%s' && grep -rhoE 'getenv\\(\"[A-Z_]+\"\\)' actors common gpu lib program cli mpi messages | "
           "sed 's/getenv(\"\\(.*\\)\")/\\1/' | sort -u",
           tu_env("SCHEDRUN_SOURCE_DIR"));
  char *sh_argv[] = {"/bin/sh", "-c", cmd, NULL};
  assert_int_equal(tu_run(sh_argv, &out, &err), 0);
  int vars = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strcmp(line, "PATH")) continue; /* where the compiler is looked for, as anywhere */
    if (!strstr(man, line)) fail_msg("the man page lacks the environment variable %s", line);
    vars++;
  }
  assert_true(vars >= 8);
  free(out);
  free(err);
  free(man);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unwritable_outputs_refused_before_running),
      cmocka_unit_test(test_json_is_the_report_json),
      cmocka_unit_test(test_one_version),
      cmocka_unit_test(test_man_page_complete),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
