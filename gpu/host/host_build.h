/*
 * Building C++ into a shared object with the host's compiler: what the host
 * compile target does for every kernel, and what a program that runs CUDA C
 * on the CPU (the driver double under tests/) needs too.
 */
#ifndef SCHEDRUN_HOST_BUILD_H
#define SCHEDRUN_HOST_BUILD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* The C++ compiler: $SCHEDRUN_CXX, else "c++". */
const char *host_cxx(void);
/* The file host_cxx() resolves to (through PATH), or NULL (free it). */
char *host_cxx_path(void);
/* What a command wrote to its log, cut at 64 KiB; NULL when there is none. */
char *host_read_log(const char *path);
/* Runs argv with stdout and stderr into log_path; returns the exit status,
 * or -1 when it could not run, ran out of time or was cancelled (*cancel set:
 * the compiler is killed at once). */
int host_run_logged(char *const argv[], const char *log_path, const _Atomic int *cancel, schedrun_error_t *err);
#define HOST_COMPILE_TIMEOUT_NS (300ull * 1000000000ull)
/* The same, killed after timeout_ns (0: HOST_COMPILE_TIMEOUT_NS), `what`
 * naming the process in errors ("the C++ compiler"). */
int host_run_bounded(char *const argv[], const char *log_path, const _Atomic int *cancel, uint64_t timeout_ns,
                     const char *what, schedrun_error_t *err);
/* The compiler options host_build_so uses, space-separated (part of a recipe). */
void host_build_flags(strbuf *sb);
/* Compiles the translation unit `tu` (C++17) into a shared object, in files
 * named after `stem` inside tmp_dir, and reads it into *out. *log gets what
 * the compiler said. `what` names the unit in errors ("kernel 'saxpy'").
 * The compiler is killed when *cancel is set, or after timeout_ns (0: the
 * default). */
int host_build_so(const char *tu, size_t tu_len, const char *tmp_dir, const char *stem, const char *what,
                  const _Atomic int *cancel, uint64_t timeout_ns, uint8_t **out, size_t *out_len, char **log,
                  schedrun_error_t *err);

/* A program the library builds once, from its own text, into the cache
 * directory (dir_name under it; `what` names it in errors), with the C
 * compiler: the host devices' worker, the NVRTC compile process. Its parts
 * are concatenated, each under a #line naming it; cc is the compiler (NULL:
 * host_cxx()) and flags (NULL-ended, may be NULL) are added to its options.
 * *path is where it is and *fd (close-on-exec, at 10 or above) the file
 * checked to be the user's, which is what runs (as /proc/self/fd/N). */
typedef struct host_text {
  const char *name, *text;
} host_text;
int host_helper_program(const char *cache_dir, const char *dir_name, const char *what, const host_text *parts,
                        size_t nparts, const char *cc, const char *const *flags, char **path, int *fd,
                        schedrun_error_t *err);

/* Whether the file system holding dir has less than 1 MiB left: a compiler
 * that fails there says so only in its log ("ld returned 1"). */
bool host_disk_full(const char *dir);

#endif
