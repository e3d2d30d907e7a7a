/*
 * The compile actor's kernel cache: an in-memory index over a
 * content-addressed directory (one verified artifact file per key), and the
 * compile targets the actor has opened, each with its identity (the
 * compiler and its version, remembered on disk under the compiler's stamp,
 * and the recipe), which is part of every key. Used by the actor's thread
 * only (the workers write artifacts, the actor indexes them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/compile_state.h"
#include "common/artifact.h"

/* The identity, remembered on disk under the compiler's stamp (asking a C++
 * compiler for its version costs a process). */
static int identity_cached(compile_state *s, const gpu_compile_target *t, void *ctx, char **out,
                           schedrun_error_t *err) {
  char *stamp = NULL;
  if (!t->stamp || t->stamp(ctx, &stamp, NULL) != SCHEDRUN_OK) return t->identity(ctx, out, err);
  hash_ctx *h = hash_new();
  hash_add_str(h, t->name);
  hash_add_str(h, stamp);
  char key[65];
  hash_final_hex(h, key);
  free(stamp);
  strbuf path;
  sb_init(&path);
  sb_addf(&path, "%s/identity/%s", s->core->cache_dir, key);
  uint8_t *data = NULL;
  size_t len = 0;
  if (!path.failed && artifact_read(path.data, key, &data, &len, NULL) == SCHEDRUN_OK && len > 0 &&
      !memchr(data, '\0', len)) {
    *out = xstrndup((char *)data, len);
    free(data);
    sb_free(&path);
    return *out ? SCHEDRUN_OK : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  free(data);
  int rc = t->identity(ctx, out, err);
  if (rc == SCHEDRUN_OK && !path.failed) {
    char *dir = fs_dirname(path.data);
    if (dir && fs_mkdir_private(dir, NULL) == SCHEDRUN_OK) artifact_write(path.data, key, *out, strlen(*out), NULL);
    free(dir);
  }
  sb_free(&path);
  return rc;
}

target_slot *compile_target_of(compile_state *s, const gpu_compile_target *t, schedrun_error_t *err) {
  for (int i = 0; i < MAX_TARGETS; i++) {
    target_slot *ts = &s->targets[i];
    if (ts->target == t) return ts;
    if (ts->target) continue;
    void *ctx = NULL;
    char *id = NULL;
    if (t->open(&ctx, err) != SCHEDRUN_OK) return NULL;
    if (identity_cached(s, t, ctx, &id, err) != SCHEDRUN_OK) {
      t->close(ctx);
      return NULL;
    }
    /* the recipe (options, generated wrapper) is part of every key */
    char *recipe = NULL;
    if (t->recipe(ctx, &recipe, err) != SCHEDRUN_OK) {
      free(id);
      t->close(ctx);
      return NULL;
    }
    hash_ctx *h = hash_new();
    char rk[65] = "";
    if (h) {
      hash_add_str(h, recipe);
      hash_final_hex(h, rk);
    }
    free(recipe);
    char *with = NULL;
    if (asprintf(&with, "%s\nrecipe %s", id, rk) < 0) with = NULL;
    free(id);
    if (!with) {
      t->close(ctx);
      err_set(err, SCHEDRUN_ENOMEM, "out of memory");
      return NULL;
    }
    id = with;
    *ts = (target_slot){t, ctx, id};
    return ts;
  }
  err_set(err, SCHEDRUN_EINTERNAL, "too many compile targets");
  return NULL;
}

void compile_cache_key(const gpu_compile_target *t, const char *arch, const char *identity, const msg_kernel *k,
                      char out[65]) {
  hash_ctx *h = hash_new();
  hash_add_str(h, "schedrun kernel cache v2");
  hash_add_str(h, t->name);
  hash_add_str(h, arch);
  hash_add_str(h, identity);
  hash_add_str(h, k->entry);
  hash_add_str(h, k->params);
  hash_add_str(h, k->source);
  hash_final_hex(h, out);
}

char *compile_artifact_path(compile_state *s, const gpu_compile_target *t, const char *key) {
  strbuf sb;
  sb_init(&sb);
  sb_addf(&sb, "%s/%s/%.2s/%s%s", s->core->cache_dir, t->name, key, key, t->ext);
  if (sb.failed) {
    sb_free(&sb);
    return NULL;
  }
  return sb_take(&sb);
}

const char *compile_remember(compile_state *s, const char *key, char *path) {
  cache_entry *e = malloc(sizeof *e);
  if (!e || hmap_put(&s->cache, key, e) != 0) {
    free(e);
    free(path);
    return NULL;
  }
  e->path = path;
  return path;
}

const char *compile_cache_lookup(compile_state *s, const gpu_compile_target *t, const char *key) {
  cache_entry *e = hmap_get(&s->cache, key);
  /* the directory may have been emptied under us: a memory hit whose file
   * is gone is a miss, and the kernel compiles again */
  if (e && access(e->path, R_OK) == 0) return e->path;
  if (e) {
    hmap_remove(&s->cache, key);
    free(e->path);
    free(e);
  }
  char *path = compile_artifact_path(s, t, key);
  if (!path) return NULL;
  uint8_t *img;
  size_t len;
  schedrun_error_t err = {0};
  int rc = artifact_read(path, key, &img, &len, &err);
  schedrun_error_clear(&err);
  if (rc) {
    free(path);
    return NULL;
  }
  free(img);
  return compile_remember(s, key, path);
}

void compile_evict(compile_state *s, const gpu_compile_target *t, const char *key) {
  cache_entry *e = hmap_remove(&s->cache, key);
  if (e) {
    free(e->path);
    free(e);
  }
  char *path = compile_artifact_path(s, t, key);
  if (path) unlink(path);
  free(path);
}
