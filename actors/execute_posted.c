/*
 * A lone job posted to its device by the thread that submitted it.
 *
 * A thread that submits a lone job places it itself (lib/api_guest.c); its
 * EXECUTE is then queued for the device's execute actor, whose thread is
 * asleep. Waking that thread only for it to hand the job to the device's
 * worker process, wait for the worker, and wake the caller, is two wakes
 * more than the job needs. So the submitting thread takes the actor's turn
 * and posts the job itself: it fills the job's buffers, starts the replay
 * (gpu_ops.seq_post) and returns, the job running. Whoever next holds the
 * turn collects it (execute_settle, at the start of every turn): the
 * caller when it waits for the job (the wait is where the answer is wanted
 * anyway), else the actor's own thread, woken by the device when the job
 * ends (the worker writes an eventfd the thread sleeps on beside its
 * mailbox, actor_def.wake_fds; and the worker's pidfd, should it die). The
 * device takes nothing else until the job is collected.
 *
 * Only what the posting thread can start without waiting is posted: an
 * EXECUTE with no deadline (nobody would be waiting to enforce it), no host
 * steps and no node timing, on a device that can post (host devices with a
 * worker process). What the guest takes from the queue that cannot be
 * posted is left for the actor's thread (deferred, then the thread is
 * rung), so that submitting never waits for a job to run.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "actors/execute_state.h"

/* Whether m is a job this guest can post now. */
static bool postable(execute_state *s, const msg *m) {
  if (m->type != MSG_EXECUTE || atomic_load(&s->posted) || s->ndeferred) return false;
  gpu_backend *be = s->core->backend;
  const msg_execute *x = &m->body.execute;
  const prog_program *p = core_program(s->core, x->program);
  /* the device announces both a job's end and its worker's death (an
   * eventfd and a pidfd): a job nobody collects is heard of either way */
  int fds[ACTOR_WAKE_FDS];
  return be->ops->seq_post && p && !p->nhosts && !x->deadline && !execute_timing(s) &&
         be->ops->device_wake_fds(be, s->device, fds) == ACTOR_WAKE_FDS;
}

/* Leaves m (taken) for the actor's thread. */
static void defer(actor_t *self, execute_state *s, msg *m) {
  if (s->ndeferred == s->deferred_cap) {
    size_t n = s->deferred_cap ? 2 * s->deferred_cap : 4;
    msg *v = realloc(s->deferred, n * sizeof *v);
    if (!v) {
      execute_take_queued(self, m); /* without memory to leave it: run now */
      return;
    }
    s->deferred = v;
    s->deferred_cap = n;
  }
  s->deferred[s->ndeferred++] = *m;
  memset(m, 0, sizeof *m);
}

void execute_post_or_defer(actor_t *self, execute_state *s, msg *m) {
  assert(s->post_mode);
  if (!postable(s, m)) {
    defer(self, s, m);
    return;
  }
  s->post_msg = *m; /* taken: m is left empty */
  memset(m, 0, sizeof *m);
  execute_one *o = s->post;
  *o = (execute_one){.m = &s->post_msg};
  execute_one_begin(s, o);
  if (o->rc == SCHEDRUN_OK && s->core->backend->ops->seq_post((gpu_seq *)(uintptr_t)o->c.sequence)) {
    atomic_store(&s->posted, true);
    atomic_fetch_add_explicit(&s->core->posted, 1, memory_order_relaxed);
    return;
  }
  /* it failed before it started, or the device would not take it so (it
   * was lost meanwhile: the launch fails at once) */
  if (o->rc == SCHEDRUN_OK) execute_one_launch(s, o);
  execute_one_end(self, s, o);
  msg_free(&s->post_msg);
}

/* The job posted, if any, collected and answered, waiting for it until
 * until_ns at most (0: no limit); false when it had not ended by then. */
static bool collect(actor_t *self, execute_state *s, uint64_t until_ns) {
  if (!atomic_load(&s->posted)) return true;
  execute_one *o = s->post;
  int rc = s->core->backend->ops->seq_collect((gpu_seq *)(uintptr_t)o->c.sequence, until_ns, &o->f, &o->err);
  if (rc == SCHEDRUN_EAGAIN) return false; /* still running, still posted */
  if (actor_on_own_thread(self)) atomic_fetch_add_explicit(&s->core->posted_late, 1, memory_order_relaxed);
  o->rc = rc;
  if (rc) execute_name_failure(o->c.p, &o->jr, &o->f, rc, &o->err);
  execute_one_end(self, s, o);
  msg_free(&s->post_msg);
  atomic_store(&s->posted, false);
  return true;
}

void execute_settle(actor_t *self, execute_state *s) {
  assert(!s->post_mode);
  collect(self, s, 0);
  if (s->ndeferred) {
    /* taken out first: what runs may not defer again, but stays in order */
    msg *v = s->deferred;
    size_t n = s->ndeferred;
    s->deferred = NULL;
    s->ndeferred = s->deferred_cap = 0;
    for (size_t i = 0; i < n; i++) {
      if (!execute_take_queued(self, &v[i])) actor_count_malformed(self);
      msg_free(&v[i]);
    }
    free(v);
  }
}

/* A guest's errand (actor_run_here): the queue taken, its lone job posted. */
static void post_queued(actor_t *self, void *arg) {
  (void)arg;
  execute_state *s = actor_state(self);
  s->post_mode = true;
  for (size_t bad = msgq_drain(&s->core->to_execute[s->device], execute_take_queued, self); bad; bad--)
    actor_count_malformed(self);
  s->post_mode = false;
  if (s->ndeferred) {
    /* the actor's thread runs them (execute_settle), not this caller */
    msg bell;
    msg_init(&bell, MSG_QUEUED, 0, s->name);
    actor_send(self, s->name, &bell);
    msg_free(&bell);
  }
}

actor_turn execute_post_here(actor_t *a) {
  execute_state *s = actor_state(a);
  gpu_backend *be = s->core->backend;
  if (!be->ops->seq_post || atomic_load(&s->posted)) return ACTOR_TURN_BUSY;
  return actor_run_here(a, post_queued, NULL);
}

bool execute_has_posted(actor_t *a) { return atomic_load(&((execute_state *)actor_state(a))->posted); }

/* A guest's errand: the job posted collected (waiting until *arg at most),
 * then what is queued run. */
static void collect_and_run(actor_t *self, void *arg) {
  execute_state *s = actor_state(self);
  if (!collect(self, s, *(const uint64_t *)arg)) return; /* the device is still the posted job's */
  execute_settle(self, s); /* what a guest deferred */
  if (msgq_any(&s->core->to_execute[s->device])) {
    msg bell;
    msg_init(&bell, MSG_QUEUED, 0, s->name);
    (void)execute_actor_def.handle(self, &bell); /* a QUEUED never stops the actor */
    msg_free(&bell);
  }
}

actor_turn execute_run_here(actor_t *a, uint64_t until_ns) { return actor_run_here(a, collect_and_run, &until_ns); }
