/*
 * The scheduler's side of compiles: a program's first job sends its COMPILE
 * (the session is that job's id), its jobs wait for the answer, and their
 * deadlines are kept while they wait.
 *
 *   NONE -> PENDING (COMPILE out) -> READY (COMPILED: the jobs are placed)
 *                                 -> NONE  (ERROR: the jobs fail with it)
 *   PENDING -> STOPPING: every job waiting is past its deadline; CANCEL of
 *              the session, answered at once with ERROR (SCHEDRUN_ETIMEOUT,
 *              its teardown run): the late jobs fail with it, and jobs that
 *              came meanwhile, still in time, send a COMPILE again.
 *
 * On devices of two kinds the program compiles for each target in turn,
 * under the same session: PENDING lasts until the last target answers. A
 * target whose compile fails leaves the program to the other target's
 * devices (its error kept for jobs pinned to its devices); the jobs fail
 * only when no target compiled.
 *
 * The scheduler asks its actor for a TICK at the first deadline of a job
 * waiting for a compile. A late job while others still wait completes alone,
 * there and then, and the compile goes on for the others.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler_state.h"

static const char closed_text[] = "the scheduler shut down before the job started";

/* Sends the COMPILE of session `session` for target ps->ctarget. */
static int send_compile(actor_t *self, scheduler_state *s, prog_state *ps, uint64_t session) {
  const prog_program *p = ps->p ? ps->p : core_program(s->core, ps->id);
  const gpu_backend *be = gpu_target_part(s->core->backend, ps->ctarget);
  assert(be);
  msg m;
  msg_init(&m, MSG_COMPILE, session, ACTOR_SCHEDULER);
  msg_compile *c = &m.body.compile;
  c->program = ps->id;
  c->target = xstrdup(be->ops->target(be, 0));
  c->arch = xstrdup(gpu_compile_arch(be));
  c->kernels.v = calloc(p && p->nkernels ? p->nkernels : 1, sizeof(msg_kernel));
  int rc = p && c->kernels.v ? SCHEDRUN_OK : SCHEDRUN_ENOMEM;
  for (uint32_t i = 0; rc == SCHEDRUN_OK && i < p->nkernels; i++) {
    const prog_kernel *k = &p->kernels[i];
    if (k->variants_only) continue; /* its variants are compiled instead */
    msg_kernel *mk = &c->kernels.v[c->kernels.n++];
    char where[512];
    prog_where(p, k->loc, where, sizeof where);
    mk->name = xstrdup(k->name);
    mk->entry = xstrdup(k->entry);
    mk->params = xstrdup(k->params_text ? k->params_text : "");
    mk->source = xstrdup(k->source ? k->source : "");
    mk->where = xstrdup(where);
    mk->source_file = xstrdup(k->source_file ? k->source_file : p->path);
    mk->first_line = k->first_line;
  }
  if (rc == SCHEDRUN_OK) rc = actor_send(self, ACTOR_COMPILE, &m);
  msg_free(&m);
  return rc;
}

/* The waiting jobs compile again, the first of them asking. */
static void compile_again(actor_t *self, scheduler_state *s, prog_state *ps) {
  job *j = ps->waiting.head;
  ps->compile = COMPILE_PENDING;
  ps->compile_job = j->id;
  ps->compile_t0 = j->t_compile = now_ns();
  ps->ctarget = 0;
  ps->usable = 0;
  for (int t = 0; t < GPU_MAX_TARGETS; t++) {
    free(ps->unusable[t]);
    ps->unusable[t] = NULL;
  }
  if (send_compile(self, s, ps, j->id) == SCHEDRUN_OK) return;
  ps->compile = COMPILE_NONE;
  ps->compile_job = 0;
  while ((j = scheduler_q_pop(&ps->waiting))) scheduler_complete(self, s, j, SCHEDRUN_EINTERNAL, "cannot send COMPILE", NULL);
}

void scheduler_compile_wait(actor_t *self, scheduler_state *s, prog_state *ps, job *j) {
  j->state = JOB_COMPILING;
  scheduler_q_push(&ps->waiting, j);
  if (j->deadline) actor_wake_at(self, j->deadline);
  if (ps->compile == COMPILE_NONE) compile_again(self, s, ps);
}

/* Whether ps waits for the answer of compile session `session`. */
static bool compiling_for(const prog_state *ps, uint64_t session) {
  return session && ps->compile_job == session && (ps->compile == COMPILE_PENDING || ps->compile == COMPILE_STOPPING);
}

prog_state *scheduler_compile_of(scheduler_state *s, uint64_t session) {
  size_t pos = 0;
  void *v;
  while (session && hmap_next(&s->progs, &pos, NULL, &v))
    if (compiling_for(v, session)) return v;
  return NULL;
}

/* The next target compiles, if one is left: true when its COMPILE is out. */
static bool next_target(actor_t *self, scheduler_state *s, prog_state *ps) {
  if (ps->compile != COMPILE_PENDING || s->closing) return false;
  while (++ps->ctarget < s->ntargets)
    if (send_compile(self, s, ps, ps->compile_job) == SCHEDRUN_OK) return true;
    else ps->unusable[ps->ctarget] = xstrdup("cannot send COMPILE");
  return false;
}

/* Every target has answered and one compiled: the waiting jobs are placed. */
static void compile_ready(actor_t *self, scheduler_state *s, prog_state *ps, uint64_t session);

void scheduler_compiled(actor_t *self, scheduler_state *s, msg *m) {
  prog_state *ps = scheduler_prog_get(s, m->body.compiled.program, false); /* a COMPILED names its program */
  if (!ps || !compiling_for(ps, m->job)) return;
  assert(ps->ctarget >= 0 && ps->ctarget < s->ntargets);
  scheduler_free_modules(&ps->modules[ps->ctarget]);
  ps->modules[ps->ctarget] = m->body.compiled.modules;
  memset(&m->body.compiled.modules, 0, sizeof m->body.compiled.modules);
  ps->usable |= 1u << ps->ctarget;
  /* the counts add up over the targets; the trigger job is charged at the end */
  ps->hits += m->body.compiled.hits;
  ps->misses += m->body.compiled.misses;
  if (next_target(self, s, ps)) return;
  compile_ready(self, s, ps, m->job);
}

static void compile_ready(actor_t *self, scheduler_state *s, prog_state *ps, uint64_t session) {
  ps->compile = COMPILE_READY;
  ps->compile_job = 0;
  job *w;
  if (s->closing) {
    /* finished before the CANCEL reached it: the jobs still do not start */
    while ((w = scheduler_q_pop(&ps->waiting))) scheduler_complete(self, s, w, SCHEDRUN_ECLOSED, closed_text, NULL);
    return;
  }
  /* the compile is charged to the job that asked for it, once */
  job *trigger = idmap_get(&s->jobs, session);
  if (trigger) {
    trigger->compile_ns = now_ns() - trigger->t_submit;
    trigger->hits = ps->hits;
    trigger->misses = ps->misses;
  }
  ps->hits = ps->misses = 0;
  /* late ones among them find their deadline passed when they are placed */
  while ((w = scheduler_q_pop(&ps->waiting))) scheduler_place(self, s, ps, w);
}

static bool late(const job *j, uint64_t now) { return j->deadline && j->deadline <= now; }

void scheduler_compile_failed(actor_t *self, scheduler_state *s, prog_state *ps, int code, const char *text) {
  if (ps->compile == COMPILE_PENDING && s->ntargets > 1) {
    /* one target of several: the others' devices may still run the program */
    uint64_t session = ps->compile_job;
    const gpu_backend *be = gpu_target_part(s->core->backend, ps->ctarget);
    strbuf why;
    sb_init(&why);
    sb_addf(&why, "the program's kernels do not compile for %s devices: %s", be->ops->target(be, 0), text);
    free(ps->unusable[ps->ctarget]);
    ps->unusable[ps->ctarget] = sb_take(&why);
    if (next_target(self, s, ps)) return;
    if (ps->usable) {
      compile_ready(self, s, ps, session);
      return;
    }
    /* none compiled: the jobs fail with every target's reason */
    strbuf all;
    sb_init(&all);
    for (int t = 0; t < s->ntargets; t++)
      if (ps->unusable[t]) sb_addf(&all, "%s%s", all.len ? "\n" : "", ps->unusable[t]);
    ps->hits = ps->misses = 0;
    ps->compile = COMPILE_NONE;
    ps->compile_job = 0;
    job *w;
    while ((w = scheduler_q_pop(&ps->waiting))) scheduler_complete(self, s, w, code, all.data ? all.data : text, NULL);
    sb_free(&all);
    return;
  }
  bool stopping = ps->compile == COMPILE_STOPPING;
  ps->compile = COMPILE_NONE;
  ps->compile_job = 0;
  uint64_t now = now_ns();
  job_queue again = {0};
  job *w;
  while ((w = scheduler_q_pop(&ps->waiting))) {
    if (!stopping || late(w, now)) scheduler_complete(self, s, w, code, text, NULL);
    else if (s->closing) scheduler_complete(self, s, w, SCHEDRUN_ECLOSED, closed_text, NULL);
    else scheduler_q_push(&again, w); /* came after the compile was stopped, and still in time */
  }
  ps->waiting = again;
  if (again.head) compile_again(self, s, ps);
}

/* "'k' (file:line:col), ..." for the program's kernels. */
static void kernels_text(strbuf *sb, const prog_program *p) {
  for (uint32_t i = 0; p && i < p->nkernels; i++)
    sb_addf(sb, "%s'%s' (%s:%d:%d)", i ? ", " : "", p->kernels[i].name, p->path, p->kernels[i].loc.line,
            p->kernels[i].loc.col);
}

/* Late jobs of ps complete now; the compile goes on for the jobs left. */
static void fail_late(actor_t *self, scheduler_state *s, prog_state *ps, uint64_t now, size_t left) {
  strbuf text;
  sb_init(&text);
  sb_addf(&text, "still compiling kernel%s ", ps->p && ps->p->nkernels == 1 ? "" : "s");
  kernels_text(&text, ps->p);
  sb_addf(&text, " after %llu ms\nteardown: leave the compile running for the %zu other jobs that wait for it",
          (unsigned long long)((now - ps->compile_t0) / 1000000), left);
  job_queue keep = {0};
  job *w;
  while ((w = scheduler_q_pop(&ps->waiting))) {
    if (late(w, now)) scheduler_complete(self, s, w, SCHEDRUN_ETIMEOUT, text.failed ? "deadline passed" : text.data, NULL);
    else scheduler_q_push(&keep, w);
  }
  ps->waiting = keep;
  sb_free(&text);
}

void scheduler_compile_tick(actor_t *self, scheduler_state *s) {
  uint64_t now = now_ns(), next = UINT64_MAX;
  size_t pos = 0;
  void *v;
  while (hmap_next(&s->progs, &pos, NULL, &v)) {
    prog_state *ps = v;
    if (ps->compile != COMPILE_PENDING) continue;
    size_t nlate = 0, left = 0;
    for (job *j = ps->waiting.head; j; j = j->next) {
      if (late(j, now)) {
        nlate++;
        continue;
      }
      left++;
      if (j->deadline && j->deadline < next) next = j->deadline;
    }
    if (!nlate) continue;
    if (left) {
      fail_late(self, s, ps, now, left);
      continue;
    }
    /* nobody waits for it any more: stopped, and its ERROR completes them */
    msg c;
    msg_init(&c, MSG_CANCEL, ps->compile_job, ACTOR_SCHEDULER);
    c.body.cancel.program = ps->id;
    c.body.cancel.code = SCHEDRUN_ETIMEOUT;
    c.body.cancel.waited_ms = (now - ps->compile_t0) / 1000000;
    ps->compile = COMPILE_STOPPING;
    if (actor_send(self, ACTOR_COMPILE, &c) != SCHEDRUN_OK) ps->compile = COMPILE_PENDING; /* the compile's answer ends them */
    msg_free(&c);
  }
  if (next != UINT64_MAX) actor_wake_at(self, next);
}
