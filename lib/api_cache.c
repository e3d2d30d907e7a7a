/*
 * The kernel cache from outside: what kernels compile for, how many were
 * compiled here, a program's compiled artifacts, and publishing an artifact
 * made elsewhere (another process or machine with the same target), verified
 * as a cache read verifies it. This is how MPI ranks compile once per
 * architecture and share the result (docs/design.md, "Ranks").
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/artifact.h"
#include "lib/api.h"

const char *schedrun_compile_target(const schedrun_t *s) { return s ? s->target : NULL; }

const char *schedrun_cache_dir(const schedrun_t *s, int *temporary) {
  if (temporary) *temporary = s && s->temp_cache ? 1 : 0;
  return s ? s->core.cache_dir : NULL;
}

int schedrun_compile_count(schedrun_t *s, uint64_t *compiled, schedrun_error_t *err) {
  if (!s || !compiled)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_compile_count: %s is NULL", !s ? "the scheduler" : "compiled");
  *compiled = 0;
  int rc = api_closed(s, "schedrun_compile_count", err);
  msg m;
  if (rc == SCHEDRUN_OK) rc = api_ask_status(s, ACTOR_COMPILE, NULL, 0, &m, err);
  if (rc == SCHEDRUN_OK) {
    *compiled = (uint64_t)api_stat_value(&m, "compiles");
    msg_free(&m);
  }
  return rc;
}

int schedrun_program_artifacts(schedrun_t *s, const schedrun_program_t *p, schedrun_artifact_fn fn, void *user,
                               schedrun_error_t *err) {
  if (!s || !p || !fn)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_program_artifacts: %s is NULL",
                   !s ? "the scheduler" : !p ? "the program" : "fn");
  int rc = api_closed(s, "schedrun_program_artifacts", err);
  if (rc) return rc;
  if (p->p->nkernels == 0) return SCHEDRUN_OK; /* nothing to compile, nothing to share */
  if (p->s != s)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_program_artifacts: '%s' has not been compiled here (no job of it ran)",
                   p->p->name);
  msg_stat q[] = {{"program", (int64_t)p->id}, {"modules", 1}};
  msg m;
  if ((rc = api_ask_status(s, ACTOR_SCHEDULER, q, 2, &m, err))) return rc;
  if (!api_stat_value(&m, "compiled")) {
    msg_free(&m);
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_program_artifacts: '%s' has not been compiled here (no job of it "
                                         "compiled it)", p->p->name);
  }
  size_t dl = strlen(s->core.cache_dir);
  for (size_t i = 0; i < m.body.status.items.n; i++) {
    const char *path = m.body.status.items.v[i].name;
    /* the named counters come first; artifacts are the paths in the cache */
    if (!path || strncmp(path, s->core.cache_dir, dl) != 0 || path[dl] != '/') continue;
    fn(path + dl + 1, path, user);
  }
  msg_free(&m);
  return SCHEDRUN_OK;
}

/* "TARGET/xx/KEY.ext": a target name, the key's first two hex digits, the
 * key (64 hex digits) and an extension; copies the key out. */
static const char *bad_name(const char *name, char key[65]) {
  const char *a = strchr(name, '/'), *b = a ? strchr(a + 1, '/') : NULL;
  if (!a || !b || strchr(b + 1, '/')) return "not TARGET/xx/KEY.ext";
  if (a == name || a - name > 64) return "a bad target name";
  for (const char *c = name; c < a; c++)
    if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-' && *c != '.') return "a bad target name";
  if (name[0] == '.') return "a bad target name";
  const char *k = b + 1;
  for (int i = 0; i < 64; i++)
    if (!isxdigit((unsigned char)k[i]) || isupper((unsigned char)k[i])) return "no 64-digit key";
  if (b - a != 3 || memcmp(a + 1, k, 2) != 0) return "a directory that is not its key's first two digits";
  const char *ext = k + 64;
  if (*ext != '.' || strlen(ext) > 16) return "a bad extension";
  for (const char *c = ext + 1; *c; c++)
    if (!isalnum((unsigned char)*c)) return "a bad extension";
  memcpy(key, k, 64);
  key[64] = '\0';
  return NULL;
}

int schedrun_cache_publish(schedrun_t *s, const char *name, const void *data, size_t len, schedrun_error_t *err) {
  if (!s || !name || (!data && len))
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_cache_publish: %s is NULL", !s ? "the scheduler" : !name ? "name" : "data");
  int rc = api_closed(s, "schedrun_cache_publish", err);
  if (rc) return rc;
  char key[65];
  const char *why = bad_name(name, key);
  if (why) return err_set(err, SCHEDRUN_EINVAL, "schedrun_cache_publish: '%.200s' has %s", name, why);
  if ((why = artifact_check(data, len, key)))
    return err_set(err, SCHEDRUN_EIO, "schedrun_cache_publish: %.200s: %s", name, why);
  strbuf path;
  sb_init(&path);
  sb_addf(&path, "%s/%s", s->core.cache_dir, name);
  char *dir = path.failed ? NULL : fs_dirname(path.data);
  if (!dir) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  else if ((rc = fs_mkdir_private(dir, err)) == SCHEDRUN_OK) rc = fs_write_atomic(path.data, data, len, err);
  free(dir);
  sb_free(&path);
  return rc;
}
