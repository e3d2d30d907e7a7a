/*
 * Autotuned launches: the loader's checks of `autotune:`, the choice made by
 * timing on a host device (the fastest, as timing each candidate by hand
 * shows), kept in the kernel cache (a later scheduler takes it without
 * timing), timed again with `retune`, left whole by two processes timing at
 * once, a candidate that does not launch, and the builder's way to say it.
 *
 * The kernel's work per thread grows with 1024 / blockDim.x squared and its
 * grid shrinks as the block grows, so the candidates differ 16-fold from one
 * to the next: the fastest is block 1024 on any machine, however busy.
 */
#include <dirent.h>
#include <msgpack.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/artifact.h"
#include "program/program.h"
#include "test_util.h"

extern char **environ;

#define KERNEL                                                                            \
  "kernels:\n"                                                                            \
  "  work:\n"                                                                             \
  "    params: [ptr, ptr, i32]\n"                                                         \
  "    source: |\n"                                                                       \
  "      extern \"C\" __global__ void work(const float *in, float *out, int n) {\n"       \
  "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"                              \
  "        if (i >= n) return;\n"                                                         \
  "        unsigned r = 1024u / blockDim.x, k = r * r * 4;\n"                             \
  "        float acc = 0.0f;\n"                                                           \
  "        for (unsigned j = 0; j < k; j++) acc += in[(i + j) % n];\n"                    \
  "        out[i] = (float)i + acc;\n"                                                    \
  "      }\n"                                                                             \
  "buffers:\n"                                                                            \
  "  in:  {type: f32, count: 4096}\n"                                                     \
  "  out: {type: f32, count: 4096}\n"

#define EXPECT "expect:\n  out: {at: {0: 0, 1: 1, 4095: 4095}, sum: 8386560}\n"

static const char tuned[] = "version: 1\nname: tuned\njobs: 3\n" KERNEL
                            "program:\n"
                            "  - launch:\n"
                            "      kernel: work\n"
                            "      args: [in, out, 4096]\n"
                            "      autotune:\n"
                            "        block: [64, 256, 1024]\n"
                            "        grid: \"(4096 + $block - 1) / $block\"\n"
                            "        key: [n]\n" EXPECT;

static const unsigned candidates[3] = {64, 256, 1024};

/* ---- the loader ---- */

static void load_fails(const char *autotune, const char *where, const char *needle) {
  char text[4096];
  snprintf(text, sizeof text, "version: 1\nname: bad\n%sprogram:\n  - launch:\n      kernel: work\n      args: [in, out, 4096]\n%s",
           KERNEL, autotune);
  tu_config_fails(text, "t.yaml", where, needle);
}

static void test_bad_candidate_lists(void **st) {
  (void)st;
  /* the launch's lines: 22 "autotune:", 23 its first key */
  load_fails("      autotune:\n        block: []\n        grid: 4\n", "t.yaml:23:16", "autotune block lists no candidates");
  load_fails("      autotune:\n        grid: 4\n", "t.yaml:23:9", "autotune needs block");
  load_fails("      autotune:\n        block: 64\n        grid: 4\n", "t.yaml:23:16",
             "autotune block must be a list of candidate blocks");
  load_fails("      autotune:\n        block: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]\n        grid: 4\n",
             "t.yaml:23:16", "autotune block lists 17 candidates; at most 16");
  load_fails("      autotune:\n        block: [64]\n        grid: [1, 2, 3, 4]\n", "t.yaml:24:15",
             "autotune grid must list 1 to 3 sizes, not 4");
  load_fails("      autotune:\n        block: [64]\n        grid: 64\n        key: n\n", "t.yaml:25:14",
             "autotune key must be a list of the kernel's argument names");
  load_fails("      autotune: [64]\n", "t.yaml:22:17", "autotune must be a mapping, not a list");
  load_fails("      autotune:\n        block: [64, [2048]]\n        grid: 4\n", "t.yaml:23:21",
             "autotune candidate 2 has 2048 threads; at most 1024");
  load_fails("      autotune:\n        block: [64, [1, 1, 128]]\n        grid: 4\n", "t.yaml:23:21",
             "autotune candidate 2 [1, 1, 128]: x and y are at most 1024 and z at most 64");
  load_fails("      autotune:\n        block: [64, 64]\n        grid: 4\n", "t.yaml:23:21",
             "autotune candidate 2 is candidate 1 again");
  load_fails("      autotune:\n        block: [64]\n", "t.yaml:23:9", "autotune needs grid");
  load_fails("      autotune:\n        block: [64]\n        grid: \"4096 / $blok\"\n", "t.yaml:24:23",
             "unknown variable $blok");
  load_fails("      autotune:\n        block: [64]\n        grid: 64\n        key: [m]\n", "t.yaml:25:15",
             "autotune key 'm' is not an argument of kernel 'work' (its arguments: in, out, n)");
  load_fails("      autotune:\n        block: [64]\n        grid: 64\n        key: [out]\n", "t.yaml:25:15",
             "autotune key 'out' is a buffer argument of kernel 'work'");
  load_fails("      grid: 4\n      autotune:\n        block: [64]\n        grid: 64\n", "t.yaml:22:13",
             "an autotuned launch takes its grid and its block candidates from autotune");
  /* $block means nothing outside an autotuned launch's grid */
  const char outside[] = "version: 1\nname: bad\n" KERNEL
                         "program:\n  - launch: {kernel: work, grid: 4, block: 1024, args: [in, out, \"$block\"]}\n";
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(prog_load_string(outside, strlen(outside), "t.yaml", &p, &err), SCHEDRUN_ECONFIG);
  assert_non_null(strstr(err.message, "$block is a candidate's block size, known only in an autotuned launch's grid"));
  schedrun_error_clear(&err);
}

static void test_loads_candidates_grid_and_key(void **st) {
  (void)st;
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(prog_load_string(tuned, strlen(tuned), "t.yaml", &p, &err), SCHEDRUN_OK);
  const prog_tune *t = p->steps[0].u.launch.tune;
  assert_non_null(t);
  assert_int_equal(t->nblocks, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(t->blocks[i][0], candidates[i]);
    assert_int_equal(t->blocks[i][1], 1);
    assert_int_equal(t->blocks[i][2], 1);
  }
  assert_int_equal(t->nkey, 1);
  assert_int_equal(t->key[0], 2); /* n, the third argument */
  prog_env env = {{0}};
  env.v[EXV_BLOCK] = 256;
  prog_value v;
  assert_null(prog_expr_eval(&t->grid[0][0], &env, &v));
  assert_int_equal(v.i, 16);
  assert_int_equal(t->grid[0][1].n, 0);
  prog_free(p);
}

/* ---- choosing ---- */

static char cache[256];

/* A cache directory no test has used yet. */
static void fresh_cache(void) { snprintf(cache, sizeof cache, "%s", tu_fresh_dir("cache")); }

static schedrun_t *open_host(int retune) { return tu_open_tuning(cache, retune); }

/* Runs `yaml` (3 jobs, verified) on a fresh scheduler; returns its one
 * choice and the device's launches. */
static void run_tuned(const char *yaml, int retune, schedrun_tune_info_t *t, uint64_t *launches) {
  schedrun_t *s = open_host(retune);
  schedrun_program_t *p = tu_load(s, yaml, "tuned.yaml");
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  if (schedrun_run(s, p, NULL, &r, &err) != SCHEDRUN_OK) fail_msg("run: %s", err.message);
  const schedrun_summary_t *sum = schedrun_report_summary(r);
  assert_int_equal(sum->verified, 3);
  *launches = sum->devices[0].launches;
  assert_int_equal(schedrun_tune_count(s), 1);
  assert_int_equal(schedrun_tune_get(s, 0, t, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_tune_get(s, 1, &(schedrun_tune_info_t){0}, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* The least execute time of 5 jobs of the kernel with a fixed block. */
static uint64_t by_hand(unsigned block) {
  char yaml[4096];
  snprintf(yaml, sizeof yaml,
           "version: 1\nname: fixed\njobs: 5\n%sprogram:\n  - launch: {kernel: work, grid: %u, block: %u, args: [in, "
           "out, 4096]}\n%s",
           KERNEL, 4096 / block, block, EXPECT);
  schedrun_t *s = open_host(0);
  schedrun_program_t *p = tu_load(s, yaml, "fixed.yaml");
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  if (schedrun_run(s, p, NULL, &r, &err) != SCHEDRUN_OK) fail_msg("run: %s", err.message);
  uint64_t least = UINT64_MAX;
  for (int j = 0; j < 5; j++) {
    schedrun_job_info_t info;
    assert_int_equal(schedrun_report_job(r, 0, j, &info), SCHEDRUN_OK);
    assert_int_equal(info.verified, 1);
    if (info.execute_ns < least) least = info.execute_ns;
  }
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
  return least;
}

static void test_picks_the_fastest_and_keeps_it(void **st) {
  (void)st;
  fresh_cache();
  schedrun_tune_info_t t;
  uint64_t launches;
  run_tuned(tuned, 0, &t, &launches);
  assert_int_equal(t.timed, 1);
  assert_string_equal(t.kernel, "work");
  if (!strstr(t.where, "tuned.yaml:20:5")) fail_msg("the launch is at %s", t.where);
  assert_string_equal(t.key, "n=4096");
  assert_int_equal(t.ncandidates, 3);
  /* every candidate was timed, and the choice is the fastest of them */
  unsigned fastest = 0;
  for (unsigned c = 0; c < 3; c++) {
    assert_int_equal(t.candidates[c][0], candidates[c]);
    assert_true(t.candidate_ns[c] > 0);
    if (t.candidate_ns[c] < t.candidate_ns[fastest]) fastest = c;
  }
  assert_int_equal(t.block[0], candidates[fastest]);
  assert_int_equal(t.grid[0], 4096 / candidates[fastest]);
  /* timing each candidate by hand, as a launch of its own, agrees */
  uint64_t hand[3];
  unsigned least = 0;
  for (unsigned c = 0; c < 3; c++) {
    hand[c] = by_hand(candidates[c]);
    if (hand[c] < hand[least]) least = c;
  }
  print_message("candidates: tuned %llu / %llu / %llu ns, by hand %llu / %llu / %llu ns\n",
                (unsigned long long)t.candidate_ns[0], (unsigned long long)t.candidate_ns[1],
                (unsigned long long)t.candidate_ns[2], (unsigned long long)hand[0], (unsigned long long)hand[1],
                (unsigned long long)hand[2]);
  assert_int_equal(least, fastest);
  assert_int_equal(t.block[0], 1024);
  /* the timing launched on the device beside the 3 jobs */
  assert_true(launches > 3);

  /* a later scheduler takes the choice from the cache: no timing */
  schedrun_tune_info_t again;
  run_tuned(tuned, 0, &again, &launches);
  assert_int_equal(again.timed, 0);
  assert_int_equal(again.block[0], t.block[0]);
  assert_int_equal(launches, 3);
  for (unsigned c = 0; c < 3; c++) assert_int_equal(again.candidate_ns[c], t.candidate_ns[c]);

  /* retune: timed again, and the cache holds the new choice */
  run_tuned(tuned, 1, &again, &launches);
  assert_int_equal(again.timed, 1);
  assert_int_equal(again.block[0], 1024);
  assert_true(launches > 3);
}

/* One file in dir/tune, whole: its name is its key. Its path in path. */
static void one_whole_entry(const char *dir, char path_out[800]) {
  char path[512];
  snprintf(path, sizeof path, "%s/tune", dir);
  DIR *d = opendir(path);
  assert_non_null(d);
  int files = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    files++;
    char file[800];
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    uint8_t *payload = NULL;
    size_t len = 0;
    schedrun_error_t err = {0};
    if (artifact_read(file, e->d_name, &payload, &len, &err) != SCHEDRUN_OK) fail_msg("%s: %s", file, err.message);
    snprintf(path_out, 800, "%s", file);
    /* [version, choice, candidates], msgpack: the third candidate, block 1024 */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(&u, (const char *)payload, len, &off), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(off, len);
    assert_int_equal(u.data.type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(u.data.via.array.size, 3);
    assert_int_equal(u.data.via.array.ptr[0].via.u64, 2);
    assert_int_equal(u.data.via.array.ptr[1].via.u64, 2);
    const msgpack_object *c = &u.data.via.array.ptr[2];
    assert_int_equal(c->via.array.size, 3); /* the three candidates' blocks and times */
    for (int i = 0; i < 3; i++) {
      assert_int_equal(c->via.array.ptr[i].via.array.size, 4);
      assert_int_equal(c->via.array.ptr[i].via.array.ptr[0].via.u64, candidates[i]);
    }
    msgpack_unpacked_destroy(&u);
    free(payload);
  }
  closedir(d);
  assert_int_equal(files, 1);
}

static void test_two_processes_leave_one_entry(void **st) {
  (void)st;
  fresh_cache();
  const char *config = tu_write_temp(1, "tuned.yaml", tuned);
  char env_cache[300];
  snprintf(env_cache, sizeof env_cache, "SCHEDRUN_CACHE_DIR=%s", cache);
  char *argv[] = {(char *)tu_env("SCHEDRUN_RUN"), "-q", "--devices", "host:1", (char *)config, NULL};
  /* the environment with the cache directory replaced */
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof *env);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "SCHEDRUN_CACHE_DIR=", 19)) env[k++] = environ[i];
  env[k++] = env_cache;
  pid_t pid[2];
  for (int i = 0; i < 2; i++) assert_int_equal(posix_spawn(&pid[i], argv[0], NULL, NULL, argv, env), 0);
  for (int i = 0; i < 2; i++) {
    int status = 0;
    assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  free(env);
  char entry[800];
  one_whole_entry(cache, entry);
  /* and a third process takes it without timing */
  schedrun_tune_info_t t;
  uint64_t launches;
  run_tuned(tuned, 0, &t, &launches);
  assert_int_equal(t.timed, 0);
  assert_int_equal(t.block[0], 1024);
  assert_int_equal(launches, 3);
  /* an entry that is not whole is not believed: timed again, and replaced */
  FILE *f = fopen(entry, "r+");
  assert_non_null(f);
  assert_int_equal(fseek(f, -3, SEEK_END), 0);
  assert_int_equal(fputs("999", f) >= 0, 1);
  fclose(f);
  run_tuned(tuned, 0, &t, &launches);
  assert_int_equal(t.timed, 1);
  assert_int_equal(t.block[0], 1024);
  one_whole_entry(cache, entry);
}

/* One job of yaml (named origin) on a fresh scheduler fails when recorded,
 * its error naming `where` and saying `needle`, and no choice is kept. */
static void job_fails(const char *yaml, const char *origin, const char *where, const char *needle) {
  schedrun_t *s = open_host(0);
  schedrun_program_t *p = tu_load(s, yaml, origin);
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  schedrun_job_t id;
  schedrun_job_result_t *r = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_submit(s, p, &o, &id, &err), SCHEDRUN_OK);
  assert_int_equal(schedrun_wait(s, id, -1, &r, &err), SCHEDRUN_OK);
  assert_int_not_equal(schedrun_job_result_info(r)->status, SCHEDRUN_OK);
  const char *why = schedrun_job_result_error(r);
  if (!strstr(why, where) || !strstr(why, needle)) fail_msg("unexpected error: %s", why);
  schedrun_job_result_free(&r);
  assert_int_equal(schedrun_tune_count(s), 0);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* A candidate that does not launch fails the job, naming it and the launch. */
static void test_candidate_that_does_not_launch(void **st) {
  (void)st;
  fresh_cache();
  /* a barrier only the first 128 threads of a block reach: divergent, and
   * refused by the host device, in a block of 256 */
  static const char barrier[] = "version: 1\nname: barrier\n"
                                "kernels:\n"
                                "  half:\n"
                                "    params: [ptr]\n"
                                "    source: |\n"
                                "      extern \"C\" __global__ void half(float *out) {\n"
                                "        if (threadIdx.x < 128) __syncthreads();\n"
                                "        out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;\n"
                                "      }\n"
                                "buffers:\n  out: {type: f32, count: 1024}\n"
                                "program:\n"
                                "  - launch:\n"
                                "      kernel: half\n"
                                "      args: [out]\n"
                                "      autotune: {block: [64, 256], grid: \"1024 / $block\"}\n";
  job_fails(barrier, "barrier.yaml", "barrier.yaml:14:5",
            "autotune candidate 2 of 2 (block [256, 1, 1], grid [4, 1, 1]) does not launch");
  /* nothing was kept in the cache either */
  char dir[300];
  snprintf(dir, sizeof dir, "%s/tune", cache);
  DIR *d = opendir(dir);
  int files = 0;
  for (struct dirent *e; d && (e = readdir(d));) files += e->d_name[0] != '.';
  if (d) closedir(d);
  assert_int_equal(files, 0);
}

/* A grid that is no grid for a candidate fails the job when it is
 * recorded, naming the candidate's size and the launch. */
static void test_grid_out_of_range(void **st) {
  (void)st;
  fresh_cache();
  static const char zero[] = "version: 1\nname: zero\n"
                             "kernels:\n"
                             "  work:\n"
                             "    params: [ptr, i32]\n"
                             "    source: |\n"
                             "      extern \"C\" __global__ void work(float *out, int n) {}\n"
                             "buffers:\n  out: {type: f32, count: 16}\n"
                             "program:\n"
                             "  - launch:\n"
                             "      kernel: work\n"
                             "      args: [out, 16]\n"
                             "      autotune: {block: [64], grid: \"16 / $block\"}\n";
  job_fails(zero, "zero.yaml", "zero.yaml:11:5", "autotune grid for block x 64: x is 0; it is 1 to 2147483647");
}

/* The builder's autotuned launch: the same choice, and the same checks. */
static void test_builder_autotune(void **st) {
  (void)st;
  fresh_cache();
  static const unsigned blocks[3][3] = {{64, 1, 1}, {256, 1, 1}, {1024, 1, 1}};
  const char *key[] = {"n"}, *args[] = {"in", "out", "4096"};
  schedrun_builder_t *b;
  schedrun_error_t err = {0};
  assert_int_equal(schedrun_builder_new(&b, "built", &err), SCHEDRUN_OK);
  schedrun_builder_kernel(b, "work", "ptr, ptr, i32",
                          "extern \"C\" __global__ void work(const float *in, float *out, int n) {\n"
                          "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                          "  if (i >= n) return;\n"
                          "  unsigned r = 1024u / blockDim.x, k = r * r * 4;\n"
                          "  float acc = 0.0f;\n"
                          "  for (unsigned j = 0; j < k; j++) acc += in[(i + j) % n];\n"
                          "  out[i] = (float)i + acc;\n"
                          "}\n",
                          NULL);
  schedrun_builder_buffer(b, "in", "f32", 4096, NULL, 0, 0);
  schedrun_builder_buffer(b, "out", "f32", 4096, NULL, 0, 0);
  schedrun_builder_launch_autotune(b, "work", blocks, 3, "(4096 + $block - 1) / $block", key, 1, args, 3);
  static const uint64_t at[] = {0, 4095};
  static const char *const want[] = {"0", "4095"};
  schedrun_builder_expect_at(b, "out", at, want, 2, NULL, 0);
  schedrun_program_t *p = NULL;
  if (schedrun_builder_finish(b, &p, &err) != SCHEDRUN_OK) fail_msg("finish: %s", err.message);
  schedrun_builder_free(&b);
  schedrun_t *s = open_host(0);
  schedrun_report_t *r = NULL;
  if (schedrun_run(s, p, NULL, &r, &err) != SCHEDRUN_OK) fail_msg("run: %s", err.message);
  assert_int_equal(schedrun_report_summary(r)->verified, 1);
  schedrun_tune_info_t t;
  assert_int_equal(schedrun_tune_get(s, 0, &t, &err), SCHEDRUN_OK);
  assert_int_equal(t.timed, 1);
  assert_int_equal(t.block[0], 1024);
  assert_string_equal(t.key, "n=4096");
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);

  /* no candidates: refused, naming the call */
  assert_int_equal(schedrun_builder_new(&b, "empty", &err), SCHEDRUN_OK);
  schedrun_builder_kernel(b, "work", "ptr, ptr, i32", "extern \"C\" __global__ void work(const float *in, float *out, int n) {}\n", NULL);
  schedrun_builder_buffer(b, "in", "f32", 16, NULL, 0, 0);
  schedrun_builder_buffer(b, "out", "f32", 16, NULL, 0, 0);
  schedrun_builder_launch_autotune(b, "work", blocks, 0, "1", NULL, 0, args, 3);
  assert_int_equal(schedrun_builder_finish(b, &p, &err), SCHEDRUN_ECONFIG);
  if (!strstr(err.message, "schedrun_builder_launch_autotune") && !strstr(err.message, "launch of kernel 'work'"))
    fail_msg("the error names no call: %s", err.message);
  assert_non_null(strstr(err.message, "autotune block lists no candidates"));
  schedrun_error_clear(&err);
  schedrun_builder_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_candidate_lists),
      cmocka_unit_test(test_loads_candidates_grid_and_key),
      cmocka_unit_test(test_picks_the_fastest_and_keeps_it),
      cmocka_unit_test(test_two_processes_leave_one_entry),
      cmocka_unit_test(test_candidate_that_does_not_launch),
      cmocka_unit_test(test_grid_out_of_range),
      cmocka_unit_test(test_builder_autotune),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
