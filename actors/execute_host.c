/*
 * Programs with host steps (schedrun_builder_host): the recording is one
 * sequence per segment of device steps between host steps (record_walk),
 * and a job runs them in turn. Before a host step the job's buffers are read
 * into host memory; the step's function sees them by name and may change
 * them; afterwards they are written back, so the next segment starts from
 * what it left.
 */
#include <stdlib.h>

#include "actors/execute_state.h"
#include "common/host_task.h"

/* The top-level step of host step k. */
static const prog_step *host_step(const prog_program *p, uint32_t k) {
  for (uint32_t i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == ST_HOST && p->steps[i].u.host.index == k) return &p->steps[i];
  return NULL;
}

static int run_host_step(execute_state *s, const context_run *c, const job_run *jr, uint32_t k, gpu_failure *f,
                         schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  const prog_program *p = c->p;
  const prog_host *h = &p->hosts[k];
  const prog_step *st = host_step(p, k);
  f->tag = st ? st->command : GPU_NO_TAG;
  schedrun_host_task_t t = {jr->id, h->name, NULL, NULL, NULL, 0, 0, NULL, true};
  int rc = SCHEDRUN_OK;
  for (uint32_t b = 0; rc == SCHEDRUN_OK && b < p->nbuffers; b++) {
    uint64_t bytes = p->buffers[b].count * prog_type_size(p->buffers[b].type);
    uint8_t *data = malloc(bytes ? bytes : 1);
    if (!data || host_task_add(&t, p->buffers[b].name, data, bytes) != 0) {
      free(data);
      rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory for buffer '%s'", p->buffers[b].name);
      break;
    }
    rc = be->ops->copy_dtoh(be, s->device, data, c->bindings->v[b], bytes, err);
    if (jr->traffic) jr->traffic->out += bytes;
  }
  if (rc == SCHEDRUN_OK) {
    const char *why = NULL;
    rc = host_task_call(&t, h->fn, h->user, &why);
    if (rc) err_set(err, rc, "host step failed: %s", why);
  }
  for (uint32_t b = 0; rc == SCHEDRUN_OK && b < p->nbuffers; b++) {
    rc = be->ops->copy_htod(be, s->device, c->bindings->v[b], t.data[b], t.bytes[b], err);
    if (jr->traffic) jr->traffic->in += t.bytes[b];
  }
  host_task_clear(&t);
  return rc;
}

int execute_run_segments(execute_state *s, const context_run *c, const job_run *jr, gpu_failure *f,
                         schedrun_error_t *err) {
  gpu_backend *be = s->core->backend;
  gpu_seq *const *segs = (gpu_seq *const *)(uintptr_t)c->sequence;
  int rc = SCHEDRUN_OK;
  for (uint32_t k = 0; rc == SCHEDRUN_OK && k <= c->p->nhosts; k++) {
    rc = be->ops->seq_launch(segs[k], jr->deadline, f, err);
    if (rc == SCHEDRUN_OK && k < c->p->nhosts) {
      if (jr->deadline && now_ns() >= jr->deadline)
        return err_set(err, SCHEDRUN_ETIMEOUT, "job %llu (run %u, job %u) reached its deadline before host step '%s'",
                       (unsigned long long)jr->id, jr->run, jr->job_index, c->p->hosts[k].name);
      rc = run_host_step(s, c, jr, k, f, err);
    }
  }
  return rc;
}
