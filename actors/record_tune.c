/*
 * Autotuned launches (record_tune.h). A choice is keyed by the SHA-256 of
 * everything it depends on: the kernel's compiled module (its artifact key:
 * source, compiler, options), its entry, the kind of device (target and
 * architecture), the launch's dynamic shared memory, the candidates, the
 * grid's expressions and the values of the key's arguments. It lives in the
 * process's table (core->tunes) and in the cache directory as
 * tune/<key>, an artifact (verified when read, published by rename, so two
 * processes that time the same launch at once leave one whole file) whose
 * payload is msgpack (read_cached).
 *
 * Timing runs each candidate as a one-node sequence on the device the
 * launch is recorded for, on scratch copies of the launch's buffers made
 * from their `init` contents (zeros without one), so that the jobs' own
 * buffers see only the chosen candidate's run: a warm-up launch, then
 * TUNE_REPS timed ones, of which the median counts (the device's own clock
 * where the backend times nodes, CUDA events or the host worker's clock);
 * a candidate whose warm-up took SLOW_FACTOR times the best so far is out
 * after it.
 * The fastest wins; the first listed of equals.
 */
#include <assert.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/core.h"
#include "actors/record_tune.h"
#include "common/artifact.h"

#define TUNE_REPS 5
#define TUNE_DEADLINE_NS (60ull * 1000000000ull) /* one launch of a candidate at most */

void tune_table_init(tune_table *t) {
  memset(t, 0, sizeof *t);
  pthread_mutex_init(&t->lock, NULL);
}

void tune_table_destroy(tune_table *t) {
  free(t->v);
  pthread_mutex_destroy(&t->lock);
  memset(t, 0, sizeof *t);
}

size_t tune_table_count(tune_table *t) {
  pthread_mutex_lock(&t->lock);
  size_t n = t->n;
  pthread_mutex_unlock(&t->lock);
  return n;
}

bool tune_table_get(tune_table *t, size_t i, tune_entry *out) {
  pthread_mutex_lock(&t->lock);
  bool there = i < t->n;
  if (there) *out = t->v[i];
  pthread_mutex_unlock(&t->lock);
  return there;
}

static bool table_find(tune_table *t, const char *key, tune_entry *out) {
  pthread_mutex_lock(&t->lock);
  bool there = false;
  for (size_t i = 0; i < t->n && !there; i++)
    if (!strcmp(t->v[i].key, key)) {
      *out = t->v[i];
      there = true;
    }
  pthread_mutex_unlock(&t->lock);
  return there;
}

static bool table_add(tune_table *t, const tune_entry *e) {
  pthread_mutex_lock(&t->lock);
  bool ok = true;
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 8;
    tune_entry *v = realloc(t->v, cap * sizeof *v);
    if (v) {
      t->v = v;
      t->cap = cap;
    } else {
      ok = false;
    }
  }
  if (ok) t->v[t->n++] = *e;
  pthread_mutex_unlock(&t->lock);
  return ok;
}

/* A scalar argument's value as text, by its parameter type. */
static void scalar_text(prog_type t, uint64_t slot, char *out, size_t n) {
  int32_t i32;
  uint32_t u32;
  int64_t i64;
  float f;
  double d;
  switch (t) {
  case PT_I32: memcpy(&i32, &slot, 4); snprintf(out, n, "%" PRId32, i32); break;
  case PT_U32: memcpy(&u32, &slot, 4); snprintf(out, n, "%" PRIu32, u32); break;
  case PT_I64: memcpy(&i64, &slot, 8); snprintf(out, n, "%" PRId64, i64); break;
  case PT_F32: memcpy(&f, &slot, 4); snprintf(out, n, "%g", (double)f); break;
  case PT_F64: memcpy(&d, &slot, 8); snprintf(out, n, "%g", d); break;
  case PT_U8: snprintf(out, n, "%u", (unsigned)(slot & 0xff)); break;
  default: snprintf(out, n, "%" PRIu64, slot); break;
  }
}

/* The key of the choice for launch st with arguments args on `device`. */
static void choice_key(tune_ctx *c, const prog_step *st, const uint64_t *args, const char *device, char key[65]) {
  const prog_tune *t = st->u.launch.tune;
  const prog_kernel *k = &c->p->kernels[st->u.launch.kernel];
  hash_ctx *h = hash_new();
  hash_add_field(h, "schedrun autotune 2", 19);
  const char *mkey = c->module_keys[st->u.launch.kernel];
  hash_add_str(h, mkey ? mkey : "");
  for (uint32_t i = 0; i < t->nblocks; i++) /* the variants', with constants */
    if (t->kernels[i] != st->u.launch.kernel && (i == 0 || t->kernels[i] != t->kernels[i - 1]))
      hash_add_str(h, c->module_keys[t->kernels[i]] ? c->module_keys[t->kernels[i]] : "");
  hash_add_str(h, k->entry ? k->entry : k->name);
  hash_add_str(h, device);
  hash_add_field(h, &st->u.launch.shared, sizeof st->u.launch.shared);
  hash_add_str(h, t->spec ? t->spec : "");
  for (uint32_t i = 0; i < t->nkey; i++) hash_add_field(h, &args[t->key[i]], sizeof args[t->key[i]]);
  hash_final_hex(h, key);
}

/* A new entry's description: everything but the choice. */
static void describe(tune_ctx *c, const prog_step *st, const uint64_t *args, const char *device, const char *key,
                     tune_entry *e) {
  const prog_tune *t = st->u.launch.tune;
  const prog_kernel *k = &c->p->kernels[st->u.launch.kernel];
  memset(e, 0, sizeof *e);
  str_copy(e->key, sizeof e->key, key);
  str_copy(e->kernel, sizeof e->kernel, k->name);
  str_copy(e->device, sizeof e->device, device);
  prog_where(c->p, st->loc, e->where, sizeof e->where);
  size_t at = 0;
  for (uint32_t i = 0; i < t->nkey && at < sizeof e->keyvals; i++) {
    char v[48];
    scalar_text(k->params[t->key[i]], args[t->key[i]], v, sizeof v);
    int w = snprintf(e->keyvals + at, sizeof e->keyvals - at, "%s%s=%s", i ? " " : "", t->key_names[i], v);
    if (w > 0) at += (size_t)w;
  }
  e->ncand = t->nblocks;
  memcpy(e->cand, t->blocks, sizeof e->cand);
  for (uint32_t i = 0; i < t->nblocks; i++)
    str_copy(e->constants[i], sizeof e->constants[i], t->constants[t->combo[i]] ? t->constants[t->combo[i]] : "");
}

/* The grid of candidate i. */
static int grid_for(const prog_tune *t, const prog_env *env, uint32_t i, uint32_t g[3], strbuf *why) {
  prog_env e = *env;
  uint32_t bx = t->blocks[i][0];
  const prog_expr *grid = t->grid[t->combo[i]];
  e.v[EXV_BLOCK] = bx;
  static const uint32_t most[3] = {PROG_GRID_MAX_X, PROG_GRID_MAX_YZ, PROG_GRID_MAX_YZ};
  for (int d = 0; d < 3; d++) {
    g[d] = 1;
    if (grid[d].n == 0) continue;
    prog_value v;
    const char *bad = prog_expr_eval(&grid[d], &e, &v);
    if (bad) {
      sb_addf(why, "autotune grid for block x %u: %s", bx, bad);
      return -1;
    }
    double x = v.is_int ? (double)v.i : v.f;
    if (!v.is_int && x != (double)(int64_t)x) {
      sb_addf(why, "autotune grid for block x %u: %c is %g, not an integer", bx, "xyz"[d], x);
      return -1;
    }
    if (x < 1 || x > most[d]) {
      sb_addf(why, "autotune grid for block x %u: %c is %g; it is 1 to %u", bx, "xyz"[d], x, most[d]);
      return -1;
    }
    g[d] = (uint32_t)x;
  }
  return 0;
}

static char *cache_path(tune_ctx *c, const char *key) {
  strbuf p;
  sb_init(&p);
  sb_addf(&p, "%s/tune/%s", c->core->cache_dir, key);
  if (p.failed) {
    sb_free(&p);
    return NULL;
  }
  return sb_take(&p);
}

/* A cache entry is msgpack, the project's one codec, written with
 * msgpack-c's packer and read back with its unpacker (msgpack_unpack_next)
 * into an object tree: [TUNE_VERSION, choice, [[x, y, z, ns], ...]], the
 * candidate chosen and each candidate's block and median time, in the
 * launch's order (its key covers the candidates). Only an entry whose whole
 * payload is that one array, at most TUNE_MAX_BYTES, listing the launch's
 * candidates, is believed. */
#define TUNE_VERSION 2
#define TUNE_MAX_BYTES 1024

/* n unsigned integers of array o into v, each at most `most`. */
static bool read_uints(const msgpack_object *o, uint32_t n, uint64_t most, uint64_t *v) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n) return false;
  for (uint32_t i = 0; i < n; i++) {
    const msgpack_object *x = &o->via.array.ptr[i];
    if (x->type != MSGPACK_OBJECT_POSITIVE_INTEGER || x->via.u64 > most) return false;
    v[i] = x->via.u64;
  }
  return true;
}

/* The choice the cache holds for e->key, into e: false when there is none
 * (or none that is whole and names one of the candidates). */
static bool read_cached(tune_ctx *c, tune_entry *e) {
  char *path = cache_path(c, e->key);
  uint8_t *data = NULL;
  size_t len = 0, off = 0;
  bool ok = path && artifact_read(path, e->key, &data, &len, NULL) == SCHEDRUN_OK && len <= TUNE_MAX_BYTES;
  free(path);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  ok = ok && msgpack_unpack_next(&u, (const char *)data, len, &off) == MSGPACK_UNPACK_SUCCESS && off == len;
  const msgpack_object *root = ok ? &u.data : NULL;
  ok = ok && root->type == MSGPACK_OBJECT_ARRAY && root->via.array.size == 3;
  const msgpack_object *v = ok ? &root->via.array.ptr[0] : NULL;
  ok = ok && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 == TUNE_VERSION;
  const msgpack_object *ch = ok ? &root->via.array.ptr[1] : NULL;
  ok = ok && ch->type == MSGPACK_OBJECT_POSITIVE_INTEGER && ch->via.u64 < e->ncand;
  const msgpack_object *cands = ok ? &root->via.array.ptr[2] : NULL;
  ok = ok && cands->type == MSGPACK_OBJECT_ARRAY && cands->via.array.size == e->ncand;
  uint64_t ns[PROG_MAX_CANDIDATES] = {0};
  for (uint32_t i = 0; ok && i < e->ncand; i++) {
    uint64_t x[4];
    ok = read_uints(&cands->via.array.ptr[i], 4, UINT64_MAX, x) && e->cand[i][0] == x[0] && e->cand[i][1] == x[1] &&
         e->cand[i][2] == x[2];
    ns[i] = ok ? x[3] : 0;
  }
  uint32_t choice = ok ? (uint32_t)ch->via.u64 : 0;
  msgpack_unpacked_destroy(&u);
  free(data);
  if (!ok) return false;
  e->choice = choice;
  memcpy(e->block, e->cand[choice], sizeof e->block);
  memcpy(e->cand_ns, ns, sizeof ns);
  e->timed = false;
  return true;
}

/* Publishes e's choice in the cache; a failure only costs a later process
 * the timing. */
static void write_cached(tune_ctx *c, const tune_entry *e) {
  char *path = cache_path(c, e->key);
  char *dir = path ? fs_dirname(path) : NULL;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  int rc = msgpack_pack_array(&pk, 3);
  rc |= msgpack_pack_uint32(&pk, TUNE_VERSION);
  rc |= msgpack_pack_uint32(&pk, e->choice);
  rc |= msgpack_pack_array(&pk, e->ncand);
  for (uint32_t i = 0; i < e->ncand; i++) {
    rc |= msgpack_pack_array(&pk, 4);
    for (int d = 0; d < 3; d++) rc |= msgpack_pack_uint32(&pk, e->cand[i][d]);
    rc |= msgpack_pack_uint64(&pk, e->cand_ns[i]);
  }
  assert(rc != 0 || sb.size <= TUNE_MAX_BYTES); /* 16 candidates of 4 numbers */
  if (dir && rc == 0 && fs_mkdir_private(dir, NULL) == SCHEDRUN_OK) artifact_write(path, e->key, sb.data, sb.size, NULL);
  msgpack_sbuffer_destroy(&sb);
  free(dir);
  free(path);
}

/* Scratch copies of the launch's buffers on the device, from their init
 * contents; args gets the launch's arguments moved onto them. */
typedef struct scratch {
  uint64_t *addr; /* per buffer of the program: 0, or its copy */
} scratch;

static int scratch_fill(tune_ctx *c, scratch *sc, schedrun_error_t *err) {
  gpu_backend *be = c->core->backend;
  int dev = (int)c->r->device;
  for (uint32_t b = 0; b < c->p->nbuffers; b++) {
    if (!sc->addr[b]) continue;
    const prog_buffer *buf = &c->p->buffers[b];
    uint64_t bytes = buf->count * prog_type_size(buf->type);
    int rc = buf->image ? be->ops->copy_htod(be, dev, sc->addr[b], buf->image, bytes, err)
                        : be->ops->mem_zero(be, dev, sc->addr[b], bytes, err);
    if (rc) return rc;
  }
  return SCHEDRUN_OK;
}

static void scratch_free(tune_ctx *c, scratch *sc) {
  gpu_backend *be = c->core->backend;
  for (uint32_t b = 0; sc->addr && b < c->p->nbuffers; b++)
    if (sc->addr[b]) be->ops->mem_free(be, (int)c->r->device, sc->addr[b]);
  free(sc->addr);
}

static int scratch_make(tune_ctx *c, const prog_step *st, const uint64_t *args, scratch *sc, uint64_t *targs,
                        schedrun_error_t *err) {
  gpu_backend *be = c->core->backend;
  int dev = (int)c->r->device;
  sc->addr = calloc(c->p->nbuffers ? c->p->nbuffers : 1, sizeof *sc->addr);
  if (!sc->addr) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (uint32_t a = 0; a < st->u.launch.nargs; a++) {
    targs[a] = args[a];
    if (!st->u.launch.args[a].is_buffer) continue;
    uint32_t b = st->u.launch.args[a].buffer;
    const prog_buffer *buf = &c->p->buffers[b];
    if (!sc->addr[b]) {
      uint64_t bytes = buf->count * prog_type_size(buf->type);
      int rc = be->ops->mem_alloc(be, dev, bytes ? bytes : 1, &sc->addr[b], err);
      if (rc) return err_set(err, rc, "no room on %s for a scratch copy of buffer '%s' (%llu bytes): %s",
                             be->ops->device_name(be, dev), buf->name, (unsigned long long)bytes,
                             err->message ? err->message : "failed");
    }
    assert(args[a] >= c->r->bindings.v[b]); /* the walk made it from the binding */
    targs[a] = sc->addr[b] + (args[a] - c->r->bindings.v[b]);
  }
  return SCHEDRUN_OK;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The median time of a launch of node n, run as a sequence of its own; a
 * candidate whose first launch takes SLOW_FACTOR times the best median so
 * far (`best`, 0: none yet) is not launched again: that launch is its time. */
#define SLOW_FACTOR 8
static int time_node(tune_ctx *c, const gpu_node *n, uint64_t best, uint64_t *median, schedrun_error_t *err) {
  gpu_backend *be = c->core->backend;
  const gpu_ops *ops = be->ops;
  gpu_seq *sq = NULL;
  gpu_node copy = *n;
  uint32_t index;
  int rc = ops->seq_create(be, (int)c->r->device, &sq, err);
  if (rc == SCHEDRUN_OK) rc = ops->seq_add(sq, &copy, &index, err);
  if (rc == SCHEDRUN_OK) rc = ops->seq_finalize(sq, err);
  uint64_t t[TUNE_REPS];
  for (int rep = -1; rc == SCHEDRUN_OK && rep < TUNE_REPS; rep++) {
    gpu_failure f = {GPU_NO_TAG, false};
    uint64_t times[3] = {0}, t0 = now_ns();
    uint32_t nt = 0;
    rc = ops->seq_launch_timed ? ops->seq_launch_timed(sq, t0 + TUNE_DEADLINE_NS, &f, times, 1, &nt, err)
                               : ops->seq_launch(sq, t0 + TUNE_DEADLINE_NS, &f, err);
    uint64_t t1 = now_ns(), took = nt == 1 && times[2] >= times[1] ? times[2] - times[1] : t1 - t0;
    if (rc == SCHEDRUN_OK && rep < 0 && best && took > SLOW_FACTOR * best) {
      ops->seq_destroy(sq);
      *median = took;
      return SCHEDRUN_OK;
    }
    if (rc == SCHEDRUN_OK && rep >= 0) t[rep] = took;
  }
  if (sq) ops->seq_destroy(sq);
  if (rc) return rc;
  qsort(t, TUNE_REPS, sizeof t[0], cmp_u64);
  *median = t[TUNE_REPS / 2];
  return SCHEDRUN_OK;
}

/* Times every candidate into e and chooses. */
static int time_candidates(tune_ctx *c, const prog_step *st, const uint64_t *args, const prog_env *env,
                           tune_entry *e, strbuf *why) {
  const prog_tune *t = st->u.launch.tune;
  schedrun_error_t err = {0};
  scratch sc = {0};
  uint64_t *targs = calloc(st->u.launch.nargs ? st->u.launch.nargs : 1, sizeof *targs);
  int rc = targs ? scratch_make(c, st, args, &sc, targs, &err) : err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
  uint32_t best = 0;
  for (uint32_t i = 0; rc == SCHEDRUN_OK && i < t->nblocks; i++) {
    gpu_node n = {.kind = GN_LAUNCH, .tag = st->command};
    n.u.launch.fn = c->fns[t->kernels[i]];
    memcpy(n.u.launch.block, t->blocks[i], sizeof n.u.launch.block);
    n.u.launch.shared = st->u.launch.shared;
    n.u.launch.args = targs;
    n.u.launch.nargs = st->u.launch.nargs;
    if (grid_for(t, env, i, n.u.launch.grid, why)) {
      rc = SCHEDRUN_ECONFIG;
      break;
    }
    rc = scratch_fill(c, &sc, &err);
    if (rc == SCHEDRUN_OK) rc = time_node(c, &n, i ? e->cand_ns[best] : 0, &e->cand_ns[i], &err);
    if (rc) {
      const uint32_t *b = t->blocks[i], *g = n.u.launch.grid;
      const char *k = t->constants[t->combo[i]];
      sb_addf(why, "autotune candidate %u of %u (block [%u, %u, %u], grid [%u, %u, %u]%s%s) does not launch: %s", i + 1,
              t->nblocks, b[0], b[1], b[2], g[0], g[1], g[2], k ? ", " : "", k ? k : "",
              err.message ? err.message : "failed");
      break;
    }
    if (e->cand_ns[i] < e->cand_ns[best]) best = i;
  }
  if (rc && why->len == 0)
    sb_addf(why, "autotune: %s", err.message ? err.message : rc == SCHEDRUN_ENOMEM ? "out of memory" : "failed");
  schedrun_error_clear(&err);
  scratch_free(c, &sc);
  free(targs);
  if (rc) return -1;
  memcpy(e->block, t->blocks[best], sizeof e->block);
  e->choice = best;
  e->timed = true;
  return 0;
}

int record_tune_choose(tune_ctx *c, const prog_step *st, const uint64_t *args, const prog_env *env, uint32_t grid[3],
                       uint32_t block[3], gpu_function *fn, strbuf *why) {
  const prog_tune *t = st->u.launch.tune;
  assert(t && t->nblocks > 0); /* the loader refuses an empty list */
  /* a launch whose key reads $job is walked for every job: only the key
   * is worked out each time, the rest when the choice is made */
  char device[64], key[65];
  gpu_device_kind(c->core->backend, (int)c->r->device, device, sizeof device); /* the kind it is recorded for */
  choice_key(c, st, args, device, key);
  tune_table *table = &c->core->tunes;
  tune_entry e;
  if (table_find(table, key, &e)) {
    assert(e.choice < t->nblocks); /* the key covers the candidates */
    memcpy(block, e.block, sizeof e.block);
    *fn = c->fns[t->kernels[e.choice]];
    return grid_for(t, env, e.choice, grid, why);
  }
  describe(c, st, args, device, key, &e);
  bool cached = !c->core->retune && read_cached(c, &e);
  if (!cached && time_candidates(c, st, args, env, &e, why)) return -1;
  if (grid_for(t, env, e.choice, e.grid, why)) return -1;
  if (!cached) write_cached(c, &e);
  if (!table_add(table, &e)) {
    sb_adds(why, "autotune: out of memory");
    return -1;
  }
  memcpy(block, e.block, sizeof e.block);
  memcpy(grid, e.grid, sizeof e.grid);
  *fn = c->fns[t->kernels[e.choice]];
  return 0;
}
