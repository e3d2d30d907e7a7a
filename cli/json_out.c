/*
 * sched-run --json, written with json-c: the library's report object
 * (schedrun_report_json: the program, the summary's numbers, per-device
 * counters, the failures) with what only the command knows added: the
 * outcome (status and exit status), the config, the fallback reason, and
 * errors as structures: a config error is one {file, line, column, message}
 * per problem, a compile error names the kernel, the place the compiler
 * points at, its log and the teardown the compile actor ran.
 */
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_out.h"

/* s with every byte sequence that is not UTF-8 replaced by U+FFFD (malloc'ed). */
static char *utf8_clean(const char *s, size_t n) {
  char *out = malloc(n * 3 + 1), *o = out;
  if (!out) return NULL;
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  while (p < end) {
    unsigned c = *p;
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    bool ok = len > 0 && (size_t)(end - p) >= len;
    for (size_t k = 1; ok && k < len; k++) ok = (p[k] & 0xc0) == 0x80;
    if (ok && len > 1) {
      /* no overlong forms, no surrogates, nothing past U+10FFFF */
      uint32_t cp = len == 2 ? (c & 0x1fu) : len == 3 ? (c & 0x0fu) : (c & 0x07u);
      for (size_t k = 1; k < len; k++) cp = cp << 6 | (p[k] & 0x3fu);
      ok = (len == 2 && cp >= 0x80) || (len == 3 && cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff)) ||
           (len == 4 && cp >= 0x10000 && cp <= 0x10ffff);
    }
    if (ok && c != 0) {
      memcpy(o, p, len);
      o += len;
      p += len;
    } else {
      memcpy(o, "\xef\xbf\xbd", 3);
      o += 3;
      p++;
    }
  }
  *o = '\0';
  return out;
}

static json_object *str_n(const char *s, size_t n) {
  if (!s) return NULL;
  char *c = utf8_clean(s, n);
  json_object *j = json_object_new_string(c ? c : "");
  free(c);
  return j;
}

static json_object *str(const char *s) { return s ? str_n(s, strlen(s)) : NULL; }

static void put(json_object *o, const char *key, json_object *v) { json_object_object_add(o, key, v); }

/* "file:line:col: message" -> its parts; false when the line is not one. */
static bool split_place(const char *line, size_t len, json_object **out) {
  const char *end = line + len;
  for (const char *c = line; c < end; c++) {
    if (*c != ':') continue;
    char *after;
    long ln = strtol(c + 1, &after, 10);
    if (after == c + 1 || *after != ':' || ln <= 0) continue;
    char *after2;
    long col = strtol(after + 1, &after2, 10);
    if (after2 == after + 1 || *after2 != ':' || col <= 0 || after2 + 1 > end) continue;
    const char *msg = after2 + 1;
    while (msg < end && *msg == ' ') msg++;
    json_object *e = json_object_new_object();
    put(e, "file", str_n(line, (size_t)(c - line)));
    put(e, "line", json_object_new_int64(ln));
    put(e, "column", json_object_new_int64(col));
    put(e, "message", str_n(msg, (size_t)(end - msg)));
    *out = e;
    return true;
  }
  return false;
}

/* A config error: one structure per problem line. */
static json_object *config_errors(const char *message) {
  json_object *a = json_object_new_array();
  for (const char *p = message; p && *p;) {
    size_t len = strcspn(p, "\n");
    json_object *e = NULL;
    if (len && !split_place(p, len, &e)) {
      e = json_object_new_object();
      put(e, "message", str_n(p, len));
    }
    if (e) {
      put(e, "kind", json_object_new_string("config"));
      json_object_array_add(a, e);
    }
    p += len + (p[len] == '\n');
  }
  return a;
}

/* A compile error: "kernel 'k' (file:line:col): what\n<log>\nteardown: ..." */
static json_object *compile_errors(const char *message) {
  json_object *a = json_object_new_array(), *e = json_object_new_object();
  put(e, "kind", json_object_new_string("compile"));
  const char *k = strstr(message, "kernel '");
  if (k) {
    const char *q = strchr(k + 8, '\'');
    if (q) put(e, "kernel", str_n(k + 8, (size_t)(q - k - 8)));
  }
  size_t first = strcspn(message, "\n");
  const char *log = message[first] ? message + first + 1 : "";
  const char *teardown = strstr(log, "teardown: ");
  size_t loglen = teardown ? (size_t)(teardown - log) : strlen(log);
  while (loglen && log[loglen - 1] == '\n') loglen--;
  put(e, "message", str_n(message, first));
  put(e, "log", str_n(log, loglen));
  if (teardown) put(e, "teardown", str_n(teardown + 10, strcspn(teardown + 10, "\n")));
  /* the place: where the compiler points, else where the kernel is declared */
  json_object *place = NULL;
  for (const char *p = log; p < log + loglen && !place;) {
    size_t len = strcspn(p, "\n");
    if (memmem(p, len, ": error", 7)) split_place(p, len, &place);
    p += len + 1;
  }
  const char *decl = k ? strchr(k, '(') : NULL;
  if (!place && decl && decl < message + first) split_place(decl + 1, strcspn(decl + 1, ")") + 2, &place);
  if (place) {
    json_object *v;
    if (json_object_object_get_ex(place, "file", &v)) put(e, "file", json_object_get(v));
    if (json_object_object_get_ex(place, "line", &v)) put(e, "line", json_object_get(v));
    if (json_object_object_get_ex(place, "column", &v)) put(e, "column", json_object_get(v));
    json_object_put(place);
  }
  json_object_array_add(a, e);
  return a;
}

static json_object *triple(const unsigned v[3]) {
  json_object *a = json_object_new_array();
  for (int d = 0; d < 3; d++) json_object_array_add(a, json_object_new_int64(v[d]));
  return a;
}

/* The autotuned launches' choices (schedrun_tune_get). */
static json_object *tunes(const schedrun_t *s) {
  json_object *a = json_object_new_array();
  schedrun_tune_info_t t;
  for (size_t i = 0; schedrun_tune_get(s, i, &t, NULL) == SCHEDRUN_OK; i++) {
    json_object *e = json_object_new_object();
    put(e, "kernel", str(t.kernel));
    put(e, "where", str(t.where));
    put(e, "device", str(t.device));
    put(e, "key", str(t.key));
    put(e, "block", triple(t.block));
    put(e, "grid", triple(t.grid));
    put(e, "timed", json_object_new_boolean(t.timed));
    if (t.constants[0]) put(e, "constants", str(t.constants));
    json_object *cands = json_object_new_array();
    for (unsigned c = 0; c < t.ncandidates; c++) {
      json_object *ce = json_object_new_object();
      put(ce, "block", triple(t.candidates[c]));
      put(ce, "ns", json_object_new_int64((int64_t)t.candidate_ns[c]));
      if (t.candidate_constants[c][0]) put(ce, "constants", str(t.candidate_constants[c]));
      json_object_array_add(cands, ce);
    }
    put(e, "candidates", cands);
    json_object_array_add(a, e);
  }
  return a;
}

/* The report's own object (schedrun_report_json), or NULL without a report. */
static json_object *report_object(const schedrun_report_t *rep) {
  char *text = rep ? schedrun_report_json(rep) : NULL;
  json_object *j = text ? json_tokener_parse(text) : NULL;
  free(text);
  if (j && !json_object_is_type(j, json_type_object)) {
    json_object_put(j);
    j = NULL;
  }
  return j;
}

/* "placement": per device, the jobs placed there, by model, and the model's error. */
static json_object *placement(schedrun_t *s) {
  schedrun_stats_t st;
  if (schedrun_get_stats(s, &st, NULL) != SCHEDRUN_OK) return NULL;
  json_object *a = json_object_new_array();
  for (int d = 0; d < schedrun_device_count(s); d++) {
    json_object *e = json_object_new_object();
    put(e, "device", str(schedrun_device_name(s, d)));
    put(e, "placed", json_object_new_int64((int64_t)st.placement[d].placed));
    put(e, "by_model", json_object_new_int64((int64_t)st.placement[d].by_model));
    put(e, "predicted", json_object_new_int64((int64_t)st.placement[d].predicted));
    put(e, "model_error", json_object_new_double(st.placement[d].model_error));
    json_object_array_add(a, e);
  }
  return a;
}

int json_print_outcome(const cli_outcome *o) {
  /* what the library says of the run, then what only the command knows */
  json_object *j = report_object(o->rep);
  if (!j) {
    j = json_object_new_object();
    put(j, "schema", json_object_new_int(SCHEDRUN_REPORT_SCHEMA));
    put(j, "program", o->prog ? str(schedrun_program_name(o->prog)) : o->name ? str(o->name) : NULL);
    json_object *names = json_object_new_array();
    for (int d = 0; o->s && d < schedrun_device_count(o->s); d++) {
      json_object *dev = json_object_new_object();
      put(dev, "name", str(schedrun_device_name(o->s, d)));
      json_object_array_add(names, dev);
    }
    put(j, "devices", names);
    put(j, "failures", o->failures ? o->failures : json_object_new_array());
  } else if (o->failures) {
    json_object_put(o->failures);
  }
  put(j, "status", json_object_new_string(o->status));
  put(j, "exit", json_object_new_int(o->exit_status));
  put(j, "config", str(o->config));
  if (o->signal) put(j, "interrupted", json_object_new_string(o->signal));
  put(j, "verified", json_object_new_boolean(o->exit_status == 0));
  put(j, "fallback", o->s && schedrun_device_fallback(o->s) ? str(schedrun_device_fallback(o->s)) : NULL);
  put(j, "target", o->s && schedrun_compile_target(o->s) ? str(schedrun_compile_target(o->s)) : NULL);
  if (o->s && schedrun_tune_count(o->s)) put(j, "autotune", tunes(o->s));
  if (o->s) put(j, "placement", placement((schedrun_t *)o->s)); /* stats are read under its lock */
  if (o->ranks) put(j, "ranks", o->ranks);
  if (o->stages) put(j, "stages", o->stages);
  json_object *errors;
  if (o->message && !strcmp(o->status, "config-error")) errors = config_errors(o->message);
  else if (o->message && !strcmp(o->status, "compile-error")) errors = compile_errors(o->message);
  else {
    errors = json_object_new_array();
    if (o->message) {
      json_object *e = json_object_new_object();
      put(e, "kind", json_object_new_string(o->status));
      put(e, "message", str(o->message));
      json_object_array_add(errors, e);
    }
  }
  put(j, "errors", errors);
  const char *text = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
  int rc = text && printf("%s\n", text) > 0 && fflush(stdout) == 0 ? 0 : -1;
  json_object_put(j);
  return rc;
}
