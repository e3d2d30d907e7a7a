/*
 * Resident buffers (`resident: true`): a buffer set's resident buffers stay
 * on the device its last job ran on, and the next job of the set starts
 * from what that job left, with nothing copied in or read back. The
 * scheduler knows where each set's are (prog_state.home) and sends the
 * set's jobs there. A job pinned to another device takes them with it:
 * once nothing of the set runs or waits where they are, its EXECUTE takes
 * each resident buffer from that device's copy ({buffer | MSG_TAKE_RESIDENT,
 * device, address}), device to device where the pair allows it, and the set
 * lives on the new device from then on. Until then the job waits here, and
 * so does every later job of the set, so that the set's jobs run in the
 * order they came.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler_state.h"

/* Whether nothing of context {device, slot} runs or waits. */
static bool idle(const prog_state *ps, int device, uint32_t slot) {
  slot_key sk = {(uint32_t)device, slot};
  const slot_state *ss = hmap_get(&((prog_state *)ps)->slots, &sk);
  return !ss || (!ss->inflight && !ss->recording && !ss->queue.head);
}

/* Whether a job of the same buffer set already waits to move. */
static bool set_waits(const prog_state *ps, uint32_t slot) {
  for (const job *w = ps->moving.head; w; w = w->next)
    if (w->slot == slot) return true;
  return false;
}

/* Appends j's takes of its set's resident buffers from `from`. */
static bool take_resident(prog_state *ps, job *j, int from) {
  const prog_program *p = ps->p;
  slot_key sk = {(uint32_t)from, j->slot};
  const slot_state *hs = hmap_get(&ps->slots, &sk);
  assert(hs && hs->bindings); /* a set's home is a context that ran its jobs */
  size_t n = j->takes.n + 3 * (size_t)p->nresident;
  uint64_t *v = realloc(j->takes.v, n * sizeof *v);
  if (!v) return false;
  j->takes.v = v;
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    if (!p->buffers[b].resident) continue;
    v[j->takes.n++] = b | MSG_TAKE_RESIDENT;
    v[j->takes.n++] = (uint64_t)from;
    v[j->takes.n++] = hs->bindings[b];
  }
  assert(j->takes.n == n);
  return true;
}

/* j waits in ps->moving: placed on no device, completed by a shutdown as a
 * queued job is. */
static void wait_to_move(actor_t *self, prog_state *ps, job *j) {
  j->device = -1;
  j->state = JOB_PLACED_WAITING;
  scheduler_q_push(&ps->moving, j);
  if (j->deadline) actor_wake_at(self, j->deadline); /* scheduler_resident_tick */
}

int scheduler_resident_place(actor_t *self, scheduler_state *s, prog_state *ps, job *j, int device) {
  assert(ps->p->nresident > 0 && j->slot < MAX_SLOTS);
  if (j->record_only) return device; /* it runs nothing: the set's buffers stay where they are */
  gpu_backend *be = s->core->backend;
  int home = ps->home[j->slot];
  if (home >= 0 && be->ops->device_lost(be, home)) {
    char why[768];
    snprintf(why, sizeof why, "the resident buffers of buffer set %u were on %s, which was lost: %s", j->slot,
             be->ops->device_name(be, home), be->ops->device_lost(be, home));
    ps->home[j->slot] = -1; /* the set's next job starts from its init */
    j->device = -1;          /* not counted on any device yet */
    scheduler_complete(self, s, j, SCHEDRUN_ELOST, why, NULL);
    return -1;
  }
  if (set_waits(ps, j->slot)) { /* behind the one that waits, in order */
    wait_to_move(self, ps, j);
    return -1;
  }
  if (home < 0) { /* the set's first job: it fills them from init, and they stay where it runs */
    ps->home[j->slot] = (int8_t)device;
    return device;
  }
  if (j->pin < 0 || j->pin == home) {
    j->keep |= MSG_KEEP_RESIDENT;
    return home;
  }
  if (!idle(ps, home, j->slot)) { /* they leave once the set's jobs there are done */
    wait_to_move(self, ps, j);
    return -1;
  }
  if (!take_resident(ps, j, home)) {
    j->device = -1;
    scheduler_complete(self, s, j, SCHEDRUN_ENOMEM, "out of memory", NULL);
    return -1;
  }
  ps->home[j->slot] = (int8_t)device;
  return device;
}

void scheduler_resident_unmoved(prog_state *ps, job *j) {
  int from = -1;
  for (size_t i = 0; i + 2 < j->takes.n; i += 3)
    if (j->takes.v[i] & MSG_TAKE_RESIDENT) from = (int)j->takes.v[i + 1];
  if (from < 0) return;
  slot_key sk = {(uint32_t)j->device, j->slot};
  slot_state *ss = hmap_get(&ps->slots, &sk);
  job *next = ss ? ss->queue.head : NULL;
  if (next == j) next = j->next;
  if (next) {
    /* the set's next job there has not left either (the queue is in order) */
    size_t n = next->takes.n + 3 * (size_t)ps->p->nresident;
    uint64_t *v = realloc(next->takes.v, n * sizeof *v);
    if (v) {
      next->takes.v = v;
      for (size_t i = 0; i + 2 < j->takes.n; i += 3)
        if (j->takes.v[i] & MSG_TAKE_RESIDENT)
          for (int k = 0; k < 3; k++) v[next->takes.n++] = j->takes.v[i + (size_t)k];
      next->keep &= ~MSG_KEEP_RESIDENT;
      return;
    }
  }
  if (ps->home[j->slot] == j->device) ps->home[j->slot] = (int8_t)from; /* nothing took them: still there */
}

void scheduler_resident_retry(actor_t *self, scheduler_state *s, prog_state *ps) {
  if (s->closing || ps->retrying) return; /* the shutdown completes them; a job failed below retires into here */
  ps->retrying = true;
  job_queue was = ps->moving;
  ps->moving = (job_queue){0};
  uint64_t blocked = 0; /* sets with a job that still waits: the rest of the set waits behind it */
  for (job *j; (j = scheduler_q_pop(&was));) {
    assert(j->slot < MAX_SLOTS);
    if (blocked & (1ull << j->slot)) {
      scheduler_q_push(&ps->moving, j);
      continue;
    }
    const job *tail = ps->moving.tail;
    scheduler_place(self, s, ps, j); /* placed, waiting again (the new tail), or failed */
    if (ps->moving.tail != tail) blocked |= 1ull << j->slot;
  }
  ps->retrying = false;
}

void scheduler_resident_tick(actor_t *self, scheduler_state *s) {
  uint64_t now = now_ns(), next = UINT64_MAX;
  job_queue late = {0};
  size_t pos = 0;
  void *v;
  /* taken out first, completed after: a completion may free a program's state */
  while (hmap_next(&s->progs, &pos, NULL, &v)) {
    prog_state *ps = v;
    if (!ps->moving.head || ps->retrying) continue;
    job_queue was = ps->moving;
    ps->moving = (job_queue){0};
    for (job *j; (j = scheduler_q_pop(&was));) {
      if (j->deadline && now >= j->deadline) {
        scheduler_q_push(&late, j);
        continue;
      }
      scheduler_q_push(&ps->moving, j);
      if (j->deadline && j->deadline < next) next = j->deadline;
    }
  }
  gpu_backend *be = s->core->backend;
  for (job *j; (j = scheduler_q_pop(&late));) {
    const prog_state *ps = scheduler_prog_get(s, j->program, false);
    int home = ps ? ps->home[j->slot] : -1;
    char why[320];
    snprintf(why, sizeof why,
             "job %llu (run %u, job %u) reached its deadline while it waited for the resident buffers of buffer set %u "
             "to leave %s",
             (unsigned long long)j->id, j->run, j->job_index, j->slot, home >= 0 ? be->ops->device_name(be, home) : "?");
    scheduler_complete(self, s, j, SCHEDRUN_ETIMEOUT, why, NULL);
  }
  if (next != UINT64_MAX) actor_wake_at(self, next);
}
