/*
 * Jobs that run after jobs, as they run: what a completion releases, the
 * failures it decides, the buffers it hands on, and host tasks. See
 * lib/deps.h; the graph itself is made in lib/api_graph.c.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/host_task.h"
#include "lib/deps.h"

dep_node *deps_node_new(void) { return calloc(1, sizeof(dep_node)); }

void deps_node_free(schedrun_t *s, dep_node *d, bool free_parcels) {
  if (!d) return;
  for (size_t i = 0; i < d->nins; i++) {
    if (free_parcels && d->ins[i].filled && d->ins[i].device >= 0)
      core_free_parcel(&s->core, (uint64_t)d->ins[i].device, d->ins[i].addr);
    free(d->ins[i].name);
    free(d->ins[i].data);
  }
  for (size_t i = 0; i < d->nouts; i++) free(d->outs[i].from);
  free(d->ins);
  free(d->outs);
  if (d->is_job) {
    /* a SUBMIT never sent may still list parcels handed to it */
    if (free_parcels) core_free_parcels(&s->core, &d->submit.body.submit.takes);
    msg_free(&d->submit);
  }
  if (free_parcels) deps_drop_result(s, d->early);
  else schedrun_job_result_free(&d->early);
  free(d->fail_why);
  free(d->root);
  free(d->name);
  free(d);
}

int deps_add_out(pending_job *pj, pending_job *to, int in, int park, const char *from) {
  if (!pj->dep && !(pj->dep = deps_node_new())) return -1;
  dep_node *d = pj->dep;
  if (d->nouts == d->outs_cap) {
    size_t cap = d->outs_cap ? 2 * d->outs_cap : 4;
    dep_out *v = realloc(d->outs, cap * sizeof *v);
    if (!v) return -1;
    d->outs = v;
    d->outs_cap = cap;
  }
  char *f = from ? xstrdup(from) : NULL;
  if (from && !f) return -1;
  d->outs[d->nouts++] = (dep_out){to, in, park, f};
  return 0;
}

void deps_drop_result(schedrun_t *s, schedrun_job_result_t *r) {
  if (!r) return;
  for (size_t i = 0; i < r->parcels.n; i++) core_free_parcel(&s->core, (uint64_t)r->info.device, r->parcels.v[i]);
  r->parcels.n = 0;
  schedrun_job_result_free(&r);
}

bool deps_succeeded(const schedrun_job_result_t *r) { return r && r->info.status == SCHEDRUN_OK; }

schedrun_job_result_t *deps_result(pending_job *pj, int status, const char *text) {
  schedrun_job_result_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->id = pj->id;
  r->info.status = status;
  r->info.device = -1;
  r->info.run = (int)pj->run;
  r->info.job = (int)pj->job_index;
  r->error = xstrdup(text ? text : "");
  return r;
}

/* The program's name, or the host task's (d: pj's node, which deps_completed
 * has already taken off pj). */
static const char *label(const pending_job *pj, const dep_node *d) {
  if (d && d->name) return d->name;
  return pj->prog ? pj->prog->name : "?";
}

static void *grow(void *v, size_t *cap, size_t n, size_t size) {
  if (n < *cap) return v;
  size_t c = *cap ? 2 * *cap : 16;
  void *nv = realloc(v, c * size);
  if (nv) *cap = c;
  return nv;
}

static void push_ready(deps_work *w, pending_job *pj) {
  pending_job **v = grow(w->ready, &w->ready_cap, w->nready, sizeof *v);
  if (!v) return; /* without memory the job waits forever: nothing better can be done */
  w->ready = v;
  w->ready[w->nready++] = pj;
}

/* Y cannot run: the first reason is kept. `root` says which job failed first. */
static void fail_node(dep_node *yd, int status, char *why, const char *root) {
  if (yd->fail_status != SCHEDRUN_OK) {
    free(why);
    return;
  }
  yd->fail_status = status;
  yd->fail_why = why;
  yd->root = xstrdup(root);
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
  strbuf sb;
  sb_init(&sb);
  va_list ap;
  va_start(ap, f);
  sb_vaddf(&sb, f, ap);
  va_end(ap);
  return sb_take(&sb);
}

void deps_after(schedrun_t *s, pending_job *pj, const schedrun_job_t *after, size_t nafter) {
  dep_node *d = pj->dep;
  assert(d);
  for (size_t i = 0; i < nafter; i++) {
    pending_job *x = idmap_get(&s->jobs, after[i]);
    assert(x); /* api_after_check */
    if (!x->result) {
      if (deps_add_out(x, pj, -1, -1, NULL) == 0) {
        d->waiting++;
      } else {
        char *why = xstrdup("out of memory for the jobs it runs after");
        fail_node(d, SCHEDRUN_EDEPEND, why, why);
      }
    } else if (!deps_succeeded(x->result)) {
      const char *e = schedrun_job_result_error(x->result);
      char *why = fmt("runs after job %llu ('%s'), which %s: %s", (unsigned long long)x->id,
                      x->prog ? x->prog->name : "?",
                      x->result->info.status == SCHEDRUN_EDEPEND ? "did not run" : "failed",
                      *e ? e : schedrun_strerror(x->result->info.status));
      fail_node(d, SCHEDRUN_EDEPEND, why, why);
    }
  }
}

/* A host task's buffer of that name in its result, or NULL. */
static const msg_output *result_buffer(const schedrun_job_result_t *r, const char *name) {
  for (size_t i = 0; i < r->outputs.n; i++)
    if (r->names[i] && !strcmp(r->names[i], name)) return &r->outputs.v[i];
  return NULL;
}

void deps_completed(schedrun_t *s, pending_job *pj, schedrun_job_result_t *r, deps_work *w) {
  dep_node *d = pj->dep;
  if (!d) return;
  pj->dep = NULL;
  bool ok = deps_succeeded(r);
  /* the first job that failed on this path, named once for all after it */
  char *root = ok ? NULL
               : !r ? xstrdup("out of memory")
               : r->info.status == SCHEDRUN_EDEPEND && d->root
                   ? xstrdup(d->root)
                   : fmt("job %llu ('%s') failed: %s", (unsigned long long)pj->id, label(pj, d),
                         r->error && *r->error ? r->error : schedrun_strerror(r->info.status));
  bool *taken = r && r->parcels.n ? calloc(r->parcels.n, sizeof *taken) : NULL;
  for (size_t k = 0; k < d->nouts; k++) {
    dep_out *e = &d->outs[k];
    dep_node *yd = e->to->dep;
    assert(yd && (yd->held || yd->ahead) && yd->waiting > 0);
    if (!ok) {
      bool first = r && r->info.status != SCHEDRUN_EDEPEND;
      fail_node(yd, SCHEDRUN_EDEPEND,
                first ? fmt("runs after job %llu ('%s'), which failed: %s", (unsigned long long)pj->id, label(pj, d),
                            r->error && *r->error ? r->error : schedrun_strerror(r->info.status))
                      : fmt("runs after job %llu ('%s'), which did not run: %s", (unsigned long long)pj->id,
                            label(pj, d), root),
                root);
    } else if (e->in >= 0 && yd->fail_status == SCHEDRUN_OK && !yd->ahead) {
      dep_in *in = &yd->ins[e->in];
      if (e->park >= 0) {
        if ((size_t)e->park < r->parcels.n && taken) {
          in->device = r->info.device;
          in->addr = r->parcels.v[e->park];
          in->filled = true;
          taken[e->park] = true;
        } else {
          char *why = fmt("job %llu ('%s') left no buffer to hand on as '%s' (a record_only job runs nothing)",
                          (unsigned long long)pj->id, label(pj, d), in->name);
          fail_node(yd, SCHEDRUN_EDEPEND, why, why);
        }
      } else {
        const msg_output *o = e->from ? result_buffer(r, e->from) : NULL;
        uint8_t *data = o ? malloc(o->data.len ? o->data.len : 1) : NULL;
        if (!o || !data) {
          free(data);
          char *why = fmt("host task %llu ('%s') ended without buffer '%s' to hand on", (unsigned long long)pj->id,
                          label(pj, d), e->from ? e->from : "?");
          fail_node(yd, SCHEDRUN_EDEPEND, why, why);
        } else {
          memcpy(data, o->data.data, o->data.len);
          in->device = -1;
          free(in->data);
          in->data = data;
          in->bytes = o->data.len;
          in->filled = true;
        }
      }
    }
    /* a job sent ahead needs nothing from here unless it cannot run, or
     * its COMPLETE came before this one */
    if (--yd->waiting == 0 && (!yd->ahead || yd->fail_status != SCHEDRUN_OK || yd->early)) push_ready(w, e->to);
  }
  /* parcels nobody takes (the job after it cannot run) */
  for (size_t i = 0; r && i < r->parcels.n; i++) /* 0, kept on the device for a job sent with it, frees nothing */
    if (!taken || !taken[i]) core_free_parcel(&s->core, (uint64_t)r->info.device, r->parcels.v[i]);
  if (r) r->parcels.n = 0;
  free(taken);
  free(root);
  deps_node_free(s, d, true);
}

static void push_done(deps_work *w, pending_job *pj, schedrun_job_result_t *r) {
  pending_job **v = grow(w->done, &w->done_cap, w->ndone, sizeof *v);
  if (v) w->done = v;
  schedrun_job_result_t **rv = v ? realloc(w->results, w->done_cap * sizeof *rv) : NULL;
  if (!v || !rv) {
    schedrun_job_result_free(&r);
    return;
  }
  w->results = rv;
  w->done[w->ndone] = pj;
  w->results[w->ndone++] = r;
}

/* The device a released job runs on when not pinned: the one that holds
 * most of the bytes handed to it (it then copies the least). */
static int data_device(schedrun_t *s, const dep_node *d) {
  gpu_backend *be = s->core.backend;
  int best = -1;
  uint64_t most = 0;
  for (size_t i = 0; i < d->nins; i++) {
    int dev = d->ins[i].device;
    if (!d->ins[i].filled || dev < 0 || be->ops->device_lost(be, dev)) continue;
    uint64_t bytes = 0;
    for (size_t j = 0; j < d->nins; j++)
      if (d->ins[j].filled && d->ins[j].device == dev) bytes += d->ins[j].bytes;
    if (best < 0 || bytes > most) {
      best = dev;
      most = bytes;
    }
  }
  return best;
}

/* Moves what was handed to a job into its SUBMIT: parcels as takes, host
 * bytes as inputs. NULL, or why it cannot run. */
char *deps_release_job(schedrun_t *s, pending_job *pj) {
  dep_node *d = pj->dep;
  msg_submit *sb = &d->submit.body.submit;
  const prog_program *p = pj->prog;
  size_t nt = 0, ni = 0;
  for (size_t i = 0; i < d->nins; i++) {
    if (d->ins[i].kept) nt++;
    else if (!d->ins[i].filled) return fmt("buffer '%s' was never handed to it", d->ins[i].name);
    else if (d->ins[i].device >= 0) nt++;
    else ni++;
  }
  for (size_t i = 0; i < d->nins; i++) {
    const prog_buffer *b = &p->buffers[d->ins[i].buffer];
    uint64_t want = b->count * prog_type_size(b->type);
    if (d->ins[i].kept) continue;
    if (d->ins[i].device < 0 && d->ins[i].bytes != want)
      return fmt("buffer '%s' handed to it has %zu bytes; '%s' holds %llu", d->ins[i].name, d->ins[i].bytes, p->name,
                 (unsigned long long)want);
    d->ins[i].bytes = want; /* a parcel holds the buffer: for data_device */
  }
  uint64_t *takes = nt ? malloc(3 * nt * sizeof *takes) : NULL;
  msg_output *inputs = ni ? realloc(sb->inputs.v, (sb->inputs.n + ni) * sizeof *inputs) : NULL;
  if ((nt && !takes) || (ni && !inputs)) {
    free(takes);
    return fmt("out of memory");
  }
  if (ni) sb->inputs.v = inputs;
  if (sb->device < 0) sb->device = data_device(s, d);
  for (size_t i = 0; i < d->nins; i++) {
    dep_in *in = &d->ins[i];
    if (in->kept) {
      takes[sb->takes.n++] = in->buffer | (uint64_t)in->kept_park << 32;
      takes[sb->takes.n++] = MSG_TAKE_LOCAL;
      takes[sb->takes.n++] = in->kept_job;
    } else if (in->device >= 0) {
      takes[sb->takes.n++] = in->buffer;
      takes[sb->takes.n++] = (uint64_t)in->device;
      takes[sb->takes.n++] = in->addr;
    } else {
      sb->inputs.v[sb->inputs.n++] = (msg_output){in->buffer, {in->data, in->bytes}};
      in->data = NULL;
      pj->host_handoffs++;
    }
    in->filled = false; /* the SUBMIT owns it now */
  }
  if (nt) sb->takes.v = takes;
  return NULL;
}

void deps_settle(schedrun_t *s, deps_work *w) {
  for (size_t i = 0; i < w->nready; i++) {
    pending_job *pj = w->ready[i];
    dep_node *d = pj->dep;
    assert(d && (d->held || d->ahead) && d->waiting == 0);
    if (d->ahead && d->fail_status == SCHEDRUN_OK) {
      /* sent, and its COMPLETE came first: it stands now */
      assert(d->early);
      schedrun_job_result_t *r = d->early;
      d->early = NULL;
      push_done(w, pj, r);
      deps_completed(s, pj, r, w);
      continue;
    }
    d->held = false;
    char *why = NULL;
    int status = d->fail_status;
    if (status == SCHEDRUN_OK && s->closing) {
      status = SCHEDRUN_ECLOSED;
      why = fmt("the scheduler shut down before the jobs this one runs after completed");
    } else if (status == SCHEDRUN_OK && d->is_job && (why = deps_release_job(s, pj))) {
      status = SCHEDRUN_EINVAL;
    }
    if (status != SCHEDRUN_OK) {
      /* one sent ahead may still be answered: that answer finds it complete */
      schedrun_job_result_t *r = deps_result(pj, status, why ? why : d->fail_why);
      free(why);
      push_done(w, pj, r);
      deps_completed(s, pj, r, w); /* on through the nodes after it */
      continue;
    }
    if (d->is_job) {
      deps_group_send(s, pj, w);
      continue;
    }
    pending_job **hv = grow(s->host_ready, &s->host_ready_cap, s->nhost_ready, sizeof *hv);
    if (!hv) continue;
    s->host_ready = hv;
    s->host_ready[s->nhost_ready++] = pj;
    w->host_ready = true;
  }
  w->nready = 0;
}

void deps_send(schedrun_t *s, deps_work *w, bool on_completer) {
  /* One job released (a chain's next step): this thread places it itself,
   * as it would a lone submit, instead of waking the scheduler's thread for
   * it, and when no device has anything queued, runs it too, as
   * schedrun_submit_wait runs a lone job. Several: placed here too, all in
   * one round of the scheduler's handler after they are queued (so that
   * they leave for their devices together, in batches), and when no device
   * had work, one device's share of them runs here too. */
  submit_how how = SUBMIT_QUEUE;
  if (w->nsend == 1) {
    how = SUBMIT_RUN_HERE;
    for (int d = 0; d < s->core.ndevices && how == SUBMIT_RUN_HERE; d++)
      if (msgq_any(&s->core.to_execute[d])) how = SUBMIT_PLACE_HERE;
  }
  guest_round held = {NULL, false};
  if (w->nsend > 1) api_guest_hold(s, &held);
  for (size_t i = 0; i < w->nsend; i++) {
    msg *m = &w->send[i];
    schedrun_error_t err = {0};
    if (api_send_submit(s, m, how, &err) != SCHEDRUN_OK) {
      /* never sent: its jobs complete here, and their parcels go back */
      bool many = m->type == MSG_SUBMIT_MANY;
      core_free_parcels(&s->core, many ? &m->body.submit_many.takes : &m->body.submit.takes);
      size_t n = many ? m->body.submit_many.programs.n : 1;
      for (size_t k = 0; k < n; k++) {
        pthread_mutex_lock(&s->lock);
        pending_job *pj = idmap_get(&s->jobs, m->job + k);
        pthread_mutex_unlock(&s->lock);
        schedrun_job_result_t *r = pj ? deps_result(pj, err.code ? err.code : SCHEDRUN_ECLOSED, err.message) : NULL;
        if (pj) api_file_results(s, &pj, &r, 1, on_completer);
      }
    }
    schedrun_error_clear(&err);
    msg_free(m);
  }
  api_guest_unhold(s, &held);
  w->nsend = 0;
}

bool deps_program_held(schedrun_t *s, const prog_program *p) {
  size_t pos = 0;
  void *v;
  while (idmap_next(&s->jobs, &pos, NULL, &v)) {
    const pending_job *pj = v;
    if (pj->prog == p && pj->dep && pj->dep->held) return true;
  }
  return false;
}

void deps_late_releases(schedrun_t *s) {
  uint64_t ids[16];
  size_t n = 0;
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < s->nlate && n < 16;) {
    pthread_mutex_lock(&s->core.reg_lock);
    const prog_program *p = hmap_get(&s->core.programs, &s->late_release[i]);
    pthread_mutex_unlock(&s->core.reg_lock);
    if (p && deps_program_held(s, p)) {
      i++;
      continue;
    }
    ids[n++] = s->late_release[i];
    s->late_release[i] = s->late_release[--s->nlate];
  }
  bool more = s->nlate > 0 && n == 16;
  pthread_mutex_unlock(&s->lock);
  for (size_t i = 0; i < n; i++) api_send_release(s, ids[i]);
  if (more) deps_late_releases(s);
}

void deps_work_free(deps_work *w) {
  for (size_t i = 0; i < w->nsend; i++) msg_free(&w->send[i]);
  free(w->ready);
  free(w->send);
  free(w->done);
  free(w->results);
  memset(w, 0, sizeof *w);
}

/* ---- host tasks ---- */

/* The buffers handed to a host task, in host memory: parcels are read back
 * (one copy from their device) and freed. NULL, or why it cannot run. */
static char *task_inputs(schedrun_t *s, schedrun_host_task_t *t, dep_in *ins, size_t nins) {
  gpu_backend *be = s->core.backend;
  char *why = NULL;
  for (size_t i = 0; i < nins; i++) {
    dep_in *in = &ins[i];
    uint8_t *data = in->data;
    size_t bytes = in->bytes;
    in->data = NULL;
    if (in->device >= 0) {
      /* a parcel holds the producer's buffer, whose size the graph checked */
      schedrun_error_t err = {0};
      data = malloc(bytes ? bytes : 1);
      if (!data) why = why ? why : fmt("out of memory for buffer '%s'", in->name);
      else if (be->ops->copy_dtoh(be, in->device, data, in->addr, bytes, &err) != SCHEDRUN_OK && !why)
        why = fmt("reading buffer '%s' from %s: %s", in->name, be->ops->device_name(be, in->device),
                  err.message ? err.message : "failed");
      schedrun_error_clear(&err);
      core_free_parcel(&s->core, (uint64_t)in->device, in->addr);
    }
    in->filled = false;
    if (data && host_task_add(t, in->name, data, bytes) != 0) {
      free(data);
      if (!why) why = fmt("out of memory");
    }
  }
  return why;
}

static void run_host_task(schedrun_t *s, pending_job *pj) {
  pthread_mutex_lock(&s->lock);
  dep_node *d = pj->dep;
  dep_in *ins = d->ins;
  size_t nins = d->nins;
  d->ins = NULL; /* the task's now; its node keeps only the edges after it */
  d->nins = 0;
  schedrun_host_fn fn = d->fn;
  void *user = d->user;
  char *name = xstrdup(d->name);
  pthread_mutex_unlock(&s->lock);
  schedrun_host_task_t t = {pj->id, name ? name : "?", NULL, NULL, NULL, 0, 0, NULL, false};
  char *why = task_inputs(s, &t, ins, nins);
  for (size_t i = 0; i < nins; i++) free(ins[i].name);
  free(ins);
  int status = SCHEDRUN_OK;
  if (why) {
    status = SCHEDRUN_EINVAL;
  } else {
    const char *reason = NULL;
    status = host_task_call(&t, fn, user, &reason);
    if (status) why = fmt("host task '%s' failed: %s", t.name, reason);
  }
  schedrun_job_result_t *r = deps_result(pj, status, why);
  if (r && (r->outputs.v = calloc(t.n ? t.n : 1, sizeof(msg_output))) && (r->names = calloc(t.n ? t.n : 1, sizeof(char *)))) {
    for (size_t i = 0; i < t.n; i++) {
      r->outputs.v[i] = (msg_output){(uint32_t)i, {t.data[i], t.bytes[i]}};
      r->names[i] = t.names[i];
      t.data[i] = NULL;
      t.names[i] = NULL;
    }
    r->outputs.n = t.n;
    r->info.verified = status == SCHEDRUN_OK;
  }
  host_task_clear(&t);
  free(why);
  free(name);
  api_file_results(s, &pj, &r, 1, true);
}

void deps_run_host_tasks(schedrun_t *s) {
  pthread_mutex_lock(&s->lock);
  if (s->running_host) {
    pthread_mutex_unlock(&s->lock);
    return; /* an outer call is running them: it takes what comes */
  }
  s->running_host = true;
  while (s->nhost_ready) {
    pending_job *pj = s->host_ready[0];
    memmove(s->host_ready, s->host_ready + 1, --s->nhost_ready * sizeof *s->host_ready);
    pthread_mutex_unlock(&s->lock);
    run_host_task(s, pj);
    pthread_mutex_lock(&s->lock);
  }
  s->running_host = false;
  pthread_mutex_unlock(&s->lock);
}
