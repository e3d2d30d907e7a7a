/* Host tasks as their functions see them (schedrun_host_task_*): named
 * buffers in host memory. Shared by host tasks of a job graph
 * (lib/api_deps.c) and host steps of a program (actors/execute_host.c). */
#include <stdlib.h>
#include <string.h>

#include "common/host_task.h"


int host_task_add(schedrun_host_task_t *t, const char *name, uint8_t *data, size_t bytes) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 4;
    char **nv = realloc(t->names, cap * sizeof *nv);
    if (nv) t->names = nv;
    uint8_t **dv = nv ? realloc(t->data, cap * sizeof *dv) : NULL;
    if (dv) t->data = dv;
    size_t *bv = dv ? realloc(t->bytes, cap * sizeof *bv) : NULL;
    if (!bv) return -1;
    t->bytes = bv;
    t->cap = cap;
  }
  if (!(t->names[t->n] = xstrdup(name))) return -1;
  t->data[t->n] = data;
  t->bytes[t->n++] = bytes;
  return 0;
}

static int task_find(const schedrun_host_task_t *t, const char *name) {
  for (size_t i = 0; name && i < t->n; i++)
    if (!strcmp(t->names[i], name)) return (int)i;
  return -1;
}

void *schedrun_host_task_buffer(schedrun_host_task_t *t, const char *name, size_t *bytes) {
  if (bytes) *bytes = 0;
  int i = t ? task_find(t, name) : -1;
  if (i < 0) return NULL;
  if (bytes) *bytes = t->bytes[i];
  return t->data[i];
}

void *schedrun_host_task_output(schedrun_host_task_t *t, const char *name, size_t bytes) {
  if (!t || !name) return NULL;
  if (t->fixed) {
    /* a program's buffers keep their sizes */
    int i = task_find(t, name);
    return i >= 0 && t->bytes[i] == bytes ? t->data[i] : NULL;
  }
  uint8_t *data = calloc(1, bytes ? bytes : 1);
  if (!data) return NULL;
  int i = task_find(t, name);
  if (i >= 0) {
    memcpy(data, t->data[i], t->bytes[i] < bytes ? t->bytes[i] : bytes);
    free(t->data[i]);
    t->data[i] = data;
    t->bytes[i] = bytes;
    return data;
  }
  if (host_task_add(t, name, data, bytes) != 0) {
    free(data);
    return NULL;
  }
  return data;
}

const char *schedrun_host_task_name(const schedrun_host_task_t *t) { return t ? t->name : NULL; }
schedrun_job_t schedrun_host_task_job(const schedrun_host_task_t *t) { return t ? t->id : 0; }

int schedrun_host_task_fail(schedrun_host_task_t *t, const char *why) {
  if (!t) return SCHEDRUN_EINVAL;
  free(t->why);
  t->why = xstrdup(why ? why : "");
  return SCHEDRUN_EHOST;
}

void host_task_clear(schedrun_host_task_t *t) {
  for (size_t i = 0; i < t->n; i++) {
    free(t->data[i]);
    free(t->names[i]);
  }
  free(t->names);
  free(t->data);
  free(t->bytes);
  free(t->why);
  t->names = NULL;
  t->data = NULL;
  t->bytes = NULL;
  t->why = NULL;
  t->n = t->cap = 0;
}

int host_task_call(schedrun_host_task_t *t, schedrun_host_fn fn, void *user, const char **why) {
  int ret = fn(t, user);
  if (ret == 0) return SCHEDRUN_OK;
  int status = ret < 0 && ret >= SCHEDRUN_EBUSY ? ret : SCHEDRUN_EHOST;
  *why = t->why && *t->why ? t->why : schedrun_strerror(status);
  return status;
}
