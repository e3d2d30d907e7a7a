/*
 * Jobs sent ahead: a job graph's steps travel to the scheduler with the jobs
 * they run after, and the scheduler releases each when they are done,
 * without a round trip through the client (which still hears of every
 * completion, in order, and names failures; lib/api_deps.c).
 *
 * A job's SUBMIT lists the jobs it releases (`then`: {follower, park index,
 * the follower's buffer} triples) and a follower's SUBMIT says how many such
 * triples name it (`waits`). Either may reach the scheduler first (a job may
 * even be done before a follower's SUBMIT comes), so the follower's entry
 * here is made by whichever word of it comes first, and counts down: its
 * SUBMIT adds `waits`, each completion of a job it runs after takes one
 * away. When its SUBMIT is in and nothing is left, it starts (placed near
 * the parcels handed to it) or fails with SCHEDRUN_EDEPEND.
 *
 * Parcels: when a job that parks buffers has run, its EXECUTED lists the
 * parcels as its COMPLETE does, and the scheduler moves those that `then`
 * names into the follower's takes. Each parcel still has one owner: those
 * named in `then` are the scheduler's, the rest the client's. A follower
 * that fails before it runs frees what was handed to it with itself.
 *
 * Released jobs start once the completion at hand is dealt with, oldest
 * first, so that a long chain that fails at its head is failed in a loop,
 * not by recursion.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler_state.h"

typedef struct held_job {
  uint64_t id;
  job *j;            /* NULL until its SUBMIT comes */
  int64_t waiting;   /* its SUBMIT's waits, less the completions that named it */
  int fail;          /* SCHEDRUN_OK, or why it cannot run (a job it runs after): */
  char *why;
  int refused;       /* SCHEDRUN_OK, or why its own SUBMIT was refused: */
  char *refused_why; /* then j was never registered */
  msg_u64s takes;    /* {buffer, device, address} handed to it so far */
  size_t takes_cap;
  struct held_job *next; /* on the ready list */
} held_job;

static held_job *held_get(scheduler_state *s, uint64_t id) {
  held_job *h = idmap_get(&s->held, id);
  if (h) return h;
  if (!(h = calloc(1, sizeof *h))) return NULL;
  h->id = id;
  if (idmap_put(&s->held, id, h) != 0) {
    free(h);
    return NULL;
  }
  return h;
}

static void held_fail(held_job *h, int code, const char *fmt, unsigned long long id) {
  if (h->fail != SCHEDRUN_OK) return; /* the first reason is kept */
  char why[128];
  snprintf(why, sizeof why, fmt, id);
  h->fail = code;
  h->why = xstrdup(why);
}

static bool held_take(held_job *h, uint64_t buffer, uint64_t device, uint64_t addr) {
  if (h->takes.n + 3 > h->takes_cap) {
    size_t cap = h->takes_cap ? 2 * h->takes_cap : 6;
    uint64_t *v = realloc(h->takes.v, cap * sizeof *v);
    if (!v) return false;
    h->takes.v = v;
    h->takes_cap = cap;
  }
  h->takes.v[h->takes.n++] = buffer;
  h->takes.v[h->takes.n++] = device;
  h->takes.v[h->takes.n++] = addr;
  return true;
}

static void held_free(schedrun_core *core, held_job *h) {
  core_free_parcels(core, &h->takes);
  free(h->takes.v);
  free(h->why);
  free(h->refused_why);
  free(h);
}

/* Onto the ready list once its SUBMIT is in and nothing is left to wait for. */
static void note_ready(scheduler_state *s, held_job *h) {
  if (!h->j || h->waiting > 0) return;
  assert(h->waiting == 0); /* one count per triple that names it: never below */
  h->next = NULL;
  if (s->ready_tail) s->ready_tail->next = h;
  else s->ready_head = h;
  s->ready_tail = h;
}

/* The device that holds most of the parcels handed to it, or -1. */
static int32_t nearest(const scheduler_state *s, const msg_u64s *takes) {
  int32_t best = -1;
  size_t most = 0;
  for (size_t i = 0; i + 2 < takes->n; i += 3) {
    size_t n = 0;
    for (size_t k = 0; k + 2 < takes->n; k += 3) n += takes->v[k + 1] == takes->v[i + 1];
    if (n > most && takes->v[i + 1] < (uint64_t)s->core->ndevices) {
      best = (int32_t)takes->v[i + 1];
      most = n;
    }
  }
  return best;
}

static void start(actor_t *self, scheduler_state *s, held_job *h) {
  job *j = h->j;
  idmap_remove(&s->held, h->id);
  /* what was handed to it goes with it, and is freed with it if it fails */
  if (!j->takes.n) {
    free(j->takes.v);
    j->takes = h->takes;
    h->takes = (msg_u64s){NULL, 0};
  } else if (h->takes.n) {
    uint64_t *v = realloc(j->takes.v, (j->takes.n + h->takes.n) * sizeof *v);
    if (v) {
      memcpy(v + j->takes.n, h->takes.v, h->takes.n * sizeof *v);
      j->takes.v = v;
      j->takes.n += h->takes.n;
      free(h->takes.v);
      h->takes = (msg_u64s){NULL, 0};
    } else if (h->fail == SCHEDRUN_OK) {
      h->fail = SCHEDRUN_ENOMEM;
      h->why = xstrdup("out of memory");
    }
  }
  if (h->refused != SCHEDRUN_OK) s->held_refused--;
  else s->nheld--;
  if (h->refused != SCHEDRUN_OK) {
    /* a job it runs after failing says more than its own refusal */
    scheduler_refuse(self, s, j, h->fail != SCHEDRUN_OK ? h->fail : h->refused,
                     h->fail != SCHEDRUN_OK ? h->why : h->refused_why);
  } else if (h->fail != SCHEDRUN_OK) {
    scheduler_complete(self, s, j, h->fail, h->why, NULL);
  } else if (s->closing) {
    scheduler_complete(self, s, j, SCHEDRUN_ECLOSED, "the scheduler shut down before the job started", NULL);
  } else {
    prog_state *ps = scheduler_prog_get(s, j->program, false);
    j->near = nearest(s, &j->takes);
    if (ps) scheduler_admit(self, s, ps, j);
    else scheduler_complete(self, s, j, SCHEDRUN_EINTERNAL, "the job's program is gone", NULL);
  }
  held_free(s->core, h);
}

/* Starts what was released, oldest first; a call made while this runs (a
 * released job that fails releases more) leaves its jobs to this loop. */
static void release_ready(actor_t *self, scheduler_state *s) {
  if (s->releasing) return;
  s->releasing = true;
  held_job *h;
  while ((h = s->ready_head)) {
    s->ready_head = h->next;
    if (!s->ready_head) s->ready_tail = NULL;
    start(self, s, h);
  }
  s->releasing = false;
}

void scheduler_hold(actor_t *self, scheduler_state *s, job *j, uint32_t waits, int code, const char *refused) {
  assert(waits > 0);
  held_job *h = held_get(s, j->id);
  if (!h || h->j) {
    /* no room to wait here (or an id sent twice): it fails now */
    if (code == SCHEDRUN_OK) scheduler_complete(self, s, j, SCHEDRUN_ENOMEM, "out of memory", NULL);
    else scheduler_refuse(self, s, j, code, refused);
    return;
  }
  h->j = j;
  h->waiting += waits;
  j->state = JOB_HELD;
  if (code != SCHEDRUN_OK) {
    h->refused = code;
    h->refused_why = xstrdup(refused);
    s->held_refused++;
  } else {
    s->nheld++;
  }
  note_ready(s, h);
  release_ready(self, s);
}

void scheduler_hand_on(actor_t *self, scheduler_state *s, job *j, int status, const msg_u64s *parcels) {
  if (!j->then.n) return;
  assert(j->then.n % 3 == 0); /* the decoder checks the triples */
  for (size_t i = 0; i + 2 < j->then.n; i += 3) {
    uint64_t park = j->then.v[i + 1];
    bool parcel = park != UINT64_MAX && parcels && park < parcels->n; /* ours, whatever happens */
    held_job *h = held_get(s, j->then.v[i]);
    if (!h) {
      /* without memory the follower cannot hear of it, and waits for good */
      if (parcel) core_free_parcel(s->core, (uint64_t)j->device, parcels->v[park]);
      continue;
    }
    h->waiting--;
    unsigned long long id = (unsigned long long)j->id;
    if (status != SCHEDRUN_OK) {
      held_fail(h, SCHEDRUN_EDEPEND,
                status == SCHEDRUN_EDEPEND ? "runs after job %llu, which did not run" : "runs after job %llu, which failed",
                id);
      if (parcel) core_free_parcel(s->core, (uint64_t)j->device, parcels->v[park]);
    } else if (park != UINT64_MAX && !parcel)
      held_fail(h, SCHEDRUN_EDEPEND, "job %llu left no buffer to hand on (a record_only job runs nothing)", id);
    else if (parcel && !held_take(h, j->then.v[i + 2], (uint64_t)j->device, parcels->v[park])) {
      core_free_parcel(s->core, (uint64_t)j->device, parcels->v[park]);
      held_fail(h, SCHEDRUN_ENOMEM, "out of memory for the buffer job %llu hands on", id);
    }
    note_ready(s, h);
  }
  free(j->then.v);
  j->then = (msg_u64s){NULL, 0}; /* heard once */
  release_ready(self, s);
}

void scheduler_held_free(scheduler_state *s) {
  size_t pos = 0;
  void *v;
  while (idmap_next(&s->held, &pos, NULL, &v)) {
    held_job *h = v;
    /* a registered job is freed with the others; a refused one is only here */
    if (h->j && h->refused != SCHEDRUN_OK) scheduler_job_free(s, h->j);
    held_free(s->core, h);
  }
  idmap_destroy(&s->held);
}

void scheduler_end_held(actor_t *self, scheduler_state *s) {
  assert(s->closing && s->jobs.count >= s->nheld);
  if (s->jobs.count != s->nheld || (!s->nheld && !s->held_refused)) return;
  /* nothing in flight can complete them, and after TERM no SUBMIT comes */
  size_t pos = 0;
  void *v;
  while (idmap_next(&s->held, &pos, NULL, &v)) {
    held_job *h = v;
    if (!h->j) continue;
    assert(h->waiting > 0); /* else it would have started */
    h->waiting = 0;
    held_fail(h, SCHEDRUN_ECLOSED, "the scheduler shut down before every job that job %llu runs after was submitted",
              (unsigned long long)h->id);
    note_ready(s, h);
  }
  release_ready(self, s);
}
