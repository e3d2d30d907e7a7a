/* Choosing a backend from a device spec, and finding compile targets. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/backend.h"

static int host_count(const char *spec, schedrun_error_t *err) {
  char *end;
  long n = strtol(spec + 5, &end, 10);
  if (spec[5] == '\0' || *end != '\0' || n < 1 || n > SCHEDRUN_MAX_DEVICES)
    return err_set(err, SCHEDRUN_EINVAL, "devices '%s': host:N needs N from 1 to %d", spec, SCHEDRUN_MAX_DEVICES);
  return (int)n;
}

/* The device numbers of "cuda:I,J,...": how many, or -1 when they are not. */
static int cuda_list(const char *spec, int which[SCHEDRUN_MAX_DEVICES]) {
  int n = 0;
  for (const char *p = spec + 5;;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v >= SCHEDRUN_MAX_DEVICES || n == SCHEDRUN_MAX_DEVICES || (*end && *end != ','))
      return -1;
    which[n++] = (int)v;
    if (!*end) return n;
    p = end + 1;
  }
}

/* How many host devices "all" makes without a GPU: one per core. */
static int host_all_count(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return (int)(cores < 1 ? 1 : cores > SCHEDRUN_MAX_DEVICES ? SCHEDRUN_MAX_DEVICES : cores);
}

bool gpu_devices_fit(const char *want, const char *opened, const gpu_backend *b, bool fell_back) {
  if (!strcmp(want, opened) || !strcmp(want, "auto")) return true; /* auto, as when devices: is left out: any */
  if (strchr(want, '+') || strchr(opened, '+')) return false; /* several kinds: the same spec only */
  int n = b->ops->device_count(b);
  bool host = n > 0 && !strncmp(b->ops->device_name(b, 0), "host:", 5);
  if (!strcmp(want, "host")) return host && n == 1;
  if (!strncmp(want, "host:", 5)) return host && n == atoi(want + 5);
  if (!strncmp(want, "cuda:", 5)) { /* exactly those GPUs, in that order */
    int which[SCHEDRUN_MAX_DEVICES];
    if (host || cuda_list(want, which) != n) return false;
    for (int d = 0; d < n; d++) {
      char name[32];
      snprintf(name, sizeof name, "cuda:%d", which[d]);
      if (strcmp(name, b->ops->device_name(b, d))) return false;
    }
    return true;
  }
  /* all, cuda: every GPU here, or (all) a host device per core without one */
  if (!host) return !strcmp(opened, "auto") || !strcmp(opened, "all") || !strcmp(opened, "cuda");
  if (!fell_back) return false; /* opened as host devices: whether a GPU is here was never asked */
  return !strcmp(want, "all") && n == host_all_count();
}

/* "A+B": a part of each kind, host and CUDA, each one of host, host:N,
 * cuda, cuda:I,J. */
static int open_mixed(const char *spec, const gpu_open_opts *o, gpu_backend **out, schedrun_error_t *err) {
  char parts[GPU_MAX_TARGETS][64];
  int n = 0;
  bool host_seen = false, cuda_seen = false;
  /* every part checked before any opens */
  for (const char *p = spec;;) {
    size_t len = strcspn(p, "+");
    bool host = !strncmp(p, "host", 4) && (len == 4 || p[4] == ':');
    bool cuda = !strncmp(p, "cuda", 4) && (len == 4 || p[4] == ':');
    if (len >= sizeof parts[0] || (!host && !cuda))
      return err_set(err, SCHEDRUN_EINVAL, "devices '%s': '%.*s' is not one of host, host:N, cuda, cuda:I,J", spec,
                     (int)len, p);
    if ((host && host_seen) || (cuda && cuda_seen))
      return err_set(err, SCHEDRUN_EINVAL, "devices '%s' names %s devices twice", spec, host ? "host" : "CUDA");
    assert(n < GPU_MAX_TARGETS); /* one of each kind at most */
    snprintf(parts[n++], sizeof parts[0], "%.*s", (int)len, p);
    host_seen |= host;
    cuda_seen |= cuda;
    if (!p[len]) break;
    p += len + 1;
  }
  gpu_backend *opened[GPU_MAX_TARGETS] = {0};
  for (int i = 0; i < n; i++) {
    int rc = gpu_backend_open(parts[i], o, &opened[i], NULL, err);
    if (rc != SCHEDRUN_OK) {
      while (i-- > 0) gpu_backend_close(&opened[i]);
      return rc;
    }
  }
  return gpu_mixed_open(opened, n, out, err);
}

/* "auto": every GPU, else one host device. "all": every GPU, else one host
 * device per core. "cuda", "cuda:I,J": those GPUs or an error. "host",
 * "host:N": host devices. "A+B": both, in one backend. */
int gpu_backend_open(const char *devices, const gpu_open_opts *o, gpu_backend **out, char **why_fallback,
                     schedrun_error_t *err) {
  *out = NULL;
  if (why_fallback) *why_fallback = NULL;
  const char *spec = devices ? devices : "auto";
  if (strchr(spec, '+')) return open_mixed(spec, o, out, err);
  uint64_t spin = o ? o->spin_ns : 0;
  if (!strcmp(spec, "host")) return gpu_host_open(1, o, out, err);
  if (!strncmp(spec, "host:", 5)) {
    int n = host_count(spec, err);
    return n < 0 ? n : gpu_host_open(n, o, out, err);
  }
  if (!strcmp(spec, "auto") || !strcmp(spec, "all")) {
    schedrun_error_t why = {0};
    if (gpu_cuda_open(NULL, 0, spin, out, &why) == SCHEDRUN_OK) return SCHEDRUN_OK;
    if (why_fallback) *why_fallback = xstrdup(why.message);
    schedrun_error_clear(&why);
    return gpu_host_open(!strcmp(spec, "all") ? host_all_count() : 1, o, out, err);
  }
  if (!strcmp(spec, "cuda")) return gpu_cuda_open(NULL, 0, spin, out, err);
  if (!strncmp(spec, "cuda:", 5)) {
    int which[SCHEDRUN_MAX_DEVICES], n = cuda_list(spec, which);
    if (n < 0) return err_set(err, SCHEDRUN_EINVAL, "devices '%s': cuda:I,J needs device numbers", spec);
    return gpu_cuda_open(which, n, spin, out, err);
  }
  return err_set(err, SCHEDRUN_EINVAL, "devices '%s' is not one of auto, host, host:N, cuda, cuda:I,J, all, or kinds joined by '+'", spec);
}

const char *gpu_compile_arch(const gpu_backend *b) {
  return b->ops->compile_arch ? b->ops->compile_arch(b) : b->ops->arch(b, 0);
}

int gpu_target_count(const gpu_backend *b) {
  int n = 0, first;
  while (b->ops->part && b->ops->part(b, n, &first)) n++;
  return n ? n : 1;
}

void gpu_device_kind(const gpu_backend *b, int dev, char *out, size_t n) {
  const char *target = b->ops->target(b, dev), *arch = b->ops->arch(b, dev);
  snprintf(out, n, "%s%s%s", target, arch && *arch ? " " : "", arch ? arch : "");
}

const gpu_backend *gpu_target_part(const gpu_backend *b, int i) {
  int first;
  return b->ops->part ? b->ops->part(b, i, &first) : i == 0 ? b : NULL;
}

int gpu_device_target(const gpu_backend *b, int dev) {
  int t = 0, first;
  for (int i = 0; b->ops->part && b->ops->part(b, i, &first); i++)
    if (first <= dev) t = i;
  return t;
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
    while (i < SCHEDRUN__ARRAY_LEN(names) && !(strlen(names[i]) == len && !strncmp(p, names[i], len)))
      i++;
    if (i == SCHEDRUN__ARRAY_LEN(names) || n >= max) return -1;
    out[n++] = (prog_type)i;
    if (!p[len]) return n;
    p += len + 1;
  }
}

static const prog_type sample_params[] = {PT_PTR, PT_F32};
const gpu_compile_req gpu_recipe_sample = {
    .name = "sample",
    .entry = "sample",
    .source = "extern \"C\" __global__ void sample(int *p, float v) { p[threadIdx.x] = (int)v; }\n",
    .source_file = "recipe",
    .first_line = 1,
    .params = sample_params,
    .nparams = 2,
    .arch = "",
};
