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
#define ABANDON_WAIT_MS 30000 /* for jobs to end once their devices are abandoned */

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

uint64_t api_ns_until(const struct timespec *deadline) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  int64_t ns = (int64_t)(deadline->tv_sec - now.tv_sec) * 1000000000 + (deadline->tv_nsec - now.tv_nsec);
  return ns > 0 ? (uint64_t)ns : 0;
}

/* The disk cache's directory; *none when the environment names none (no
 * HOME, no XDG_CACHE_HOME: cron, systemd units, env -i). There is no shared
 * fallback: a fixed directory in /tmp is one another user can make first. */
static char *default_cache_dir(bool *none) {
  *none = false;
  const char *env = getenv("SCHEDRUN_CACHE_DIR");
  if (env && *env) return xstrdup(env);
  strbuf sb;
  sb_init(&sb);
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg) sb_addf(&sb, "%s/schedrun", xdg);
  else if (home && *home) sb_addf(&sb, "%s/.cache/schedrun", home);
  else *none = true;
  return sb.failed || *none ? (sb_free(&sb), NULL) : sb_take(&sb);
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

/* Tells an actor to stop and waits for its thread; its mailbox stays bound
 * until every actor has stopped (teardown's actor_join), so that no actor's
 * late send finds a peer's name closed. */
static void stop_actor(schedrun_t *s, actor_t *a, const char *name) {
  if (!a) return;
  send_term(s, name);
  actor_wait(a);
}

/* ---- the completion thread (what it files: lib/api_complete.c) ---- */

static void *completer_main(void *arg) {
  pthread_setname_np(pthread_self(), "completions"); /* as the actors' threads are named */
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
    int rc = mbox_recv_spin(s->inbox, terminating ? DRAIN_TIMEOUT_MS : -1, s->spin_ns, &s->core.to_client, NULL, 0, &m,
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
      api_completed(s, &m.job, &m.body.complete, 1, true);
    } else if (m.type == MSG_COMPLETE_MANY) {
      api_completed_many(s, &m, true);
    } else if (m.type == MSG_QUEUED) {
      api_drain_completions(s, true);
    } else if (m.type == MSG_RELEASE && !strcmp(m.from, ACTOR_SCHEDULER)) {
      api_released(s, m.body.release.program);
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
  api_guests_close(s);
  stop_actor(s, s->scheduler, ACTOR_SCHEDULER);
  stop_actor(s, s->compile, ACTOR_COMPILE);
  stop_actor(s, s->record, ACTOR_RECORD);
  for (int d = 0; d < s->core.ndevices; d++) stop_actor(s, s->execute[d], s->core.execute_names[d]);
  actor_join(&s->sched_stopped);
  actor_join(&s->scheduler);
  actor_join(&s->compile);
  actor_join(&s->record);
  for (int d = 0; d < s->core.ndevices; d++) actor_join(&s->execute[d]);
  stop_completer(s);
  scheduler_state_free(s->scheduler_st);
  compile_state_free(s->compile_st);
  record_state_free(s->record_st);
  for (int d = 0; d < s->core.ndevices; d++) execute_state_free(s->execute_st[d]);
  mbox_close(s->bell);
  mbox_close(s->inbox);
  mbox_close(s->ctl_inbox);
  mbox_close(s->outbox);
  for (int d = 0; d < s->core.ndevices; d++) mbox_close(s->execute_bell[d]);
  msg_free(&s->term_reply);
  msgq_close(&s->core.to_scheduler);
  msgq_close(&s->core.to_client);
  for (int d = 0; d < s->core.ndevices; d++) msgq_close(&s->core.to_execute[d]);
  if (s->core.zctx) zmq_ctx_term(s->core.zctx);
  size_t pos = 0;
  void *v;
  while (idmap_next(&s->jobs, &pos, NULL, &v)) {
    schedrun_job_result_free(&((pending_job *)v)->result);
    deps_node_free(s, ((pending_job *)v)->dep, true);
    free(v);
  }
  free(s->host_ready);
  free(s->late_release);
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
  api_buffers_close(s);
  free(s->doomed);
  free(s->doomed_ids);
  pthread_mutex_destroy(&s->core.reg_lock);
  tune_table_destroy(&s->core.tunes);
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
  free(s->opened_devices);
  free(s->core.cache_dir);
  free(s);
}

int schedrun_open(schedrun_t **out, const schedrun_options_t *opts, schedrun_error_t *err) {
  if (!out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_open: out is NULL");
  *out = NULL;
  schedrun_options_t o;
  schedrun_options_init(&o);
  if (opts) o = *opts;
  if (o.compile_workers < 0 || o.max_inflight < 0 || o.compile_timeout_ms < 0)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_open: %s must be >= 0",
                   o.compile_workers < 0 ? "compile_workers"
                   : o.max_inflight < 0  ? "max_inflight"
                                         : "compile_timeout_ms");
  schedrun_t *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->send_lock, NULL);
  pthread_mutex_init(&s->ctl_lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  pthread_mutex_init(&s->core.reg_lock, NULL);
  tune_table_init(&s->core.tunes);
  msgq_init(&s->core.to_scheduler);
  msgq_init(&s->core.to_client);
  for (int d = 0; d < SCHEDRUN_MAX_DEVICES; d++) msgq_init(&s->core.to_execute[d]);
  pthread_mutex_init(&s->bell_lock, NULL);
  hmap_init(&s->core.programs, sizeof(uint64_t));
  hmap_init(&s->core.buffers, sizeof(uint64_t));
  idmap_init(&s->jobs);
  s->max_inflight = o.max_inflight ? (size_t)o.max_inflight : DEFAULT_MAX_INFLIGHT;
  int rc = SCHEDRUN_OK;
  bool no_home = false;
  char *dir = o.no_disk_cache || o.cache_dir ? NULL : default_cache_dir(&no_home);
  if (o.no_disk_cache || no_home) {
    char tmpl[256];
    if (fs_temp_dir(tmpl, sizeof tmpl, "/tmp", "schedrun-cache-") != 0) {
      rc = err_set(err, SCHEDRUN_EIO, "cannot create a temporary cache directory in /tmp");
      goto fail;
    }
    s->temp_cache = xstrdup(tmpl);
    s->core.cache_dir = xstrdup(tmpl);
  } else {
    s->core.cache_dir = o.cache_dir ? xstrdup(o.cache_dir) : dir;
    dir = NULL;
  }
  free(dir);
  if (!s->core.cache_dir) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto fail;
  }
  if ((rc = fs_mkdir_private(s->core.cache_dir, err))) goto fail;
  if ((rc = fs_check_private_dir(s->core.cache_dir, err))) goto fail;
  sweep_dead_processes(s->core.cache_dir);
  s->spin_ns = o.spin_us < 0 ? 0 : o.spin_us == 0 ? ACTOR_SPIN_NS : (uint64_t)o.spin_us * 1000u;
  gpu_open_opts go = {s->core.cache_dir, s->spin_ns, o.host_in_process != 0};
  if ((rc = gpu_backend_open(o.devices, &go, &s->core.backend, &s->fallback, err))) goto fail;
  if (!(s->opened_devices = xstrdup(o.devices ? o.devices : "auto"))) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto fail;
  }
  s->core.ndevices = s->core.backend->ops->device_count(s->core.backend);
  core_name_devices(&s->core);
  for (int t = 0; t < gpu_target_count(s->core.backend); t++) {
    /* "cuda sm_90", "host", or both: "cuda sm_90 + host" */
    const gpu_backend *be = gpu_target_part(s->core.backend, t);
    const char *arch = gpu_compile_arch(be);
    size_t len = strlen(s->target);
    snprintf(s->target + len, sizeof s->target - len, "%s%s%s%s", t ? " + " : "", be->ops->target(be, 0),
             arch && *arch ? " " : "", arch ? arch : "");
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  s->core.compile_workers = o.compile_workers ? o.compile_workers : (int)(cores > 0 ? cores : 1);
  s->core.compile_timeout_ns = (uint64_t)o.compile_timeout_ms * 1000000ull;
  s->core.record_always = o.record_always != 0;
  s->core.retune = o.retune != 0;
  if (!o.placement || !strcmp(o.placement, "auto")) s->core.placement = SCHEDRUN__PLACE_AUTO;
  else if (!strcmp(o.placement, "model")) s->core.placement = SCHEDRUN__PLACE_MODEL;
  else if (!strcmp(o.placement, "least-loaded")) s->core.placement = SCHEDRUN__PLACE_LEAST_LOADED;
  else {
    rc = err_set(err, SCHEDRUN_EINVAL, "placement '%s' is not one of auto, model, least-loaded", o.placement);
    goto fail;
  }
  s->core.record_whole_program = o.record_whole_program != 0;
  s->core.no_batching = o.no_batching != 0;
  /* free on host devices (the worker notes the times); asked for elsewhere */
  s->core.time_nodes = o.time_nodes != 0 || strcmp(s->core.backend->ops->name, "host") == 0;
  s->core.queue_completions = !s->core.no_batching;
  s->core.zctx = zmq_ctx_new();
  if (!s->core.zctx) {
    rc = err_set(err, SCHEDRUN_EINTERNAL, "zmq_ctx_new failed");
    goto fail;
  }
  /* every endpoint is inproc, which needs no I/O thread */
  zmq_ctx_set(s->core.zctx, ZMQ_IO_THREADS, 0);
  if ((rc = msgq_open(&s->core.to_scheduler, s->core.zctx, ACTOR_SCHEDULER, err)) ||
      (rc = msgq_open(&s->core.to_client, s->core.zctx, ACTOR_CLIENT, err)))
    goto fail;
  for (int d = 0; d < s->core.ndevices; d++)
    if ((rc = msgq_open(&s->core.to_execute[d], s->core.zctx, s->core.execute_names[d], err))) goto fail;
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
    const char *name = s->core.execute_names[d];
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
  for (int d = 0; d < s->core.ndevices; d++) {
    if (!(s->execute_bell[d] = mbox_connect(s->core.zctx, s->core.execute_names[d], err))) {
      rc = SCHEDRUN_EINTERNAL;
      goto fail;
    }
  }
  if (pthread_create(&s->completer, NULL, completer_main, s) != 0) {
    rc = err_set(err, SCHEDRUN_EINTERNAL, "cannot start the completion thread");
    goto fail;
  }
  s->completer_running = true;
  /* callers may run the scheduler's queue (lib/api_guest.c), where its
   * backend calls leave the application's threads as they were */
  atomic_store(&s->sched_open,
               !o.no_caller_scheduling && !s->core.no_batching && s->core.backend->ops->any_thread);
  *out = s;
  return SCHEDRUN_OK;
fail:
  if (s->core.backend) s->core.backend->ops->abandon(s->core.backend);
  teardown(s);
  return rc ? rc : SCHEDRUN_EINTERNAL;
}

/* Whether the scheduler answered TERM within timeout_ms. */
static bool term_answered(schedrun_t *s, int timeout_ms) {
  struct timespec ts = api_deadline_in(timeout_ms);
  pthread_mutex_lock(&s->lock);
  while (!s->term_ready && pthread_cond_timedwait(&s->cond, &s->lock, &ts) == 0) {
  }
  bool ready = s->term_ready;
  pthread_mutex_unlock(&s->lock);
  return ready;
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
  /* from here the scheduler's own thread runs its queue; the drain may still
   * end on a guest's thread, which wakes the scheduler's to stop */
  if (rc == SCHEDRUN_OK) atomic_store(&s->sched_open, false);
  msg_free(&t);
  if (rc) return rc;
  int limit = timeout_ms < 0 ? CLOSE_TIMEOUT_MS : timeout_ms;
  bool ended = false;
  if (!term_answered(s, limit)) {
    /* jobs still running past the grace (a kernel that never returns): their
     * devices are abandoned (host workers killed, GPU contexts reset), which
     * ends the jobs as lost, and the drain completes */
    ended = true;
    s->core.backend->ops->abandon(s->core.backend);
    if (!term_answered(s, ABANDON_WAIT_MS))
      return err_set(err, SCHEDRUN_ETIMEOUT,
                     "schedrun_shutdown: jobs still running %d ms after their devices were abandoned (a kernel "
                     "running in this process cannot be stopped)",
                     ABANDON_WAIT_MS);
  }
  /* the scheduler has answered and stops; schedrun_get_stats reads the
   * actors under the lock, and keeps its count of dropped messages */
  api_guests_close(s);
  pthread_mutex_lock(&s->lock);
  actor_t *sched = s->scheduler;
  s->scheduler = NULL;
  s->dropped_by_joined += actor_malformed(sched);
  s->sched_stopped = sched; /* freed once the other actors have stopped too */
  pthread_mutex_unlock(&s->lock);
  actor_wait(sched);
  pthread_join(s->completer, NULL); /* it stopped at the TERM */
  s->completer_running = false;
  pthread_mutex_lock(&s->lock);
  s->closed = true;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  if (ended)
    return err_set(err, SCHEDRUN_ETIMEOUT,
                   "schedrun_shutdown: jobs still running after %d ms were ended (their devices abandoned)", limit);
  return SCHEDRUN_OK;
}

int schedrun_close(schedrun_t **ps) {
  if (!ps || !*ps) return SCHEDRUN_OK;
  schedrun_t *s = *ps;
  if (api_on_completer(s)) return SCHEDRUN_EDEADLK;
  /* jobs still running after the drain have their devices abandoned there
   * (their workers are killed, a GPU context is reset); the abandon here is
   * for a drain that could not end even so */
  if (schedrun_shutdown(s, CLOSE_DRAIN_MS, NULL) != SCHEDRUN_OK) s->core.backend->ops->abandon(s->core.backend);
  teardown(s);
  *ps = NULL;
  return SCHEDRUN_OK;
}
