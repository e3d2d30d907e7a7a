/*
 * The public API (include/sched.h) on top of the actors.
 *
 * A sched_t holds the shared core, the actors, and the client's two sockets:
 * an inbox every actor can answer to ("client") and an outbox to the
 * scheduler. The client side is used under one lock, so the API may be called
 * from any thread. Programs can be loaded before a scheduler exists (to read
 * their `devices`), and join a scheduler on their first run.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "actors/actor.h"
#include "actors/core.h"
#include "lib/report.h"

#define CLOSE_TIMEOUT_MS 120000
#define RELEASE_TIMEOUT_MS 60000
#define DEFAULT_RUN_TIMEOUT_MS (10 * 60 * 1000)

struct sched_program {
  sched_t *s; /* the scheduler it is registered with, or NULL */
  uint64_t id;
  prog_program *p;
  struct sched_program *next; /* in s->programs */
};

struct sched {
  sched_core core;
  actor_t *scheduler, *compile, *record;
  actor_t *execute[SCHED_MAX_DEVICES];
  scheduler_state *scheduler_st;
  compile_state *compile_st;
  record_state *record_st;
  execute_state *execute_st[SCHED_MAX_DEVICES];
  void *inbox, *outbox;
  pthread_mutex_t lock;
  uint64_t next_job, next_program;
  sched_program_t *programs;
  char *temp_cache; /* removed at close */
};

void sched_options_init(sched_options_t *o) {
  if (o) memset(o, 0, sizeof *o);
}

void sched_run_options_init(sched_run_options_t *o) {
  if (o) memset(o, 0, sizeof *o);
}

int sched_device_count(const sched_t *s) { return s ? s->core.ndevices : 0; }

const char *sched_device_name(const sched_t *s, int i) {
  if (!s || i < 0 || i >= s->core.ndevices) return NULL;
  return s->core.backend->ops->device_name(s->core.backend, i);
}

static char *default_cache_dir(void) {
  const char *env = getenv("SCHED_CACHE_DIR");
  if (env && *env) return xstrdup(env);
  strbuf sb;
  sb_init(&sb);
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg) sb_addf(&sb, "%s/sched", xdg);
  else if (home && *home) sb_addf(&sb, "%s/.cache/sched", home);
  else sb_adds(&sb, "/tmp/sched-cache");
  return sb.failed ? (sb_free(&sb), NULL) : sb_take(&sb);
}

static void stop_actor(sched_t *s, actor_t **a, const char *name) {
  if (!*a) return;
  void *sock = mbox_connect(s->core.zctx, name, NULL);
  msg t;
  msg_init(&t, MSG_TERM, 0, ACTOR_CLIENT);
  if (sock) mbox_send(sock, &t, NULL);
  msg_free(&t);
  mbox_close(sock);
  actor_join(a);
}

static void teardown(sched_t *s) {
  stop_actor(s, &s->compile, ACTOR_COMPILE);
  stop_actor(s, &s->record, ACTOR_RECORD);
  for (int d = 0; d < s->core.ndevices; d++) {
    char name[32];
    snprintf(name, sizeof name, ACTOR_EXECUTE_FMT, d);
    stop_actor(s, &s->execute[d], name);
  }
  scheduler_state_free(s->scheduler_st);
  compile_state_free(s->compile_st);
  record_state_free(s->record_st);
  for (int d = 0; d < s->core.ndevices; d++) execute_state_free(s->execute_st[d]);
  mbox_close(s->inbox);
  mbox_close(s->outbox);
  if (s->core.zctx) zmq_ctx_term(s->core.zctx);
  /* programs still registered: hand them back to their handles, or free the
   * ones whose handle is gone */
  for (sched_program_t *h = s->programs; h; h = h->next) {
    hmap_remove(&s->core.programs, &h->id);
    h->s = NULL;
  }
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->core.programs, &pos, NULL, &v)) prog_free(v);
  hmap_destroy(&s->core.programs);
  pthread_mutex_destroy(&s->core.reg_lock);
  pthread_mutex_destroy(&s->lock);
  gpu_backend_close(&s->core.backend);
  if (s->temp_cache) fs_remove_tree(s->temp_cache);
  free(s->temp_cache);
  free(s->core.cache_dir);
  free(s);
}

int sched_open(sched_t **out, const sched_options_t *opts, sched_error_t *err) {
  if (!out) return err_set(err, SCHED_EINVAL, "sched_open: out is NULL");
  *out = NULL;
  sched_options_t o;
  sched_options_init(&o);
  if (opts) o = *opts;
  sched_t *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, SCHED_ENOMEM, "out of memory");
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->core.reg_lock, NULL);
  hmap_init(&s->core.programs, sizeof(uint64_t));
  int rc = gpu_backend_open(o.devices, &s->core.backend, NULL, err);
  if (rc) goto fail;
  s->core.ndevices = s->core.backend->ops->device_count(s->core.backend);
  if (o.no_disk_cache) {
    char tmpl[] = "/tmp/sched-cache-XXXXXX";
    if (!mkdtemp(tmpl)) {
      rc = err_set(err, SCHED_EIO, "cannot create a temporary cache directory");
      goto fail;
    }
    s->temp_cache = xstrdup(tmpl);
    s->core.cache_dir = xstrdup(tmpl);
  } else {
    s->core.cache_dir = o.cache_dir ? xstrdup(o.cache_dir) : default_cache_dir();
  }
  if (o.compile_workers < 0) {
    rc = err_set(err, SCHED_EINVAL, "compile_workers must be >= 0");
    goto fail;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  s->core.compile_workers = o.compile_workers ? o.compile_workers : (int)(cores > 0 ? cores : 1);
  if (!s->core.cache_dir) {
    rc = err_set(err, SCHED_ENOMEM, "out of memory");
    goto fail;
  }
  if ((rc = fs_mkdir_p(s->core.cache_dir, err))) goto fail;
  s->core.zctx = zmq_ctx_new();
  if (!s->core.zctx) {
    rc = err_set(err, SCHED_EINTERNAL, "zmq_ctx_new failed");
    goto fail;
  }
  /* every endpoint is inproc, which needs no I/O thread */
  zmq_ctx_set(s->core.zctx, ZMQ_IO_THREADS, 0);
  s->inbox = mbox_bind(s->core.zctx, ACTOR_CLIENT, err);
  if (!s->inbox) {
    rc = SCHED_EINTERNAL;
    goto fail;
  }
  s->compile_st = compile_state_new(&s->core);
  s->record_st = record_state_new(&s->core);
  s->scheduler_st = scheduler_state_new(&s->core);
  if (!s->compile_st || !s->record_st || !s->scheduler_st) {
    rc = err_set(err, SCHED_ENOMEM, "out of memory");
    goto fail;
  }
  if ((rc = actor_start(s->core.zctx, &compile_actor_def, ACTOR_COMPILE, s->compile_st, &s->compile, err)))
    goto fail;
  if ((rc = actor_start(s->core.zctx, &record_actor_def, ACTOR_RECORD, s->record_st, &s->record, err)))
    goto fail;
  for (int d = 0; d < s->core.ndevices; d++) {
    char name[32];
    snprintf(name, sizeof name, ACTOR_EXECUTE_FMT, d);
    s->execute_st[d] = execute_state_new(&s->core, d);
    if (!s->execute_st[d]) {
      rc = err_set(err, SCHED_ENOMEM, "out of memory");
      goto fail;
    }
    if ((rc = actor_start(s->core.zctx, &execute_actor_def, name, s->execute_st[d], &s->execute[d], err)))
      goto fail;
  }
  if ((rc = actor_start(s->core.zctx, &scheduler_actor_def, ACTOR_SCHEDULER, s->scheduler_st, &s->scheduler, err)))
    goto fail;
  s->outbox = mbox_connect(s->core.zctx, ACTOR_SCHEDULER, err);
  if (!s->outbox) {
    rc = SCHED_EINTERNAL;
    goto fail;
  }
  *out = s;
  return SCHED_OK;
fail:
  stop_actor(s, &s->scheduler, ACTOR_SCHEDULER);
  teardown(s);
  return rc ? rc : SCHED_EINTERNAL;
}

void sched_close(sched_t **ps) {
  if (!ps || !*ps) return;
  sched_t *s = *ps;
  pthread_mutex_lock(&s->lock);
  /* the scheduler drains: jobs not started fail, started ones finish */
  msg t;
  msg_init(&t, MSG_TERM, 0, ACTOR_CLIENT);
  mbox_send(s->outbox, &t, NULL);
  msg_free(&t);
  uint64_t deadline = now_ns() + (uint64_t)CLOSE_TIMEOUT_MS * 1000000ull;
  for (;;) {
    uint64_t now = now_ns();
    if (now >= deadline) break;
    msg m;
    if (mbox_recv(s->inbox, (int)((deadline - now) / 1000000ull), &m, NULL, NULL) != SCHED_OK) break;
    bool done = m.type == MSG_TERM;
    msg_free(&m);
    if (done) break;
  }
  actor_join(&s->scheduler);
  pthread_mutex_unlock(&s->lock);
  teardown(s);
  *ps = NULL;
}

/* Asks one actor for STATUS (with `query` items) and waits for its answer. */
static int ask_status(sched_t *s, const char *actor, const msg_stat *query, size_t nquery, msg *reply,
                      sched_error_t *err) {
  int rc = SCHED_OK;
  void *sock = mbox_connect(s->core.zctx, actor, err);
  msg q;
  msg_init(&q, MSG_STATUS, 0, ACTOR_CLIENT);
  if (nquery) {
    q.body.status.items.v = calloc(nquery, sizeof(msg_stat));
    for (size_t i = 0; q.body.status.items.v && i < nquery; i++) {
      q.body.status.items.v[i] = (msg_stat){xstrdup(query[i].name), query[i].value};
      q.body.status.items.n++;
    }
  }
  if (!sock) rc = SCHED_EINTERNAL;
  else rc = mbox_send(sock, &q, err);
  msg_free(&q);
  mbox_close(sock);
  uint64_t deadline = now_ns() + 10000000000ull;
  while (rc == SCHED_OK) {
    uint64_t now = now_ns();
    rc = now >= deadline ? err_set(err, SCHED_ETIMEOUT, "the %s actor did not answer", actor)
                         : mbox_recv(s->inbox, (int)((deadline - now) / 1000000ull), reply, NULL, err);
    if (rc) break;
    if (reply->type == MSG_STATUS && !strcmp(reply->from, actor)) return SCHED_OK;
    msg_free(reply);
  }
  return rc;
}

static int64_t stat_value(const msg *m, const char *name) {
  for (size_t i = 0; i < m->body.status.items.n; i++)
    if (!strcmp(m->body.status.items.v[i].name, name)) return m->body.status.items.v[i].value;
  return 0;
}

int sched_compile_status(sched_t *s, int *active_sessions, int *cache_entries, sched_error_t *err) {
  if (!s) return err_set(err, SCHED_EINVAL, "sched_compile_status: the scheduler is NULL");
  pthread_mutex_lock(&s->lock);
  msg m;
  int rc = ask_status(s, ACTOR_COMPILE, NULL, 0, &m, err);
  if (rc == SCHED_OK) {
    if (active_sessions) *active_sessions = (int)stat_value(&m, "compile_mode_active");
    if (cache_entries) *cache_entries = (int)stat_value(&m, "cache_entries");
    msg_free(&m);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int sched_record_counters(sched_t *s, const sched_program_t *p, int device, int slot, sched_counters_t *out,
                          sched_error_t *err) {
  if (!s || !p || !out)
    return err_set(err, SCHED_EINVAL, "sched_record_counters: %s is NULL", !s ? "the scheduler" : !p ? "the program" : "out");
  memset(out, 0, sizeof *out);
  if (device < 0 || device >= s->core.ndevices || slot < 0)
    return err_set(err, SCHED_EINVAL, "sched_record_counters: no device %d or slot %d", device, slot);
  if (p->s != s) return SCHED_OK; /* never run here: nothing recorded */
  pthread_mutex_lock(&s->lock);
  msg_stat q[] = {{"program", (int64_t)p->id}, {"device", device}, {"slot", slot}};
  msg m;
  int rc = ask_status(s, ACTOR_RECORD, q, 3, &m, err);
  if (rc == SCHED_OK) {
    out->nodes = (uint64_t)stat_value(&m, "nodes");
    out->created = (uint64_t)stat_value(&m, "created");
    out->updated = (uint64_t)stat_value(&m, "updated");
    out->reused = (uint64_t)stat_value(&m, "reused");
    msg_free(&m);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* ---- programs ---- */

static int wrap_program(sched_t *s, prog_program *p, sched_program_t **out, sched_error_t *err) {
  sched_program_t *h = calloc(1, sizeof *h);
  if (!h) {
    prog_free(p);
    return err_set(err, SCHED_ENOMEM, "out of memory");
  }
  h->p = p;
  *out = h;
  (void)s;
  return SCHED_OK;
}

int sched_program_load_file(sched_t *s, const char *path, sched_program_t **out, sched_error_t *err) {
  if (!out || !path) return err_set(err, SCHED_EINVAL, "sched_program_load_file: %s is NULL", out ? "path" : "out");
  *out = NULL;
  prog_program *p;
  int rc = prog_load_file(path, &p, err);
  return rc ? rc : wrap_program(s, p, out, err);
}

int sched_program_load_string(sched_t *s, const char *yaml, const char *origin,
                              sched_program_t **out, sched_error_t *err) {
  if (!out || !yaml) return err_set(err, SCHED_EINVAL, "sched_program_load_string: %s is NULL", out ? "yaml" : "out");
  *out = NULL;
  prog_program *p;
  int rc = prog_load_string(yaml, strlen(yaml), origin ? origin : "<string>", &p, err);
  return rc ? rc : wrap_program(s, p, out, err);
}

static int attach(sched_t *s, sched_program_t *h, sched_error_t *err) {
  if (h->s == s) return SCHED_OK;
  if (h->s) return err_set(err, SCHED_EINVAL, "program '%s' belongs to another scheduler", h->p->name);
  pthread_mutex_lock(&s->core.reg_lock);
  h->id = ++s->next_program;
  int rc = hmap_put(&s->core.programs, &h->id, h->p);
  pthread_mutex_unlock(&s->core.reg_lock);
  if (rc) return err_set(err, SCHED_ENOMEM, "out of memory");
  h->s = s;
  h->next = s->programs;
  s->programs = h;
  return SCHED_OK;
}

void sched_program_free(sched_program_t **ph) {
  if (!ph || !*ph) return;
  sched_program_t *h = *ph;
  sched_t *s = h->s;
  *ph = NULL;
  if (!s) {
    prog_free(h->p);
    free(h);
    return;
  }
  pthread_mutex_lock(&s->lock);
  for (sched_program_t **pp = &s->programs; *pp; pp = &(*pp)->next)
    if (*pp == h) {
      *pp = h->next;
      break;
    }
  /* ask the actors to drop what they hold for it, and wait for the answer */
  msg r;
  msg_init(&r, MSG_RELEASE, 0, ACTOR_CLIENT);
  r.body.release.program = h->id;
  bool released = false;
  if (mbox_send(s->outbox, &r, NULL) == SCHED_OK) {
    uint64_t deadline = now_ns() + (uint64_t)RELEASE_TIMEOUT_MS * 1000000ull;
    for (;;) {
      uint64_t now = now_ns();
      msg m;
      if (now >= deadline ||
          mbox_recv(s->inbox, (int)((deadline - now) / 1000000ull), &m, NULL, NULL) != SCHED_OK)
        break;
      bool mine = (m.type == MSG_RELEASE && m.body.release.program == h->id);
      bool refused = m.type == MSG_ERROR && m.job == 0;
      msg_free(&m);
      if (mine) released = true;
      if (mine || refused) break;
    }
  }
  msg_free(&r);
  if (released) {
    pthread_mutex_lock(&s->core.reg_lock);
    hmap_remove(&s->core.programs, &h->id);
    pthread_mutex_unlock(&s->core.reg_lock);
    prog_free(h->p);
  }
  /* else it stays registered (actors may still use it) and is freed at close */
  pthread_mutex_unlock(&s->lock);
  free(h);
}

const char *sched_program_name(const sched_program_t *p) { return p ? p->p->name : NULL; }
int sched_program_repeat(const sched_program_t *p) { return p ? p->p->repeat : 0; }
int sched_program_buffer_sets(const sched_program_t *p) { return p ? p->p->buffer_sets : 0; }
int sched_program_jobs(const sched_program_t *p) { return p ? p->p->jobs : 0; }
const char *sched_program_devices(const sched_program_t *p) { return p ? p->p->devices : NULL; }

/* ---- runs ---- */

int sched_run(sched_t *s, sched_program_t *h, const sched_run_options_t *opts,
              sched_report_t **out, sched_error_t *err) {
  if (out) *out = NULL;
  if (!s || !h || !out)
    return err_set(err, SCHED_EINVAL, "sched_run: %s is NULL", !s ? "the scheduler" : !h ? "the program" : "out");
  sched_run_options_t o;
  sched_run_options_init(&o);
  if (opts) o = *opts;
  if (o.repeat < 0 || o.jobs < 0 || o.timeout_ms < 0)
    return err_set(err, SCHED_EINVAL, "sched_run: repeat, jobs and timeout_ms must be >= 0");
  const prog_program *p = h->p;
  int repeat = o.repeat ? o.repeat : p->repeat, jobs = o.jobs ? o.jobs : p->jobs;
  if ((uint64_t)repeat * (uint64_t)jobs > 100000000ull)
    return err_set(err, SCHED_EINVAL, "sched_run: %d runs of %d jobs is too many", repeat, jobs);
  int timeout = o.timeout_ms ? o.timeout_ms : DEFAULT_RUN_TIMEOUT_MS;

  pthread_mutex_lock(&s->lock);
  int rc = attach(s, h, err);
  sched_report_t *rep = NULL;
  if (rc == SCHED_OK) {
    rep = report_new(s, p, repeat, jobs, o.keep_outputs != 0);
    if (!rep) rc = err_set(err, SCHED_ENOMEM, "out of memory");
  }
  if (rc) {
    pthread_mutex_unlock(&s->lock);
    return rc;
  }
  uint64_t t0 = now_ns();
  uint64_t first = s->next_job + 1;
  size_t total = (size_t)repeat * (size_t)jobs, submitted = 0;
  for (int r = 0; r < repeat && rc == SCHED_OK; r++)
    for (int j = 0; j < jobs && rc == SCHED_OK; j++) {
      msg m;
      msg_init(&m, MSG_SUBMIT, ++s->next_job, ACTOR_CLIENT);
      m.body.submit = (msg_submit){h->id, (uint32_t)r, (uint32_t)j, (uint32_t)(r % p->buffer_sets), -1,
                                   o.keep_outputs ? 1u : 0u};
      rc = mbox_send(s->outbox, &m, err);
      msg_free(&m);
      if (rc == SCHED_OK) submitted++;
    }
  uint64_t deadline = t0 + (uint64_t)timeout * 1000000ull;
  size_t done = 0;
  while (done < submitted) {
    uint64_t now = now_ns();
    msg m;
    int wrc = now >= deadline ? SCHED_ETIMEOUT
                              : mbox_recv(s->inbox, (int)((deadline - now + 999999) / 1000000ull), &m, NULL, NULL);
    if (wrc == SCHED_ETIMEOUT) {
      if (rc == SCHED_OK)
        rc = err_set(err, SCHED_ETIMEOUT, "run of '%s': %zu of %zu jobs done after %d ms", p->name, done,
                     total, timeout);
      break;
    }
    if (wrc) {
      if (rc == SCHED_OK) rc = err_set(err, wrc, "run of '%s': the scheduler stopped answering", p->name);
      break;
    }
    if (m.type == MSG_COMPLETE && m.job >= first && m.job < first + total &&
        report_add(rep, (size_t)(m.job - first), &m.body.complete))
      done++;
    msg_free(&m);
  }
  report_finish(rep, now_ns() - t0);
  pthread_mutex_unlock(&s->lock);
  *out = rep;
  if (rc) return rc;
  return report_status(rep, err);
}
