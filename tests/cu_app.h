/*
 * The CUDA driver the scheduler loads (the double in the suite), reached
 * through cuGetProcAddress as an application reaches it; types as cuda.h
 * has them on 64-bit Linux, so that the tests build without it.
 */
#ifndef SCHEDRUN_TESTS_CU_APP_H
#define SCHEDRUN_TESTS_CU_APP_H

#include <dlfcn.h>
#include <stdbool.h>
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
  int (*push)(void *);
  int (*pop)(void **);
  int (*alloc)(unsigned long long *, size_t);
  int (*free)(unsigned long long);
  int (*memset_d8)(unsigned long long, unsigned char, size_t);
  int (*htod)(unsigned long long, const void *, size_t);
  int (*dtoh)(void *, unsigned long long, size_t);
  int (*dtod)(unsigned long long, unsigned long long, size_t);
  int (*host_alloc)(void **, size_t, unsigned);
  int (*host_free)(void *);
  int (*stream_create)(void **, unsigned);
  int (*stream_destroy)(void *);
  int (*stream_sync)(void *);
  int (*htod_async)(unsigned long long, const void *, size_t, void *);
  int (*dtoh_async)(void *, unsigned long long, size_t, void *);
  int (*event_create)(void **, unsigned);
  int (*event_record)(void *, void *);
  int (*event_query)(void *);
  int (*event_sync)(void *);
  int (*event_elapsed)(float *, void *, void *);
  int (*event_destroy)(void *);
  int dev;    /* what the test retained, for its own use */
  void *ctx;
} cu_app;

/* Opens $SCHEDRUN_CUDA_LIBRARY and takes every entry point below: false
 * when the library or an entry point is not there. */
static inline bool cu_app_try(cu_app *a) {
  const char *lib = getenv("SCHEDRUN_CUDA_LIBRARY");
  a->dl = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
  cu_gpa gpa = a->dl ? (cu_gpa)dlsym(a->dl, "cuGetProcAddress") : NULL;
  if (!gpa) return false;
  struct {
    const char *name;
    void **fn;
  } want[] = {{"cuInit", (void **)&a->init},
              {"cuDeviceGet", (void **)&a->get},
              {"cuDevicePrimaryCtxRetain", (void **)&a->retain},
              {"cuDevicePrimaryCtxRelease", (void **)&a->release},
              {"cuCtxSetCurrent", (void **)&a->set},
              {"cuCtxGetCurrent", (void **)&a->current},
              {"cuCtxPushCurrent", (void **)&a->push},
              {"cuCtxPopCurrent", (void **)&a->pop},
              {"cuMemAlloc", (void **)&a->alloc},
              {"cuMemFree", (void **)&a->free},
              {"cuMemsetD8", (void **)&a->memset_d8},
              {"cuMemcpyHtoD", (void **)&a->htod},
              {"cuMemcpyDtoH", (void **)&a->dtoh},
              {"cuMemcpyDtoD", (void **)&a->dtod},
              {"cuMemHostAlloc", (void **)&a->host_alloc},
              {"cuMemFreeHost", (void **)&a->host_free},
              {"cuStreamCreate", (void **)&a->stream_create},
              {"cuStreamDestroy", (void **)&a->stream_destroy},
              {"cuStreamSynchronize", (void **)&a->stream_sync},
              {"cuMemcpyHtoDAsync", (void **)&a->htod_async},
              {"cuMemcpyDtoHAsync", (void **)&a->dtoh_async},
              {"cuEventCreate", (void **)&a->event_create},
              {"cuEventRecord", (void **)&a->event_record},
              {"cuEventQuery", (void **)&a->event_query},
              {"cuEventSynchronize", (void **)&a->event_sync},
              {"cuEventElapsedTime", (void **)&a->event_elapsed},
              {"cuEventDestroy", (void **)&a->event_destroy}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (gpa(want[i].name, want[i].fn, 12000, 0) != 0 || !*want[i].fn) return false;
  return true;
}

/* cu_app_try, or the test fails. */
static inline void cu_app_open(cu_app *a) {
  assert_non_null(getenv("SCHEDRUN_CUDA_LIBRARY"));
  if (!cu_app_try(a)) fail_msg("%s: no driver, or one without the entry points a test uses", getenv("SCHEDRUN_CUDA_LIBRARY"));
}

#endif
