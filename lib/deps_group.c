/*
 * A released job and the jobs after it that go with it. Without this, a
 * chain of jobs costs a round trip per step: the step's COMPLETE comes back
 * here, releases the next step, whose SUBMIT goes out again. Instead, when a
 * job is released, the jobs that wait only for it (and, in turn, for each
 * other) are sent with it, in order, before any of them has run: each hand-off
 * between them becomes a buffer kept on the device (MSG_PARK_LOCAL on the
 * producer's side, a MSG_TAKE_LOCAL take naming the producer on the
 * consumer's, see actors/execute_kept.c), the scheduler sends each to its
 * producer's device, and the device runs them in turn, in one submission
 * when it can. A chain of one program's steps then works on its buffers in
 * place, without a copy.
 *
 * Such a job is "ahead": it still waits here for the jobs before it, which
 * decide what its COMPLETE means. If one fails, it completes here with
 * SCHEDRUN_EDEPEND as any job after a failure does, and its own answer
 * (the device found nothing to take, or ran it after all) is dropped; if
 * its COMPLETE comes before theirs, it waits in the node until they are in.
 *
 * Which jobs go together: those of the released job's program and binding
 * slot, with no deadline, not pinned elsewhere, not record-only, whose every
 * edge still awaited comes from the group and hands a buffer on. A chain
 * loses nothing by it; a fork (several jobs after one, or one after several)
 * would run its branches in turn on one device instead of side by side, so
 * it goes together only when there is one device, or when the program's
 * jobs are short (a moving average of how long they ran, three quarters
 * the average before and a quarter the last job, under BRANCH_NS, what a
 * round trip to another device costs). Everything here runs under s->lock.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "lib/deps.h"

#define GROUP_MAX 1024     /* jobs sent together at most (one SUBMIT_MANY) */
#define BRANCH_NS 20000ull /* a job shorter than this runs beside its siblings on one device */

void deps_note_run(schedrun_t *s, const prog_program *p, uint64_t execute_ns) {
  size_t n = SCHEDRUN__ARRAY_LEN(s->last_run);
  for (size_t i = 0; i < n; i++)
    if (s->last_run[i].p == p) {
      /* a moving average: one job that waited for its device's wake does
       * not turn a short program's forks apart */
      s->last_run[i].ns = (3 * s->last_run[i].ns + execute_ns) / 4;
      return;
    }
  s->last_run[s->last_run_next % n].p = p;
  s->last_run[s->last_run_next % n].ns = execute_ns;
  s->last_run_next++;
}

static bool short_jobs(const schedrun_t *s, const prog_program *p) {
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(s->last_run); i++)
    if (s->last_run[i].p == p) return s->last_run[i].ns < BRANCH_NS;
  return false; /* not known yet: the branches go their own ways */
}

bool deps_early(schedrun_t *s, pending_job *pj, schedrun_job_result_t *r) {
  dep_node *d = pj->dep;
  assert(d && d->ahead);
  if (d->waiting > 0) {
    if (!r) r = deps_result(pj, SCHEDRUN_ENOMEM, "out of memory");
    if (d->early) deps_drop_result(s, r); /* a job completes once */
    else d->early = r;
    return true;
  }
  if (d->fail_status != SCHEDRUN_OK || d->early) {
    deps_drop_result(s, r); /* decided already (it completes with the failure before it), or a duplicate */
    return true;
  }
  return false;
}

/* Whether y may go with a group whose first SUBMIT is head: it may once
 * every edge it still waits for comes from the group (group_in), each
 * handing a buffer on. */
static bool joins(const pending_job *first, const msg_submit *head, const pending_job *y) {
  const dep_node *d = y->dep;
  if (!d->held || !d->is_job || d->ahead || d->in_group || d->group_bad || d->fail_status != SCHEDRUN_OK) return false;
  if (d->group_in != d->waiting || y->prog != first->prog) return false;
  const msg_submit *sb = &d->submit.body.submit;
  if (sb->slot != head->slot || sb->deadline || sb->record_only) return false;
  if (sb->device >= 0 && sb->device != head->device) return false;
  /* what it already has from outside the group must be what deps_release_job takes */
  for (size_t i = 0; i < d->nins; i++) {
    const dep_in *in = &d->ins[i];
    if (!in->filled) continue;
    const prog_buffer *b = &y->prog->buffers[in->buffer];
    if (in->device < 0 && in->bytes != b->count * prog_type_size(b->type)) return false;
  }
  return true;
}

/* The jobs that go with pj, pj first, each after every job of the group it
 * waits for; *n of them (g[0] is pj). NULL without memory (pj goes alone). */
static pending_job **gather(schedrun_t *s, pending_job *pj, size_t *n) {
  const msg_submit *head = &pj->dep->submit.body.submit;
  bool fan = s->core.ndevices == 1 || short_jobs(s, pj->prog);
  size_t cap = 8;
  pending_job **g = malloc(cap * sizeof *g);
  if (!g) return NULL;
  g[0] = pj;
  *n = 1;
  pj->dep->in_group = true;
  for (size_t i = 0; i < *n && *n < GROUP_MAX; i++) {
    dep_node *md = g[i]->dep;
    if (!fan) {
      /* a chain: the group goes on only through a job with one job after it */
      if (i + 1 != *n || !md->nouts) break;
      bool one = true;
      for (size_t k = 1; k < md->nouts; k++) one = one && md->outs[k].to == md->outs[0].to;
      if (!one) break;
    }
    for (size_t k = 0; k < md->nouts && *n < GROUP_MAX; k++) {
      const dep_out *e = &md->outs[k];
      dep_node *yd = e->to->dep;
      if (!yd || yd->in_group) continue;
      yd->group_in++;
      if (e->in < 0 || e->park < 0) yd->group_bad = true; /* order only, or from a host task */
      if (!joins(pj, head, e->to)) continue;
      if (*n == cap) {
        pending_job **v = realloc(g, 2 * cap * sizeof *v);
        if (!v) break;
        g = v;
        cap *= 2;
      }
      g[(*n)++] = e->to;
      yd->in_group = true;
    }
  }
  /* the counts are for this look only */
  for (size_t i = 0; i < *n; i++)
    for (size_t k = 0; k < g[i]->dep->nouts; k++) {
      dep_node *yd = g[i]->dep->outs[k].to->dep;
      if (yd) {
        yd->group_in = 0;
        yd->group_bad = false;
      }
    }
  return g;
}

static bool push_send(deps_work *w, msg *m) {
  if (w->nsend == w->send_cap) {
    size_t cap = w->send_cap ? 2 * w->send_cap : 8;
    msg *v = realloc(w->send, cap * sizeof *v);
    if (!v) return false;
    w->send = v;
    w->send_cap = cap;
  }
  w->send[w->nsend++] = *m;
  return true;
}

/* Moves job pj's SUBMIT onto w->send (the job is then sent, no longer here). */
static void send_one(deps_work *w, pending_job *pj) {
  dep_node *d = pj->dep;
  if (push_send(w, &d->submit)) memset(&d->submit, 0, sizeof d->submit);
  else msg_free(&d->submit); /* without memory it is not sent: see deps_work (it waits) */
  d->is_job = false;
}

/* Jobs g[0..n) (consecutive ids) as one SUBMIT_MANY: n, or 0 without
 * memory (none moved). */
static size_t send_many(deps_work *w, pending_job **g, size_t n) {
  size_t nin = 0, npark = 0, ntakes = 0;
  for (size_t i = 0; i < n; i++) {
    const msg_submit *sb = &g[i]->dep->submit.body.submit;
    nin += sb->inputs.n;
    npark += sb->park.n;
    ntakes += sb->takes.n;
  }
  msg m;
  if (msg_init(&m, MSG_SUBMIT_MANY, g[0]->id, ACTOR_CLIENT) != SCHEDRUN_OK ||
      msg_submit_many_reserve(&m.body.submit_many, n, nin) != SCHEDRUN_OK ||
      msg_submit_many_reserve_handoffs(&m.body.submit_many, npark, ntakes) != SCHEDRUN_OK) {
    msg_free(&m);
    return 0;
  }
  for (size_t i = 0; i < n; i++) msg_submit_many_add_handing(&m.body.submit_many, &g[i]->dep->submit.body.submit);
  if (!push_send(w, &m)) msg_free(&m); /* without memory they are not sent: see deps_work */
  for (size_t i = 0; i < n; i++) {
    msg_free(&g[i]->dep->submit); /* emptied into m */
    g[i]->dep->is_job = false;
  }
  return n;
}

void deps_group_send(schedrun_t *s, pending_job *pj, deps_work *w) {
  size_t n = 1;
  pending_job **g = gather(s, pj, &n);
  if (!g) {
    pj->dep->in_group = false;
    send_one(w, pj);
    return;
  }
  /* hand-offs inside the group stay on the device */
  for (size_t i = 0; i < n; i++) {
    dep_node *md = g[i]->dep;
    for (size_t k = 0; k < md->nouts; k++) {
      const dep_out *e = &md->outs[k];
      dep_node *yd = e->to->dep;
      if (!yd || !yd->in_group || e->in < 0 || e->park < 0) continue;
      dep_in *in = &yd->ins[e->in];
      in->kept = true;
      in->kept_job = g[i]->id;
      in->kept_park = (uint32_t)e->park;
      msg_u64s *park = &md->submit.body.submit.park;
      assert((size_t)e->park < park->n);
      park->v[e->park] |= MSG_PARK_LOCAL;
    }
  }
  for (size_t i = 0; i < n; i++) {
    dep_node *d = g[i]->dep;
    d->in_group = false;
    d->held = false;
    if (i == 0) continue; /* released by the caller */
    d->ahead = true;
    char *why = deps_release_job(s, g[i]);
    /* only without memory (joins checked the rest): the jobs that take
     * from it find nothing and fail after it */
    if (why) {
      free(why);
      msg_free(&d->submit);
      d->is_job = false;
      d->fail_status = SCHEDRUN_ENOMEM;
      d->fail_why = NULL;
    }
  }
  /* in order, consecutive ids in one message */
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && j - i < GROUP_MAX && g[j]->id == g[j - 1]->id + 1 && g[j]->dep->is_job) j++;
    if (!g[i]->dep->is_job) {
      i++;
      continue;
    }
    size_t sent = j - i > 1 ? send_many(w, g + i, j - i) : 0;
    for (size_t k = i + sent; k < j; k++) send_one(w, g[k]);
    i = j;
  }
  free(g);
}
