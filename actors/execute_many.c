/*
 * EXECUTE_MANY in the execute actor: the jobs of one execution context, run
 * in turn. Consecutive jobs that need nothing of their own from the device
 * (no node timing, the same deadline or none) go to it as one submission
 * (run_batch, until that deadline: each
 * job's buffer fills, its replay and its reads back, in order), so a batch
 * of small jobs costs one wake of the device instead of one per job. Answers
 * go in columns too: COMPLETE_MANY to the client, EXECUTED_MANY to the
 * scheduler, every FLUSH_JOBS jobs and at the end. A job that fails is
 * answered alone (ERROR to the scheduler); so is a timed one (its COMPLETE
 * carries its node times).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/execute_state.h"

/* At most this many bytes staged (filled or read back) per submission; a
 * job with more runs alone, except where the device can queue a submission
 * while another runs (batch_begin): there one job of up to SEGMENT_BYTES_ONE
 * goes as a submission of its own, so that its copies are asynchronous and
 * may run beside the kernels of the one before (its staging is that big,
 * twice: pinned memory, which the system cannot page). */
#define SEGMENT_BYTES (8u << 20)
#define SEGMENT_BYTES_ONE (256u << 20)


static size_t *starts(const msg_u64s *owners, size_t n) {
  size_t *at = malloc((n + 1) * sizeof *at);
  for (size_t k = 0, i = 0; at && k <= n; k++) {
    at[k] = i;
    while (k < n && i < owners->n && owners->v[i] == k) i++;
  }
  return at;
}

/* Job k of x, with its own inputs, parked buffers and taken parcels (lent). */
static job_run job_of(const msg_execute_many *x, const job_at *at, size_t k) {
  job_run jr = {x->jobs.v[k],      (uint32_t)x->runs.v[k], (uint32_t)x->job_indexes.v[k], (uint32_t)x->keeps.v[k],
                x->deadlines.v[k], x->inputs.v ? x->inputs.v + at->in[k] : NULL, at->in[k + 1] - at->in[k],
                {NULL, 0},         {NULL, 0},  NULL};
  if (at->take[k + 1] > at->take[k]) jr.takes = (msg_u64s){x->takes.v + 3 * at->take[k], 3 * (at->take[k + 1] - at->take[k])};
  if (at->park[k + 1] > at->park[k]) jr.park = (msg_u64s){x->park.v + at->park[k], at->park[k + 1] - at->park[k]};
  return jr;
}

/* The contents job jr's buffer b starts from: its input, the program's
 * `init`, or NULL (zeros). *ok is false when an input has the wrong size. */
static const uint8_t *buffer_source(const prog_program *p, const job_run *jr, uint32_t b, bool *ok) {
  const prog_buffer *buf = &p->buffers[b];
  const uint8_t *src = buf->image;
  for (size_t i = 0; i < jr->ninputs; i++)
    if (jr->inputs[i].buffer == b) {
      if (jr->inputs[i].data.len != buf->count * prog_type_size(buf->type)) *ok = false;
      src = jr->inputs[i].data.data;
    }
  return src;
}

/* The bytes job jr stages in a submission, or UINT64_MAX when it must run
 * alone (timing, an input of the wrong size). */
static uint64_t staged_bytes(const execute_state *s, const prog_program *p, const job_run *jr) {
  /* parcels that travel in messages: alone; what is kept here goes in the submission */
  if (execute_timing(s) || !kept_only(jr)) return UINT64_MAX;
  uint64_t total = 0;
  bool ok = true;
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    uint64_t bytes = p->buffers[b].count * prog_type_size(p->buffers[b].type);
    if (!execute_stays(p, jr, b) && buffer_source(p, jr, b, &ok)) total += bytes;
    if (execute_wanted(p, b, jr->keep)) total += bytes;
  }
  return ok ? total : UINT64_MAX;
}

/* Runs job k alone (the one-job path); its answer joins the batch. The
 * parcels it takes are consumed whatever happens; those it leaves go with
 * its answer. */
static void run_alone(actor_t *self, execute_state *s, const context_run *c, const msg_execute_many *x, job_run *jr,
                      uint64_t t_submit, batch_out *b) {
  schedrun_error_t err = {0};
  gpu_failure f = {GPU_NO_TAG, false};
  uint32_t ntimed = 0;
  job_traffic traffic = {0};
  msg_complete_many *cm = &b->complete.body.complete_many;
  size_t outs_from = cm->outputs.n;
  msg_u64s parcels = {NULL, 0};
  jr->traffic = &traffic;
  uint64_t t0 = now_ns();
  kept_plan kp = {0};
  size_t copies_ran = 0;
  int rc = batch_room(b, 1) ? SCHEDRUN_OK : err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
  if (rc == SCHEDRUN_OK) rc = kept_before_job(s, c, jr, &kp, &copies_ran, &err);
  if (rc == SCHEDRUN_OK) rc = execute_run_job(s, c, jr, &cm->outputs, &b->ocap, &ntimed, &f, &err);
  core_free_parcels(s->core, &jr->takes);
  if (rc == SCHEDRUN_OK && jr->park.n) rc = execute_park(s, c, &jr->park, &parcels, &err);
  if (rc == SCHEDRUN_OK && !batch_output_jobs(b, cm->outputs.n)) rc = err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
  if (rc == SCHEDRUN_OK && !ntimed && !batch_parcels(b, cm->jobs.n, &parcels))
    rc = err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
  kept_commit(s, &kp, rc ? 0 : SIZE_MAX, copies_ran);
  kept_plan_free(&kp);
  if (rc) {
    execute_drop_parcels(s, &parcels);
    batch_drop_outputs(b, outs_from);
    execute_job_failed(self, s, b->scheduler, jr->id, rc, &f, &err);
    schedrun_error_clear(&err);
    return;
  }
  uint64_t t1 = now_ns();
  if (ntimed) {
    answer_timed(self, s, b, x, jr, t_submit, t0, t1, outs_from, ntimed, &parcels);
  } else {
    batch_add(b, jr, t_submit, t0, t1, outs_from);
    free(parcels.v); /* copied into the batch */
  }
  jr->traffic = NULL;
}

/* Where the device holds program p's `init` for buffer b (uploaded now
 * when there is room), or 0: the bytes are staged instead. A submission
 * only adds entries (its steps may read any of them); image_flush makes
 * room between submissions. */
/* The image the device keeps of program's buffer b, or NULL. */
static const image_copy *image_find(const execute_state *s, uint64_t program, uint32_t b) {
  for (uint32_t i = 0; i < s->nimages; i++)
    if (s->images[i].program == program && s->images[i].buffer == b) return &s->images[i];
  return NULL;
}

static uint64_t image_on_device(execute_state *s, uint64_t program, const prog_program *p, uint32_t b) {
  const prog_buffer *buf = &p->buffers[b];
  uint64_t bytes = buf->count * prog_type_size(buf->type);
  const image_copy *kept = image_find(s, program, b);
  if (kept) return kept->addr;
  if (s->nimages == IMAGE_COPIES || s->image_bytes + bytes > IMAGE_BYTES || !bytes) return 0;
  gpu_backend *be = s->core->backend;
  uint64_t addr = 0;
  schedrun_error_t err = {0};
  int rc = be->ops->mem_alloc(be, s->device, bytes, &addr, &err);
  if (rc == SCHEDRUN_OK && be->ops->copy_htod(be, s->device, addr, buf->image, bytes, &err) != SCHEDRUN_OK) {
    be->ops->mem_free(be, s->device, addr);
    rc = SCHEDRUN_EINTERNAL;
  }
  schedrun_error_clear(&err);
  if (rc) return 0;
  s->images[s->nimages++] = (image_copy){program, b, addr, bytes};
  s->image_bytes += bytes;
  return addr;
}

void execute_images_free(execute_state *s) {
  gpu_backend *be = s->core->backend;
  for (uint32_t i = 0; i < s->nimages; i++) be->ops->mem_free(be, s->device, s->images[i].addr);
  s->nimages = 0;
  s->image_bytes = 0;
}

bool images_full(const execute_state *s, const many_run *mr) {
  const prog_program *p = mr->c.p;
  uint64_t program = mr->m.body.execute_many.program;
  uint32_t n = s->nimages;
  uint64_t bytes = s->image_bytes;
  for (uint32_t b = 0; b < p->nbuffers; b++) {
    uint64_t need = p->buffers[b].count * prog_type_size(p->buffers[b].type);
    if (!p->buffers[b].image || !need || need > IMAGE_BYTES) continue; /* never an image */
    if (image_find(s, program, b)) continue;
    if (n == IMAGE_COPIES || bytes + need > IMAGE_BYTES) {
      /* no room: freeing helps only when other programs' images hold it
       * (this program's stay; what does not fit beside them is staged) */
      for (uint32_t i = 0; i < s->nimages; i++)
        if (s->images[i].program != program) return true;
      return false;
    }
    n++;
    bytes += need;
  }
  return false;
}

/* Frees the images when the program's `init` images would not all fit
 * beside other programs' images, before a submission plans any step (no
 * submission that may read them is out). An image the device keeps stays
 * while its program runs: one freed at every submission would be uploaded
 * again each time. */
static void image_flush(execute_state *s, const many_run *mr) {
  if (!images_full(s, mr)) return;
  assert(!s->pending);
  execute_images_free(s);
}


static bool op_add_kept(ops_buf *o, gpu_batch_op op, bool kept) {
  if (o->n == o->cap) {
    size_t cap = o->cap ? 2 * o->cap : 64;
    gpu_batch_op *v = realloc(o->v, cap * sizeof *v);
    if (v) o->v = v;
    bool *k = v ? realloc(o->kept, cap * sizeof *k) : NULL;
    if (!k) return false;
    o->kept = k;
    o->cap = cap;
  }
  o->kept[o->n] = kept;
  o->v[o->n++] = op;
  return true;
}

static bool op_add(ops_buf *o, gpu_batch_op op) { return op_add_kept(o, op, false); }

void seg_free(seg_run *sg) {
  kept_plan_free(&sg->kp);
  free(sg->ops.v);
  free(sg->ops.kept);
  free(sg->seq_at);
  free(sg->end_at);
  free(sg->outs_end);
  free(sg->hand);
  memset(sg, 0, sizeof *sg);
}

/* Plans jobs [k0, k1) as one submission into *sg (fewer when a job must
 * fail alone: sg->nj); false when it cannot (no memory). What the jobs
 * keep on the device and take from it is planned on a scratch copy of the
 * device's table. */
bool seg_plan(execute_state *s, many_run *mr, size_t k0, size_t k1, seg_run *sg) {
  const context_run *c = &mr->c;
  const msg_execute_many *x = &mr->m.body.execute_many;
  const job_at *at = &mr->at;
  batch_out *b = &mr->b;
  const prog_program *p = c->p;
  memset(sg, 0, sizeof *sg);
  size_t nj = k1 - k0;
  sg->k0 = k0;
  sg->seq_at = malloc(nj * sizeof *sg->seq_at);
  sg->end_at = malloc(nj * sizeof *sg->end_at);
  sg->outs_end = malloc(nj * sizeof *sg->outs_end);
  sg->hand = calloc(nj, sizeof *sg->hand);
  msg_complete_many *cm = &b->complete.body.complete_many;
  sg->outs0 = cm->outputs.n;
  ops_buf *ops = &sg->ops;
  kept_plan *kp = &sg->kp;
  kept_table scratch = {NULL, 0, 0};
  image_flush(s, mr);
  bool ok = sg->seq_at && sg->end_at && sg->outs_end && sg->hand && batch_room(b, nj) && kept_scratch(s, &scratch);
  for (size_t i = 0; ok && i < nj; i++) {
    job_run jr = job_of(x, at, k0 + i);
    jr.traffic = &sg->hand[i];
    size_t nch = kp->nchanges, ncp = kp->ncopies;
    if (jr.takes.n || jr.park.n || scratch.n) {
      schedrun_error_t perr = {0};
      int prc = kept_plan_job(s, &scratch, c, &jr, i, kp, &perr);
      schedrun_error_clear(&perr);
      if (prc) {
        /* it fails alone, saying why; the jobs before it go now */
        kept_plan_truncate(s, kp, nch, ncp);
        nj = i;
        break;
      }
    }
    for (size_t j = ncp; ok && j < kp->ncopies; j += 3)
      ok = op_add_kept(ops, (gpu_batch_op){GB_DTOD, kp->copies[j], kp->copies[j + 2], NULL, NULL, NULL, 0, kp->copies[j + 1]},
                       true);
    sg->kept_steps |= kp->ncopies > 0;
    for (uint32_t bi = 0; ok && bi < p->nbuffers; bi++) {
      if (execute_taken(&jr.takes, bi) || execute_stays(p, &jr, bi)) continue; /* copied in above, or already there */
      uint64_t bytes = p->buffers[bi].count * prog_type_size(p->buffers[bi].type);
      bool fine = true;
      const uint8_t *src = buffer_source(p, &jr, bi, &fine);
      assert(fine); /* staged_bytes let only well-formed jobs in */
      uint64_t image = src && src == p->buffers[bi].image ? image_on_device(s, x->program, p, bi) : 0;
      if (image) ok = op_add(ops, (gpu_batch_op){GB_DTOD, c->bindings->v[bi], bytes, NULL, NULL, NULL, 0, image});
      else ok = op_add(ops, (gpu_batch_op){src ? GB_HTOD : GB_ZERO, c->bindings->v[bi], bytes, src, NULL, NULL, 0, 0});
      if (src && !image) sg->hand[i].in += bytes;
    }
    sg->seq_at[i] = ops->n;
    ok = ok && op_add(ops, (gpu_batch_op){GB_SEQ, 0, 0, NULL, NULL, (gpu_seq *)(uintptr_t)c->sequence, 0, 0});
    for (uint32_t bi = 0; ok && bi < p->nbuffers; bi++) {
      if (!execute_wanted(p, bi, jr.keep)) continue;
      uint64_t bytes = p->buffers[bi].count * prog_type_size(p->buffers[bi].type);
      msg_output *o = batch_output(b);
      if (!o || !(o->data.data = msg_bytes_alloc(bytes))) {
        ok = false;
        break;
      }
      o->buffer = bi;
      o->data.len = bytes;
      cm->outputs.n++;
      ok = op_add(ops, (gpu_batch_op){GB_DTOH, c->bindings->v[bi], bytes, NULL, o->data.data, NULL, 0, 0});
      sg->hand[i].out += bytes;
    }
    sg->end_at[i] = ops->n;
    sg->outs_end[i] = cm->outputs.n;
  }
  kept_table_free(&scratch);
  sg->nj = nj;
  sg->t0 = now_ns();
  return ok && nj;
}

/* Answers the submission *sg, which run_batch (or batch_finish) ended with
 * rc, `done` steps done, f and err. Returns the first job it did not
 * answer: sg->k0 when it ran nothing (they then run alone), the one after a
 * job that failed without losing the device, else the end of the
 * submission. Frees *sg. */
size_t seg_answer(actor_t *self, execute_state *s, many_run *mr, seg_run *sg, int rc, size_t done,
                         gpu_failure *f, schedrun_error_t *err) {
  const prog_program *p = mr->c.p;
  const msg_execute_many *x = &mr->m.body.execute_many;
  batch_out *b = &mr->b;
  gpu_backend *be = s->core->backend;
  size_t k0 = sg->k0, nj = sg->nj;
  if (rc && !f->lost && done == 0) {
    kept_plan_truncate(s, &sg->kp, 0, 0); /* they run alone, planned again */
    batch_drop_outputs(b, sg->outs0);
    seg_free(sg);
    return k0;
  }
  /* the jobs whose every step ran completed; the rest failed with the device */
  size_t ok_jobs = 0;
  while (ok_jobs < nj && sg->end_at[ok_jobs] <= done) ok_jobs++;
  size_t copies_ran = 0;
  for (size_t i = 0; i < done && i < sg->ops.n; i++) copies_ran += sg->ops.kept[i];
  kept_commit(s, &sg->kp, ok_jobs < nj ? ok_jobs : SIZE_MAX, copies_ran);
  batch_drop_outputs(b, ok_jobs ? sg->outs_end[ok_jobs - 1] : sg->outs0);
  uint64_t prev = sg->t0;
  for (size_t i = 0; i < ok_jobs; i++) {
    job_run jr = job_of(x, &mr->at, k0 + i);
    jr.traffic = &sg->hand[i];
    uint64_t t1 = sg->ops.v[sg->seq_at[i]].t_end;
    batch_add(b, &jr, x->t_submits.v[k0 + i], prev, t1, i ? sg->outs_end[i - 1] : sg->outs0);
    prev = t1;
  }
  size_t next = k0 + nj;
  if (ok_jobs < nj) {
    job_run jr = job_of(x, &mr->at, k0 + ok_jobs);
    execute_name_failure(p, &jr, f, rc, err);
    execute_job_failed(self, s, b->scheduler, jr.id, rc, f, err);
    next = f->lost ? k0 + nj : k0 + ok_jobs + 1; /* with the device alive, the rest run alone */
  }
  for (size_t i = ok_jobs + 1; f->lost && i < nj; i++) {
    /* not run: the device was lost under an earlier job of the submission */
    schedrun_error_t lost = {0};
    const char *why = be->ops->device_lost(be, s->device);
    err_set(&lost, SCHEDRUN_ELOST, "%s is lost (job %llu failed before this one ran): %s",
            be->ops->device_name(be, s->device), (unsigned long long)x->jobs.v[k0 + ok_jobs], why ? why : "?");
    execute_job_failed(self, s, b->scheduler, x->jobs.v[k0 + i], SCHEDRUN_ELOST, f, &lost);
    schedrun_error_clear(&lost);
  }
  seg_free(sg);
  return next;
}

size_t seg_run_wait(actor_t *self, execute_state *s, many_run *mr, seg_run *sg, bool planned) {
  gpu_backend *be = s->core->backend;
  const msg_execute_many *x = &mr->m.body.execute_many;
  size_t k0 = sg->k0, done = 0;
  gpu_failure f = {GPU_NO_TAG, false};
  schedrun_error_t err = {0};
  uint64_t deadline = x->deadlines.v[k0]; /* every job's (many_segment) */
  int rc = planned ? be->ops->run_batch(be, s->device, sg->ops.v, sg->ops.n, deadline, &done, &f, &err)
                   : SCHEDRUN_ENOMEM;
  size_t next = seg_answer(self, s, mr, sg, rc, done, &f, &err);
  schedrun_error_clear(&err);
  batch_flush_if_full(self, &mr->b);
  if (next > k0) return next;
  many_run_alone(self, s, mr, k0); /* it ran nothing: its first job alone */
  return k0 + 1;
}

void many_end(actor_t *self, many_run *mr) {
  batch_end(self, &mr->b);
  free(mr->at.in);
  free(mr->at.park);
  free(mr->at.take);
  msg_free(&mr->m);
  free(mr);
}

size_t many_segment(execute_state *s, const many_run *mr, size_t k) {
  const msg_execute_many *x = &mr->m.body.execute_many;
  size_t n = x->jobs.n, k1 = k;
  gpu_backend *be = s->core->backend;
  uint64_t bytes = 0;
  while (be->ops->run_batch && !s->core->no_batching && k1 < n && k1 - k < FLUSH_JOBS) {
    job_run jr = job_of(x, &mr->at, k1);
    /* one deadline for the submission: each job's own (a run's jobs share
     * the run's); one already past runs alone, failing before it starts */
    if (x->deadlines.v[k1] != x->deadlines.v[k] || (x->deadlines.v[k] && now_ns() >= x->deadlines.v[k])) break;
    uint64_t more = staged_bytes(s, mr->c.p, &jr);
    bool alone_fits = k1 == k && be->ops->batch_begin && more <= SEGMENT_BYTES_ONE;
    if (more == UINT64_MAX || (bytes + more > SEGMENT_BYTES && !alone_fits)) break;
    if (bytes + more > SEGMENT_BYTES) { /* a large job: a submission of its own */
      k1++;
      break;
    }
    bytes += more;
    k1++;
  }
  return k1;
}

void many_run_alone(actor_t *self, execute_state *s, many_run *mr, size_t k) {
  const msg_execute_many *x = &mr->m.body.execute_many;
  job_run jr = job_of(x, &mr->at, k);
  run_alone(self, s, &mr->c, x, &jr, x->t_submits.v[k], &mr->b);
  batch_flush_if_full(self, &mr->b);
}

void many_rest(actor_t *self, execute_state *s, many_run *mr) {
  size_t n = mr->m.body.execute_many.jobs.n;
  while (mr->k < n) {
    size_t k = mr->k, k1 = many_segment(s, mr, k);
    if (k1 == k) {
      many_run_alone(self, s, mr, k);
      mr->k = k + 1;
      continue;
    }
    batch_flush(self, &mr->b); /* the segment's outputs stay in place until it is answered */
    seg_run sg;
    bool planned = seg_plan(s, mr, k, k1, &sg);
    mr->k = seg_run_wait(self, s, mr, &sg, planned);
  }
}

many_run *many_new(actor_t *self, execute_state *s, msg *m) {
  many_run *mr = calloc(1, sizeof *mr);
  if (!mr) {
    /* without memory its jobs fail now, as any message's that cannot run */
    schedrun_error_t err = {0};
    err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
    gpu_failure f = {GPU_NO_TAG, false};
    for (size_t k = 0; k < m->body.execute_many.jobs.n; k++)
      execute_job_failed(self, s, m->from, m->body.execute_many.jobs.v[k], SCHEDRUN_ENOMEM, &f, &err);
    core_free_parcels(s->core, &m->body.execute_many.takes);
    schedrun_error_clear(&err);
    return NULL;
  }
  mr->m = *m; /* taken: m is left empty */
  memset(m, 0, sizeof *m);
  msg_execute_many *x = &mr->m.body.execute_many;
  mr->c = (context_run){core_program(s->core, x->program), &x->bindings, x->sequence};
  schedrun_error_t err = {0};
  size_t n = x->jobs.n;
  mr->at = (job_at){starts(&x->input_jobs, n), starts(&x->park_jobs, n), starts(&x->take_jobs, n)};
  int rc = execute_check_context(s, "EXECUTE_MANY", x->program, x->device, &mr->c, &err);
  if (rc == SCHEDRUN_OK && (!mr->at.in || !mr->at.park || !mr->at.take)) rc = err_set(&err, SCHEDRUN_ENOMEM, "out of memory");
  if (rc) {
    gpu_failure f = {GPU_NO_TAG, false};
    for (size_t k = 0; k < n; k++) execute_job_failed(self, s, mr->m.from, x->jobs.v[k], rc, &f, &err);
    core_free_parcels(s->core, &x->takes); /* consumed: nobody else frees them */
    schedrun_error_clear(&err);
    free(mr->at.in);
    free(mr->at.park);
    free(mr->at.take);
    msg_free(&mr->m);
    free(mr);
    return NULL;
  }
  batch_begin(&mr->b, s, x, *x->client ? x->client : ACTOR_CLIENT, mr->m.from);
  return mr;
}

void execute_handle_many(actor_t *self, execute_state *s, msg *m) {
  assert(!s->ready && !s->pending); /* what was queued before it has run (execute_pipeline.c) */
  many_run *mr = many_new(self, s, m);
  if (!mr) return;
  many_rest(self, s, mr);
  many_end(self, mr);
}
