/* Error objects: a status code and heap text, one line per problem. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

const char *sched_strerror(int code) {
  switch (code) {
  case SCHED_OK: return "ok";
  case SCHED_EINVAL: return "invalid argument";
  case SCHED_ENOMEM: return "out of memory";
  case SCHED_ECONFIG: return "config error";
  case SCHED_ECOMPILE: return "kernel compile error";
  case SCHED_EVERIFY: return "verification failed";
  case SCHED_EBACKEND: return "backend error";
  case SCHED_EPROTO: return "malformed message";
  case SCHED_ETIMEOUT: return "timed out";
  case SCHED_ECLOSED: return "scheduler closed";
  case SCHED_EIO: return "i/o error";
  case SCHED_EINTERNAL: return "internal error";
  default: return "unknown error";
  }
}

void sched_error_clear(sched_error_t *err) {
  if (!err) return;
  free(err->message);
  err->message = NULL;
  err->code = SCHED_OK;
}

static int err_vput(sched_error_t *err, int code, bool append, const char *fmt, va_list ap) {
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

int err_set(sched_error_t *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vput(err, code, false, fmt, ap);
  va_end(ap);
  return code;
}

int err_append(sched_error_t *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vput(err, code, true, fmt, ap);
  va_end(ap);
  return code;
}

void err_move(sched_error_t *dst, sched_error_t *src) {
  if (!dst) {
    sched_error_clear(src);
    return;
  }
  sched_error_clear(dst);
  *dst = *src;
  src->message = NULL;
  src->code = SCHED_OK;
}

char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }
char *xstrndup(const char *s, size_t n) { return s ? strndup(s, n) : NULL; }
