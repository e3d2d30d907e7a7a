/* Job results: verification against `expect`, and the accessors. */
#include <stdlib.h>
#include <string.h>

#include "lib/result.h"

static bool expected(const prog_program *p, uint32_t b) {
  for (uint32_t i = 0; i < p->nexpects; i++)
    if (p->expects[i].buffer == b) return true;
  return false;
}

schedrun_job_result_t *result_from_complete(uint64_t id, msg_complete *c, const prog_program *p, bool keep) {
  schedrun_job_result_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->id = id;
  r->info = (schedrun_job_info_t){c->status,        c->device,          (int)c->run,       (int)c->job_index, 0,
                               c->compile_ns,    c->record_ns,       c->execute_ns,     c->counts.created,
                               c->counts.updated, c->counts.reused};
  r->t_submit = c->t_submit;
  r->t_compile = c->t_compile;
  r->t_record = c->t_record;
  r->t_execute = c->t_execute;
  r->t_done = c->t_done;
  r->cache_hits = c->cache_hits;
  r->cache_misses = c->cache_misses;
  r->launches = c->launches;
  memset(&c->launches, 0, sizeof c->launches);
  r->info.handoffs_local = c->handoffs_local;
  r->info.handoffs_copied = c->handoffs_copied;
  r->info.handoffs_peer = c->handoffs_peer;
  r->info.bytes_in = c->bytes_in;
  r->info.bytes_out = c->bytes_out;
  r->info.bytes_peer = c->bytes_peer;
  r->parcels = c->parcels; /* the job graph gives them to the jobs that take them */
  memset(&c->parcels, 0, sizeof c->parcels);
  if (c->status != SCHEDRUN_OK) {
    r->error = xstrdup(c->text ? c->text : "");
    return r;
  }
  strbuf why;
  sb_init(&why);
  bool ok = true;
  prog_env env = {{0}}; /* what expected values may depend on */
  env.v[EXV_JOB] = c->job_index;
  env.v[EXV_RUN] = c->run;
  env.v[EXV_DEVICE] = c->device;
  for (size_t i = 0; i < c->outputs.n; i++) {
    const msg_output *o = &c->outputs.v[i];
    if (o->buffer < p->nbuffers && !prog_verify_buffer(p, o->buffer, o->data.data, o->data.len, &env, &why)) {
      ok = false;
      break; /* the first mismatch is the useful one */
    }
  }
  r->info.verified = ok;
  if (!ok) r->info.status = SCHEDRUN_EVERIFY;
  r->error = why.data ? sb_take(&why) : NULL; /* none: "" to the caller */
  if (c->outputs.n == 0) return r;
  /* keep what the caller asked for */
  r->outputs.v = calloc(c->outputs.n, sizeof(msg_output));
  r->names = calloc(c->outputs.n, sizeof(char *));
  for (size_t i = 0; r->outputs.v && r->names && i < c->outputs.n; i++) {
    msg_output *o = &c->outputs.v[i];
    if (o->buffer >= p->nbuffers || (!keep && !expected(p, o->buffer))) continue;
    r->names[r->outputs.n] = xstrdup(p->buffers[o->buffer].name);
    r->outputs.v[r->outputs.n++] = *o;
    memset(o, 0, sizeof *o);
  }
  return r;
}

const schedrun_job_info_t *schedrun_job_result_info(const schedrun_job_result_t *r) { return r ? &r->info : NULL; }

const char *schedrun_job_result_error(const schedrun_job_result_t *r) { return r && r->error ? r->error : ""; }

const void *schedrun_job_result_output(const schedrun_job_result_t *r, const char *buffer, size_t *bytes) {
  if (bytes) *bytes = 0;
  if (!r || !buffer) return NULL;
  for (size_t i = 0; i < r->outputs.n; i++)
    if (r->names[i] && !strcmp(r->names[i], buffer)) {
      if (bytes) *bytes = r->outputs.v[i].data.len;
      return r->outputs.v[i].data.data;
    }
  return NULL;
}

void result_to_complete(schedrun_job_result_t *r, uint64_t program, msg_complete *c) {
  bool mismatch = r->info.status == SCHEDRUN_EVERIFY;
  c->status = mismatch ? SCHEDRUN_OK : r->info.status;
  c->program = program;
  c->device = r->info.device;
  c->run = (uint32_t)r->info.run;
  c->job_index = (uint32_t)r->info.job;
  c->compile_ns = r->info.compile_ns;
  c->record_ns = r->info.record_ns;
  c->execute_ns = r->info.execute_ns;
  c->counts = (msg_counts){(uint32_t)r->info.nodes_created, (uint32_t)r->info.nodes_updated,
                           (uint32_t)r->info.nodes_reused};
  c->cache_hits = r->cache_hits;
  c->cache_misses = r->cache_misses;
  c->t_submit = r->t_submit;
  c->t_compile = r->t_compile;
  c->t_record = r->t_record;
  c->t_execute = r->t_execute;
  c->t_done = r->t_done;
  c->handoffs_local = r->info.handoffs_local;
  c->handoffs_copied = r->info.handoffs_copied;
  c->handoffs_peer = r->info.handoffs_peer;
  c->bytes_in = r->info.bytes_in;
  c->bytes_out = r->info.bytes_out;
  c->bytes_peer = r->info.bytes_peer;
  c->text = xstrdup(mismatch || !r->error ? "" : r->error);
  for (size_t i = 0; i < r->outputs.n; i++) free(r->names[i]);
  free(r->names);
  r->names = NULL;
  c->outputs = r->outputs;
  memset(&r->outputs, 0, sizeof r->outputs);
  c->launches = r->launches;
  memset(&r->launches, 0, sizeof r->launches);
}

void schedrun_job_result_free(schedrun_job_result_t **pr) {
  if (!pr || !*pr) return;
  schedrun_job_result_t *r = *pr;
  for (size_t i = 0; i < r->outputs.n; i++) {
    msg_bytes_free(r->outputs.v[i].data.data, r->outputs.v[i].data.len);
    free(r->names[i]);
  }
  free(r->outputs.v);
  free(r->names);
  free(r->error);
  free(r->launches.v);
  free(r->parcels.v);
  free(r);
  *pr = NULL;
}
