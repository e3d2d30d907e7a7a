/*
 * The scheduler's state (scheduler_state.h): made and freed, programs'
 * state looked up, jobs and their queues freed. The plumbing that moves
 * jobs is in scheduler_dispatch.c.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "actors/exec_ctx_key.h"
#include "actors/scheduler_state.h"

void scheduler_free_outputs(msg_outputs *o) {
  for (size_t i = 0; i < o->n; i++) msg_bytes_free(o->v[i].data.data, o->v[i].data.len);
  free(o->v);
  memset(o, 0, sizeof *o);
}

void scheduler_job_free(scheduler_state *s, job *j) {
  if (!j) return;
  scheduler_free_outputs(&j->inputs);
  /* parcels the job was to take and never did (it failed before it ran):
   * nobody else holds them */
  core_free_parcels(s->core, &j->takes);
  free(j->takes.v);
  free(j->park.v);
  free(j);
}

void scheduler_q_push(job_queue *q, job *j) {
  j->next = NULL;
  if (q->tail) q->tail->next = j;
  else q->head = j;
  q->tail = j;
}

job *scheduler_q_pop(job_queue *q) {
  job *j = q->head;
  if (j) {
    q->head = j->next;
    if (!q->head) q->tail = NULL;
    j->next = NULL;
  }
  return j;
}

scheduler_state *scheduler_state_new(schedrun_core *core) {
  scheduler_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->core = core;
  /* (a core without a backend: the actor alone, in tests) */
  s->ntargets = core->backend ? gpu_target_count(core->backend) : 1;
  for (int d = 0; core->backend && d < core->ndevices; d++)
    s->dev_target[d] = (uint8_t)gpu_device_target(core->backend, d);
  scheduler_model_setup(s, core->placement);
  s->load = calloc((size_t)core->ndevices, sizeof *s->load);
  if (!s->load) {
    free(s);
    return NULL;
  }
  idmap_init(&s->jobs);
  hmap_init(&s->progs, sizeof(uint64_t));
  return s;
}

void scheduler_free_modules(msg_modules *mods) {
  for (size_t i = 0; i < mods->n; i++) {
    free(mods->v[i].name);
    free(mods->v[i].key);
    free(mods->v[i].path);
  }
  free(mods->v);
  memset(mods, 0, sizeof *mods);
}

void scheduler_free_slots(scheduler_state *s, prog_state *ps) {
  const prog_program *p = ps->p;
  size_t pos = 0;
  const void *k;
  void *v;
  while (hmap_next(&ps->slots, &pos, &k, &v)) {
    slot_state *ss = v;
    const slot_key *sk = k;
    for (uint32_t b = 0; ss->bindings && p && b < p->nbuffers; b++)
      if (ss->bindings[b] && !(ss->borrowed && ss->borrowed[b]))
        s->core->backend->ops->mem_free(s->core->backend, (int)sk->device, ss->bindings[b]);
    free(ss->bindings);
    free(ss);
  }
  hmap_destroy(&ps->slots);
}

void scheduler_prog_state_free(scheduler_state *s, prog_state *ps) {
  if (s->last_prog == ps) s->last_prog = NULL;
  scheduler_free_slots(s, ps);
  for (uint32_t i = 0; i < ps->nbound; i++) free(ps->bound[i].addr);
  free(ps->bound);
  scheduler_model_free(s, ps);
  for (int t = 0; t < GPU_MAX_TARGETS; t++) {
    scheduler_free_modules(&ps->modules[t]);
    free(ps->unusable[t]);
  }
  free(ps);
}

void scheduler_state_free(scheduler_state *s) {
  if (!s) return;
  size_t pos = 0;
  void *v;
  while (idmap_next(&s->jobs, &pos, NULL, &v)) scheduler_job_free(s, v);
  idmap_destroy(&s->jobs);
  pos = 0;
  while (hmap_next(&s->progs, &pos, NULL, &v)) scheduler_prog_state_free(s, v);
  hmap_destroy(&s->progs);
  free(s->dirty);
  free(s->load);
  free(s);
}

prog_state *scheduler_prog_get(scheduler_state *s, uint64_t id, bool create) {
  /* a job's messages look its program up several times, and jobs in a row
   * mostly share one: the last found is tried first */
  if (s->last_prog && s->last_prog->id == id) {
    assert(hmap_get(&s->progs, &id) == s->last_prog);
    return s->last_prog;
  }
  prog_state *ps = hmap_get(&s->progs, &id);
  if (ps) s->last_prog = ps;
  if (ps || !create) return ps;
  ps = calloc(1, sizeof *ps);
  if (!ps) return NULL;
  ps->id = id;
  ps->p = core_program(s->core, id);
  memset(ps->home, -1, sizeof ps->home); /* no buffer set's resident buffers are anywhere yet */
  hmap_init(&ps->slots, sizeof(slot_key));
  if (hmap_put(&s->progs, &id, ps) != 0) {
    free(ps);
    return NULL;
  }
  s->last_prog = ps;
  return ps;
}

/* ---- bound contexts ---- */

const char *scheduler_bound_slot(prog_state *ps, job *j) {
  const prog_program *p = ps->p;
  uint64_t *want = NULL;
  for (size_t i = 0; i + 2 < j->takes.n; i += 3) {
    if (!(j->takes.v[i] & MSG_TAKE_BOUND) || !j->takes.v[i + 2]) continue;
    if (p->nresident) {
      free(want);
      return "memory devices reach is bound in a program with resident buffers";
    }
    if (!want && !(want = calloc(p->nbuffers, sizeof *want))) return "out of memory";
    uint32_t b = MSG_TAKE_BUFFER(j->takes.v[i]);
    assert(b < p->nbuffers); /* handoffs_fit checked it */
    want[b] = j->takes.v[i + 2];
  }
  if (!want) return NULL;
  assert(j->slot < MAX_SLOTS); /* the SUBMIT's buffer set */
  for (uint32_t k = 0; k < ps->nbound; k++)
    if (ps->bound[k].base == j->slot && !memcmp(ps->bound[k].addr, want, p->nbuffers * sizeof *want)) {
      free(want);
      j->slot = MAX_SLOTS + k;
      return NULL;
    }
  if (ps->nbound == MAX_BOUND) {
    free(want);
    return "the program's jobs were bound to more than 1024 different sets of memory devices reach";
  }
  if (ps->nbound == ps->bound_cap) {
    uint32_t cap = ps->bound_cap ? 2 * ps->bound_cap : 4;
    bound_ctx *v = realloc(ps->bound, cap * sizeof *v);
    if (!v) {
      free(want);
      return "out of memory";
    }
    ps->bound = v;
    ps->bound_cap = cap;
  }
  ps->bound[ps->nbound] = (bound_ctx){j->slot, want};
  j->slot = MAX_SLOTS + ps->nbound++;
  return NULL;
}
