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
/* What a command wrote to its log, cut at 64 KiB; NULL when there is none. */
char *host_read_log(const char *path);
/* Runs argv with stdout and stderr into log_path; returns the exit status,
 * or -1 when it could not run, ran out of time or was cancelled (*cancel set:
 * the compiler is killed at once). */
int host_run_logged(char *const argv[], const char *log_path, const _Atomic int *cancel, schedrun_error_t *err);
/* The loops that run `call` (a C++ statement) once per thread of the grid
 * __g by blocks __b, setting gridDim, blockDim, blockIdx and threadIdx. */
void host_grid_loops(strbuf *sb, const char *call);
/* The compiler options host_build_so uses, space-separated (part of a recipe). */
void host_build_flags(strbuf *sb);
/* Compiles the translation unit `tu` (C++17) into a shared object, in files
 * named after `stem` inside tmp_dir, and reads it into *out. *log gets what
 * the compiler said. `what` names the unit in errors ("kernel 'saxpy'"). */
int host_build_so(const char *tu, size_t tu_len, const char *tmp_dir, const char *stem, const char *what,
                  const _Atomic int *cancel, uint8_t **out, size_t *out_len, char **log, schedrun_error_t *err);

/* Whether the file system holding dir has less than 1 MiB left: a compiler
 * that fails there says so only in its log ("ld returned 1"). */
bool host_disk_full(const char *dir);

#endif
