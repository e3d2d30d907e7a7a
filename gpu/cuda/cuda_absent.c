/*
 * The CUDA backend of a library configured without the CUDA toolkit's cuda.h:
 * "cuda" device specs answer with the reason, and "auto" falls back to host
 * devices with that reason shown in the summary.
 */
#include "gpu/backend.h"

int gpu_cuda_open(const int *which, int nwhich, uint64_t spin_ns, gpu_backend **out, schedrun_error_t *err) {
  (void)which;
  (void)nwhich;
  (void)spin_ns;
  *out = NULL;
  return err_set(err, SCHEDRUN_EBACKEND,
                 "this libschedrun was built without the CUDA backend (cuda.h was not found when it was "
                 "configured): rebuild with the CUDA toolkit's headers to use cuda devices");
}
