/*
 * Questions to the actors: compile status, record counters, and the library's
 * own counters. A query is a STATUS message sent from "client.ctl"; the asking
 * thread reads the answer from that mailbox itself (one query at a time), so
 * queries need no other thread and work from a completion callback too.
 */
#include <stdlib.h>
#include <string.h>

#include "lib/api.h"

int api_closed(schedrun_t *s, const char *fn, schedrun_error_t *err) {
  pthread_mutex_lock(&s->lock);
  bool c = s->closed; /* while a shutdown drains, the actors still answer */
  pthread_mutex_unlock(&s->lock);
  return c ? err_set(err, SCHEDRUN_ECLOSED, "%s: the scheduler is shut down", fn) : SCHEDRUN_OK;
}

/* Sends a STATUS (with `query` items) to one actor and reads its answer. */
int api_ask_status(schedrun_t *s, const char *actor, const msg_stat *query, size_t nquery, msg *reply,
                      schedrun_error_t *err) {
  msg q;
  msg_init(&q, MSG_STATUS, 0, ACTOR_CONTROL);
  if (nquery) {
    q.body.status.items.v = calloc(nquery, sizeof(msg_stat));
    if (!q.body.status.items.v) {
      msg_free(&q);
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < nquery; i++) {
      q.body.status.items.v[i] = (msg_stat){xstrdup(query[i].name), query[i].value};
      q.body.status.items.n++;
    }
  }
  pthread_mutex_lock(&s->ctl_lock);
  pthread_mutex_lock(&s->lock);
  q.job = ++s->next_id;
  pthread_mutex_unlock(&s->lock);
  void *sock = mbox_connect(s->core.zctx, actor, err);
  int rc = sock ? mbox_send(sock, &q, err) : SCHEDRUN_EINTERNAL;
  mbox_close(sock);
  uint64_t deadline = now_ns() + (uint64_t)QUERY_TIMEOUT_MS * 1000000ull;
  while (rc == SCHEDRUN_OK) {
    uint64_t now = now_ns();
    int left = now >= deadline ? 0 : (int)((deadline - now) / 1000000ull);
    uint64_t dropped = 0;
    rc = mbox_recv(s->ctl_inbox, left, reply, &dropped, NULL);
    if (dropped) atomic_fetch_add(&s->malformed, dropped);
    if (rc == SCHEDRUN_ETIMEOUT) {
      rc = err_set(err, SCHEDRUN_ETIMEOUT, "the %s actor did not answer within %d ms", actor, QUERY_TIMEOUT_MS);
    } else if (rc == SCHEDRUN_OK) {
      if (reply->job == q.job) break;
      msg_free(reply); /* the late answer to a query that timed out */
    }
  }
  pthread_mutex_unlock(&s->ctl_lock);
  msg_free(&q);
  if (rc == SCHEDRUN_OK && reply->type != MSG_STATUS) {
    msg_free(reply);
    rc = err_set(err, SCHEDRUN_EINTERNAL, "the %s actor answered STATUS with something else", actor);
  }
  return rc;
}

int64_t api_stat_value(const msg *m, const char *name) {
  for (size_t i = 0; i < m->body.status.items.n; i++)
    if (!strcmp(m->body.status.items.v[i].name, name)) return m->body.status.items.v[i].value;
  return 0;
}

int schedrun_compile_status(schedrun_t *s, int *active_sessions, int *cache_entries, schedrun_error_t *err) {
  if (!s) return err_set(err, SCHEDRUN_EINVAL, "schedrun_compile_status: the scheduler is NULL");
  int rc = api_closed(s, "schedrun_compile_status", err);
  msg m;
  if (rc == SCHEDRUN_OK) rc = api_ask_status(s, ACTOR_COMPILE, NULL, 0, &m, err);
  if (rc == SCHEDRUN_OK) {
    if (active_sessions) *active_sessions = (int)api_stat_value(&m, "compile_mode_active");
    if (cache_entries) *cache_entries = (int)api_stat_value(&m, "cache_entries");
    msg_free(&m);
  }
  return rc;
}

int schedrun_compile_progress(schedrun_t *s, int *kernels, int *done, schedrun_error_t *err) {
  if (!s) return err_set(err, SCHEDRUN_EINVAL, "schedrun_compile_progress: the scheduler is NULL");
  int rc = api_closed(s, "schedrun_compile_progress", err);
  msg m;
  if (rc == SCHEDRUN_OK) rc = api_ask_status(s, ACTOR_COMPILE, NULL, 0, &m, err);
  if (rc == SCHEDRUN_OK) {
    int64_t n = api_stat_value(&m, "session_kernels"), pending = api_stat_value(&m, "session_pending");
    if (kernels) *kernels = (int)n;
    if (done) *done = (int)(n - pending);
    msg_free(&m);
  }
  return rc;
}

int schedrun_record_counters(schedrun_t *s, const schedrun_program_t *p, int device, int slot,
                             schedrun_counters_t *out, schedrun_error_t *err) {
  if (!s || !p || !out)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_record_counters: %s is NULL",
                   !s ? "the scheduler" : !p ? "the program" : "out");
  memset(out, 0, sizeof *out);
  if (device < 0 || device >= s->core.ndevices || slot < 0)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_record_counters: no device %d or slot %d", device, slot);
  int rc = api_closed(s, "schedrun_record_counters", err);
  if (rc) return rc;
  if (p->s != s) return SCHEDRUN_OK; /* never run here: nothing recorded */
  msg_stat q[] = {{"program", (int64_t)p->id}, {"device", device}, {"slot", slot}};
  msg m;
  rc = api_ask_status(s, ACTOR_RECORD, q, 3, &m, err);
  if (rc == SCHEDRUN_OK) {
    out->nodes = (uint64_t)api_stat_value(&m, "nodes");
    out->created = (uint64_t)api_stat_value(&m, "created");
    out->updated = (uint64_t)api_stat_value(&m, "updated");
    out->reused = (uint64_t)api_stat_value(&m, "reused");
    msg_free(&m);
    /* reuses the scheduler decided on its own, without a RECORD */
    if ((rc = api_ask_status(s, ACTOR_SCHEDULER, q, 3, &m, err)) == SCHEDRUN_OK) {
      out->reused += (uint64_t)api_stat_value(&m, "reused_without_record");
      msg_free(&m);
    }
  }
  return rc;
}

int schedrun_get_stats(schedrun_t *s, schedrun_stats_t *out, schedrun_error_t *err) {
  if (!s || !out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_get_stats: %s is NULL", !s ? "the scheduler" : "out");
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&s->lock);
  out->submitted = s->submitted;
  out->completed = s->completed;
  out->in_flight = s->incomplete;
  out->held = s->jobs.count;
  out->messages_dropped = atomic_load(&s->malformed) + s->dropped_by_joined;
  /* the scheduler actor is joined, under the lock, by shutdown; the others
   * live until close */
  actor_t *actors[3 + SCHEDRUN_MAX_DEVICES] = {s->scheduler, s->compile, s->record};
  size_t n = 3;
  for (int d = 0; d < s->core.ndevices; d++) actors[n++] = s->execute[d];
  for (size_t i = 0; i < n; i++)
    if (actors[i]) out->messages_dropped += actor_malformed(actors[i]);
  pthread_mutex_unlock(&s->lock);
  out->posted = atomic_load_explicit(&s->core.posted, memory_order_relaxed);
  out->posted_late = atomic_load_explicit(&s->core.posted_late, memory_order_relaxed);
  for (int d = 0; d < s->core.ndevices; d++) {
    if (s->core.backend->ops->device_lost(s->core.backend, d)) out->devices_lost++;
    core_placement *cp = &s->core.placement_stats[d];
    out->placement[d].placed = atomic_load_explicit(&cp->placed, memory_order_relaxed);
    out->placement[d].by_model = atomic_load_explicit(&cp->by_model, memory_order_relaxed);
    out->placement[d].predicted = atomic_load_explicit(&cp->predicted, memory_order_relaxed);
    uint64_t ppm = atomic_load_explicit(&cp->error_ppm, memory_order_relaxed);
    out->placement[d].model_error = out->placement[d].predicted ? (double)ppm / 1e6 / (double)out->placement[d].predicted : 0;
  }
  return SCHEDRUN_OK;
}

const char *schedrun_device_lost(const schedrun_t *s, int i) {
  if (!s || i < 0 || i >= s->core.ndevices) return NULL;
  return s->core.backend->ops->device_lost(s->core.backend, i);
}
