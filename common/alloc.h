/*
 * Where schedrun's own memory comes from. Every source file of the library
 * (and of the tests and benchmarks that reach inside it) is compiled with
 * this header included first (`-include`, CMakeLists.txt). With
 * SCHEDRUN_ALLOC_CACHE, malloc and the functions that return what free()
 * takes are the ones below, by name: small blocks (up to ALLOC_SMALL_MAX
 * bytes) come from a cache each thread keeps, by size class, in front of the
 * C library's malloc; the process's own malloc is left alone (a library must
 * not replace it).
 *
 * Why: a job's short-lived objects (its result, its dependency node, the
 * scheduler's record, message columns) are made in bursts of hundreds. The
 * C library's per-thread cache holds 7 blocks of a size; past it, a burst
 * goes through the arena's bins and their consolidations, which cost half
 * of the instructions of a dependent job (docs/design.md, "Memory").
 *
 * The rule that follows: memory crosses between the two allocators nowhere.
 * Every block carries a header; what a C library function returns for
 * free() is got through the names below (strdup, strndup, realpath,
 * aligned_alloc, posix_memalign, asprintf, vasprintf), and what the library
 * hands its caller to free() with the C library's free
 * (schedrun_report_json) is copied with sys_strdup. ASan builds leave the
 * caches out, so that ASan sees every allocation as it is made; TSan builds
 * keep them.
 */
#ifndef SCHEDRUN_COMMON_ALLOC_H
#define SCHEDRUN_COMMON_ALLOC_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s copied into the C library's heap, for a caller who frees it with the
 * C library's free(); NULL for NULL or without memory. */
char *sys_strdup(const char *s);

#ifdef SCHEDRUN_ALLOC_CACHE
#define ALLOC_SMALL_MAX 1024 /* bytes: larger blocks go to the C library at once */

void *sr_malloc(size_t n);
void *sr_calloc(size_t n, size_t size); /* weak: a test may fail one */
void *sr_cache_calloc(size_t n, size_t size);
void *sr_realloc(void *p, size_t n);
void sr_free(void *p);
char *sr_strdup(const char *s);
char *sr_strndup(const char *s, size_t n);
char *sr_realpath(const char *path, char *resolved);
void *sr_aligned_alloc(size_t align, size_t n);
int sr_posix_memalign(void **out, size_t align, size_t n);
int sr_asprintf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int sr_vasprintf(char **out, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Bytes the shared depot holds now (blocks and their headers). */
size_t sr_depot_bytes(void);

#define malloc(n) sr_malloc(n)
#define calloc(n, size) sr_calloc(n, size)
#define realloc(p, n) sr_realloc(p, n)
#define free(p) sr_free(p)
#define strdup(s) sr_strdup(s)
#define strndup(s, n) sr_strndup(s, n)
#define realpath(path, resolved) sr_realpath(path, resolved)
#define aligned_alloc(align, n) sr_aligned_alloc(align, n)
#define posix_memalign(out, align, n) sr_posix_memalign(out, align, n)
#define asprintf(...) sr_asprintf(__VA_ARGS__)
#define vasprintf(out, fmt, ap) sr_vasprintf(out, fmt, ap)
#endif

#endif
