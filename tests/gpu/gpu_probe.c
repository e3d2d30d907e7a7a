/*
 * What tests/gpu/run.sh checks before it runs anything: the driver's CUDA
 * version (cuDriverGetVersion), each device's name and compute capability,
 * NVRTC's version and the device runtime library beside it. One JSON object
 * on standard output; exit 0, or 77 when no driver or no GPU is found (with
 * the reason in the object).
 *
 * The driver is $SCHEDRUN_CUDA_LIBRARY or libcuda.so.1, NVRTC
 * $SCHEDRUN_NVRTC_LIBRARY or libnvrtc.so, as the library loads them.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*gpa_fn)(const char *, void **, int, unsigned long long);

static void *entry(gpa_fn gpa, const char *name) {
  void *fn = NULL;
  return gpa(name, &fn, 12000, 0) == 0 ? fn : NULL;
}

/* libcudadevrt.a where the library looks for it: beside NVRTC, in the
 * toolkit, or in the system's library directory. */
static const char *devrt(const char *nvrtc_path, char *buf, size_t cap) {
  const char *env = getenv("SCHEDRUN_CUDADEVRT");
  if (env && *env && access(env, R_OK) == 0) return env;
  char dir[4096] = "";
  if (nvrtc_path && strrchr(nvrtc_path, '/')) {
    snprintf(dir, sizeof dir, "%s", nvrtc_path);
    *strrchr(dir, '/') = '\0';
  }
  const char *dirs[] = {dir, "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    snprintf(buf, cap, "%s/libcudadevrt.a", dirs[i]);
    if (dirs[i][0] && access(buf, R_OK) == 0) return buf;
  }
  return NULL;
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
  const char *nv = getenv("SCHEDRUN_NVRTC_LIBRARY");
  void *nvdl = dlopen(nv && *nv ? nv : "libnvrtc.so", RTLD_NOW | RTLD_LOCAL);
  int (*nvv)(int *, int *) = nvdl ? (int (*)(int *, int *))dlsym(nvdl, "nvrtcVersion") : NULL;
  int nmaj = 0, nmin = 0;
  if (nvv) nvv(&nmaj, &nmin);
  Dl_info info;
  const char *where = nvv && dladdr((void *)nvv, &info) ? info.dli_fname : NULL;
  char buf[4200];
  const char *rt = devrt(where, buf, sizeof buf);
  printf("], \"nvrtc\": \"%d.%d\", \"devrt\": \"%s\"}\n", nmaj, nmin, rt ? rt : "");
  return 0;
}
