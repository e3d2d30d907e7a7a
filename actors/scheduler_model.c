/*
 * Placement by performance model (perf_model.h), where devices of several
 * kinds share a scheduler (or placement "model" is asked for).
 *
 * Each program gets a model on its first job, read from the cache
 * directory when an earlier process left one. A job goes where it is
 * expected to finish first: the work already placed on a device (each job
 * counted at its expected time) plus the program's mean execute time on
 * the device's kind for the job's size. A kind without PERF_CALIBRATE
 * samples is calibrated first: jobs go there until that many are out, and
 * when every kind has its calibration jobs out and none has its samples
 * yet, later jobs wait (ps->calibrating) until the first times come back.
 * Each job's execute time, from its EXECUTED, is one more sample; the
 * model is written back when the program is released or the scheduler
 * closes.
 *
 * The execute time a device reports covers the job's copies in and out
 * (the execute actor times the whole job), so the data a job must move to
 * a device is in its kind's history; buffers kept on a device (resident
 * ones, hand-offs) pin the job there before the model is asked.
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler_state.h"

void scheduler_model_setup(scheduler_state *s, int placement) {
  gpu_backend *be = s->core->backend;
  s->by_model = placement == SCHEDRUN__PLACE_MODEL || (placement == SCHEDRUN__PLACE_AUTO && s->ntargets > 1);
  s->nkinds = 0;
  for (int d = 0; be && d < s->core->ndevices; d++) {
    char kind[PERF_KIND_MAX];
    gpu_device_kind(be, d, kind, sizeof kind);
    int k = 0;
    while (k < s->nkinds && strcmp(s->kinds[k], kind)) k++;
    if (k == s->nkinds) snprintf(s->kinds[s->nkinds++], PERF_KIND_MAX, "%s", kind);
    s->dev_kind[d] = (uint8_t)k;
  }
}

/* The program's key: its name, kernels and buffers, and how many steps it
 * has (what makes its jobs' times its own), as 64 hex digits. */
static void program_key(const prog_program *p, char out[65]) {
  hash_ctx *h = hash_new();
  if (!h) {
    snprintf(out, 65, "%064x", 0);
    return;
  }
  hash_add_str(h, "schedrun-model-1");
  hash_add_str(h, p->name ? p->name : "");
  for (uint32_t i = 0; i < p->nkernels; i++) {
    hash_add_str(h, p->kernels[i].name);
    hash_add_str(h, p->kernels[i].entry);
    hash_add_str(h, p->kernels[i].source ? p->kernels[i].source : "");
  }
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    uint64_t shape[2] = {(uint64_t)p->buffers[b].type, p->buffers[b].count};
    hash_add_str(h, p->buffers[b].name);
    hash_add_field(h, shape, sizeof shape);
  }
  uint32_t steps[2] = {p->nsteps, p->ncommands};
  hash_add_field(h, steps, sizeof steps);
  hash_final_hex(h, out);
}

/* The program's model and the size its jobs are kept under, made on first
 * use; NULL without memory. */
static perf_model *model_of(scheduler_state *s, prog_state *ps) {
  if (ps->model) return ps->model;
  const prog_program *p = ps->p;
  perf_model *m = p ? malloc(sizeof *m) : NULL;
  if (!m) return NULL;
  char key[65];
  program_key(p, key);
  perf_model_init(m, key);
  if (!s->core->retune) (void)perf_model_load(m, s->core->cache_dir); /* none yet: it calibrates */
  ps->model = m;
  ps->footprint = 0;
  for (uint32_t b = 0; b < p->nbuffers; b++) ps->footprint += p->buffers[b].count * prog_type_size(p->buffers[b].type);
  return m;
}

int scheduler_model_pick(scheduler_state *s, prog_state *ps, job *j) {
  gpu_backend *be = s->core->backend;
  perf_model *m = model_of(s, ps);
  perf_device dv[SCHEDRUN_MAX_DEVICES];
  const perf_hist *hist[SCHEDRUN_MAX_DEVICES] = {0};
  for (int k = 0; m && k < s->nkinds; k++) hist[k] = perf_model_find(m, s->kinds[k], ps->footprint, false);
  bool any = false;
  for (int d = 0; d < s->core->ndevices; d++) {
    int k = s->dev_kind[d];
    dv[d] = (perf_device){.usable = !be->ops->device_lost(be, d) && scheduler_runs_on(s, ps, d),
                          .kind = k,
                          .queued_ns = s->queued_ns[d],
                          .h = hist[k],
                          .out = ps->out[k],
                          .load = s->load[d]};
    any |= dv[d].usable;
  }
  if (!any) return -1;
  double expect = 0;
  int d = perf_choose(dv, s->core->ndevices, &expect);
  if (d < 0) return -2; /* waits for its calibration jobs' times */
  j->expect_ns = expect;
  j->by_model = true;
  return d;
}

void scheduler_model_placed(scheduler_state *s, prog_state *ps, job *j) {
  assert(j->device >= 0 && j->by_model);
  s->queued_ns[j->device] += j->expect_ns;
  ps->out[s->dev_kind[j->device]]++;
  core_count(&s->core->placement_stats[j->device].by_model, 1);
}

void scheduler_model_sample(scheduler_state *s, prog_state *ps, job *j, uint64_t exec_ns) {
  if (!j->by_model || j->device < 0 || !exec_ns) return;
  perf_model *m = model_of(s, ps);
  perf_hist *h = m ? perf_model_find(m, s->kinds[s->dev_kind[j->device]], ps->footprint, true) : NULL;
  if (h) {
    perf_hist_add(h, (double)exec_ns);
    m->dirty = true;
  }
  if (j->expect_ns > 0) {
    /* how far the model was off for this job, relative to what it expected */
    core_placement *cp = &s->core->placement_stats[j->device];
    uint64_t ppm = (uint64_t)llround(fabs((double)exec_ns - j->expect_ns) / j->expect_ns * 1e6);
    core_count(&cp->error_ppm, ppm);
    core_count(&cp->predicted, 1);
  }
}

void scheduler_model_retire(scheduler_state *s, prog_state *ps, job *j) {
  if (!j->by_model || j->device < 0) return;
  double *q = &s->queued_ns[j->device];
  *q = *q > j->expect_ns ? *q - j->expect_ns : 0;
  if (ps && ps->out[s->dev_kind[j->device]]) ps->out[s->dev_kind[j->device]]--;
  j->by_model = false;
}

void scheduler_model_retry(actor_t *self, scheduler_state *s, prog_state *ps) {
  job_queue waiting = ps->calibrating;
  ps->calibrating = (job_queue){0};
  job *j;
  while ((j = scheduler_q_pop(&waiting))) scheduler_place(self, s, ps, j); /* may wait again */
}

void scheduler_model_free(scheduler_state *s, prog_state *ps) {
  if (!ps->model) return;
  if (ps->model->dirty) (void)perf_model_save(ps->model, s->core->cache_dir, NULL); /* else the next process calibrates */
  perf_model_free(ps->model);
  free(ps->model);
  ps->model = NULL;
}
