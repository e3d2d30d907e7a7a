/* Choosing a backend from a device spec, and finding compile targets. */
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"

int gpu_backend_open(const char *devices, gpu_backend **out, char **why_fallback,
                     sched_error_t *err) {
  *out = NULL;
  if (why_fallback) *why_fallback = NULL;
  if (!devices || !strcmp(devices, "auto") || !strcmp(devices, "host")) {
    if (why_fallback && (!devices || !strcmp(devices, "auto")))
      *why_fallback = xstrdup("the CUDA backend is not built into this sched; using the host");
    return gpu_host_open(1, out, err);
  }
  if (!strncmp(devices, "host:", 5)) {
    char *end;
    long n = strtol(devices + 5, &end, 10);
    if (devices[5] == '\0' || *end != '\0' || n < 1 || n > SCHED_MAX_DEVICES)
      return err_set(err, SCHED_EINVAL, "devices '%s': host:N needs N from 1 to %d", devices,
                     SCHED_MAX_DEVICES);
    return gpu_host_open((int)n, out, err);
  }
  if (!strcmp(devices, "all")) return gpu_host_open(1, out, err);
  if (!strcmp(devices, "cuda") || !strncmp(devices, "cuda:", 5))
    return err_set(err, SCHED_EBACKEND, "devices '%s': no CUDA backend in this build", devices);
  return err_set(err, SCHED_EINVAL,
                 "devices '%s' is not one of auto, host, host:N, cuda, cuda:I,J, all", devices);
}

void gpu_backend_close(gpu_backend **b) {
  if (!b || !*b) return;
  (*b)->ops->destroy(*b);
  *b = NULL;
}

const gpu_compile_target *gpu_compile_target_find(const char *name) {
  if (name && !strcmp(name, gpu_host_target.name)) return &gpu_host_target;
  if (name && !strcmp(name, gpu_cuda_target.name)) return &gpu_cuda_target;
  return NULL;
}

int gpu_params_parse(const char *text, prog_type *out, int max) {
  static const char *const names[] = {"i32", "u32", "i64", "u64", "f32", "f64", "ptr"};
  int n = 0;
  const char *p = text;
  if (!*p) return 0;
  for (;;) {
    size_t len = strcspn(p, ",");
    size_t i = 0;
    while (i < SCHED__ARRAY_LEN(names) && !(strlen(names[i]) == len && !strncmp(p, names[i], len)))
      i++;
    if (i == SCHED__ARRAY_LEN(names) || n >= max) return -1;
    out[n++] = (prog_type)i;
    if (!p[len]) return n;
    p += len + 1;
  }
}
