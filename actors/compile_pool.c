/*
 * The compile actor's worker pool: plain threads that take futures from a
 * locked queue, compile into a private temporary directory, publish the
 * artifact by rename, and post a COMPILED (one module; from "compile.worker")
 * to the actor's mailbox. A future's result fields are written before that
 * message and read by the actor after it. A future whose cancel flag is set
 * has its compiler killed (see compile_actor.c, CANCEL).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/compile_state.h"
#include "common/artifact.h"

/* ---- futures ---- */

void compile_future_free(future *f) {
  if (!f) return;
  free(f->path);
  free(f->name);
  free(f->entry);
  free(f->source);
  free(f->source_file);
  free(f->where);
  free(f->arch);
  free(f->error);
  free(f->log);
  free(f->waiters);
  free(f);
}


/* ---- the pool ---- */

typedef struct worker_arg {
  compile_state *s;
  int index;
} worker_arg;

static void run_future(compile_state *s, future *f, int worker) {
  schedrun_error_t err = {0};
  char *tmp = NULL;
  if (asprintf(&tmp, "%s/tmp/p%ld-w%d-XXXXXX", s->core->cache_dir, (long)getpid(), worker) < 0) tmp = NULL;
  char *tdir = tmp ? fs_dirname(tmp) : NULL, *adir = fs_dirname(f->path);
  int rc = tdir && adir ? SCHEDRUN_OK : err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
  if (rc == SCHEDRUN_OK) rc = fs_mkdir_private(tdir, &err);
  if (rc == SCHEDRUN_OK) rc = fs_mkdir_private(adir, &err);
  if (rc == SCHEDRUN_OK && !mkdtemp(tmp))
    rc = err_set(&err, SCHEDRUN_EIO, "the kernel cache: cannot create a directory under %s: %s", tdir, strerror(errno));
  if (rc == SCHEDRUN_OK) {
    gpu_compile_req req = {f->name,   f->entry,   f->source, f->source_file, f->first_line,
                           f->params, f->nparams, f->arch,   &f->cancel, s->core->compile_timeout_ns,
                           s->core->cache_dir};
    uint8_t *img = NULL;
    size_t len = 0;
    rc = f->target->compile(f->tctx, &req, tmp, &img, &len, &f->log, &err);
    if (rc == SCHEDRUN_OK) rc = artifact_write(f->path, f->key, img, len, &err);
    free(img);
    fs_remove_tree(tmp);
  }
  free(tdir);
  free(adir);
  free(tmp);
  f->rc = rc;
  if (rc) f->error = xstrdup(err.message ? err.message : schedrun_strerror(rc));
  schedrun_error_clear(&err);
}

static void *worker_main(void *arg) {
  worker_arg *wa = arg;
  compile_state *s = wa->s;
  int index = wa->index;
  free(wa);
  void *out = mbox_connect(s->core->zctx, ACTOR_COMPILE, NULL);
  for (;;) {
    pthread_mutex_lock(&s->lock);
    while (!s->qhead && !s->stopping) pthread_cond_wait(&s->cond, &s->lock);
    /* on stop, queued futures are dropped (the state frees them) */
    future *f = s->stopping ? NULL : s->qhead;
    if (f) {
      s->qhead = f->next;
      if (!s->qhead) s->qtail = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    if (!f) break;
    run_future(s, f, index);
    msg m;
    msg_init(&m, MSG_COMPILED, f->serial, WORKER_FROM);
    m.body.compiled.target = xstrdup(f->target->name);
    m.body.compiled.modules.v = calloc(1, sizeof(msg_module));
    if (m.body.compiled.modules.v) {
      m.body.compiled.modules.v[0].key = xstrdup(f->key);
      m.body.compiled.modules.v[0].name = xstrdup(f->name);
      m.body.compiled.modules.v[0].path = xstrdup(f->path);
      m.body.compiled.modules.n = 1;
    }
    if (out) mbox_send(out, &m, NULL);
    msg_free(&m);
  }
  mbox_close(out);
  return NULL;
}

void compile_pool_push(compile_state *s, future *f) {
  f->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->qtail) s->qtail->next = f;
  else s->qhead = f;
  s->qtail = f;
  s->compiles++;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

bool compile_pool_unqueue(compile_state *s, future *f) {
  bool found = false;
  pthread_mutex_lock(&s->lock);
  for (future **at = &s->qhead, *prev = NULL; *at; prev = *at, at = &(*at)->next)
    if (*at == f) {
      *at = f->next;
      if (s->qtail == f) s->qtail = prev;
      s->compiles--; /* never run */
      found = true;
      break;
    }
  pthread_mutex_unlock(&s->lock);
  return found;
}

int compile_pool_start(actor_t *self, schedrun_error_t *err) {
  compile_state *s = actor_state(self);
  s->workers = calloc((size_t)s->nworkers, sizeof *s->workers);
  if (!s->workers) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (int i = 0; i < s->nworkers; i++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    *wa = (worker_arg){s, i};
    if (pthread_create(&s->workers[i], NULL, worker_main, wa) != 0) {
      free(wa);
      s->nworkers = i;
      return err_set(err, SCHEDRUN_EINTERNAL, "cannot start compile worker %d", i);
    }
  }
  return SCHEDRUN_OK;
}

void compile_pool_stop(actor_t *self) {
  compile_state *s = actor_state(self);
  /* compiles still running are stopped, so that joining the pool is quick */
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->inflight, &pos, NULL, &v)) atomic_store(&((future *)v)->cancel, 1);
  pthread_mutex_lock(&s->lock);
  s->stopping = true;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  for (int i = 0; i < s->nworkers; i++) pthread_join(s->workers[i], NULL);
  s->nworkers = 0;
}
