/* Error objects: a status code and heap text, one line per problem. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

const char *schedrun_strerror(int code) {
  switch (code) {
  case SCHEDRUN_OK: return "ok";
  case SCHEDRUN_EINVAL: return "invalid argument";
  case SCHEDRUN_ENOMEM: return "out of memory";
  case SCHEDRUN_ECONFIG: return "config error";
  case SCHEDRUN_ECOMPILE: return "kernel compile error";
  case SCHEDRUN_EVERIFY: return "verification failed";
  case SCHEDRUN_EBACKEND: return "backend error";
  case SCHEDRUN_EPROTO: return "malformed message";
  case SCHEDRUN_ETIMEOUT: return "timed out";
  case SCHEDRUN_ECLOSED: return "scheduler closed";
  case SCHEDRUN_EIO: return "i/o error";
  case SCHEDRUN_EINTERNAL: return "internal error";
  case SCHEDRUN_EALREADY: return "taken by another waiter";
  case SCHEDRUN_EDEADLK: return "would wait for its own thread";
  case SCHEDRUN_EAGAIN: return "too many jobs in flight";
  case SCHEDRUN_EFAULT: return "kernel fault";
  case SCHEDRUN_ELOST: return "device lost";
  case SCHEDRUN_EDEPEND: return "a job it runs after failed";
  case SCHEDRUN_EHOST: return "host task failed";
  case SCHEDRUN_EBUSY: return "in use";
  default: return "unknown error";
  }
}

void schedrun_error_clear(schedrun_error_t *err) {
  if (!err) return;
  free(err->message);
  err->message = NULL;
  err->code = SCHEDRUN_OK;
}

static int err_vput(schedrun_error_t *err, int code, bool append, const char *fmt, va_list ap) {
  if (!err) return code;
  strbuf sb;
  sb_init(&sb);
  if (append && err->message && err->message[0]) {
    sb_adds(&sb, err->message);
    sb_adds(&sb, "\n");
  }
  sb_vaddf(&sb, fmt, ap);
  free(err->message);
  err->message = sb_take(&sb);
  err->code = code;
  return code;
}

int err_set(schedrun_error_t *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vput(err, code, false, fmt, ap);
  va_end(ap);
  return code;
}

int err_append(schedrun_error_t *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vput(err, code, true, fmt, ap);
  va_end(ap);
  return code;
}

void err_move(schedrun_error_t *dst, schedrun_error_t *src) {
  if (!dst) {
    schedrun_error_clear(src);
    return;
  }
  schedrun_error_clear(dst);
  *dst = *src;
  src->message = NULL;
  src->code = SCHEDRUN_OK;
}

char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }
char *xstrndup(const char *s, size_t n) { return s ? strndup(s, n) : NULL; }

void str_copy(char *dst, size_t cap, const char *s) {
  assert(cap > 0);
  size_t n = s ? strnlen(s, cap - 1) : 0;
  if (n) memcpy(dst, s, n);
  dst[n] = '\0';
}
