/* The CUDA backend's entry points beyond the backend interface: opening it,
 * and the pieces the tests exercise without a GPU. */
#ifndef SCHEDRUN_CUDA_BACKEND_H
#define SCHEDRUN_CUDA_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"

typedef void *cu_api_handle;

/* Loads the driver ($SCHEDRUN_CUDA_LIBRARY, else libcuda.so.1), resolves every
 * entry point and initialises it. On failure, one sentence says why. */
int cuda_api_load(cu_api_handle *out, int *ndevices, schedrun_error_t *err);
void cuda_api_unload(cu_api_handle h);

/* The version of the NVRTC the cuda compile target loads (the same
 * search): SCHEDRUN_OK, or an error code when there is none. */
int nvrtc_version_here(int *major, int *minor);
/* The libcudadevrt.a the backend's own kernels link with, for that NVRTC
 * (as nvrtc_own_ptx finds it): SCHEDRUN_OK, or an error code and "". */
int nvrtc_devrt_here(char *devrt, size_t devrt_len);

/* How a wait for a stream goes on after a look that found it busy, having
 * waited waited_ns: 0 to look again at once (a spin, while may_spin and
 * for spin_ns), else the nanoseconds to sleep first: an eighth of the wait
 * so far, from 2 us to 1 ms (its end noticed at most about 12% late). */
uint64_t cuda_wait_nap(uint64_t spin_ns, bool may_spin, uint64_t waited_ns);

/* The kernelParams array for cuLaunchKernel and kernel nodes: one pointer
 * per 8-byte argument slot (the value is in the slot's low bytes). */
void cuda_marshal_args(const uint64_t *slots, uint32_t n, void **params);

/* Compiles one of the backend's own kernels with NVRTC into PTX for
 * compute_<arch> (or the newest architecture NVRTC knows, when arch is
 * newer). With devrt (not NULL): relocatable PTX, to be linked with the
 * device runtime library, whose path goes to devrt ("" when it is not
 * found: the driver may resolve what the code calls by itself). The PTX
 * says ISA version max_isa (84 for 8.4) when NVRTC's is newer, for a driver
 * that reads no newer PTX; 0: NVRTC's own. Only for code that uses nothing
 * newer than max_isa (it is not rewritten, only relabelled). *ptx is
 * NUL-terminated, malloc'ed. */
int nvrtc_own_ptx(const char *source, const char *name, int arch, int max_isa, char **ptx, char *devrt,
                  size_t devrt_len, schedrun_error_t *err);

#endif
