/*
 * What tests/gpu/run.sh checks before it runs anything: the driver's CUDA
 * version (cuDriverGetVersion), each device's name and compute capability,
 * NVRTC's version and the device runtime library beside it. One JSON object
 * on standard output; exit 0, or 77 when no driver or no GPU is found (with
 * the reason in the object).
 *
 * The driver is $SCHEDRUN_CUDA_LIBRARY or libcuda.so.1, reached as an
 * application reaches it; NVRTC and libcudadevrt.a are found by the
 * library's own search (gpu/cuda/cuda_backend.h).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/cuda/cuda_backend.h"

typedef int (*gpa_fn)(const char *, void **, int, unsigned long long);

static void *entry(gpa_fn gpa, const char *name) {
  void *fn = NULL;
  return gpa(name, &fn, 12000, 0) == 0 ? fn : NULL;
}

int main(void) {
  const char *lib = getenv("SCHEDRUN_CUDA_LIBRARY");
  void *dl = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  gpa_fn gpa = dl ? (gpa_fn)dlsym(dl, "cuGetProcAddress") : NULL;
  if (!gpa) {
    printf("{\"error\": \"no CUDA driver (%s)\"}\n", lib && *lib ? lib : "libcuda.so.1");
    return 77;
  }
  int (*init)(unsigned) = entry(gpa, "cuInit");
  int (*version)(int *) = entry(gpa, "cuDriverGetVersion");
  int (*count)(int *) = entry(gpa, "cuDeviceGetCount");
  int (*get)(int *, int) = entry(gpa, "cuDeviceGet");
  int (*name)(char *, int, int) = entry(gpa, "cuDeviceGetName");
  int (*attr)(int *, int, int) = entry(gpa, "cuDeviceGetAttribute");
  int v = 0, n = 0;
  if (!init || !version || !count || !get || !name || !attr || init(0) != 0 || version(&v) != 0 || count(&n) != 0 ||
      n == 0) {
    printf("{\"error\": \"the driver sees no GPU\", \"driver_version\": %d}\n", v);
    return 77;
  }
  printf("{\"driver_version\": %d, \"devices\": [", v);
  for (int i = 0; i < n; i++) {
    int d = 0, major = 0, minor = 0;
    char nm[256] = "?";
    get(&d, i);
    name(nm, sizeof nm, d);
    attr(&major, 75 /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */, d);
    attr(&minor, 76 /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */, d);
    for (char *c = nm; *c; c++)
      if (*c == '"' || *c == '\\') *c = '\'';
    printf("%s{\"name\": \"%s\", \"sm\": %d}", i ? ", " : "", nm, major * 10 + minor);
  }
  /* NVRTC and libcudadevrt as the library finds them */
  int nmaj = 0, nmin = 0;
  nvrtc_version_here(&nmaj, &nmin);
  char rt[4096];
  nvrtc_devrt_here(rt, sizeof rt);
  printf("], \"nvrtc\": \"%d.%d\", \"devrt\": \"%s\"}\n", nmaj, nmin, rt);
  return 0;
}
