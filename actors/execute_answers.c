/*
 * The answers of an EXECUTE_MANY's jobs (execute_many.c), in columns: one
 * COMPLETE_MANY to the client and one EXECUTED_MANY to the scheduler per
 * FLUSH_JOBS jobs or FLUSH_BYTES of outputs, and at the end; a timed job
 * answers alone with its node times.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "actors/execute_state.h"


#define NCOMPLETE_COLS 13
static void complete_cols(msg_complete_many *c, msg_u64s **cols) {
  msg_u64s *v[NCOMPLETE_COLS] = {&c->jobs,          &c->runs,           &c->job_indexes,   &c->t_submits,
                                 &c->t_executes,    &c->t_dones,        &c->execute_ns,    &c->handoffs_local,
                                 &c->handoffs_copied, &c->handoffs_peer, &c->bytes_in,      &c->bytes_out,
                                 &c->bytes_peer};
  memcpy(cols, v, sizeof v);
}

/* Appends the parcels a job left (its batch position `job`); false
 * without memory (the caller frees them then). */
bool batch_parcels(batch_out *b, size_t job, const msg_u64s *parcels) {
  msg_complete_many *c = &b->complete.body.complete_many;
  size_t need = c->parcels.n + parcels->n;
  if (need > b->pcap) {
    size_t cap = b->pcap ? 2 * b->pcap : 8;
    while (cap < need) cap *= 2;
    uint64_t *pv = realloc(c->parcels.v, cap * sizeof *pv);
    if (pv) c->parcels.v = pv;
    uint64_t *jv = pv ? realloc(c->parcel_jobs.v, cap * sizeof *jv) : NULL;
    if (!jv) return false;
    c->parcel_jobs.v = jv;
    b->pcap = cap;
  }
  for (size_t i = 0; i < parcels->n; i++) {
    c->parcels.v[c->parcels.n++] = parcels->v[i];
    c->parcel_jobs.v[c->parcel_jobs.n++] = job;
  }
  return true;
}

void batch_begin(batch_out *b, execute_state *s, const msg_execute_many *x, const char *client,
                        const char *scheduler) {
  memset(b, 0, sizeof *b);
  msg_init(&b->complete, MSG_COMPLETE_MANY, 0, s->name);
  msg_init(&b->executed, MSG_EXECUTED_MANY, 0, s->name);
  b->complete.body.complete_many.program = x->program;
  b->complete.body.complete_many.device = s->device;
  b->complete.body.complete_many.nodes = x->nodes;
  b->executed.body.executed_many.program = x->program;
  b->executed.body.executed_many.device = (uint32_t)s->device;
  b->client = client;
  b->scheduler = scheduler;
  b->core = s->core;
}

/* Room for `more` jobs in every column; false without memory. */
bool batch_room(batch_out *b, size_t more) {
  size_t need = b->complete.body.complete_many.jobs.n + more;
  if (need <= b->cap) return true;
  size_t cap = b->cap ? 2 * b->cap : 16;
  while (cap < need) cap *= 2;
  msg_u64s *cols[NCOMPLETE_COLS + 2];
  complete_cols(&b->complete.body.complete_many, cols);
  cols[NCOMPLETE_COLS] = &b->executed.body.executed_many.jobs;
  cols[NCOMPLETE_COLS + 1] = &b->executed.body.executed_many.exec_ns;
  for (size_t c = 0; c <= NCOMPLETE_COLS + 1; c++) {
    uint64_t *v = realloc(cols[c]->v, cap * sizeof *v);
    if (!v) return false;
    cols[c]->v = v;
  }
  b->cap = cap;
  return true;
}

/* Room in output_jobs for `need` outputs; false without memory. */
bool batch_output_jobs(batch_out *b, size_t need) {
  if (need <= b->ojcap) return true;
  size_t cap = b->ojcap ? 2 * b->ojcap : 4;
  while (cap < need) cap *= 2;
  uint64_t *oj = realloc(b->complete.body.complete_many.output_jobs.v, cap * sizeof *oj);
  if (!oj) return false;
  b->complete.body.complete_many.output_jobs.v = oj;
  b->ojcap = cap;
  return true;
}

/* Room for one more output (and its entry in output_jobs). */
msg_output *batch_output(batch_out *b) {
  msg_complete_many *c = &b->complete.body.complete_many;
  if (!batch_output_jobs(b, c->outputs.n + 1)) return NULL;
  return execute_add_output(&c->outputs, &b->ocap);
}

/* Drops outputs [from, n) that no job will answer with. */
void batch_drop_outputs(batch_out *b, size_t from) {
  msg_outputs *o = &b->complete.body.complete_many.outputs;
  for (size_t i = from; i < o->n; i++) msg_bytes_free(o->v[i].data.data, o->v[i].data.len);
  o->n = from;
}

void batch_flush(actor_t *self, batch_out *b) {
  msg_complete_many *c = &b->complete.body.complete_many;
  if (c->jobs.n == 0) return;
  b->complete.job = c->jobs.v[0];
  b->executed.job = c->jobs.v[0];
  c->output_jobs.n = c->outputs.n;
  core_send_complete(self, b->core, b->client, &b->complete);
  core_send_executed(self, b->core, b->scheduler, &b->executed);
  msg_u64s *cols[NCOMPLETE_COLS];
  complete_cols(c, cols);
  for (size_t k = 0; k < NCOMPLETE_COLS; k++) cols[k]->n = 0;
  b->executed.body.executed_many.jobs.n = b->executed.body.executed_many.exec_ns.n = 0;
  batch_drop_outputs(b, 0);
  c->output_jobs.n = 0;
  c->parcels.n = c->parcel_jobs.n = 0; /* the client's now */
  b->out_bytes = 0;
}

void batch_end(actor_t *self, batch_out *b) {
  batch_flush(self, b);
  msg_free(&b->complete);
  msg_free(&b->executed);
}

/* Job jr succeeded; its outputs are [outs_from, outputs.n). batch_room was
 * called for it. */
void batch_add(batch_out *b, const job_run *jr, uint64_t t_submit, uint64_t t0, uint64_t t1, size_t outs_from) {
  msg_complete_many *cm = &b->complete.body.complete_many;
  size_t n = cm->jobs.n;
  assert(n < b->cap);
  cm->jobs.v[n] = jr->id;
  cm->runs.v[n] = jr->run;
  cm->job_indexes.v[n] = jr->job_index;
  cm->t_submits.v[n] = t_submit;
  cm->t_executes.v[n] = t0;
  cm->t_dones.v[n] = t1;
  cm->execute_ns.v[n] = t1 - t0;
  const job_traffic none = {0}, *t = jr->traffic ? jr->traffic : &none;
  cm->handoffs_local.v[n] = t->local;
  cm->handoffs_copied.v[n] = t->copied;
  cm->handoffs_peer.v[n] = t->peer;
  cm->bytes_in.v[n] = t->in;
  cm->bytes_out.v[n] = t->out;
  cm->bytes_peer.v[n] = t->across;
  b->executed.body.executed_many.jobs.v[n] = jr->id;
  b->executed.body.executed_many.exec_ns.v[n] = t1 - t0;
  msg_u64s *cols[NCOMPLETE_COLS];
  complete_cols(cm, cols);
  for (size_t i = 0; i < NCOMPLETE_COLS; i++) cols[i]->n = n + 1;
  b->executed.body.executed_many.jobs.n = b->executed.body.executed_many.exec_ns.n = n + 1;
  for (size_t i = outs_from; i < cm->outputs.n; i++) {
    cm->output_jobs.v[i] = n;
    b->out_bytes += cm->outputs.v[i].data.len;
  }
}

void batch_flush_if_full(actor_t *self, batch_out *b) {
  if (b->complete.body.complete_many.jobs.n >= FLUSH_JOBS || b->out_bytes >= FLUSH_BYTES) batch_flush(self, b);
}

/* A timed job answers alone, with its node times; the answers before it go
 * first. Its outputs are [outs_from, outputs.n) of the batch. */
void answer_timed(actor_t *self, execute_state *s, batch_out *b, const msg_execute_many *x, const job_run *jr,
                         uint64_t t_submit, uint64_t t0, uint64_t t1, size_t outs_from, uint32_t ntimed,
                         msg_u64s *parcels) {
  msg_outputs *bo = &b->complete.body.complete_many.outputs;
  msg_outputs mine = {NULL, 0};
  size_t nmine = bo->n - outs_from;
  if (nmine && (mine.v = malloc(nmine * sizeof *mine.v))) {
    memcpy(mine.v, bo->v + outs_from, nmine * sizeof *mine.v);
    mine.n = nmine;
    bo->n = outs_from; /* moved */
  }
  batch_drop_outputs(b, outs_from);
  batch_flush(self, b);
  msg one;
  msg_init(&one, MSG_COMPLETE, jr->id, s->name);
  msg_complete *cp = &one.body.complete;
  cp->program = x->program;
  cp->run = jr->run;
  cp->job_index = jr->job_index;
  cp->status = mine.n == nmine ? SCHEDRUN_OK : SCHEDRUN_ENOMEM;
  cp->outputs = mine;
  cp->counts = (msg_counts){0, 0, x->nodes};
  if (cp->status) cp->text = xstrdup("out of memory");
  cp->t_submit = t_submit;
  cp->parcels = *parcels; /* taken */
  memset(parcels, 0, sizeof *parcels);
  const job_traffic none = {0};
  execute_traffic_out(jr->traffic ? jr->traffic : &none, cp);
  execute_answer(self, s, &one, ntimed, t0, t1, b->client, b->scheduler);
  msg_free(&one);
}

