/*
 * The public API (include/schedrun.h) on top of the actors.
 *
 * A schedrun_t holds the shared core, the actors, and the client's two sockets:
 * an inbox every actor can answer to ("client") and an outbox to the
 * scheduler. The client side is used under one lock, so the API may be called
 * from any thread. Programs can be loaded before a scheduler exists (to read
 * their `devices`), and join a scheduler on their first run.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "actors/actor.h"
#include "actors/core.h"
#include "lib/report.h"
#include "lib/result.h"
#include <time.h>

#define CLOSE_TIMEOUT_MS 120000
#define DRAIN_TIMEOUT_MS 5000
#define DEFAULT_RUN_TIMEOUT_MS (10 * 60 * 1000)

struct schedrun_program {
  schedrun_t *s; /* the scheduler it is registered with, or NULL */
  uint64_t id;
  prog_program *p;
  struct schedrun_program *next; /* in s->programs */
};

/* A submitted job the client side tracks until it is waited for. */
typedef struct pending_job {
  schedrun_job_t id;
  const prog_program *prog; /* registered, so alive until the job completes */
  bool keep, hidden;        /* hidden: a schedrun_run job, not for schedrun_wait_any */
  schedrun_job_callback cb;
  void *user;
  schedrun_job_result_t *result; /* set on completion, unless cb */
  struct pending_job *next_done;
} pending_job;

struct schedrun {
  schedrun_core core;
  actor_t *scheduler, *compile, *record;
  actor_t *execute[SCHEDRUN_MAX_DEVICES];
  scheduler_state *scheduler_st;
  compile_state *compile_st;
  record_state *record_st;
  execute_state *execute_st[SCHEDRUN_MAX_DEVICES];
  /* the outbox to the scheduler, used under send_lock */
  void *outbox;
  pthread_mutex_t send_lock;
  /* the completion thread owns the inbox and files what arrives */
  void *inbox;
  pthread_t completer;
  bool completer_running;
  /* under lock: jobs, completions, control replies */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  hmap jobs; /* id -> pending_job* until waited for (or handed to a callback) */
  pending_job *done_head, *done_tail;
  size_t incomplete;
  _Atomic uint64_t completions; /* bumped on every completion, for spinning waiters */
  uint64_t next_id; /* jobs and control requests share the id space */
  uint64_t next_program;
  bool closing, closed;
  pthread_mutex_t ctl_lock; /* one control request at a time */
  uint64_t ctl_id;
  msg ctl_reply;
  bool ctl_ready;
  uint64_t malformed;
  /* released programs whose last COMPLETEs have not been read yet */
  prog_program **doomed;
  uint64_t *doomed_ids;
  size_t ndoomed, doomed_cap;
  schedrun_program_t *programs;
  char *temp_cache; /* removed at close */
  char *fallback;   /* why auto/all runs on the host */
  uint64_t spin_ns; /* how long waiting threads poll before they sleep */
};

void schedrun_options_init(schedrun_options_t *o) {
  if (o) memset(o, 0, sizeof *o);
}

void schedrun_run_options_init(schedrun_run_options_t *o) {
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

static void stop_actor(schedrun_t *s, actor_t **a, const char *name) {
  if (!*a) return;
  void *sock = mbox_connect(s->core.zctx, name, NULL);
  msg t;
  msg_init(&t, MSG_TERM, 0, ACTOR_CLIENT);
  if (sock) mbox_send(sock, &t, NULL);
  msg_free(&t);
  mbox_close(sock);
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
    while (!used && hmap_next(&s->jobs, &pos, NULL, &v))
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
    if (mbox_recv_spin(s->inbox, terminating ? DRAIN_TIMEOUT_MS : -1, s->spin_ns, &m, &s->malformed, NULL) != SCHEDRUN_OK)
      break;
    if (m.type == MSG_COMPLETE) {
      pthread_mutex_lock(&s->lock);
      pending_job *pj = hmap_get(&s->jobs, &m.job);
      pthread_mutex_unlock(&s->lock);
      if (pj && !pj->result) {
        /* verification runs here, outside the lock */
        schedrun_job_result_t *r = result_from_complete(m.job, &m.body.complete, pj->prog, pj->keep);
        pthread_mutex_lock(&s->lock);
        if (pj->cb) {
          hmap_remove(&s->jobs, &pj->id);
          pthread_mutex_unlock(&s->lock);
          pj->cb(pj->id, r, pj->user);
          free(pj);
          /* complete only once its callback has returned: wait_all means it */
          pthread_mutex_lock(&s->lock);
          s->incomplete--;
        } else {
          s->incomplete--;
          pj->result = r;
          if (!pj->hidden) {
            if (s->done_tail) s->done_tail->next_done = pj;
            else s->done_head = pj;
            s->done_tail = pj;
          }
        }
        atomic_fetch_add(&s->completions, 1);
        if (s->ndoomed) free_doomed(s);
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
      }
      msg_free(&m);
      continue;
    }
    if (m.type == MSG_RELEASE && !strcmp(m.from, ACTOR_SCHEDULER)) {
      released(s, m.body.release.program);
      msg_free(&m);
      continue;
    }
    bool term = m.type == MSG_TERM;
    pthread_mutex_lock(&s->lock);
    if (s->ctl_id && m.job == s->ctl_id && !s->ctl_ready) {
      s->ctl_reply = m;
      s->ctl_ready = true;
      pthread_cond_broadcast(&s->cond);
    } else {
      msg_free(&m);
    }
    pthread_mutex_unlock(&s->lock);
    if (term) terminating = true;
  }
  return NULL;
}

/* Waits for the next completion: first a short spin without the lock (a
 * job's answer is often microseconds away, and waking a sleeping thread
 * costs more), then on the condition variable. Called and returns with the
 * lock held; false when the deadline passed. */
static bool wait_completion(schedrun_t *s, const struct timespec *deadline, bool forever) {
  uint64_t seen = atomic_load(&s->completions);
  pthread_mutex_unlock(&s->lock);
  uint64_t t0 = now_ns();
  while (atomic_load(&s->completions) == seen && now_ns() - t0 < s->spin_ns) sched_yield();
  pthread_mutex_lock(&s->lock);
  if (atomic_load(&s->completions) != seen) return true;
  if (forever) return pthread_cond_wait(&s->cond, &s->lock) == 0;
  return pthread_cond_timedwait(&s->cond, &s->lock, deadline) == 0;
}

static struct timespec deadline_in(int timeout_ms) {
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

/* Waits on cond under lock until *flag or the deadline; false on timeout. */
static bool wait_for(schedrun_t *s, const bool *flag, int timeout_ms) {
  struct timespec ts = deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
  while (!*flag) {
    if (timeout_ms < 0) pthread_cond_wait(&s->cond, &s->lock);
    else if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) != 0 && !*flag) return false;
  }
  return true;
}

/* Sends a control message `to` an actor and waits for the reply carrying its
 * id. The caller owns *reply afterwards. */
static int control(schedrun_t *s, const char *to, msg *req, msg *reply, int timeout_ms, schedrun_error_t *err) {
  pthread_mutex_lock(&s->ctl_lock);
  pthread_mutex_lock(&s->lock);
  uint64_t id = ++s->next_id;
  s->ctl_id = id;
  s->ctl_ready = false;
  pthread_mutex_unlock(&s->lock);
  req->job = id;
  int rc;
  if (!strcmp(to, ACTOR_SCHEDULER)) {
    pthread_mutex_lock(&s->send_lock);
    rc = mbox_send(s->outbox, req, err);
    pthread_mutex_unlock(&s->send_lock);
  } else {
    void *sock = mbox_connect(s->core.zctx, to, err);
    rc = sock ? mbox_send(sock, req, err) : SCHEDRUN_EINTERNAL;
    mbox_close(sock);
  }
  pthread_mutex_lock(&s->lock);
  if (rc == SCHEDRUN_OK && !wait_for(s, &s->ctl_ready, timeout_ms))
    rc = err_set(err, SCHEDRUN_ETIMEOUT, "the %s actor did not answer within %d ms", to, timeout_ms);
  if (rc == SCHEDRUN_OK) *reply = s->ctl_reply;
  s->ctl_id = 0;
  s->ctl_ready = false;
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_unlock(&s->ctl_lock);
  return rc;
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
  if (s->completer_running) {
    /* nothing answers any more: wake the completion thread with a TERM */
    void *sock = mbox_connect(s->core.zctx, ACTOR_CLIENT, NULL);
    msg t;
    msg_init(&t, MSG_TERM, 0, ACTOR_CLIENT);
    if (sock) mbox_send(sock, &t, NULL);
    msg_free(&t);
    mbox_close(sock);
    pthread_join(s->completer, NULL);
    s->completer_running = false;
  }
  scheduler_state_free(s->scheduler_st);
  compile_state_free(s->compile_st);
  record_state_free(s->record_st);
  for (int d = 0; d < s->core.ndevices; d++) execute_state_free(s->execute_st[d]);
  mbox_close(s->inbox);
  mbox_close(s->outbox);
  if (s->core.zctx) zmq_ctx_term(s->core.zctx);
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->jobs, &pos, NULL, &v)) {
    schedrun_job_result_free(&((pending_job *)v)->result);
    free(v);
  }
  hmap_destroy(&s->jobs);
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
  schedrun_t *s = calloc(1, sizeof *s);
  if (!s) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->send_lock, NULL);
  pthread_mutex_init(&s->ctl_lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  pthread_mutex_init(&s->core.reg_lock, NULL);
  hmap_init(&s->core.programs, sizeof(uint64_t));
  hmap_init(&s->jobs, sizeof(uint64_t));
  int rc = gpu_backend_open(o.devices, &s->core.backend, &s->fallback, err);
  if (rc) goto fail;
  s->core.ndevices = s->core.backend->ops->device_count(s->core.backend);
  if (o.no_disk_cache) {
    char tmpl[] = "/tmp/schedrun-cache-XXXXXX";
    if (!mkdtemp(tmpl)) {
      rc = err_set(err, SCHEDRUN_EIO, "cannot create a temporary cache directory");
      goto fail;
    }
    s->temp_cache = xstrdup(tmpl);
    s->core.cache_dir = xstrdup(tmpl);
  } else {
    s->core.cache_dir = o.cache_dir ? xstrdup(o.cache_dir) : default_cache_dir();
  }
  if (o.compile_workers < 0) {
    rc = err_set(err, SCHEDRUN_EINVAL, "compile_workers must be >= 0");
    goto fail;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  s->core.compile_workers = o.compile_workers ? o.compile_workers : (int)(cores > 0 ? cores : 1);
  s->core.record_always = o.record_always != 0;
  s->spin_ns = o.spin_us < 0 ? 0 : o.spin_us == 0 ? ACTOR_SPIN_NS : (uint64_t)o.spin_us * 1000u;
  if (!s->core.cache_dir) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    goto fail;
  }
  if ((rc = fs_mkdir_p(s->core.cache_dir, err))) goto fail;
  s->core.zctx = zmq_ctx_new();
  if (!s->core.zctx) {
    rc = err_set(err, SCHEDRUN_EINTERNAL, "zmq_ctx_new failed");
    goto fail;
  }
  /* every endpoint is inproc, which needs no I/O thread */
  zmq_ctx_set(s->core.zctx, ZMQ_IO_THREADS, 0);
  s->inbox = mbox_bind(s->core.zctx, ACTOR_CLIENT, err);
  if (!s->inbox) {
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
  if ((rc = actor_start_spin(s->core.zctx, &compile_actor_def, ACTOR_COMPILE, s->compile_st, s->spin_ns, &s->compile, err)))
    goto fail;
  if ((rc = actor_start_spin(s->core.zctx, &record_actor_def, ACTOR_RECORD, s->record_st, s->spin_ns, &s->record, err)))
    goto fail;
  for (int d = 0; d < s->core.ndevices; d++) {
    char name[32];
    snprintf(name, sizeof name, ACTOR_EXECUTE_FMT, d);
    s->execute_st[d] = execute_state_new(&s->core, d);
    if (!s->execute_st[d]) {
      rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
      goto fail;
    }
    if ((rc = actor_start_spin(s->core.zctx, &execute_actor_def, name, s->execute_st[d], s->spin_ns, &s->execute[d], err)))
      goto fail;
  }
  if ((rc = actor_start_spin(s->core.zctx, &scheduler_actor_def, ACTOR_SCHEDULER, s->scheduler_st, s->spin_ns, &s->scheduler, err)))
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
  teardown(s);
  return rc ? rc : SCHEDRUN_EINTERNAL;
}

int schedrun_shutdown(schedrun_t *s, int timeout_ms, schedrun_error_t *err) {
  if (!s) return err_set(err, SCHEDRUN_EINVAL, "schedrun_shutdown: the scheduler is NULL");
  pthread_mutex_lock(&s->lock);
  bool already = s->closing;
  s->closing = true;
  pthread_mutex_unlock(&s->lock);
  if (already) {
    pthread_mutex_lock(&s->lock);
    bool done = s->closed;
    pthread_mutex_unlock(&s->lock);
    return done ? SCHEDRUN_OK : err_set(err, SCHEDRUN_ECLOSED, "the scheduler is already shutting down");
  }
  /* the scheduler fails jobs not started, lets started ones finish, and then
   * answers TERM, after every COMPLETE (they share one pipe, in order) */
  msg t, reply;
  msg_init(&t, MSG_TERM, 0, ACTOR_CLIENT);
  int rc = control(s, ACTOR_SCHEDULER, &t, &reply, timeout_ms < 0 ? CLOSE_TIMEOUT_MS : timeout_ms, err);
  msg_free(&t);
  if (rc) return rc;
  msg_free(&reply);
  actor_join(&s->scheduler);
  pthread_join(s->completer, NULL); /* it stopped at the TERM */
  s->completer_running = false;
  pthread_mutex_lock(&s->lock);
  s->closed = true;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return SCHEDRUN_OK;
}

void schedrun_close(schedrun_t **ps) {
  if (!ps || !*ps) return;
  schedrun_t *s = *ps;
  schedrun_shutdown(s, CLOSE_TIMEOUT_MS, NULL);
  teardown(s);
  *ps = NULL;
}

/* ---- jobs ---- */

void schedrun_job_options_init(schedrun_job_options_t *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->device = -1;
}

static int attach(schedrun_t *s, schedrun_program_t *h, schedrun_error_t *err);

static int submit(schedrun_t *s, schedrun_program_t *h, const schedrun_job_options_t *o, bool hidden, schedrun_job_t *out,
                  schedrun_error_t *err) {
  const prog_program *p = h->p;
  if (o->run < 0 || o->job < 0) return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit: run and job must be >= 0");
  if (o->device < -1 || o->device >= s->core.ndevices)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit: no device %d (there are %d)", o->device, s->core.ndevices);
  if (o->ninputs && !o->inputs) return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit: inputs is NULL");
  msg m;
  msg_init(&m, MSG_SUBMIT, 0, ACTOR_CLIENT);
  m.body.submit = (msg_submit){0, (uint32_t)o->run, (uint32_t)o->job, (uint32_t)(o->run % p->buffer_sets),
                               o->device, o->keep_outputs ? 1u : 0u, {NULL, 0}};
  if (o->ninputs) {
    m.body.submit.inputs.v = calloc(o->ninputs, sizeof(msg_output));
    if (!m.body.submit.inputs.v) {
      msg_free(&m);
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    }
  }
  for (size_t i = 0; i < o->ninputs; i++) {
    const schedrun_input_t *in = &o->inputs[i];
    int b = in->buffer ? prog_find_buffer(p, in->buffer) : -1;
    if (b < 0) {
      msg_free(&m);
      return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit: input %zu names no buffer of '%s' (%s)", i, p->name,
                     in->buffer ? in->buffer : "NULL");
    }
    uint64_t want = p->buffers[b].count * prog_type_size(p->buffers[b].type);
    if (in->bytes != want || !in->data) {
      msg_free(&m);
      return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit: input for buffer '%s' has %zu bytes; it holds %llu",
                     in->buffer, in->bytes, (unsigned long long)want);
    }
    msg_output *mo = &m.body.submit.inputs.v[m.body.submit.inputs.n++];
    mo->buffer = (uint32_t)b;
    mo->data.data = malloc(in->bytes ? in->bytes : 1);
    if (!mo->data.data) {
      msg_free(&m);
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    }
    memcpy(mo->data.data, in->data, in->bytes);
    mo->data.len = in->bytes;
  }
  pending_job *pj = calloc(1, sizeof *pj);
  if (!pj) {
    msg_free(&m);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  pthread_mutex_lock(&s->lock);
  int rc = s->closing ? err_set(err, SCHEDRUN_ECLOSED, "schedrun_submit: the scheduler is shut down") : SCHEDRUN_OK;
  if (rc == SCHEDRUN_OK) rc = attach(s, h, err);
  if (rc == SCHEDRUN_OK) {
    pj->id = ++s->next_id;
    pj->prog = p;
    pj->keep = o->keep_outputs != 0;
    pj->hidden = hidden;
    pj->cb = o->on_complete;
    pj->user = o->user;
    if (hmap_put(&s->jobs, &pj->id, pj) != 0) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    else s->incomplete++;
  }
  pthread_mutex_unlock(&s->lock);
  if (rc) {
    free(pj);
    msg_free(&m);
    return rc;
  }
  schedrun_job_t id = pj->id; /* pj may complete (and go) as soon as it is sent */
  m.job = id;
  m.body.submit.program = h->id;
  pthread_mutex_lock(&s->send_lock);
  rc = mbox_send(s->outbox, &m, err);
  pthread_mutex_unlock(&s->send_lock);
  msg_free(&m);
  if (rc) {
    pthread_mutex_lock(&s->lock);
    hmap_remove(&s->jobs, &id);
    s->incomplete--;
    pthread_mutex_unlock(&s->lock);
    free(pj);
    return rc;
  }
  *out = id;
  return SCHEDRUN_OK;
}

int schedrun_submit(schedrun_t *s, schedrun_program_t *p, const schedrun_job_options_t *o, schedrun_job_t *out,
                 schedrun_error_t *err) {
  if (out) *out = 0;
  if (!s || !p || !out)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_submit: %s is NULL", !s ? "the scheduler" : !p ? "the program" : "out");
  schedrun_job_options_t d;
  schedrun_job_options_init(&d);
  return submit(s, p, o ? o : &d, false, out, err);
}

/* Takes pj's result out (under lock): the job is forgotten. */
static schedrun_job_result_t *take(schedrun_t *s, pending_job *pj) {
  schedrun_job_result_t *r = pj->result;
  hmap_remove(&s->jobs, &pj->id);
  /* unlink from the done list */
  pending_job **pp = &s->done_head, *prev = NULL;
  while (*pp && *pp != pj) {
    prev = *pp;
    pp = &(*pp)->next_done;
  }
  if (*pp) {
    *pp = pj->next_done;
    if (s->done_tail == pj) s->done_tail = prev;
  }
  free(pj);
  return r;
}

int schedrun_wait(schedrun_t *s, schedrun_job_t job, int timeout_ms, schedrun_job_result_t **out, schedrun_error_t *err) {
  if (out) *out = NULL;
  if (!s || !out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_wait: %s is NULL", !s ? "the scheduler" : "out");
  pthread_mutex_lock(&s->lock);
  pending_job *pj = hmap_get(&s->jobs, &job);
  int rc = SCHEDRUN_OK;
  if (!pj) {
    rc = job == 0 || job > s->next_id
             ? err_set(err, SCHEDRUN_EINVAL, "schedrun_wait: no job %llu", (unsigned long long)job)
             : err_set(err, SCHEDRUN_EINVAL, "schedrun_wait: job %llu was already waited for", (unsigned long long)job);
  } else if (pj->cb) {
    rc = err_set(err, SCHEDRUN_EINVAL, "schedrun_wait: job %llu reports to its callback", (unsigned long long)job);
  } else {
    struct timespec ts = deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
    while (!pj->result && rc == SCHEDRUN_OK) {
      if (timeout_ms == 0 || (!wait_completion(s, &ts, timeout_ms < 0) && !pj->result))
        rc = err_set(err, SCHEDRUN_ETIMEOUT, "schedrun_wait: job %llu not done within %d ms", (unsigned long long)job,
                     timeout_ms);
    }
    if (rc == SCHEDRUN_OK) *out = take(s, pj);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int schedrun_wait_any(schedrun_t *s, int timeout_ms, schedrun_job_t *job, schedrun_job_result_t **out, schedrun_error_t *err) {
  if (out) *out = NULL;
  if (job) *job = 0;
  if (!s || !out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_any: %s is NULL", !s ? "the scheduler" : "out");
  pthread_mutex_lock(&s->lock);
  struct timespec ts = deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
  int rc = SCHEDRUN_OK;
  while (!s->done_head && rc == SCHEDRUN_OK) {
    bool any_waitable = false;
    size_t pos = 0;
    void *v;
    while (!any_waitable && hmap_next(&s->jobs, &pos, NULL, &v))
      any_waitable = !((pending_job *)v)->cb && !((pending_job *)v)->hidden;
    if (!any_waitable) rc = err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_any: no job to wait for");
    else if (timeout_ms == 0 || (!wait_completion(s, &ts, timeout_ms < 0) && !s->done_head))
      rc = err_set(err, SCHEDRUN_ETIMEOUT, "schedrun_wait_any: nothing completed within %d ms", timeout_ms);
  }
  if (rc == SCHEDRUN_OK) {
    pending_job *pj = s->done_head;
    if (job) *job = pj->id;
    *out = take(s, pj);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int schedrun_wait_all(schedrun_t *s, int timeout_ms, schedrun_error_t *err) {
  if (!s) return err_set(err, SCHEDRUN_EINVAL, "schedrun_wait_all: the scheduler is NULL");
  pthread_mutex_lock(&s->lock);
  struct timespec ts = deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
  int rc = SCHEDRUN_OK;
  while (s->incomplete && rc == SCHEDRUN_OK) {
    if (timeout_ms < 0) pthread_cond_wait(&s->cond, &s->lock);
    else if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) != 0 && s->incomplete)
      rc = err_set(err, SCHEDRUN_ETIMEOUT, "schedrun_wait_all: %zu jobs still running after %d ms", s->incomplete,
                   timeout_ms);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* Asks one actor for STATUS (with `query` items) and waits for its answer. */
static int ask_status(schedrun_t *s, const char *actor, const msg_stat *query, size_t nquery, msg *reply,
                      schedrun_error_t *err) {
  msg q;
  msg_init(&q, MSG_STATUS, 0, ACTOR_CLIENT);
  if (nquery) {
    q.body.status.items.v = calloc(nquery, sizeof(msg_stat));
    for (size_t i = 0; q.body.status.items.v && i < nquery; i++) {
      q.body.status.items.v[i] = (msg_stat){xstrdup(query[i].name), query[i].value};
      q.body.status.items.n++;
    }
  }
  int rc = control(s, actor, &q, reply, 10000, err);
  msg_free(&q);
  if (rc == SCHEDRUN_OK && reply->type != MSG_STATUS) {
    msg_free(reply);
    rc = err_set(err, SCHEDRUN_EINTERNAL, "the %s actor answered STATUS with something else", actor);
  }
  return rc;
}

static int64_t stat_value(const msg *m, const char *name) {
  for (size_t i = 0; i < m->body.status.items.n; i++)
    if (!strcmp(m->body.status.items.v[i].name, name)) return m->body.status.items.v[i].value;
  return 0;
}

int schedrun_compile_status(schedrun_t *s, int *active_sessions, int *cache_entries, schedrun_error_t *err) {
  if (!s) return err_set(err, SCHEDRUN_EINVAL, "schedrun_compile_status: the scheduler is NULL");
  msg m;
  int rc = ask_status(s, ACTOR_COMPILE, NULL, 0, &m, err);
  if (rc == SCHEDRUN_OK) {
    if (active_sessions) *active_sessions = (int)stat_value(&m, "compile_mode_active");
    if (cache_entries) *cache_entries = (int)stat_value(&m, "cache_entries");
    msg_free(&m);
  }
  return rc;
}

int schedrun_record_counters(schedrun_t *s, const schedrun_program_t *p, int device, int slot, schedrun_counters_t *out,
                          schedrun_error_t *err) {
  if (!s || !p || !out)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_record_counters: %s is NULL", !s ? "the scheduler" : !p ? "the program" : "out");
  memset(out, 0, sizeof *out);
  if (device < 0 || device >= s->core.ndevices || slot < 0)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_record_counters: no device %d or slot %d", device, slot);
  if (p->s != s) return SCHEDRUN_OK; /* never run here: nothing recorded */
  msg_stat q[] = {{"program", (int64_t)p->id}, {"device", device}, {"slot", slot}};
  msg m;
  int rc = ask_status(s, ACTOR_RECORD, q, 3, &m, err);
  if (rc == SCHEDRUN_OK) {
    out->nodes = (uint64_t)stat_value(&m, "nodes");
    out->created = (uint64_t)stat_value(&m, "created");
    out->updated = (uint64_t)stat_value(&m, "updated");
    out->reused = (uint64_t)stat_value(&m, "reused");
    msg_free(&m);
    /* reuses the scheduler decided on its own, without a RECORD */
    if (!s->closed && (rc = ask_status(s, ACTOR_SCHEDULER, q, 3, &m, err)) == SCHEDRUN_OK) {
      out->reused += (uint64_t)stat_value(&m, "reused_without_record");
      msg_free(&m);
    }
  }
  return rc;
}

/* ---- programs ---- */

static int wrap_program(schedrun_t *s, prog_program *p, schedrun_program_t **out, schedrun_error_t *err) {
  schedrun_program_t *h = calloc(1, sizeof *h);
  if (!h) {
    prog_free(p);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  h->p = p;
  *out = h;
  (void)s;
  return SCHEDRUN_OK;
}

int schedrun_program_load_file(schedrun_t *s, const char *path, schedrun_program_t **out, schedrun_error_t *err) {
  if (!out || !path) return err_set(err, SCHEDRUN_EINVAL, "schedrun_program_load_file: %s is NULL", out ? "path" : "out");
  *out = NULL;
  prog_program *p;
  int rc = prog_load_file(path, &p, err);
  return rc ? rc : wrap_program(s, p, out, err);
}

int schedrun_program_load_string(schedrun_t *s, const char *yaml, const char *origin,
                              schedrun_program_t **out, schedrun_error_t *err) {
  if (!out || !yaml) return err_set(err, SCHEDRUN_EINVAL, "schedrun_program_load_string: %s is NULL", out ? "yaml" : "out");
  *out = NULL;
  prog_program *p;
  int rc = prog_load_string(yaml, strlen(yaml), origin ? origin : "<string>", &p, err);
  return rc ? rc : wrap_program(s, p, out, err);
}

static int attach(schedrun_t *s, schedrun_program_t *h, schedrun_error_t *err) {
  if (h->s == s) return SCHEDRUN_OK;
  if (h->s) return err_set(err, SCHEDRUN_EINVAL, "program '%s' belongs to another scheduler", h->p->name);
  pthread_mutex_lock(&s->core.reg_lock);
  h->id = ++s->next_program;
  int rc = hmap_put(&s->core.programs, &h->id, h->p);
  pthread_mutex_unlock(&s->core.reg_lock);
  if (rc) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  h->s = s;
  h->next = s->programs;
  s->programs = h;
  return SCHEDRUN_OK;
}

void schedrun_program_free(schedrun_program_t **ph) {
  if (!ph || !*ph) return;
  schedrun_program_t *h = *ph;
  schedrun_t *s = h->s;
  *ph = NULL;
  if (!s) {
    prog_free(h->p);
    free(h);
    return;
  }
  pthread_mutex_lock(&s->lock);
  for (schedrun_program_t **pp = &s->programs; *pp; pp = &(*pp)->next)
    if (*pp == h) {
      *pp = h->next;
      break;
    }
  bool closed = s->closed;
  pthread_mutex_unlock(&s->lock);
  /* ask the actors to drop what they hold for it once its jobs are done; the
   * completion thread frees it when they answer (or the scheduler's close) */
  if (!closed) {
    msg r;
    msg_init(&r, MSG_RELEASE, 0, ACTOR_CLIENT);
    r.body.release.program = h->id;
    pthread_mutex_lock(&s->send_lock);
    mbox_send(s->outbox, &r, NULL);
    pthread_mutex_unlock(&s->send_lock);
    msg_free(&r);
  }
  free(h);
}

const char *schedrun_program_name(const schedrun_program_t *p) { return p ? p->p->name : NULL; }
int schedrun_program_repeat(const schedrun_program_t *p) { return p ? p->p->repeat : 0; }
int schedrun_program_buffer_sets(const schedrun_program_t *p) { return p ? p->p->buffer_sets : 0; }
int schedrun_program_jobs(const schedrun_program_t *p) { return p ? p->p->jobs : 0; }
const char *schedrun_program_devices(const schedrun_program_t *p) { return p ? p->p->devices : NULL; }

/* ---- runs ---- */

int schedrun_run(schedrun_t *s, schedrun_program_t *h, const schedrun_run_options_t *opts, schedrun_report_t **out,
              schedrun_error_t *err) {
  if (out) *out = NULL;
  if (!s || !h || !out)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_run: %s is NULL", !s ? "the scheduler" : !h ? "the program" : "out");
  schedrun_run_options_t o;
  schedrun_run_options_init(&o);
  if (opts) o = *opts;
  if (o.repeat < 0 || o.jobs < 0 || o.timeout_ms < 0)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_run: repeat, jobs and timeout_ms must be >= 0");
  const prog_program *p = h->p;
  int repeat = o.repeat ? o.repeat : p->repeat, jobs = o.jobs ? o.jobs : p->jobs;
  if ((uint64_t)repeat * (uint64_t)jobs > 10000000ull)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_run: %d runs of %d jobs is too many", repeat, jobs);
  int timeout = o.timeout_ms ? o.timeout_ms : DEFAULT_RUN_TIMEOUT_MS;
  schedrun_report_t *rep = report_new(s, p, repeat, jobs, o.keep_outputs != 0);
  size_t total = (size_t)repeat * (size_t)jobs;
  schedrun_job_t *ids = calloc(total ? total : 1, sizeof *ids);
  if (!rep || !ids) {
    schedrun_report_free(&rep);
    free(ids);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)timeout * 1000000ull;
  int rc = SCHEDRUN_OK;
  size_t submitted = 0;
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.keep_outputs = o.keep_outputs;
  for (int r = 0; r < repeat && rc == SCHEDRUN_OK; r++)
    for (int j = 0; j < jobs && rc == SCHEDRUN_OK; j++) {
      jo.run = r;
      jo.job = j;
      rc = submit(s, h, &jo, true, &ids[submitted], err);
      if (rc == SCHEDRUN_OK) submitted++;
    }
  /* collect in submission order; every submitted job is waited for */
  uint64_t last_progress = 0;
  size_t done = 0;
  for (size_t i = 0; i < submitted; i++) {
    schedrun_job_result_t *res = NULL;
    for (;;) {
      uint64_t now = now_ns();
      if (o.progress && now - last_progress > 100000000ull) {
        o.progress((uint32_t)done, (uint32_t)total, o.progress_user);
        last_progress = now;
      }
      int left = now >= deadline ? 0 : (int)((deadline - now) / 1000000ull);
      int slice = o.progress && left > 100 ? 100 : left;
      int wrc = schedrun_wait(s, ids[i], slice, &res, NULL);
      if (wrc == SCHEDRUN_OK) break;
      if (wrc != SCHEDRUN_ETIMEOUT || now_ns() >= deadline) {
        if (rc == SCHEDRUN_OK)
          rc = err_set(err, SCHEDRUN_ETIMEOUT, "run of '%s': %zu of %zu jobs done after %d ms", p->name, done, total,
                       timeout);
        break;
      }
    }
    if (!res) break;
    report_add(rep, (size_t)(res->info.run * jobs + res->info.job), res);
    done++;
  }
  if (o.progress) o.progress((uint32_t)done, (uint32_t)total, o.progress_user);
  free(ids);
  if (submitted == 0 && rc) {
    /* nothing ran (a wrong argument, a closed scheduler): no report */
    schedrun_report_free(&rep);
    return rc;
  }
  report_finish(rep, now_ns() - t0);
  *out = rep;
  if (rc) return rc;
  return report_status(rep, err);
}
