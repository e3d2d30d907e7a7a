/*
 * Submissions queued while another runs, on a device whose backend can
 * (gpu_ops.batch_begin: CUDA). The EXECUTE_MANYs the actor takes from its
 * queue wait in a ready list, in the order they came; each step plans one
 * submission of one of them and starts it with batch_begin, then finishes
 * the submission that was out before it (batch_finish) and answers it. So
 * the device always has the next submission queued behind the one it runs,
 * and the host plans and answers meanwhile.
 *
 * The steps take turns between execution contexts: the next submission is
 * of the first message in the list whose context is not the one out, when
 * there is one. Its first fills then touch nothing the submission out
 * touches (another context's buffers; no step of either copies between
 * contexts), so they go beside it (on CUDA a copy stream, ordered by an
 * event before the new submission's first graph): a job's inputs are copied
 * in while the kernels of the job before, of the other buffer set, run.
 * The jobs of one context run in the order they came: a message is taken
 * up only once every message of its context before it has wholly run, and
 * a context's next submission is begun only once its last one is finished.
 *
 * Nothing else uses the device while a submission is out: a job that must
 * run alone, an EXECUTE and the end of the queue finish it first, and the
 * actor's handler returns only with nothing ready and nothing out.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "actors/execute_state.h"

/* Whether any buffer of context a lies in one of context b's. */
static bool contexts_meet(const context_run *a, const context_run *b) {
  for (uint32_t i = 0; i < a->p->nbuffers && i < a->bindings->n; i++) {
    uint64_t a0 = a->bindings->v[i], a1 = a0 + a->p->buffers[i].count * prog_type_size(a->p->buffers[i].type);
    for (uint32_t j = 0; j < b->p->nbuffers && j < b->bindings->n; j++) {
      uint64_t b0 = b->bindings->v[j], b1 = b0 + b->p->buffers[j].count * prog_type_size(b->p->buffers[j].type);
      if (a0 < b1 && b0 < a1) return true;
      if (a0 == b0) return true; /* empty buffers at one address */
    }
  }
  return false;
}

static void ready_remove(execute_state *s, many_run *mr) {
  many_run **at = &s->ready, *prev = NULL;
  while (*at && *at != mr) {
    prev = *at;
    at = &(*at)->next;
  }
  assert(*at == mr); /* in the list until it has wholly run */
  *at = mr->next;
  if (s->ready_tail == mr) s->ready_tail = prev;
  if (s->last_begun == mr) s->last_begun = NULL;
  mr->next = NULL;
}

/* Ends mr once every job of it has run and none is out. */
static void maybe_end(actor_t *self, execute_state *s, many_run *mr) {
  if (mr->out || mr->k < mr->m.body.execute_many.jobs.n) return;
  ready_remove(s, mr);
  many_end(self, mr);
}

/* Waits for the submission out and answers it. */
static void finish_pending(actor_t *self, execute_state *s) {
  execute_pending *pd = s->pending;
  if (!pd) return;
  s->pending = NULL;
  gpu_backend *be = s->core->backend;
  size_t done = 0;
  gpu_failure f = {GPU_NO_TAG, false};
  schedrun_error_t err = {0};
  int rc = be->ops->batch_finish(be, s->device, &done, &f, &err);
  many_run *mr = pd->mr;
  size_t k0 = pd->sg.k0;
  /* the jobs after one that failed, the device alive, go on from next; when
   * it ran nothing, its first job runs alone next (another submission may
   * be out now, so not here) */
  mr->k = seg_answer(self, s, mr, &pd->sg, rc, done, &f, &err);
  mr->alone = mr->k == k0;
  schedrun_error_clear(&err);
  batch_flush_if_full(self, &mr->b);
  mr->out = false;
  free(pd);
  maybe_end(self, s, mr);
}

void execute_queue_many(actor_t *self, execute_state *s, msg *m) {
  many_run *mr = many_new(self, s, m);
  if (!mr) return;
  if (s->ready_tail) s->ready_tail->next = mr;
  else s->ready = mr;
  s->ready_tail = mr;
}

/* The message whose submission goes next: one whose context has no
 * message before it in the list and is not the one out's, the first whose
 * context is not that of the submission begun last if there is one (the
 * contexts take turns, also when something made the actor finish the one
 * out early); NULL when only the one out's context has work (or nothing
 * does). */
static many_run *next_run(execute_state *s) {
  const many_run *out = s->pending ? s->pending->mr : NULL, *last = s->last_begun;
  many_run *any = NULL;
  for (many_run *mr = s->ready; mr; mr = mr->next) {
    if (mr->out || mr->k == mr->m.body.execute_many.jobs.n) continue;
    bool first = true; /* of its context */
    for (many_run *e = s->ready; e != mr && first; e = e->next) first = !contexts_meet(&e->c, &mr->c);
    if (!first || (out && contexts_meet(&out->c, &mr->c))) continue;
    if (!last || !contexts_meet(&last->c, &mr->c)) return mr;
    if (!any) any = mr;
  }
  return any;
}

bool execute_step(actor_t *self, execute_state *s) {
  many_run *mr = next_run(s);
  if (!mr) {
    if (!s->pending) return false;
    finish_pending(self, s); /* its context's next submission waits for it */
    return true;
  }
  gpu_backend *be = s->core->backend;
  size_t k = mr->k, k1 = mr->alone ? k : many_segment(s, mr, k);
  /* what the one out keeps on the device and takes from it is committed
   * when it is finished: the next is planned against that */
  if (s->pending && (s->pending->sg.kept_steps || s->pending->sg.kp.nchanges)) finish_pending(self, s);
  if (k1 == k || (s->pending && images_full(s, mr))) {
    /* a job alone, or images to free: nothing may be out */
    finish_pending(self, s);
    if (k1 == k) {
      many_run_alone(self, s, mr, k);
      mr->k = k + 1;
      mr->alone = false;
      maybe_end(self, s, mr);
    }
    return true;
  }
  batch_flush(self, &mr->b); /* the segment's outputs stay in place until it is answered */
  const msg_execute_many *x = &mr->m.body.execute_many;
  execute_pending *pd = malloc(sizeof *pd);
  bool ok = pd && seg_plan(s, mr, k, k1, &pd->sg);
  const execute_pending *old = s->pending;
  bool beside = ok && old && !old->sg.kept_steps && !pd->sg.kept_steps;
  assert(!old || !contexts_meet(&old->mr->c, &mr->c)); /* next_run */
  schedrun_error_t err = {0};
  int rc = ok ? be->ops->batch_begin(be, s->device, pd->sg.ops.v, pd->sg.ops.n, x->deadlines.v[k], beside, &err)
              : SCHEDRUN_ENOMEM;
  s->last_begun = mr;
  if (rc == SCHEDRUN_OK) {
    mr->out = true;
    mr->k = k + pd->sg.nj;
    pd->mr = mr;
    finish_pending(self, s); /* the older one, while this one is queued */
    s->pending = pd;
    return true;
  }
  /* not started: it runs as run_batch would have it, nothing else out
   * (not planned: no memory, or its first job cannot take what it should;
   * then that job runs alone) */
  schedrun_error_clear(&err);
  finish_pending(self, s);
  if (pd) {
    mr->k = seg_run_wait(self, s, mr, &pd->sg, ok);
  } else {
    many_run_alone(self, s, mr, k);
    mr->k = k + 1;
  }
  free(pd);
  maybe_end(self, s, mr);
  return true;
}

void execute_flush(actor_t *self, execute_state *s) {
  while (execute_step(self, s)) {
  }
  assert(!s->ready && !s->pending);
}

void execute_flush_context(actor_t *self, execute_state *s, const context_run *c) {
  finish_pending(self, s);
  for (many_run *mr = s->ready, *next; mr; mr = next) {
    next = mr->next;
    if (!contexts_meet(&mr->c, c)) continue;
    ready_remove(s, mr);
    many_rest(self, s, mr);
    many_end(self, mr);
  }
}
