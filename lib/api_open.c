/*
 * The scheduler's life: open (actors and the completion thread), shutdown
 * (drain), close (stop everything, free everything), and the completion thread
 * that turns COMPLETE messages into results for waiters and callbacks.
 *
 * Close is bounded: it asks for a drain, and when the drain does not finish in
 * time (a kernel that never returns, a device that hangs) the backend abandons
 * the busy devices, so that the execute actors can be stopped and joined.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "lib/deps.h"

#define CLOSE_DRAIN_MS 1500

void schedrun_options_init(schedrun_options_t *o) {
  if (o) memset(o, 0, sizeof *o);
}

#define SCHEDRUN__STR2(x) #x
#define SCHEDRUN__STR(x) SCHEDRUN__STR2(x)
const char *schedrun_version(void) {
  return SCHEDRUN__STR(SCHEDRUN_VERSION_MAJOR) "." SCHEDRUN__STR(SCHEDRUN_VERSION_MINOR) "." SCHEDRUN__STR(
      SCHEDRUN_VERSION_PATCH);
}

int schedrun_device_count(const schedrun_t *s) { return s ? s->core.ndevices : 0; }

const char *schedrun_device_fallback(const schedrun_t *s) { return s ? s->fallback : NULL; }

const char *schedrun_device_name(const schedrun_t *s, int i) {
  if (!s || i < 0 || i >= s->core.ndevices) return NULL;
  return s->core.backend->ops->device_name(s->core.backend, i);
}

bool api_on_completer(schedrun_t *s) {
  /* completer_running only changes on the completion thread's own exit path
   * (it is joined first), so the completion thread always sees it set */
  return s->completer_running && pthread_equal(pthread_self(), s->completer);
}

struct timespec api_deadline_in(int timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

static char *default_cache_dir(void) {
  const char *env = getenv("SCHEDRUN_CACHE_DIR");
  if (env && *env) return xstrdup(env);
  strbuf sb;
  sb_init(&sb);
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg) sb_addf(&sb, "%s/schedrun", xdg);
  else if (home && *home) sb_addf(&sb, "%s/.cache/schedrun", home);
  else sb_adds(&sb, "/tmp/schedrun-cache");
  return sb.failed ? (sb_free(&sb), NULL) : sb_take(&sb);
}

/* Temporary directories of processes that died before they could remove
 * them (killed, crashed): each name carries its process's id. */
static void sweep_dead_processes(const char *cache_dir) {
  fs_sweep_dead("/tmp", "schedrun-cache-");
  fs_sweep_dead("/tmp", "schedrun-worker-");
  fs_sweep_dead("/tmp", "schedrun-cxx-");
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/tmp", cache_dir);
  fs_sweep_dead(dir, "p");
  snprintf(dir, sizeof dir, "%s/host-worker", cache_dir);
  fs_sweep_dead(dir, ".build-");
}

/* Sends TERM to a mailbox from outside any actor. */
static void send_term(schedrun_t *s, const char *name) {
  void *sock = mbox_connect(s->core.zctx, name, NULL);
  msg t;
  msg_init(&t, MSG_TERM, 0, ACTOR_CLIENT);
  if (sock) mbox_send(sock, &t, NULL);
  msg_free(&t);
  mbox_close(sock);
}

static void stop_actor(schedrun_t *s, actor_t **a, const char *name) {
  if (!*a) return;
  send_term(s, name);
  actor_join(a);
}

/* ---- the completion thread ---- */

/* Frees released programs that no pending job refers to any more. Called by
 * the completion thread, with the lock held. */
static void free_doomed(schedrun_t *s) {
  for (size_t i = 0; i < s->ndoomed;) {
    bool used = false;
    size_t pos = 0;
    void *v;
    while (!used && idmap_next(&s->jobs, &pos, NULL, &v))
      used = ((pending_job *)v)->prog == s->doomed[i] && !((pending_job *)v)->result;
    if (used) {
      i++;
      continue;
    }
    pthread_mutex_lock(&s->core.reg_lock);
    hmap_remove(&s->core.programs, &s->doomed_ids[i]);
    pthread_mutex_unlock(&s->core.reg_lock);
    prog_free(s->doomed[i]);
    s->doomed[i] = s->doomed[s->ndoomed - 1];
    s->doomed_ids[i] = s->doomed_ids[s->ndoomed - 1];
    s->ndoomed--;
  }
}

/* The actors have dropped what they held for a program: free it once no
 * COMPLETE still on its way needs it (one may come by another pipe). */
static void released(schedrun_t *s, uint64_t id) {
  pthread_mutex_lock(&s->core.reg_lock);
  prog_program *p = hmap_get(&s->core.programs, &id);
  pthread_mutex_unlock(&s->core.reg_lock);
  if (!p) return;
  pthread_mutex_lock(&s->lock);
  if (s->ndoomed == s->doomed_cap) {
    size_t cap = s->doomed_cap ? 2 * s->doomed_cap : 8;
    prog_program **d = realloc(s->doomed, cap * sizeof *d);
    if (d) s->doomed = d;
    uint64_t *di = realloc(s->doomed_ids, cap * sizeof *di);
    if (di) s->doomed_ids = di;
    if (d && di) s->doomed_cap = cap;
  }
  if (s->ndoomed < s->doomed_cap) {
    s->doomed[s->ndoomed] = p;
    s->doomed_ids[s->ndoomed++] = id;
  } /* else it stays registered and is freed at close */
  free_doomed(s);
  pthread_mutex_unlock(&s->lock);
}

/* Leaves a callback for the completion thread (lock held); false without
 * memory. */
static bool defer_callback(schedrun_t *s, pending_job *pj, schedrun_job_result_t *r) {
  if (s->ndeferred == s->deferred_cap) {
    size_t cap = s->deferred_cap ? 2 * s->deferred_cap : 16;
    pending_job **d = realloc(s->deferred, cap * sizeof *d);
    if (d) s->deferred = d;
    schedrun_job_result_t **dr = realloc(s->deferred_results, cap * sizeof *dr);
    if (dr) s->deferred_results = dr;
    if (!d || !dr) return false;
    s->deferred_cap = cap;
  }
  s->deferred[s->ndeferred] = pj;
  s->deferred_results[s->ndeferred++] = r;
  return true;
}

/* Runs n jobs' callbacks, in order, outside the lock (held on entry and on
 * return), then counts the jobs complete: a job completes only once its
 * callback has returned (schedrun_wait_all means it). */
static void run_callbacks(schedrun_t *s, pending_job **pjs, schedrun_job_result_t **rs, size_t n) {
  pthread_mutex_unlock(&s->lock);
  for (size_t k = 0; k < n; k++) {
    pjs[k]->cb(pjs[k]->id, rs[k], pjs[k]->user);
    free(pjs[k]);
  }
  pthread_mutex_lock(&s->lock);
  assert(s->incomplete >= n);
  s->incomplete -= n;
  s->completed += n;
}

/* Files one result (lock held): to its callback (run later, in order, from
 * cbs) or for waiters; true when the job counts as complete now. */
static bool file_one(schedrun_t *s, pending_job *pj, schedrun_job_result_t *r, bool on_completer, pending_job **cbs,
                     schedrun_job_result_t **cbrs, size_t *ncb) {
  if (pj->cb) {
    idmap_remove(&s->jobs, pj->id);
    /* callbacks run on the completion thread, which is rung after */
    if (!on_completer && defer_callback(s, pj, r)) return false;
    /* no memory to defer it: it runs here, as a last resort */
    cbs[*ncb] = pj; /* callbacks run after, in order, outside the lock */
    cbrs[(*ncb)++] = r;
    return false;
  }
  pj->result = r;
  if (!pj->hidden) {
    pj->prev_done = s->done_tail;
    if (s->done_tail) s->done_tail->next_done = pj;
    else s->done_head = pj;
    s->done_tail = pj;
  }
  return true;
}

/* Files results (lock held on entry, released on return): pjs' and those
 * decided in w, then sends what w released. */
static void file_locked(schedrun_t *s, pending_job **pjs, schedrun_job_result_t **rs, size_t n, deps_work *w,
                        bool on_completer) {
  size_t total = n + w->ndone, ncb = 0, done = 0;
  pending_job *cb1;
  schedrun_job_result_t *cbr1;
  pending_job **cbs = total <= 1 ? &cb1 : calloc(total, sizeof *cbs);
  schedrun_job_result_t **cbrs = total <= 1 ? &cbr1 : calloc(total, sizeof *cbrs);
  bool here = on_completer && cbs && cbrs; /* without memory callbacks are deferred */
  for (size_t k = 0; k < total; k++) {
    pending_job *pj = k < n ? pjs[k] : w->done[k - n];
    schedrun_job_result_t *r = k < n ? rs[k] : w->results[k - n];
    if (pj && file_one(s, pj, r, here, cbs, cbrs, &ncb)) done++;
  }
  if (ncb) run_callbacks(s, cbs, cbrs, ncb);
  assert(s->incomplete >= done);
  s->incomplete -= done;
  s->completed += done;
  atomic_fetch_add(&s->completions, 1);
  if (s->ndoomed) free_doomed(s);
  bool ring = !here && (s->ndeferred > 0 || s->nhost_ready > 0);
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  if (total > 1) {
    free(cbs);
    free(cbrs);
  }
  deps_send(s, w, on_completer);
  deps_work_free(w);
  if (on_completer) deps_run_host_tasks(s);
  else if (ring) api_ring_completer(s);
}

void api_file_work(schedrun_t *s, deps_work *w, bool on_completer) { file_locked(s, NULL, NULL, 0, w, on_completer); }

void api_file_results(schedrun_t *s, pending_job **pjs, schedrun_job_result_t **rs, size_t n, bool on_completer) {
  deps_work w = {0};
  pthread_mutex_lock(&s->lock);
  /* the jobs after these learn of them first: what fails for that completes
   * in this same round (w.done) */
  for (size_t k = 0; k < n; k++) {
    if (pjs[k] && rs[k]) rs[k]->info.handoffs_copied += pjs[k]->host_handoffs;
    if (pjs[k] && pjs[k]->dep) deps_completed(s, pjs[k], rs[k], &w);
  }
  deps_settle(s, &w);
  file_locked(s, pjs, rs, n, &w, on_completer);
}

/* Completed jobs, as many as one message brings: each result goes to its
 * job's callback, or is filed for a waiter. Verification runs outside the
 * lock; waiters are woken once. */
static void completed(schedrun_t *s, const uint64_t *ids, msg_complete *cs, size_t n, bool on_completer) {
  pending_job *pj1 = NULL;
  schedrun_job_result_t *r1 = NULL;
  pending_job **pjs = n == 1 ? &pj1 : calloc(n, sizeof *pjs);
  schedrun_job_result_t **rs = n == 1 ? &r1 : calloc(n, sizeof *rs);
  if (!pjs || !rs) {
    /* without memory for the batch: one at a time */
    free(pjs);
    free(rs);
    for (size_t k = 0; k < n; k++) completed(s, &ids[k], &cs[k], 1, on_completer);
    return;
  }
  pthread_mutex_lock(&s->lock);
  for (size_t k = 0; k < n; k++) {
    pending_job *pj = idmap_get(&s->jobs, ids[k]);
    /* not ours, a duplicate (a job completes once), or one still held for
     * the jobs it runs after (its id cannot have reached an actor) */
    pjs[k] = pj && !pj->result && !(pj->dep && pj->dep->held) ? pj : NULL;
  }
  pthread_mutex_unlock(&s->lock);
  for (size_t k = 0; k < n; k++)
    if (pjs[k]) rs[k] = result_from_complete(ids[k], &cs[k], pjs[k]->prog, pjs[k]->keep);
  api_file_results(s, pjs, rs, n, on_completer);
  if (n > 1) {
    free(pjs);
    free(rs);
  }
}

/* COMPLETE_MANY: each job's COMPLETE, from the columns (outputs are lent to
 * the results, which take them). */
static void completed_many(schedrun_t *s, msg *m, bool on_completer) {
  msg_complete_many *b = &m->body.complete_many;
  size_t n = b->jobs.n;
  msg_complete *cs = calloc(n, sizeof *cs);
  if (!cs) return; /* the waits time out: nothing can be said without memory */
  size_t o = 0;
  for (size_t k = 0; k < n; k++) {
    msg_complete *c = &cs[k];
    c->status = SCHEDRUN_OK;
    c->program = b->program;
    c->device = b->device;
    c->run = (uint32_t)b->runs.v[k];
    c->job_index = (uint32_t)b->job_indexes.v[k];
    c->execute_ns = b->execute_ns.v[k];
    c->counts = (msg_counts){0, 0, b->nodes};
    c->text = "";
    c->t_submit = b->t_submits.v[k];
    c->t_execute = b->t_executes.v[k];
    c->t_done = b->t_dones.v[k];
    size_t first = o;
    while (o < b->outputs.n && b->output_jobs.v[o] == k) o++;
    c->outputs.v = o > first ? b->outputs.v + first : NULL;
    c->outputs.n = o - first;
  }
  completed(s, b->jobs.v, cs, n, on_completer);
  free(cs);
}

/* Runs the callbacks a waiting thread left (completion thread only). */
static void run_deferred(schedrun_t *s) {
  pthread_mutex_lock(&s->lock);
  while (s->ndeferred) {
    pending_job **pjs = s->deferred;
    schedrun_job_result_t **rs = s->deferred_results;
    size_t n = s->ndeferred;
    s->deferred = NULL;
    s->deferred_results = NULL;
    s->ndeferred = s->deferred_cap = 0;
    run_callbacks(s, pjs, rs, n);
    free(pjs);
    free(rs);
    atomic_fetch_add(&s->completions, 1);
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&s->lock);
}

/* A queued message: only COMPLETEs are queued for the library. */
typedef struct drain_ctx {
  schedrun_t *s;
  bool on_completer;
} drain_ctx;

static bool take_completion(void *ctx, msg *m) {
  drain_ctx *d = ctx;
  if (m->type == MSG_COMPLETE) completed(d->s, &m->job, &m->body.complete, 1, d->on_completer);
  else if (m->type == MSG_COMPLETE_MANY) completed_many(d->s, m, d->on_completer);
  else return false;
  return true;
}

void api_drain_completions(schedrun_t *s, bool on_completer) {
  drain_ctx d = {s, on_completer};
  size_t bad = msgq_drain(&s->core.to_client, take_completion, &d);
  if (bad) atomic_fetch_add(&s->malformed, bad);
  if (on_completer) {
    run_deferred(s);
    deps_run_host_tasks(s);
    return;
  }
  pthread_mutex_lock(&s->lock);
  bool deferred = s->ndeferred > 0 || s->nhost_ready > 0;
  pthread_mutex_unlock(&s->lock);
  if (deferred) api_ring_completer(s); /* the completion thread runs them */
}

void api_ring_completer(schedrun_t *s) {
  msg bell;
  msg_init(&bell, MSG_QUEUED, 0, ACTOR_CLIENT);
  pthread_mutex_lock(&s->bell_lock);
  mbox_send(s->bell, &bell, NULL);
  pthread_mutex_unlock(&s->bell_lock);
  msg_free(&bell);
}

static void *completer_main(void *arg) {
  schedrun_t *s = arg;
  bool terminating = false;
  for (;;) {
    if (terminating) {
      /* after TERM every COMPLETE has been sent; some may still be in
       * another pipe: drain them, then stop */
      pthread_mutex_lock(&s->lock);
      bool left = s->incomplete > 0;
      pthread_mutex_unlock(&s->lock);
      if (!left) break;
    }
    msg m;
    uint64_t dropped = 0;
    int rc = mbox_recv_spin(s->inbox, terminating ? DRAIN_TIMEOUT_MS : -1, s->spin_ns, &s->core.to_client, &m,
                            &dropped, NULL);
    if (dropped) atomic_fetch_add(&s->malformed, dropped);
    if (rc == SCHEDRUN_EAGAIN) {
      api_drain_completions(s, true); /* the queue has COMPLETEs: as if rung */
      continue;
    }
    /* COMPLETEs queued before m was sent come first */
    if (rc == SCHEDRUN_OK && m.type != MSG_QUEUED && msgq_any(&s->core.to_client)) api_drain_completions(s, true);
    if (rc != SCHEDRUN_OK) break;
    if (m.type == MSG_COMPLETE) {
      completed(s, &m.job, &m.body.complete, 1, true);
    } else if (m.type == MSG_COMPLETE_MANY) {
      completed_many(s, &m, true);
    } else if (m.type == MSG_QUEUED) {
      api_drain_completions(s, true);
    } else if (m.type == MSG_RELEASE && !strcmp(m.from, ACTOR_SCHEDULER)) {
      released(s, m.body.release.program);
    } else if (m.type == MSG_TERM) {
      pthread_mutex_lock(&s->lock);
      if (s->term_id && m.job == s->term_id && !s->term_ready) {
        s->term_reply = m;
        memset(&m, 0, sizeof m);
        s->term_ready = true;
        pthread_cond_broadcast(&s->cond);
      }
      pthread_mutex_unlock(&s->lock);
      terminating = true;
    }
    msg_free(&m);
  }
  return NULL;
}

static void stop_completer(schedrun_t *s) {
  if (!s->completer_running) return;
  /* nothing answers any more: wake the completion thread with a TERM */
  send_term(s, ACTOR_CLIENT);
  pthread_join(s->completer, NULL);
  s->completer_running = false;
}

static void teardown(schedrun_t *s) {
  stop_actor(s, &s->scheduler, ACTOR_SCHEDULER);
  stop_actor(s, &s->compile, ACTOR_COMPILE);
  stop_actor(s, &s->record, ACTOR_RECORD);
  for (int d = 0; d < s->core.ndevices; d++) {
    char name[32];
    snprintf(name, sizeof name, ACTOR_EXECUTE_FMT, d);
    stop_actor(s, &s->execute[d], name);
  }
  stop_completer(s);
  scheduler_state_free(s->scheduler_st);
  compile_state_free(s->compile_st);
  record_state_free(s->record_st);
  for (int d = 0; d < s->core.ndevices; d++) execute_state_free(s->execute_st[d]);
  mbox_close(s->bell);
  mbox_close(s->inbox);
  mbox_close(s->ctl_inbox);
  mbox_close(s->outbox);
  msg_free(&s->term_reply);
  if (s->core.zctx) zmq_ctx_term(s->core.zctx);
  size_t pos = 0;
  void *v;
  while (idmap_next(&s->jobs, &pos, NULL, &v)) {
    schedrun_job_result_free(&((pending_job *)v)->result);
    deps_node_free(s, ((pending_job *)v)->dep, true);
    free(v);
  }
  free(s->host_ready);
  idmap_destroy(&s->jobs);
  /* programs still registered: hand them back to their handles, or free the
   * ones whose handle is gone */
  for (schedrun_program_t *h = s->programs; h; h = h->next) {
    hmap_remove(&s->core.programs, &h->id);
    h->s = NULL;
  }
  pos = 0;
  while (hmap_next(&s->core.programs, &pos, NULL, &v)) prog_free(v);
  hmap_destroy(&s->core.programs);
  free(s->doomed);
  free(s->doomed_ids);
  pthread_mutex_destroy(&s->core.reg_lock);
  msgq_destroy(&s->core.to_scheduler);
  msgq_destroy(&s->core.to_client);
  for (int d = 0; d < SCHEDRUN_MAX_DEVICES; d++) msgq_destroy(&s->core.to_execute[d]);
  pthread_mutex_destroy(&s->bell_lock);
  for (size_t k = 0; k < s->ndeferred; k++) {
    free(s->deferred[k]);
    schedrun_job_result_free(&s->deferred_results[k]);
  }
  free(s->deferred);
  free(s->deferred_results);
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->send_lock);
  pthread_mutex_destroy(&s->ctl_lock);
  pthread_cond_destroy(&s->cond);
  gpu_backend_close(&s->core.backend);
  if (s->temp_cache) fs_remove_tree(s->temp_cache);
  free(s->temp_cache);
  free(s->fallback);
  free(s->core.cache_dir);
  free(s);
}

int schedrun_open(schedrun_t **out, const schedrun_options_t *opts, schedrun_error_t *err) {
  if (!out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_open: out is NULL");
  *out = NULL;
  schedrun_options_t o;
  schedrun_options_init(&o);
  if (opts) o = *opts;
  if (o.compile_workers < 0 || o.max_inflight < 0)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_open: %s must be >= 0",
                   o.compile_workers < 0 ? "compile_workers" : "max_inflight");
  schedrun_t *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->send_lock, NULL);
  pthread_mutex_init(&s->ctl_lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  pthread_mutex_init(&s->core.reg_lock, NULL);
  msgq_init(&s->core.to_scheduler);
  msgq_init(&s->core.to_client);
  for (int d = 0; d < SCHEDRUN_MAX_DEVICES; d++) msgq_init(&s->core.to_execute[d]);
  pthread_mutex_init(&s->bell_lock, NULL);
  hmap_init(&s->core.programs, sizeof(uint64_t));
  idmap_init(&s->jobs);
  s->max_inflight = o.max_inflight ? (size_t)o.max_inflight : DEFAULT_MAX_INFLIGHT;
  int rc = SCHEDRUN_OK;
  if (o.no_disk_cache) {
    char tmpl[256];
    if (fs_temp_dir(tmpl, sizeof tmpl, "/tmp", "schedrun-cache-") != 0) {
      rc = err_set(err, SCHEDRUN_EIO, "cannot create a temporary cache directory in /tmp");
      goto fail;
    }
    s->temp_cache = xstrdup(tmpl);
    s->core.cache_dir = xstrdup(tmpl);
  } else {
    s->core.cache_dir = o.cache_dir ? xstrdup(o.cache_dir) : default_cache_dir();
  }
  if (!s->core.cache_dir) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto fail;
  }
  if ((rc = fs_mkdir_p(s->core.cache_dir, err))) goto fail;
  sweep_dead_processes(s->core.cache_dir);
  s->spin_ns = o.spin_us < 0 ? 0 : o.spin_us == 0 ? ACTOR_SPIN_NS : (uint64_t)o.spin_us * 1000u;
  gpu_open_opts go = {s->core.cache_dir, s->spin_ns, o.host_in_process != 0};
  if ((rc = gpu_backend_open(o.devices, &go, &s->core.backend, &s->fallback, err))) goto fail;
  s->core.ndevices = s->core.backend->ops->device_count(s->core.backend);
  {
    const gpu_backend *be = s->core.backend;
    const char *arch = be->ops->arch(be, 0);
    snprintf(s->target, sizeof s->target, "%s%s%s", be->ops->target(be, 0), arch && *arch ? " " : "",
             arch ? arch : "");
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  s->core.compile_workers = o.compile_workers ? o.compile_workers : (int)(cores > 0 ? cores : 1);
  s->core.record_always = o.record_always != 0;
  s->core.record_whole_program = o.record_whole_program != 0;
  s->core.no_batching = o.no_batching != 0;
  s->core.queue_completions = !s->core.no_batching;
  s->core.zctx = zmq_ctx_new();
  if (!s->core.zctx) {
    rc = err_set(err, SCHEDRUN_EINTERNAL, "zmq_ctx_new failed");
    goto fail;
  }
  /* every endpoint is inproc, which needs no I/O thread */
  zmq_ctx_set(s->core.zctx, ZMQ_IO_THREADS, 0);
  s->inbox = mbox_bind(s->core.zctx, ACTOR_CLIENT, err);
  s->ctl_inbox = s->inbox ? mbox_bind(s->core.zctx, ACTOR_CONTROL, err) : NULL;
  s->bell = s->ctl_inbox ? mbox_connect(s->core.zctx, ACTOR_CLIENT, err) : NULL;
  if (!s->inbox || !s->ctl_inbox || !s->bell) {
    rc = SCHEDRUN_EINTERNAL;
    goto fail;
  }
  s->compile_st = compile_state_new(&s->core);
  s->record_st = record_state_new(&s->core);
  s->scheduler_st = scheduler_state_new(&s->core);
  if (!s->compile_st || !s->record_st || !s->scheduler_st) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto fail;
  }
  if ((rc = actor_start_spin(s->core.zctx, &compile_actor_def, ACTOR_COMPILE, s->compile_st, s->spin_ns, NULL, &s->compile, err)))
    goto fail;
  if ((rc = actor_start_spin(s->core.zctx, &record_actor_def, ACTOR_RECORD, s->record_st, s->spin_ns, NULL, &s->record, err)))
    goto fail;
  for (int d = 0; d < s->core.ndevices; d++) {
    char name[32];
    snprintf(name, sizeof name, ACTOR_EXECUTE_FMT, d);
    s->execute_st[d] = execute_state_new(&s->core, d);
    if (!s->execute_st[d]) {
      rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
      goto fail;
    }
    if ((rc = actor_start_spin(s->core.zctx, &execute_actor_def, name, s->execute_st[d], s->spin_ns,
                               &s->core.to_execute[d], &s->execute[d], err)))
      goto fail;
  }
  if ((rc = actor_start_spin(s->core.zctx, &scheduler_actor_def, ACTOR_SCHEDULER, s->scheduler_st, s->spin_ns,
                             &s->core.to_scheduler, &s->scheduler, err)))
    goto fail;
  s->outbox = mbox_connect(s->core.zctx, ACTOR_SCHEDULER, err);
  if (!s->outbox) {
    rc = SCHEDRUN_EINTERNAL;
    goto fail;
  }
  if (pthread_create(&s->completer, NULL, completer_main, s) != 0) {
    rc = err_set(err, SCHEDRUN_EINTERNAL, "cannot start the completion thread");
    goto fail;
  }
  s->completer_running = true;
  *out = s;
  return SCHEDRUN_OK;
fail:
  if (s->core.backend) s->core.backend->ops->abandon(s->core.backend);
  teardown(s);
  return rc ? rc : SCHEDRUN_EINTERNAL;
}

int schedrun_shutdown(schedrun_t *s, int timeout_ms, schedrun_error_t *err) {
  if (!s) return err_set(err, SCHEDRUN_EINVAL, "schedrun_shutdown: the scheduler is NULL");
  if (api_on_completer(s))
    return err_set(err, SCHEDRUN_EDEADLK, "schedrun_shutdown: called from a completion callback, whose "
                                          "thread the drain waits for; shut down from another thread");
  pthread_mutex_lock(&s->lock);
  bool already = s->closing;
  s->closing = true;
  uint64_t id = already ? 0 : ++s->next_id;
  if (!already) {
    s->term_id = id;
    s->term_ready = false;
  }
  pthread_cond_broadcast(&s->cond); /* submitters waiting for room give up */
  pthread_mutex_unlock(&s->lock);
  if (already) {
    pthread_mutex_lock(&s->lock);
    bool done = s->closed;
    pthread_mutex_unlock(&s->lock);
    return done ? SCHEDRUN_OK : err_set(err, SCHEDRUN_ECLOSED, "the scheduler is already shutting down");
  }
  /* the scheduler stops running compiles first, completes jobs not started,
   * lets started ones finish, and then answers TERM, after every COMPLETE
   * (they share one pipe, in order) */
  msg t;
  msg_init(&t, MSG_TERM, id, ACTOR_CLIENT);
  pthread_mutex_lock(&s->send_lock);
  int rc = mbox_send(s->outbox, &t, err);
  if (rc == SCHEDRUN_OK) s->term_sent = true;
  pthread_mutex_unlock(&s->send_lock);
  msg_free(&t);
  if (rc) return rc;
  int limit = timeout_ms < 0 ? CLOSE_TIMEOUT_MS : timeout_ms;
  struct timespec ts = api_deadline_in(limit);
  pthread_mutex_lock(&s->lock);
  while (!s->term_ready && rc == SCHEDRUN_OK)
    if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) != 0 && !s->term_ready)
      rc = err_set(err, SCHEDRUN_ETIMEOUT, "schedrun_shutdown: jobs still running after %d ms", limit);
  pthread_mutex_unlock(&s->lock);
  if (rc) return rc;
  /* the scheduler has answered and stops; schedrun_get_stats reads the
   * actors under the lock, and keeps its count of dropped messages */
  pthread_mutex_lock(&s->lock);
  actor_t *sched = s->scheduler;
  s->scheduler = NULL;
  s->dropped_by_joined += actor_malformed(sched);
  pthread_mutex_unlock(&s->lock);
  actor_join(&sched);
  pthread_join(s->completer, NULL); /* it stopped at the TERM */
  s->completer_running = false;
  pthread_mutex_lock(&s->lock);
  s->closed = true;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return SCHEDRUN_OK;
}

int schedrun_close(schedrun_t **ps) {
  if (!ps || !*ps) return SCHEDRUN_OK;
  schedrun_t *s = *ps;
  if (api_on_completer(s)) return SCHEDRUN_EDEADLK;
  if (schedrun_shutdown(s, CLOSE_DRAIN_MS, NULL) != SCHEDRUN_OK) {
    /* jobs still running: abandon their devices (their workers are killed,
     * a GPU context is reset), so that the execute actors can stop */
    s->core.backend->ops->abandon(s->core.backend);
  }
  teardown(s);
  *ps = NULL;
  return SCHEDRUN_OK;
}
