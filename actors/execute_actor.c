/*
 * An execute actor: one per device. It owns the device's queue (on the host
 * backend, its own thread) and runs one job at a time on it: re-initialise the
 * job's buffers from the program's `init`, replay the recorded sequence, read
 * back the buffers the job needs, answer EXECUTED. The per-launch path is the
 * replay inside the backend; no message is sent per kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actor.h"
#include "actors/core.h"

_Static_assert(PROG_MAX_BUFFER_BYTES + (1u << 20) <= MSG_MAX_BYTES,
              "a job's buffers fit one message (EXECUTE in, COMPLETE out)");
_Static_assert(PROG_MAX_SOURCE_BYTES <= MSG_MAX_STRING, "a kernel's source fits one string of a message");

/* The first jobs of a device have their replay timed node by node (for the
 * trace), when the backend can: so many jobs, so many nodes each. */
#define TIMED_JOBS 16
#define TIMED_NODES 1024

struct execute_state {
  schedrun_core *core;
  int device;
  char name[32];
  uint32_t timed; /* jobs timed so far */
  uint64_t *times; /* TIMED_NODES {tag, start, end}, while timing */
};

execute_state *execute_state_new(schedrun_core *core, int device) {
  execute_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->core = core;
  s->device = device;
  snprintf(s->name, sizeof s->name, ACTOR_EXECUTE_FMT, device);
  return s;
}

void execute_state_free(execute_state *s) {
  if (s) free(s->times);
  free(s);
}

static bool wanted(const prog_program *p, uint32_t b, bool keep) {
  if (keep) return true;
  for (uint32_t i = 0; i < p->nexpects; i++)
    if (p->expects[i].buffer == b) return true;
  return false;
}

static void handle_execute(actor_t *self, execute_state *s, msg *m) {
  const msg_execute *x = &m->body.execute;
  const prog_program *p = core_program(s->core, x->program);
  gpu_backend *be = s->core->backend;
  schedrun_error_t err = {0};
  int rc = SCHEDRUN_OK;
  msg reply;
  msg_init(&reply, MSG_EXECUTED, m->job, s->name);
  msg_executed *out = &reply.body.executed;
  out->program = x->program;
  out->device = (uint32_t)s->device;
  uint64_t t0 = now_ns();
  if (!p) rc = err_set(&err, SCHEDRUN_EPROTO, "EXECUTE names unknown program %llu", (unsigned long long)x->program);
  else if (x->device != (uint32_t)s->device)
    rc = err_set(&err, SCHEDRUN_EPROTO, "EXECUTE for device %u reached %s", x->device, s->name);
  else if (x->bindings.n != p->nbuffers || x->sequence == 0)
    rc = err_set(&err, SCHEDRUN_EPROTO, "EXECUTE binds %zu buffers (program has %u) or has no sequence",
                 x->bindings.n, p->nbuffers);
  for (uint32_t b = 0; rc == SCHEDRUN_OK && b < p->nbuffers; b++) {
    const prog_buffer *buf = &p->buffers[b];
    uint64_t bytes = buf->count * prog_type_size(buf->type);
    const uint8_t *src = buf->image;
    for (size_t i = 0; i < x->inputs.n; i++)
      if (x->inputs.v[i].buffer == b) {
        if (x->inputs.v[i].data.len != bytes) {
          rc = err_set(&err, SCHEDRUN_EPROTO, "EXECUTE input for buffer '%s' has %zu bytes, not %llu", buf->name,
                       x->inputs.v[i].data.len, (unsigned long long)bytes);
          break;
        }
        src = x->inputs.v[i].data.data;
      }
    if (rc) break;
    rc = src ? be->ops->copy_htod(be, s->device, x->bindings.v[b], src, bytes, &err)
             : be->ops->mem_zero(be, s->device, x->bindings.v[b], bytes, &err);
  }
  gpu_failure f = {GPU_NO_TAG, false};
  uint32_t ntimed = 0;
  if (rc == SCHEDRUN_OK && x->deadline && now_ns() >= x->deadline)
    rc = err_set(&err, SCHEDRUN_ETIMEOUT, "job %llu (run %u, job %u) reached its deadline before it started on %s",
                 (unsigned long long)m->job, x->run, x->job_index, be->ops->device_name(be, s->device));
  else if (rc == SCHEDRUN_OK) {
    if (s->timed < TIMED_JOBS && be->ops->seq_launch_timed && !s->times)
      s->times = malloc(TIMED_NODES * 3 * sizeof *s->times); /* freed once the last timed job is answered */
    if (s->timed < TIMED_JOBS && s->times) {
      s->timed++;
      rc = be->ops->seq_launch_timed((gpu_seq *)(uintptr_t)x->sequence, x->deadline, &f, s->times, TIMED_NODES,
                                     &ntimed, &err);
    } else {
      rc = be->ops->seq_launch((gpu_seq *)(uintptr_t)x->sequence, x->deadline, &f, &err);
    }
    if (rc) {
      /* name the step that was running, and the job */
      char what[512];
      if (f.tag != GPU_NO_TAG) prog_describe_command(p, f.tag, what, sizeof what);
      else snprintf(what, sizeof what, "'%s'", p->name);
      schedrun_error_t named = {0};
      err_set(&named, rc, "%s, in %s, job %llu (run %u, job %u)", err.message ? err.message : "launch failed", what,
              (unsigned long long)m->job, x->run, x->job_index);
      err_move(&err, &named);
    }
  }
  if (rc == SCHEDRUN_OK) {
    uint32_t n = 0;
    for (uint32_t b = 0; b < p->nbuffers; b++) n += wanted(p, b, x->keep);
    out->outputs.v = calloc(n ? n : 1, sizeof(msg_output));
    if (!out->outputs.v) rc = err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
    for (uint32_t b = 0; rc == SCHEDRUN_OK && b < p->nbuffers; b++) {
      if (!wanted(p, b, x->keep)) continue;
      const prog_buffer *buf = &p->buffers[b];
      uint64_t bytes = buf->count * prog_type_size(buf->type);
      msg_output *o = &out->outputs.v[out->outputs.n];
      o->buffer = b;
      o->data.data = malloc(bytes ? bytes : 1);
      if (!o->data.data) {
        rc = err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
        break;
      }
      o->data.len = bytes;
      out->outputs.n++;
      rc = be->ops->copy_dtoh(be, s->device, o->data.data, x->bindings.v[b], bytes, &err);
    }
  }
  out->exec_start = t0;
  out->exec_ns = now_ns() - t0;
  if (rc) {
    /* the scheduler completes the job with the error */
    char lost[64];
    snprintf(lost, sizeof lost, "mark %s lost: later jobs go to the other devices",
             be->ops->device_name(be, s->device));
    const char *steps[] = {f.lost ? lost : "leave the device idle for the next job"};
    actor_send_error(self, m->from, m->job, rc, err.message ? err.message : "execute failed", steps, 1);
  } else {
    /* the answer goes straight to the client, one hop sooner; the scheduler
     * hears EXECUTED, without the outputs, after it */
    msg c;
    msg_init(&c, MSG_COMPLETE, m->job, s->name);
    msg_complete *cp = &c.body.complete;
    cp->status = SCHEDRUN_OK;
    cp->program = x->program;
    cp->device = s->device;
    cp->run = x->run;
    cp->job_index = x->job_index;
    cp->outputs = out->outputs;
    memset(&out->outputs, 0, sizeof out->outputs);
    if (ntimed && (cp->launches.v = malloc((size_t)ntimed * 3 * sizeof(uint64_t)))) {
      memcpy(cp->launches.v, s->times, (size_t)ntimed * 3 * sizeof(uint64_t));
      cp->launches.n = (size_t)ntimed * 3;
    }
    if (s->timed == TIMED_JOBS && s->times) {
      free(s->times); /* timing is over for this device */
      s->times = NULL;
    }
    cp->compile_ns = x->compile_ns;
    cp->record_ns = x->record_ns;
    cp->execute_ns = out->exec_ns;
    cp->counts = x->counts;
    cp->cache_hits = x->cache_hits;
    cp->cache_misses = x->cache_misses;
    cp->text = xstrdup("");
    cp->t_submit = x->t_submit;
    cp->t_compile = x->t_compile;
    cp->t_record = x->t_record;
    cp->t_execute = out->exec_start;
    cp->t_done = now_ns();
    actor_send(self, x->client && *x->client ? x->client : ACTOR_CLIENT, &c);
    msg_free(&c);
    actor_send(self, m->from, &reply);
  }
  msg_free(&reply);
  schedrun_error_clear(&err);
}

static int execute_handle(actor_t *self, msg *m) {
  execute_state *s = actor_state(self);
  switch (m->type) {
  case MSG_EXECUTE: handle_execute(self, s, m); return ACTOR_CONTINUE;
  case MSG_TERM: return ACTOR_STOP;
  default: return ACTOR_CONTINUE;
  }
}

const actor_def execute_actor_def = {NULL, execute_handle, NULL};
