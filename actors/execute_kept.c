/*
 * Buffers kept on a device from one job to a later one. A job graph's steps
 * are sent together (lib/api_deps.c): a step's SUBMIT names what the step
 * before it leaves as a take {buffer | park entry << 32, MSG_TAKE_LOCAL,
 * job} before that job has run, so the buffer cannot travel as a parcel whose address comes back
 * in COMPLETE. Instead the producer parks it locally (MSG_PARK_LOCAL) and
 * its execute actor notes it in its table, where it is: still in the
 * producer's context's buffer, which the next job of that context would
 * overwrite. If that next job is the one that takes it, into the same
 * buffer, nothing is copied at all (a chain of steps of one program works
 * on its buffers in place, as StarPU's tasks on one read-write handle do);
 * otherwise, before the next job of that context fills its buffers, the
 * buffer moves to a parcel (spilled), and its taker copies it in from
 * there. Nothing of this travels in messages.
 *
 * Ownership: an entry belongs to the execute actor; its taker's plan takes
 * it, and kept_commit frees its parcel once the taker ran or failed. An
 * entry nobody comes for (its taker failed before it reached this device:
 * the device was lost, the scheduler shut down) stays until the actor
 * stops (execute_stop), which frees its parcel.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "actors/execute_state.h"

static uint64_t buffer_bytes(const prog_program *p, uint32_t b) {
  return p->buffers[b].count * prog_type_size(p->buffers[b].type);
}

bool kept_only(const job_run *jr) {
  for (size_t i = 0; i < jr->park.n; i++)
    if (!(jr->park.v[i] & MSG_PARK_LOCAL)) return false;
  for (size_t i = 0; i + 2 < jr->takes.n; i += 3)
    if (jr->takes.v[i + 1] != MSG_TAKE_LOCAL) return false;
  return true;
}

bool kept_scratch(const execute_state *s, kept_table *t) {
  const kept_table *k = &s->kept;
  *t = (kept_table){NULL, 0, 0};
  if (!k->n) return true;
  if (!(t->v = malloc(k->n * sizeof *t->v))) return false;
  memcpy(t->v, k->v, k->n * sizeof *t->v);
  t->n = t->cap = k->n;
  return true;
}

void kept_table_free(kept_table *t) {
  free(t->v);
  *t = (kept_table){NULL, 0, 0};
}

void kept_plan_free(kept_plan *pl) {
  free(pl->copies);
  free(pl->changes);
  memset(pl, 0, sizeof *pl);
}

static bool table_add(kept_table *t, const kept_buf *b) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 8;
    kept_buf *v = realloc(t->v, cap * sizeof *v);
    if (!v) return false;
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n++] = *b;
  return true;
}

static kept_buf *table_find(kept_table *t, uint64_t job, uint32_t park) {
  for (size_t i = 0; i < t->n; i++)
    if (t->v[i].job == job && t->v[i].park == park) return &t->v[i];
  return NULL;
}

static void table_remove(kept_table *t, kept_buf *b) {
  assert(b >= t->v && b < t->v + t->n);
  *b = t->v[--t->n]; /* order does not matter: entries are found by key */
}

static bool plan_change(kept_plan *pl, kept_change_kind kind, size_t job, size_t copy, const kept_buf *b) {
  if (pl->nchanges == pl->changes_cap) {
    size_t cap = pl->changes_cap ? 2 * pl->changes_cap : 8;
    kept_change *v = realloc(pl->changes, cap * sizeof *v);
    if (!v) return false;
    pl->changes = v;
    pl->changes_cap = cap;
  }
  pl->changes[pl->nchanges++] = (kept_change){kind, job, copy, *b};
  return true;
}

static bool plan_copy(kept_plan *pl, uint64_t dst, uint64_t src, uint64_t bytes) {
  if (pl->ncopies + 3 > pl->copies_cap) {
    size_t cap = pl->copies_cap ? 2 * pl->copies_cap : 24;
    uint64_t *v = realloc(pl->copies, cap * sizeof *v);
    if (!v) return false;
    pl->copies = v;
    pl->copies_cap = cap;
  }
  pl->copies[pl->ncopies++] = dst;
  pl->copies[pl->ncopies++] = src;
  pl->copies[pl->ncopies++] = bytes;
  return true;
}

/* Whether address at is one of the context's buffers. */
static bool in_this_context(const context_run *c, uint64_t at) {
  for (size_t b = 0; b < c->bindings->n; b++)
    if (c->bindings->v[b] == at) return true;
  return false;
}

/* The buffer jr takes entry e into, or UINT32_MAX. */
static uint32_t taken_into(const context_run *c, const job_run *jr, const kept_buf *e) {
  for (size_t i = 0; i + 2 < jr->takes.n; i += 3) {
    uint32_t b = MSG_TAKE_BUFFER(jr->takes.v[i]);
    if (jr->takes.v[i + 1] == MSG_TAKE_LOCAL && jr->takes.v[i + 2] == e->job &&
        MSG_TAKE_PARK(jr->takes.v[i]) == e->park && b < c->bindings->n)
      return b;
  }
  return UINT32_MAX;
}

/* Whether one of jr's takes fills the buffer at address at. */
static bool written_by_takes(const context_run *c, const job_run *jr, uint64_t at) {
  for (size_t i = 0; i + 2 < jr->takes.n; i += 3) {
    uint32_t b = MSG_TAKE_BUFFER(jr->takes.v[i]);
    if (b < c->bindings->n && c->bindings->v[b] == at) return true;
  }
  return false;
}

/* Whether entry e, in jr's own context, can stay where it is until jr takes
 * it: into that very buffer (no copy at all), or into another buffer of
 * the context by one copy before anything of jr writes e's buffer (none of
 * jr's takes fills it; its fills come after its takes). */
static bool stays(const context_run *c, const job_run *jr, const kept_buf *e) {
  uint32_t b = taken_into(c, jr, e);
  if (b == UINT32_MAX) return false;
  return c->bindings->v[b] == e->at || !written_by_takes(c, jr, e->at);
}

int kept_plan_job(execute_state *s, kept_table *t, const context_run *c, const job_run *jr, size_t pos, kept_plan *pl,
                  schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  const prog_program *p = c->p;
  /* what this context's buffers hold for later jobs moves out first,
   * unless this job takes it from where it is */
  for (size_t i = 0; i < t->n; i++) {
    kept_buf *e = &t->v[i];
    if (!e->in_context || !in_this_context(c, e->at) || stays(c, jr, e)) continue;
    uint64_t parcel = 0;
    int rc = be->ops->mem_alloc(be, s->device, e->bytes ? e->bytes : 1, &parcel, err);
    if (rc) return rc;
    if (!plan_copy(pl, parcel, e->at, e->bytes)) {
      be->ops->mem_free(be, s->device, parcel);
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    }
    kept_buf moved = *e;
    moved.in_context = false;
    moved.at = parcel;
    if (!plan_change(pl, KC_SPILL, pos, pl->ncopies / 3 - 1, &moved)) {
      pl->ncopies -= 3;
      be->ops->mem_free(be, s->device, parcel);
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    }
    *e = moved;
  }
  int missing = SCHEDRUN_OK;
  for (size_t i = 0; i + 2 < jr->takes.n; i += 3) {
    if (jr->takes.v[i + 1] != MSG_TAKE_LOCAL) continue;
    uint32_t b = MSG_TAKE_BUFFER(jr->takes.v[i]), from = MSG_TAKE_PARK(jr->takes.v[i]);
    uint64_t job = jr->takes.v[i + 2];
    kept_buf *e = table_find(t, job, from);
    if (b >= p->nbuffers || (e && e->bytes != buffer_bytes(p, b))) {
      if (!missing)
        missing = err_set(err, SCHEDRUN_EPROTO, "EXECUTE takes what job %llu kept by its park entry %u into buffer %u: "
                          "no such buffer, or another size", (unsigned long long)job, from, b);
      continue;
    }
    if (!e) {
      if (!missing)
        missing = err_set(err, SCHEDRUN_EDEPEND,
                          "job %llu, which hands it buffer '%s', left nothing on %s (it failed, or did not run there)",
                          (unsigned long long)job, p->buffers[b].name, be->ops->device_name(be, s->device));
      continue;
    }
    /* left in this very buffer by the job before it in this context: it stays */
    bool here = e->in_context && c->bindings->v[b] == e->at;
    if ((!here && !plan_copy(pl, c->bindings->v[b], e->at, e->bytes)) || !plan_change(pl, KC_TAKE, pos, 0, e))
      return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    if (jr->traffic) jr->traffic->local++; /* taken on its device, copied there or not */
    table_remove(t, e);
  }
  if (missing) return missing;
  for (size_t i = 0; i < jr->park.n; i++) {
    if (!(jr->park.v[i] & MSG_PARK_LOCAL)) continue;
    uint64_t b = jr->park.v[i] & ~MSG_PARK_LOCAL;
    if (b >= p->nbuffers)
      return err_set(err, SCHEDRUN_EPROTO, "EXECUTE keeps buffer %llu; the program has %u", (unsigned long long)b,
                     p->nbuffers);
    kept_buf k = {jr->id, (uint32_t)i, (uint32_t)b, true, c->bindings->v[b], buffer_bytes(p, (uint32_t)b)};
    if (!plan_change(pl, KC_KEEP, pos, 0, &k) || !table_add(t, &k)) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  return SCHEDRUN_OK;
}

void kept_commit(execute_state *s, const kept_plan *pl, size_t failed, size_t copies_ran) {
  gpu_backend *be = s->core->backend;
  kept_table *t = &s->kept;
  for (size_t i = 0; i < pl->nchanges; i++) {
    const kept_change *ch = &pl->changes[i];
    bool whole = ch->job < failed, part = ch->job == failed;
    switch (ch->kind) {
    case KC_SPILL: {
      kept_buf *e = table_find(t, ch->buf.job, ch->buf.park);
      if ((whole || (part && ch->copy < copies_ran)) && e) {
        *e = ch->buf; /* it is in its parcel now */
      } else {
        be->ops->mem_free(be, s->device, ch->buf.at); /* the copy did not happen */
      }
      break;
    }
    case KC_TAKE: {
      if (!whole && !part) break; /* the job did not get to it: still there for it */
      kept_buf *e = table_find(t, ch->buf.job, ch->buf.park);
      if (!e) break;
      if (!e->in_context) be->ops->mem_free(be, s->device, e->at);
      table_remove(t, e);
      break;
    }
    case KC_KEEP:
      /* without memory for the entry its taker fails, saying it found nothing */
      if (whole) (void)table_add(t, &ch->buf);
      break;
    }
  }
}

void kept_plan_truncate(execute_state *s, kept_plan *pl, size_t nchanges, size_t ncopies) {
  gpu_backend *be = s->core->backend;
  for (size_t i = nchanges; i < pl->nchanges; i++)
    if (pl->changes[i].kind == KC_SPILL) be->ops->mem_free(be, s->device, pl->changes[i].buf.at);
  pl->nchanges = nchanges;
  pl->ncopies = ncopies;
}

int kept_before_job(execute_state *s, const context_run *c, const job_run *jr, kept_plan *pl, size_t *copies_ran,
                    schedrun_error_t *err) {
  *copies_ran = 0;
  if (!jr->takes.n && !jr->park.n && !s->kept.n) return SCHEDRUN_OK; /* nothing kept, nothing to keep */
  kept_table t;
  if (!kept_scratch(s, &t)) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  int rc = kept_plan_job(s, &t, c, jr, 0, pl, err);
  kept_table_free(&t);
  gpu_backend *be = s->core->backend;
  for (size_t i = 0; rc == SCHEDRUN_OK && i < pl->ncopies; i += 3) {
    rc = be->ops->copy_dtod(be, s->device, pl->copies[i], pl->copies[i + 1], pl->copies[i + 2], err);
    if (rc == SCHEDRUN_OK) ++*copies_ran;
  }
  return rc;
}
