/*
 * The CUDA driver the scheduler loads (the double in the suite), reached
 * through cuGetProcAddress as an application reaches it; types as cuda.h
 * has them on 64-bit Linux, so that the tests build without it.
 */
#ifndef SCHEDRUN_TESTS_CU_APP_H
#define SCHEDRUN_TESTS_CU_APP_H

#include <dlfcn.h>
#include <stdlib.h>

#include "test_util.h"

typedef int (*cu_gpa)(const char *, void **, int, unsigned long long);
typedef struct cu_app {
  void *dl;
  int (*init)(unsigned);
  int (*get)(int *, int);
  int (*retain)(void **, int);
  int (*release)(int);
  int (*set)(void *);
  int (*current)(void **);
  int (*alloc)(unsigned long long *, size_t);
  int (*free)(unsigned long long);
  int (*memset_d8)(unsigned long long, unsigned char, size_t);
  int (*htod)(unsigned long long, const void *, size_t);
  int (*dtoh)(void *, unsigned long long, size_t);
  int (*dtod)(unsigned long long, unsigned long long, size_t);
  int dev;    /* what the test retained, for its own use */
  void *ctx;
} cu_app;

/* Opens $SCHEDRUN_CUDA_LIBRARY and takes every entry point above. */
static inline void cu_app_open(cu_app *a) {
  const char *lib = getenv("SCHEDRUN_CUDA_LIBRARY");
  assert_non_null(lib);
  a->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!a->dl) fail_msg("%s", dlerror());
  cu_gpa gpa = (cu_gpa)dlsym(a->dl, "cuGetProcAddress");
  assert_non_null(gpa);
  struct {
    const char *name;
    void **fn;
  } want[] = {{"cuInit", (void **)&a->init},
              {"cuDeviceGet", (void **)&a->get},
              {"cuDevicePrimaryCtxRetain", (void **)&a->retain},
              {"cuDevicePrimaryCtxRelease", (void **)&a->release},
              {"cuCtxSetCurrent", (void **)&a->set},
              {"cuCtxGetCurrent", (void **)&a->current},
              {"cuMemAlloc", (void **)&a->alloc},
              {"cuMemFree", (void **)&a->free},
              {"cuMemsetD8", (void **)&a->memset_d8},
              {"cuMemcpyHtoD", (void **)&a->htod},
              {"cuMemcpyDtoH", (void **)&a->dtoh},
              {"cuMemcpyDtoD", (void **)&a->dtod}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (gpa(want[i].name, want[i].fn, 12000, 0) != 0 || !*want[i].fn) fail_msg("the driver gives no %s", want[i].name);
}

#endif
