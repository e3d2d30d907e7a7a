/* A host task's buffers (common/host_task.c). */
#ifndef SCHEDRUN_COMMON_HOST_TASK_H
#define SCHEDRUN_COMMON_HOST_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* Buffer i is names[i], data[i] (bytes[i] bytes, owned). */
struct schedrun_host_task {
  schedrun_job_t id;
  const char *name;
  char **names;
  uint8_t **data;
  size_t *bytes;
  size_t n, cap;
  char *why;
  bool fixed; /* a program's host step: its buffers are the program's, no new ones */
};

/* Adds a buffer (taking data); -1 without memory. */
int host_task_add(schedrun_host_task_t *t, const char *name, uint8_t *data, size_t bytes);
/* Runs a host function on t: SCHEDRUN_OK, or the status it fails with (a
 * SCHEDRUN_E* code it returned, any other non-zero SCHEDRUN_EINVAL) and in
 * *why its schedrun_host_task_fail reason, else the status's name (valid
 * while t is). */
int host_task_call(schedrun_host_task_t *t, schedrun_host_fn fn, void *user, const char **why);
/* Frees the buffers and the failure text. */
void host_task_clear(schedrun_host_task_t *t);

#endif
