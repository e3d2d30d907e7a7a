/*
 * The compile actor: kernel sources to loadable artifacts, each compiled once.
 *
 * It owns the kernel cache (an in-memory index over a content-addressed
 * directory), a pool of compile workers, the sessions (one per COMPILE being
 * served, owning the futures of that program's kernels) and the active
 * compile mode they run under (compile_state.h): a COMPILE joins it, or
 * opens one when there is none. A cache key is the SHA-256 of everything that decides the artifact:
 * target, architecture, the compiler's identity and version, the options, the
 * entry, the params and the source.
 *
 *   COMPILE -> for each kernel: memory hit | disk hit (verified) |
 *              join the in-flight future of the same key (dedup across
 *              sessions) | a new future, queued to the pool
 *   worker done -> the future resolves every session waiting on it
 *   session with nothing pending -> COMPILED, or the teardown then ERROR
 *
 * When any kernel of a session fails the session still waits for all its
 * futures (every failure is reported, not just the first). Then the teardown
 * runs, in order, before the ERROR leaves: reset the active compile mode (the
 * session is gone), report how many compiles were drained after the first
 * failure, evict the failed keys from memory and disk. Failed futures keep no
 * log or buffer alive once reported. The next COMPILE starts clean.
 *
 * CANCEL (the scheduler shutting down) tears every session down the same way:
 * compiles not started are dropped, running ones are stopped (their compiler
 * processes killed) and drained as they come back, the mode is reset, and only
 * then does each session's ERROR (SCHEDRUN_ECLOSED, with those steps) leave.
 *
 * The workers that run futures are compile_pool.c; the state both files
 * share is compile_state.h.
 */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/compile_state.h"
#include "common/artifact.h"

/* ---- state ---- */

static int future_wait_on(future *f, uint64_t session_id, uint32_t index) {
  if (f->nwaiters == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 4;
    waiter *w = realloc(f->waiters, cap * sizeof *w);
    if (!w) return -1;
    f->waiters = w;
    f->cap = cap;
  }
  f->waiters[f->nwaiters++] = (waiter){session_id, index};
  return 0;
}

compile_state *compile_state_new(schedrun_core *core) {
  compile_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->core = core;
  s->nworkers = core->compile_workers > 0 ? core->compile_workers : 1;
  hmap_init(&s->cache, 65);
  hmap_init(&s->inflight, 65);
  hmap_init(&s->sessions, sizeof(uint64_t));
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  return s;
}

static void session_free(session *ss) {
  if (!ss) return;
  for (size_t i = 0; i < ss->modules.n; i++) {
    free(ss->modules.v[i].name);
    free(ss->modules.v[i].key);
    free(ss->modules.v[i].path);
  }
  free(ss->modules.v);
  free(ss->keys);
  free(ss->failed);
  free(ss->target);
  sb_free(&ss->report);
  free(ss);
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
  pos = 0;
  while (hmap_next(&s->inflight, &pos, NULL, &v)) compile_future_free(v);
  hmap_destroy(&s->inflight);
  for (future *f = s->stopped, *next; f; f = next) {
    next = f->next;
    compile_future_free(f);
  }
  pos = 0;
  while (hmap_next(&s->sessions, &pos, NULL, &v)) {
    session *ss = v;
    if (ss->mode && --ss->mode->sessions == 0 && ss->mode != s->mode) free(ss->mode);
    session_free(ss);
  }
  hmap_destroy(&s->sessions);
  free(s->mode);
  for (int i = 0; i < MAX_TARGETS; i++) {
    if (s->targets[i].target) s->targets[i].target->close(s->targets[i].ctx);
    free(s->targets[i].identity);
  }
  free(s->workers);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
}

/* ---- the active compile mode ---- */

/* The mode a new session joins: the active one, or a new one. NULL when the
 * active mode was torn down and never reset (*why says so), or without
 * memory. */
static compile_mode *mode_join(compile_state *s, char *why, size_t n) {
  if (s->mode && s->mode->torn_down) {
    snprintf(why, n, "the active compile mode (%llu) was torn down by an error and never reset: no compile can run under it",
             (unsigned long long)s->mode->serial);
    return NULL;
  }
  if (!s->mode) {
    if (!(s->mode = calloc(1, sizeof *s->mode))) {
      snprintf(why, n, "out of memory");
      return NULL;
    }
    s->mode->serial = ++s->modes;
  }
  s->mode->sessions++;
  return s->mode;
}

/* Teardown step 1: the mode is torn down and the actor has no active mode. */
static void mode_reset(compile_state *s, compile_mode *m) {
  m->torn_down = true;
  if (s->mode == m) s->mode = NULL;
}

/* A session of mode m finished. Its last session closes a mode that is not
 * torn down; a torn-down one still active (never reset) stays, to refuse
 * the next COMPILE. */
static void mode_leave(compile_state *s, compile_mode *m) {
  assert(m && m->sessions > 0);
  if (--m->sessions) return;
  if (s->mode == m && m->torn_down) return;
  if (s->mode == m) s->mode = NULL;
  free(m);
}

/* An error of session ss (its mode's) leaves for its requester now. */
static void error_leaves(compile_state *s, const session *ss) {
  if (schedrun_test_compile_error_leaves) schedrun_test_compile_error_leaves(ss->id, s->mode != ss->mode);
}

/* ---- sessions ---- */

/* Teardown step 1 of a session that fails: it leaves the map, and its mode
 * is reset (the actor has no active mode again). */
static void session_teardown(compile_state *s, session *ss) {
  hmap_remove(&s->sessions, &ss->id);
  mode_reset(s, ss->mode);
}

/* Evicts the session's failed keys from memory and disk; how many failed. */
static size_t evict_failed(compile_state *s, const session *ss) {
  const gpu_compile_target *t = gpu_compile_target_find(ss->target);
  size_t n = 0;
  for (size_t i = 0; i < ss->n; i++)
    if (ss->failed[i]) {
      if (t) compile_evict(s, t, ss->keys[i]); /* nothing half-written stays */
      n++;
    }
  return n;
}

/* The session's ERROR leaves, with the teardown steps already run, and the
 * session goes. */
static void session_error(actor_t *self, compile_state *s, session *ss, int code, const char *text,
                          const char *const *steps, size_t nsteps) {
  assert(s->mode != ss->mode); /* session_teardown ran first: the error never leaves before the reset */
  error_leaves(s, ss);
  actor_send_error(self, ss->reply_to, ss->id, code, text, steps, nsteps);
  mode_leave(s, ss->mode);
  session_free(ss);
}

static void finish_session(actor_t *self, compile_state *s, session *ss) {
  msg m;
  if (ss->cancelled) {
    /* teardown, in order, before the error leaves */
    session_teardown(s, ss); /* 1. reset the active compile mode */
    evict_failed(s, ss);
    char step2[96], step3[96];
    snprintf(step2, sizeof step2, "stop %zu running compiles (their compiler processes killed) and drain them",
             ss->stopped);
    snprintf(step3, sizeof step3, "drop %zu compiles not started", ss->dropped);
    const char *steps[] = {"reset the active compile mode", step2, step3};
    session_error(self, s, ss, SCHEDRUN_ECLOSED, "the scheduler shut down while the program's kernels compiled",
                  steps, 3);
    return;
  }
  if (ss->failures == 0) {
    msg_init(&m, MSG_COMPILED, ss->id, ACTOR_COMPILE);
    m.body.compiled.program = ss->program;
    m.body.compiled.target = ss->target;
    m.body.compiled.modules = ss->modules;
    m.body.compiled.hits = ss->hits;
    m.body.compiled.misses = ss->misses;
    ss->target = NULL;
    memset(&ss->modules, 0, sizeof ss->modules);
    hmap_remove(&s->sessions, &ss->id);
    mode_leave(s, ss->mode); /* leave the active compile mode */
    actor_send(self, ss->reply_to, &m);
    msg_free(&m);
    session_free(ss);
    return;
  }
  /* teardown, in order, before the error leaves */
  session_teardown(s, ss);               /* 1. reset the active compile mode */
  size_t evicted = evict_failed(s, ss); /* 3. evict failed entries */
  char step2[96], step3[96];
  snprintf(step2, sizeof step2, "drain %zu compiles still pending after the first failure", ss->drained);
  snprintf(step3, sizeof step3, "evict %zu failed cache entries", evicted);
  const char *steps[] = {"reset the active compile mode", step2, step3};
  session_error(self, s, ss, ss->code ? ss->code : SCHEDRUN_ECOMPILE, ss->report.data ? ss->report.data : "", steps,
                3);
}

static void resolve(session *ss, uint32_t i, const char *path, const char *error, const char *log,
                    const char *where) {
  if (i >= ss->n) return;
  msg_module *mod = &ss->modules.v[i];
  mod->path = xstrdup(path ? path : "");
  if (error) {
    if (ss->failures == 0) ss->drained = ss->pending - 1;
    ss->failures++;
    ss->failed[i] = true;
    if (ss->report.len) sb_adds(&ss->report, "\n");
    sb_addf(&ss->report, "kernel '%s' (%s): %s", mod->name, where, error);
    if (log && *log) sb_addf(&ss->report, "\n%s", log);
    while (ss->report.len && ss->report.data[ss->report.len - 1] == '\n') ss->report.data[--ss->report.len] = '\0';
  }
  ss->pending--;
}

/* A kernel that could not even be queued: the session fails as out of memory. */
static void resolve_oom(session *ss, uint32_t i, const char *where) {
  ss->code = SCHEDRUN_ENOMEM;
  resolve(ss, i, NULL, "out of memory", NULL, where);
}

static void handle_compile(actor_t *self, compile_state *s, msg *m) {
  const msg_compile *c = &m->body.compile;
  schedrun_error_t err = {0};
  const gpu_compile_target *t = gpu_compile_target_find(c->target);
  target_slot *ts = t ? compile_target_of(s, t, &err) : NULL;
  if (!ts || hmap_get(&s->sessions, &m->job)) {
    /* no session is opened: the active compile mode stays as it was */
    const char *steps[] = {"open no compile session: the active compile mode is unchanged"};
    strbuf why;
    sb_init(&why);
    int code = SCHEDRUN_EBACKEND; /* no kernel was compiled: not a compile error */
    if (!t) sb_addf(&why, "unknown compile target '%s'", c->target);
    else if (!ts) sb_addf(&why, "compile target '%s': %s", c->target, err.message ? err.message : "unavailable");
    else {
      sb_addf(&why, "a compile session for job %llu is already active", (unsigned long long)m->job);
      code = SCHEDRUN_EPROTO;
    }
    actor_send_error(self, m->from, m->job, code, why.data, steps, 1);
    sb_free(&why);
    schedrun_error_clear(&err);
    return;
  }
  /* enter the active compile mode: a session owning this program's futures */
  session *ss = calloc(1, sizeof *ss);
  size_t n = c->kernels.n;
  if (ss) {
    ss->modules.v = calloc(n ? n : 1, sizeof(msg_module));
    ss->keys = calloc(n ? n : 1, 65);
    ss->failed = calloc(n ? n : 1, sizeof(bool));
    ss->target = xstrdup(c->target);
  }
  char why[160] = "out of memory";
  if (!ss || !ss->modules.v || !ss->keys || !ss->failed || !ss->target || !(ss->mode = mode_join(s, why, sizeof why)) ||
      hmap_put(&s->sessions, &m->job, ss) != 0) {
    int code = ss && ss->mode == NULL && strcmp(why, "out of memory") ? SCHEDRUN_EINTERNAL : SCHEDRUN_ENOMEM;
    if (ss && ss->mode) mode_leave(s, ss->mode);
    session_free(ss);
    const char *steps[] = {"open no compile session: the active compile mode is unchanged"};
    actor_send_error(self, m->from, m->job, code, why, steps, 1);
    return;
  }
  ss->id = m->job;
  ss->program = c->program;
  str_copy(ss->reply_to, sizeof ss->reply_to, m->from);
  ss->n = n;
  ss->pending = n;
  sb_init(&ss->report);
  for (size_t i = 0; i < n; i++) {
    const msg_kernel *k = &c->kernels.v[i];
    ss->modules.v[i].name = xstrdup(k->name);
    ss->modules.n++;
    compile_cache_key(t, c->arch, ts->identity, k, ss->keys[i]);
    ss->modules.v[i].key = xstrdup(ss->keys[i]);
    const char *path = compile_cache_lookup(s, t, ss->keys[i]);
    if (path) {
      ss->hits++;
      resolve(ss, (uint32_t)i, path, NULL, NULL, k->where);
      continue;
    }
    ss->misses++;
    future *f = hmap_get(&s->inflight, ss->keys[i]);
    if (!f) {
      prog_type params[64];
      int np = gpu_params_parse(k->params, params, 64);
      if (np < 0) {
        resolve(ss, (uint32_t)i, NULL, "bad params", NULL, k->where);
        continue;
      }
      f = calloc(1, sizeof *f);
      if (f) {
        memcpy(f->key, ss->keys[i], 65);
        f->serial = ++s->futures;
        f->path = compile_artifact_path(s, t, f->key);
        f->target = t;
        f->tctx = ts->ctx;
        f->name = xstrdup(k->name);
        f->entry = xstrdup(k->entry);
        f->source = xstrdup(k->source);
        f->source_file = xstrdup(k->source_file);
        f->where = xstrdup(k->where);
        f->arch = xstrdup(c->arch);
        memcpy(f->params, params, sizeof params);
        f->nparams = (uint32_t)np;
        f->first_line = k->first_line;
      }
      if (!f || !f->path || !f->source || hmap_put(&s->inflight, f->key, f) != 0) {
        compile_future_free(f);
        resolve_oom(ss, (uint32_t)i, k->where);
        continue;
      }
      if (future_wait_on(f, ss->id, (uint32_t)i) != 0) {
        resolve_oom(ss, (uint32_t)i, k->where);
        hmap_remove(&s->inflight, f->key);
        compile_future_free(f);
        continue;
      }
      compile_pool_push(s, f);
    } else if (future_wait_on(f, ss->id, (uint32_t)i) != 0) {
      resolve_oom(ss, (uint32_t)i, k->where);
    }
  }
  if (ss->pending == 0) finish_session(self, s, ss);
}

/* The future a worker's COMPILED is about (by its serial), out of the
 * in-flight map or the stopped list; NULL if none. */
static future *take_done(compile_state *s, const msg *m) {
  const char *key = m->body.compiled.modules.v[0].key;
  future *f = hmap_get(&s->inflight, key);
  if (f && f->serial == m->job) return hmap_remove(&s->inflight, key);
  for (future **at = &s->stopped; *at; at = &(*at)->next)
    if ((*at)->serial == m->job) {
      f = *at;
      *at = f->next;
      return f;
    }
  return NULL;
}

static void handle_worker_done(actor_t *self, compile_state *s, msg *m) {
  if (m->body.compiled.modules.n != 1) return;
  future *f = take_done(s, m);
  if (!f) return;
  const char *path = NULL;
  if (f->rc == SCHEDRUN_OK) {
    path = compile_remember(s, f->key, xstrdup(f->path));
    if (!path) {
      f->rc = SCHEDRUN_ENOMEM;
      f->error = xstrdup("out of memory");
    }
  }
  for (size_t w = 0; w < f->nwaiters; w++) {
    session *ss = hmap_get(&s->sessions, &f->waiters[w].session);
    if (!ss) continue;
    if (ss->cancelled) ss->stopped++;
    if (f->rc && f->rc != SCHEDRUN_ECOMPILE && !ss->code) ss->code = f->rc; /* the cache, the disk: not the kernel */
    resolve(ss, f->waiters[w].index, path, f->rc ? (f->error ? f->error : "compile failed") : NULL, f->log, f->where);
    if (ss->pending == 0) finish_session(self, s, ss);
  }
  compile_future_free(f); /* its log and buffers go with it */
}

/* A future that never started goes: every session waiting on it counts it
 * dropped (only torn-down sessions wait on a future that is dropped). */
static void drop_future(actor_t *self, compile_state *s, future *f) {
  for (size_t w = 0; w < f->nwaiters; w++) {
    session *ss = hmap_get(&s->sessions, &f->waiters[w].session);
    if (!ss) continue;
    ss->dropped++;
    resolve(ss, f->waiters[w].index, NULL, "stopped before it started", NULL, f->where);
    if (ss->pending == 0) finish_session(self, s, ss);
  }
  compile_future_free(f);
}

/* Shutdown: every session is torn down (see the top of the file). */
static void handle_cancel(actor_t *self, compile_state *s) {
  pthread_mutex_lock(&s->lock);
  future *queued = s->qhead; /* not started: dropped */
  s->qhead = s->qtail = NULL;
  pthread_mutex_unlock(&s->lock);
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->sessions, &pos, NULL, &v)) ((session *)v)->cancelled = true;
  pos = 0;
  while (hmap_next(&s->inflight, &pos, NULL, &v)) atomic_store(&((future *)v)->cancel, 1); /* running: stopped */
  /* sessions whose last future goes now finish; the map changes, so no walk */
  for (future *f = queued, *next; f; f = next) {
    next = f->next;
    hmap_remove(&s->inflight, f->key);
    drop_future(self, s, f);
  }
}

/* Whether a session not torn down still waits on f. */
static bool future_wanted(compile_state *s, const future *f) {
  for (size_t w = 0; w < f->nwaiters; w++) {
    const session *ss = hmap_get(&s->sessions, &f->waiters[w].session);
    if (ss && !ss->cancelled) return true;
  }
  return false;
}

/* Session id no longer waits on f. */
static void future_unwait(future *f, uint64_t id) {
  size_t k = 0;
  for (size_t w = 0; w < f->nwaiters; w++)
    if (f->waiters[w].session != id) f->waiters[k++] = f->waiters[w];
  f->nwaiters = k;
}

/* CANCEL of one session: its jobs' deadlines passed while it compiled. It is
 * torn down now, not when its compiles come back: the mode is reset, its
 * compiles that nobody else waits for are dropped (not started) or stopped
 * (their compiler processes killed; reaped from the stopped list when
 * their workers report), those other sessions wait for are left to them,
 * and only then does the ERROR leave, naming the kernels still compiling. */
static void handle_cancel_one(actor_t *self, compile_state *s, const msg *m) {
  session *ss = hmap_get(&s->sessions, &m->job);
  if (!ss || ss->cancelled) return; /* finished: its answer is on its way */
  session_teardown(s, ss); /* 1. reset the active compile mode */
  strbuf text;
  sb_init(&text);
  size_t stopped = 0, dropped = 0, left = 0, still = 0;
  for (size_t i = 0; i < ss->n; i++) {
    if (ss->modules.v[i].path) continue; /* resolved */
    future *f = hmap_get(&s->inflight, ss->keys[i]);
    assert(f); /* a kernel not resolved waits on the future of its key */
    sb_addf(&text, "%s'%s' (%s)", still++ ? ", " : "", ss->modules.v[i].name, f->where);
    future_unwait(f, ss->id);
    if (future_wanted(s, f)) {
      left++; /* 4. another session's */
      continue;
    }
    hmap_remove(&s->inflight, f->key);
    if (compile_pool_unqueue(s, f)) {
      dropped++; /* 3. never started */
      drop_future(self, s, f);
    } else {
      stopped++; /* 2. its compiler killed by its worker */
      atomic_store(&f->cancel, 1);
      f->next = s->stopped;
      s->stopped = f;
    }
  }
  size_t evicted = evict_failed(s, ss); /* 5. evict failed entries */
  strbuf why;
  sb_init(&why);
  sb_addf(&why, "still compiling kernel%s %s after %llu ms", still == 1 ? "" : "s", text.data ? text.data : "",
          (unsigned long long)m->body.cancel.waited_ms);
  if (ss->report.len) sb_addf(&why, "\n%s", ss->report.data);
  char step2[112], step3[64], step4[112], step5[64];
  snprintf(step2, sizeof step2, "stop %zu running compiles no other job waits for (their compiler processes killed)",
           stopped);
  snprintf(step3, sizeof step3, "drop %zu compiles not started", dropped);
  snprintf(step4, sizeof step4, "leave %zu compiles running for the other jobs that wait for them", left);
  snprintf(step5, sizeof step5, "evict %zu failed cache entries", evicted);
  const char *steps[] = {"reset the active compile mode", step2, step3, step4, step5};
  session_error(self, s, ss, m->body.cancel.code ? m->body.cancel.code : SCHEDRUN_ETIMEOUT,
                why.failed ? "out of memory" : why.data, steps, 5);
  sb_free(&why);
  sb_free(&text);
}

static int compile_handle(actor_t *self, msg *m) {
  compile_state *s = actor_state(self);
  switch (m->type) {
  case MSG_COMPILE: handle_compile(self, s, m); return ACTOR_CONTINUE;
  case MSG_CANCEL:
    if (m->job) handle_cancel_one(self, s, m);
    else handle_cancel(self, s);
    return ACTOR_CONTINUE;
  case MSG_COMPILED:
    if (!strcmp(m->from, WORKER_FROM)) handle_worker_done(self, s, m);
    return ACTOR_CONTINUE;
  case MSG_STATUS: {
    msg r;
    msg_init(&r, MSG_STATUS, m->job, ACTOR_COMPILE);
    r.body.status.items.v = calloc(9, sizeof(msg_stat));
    if (r.body.status.items.v) {
      pthread_mutex_lock(&s->lock);
      int64_t compiles = (int64_t)s->compiles;
      pthread_mutex_unlock(&s->lock);
      /* the open sessions' kernels, and how many of them are still pending */
      int64_t kernels = 0, pending = 0;
      size_t pos = 0;
      void *v;
      while (hmap_next(&s->sessions, &pos, NULL, &v)) {
        kernels += (int64_t)((session *)v)->n;
        pending += (int64_t)((session *)v)->pending;
      }
      msg_stat items[] = {{xstrdup("compile_mode_active"), (int64_t)s->sessions.count},
                          {xstrdup("compile_mode"), s->mode ? (int64_t)s->mode->serial : 0},
                          {xstrdup("compile_modes"), (int64_t)s->modes},
                          {xstrdup("cache_entries"), (int64_t)s->cache.count},
                          {xstrdup("compiles_in_flight"), (int64_t)s->inflight.count},
                          {xstrdup("compile_workers"), s->nworkers},
                          {xstrdup("compiles"), compiles},
                          {xstrdup("session_kernels"), kernels},
                          {xstrdup("session_pending"), pending}};
      memcpy(r.body.status.items.v, items, sizeof items);
      r.body.status.items.n = 9;
    }
    actor_send(self, m->from, &r);
    msg_free(&r);
    return ACTOR_CONTINUE;
  }
  case MSG_TERM: return ACTOR_STOP;
  default: return ACTOR_CONTINUE;
  }
}

/* The pool starts, and the target of the scheduler's backend opens now
 * rather than at the first COMPILE: opening asks the compiler for its
 * identity (a process, on the first use of a compiler), and the actor waits
 * for it. Done here, that wait is part of opening the scheduler; done at
 * the first COMPILE, a CANCEL (a deadline) would wait behind it. A target
 * that cannot open now is asked again, and its error reported, by the
 * COMPILE that needs it. */
static int compile_start(actor_t *self, schedrun_error_t *err) {
  int rc = compile_pool_start(self, err);
  compile_state *s = actor_state(self);
  gpu_backend *be = s->core ? s->core->backend : NULL;
  for (int i = 0; rc == SCHEDRUN_OK && be && i < gpu_target_count(be); i++) {
    const gpu_backend *part = gpu_target_part(be, i);
    const gpu_compile_target *t = gpu_compile_target_find(part->ops->target(part, 0));
    schedrun_error_t ignored = {0};
    if (t) (void)compile_target_of(s, t, &ignored);
    schedrun_error_clear(&ignored);
  }
  return rc;
}

const actor_def compile_actor_def = {compile_start, compile_handle, compile_pool_stop};
