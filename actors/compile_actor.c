/*
 * The compile actor: turns kernel sources into loadable artifacts, once.
 *
 * It owns the kernel cache (an in-memory index over a content-addressed
 * directory) and the active compile mode: the session of the COMPILE being
 * served. A cache key is the SHA-256 of everything that decides the artifact:
 * target, architecture, the compiler's identity and version, the compile
 * options, the entry, the params and the source. Artifacts are published by
 * rename, so a reader (another process included) sees a whole file or none.
 *
 * When any kernel of a session fails, every kernel is still tried, so that
 * all failures are reported together; then the teardown runs, in order, before
 * the ERROR leaves: reset the active compile mode, drain what the session has
 * pending, evict the failed entries. The next COMPILE starts from a clean
 * state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/actor.h"
#include "actors/core.h"

#define HOST_OPTIONS "-std=c++17 -O2 -fPIC -shared -fvisibility=hidden -fno-exceptions -fno-rtti"

typedef struct cache_entry {
  char *path;
} cache_entry;

typedef struct compile_session {
  uint64_t program, job;
  size_t pending; /* kernels not yet finished */
} compile_session;

struct compile_state {
  sched_core *core;
  hmap cache; /* char[65] key -> cache_entry* */
  char *identity[4]; /* per target, computed once */
  const gpu_compile_target *targets[4];
  compile_session *active; /* the active compile mode */
  compile_session session;
};

compile_state *compile_state_new(sched_core *core) {
  compile_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->core = core;
  hmap_init(&s->cache, 65);
  return s;
}

void compile_state_free(compile_state *s) {
  if (!s) return;
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->cache, &pos, NULL, &v)) {
    free(((cache_entry *)v)->path);
    free(v);
  }
  hmap_destroy(&s->cache);
  for (size_t i = 0; i < SCHED__ARRAY_LEN(s->identity); i++) free(s->identity[i]);
  free(s);
}

static const char *identity_of(compile_state *s, const gpu_compile_target *t, sched_error_t *err) {
  size_t i = 0;
  while (i < SCHED__ARRAY_LEN(s->targets) && s->targets[i] && s->targets[i] != t) i++;
  if (i == SCHED__ARRAY_LEN(s->targets)) return NULL;
  if (!s->targets[i]) {
    char *id = NULL;
    if (t->identity(&id, err) != SCHED_OK) return NULL;
    s->targets[i] = t;
    s->identity[i] = id;
  }
  return s->identity[i];
}

static void cache_key(const gpu_compile_target *t, const char *arch, const char *identity,
                      const msg_kernel *k, char out[65]) {
  hash_ctx *h = hash_new();
  hash_add_str(h, "sched kernel cache v1");
  hash_add_str(h, t->name);
  hash_add_str(h, arch);
  hash_add_str(h, identity);
  hash_add_str(h, HOST_OPTIONS);
  hash_add_str(h, k->entry);
  hash_add_str(h, k->params);
  hash_add_str(h, k->source);
  hash_final_hex(h, out);
}

static char *artifact_path(compile_state *s, const gpu_compile_target *t, const char *key) {
  strbuf sb;
  sb_init(&sb);
  sb_addf(&sb, "%s/%s/%.2s/%s%s", s->core->cache_dir, t->name, key, key, t->ext);
  if (sb.failed) {
    sb_free(&sb);
    return NULL;
  }
  return sb_take(&sb);
}

/* Looks the key up in memory, then on disk. Returns the artifact path or NULL. */
static const char *cache_lookup(compile_state *s, const gpu_compile_target *t, const char *key) {
  cache_entry *e = hmap_get(&s->cache, key);
  if (e) return e->path;
  char *path = artifact_path(s, t, key);
  struct stat st;
  if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
    free(path);
    return NULL;
  }
  e = malloc(sizeof *e);
  if (!e || hmap_put(&s->cache, key, e) != 0) {
    free(e);
    free(path);
    return NULL;
  }
  e->path = path;
  return path;
}

/* Compiles one kernel into the cache. On failure appends the report to *fail. */
static int compile_one(compile_state *s, const gpu_compile_target *t, const char *arch,
                       const msg_kernel *k, const char *key, strbuf *fail) {
  prog_type params[64];
  int np = gpu_params_parse(k->params, params, 64);
  sched_error_t err = {0};
  char *path = artifact_path(s, t, key);
  char *dir = path ? fs_dirname(path) : NULL;
  strbuf tmp;
  sb_init(&tmp);
  sb_addf(&tmp, "%s/tmp/XXXXXX", s->core->cache_dir);
  char *log = NULL;
  int rc;
  if (np < 0) {
    rc = err_set(&err, SCHED_ECOMPILE, "bad params '%s'", k->params);
  } else if (!path || !dir || tmp.failed) {
    rc = err_set(&err, SCHED_ENOMEM, "out of memory");
  } else if ((rc = fs_mkdir_p(dir, &err)) == SCHED_OK) {
    char *tdir = fs_dirname(tmp.data);
    rc = tdir ? fs_mkdir_p(tdir, &err) : err_set(&err, SCHED_ENOMEM, "out of memory");
    free(tdir);
    if (rc == SCHED_OK && !mkdtemp(tmp.data))
      rc = err_set(&err, SCHED_EIO, "cannot create a directory under %s/tmp", s->core->cache_dir);
    if (rc == SCHED_OK) {
      /* compiler messages point into the config or the kernel's file */
      gpu_compile_req req = {k->name,   k->entry, k->source,    k->source_file,
                             k->first_line, params, (uint32_t)np, arch};
      rc = t->compile(&req, tmp.data, path, &log, &err);
      rmdir(tmp.data);
    }
  }
  if (rc == SCHED_OK) {
    cache_entry *e = malloc(sizeof *e);
    if (e && hmap_put(&s->cache, key, e) == 0) {
      e->path = path;
      path = NULL;
    } else {
      free(e);
    }
  } else {
    if (fail->len) sb_adds(fail, "\n");
    sb_addf(fail, "kernel '%s' (%s): %s", k->name, k->where, err.message ? err.message : "");
    if (log && *log) sb_addf(fail, "\n%s", log);
    while (fail->len && fail->data[fail->len - 1] == '\n') fail->data[--fail->len] = '\0';
  }
  free(log);
  free(path);
  free(dir);
  sb_free(&tmp);
  sched_error_clear(&err);
  return rc;
}

/* Removes whatever a failed compile may have left under `key`. */
static void evict(compile_state *s, const gpu_compile_target *t, const char *key) {
  cache_entry *e = hmap_remove(&s->cache, key);
  if (e) {
    free(e->path);
    free(e);
  }
  char *path = artifact_path(s, t, key);
  if (path) unlink(path);
  free(path);
}

static void handle_compile(actor_t *self, compile_state *s, msg *m) {
  const msg_compile *c = &m->body.compile;
  /* enter the active compile mode for this session */
  s->session = (compile_session){c->program, m->job, c->kernels.n};
  s->active = &s->session;

  sched_error_t err = {0};
  const gpu_compile_target *t = gpu_compile_target_find(c->target);
  const char *identity = t ? identity_of(s, t, &err) : NULL;
  if (!t || !identity) {
    s->active = NULL;
    const char *steps[] = {"reset the active compile mode"};
    char text[512];
    snprintf(text, sizeof text, "compile target '%s': %s", c->target,
             t ? (err.message ? err.message : "no compiler") : "unknown target");
    actor_send_error(self, m->from, m->job, SCHED_ECOMPILE, text, steps, 1);
    sched_error_clear(&err);
    return;
  }

  msg reply;
  msg_init(&reply, MSG_COMPILED, m->job, ACTOR_COMPILE);
  msg_compiled *out = &reply.body.compiled;
  out->program = c->program;
  out->target = xstrdup(c->target);
  out->modules.v = calloc(c->kernels.n ? c->kernels.n : 1, sizeof(msg_module));
  strbuf fail;
  sb_init(&fail);
  char (*keys)[65] = calloc(c->kernels.n ? c->kernels.n : 1, 65);
  bool *failed = calloc(c->kernels.n ? c->kernels.n : 1, sizeof(bool));
  size_t nfailed = 0;
  bool oom = !out->modules.v || !keys || !failed;
  if (oom) {
    sb_adds(&fail, "out of memory");
    nfailed = 1;
  }
  for (size_t i = 0; !oom && i < c->kernels.n; i++) {
    const msg_kernel *k = &c->kernels.v[i];
    cache_key(t, c->arch, identity, k, keys[i]);
    const char *path = cache_lookup(s, t, keys[i]);
    if (path) {
      out->hits++;
    } else {
      out->misses++;
      if (compile_one(s, t, c->arch, k, keys[i], &fail) == SCHED_OK) {
        path = cache_lookup(s, t, keys[i]);
      } else {
        failed[i] = true;
        nfailed++;
      }
    }
    s->active->pending--;
    msg_module *mod = &out->modules.v[out->modules.n++];
    mod->name = xstrdup(k->name);
    mod->key = xstrdup(keys[i]);
    mod->path = xstrdup(path ? path : "");
  }
  if (nfailed) {
    /* teardown, in order, before the error leaves */
    size_t drained = s->active ? s->active->pending : 0;
    s->active = NULL;
    size_t evicted = 0;
    for (size_t i = 0; keys && failed && i < c->kernels.n; i++)
      if (failed[i]) {
        evict(s, t, keys[i]);
        evicted++;
      }
    char step2[64], step3[64];
    snprintf(step2, sizeof step2, "drain %zu pending compiles", drained);
    snprintf(step3, sizeof step3, "evict %zu failed cache entries", evicted);
    const char *steps[] = {"reset the active compile mode", step2, step3};
    actor_send_error(self, m->from, m->job, SCHED_ECOMPILE, fail.data ? fail.data : "", steps, 3);
  } else {
    s->active = NULL;
    actor_send(self, m->from, &reply);
  }
  sb_free(&fail);
  free(keys);
  free(failed);
  msg_free(&reply);
}

static int compile_handle(actor_t *self, msg *m) {
  compile_state *s = actor_state(self);
  switch (m->type) {
  case MSG_COMPILE: handle_compile(self, s, m); return ACTOR_CONTINUE;
  case MSG_STATUS: {
    msg r;
    msg_init(&r, MSG_STATUS, m->job, ACTOR_COMPILE);
    r.body.status.items.v = calloc(2, sizeof(msg_stat));
    if (r.body.status.items.v) {
      r.body.status.items.v[0] = (msg_stat){xstrdup("compile_mode_active"), s->active != NULL};
      r.body.status.items.v[1] = (msg_stat){xstrdup("cache_entries"), (int64_t)s->cache.count};
      r.body.status.items.n = 2;
    }
    actor_send(self, m->from, &r);
    msg_free(&r);
    return ACTOR_CONTINUE;
  }
  case MSG_TERM: return ACTOR_STOP;
  default: return ACTOR_CONTINUE;
  }
}

const actor_def compile_actor_def = {NULL, compile_handle, NULL};
