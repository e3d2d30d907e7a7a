/* History-based performance models (perf_model.h). */
#include <assert.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/perf_model.h"
#include "common/artifact.h"

#define MODEL_VERSION 1
/* A model file is never larger (PERF_MAX_HISTS entries of 5 small items). */
#define MODEL_MAX_BYTES (PERF_MAX_HISTS * (PERF_KIND_MAX + 48) + 16)

void perf_model_init(perf_model *m, const char *key) {
  memset(m, 0, sizeof *m);
  snprintf(m->key, sizeof m->key, "%s", key);
}

void perf_model_free(perf_model *m) {
  free(m->v);
  m->v = NULL;
  m->n = m->cap = 0;
}

perf_hist *perf_model_find(perf_model *m, const char *kind, uint64_t size, bool create) {
  for (size_t i = 0; i < m->n; i++)
    if (m->v[i].size == size && !strcmp(m->v[i].kind, kind)) return &m->v[i];
  if (!create || m->n == PERF_MAX_HISTS || strlen(kind) >= PERF_KIND_MAX) return NULL;
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 4;
    perf_hist *v = realloc(m->v, cap * sizeof *v);
    if (!v) return NULL;
    m->v = v;
    m->cap = cap;
  }
  perf_hist *h = &m->v[m->n++];
  memset(h, 0, sizeof *h);
  snprintf(h->kind, sizeof h->kind, "%s", kind);
  h->size = size;
  m->dirty = true;
  return h;
}

void perf_hist_add(perf_hist *h, double ns) {
  h->n++;
  double d = ns - h->mean;
  h->mean += d / (double)h->n;
  h->m2 += d * (ns - h->mean);
}

double perf_hist_sd(const perf_hist *h) { return h->n < 2 ? 0 : sqrt(h->m2 / (double)(h->n - 1)); }

int perf_model_encode(const perf_model *m, char **out, size_t *len) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  int rc = msgpack_pack_array(&pk, 2);
  rc |= msgpack_pack_uint32(&pk, MODEL_VERSION);
  rc |= msgpack_pack_array(&pk, (uint32_t)m->n);
  for (size_t i = 0; i < m->n; i++) {
    const perf_hist *h = &m->v[i];
    size_t kl = strlen(h->kind);
    rc |= msgpack_pack_array(&pk, 5);
    rc |= msgpack_pack_str(&pk, kl);
    rc |= msgpack_pack_str_body(&pk, h->kind, kl);
    rc |= msgpack_pack_uint64(&pk, h->size);
    rc |= msgpack_pack_uint64(&pk, h->n);
    rc |= msgpack_pack_double(&pk, h->mean);
    rc |= msgpack_pack_double(&pk, h->m2);
  }
  if (rc != 0) {
    msgpack_sbuffer_destroy(&sb);
    return SCHEDRUN_ENOMEM;
  }
  assert(sb.size <= MODEL_MAX_BYTES);
  *len = sb.size;
  *out = msgpack_sbuffer_release(&sb);
  return SCHEDRUN_OK;
}

static bool read_number(const msgpack_object *o, double *v) {
  if (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32) *v = o->via.f64;
  else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) *v = (double)o->via.u64;
  else return false;
  return isfinite(*v) && *v >= 0;
}

/* One [kind, size, n, mean, m2] into h. */
static bool read_hist(const msgpack_object *o, perf_hist *h) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 5) return false;
  const msgpack_object *x = o->via.array.ptr;
  if (x[0].type != MSGPACK_OBJECT_STR || x[0].via.str.size == 0 || x[0].via.str.size >= PERF_KIND_MAX ||
      memchr(x[0].via.str.ptr, '\0', x[0].via.str.size) || x[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
      x[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    return false;
  memset(h, 0, sizeof *h);
  memcpy(h->kind, x[0].via.str.ptr, x[0].via.str.size);
  h->size = x[1].via.u64;
  h->n = x[2].via.u64;
  return read_number(&x[3], &h->mean) && read_number(&x[4], &h->m2) && h->n > 0;
}

bool perf_model_decode(perf_model *m, const void *data, size_t len) {
  if (len > MODEL_MAX_BYTES) return false;
  size_t off = 0;
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  bool ok = msgpack_unpack_next(&u, data, len, &off) == MSGPACK_UNPACK_SUCCESS && off == len;
  const msgpack_object *root = ok ? &u.data : NULL;
  ok = ok && root->type == MSGPACK_OBJECT_ARRAY && root->via.array.size == 2 &&
       root->via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER && root->via.array.ptr[0].via.u64 == MODEL_VERSION;
  const msgpack_object *hs = ok ? &root->via.array.ptr[1] : NULL;
  ok = ok && hs->type == MSGPACK_OBJECT_ARRAY && hs->via.array.size <= PERF_MAX_HISTS;
  perf_hist *v = ok ? calloc(hs->via.array.size ? hs->via.array.size : 1, sizeof *v) : NULL;
  ok = ok && v;
  for (uint32_t i = 0; ok && i < hs->via.array.size; i++) {
    ok = read_hist(&hs->via.array.ptr[i], &v[i]);
    for (uint32_t k = 0; ok && k < i; k++) ok = !(v[k].size == v[i].size && !strcmp(v[k].kind, v[i].kind));
  }
  if (ok) {
    free(m->v);
    m->v = v;
    m->n = m->cap = hs->via.array.size;
    m->dirty = false;
  } else {
    free(v);
  }
  msgpack_unpacked_destroy(&u);
  return ok;
}

static char *model_path(const perf_model *m, const char *cache_dir) {
  strbuf p;
  sb_init(&p);
  sb_addf(&p, "%s/models/%s", cache_dir, m->key);
  return p.failed ? (sb_free(&p), NULL) : sb_take(&p);
}

bool perf_model_load(perf_model *m, const char *cache_dir) {
  char *path = model_path(m, cache_dir);
  uint8_t *data = NULL;
  size_t len = 0;
  bool ok = path && artifact_read(path, m->key, &data, &len, NULL) == SCHEDRUN_OK && perf_model_decode(m, data, len);
  free(data);
  free(path);
  return ok;
}

int perf_model_save(perf_model *m, const char *cache_dir, schedrun_error_t *err) {
  char *path = model_path(m, cache_dir), *dir = path ? fs_dirname(path) : NULL, *data = NULL;
  size_t len = 0;
  int rc = dir && perf_model_encode(m, &data, &len) == SCHEDRUN_OK ? SCHEDRUN_OK
                                                                     : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  if (!rc) rc = fs_mkdir_private(dir, err);
  if (!rc) rc = artifact_write(path, m->key, data, len, err);
  if (!rc) m->dirty = false;
  free(data);
  free(dir);
  free(path);
  return rc;
}

/* The usable device of kind k with the fewest jobs, or -1. */
static int least_loaded_of(const perf_device *d, int n, int k) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (d[i].usable && d[i].kind == k && (best < 0 || d[i].load < d[best].load)) best = i;
  return best;
}

int perf_choose(const perf_device *d, int n, double *expect_ns) {
  *expect_ns = 0;
  /* calibration first: a kind short of samples, counting its jobs out */
  for (int i = 0; i < n; i++) {
    if (!d[i].usable) continue;
    uint64_t have = d[i].h ? d[i].h->n : 0;
    if (have >= PERF_CALIBRATE || have + d[i].out >= PERF_CALIBRATE) continue;
    int c = least_loaded_of(d, n, d[i].kind);
    assert(c >= 0); /* device i itself is one */
    if (d[c].h && d[c].h->n) *expect_ns = d[c].h->mean;
    return c;
  }
  /* the earliest expected finish among calibrated kinds */
  int best = -1;
  double best_end = 0;
  for (int i = 0; i < n; i++) {
    if (!d[i].usable || !d[i].h || d[i].h->n < PERF_CALIBRATE) continue;
    double end = d[i].queued_ns + d[i].h->mean;
    if (best < 0 || end < best_end || (end == best_end && d[i].load < d[best].load)) {
      best = i;
      best_end = end;
    }
  }
  if (best >= 0) *expect_ns = d[best].h->mean;
  return best; /* -1: every kind still waits for its calibration jobs' times */
}
