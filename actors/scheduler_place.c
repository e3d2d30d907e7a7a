/*
 * Placing jobs: the device a job goes to (its pin, the model's choice or the
 * least loaded device that runs its program), the execution context's
 * buffers allocated there on first use, and the jobs of a lost device
 * placed again. See scheduler_dispatch.c for what happens to a job once
 * queued in its context, and scheduler_model.c for placement by model.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler_state.h"

/* Programs whose buffers take this much ask the device for room first. */
#define ROOM_CHECK_BYTES (64ull << 20)

/* Whether the device can hold p's buffers: SCHEDRUN_ENOMEM with both
 * numbers (and the largest buffer) when it cannot. */
static int check_room(scheduler_state *s, const prog_program *p, int device, const uint64_t *borrowed,
                      schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  uint64_t need = 0, largest = 0, room = 0, total = 0;
  uint32_t big = 0;
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    if (borrowed && borrowed[b]) continue; /* the caller's memory, there already */
    uint64_t bytes = p->buffers[b].count * prog_type_size(p->buffers[b].type);
    need += bytes;
    if (bytes > largest) largest = bytes, big = b;
  }
  if (need < ROOM_CHECK_BYTES || !be->ops->mem_room || be->ops->mem_room(be, device, &room, &total, NULL)) return SCHEDRUN_OK;
  if (need <= room) return SCHEDRUN_OK;
  const double gib = 1073741824.0;
  return err_set(err, SCHEDRUN_ENOMEM,
                 "program '%s' needs %llu bytes (%.1f GiB) of buffers on %s (buffer '%s' alone %llu), which can hold "
                 "%llu more bytes (%.1f GiB free of %.1f GiB)",
                 p->name, (unsigned long long)need, need / gib, be->ops->device_name(be, device), p->buffers[big].name,
                 (unsigned long long)largest, (unsigned long long)room, room / gib, total / gib);
}

static int alloc_slot(scheduler_state *s, const prog_program *p, int device, slot_state *ss,
                      schedrun_error_t *err) {
  int room = check_room(s, p, device, ss->borrowed, err);
  if (room) return room;
  ss->bindings = calloc(p->nbuffers ? p->nbuffers : 1, sizeof(uint64_t));
  if (!ss->bindings) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    if (ss->borrowed && ss->borrowed[b]) {
      ss->bindings[b] = ss->borrowed[b]; /* a bound context's buffer is the caller's memory */
      continue;
    }
    uint64_t bytes = p->buffers[b].count * prog_type_size(p->buffers[b].type);
    int rc = s->core->backend->ops->mem_alloc(s->core->backend, device, bytes, &ss->bindings[b], err);
    if (rc) {
      for (uint32_t i = 0; i < b; i++)
        if (!(ss->borrowed && ss->borrowed[i])) s->core->backend->ops->mem_free(s->core->backend, device, ss->bindings[i]);
      free(ss->bindings);
      ss->bindings = NULL;
      return rc;
    }
  }
  return SCHEDRUN_OK;
}

/* A pinned job goes where it is pinned. Otherwise the least loaded device,
 * except that a device already holding this program's recording for the
 * job's slot is preferred while it is at most one job busier: warm recorded
 * state is worth a little imbalance, not an idle device. */
static int pick_device(scheduler_state *s, prog_state *ps, const job *j, slot_state **warm_slot) {
  gpu_backend *be = s->core->backend;
  *warm_slot = NULL;
  if (j->pin >= 0) return be->ops->device_lost(be, j->pin) ? -1 : j->pin;
  int least = -1, warm = -1;
  slot_state *warm_ss = NULL;
  for (int d = 0; d < s->core->ndevices; d++) {
    if (be->ops->device_lost(be, d)) continue; /* lost devices take no more jobs */
    if (!scheduler_runs_on(s, ps, d)) continue;    /* its kernels did not compile for d's target */
    if (least < 0 || s->load[d] < s->load[least]) least = d;
    slot_key sk = {(uint32_t)d, j->slot};
    slot_state *ss = hmap_get(&ps->slots, &sk);
    if (ss && (warm < 0 || s->load[d] < s->load[warm])) {
      warm = d;
      warm_ss = ss;
    }
  }
  if (warm >= 0 && s->load[warm] <= s->load[least] + 1) {
    *warm_slot = warm_ss; /* found already: the caller need not look again */
    return warm;
  }
  return least;
}

void scheduler_place(actor_t *self, scheduler_state *s, prog_state *ps, job *j) {
  const prog_program *p = ps->p;
  assert(ps->id == j->program);
  j->state = JOB_PLACING;
  if (j->kept_from) {
    /* it takes what that job keeps on its device: it runs there, after it */
    const job *x = idmap_get(&s->jobs, j->kept_from);
    if (!x) {
      char why[160];
      snprintf(why, sizeof why, "job %llu, which hands it a buffer, did not reach a device",
               (unsigned long long)j->kept_from);
      scheduler_complete(self, s, j, SCHEDRUN_EDEPEND, why, NULL);
      return;
    }
    if (x->device >= 0) j->pin = x->device;
  }
  slot_state *ss = NULL;
  if (j->pin >= 0 && !scheduler_runs_on(s, ps, j->pin)) {
    scheduler_complete(self, s, j, SCHEDRUN_ECOMPILE, ps->unusable[s->dev_target[j->pin]], NULL);
    return;
  }
  if (s->by_model && j->pin < 0) {
    j->device = scheduler_model_pick(s, ps, j);
    if (j->device == -2) { /* until its program's calibration jobs come back */
      j->device = -1;
      j->state = JOB_PLACED_WAITING;
      scheduler_q_push(&ps->calibrating, j);
      return;
    }
  } else {
    j->device = pick_device(s, ps, j, &ss);
  }
  if (j->device >= 0 && p->nresident) {
    int d = scheduler_resident_place(self, s, ps, j, j->device);
    if (d < 0) return; /* waits to move (ps->moving), or completed: j is not ours to touch */
    if (d != j->device) ss = NULL; /* the warm slot pick_device found is not the one */
    j->device = d;
  }
  if (j->device < 0) {
    gpu_backend *be = s->core->backend;
    int d = j->pin >= 0 ? j->pin : 0;
    while (j->pin < 0 && d + 1 < s->core->ndevices && !scheduler_runs_on(s, ps, d)) d++;
    char why[640];
    snprintf(why, sizeof why, "%s: %s", j->pin >= 0 ? "the job's device is lost" : "every device that runs it is lost",
             be->ops->device_lost(be, d) ? be->ops->device_lost(be, d) : "?");
    scheduler_complete(self, s, j, SCHEDRUN_ELOST, why, NULL);
    return;
  }
  s->load[j->device]++;
  core_count(&s->core->placement_stats[j->device].placed, 1);
  if (j->by_model) scheduler_model_placed(s, ps, j);
  slot_key sk = {(uint32_t)j->device, j->slot};
  if (!ss) ss = hmap_get(&ps->slots, &sk);
  assert(ss == hmap_get(&ps->slots, &sk));
  schedrun_error_t err = {0};
  if (!ss) {
    ss = calloc(1, sizeof *ss);
    if (ss) ss->key = sk;
    if (ss && j->slot >= MAX_SLOTS) {
      assert(j->slot - MAX_SLOTS < ps->nbound); /* made by scheduler_bound_slot */
      ss->borrowed = ps->bound[j->slot - MAX_SLOTS].addr;
    }
    if (!ss || hmap_put(&ps->slots, &sk, ss) != 0) {
      free(ss);
      scheduler_complete(self, s, j, SCHEDRUN_ENOMEM, "out of memory", NULL);
      return;
    }
  }
  if (!ss->bindings && alloc_slot(s, p, j->device, ss, &err) != SCHEDRUN_OK) {
    scheduler_complete(self, s, j, err.code, err.message, NULL); /* still placing: nothing was queued */
    schedrun_error_clear(&err);
    return;
  }
  j->state = JOB_PLACED_WAITING;
  scheduler_q_push(&ss->queue, j);
  scheduler_dispatch_slot(self, s, ps, ss);
}

/* A device was lost: the jobs waiting in its slots' queues go to the other
 * devices (or fail, when they are pinned to it or none is left). */
void scheduler_replace_jobs_of(actor_t *self, scheduler_state *s, int device) {
  size_t n = 0, cap = 0;
  job **moving = NULL;
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->progs, &pos, NULL, &v)) {
    prog_state *ps = v;
    size_t spos = 0;
    const void *k;
    void *sv;
    while (hmap_next(&ps->slots, &spos, &k, &sv)) {
      if (((const slot_key *)k)->device != (uint32_t)device) continue;
      job *j;
      while ((j = scheduler_q_pop(&((slot_state *)sv)->queue))) {
        if (n == cap) {
          cap = cap ? 2 * cap : 16;
          job **m = realloc(moving, cap * sizeof *m);
          if (!m) {
            scheduler_complete(self, s, j, SCHEDRUN_ENOMEM, "out of memory", NULL);
            cap = n;
            continue;
          }
          moving = m;
        }
        moving[n++] = j;
      }
    }
  }
  /* placed after the walk: placing adds slots to the maps walked above */
  for (size_t i = 0; i < n; i++) {
    job *j = moving[i];
    if (s->load[device]) s->load[device]--;
    prog_state *ps = scheduler_prog_get(s, j->program, false);
    if (j->by_model) scheduler_model_retire(s, ps, j);
    if (ps) scheduler_place(self, s, ps, j);
    else scheduler_complete(self, s, j, SCHEDRUN_EINTERNAL, "the job's program is gone", NULL);
  }
  free(moving);
}
