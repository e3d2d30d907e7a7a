/* Helpers shared by the tests. */
#ifndef SCHEDRUN_TEST_UTIL_H
#define SCHEDRUN_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "schedrun.h"

/* Writes text to a fresh file under a temporary directory; returns its path
 * (static storage, overwritten by the next call with the same slot). */
const char *tu_write_temp(int slot, const char *name, const char *text);
/* Runs argv, capturing stdout and stderr (heap strings). Returns the exit
 * status, or -1. */
int tu_run(char *const argv[], char **out, char **err);
/* A whole file, NUL-terminated (heap; *len its length, may be NULL); NULL
 * when it cannot be read. */
char *tu_slurp(const char *path, size_t *len);
/* The environment variable, which the test setup must provide. */
const char *tu_env(const char *name);
/* Calls fn with the path of every *.yaml in $SCHEDRUN_CONFIGS; returns how many. */
int tu_for_each_config(void (*fn)(const char *path, void *ctx), void *ctx);
/* Backend options for tests: the suite's shared cache ($SCHEDRUN_CACHE_DIR),
 * so that the host devices' worker program is built once. */
struct gpu_open_opts;
const struct gpu_open_opts *tu_gpu_opts(void);
/* Counts the processes whose arguments `match` accepts (argv as in main). */
int tu_count_processes(int (*match)(int argc, char *const *argv, void *ctx), void *ctx);
/* A scheduler opened with o, or the test fails with the error. */
schedrun_t *tu_open(const schedrun_options_t *o);
/* A program loaded from yaml (named origin in errors) into s, or the test
 * fails with the error. */
schedrun_program_t *tu_load(schedrun_t *s, const char *yaml, const char *origin);
/* A program of one launch that writes 1 into `out`, and expects it. */
extern const char tu_tiny_yaml[];
/* Counts occurrences of needle in hay. */
int tu_count(const char *hay, const char *needle);

#endif
