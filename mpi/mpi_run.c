/*
 * schedrun_mpi_run on rank 0: sends the program to every rank, has it
 * compiled once per compile target, then places the run's jobs. A job goes
 * to the rank that holds the recording of its buffer set (the rank its set
 * first went to) unless that rank is more than STICKY_SLACK jobs per device
 * busier than the least loaded one; jobs for a rank are sent in batches of
 * up to `batch`, a batch leaving when full or when rank 0 has placed all it
 * can for now. Results come back as COMPLETEs and are verified again here
 * against rank 0's copy of the program before they enter the one report.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/report.h"
#include "mpi/mpi_internal.h"

#define STICKY_SLACK 8
#define READY_WAIT_MS 2000ull
#define DEFAULT_RUN_TIMEOUT_MS (10 * 60 * 1000)
#define OUT_NOWHERE (-1)
#define OUT_DONE (-2)

typedef struct root_run {
  schedrun_mpi_t *m;
  schedrun_program_t *h;
  const prog_program *p;
  schedrun_run_options_t o;
  int jobs;
  size_t total, done, next;
  uint64_t pid, deadline, last_progress;
  schedrun_report_t *rep;
  int32_t *where;  /* per job: the rank it is out on, OUT_NOWHERE or OUT_DONE */
  int *slot_rank;  /* per buffer set: the rank holding its recording, or -1 */
  int *compiler;   /* per rank: the rank that compiles for its target */
  bool stopped;    /* this rank's scheduler was shut down: place no more */
  char lost[200];  /* the first rank lost: no job starts after it */
  int rank_error;  /* a rank that could not load the program */
  char rank_error_text[16384]; /* with a compile error's log */
} root_run;

typedef struct local_ctx {
  schedrun_mpi_t *m;
  uint64_t token;
} local_ctx;

static void local_done_cb(schedrun_job_t id, schedrun_job_result_t *res, void *user) {
  (void)id;
  local_ctx *lc = user;
  local_done *d = calloc(1, sizeof *d);
  schedrun_mpi_t *m = lc->m;
  if (!d) { /* out of memory: the result is lost, and the run ends by its deadline */
    schedrun_job_result_free(&res);
    free(lc);
    return;
  }
  d->token = lc->token;
  d->res = res;
  free(lc);
  pthread_mutex_lock(&m->lock);
  if (m->local_tail) m->local_tail->next = d;
  else m->local_head = d;
  m->local_tail = d;
  pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
}

static int left_ms(const root_run *r) {
  uint64_t now = now_ns();
  return now >= r->deadline ? 0 : (int)((r->deadline - now) / 1000000ull);
}

static int job_timeout(const root_run *r) {
  int left = left_ms(r);
  return r->o.job_timeout_ms && r->o.job_timeout_ms < left ? r->o.job_timeout_ms : left > 0 ? left : 1;
}

/* Job i is done: its rank's place is free. */
static void release(root_run *r, size_t i) {
  int where = r->where[i];
  assert(where != OUT_DONE); /* every job is done once */
  if (where >= 0) {
    rank_state *rs = &r->m->ranks[where];
    assert(rs->inflight > 0);
    rs->inflight--;
    rs->info.jobs++;
  }
  r->where[i] = OUT_DONE;
  r->done++;
}

/* Files job i's result (taking it). */
static void file(root_run *r, size_t i, schedrun_job_result_t *res) {
  release(r, i);
  report_add(r->rep, i, res);
}

static void fail(root_run *r, size_t i, int status, const char *why) {
  schedrun_job_result_t *res = calloc(1, sizeof *res);
  if (!res) {
    release(r, i); /* done, but missing from the report */
    return;
  }
  res->id = i + 1;
  res->info.status = status;
  res->info.device = -1;
  res->info.run = (int)(i / (size_t)r->jobs);
  res->info.job = (int)(i % (size_t)r->jobs);
  res->error = xstrdup(why);
  file(r, i, res);
}

/* Sends a rank the jobs placed on it since its last batch. */
static void flush(root_run *r, int rank) {
  rank_state *rs = &r->m->ranks[rank];
  if (rs->nbatch == 0) return;
  msg sm;
  msg_init(&sm, MSG_SUBMIT_MANY, 0, "gateway");
  uint8_t *body = NULL;
  size_t len = 0;
  int rc = msg_submit_many_reserve(&sm.body.submit_many, rs->nbatch, 0);
  for (size_t k = 0; rc == SCHEDRUN_OK && k < rs->nbatch; k++) {
    size_t i = rs->batch[k] - 1;
    uint32_t run = (uint32_t)(i / (size_t)r->jobs);
    msg_submit sb = {0, run, (uint32_t)(i % (size_t)r->jobs), run % r->p->buffer_sets, -1,
                     r->o.keep_outputs ? 1u : 0u, {NULL, 0}, 0, r->o.check_only ? 1u : 0u};
    msg_submit_many_add(&sm.body.submit_many, &sb);
  }
  if (rc == SCHEDRUN_OK) rc = msg_encode(&sm, &body, &len, NULL);
  msg_free(&sm);
  if (rc != SCHEDRUN_OK) {
    for (size_t k = 0; k < rs->nbatch; k++) fail(r, rs->batch[k] - 1, rc, "out of memory");
    rs->nbatch = 0;
    return;
  }
  msgpack_sbuffer sb;
  msgpack_packer pk;
  wire_pack_begin(&sb, &pk, W_SUBMIT, 5);
  msgpack_pack_uint64(&pk, r->pid);
  msgpack_pack_array(&pk, (uint32_t)rs->nbatch);
  for (size_t k = 0; k < rs->nbatch; k++) msgpack_pack_uint64(&pk, rs->batch[k]);
  msgpack_pack_array(&pk, (uint32_t)rs->nbatch);
  for (size_t k = 0; k < rs->nbatch; k++) msgpack_pack_int64(&pk, rs->batch_timeout[k]);
  wire_pack_bin(&pk, body, len);
  free(body);
  mpi_send(r->m, rank, &sb);
  rs->nbatch = 0;
}

static double load(const rank_state *rs) { return (double)rs->inflight / (rs->info.ndevices ? rs->info.ndevices : 1); }

/* ready: it loaded the program and is not lost (on_lost clears it) */
static bool has_room(const root_run *r, const rank_state *rs) {
  return rs->ready &&
         rs->inflight < (uint32_t)(r->m->o.inflight_per_device * (rs->info.ndevices ? rs->info.ndevices : 1));
}

/* The rank for a job of buffer set `slot`, or -1 when none has room. */
static int choose(root_run *r, uint32_t slot) {
  schedrun_mpi_t *m = r->m;
  int best = -1;
  for (int q = 0; q < m->size; q++)
    if (has_room(r, &m->ranks[q]) && (best < 0 || load(&m->ranks[q]) < load(&m->ranks[best]))) best = q;
  if (best < 0) return -1;
  int sticky = r->slot_rank[slot];
  if (sticky >= 0 && has_room(r, &m->ranks[sticky]) && load(&m->ranks[sticky]) <= load(&m->ranks[best]) + STICKY_SLACK)
    return sticky;
  r->slot_rank[slot] = best;
  return best;
}

/* Submits job i on this rank; false when there is no room now or the
 * scheduler was shut down (r->stopped). */
static bool submit_here(root_run *r, size_t i) {
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.run = (int)(i / (size_t)r->jobs);
  jo.job = (int)(i % (size_t)r->jobs);
  jo.keep_outputs = r->o.keep_outputs;
  jo.record_only = r->o.check_only;
  jo.timeout_ms = job_timeout(r);
  jo.submit_timeout_ms = 0;
  jo.on_complete = local_done_cb;
  local_ctx *lc = malloc(sizeof *lc);
  if (!lc) return false;
  *lc = (local_ctx){r->m, i + 1};
  jo.user = lc;
  schedrun_job_t id;
  int rc = schedrun_submit(r->m->s, r->h, &jo, &id, NULL);
  if (rc == SCHEDRUN_OK) return true;
  free(lc);
  if (rc != SCHEDRUN_EAGAIN) r->stopped = true; /* shut down: the run ends with what it has */
  return false;
}

/* Places job r->next; false when no rank has room now. */
static bool place(root_run *r) {
  size_t i = r->next;
  uint32_t slot = (uint32_t)((i / (size_t)r->jobs) % r->p->buffer_sets);
  int q = choose(r, slot);
  if (q < 0 || (q == 0 && !submit_here(r, i))) return false;
  rank_state *rs = &r->m->ranks[q];
  rs->inflight++;
  r->where[i] = q;
  r->next++;
  if (q != 0) {
    rs->batch[rs->nbatch] = i + 1;
    rs->batch_timeout[rs->nbatch] = job_timeout(r);
    if (++rs->nbatch == (size_t)r->m->o.batch) flush(r, q);
  }
  return true;
}

static void shift_times(schedrun_job_result_t *res, uint64_t now) {
  if (!res->t_done || res->t_done > now + (1ull << 62)) return;
  int64_t d = (int64_t)(now - res->t_done); /* another host's clock: its job ends as rank 0 hears of it */
  uint64_t *t[] = {&res->t_submit, &res->t_compile, &res->t_record, &res->t_execute, &res->t_done};
  for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
    if (*t[k]) *t[k] = (uint64_t)((int64_t)*t[k] + d);
  for (size_t k = 0; k + 2 < res->launches.n; k += 3) {
    res->launches.v[k + 1] = (uint64_t)((int64_t)res->launches.v[k + 1] + d);
    res->launches.v[k + 2] = (uint64_t)((int64_t)res->launches.v[k + 2] + d);
  }
}

static void on_complete(root_run *r, int src, wire_rd *rd) {
  wire_rd tokens, bodies;
  if (!wire_array(rd, &tokens) || !wire_array(rd, &bodies) || tokens.n != bodies.n) return;
  const rank_state *rs = &r->m->ranks[src];
  uint64_t now = now_ns();
  for (uint32_t k = 0; k < tokens.n; k++) {
    uint64_t token = 0;
    const char *body = NULL;
    size_t len = 0;
    if (!wire_u64(&tokens, &token) || !wire_bytes(&bodies, &body, &len)) return;
    if (token == 0 || token > r->total || r->where[token - 1] != src) continue; /* late, or not this rank's */
    msg c;
    schedrun_error_t e = {0};
    int drc = msg_decode(body, len, &c, &e);
    if (drc != SCHEDRUN_OK || c.type != MSG_COMPLETE) {
      if (drc == SCHEDRUN_OK) msg_free(&c); /* decoded, but not a COMPLETE */
      char why[300];
      snprintf(why, sizeof why, "rank %d sent a result rank 0 cannot read: %s", src, e.message ? e.message : "not a COMPLETE");
      schedrun_error_clear(&e);
      fail(r, token - 1, SCHEDRUN_EPROTO, why);
      continue;
    }
    msg_complete *cc = &c.body.complete;
    int local = cc->device;
    schedrun_job_result_t *res = result_from_complete(token, cc, r->p, r->o.keep_outputs != 0);
    msg_free(&c);
    if (!res) {
      fail(r, token - 1, SCHEDRUN_ENOMEM, "out of memory");
      continue;
    }
    res->info.device = local >= 0 && local < rs->info.ndevices ? rs->info.first_device + local : -1;
    shift_times(res, now);
    file(r, token - 1, res);
  }
}

static void on_lost(root_run *r, int src) {
  schedrun_mpi_t *m = r->m;
  char why[200];
  pthread_mutex_lock(&m->lock);
  snprintf(why, sizeof why, "%s", m->ranks[src].info.lost_why);
  pthread_mutex_unlock(&m->lock);
  rank_state *rs = &m->ranks[src];
  rs->ready = false;
  rs->nbatch = 0;
  for (size_t i = 0; i < r->next; i++)
    if (r->where[i] == src) fail(r, i, SCHEDRUN_ELOST, why);
  for (int s = 0; s < r->p->buffer_sets; s++)
    if (r->slot_rank[s] == src) r->slot_rank[s] = -1;
  /* ranks waiting for this one's artifacts get none: they compile themselves */
  for (int q = 1; q < m->size; q++) {
    if (q == src || r->compiler[q] != src || m->ranks[q].ready) continue;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    wire_pack_begin(&sb, &pk, W_ARTIFACTS, 3);
    msgpack_pack_uint64(&pk, r->pid);
    msgpack_pack_array(&pk, 0);
    mpi_send(m, q, &sb);
  }
  /* the run cannot succeed now: what is out finishes, nothing more starts */
  if (!r->lost[0]) snprintf(r->lost, sizeof r->lost, "%s", why);
}

static void on_ready(root_run *r, int src, wire_rd *rd) {
  uint64_t pid = 0;
  int64_t status = 0;
  char *text = NULL;
  if (!wire_u64(rd, &pid) || pid != r->pid || !wire_i64(rd, &status) || !(text = wire_strdup(rd))) return;
  if (status == SCHEDRUN_OK) {
    r->m->ranks[src].ready = !mpi_is_lost(r->m, src);
  } else if (!r->rank_error) {
    r->rank_error = (int)status;
    snprintf(r->rank_error_text, sizeof r->rank_error_text, "rank %d (host %s) cannot %s the program: %s", src,
             r->m->ranks[src].info.host, status == SCHEDRUN_ECOMPILE ? "compile" : "load", text);
  }
  free(text);
}

static void on_stats(root_run *r, int src, wire_rd *rd, bool *got) {
  uint64_t pid = 0, jobs = 0, compiled = 0, received = 0;
  wire_rd devs;
  if (!wire_u64(rd, &pid) || pid != r->pid || !wire_u64(rd, &jobs) || !wire_u64(rd, &compiled) ||
      !wire_u64(rd, &received) || !wire_array(rd, &devs))
    return;
  rank_state *rs = &r->m->ranks[src];
  rs->info.kernels_compiled = compiled;
  rs->info.artifacts_received = received;
  for (uint32_t d = 0; d < devs.n && (int)d < rs->info.ndevices; d++) {
    wire_rd one;
    uint64_t launches = 0, syncs = 0, beside = 0;
    char *loops = NULL;
    if (!wire_array(&devs, &one) || !wire_u64(&one, &launches) || !wire_u64(&one, &syncs) ||
        !wire_u64(&one, &beside) || !(loops = wire_strdup(&one)))
      break;
    int g = rs->info.first_device + (int)d;
    if (g < SCHEDRUN_MAX_DEVICES) report_device_counters(r->rep, g, launches, syncs, beside, loops);
    free(loops);
  }
  got[src] = true;
}

/* Handles what came in; waits up to wait_ms when nothing has. */
static void take_events(root_run *r, int wait_ms, bool *stats) {
  schedrun_mpi_t *m = r->m;
  wire_in *w = mpi_next(m, wait_ms);
  for (; w; w = mpi_next(m, 0)) {
    wire_rd rd;
    wire_rd_init(&rd, &w->u.data);
    uint64_t kind;
    if (w->kind != W_LOST) wire_u64(&rd, &kind);
    switch (w->kind) {
    case W_COMPLETE: on_complete(r, w->src, &rd); break;
    case W_READY: on_ready(r, w->src, &rd); break;
    case W_LOST: on_lost(r, w->src); break;
    case W_STATS:
      if (stats) on_stats(r, w->src, &rd, stats);
      break;
    default: break;
    }
    mpi_in_free(w);
  }
  pthread_mutex_lock(&m->lock);
  local_done *list = m->local_head;
  m->local_head = m->local_tail = NULL;
  pthread_mutex_unlock(&m->lock);
  while (list) {
    local_done *d = list;
    list = d->next;
    size_t i = d->token - 1;
    if (r->where[i] == 0) {
      file(r, i, d->res); /* rank 0's devices come first in the report: same indices */
    } else {
      schedrun_job_result_free(&d->res);
    }
    free(d);
  }
}

static void send_program(root_run *r, const int *compiler) {
  schedrun_mpi_t *m = r->m;
  int *members = calloc((size_t)m->size, sizeof *members);
  for (int q = 1; q < m->size; q++) {
    if (mpi_is_lost(m, q)) continue;
    int role = compiler[q] == q ? ROLE_COMPILE : ROLE_WAIT;
    size_t n = 0;
    for (int o = q + 1; members && role == ROLE_COMPILE && o < m->size; o++)
      if (compiler[o] == q && !mpi_is_lost(m, o)) members[n++] = o;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    wire_pack_begin(&sb, &pk, W_PROGRAM, 6);
    msgpack_pack_uint64(&pk, r->pid);
    wire_pack_str(&pk, r->p->path);
    wire_pack_bin(&pk, r->p->text, r->p->text_len);
    msgpack_pack_uint32(&pk, (uint32_t)role);
    msgpack_pack_array(&pk, (uint32_t)n);
    for (size_t k = 0; k < n; k++) msgpack_pack_uint32(&pk, (uint32_t)members[k]);
    mpi_send(m, q, &sb);
  }
  free(members);
}

/* Nothing more will be placed: this rank's scheduler was shut down, a rank
 * could not load the program, or a rank was lost. */
static bool placing_over(const root_run *r) { return r->stopped || r->rank_error || r->lost[0]; }

static bool all_ready(root_run *r) {
  if (placing_over(r)) return true;
  for (int q = 1; q < r->m->size; q++)
    if (!r->m->ranks[q].ready && !mpi_is_lost(r->m, q)) return false;
  return true;
}

static void maybe_progress(root_run *r) {
  uint64_t now = now_ns();
  if (!(r->o.progress || r->o.progress_phase) || now - r->last_progress < 100000000ull) return;
  if (r->o.progress) r->o.progress((uint32_t)r->done, (uint32_t)r->total, r->o.progress_user);
  if (r->o.progress_phase)
    r->o.progress_phase(r->done ? "running" : "recording", (uint32_t)r->done, (uint32_t)r->total, 0, 0,
                        r->o.progress_user);
  r->last_progress = now;
}

/* The end of the run: each rank's counters (STATS), waiting for those
 * still answering. */
static void collect_stats(root_run *r) {
  schedrun_mpi_t *m = r->m;
  bool *got = calloc((size_t)m->size, sizeof *got);
  if (!got) return;
  for (int q = 1; q < m->size; q++) {
    if (mpi_is_lost(m, q)) continue;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    wire_pack_begin(&sb, &pk, W_DONE, 2);
    msgpack_pack_uint64(&pk, r->pid);
    mpi_send(m, q, &sb);
  }
  for (;;) {
    bool all = true;
    for (int q = 1; q < m->size; q++) all &= got[q] || mpi_is_lost(m, q);
    if (all) break;
    take_events(r, 50, got);
  }
  free(got);
}

int mpi_run_root(schedrun_mpi_t *m, schedrun_program_t *h, const schedrun_run_options_t *opts, schedrun_report_t **out,
                 schedrun_error_t *err) {
  root_run r = {.m = m, .h = h, .p = h->p};
  schedrun_run_options_init(&r.o);
  if (opts) r.o = *opts;
  if (r.o.repeat < 0 || r.o.jobs < 0 || r.o.timeout_ms < 0 || r.o.job_timeout_ms < 0)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_run: repeat, jobs, timeout_ms and job_timeout_ms must be >= 0");
  int repeat = r.o.repeat ? r.o.repeat : r.p->repeat;
  r.jobs = r.o.jobs ? r.o.jobs : r.p->jobs;
  if ((uint64_t)repeat * (uint64_t)r.jobs > 10000000ull)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_run: %d runs of %d jobs is too many (at most 10,000,000 jobs)",
                   repeat, r.jobs);
  int ndev = 0;
  for (int q = 0; q < m->size; q++) ndev += m->ranks[q].info.ndevices;
  if (ndev > SCHEDRUN_MAX_DEVICES)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_run: %d devices over %d ranks; a report holds at most %d", ndev,
                   m->size, SCHEDRUN_MAX_DEVICES);
  r.total = (size_t)repeat * (size_t)r.jobs;
  r.rep = report_new(m->s, r.p, repeat, r.jobs, r.o.keep_outputs != 0);
  r.where = malloc((r.total ? r.total : 1) * sizeof *r.where);
  r.slot_rank = malloc((size_t)r.p->buffer_sets * sizeof *r.slot_rank);
  int *compiler = r.compiler = calloc((size_t)m->size, sizeof *compiler);
  if (!r.rep || !r.where || !r.slot_rank || !compiler) {
    schedrun_report_free(&r.rep);
    free(r.where);
    free(r.slot_rank);
    free(compiler);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < r.total; i++) r.where[i] = OUT_NOWHERE;
  for (int s = 0; s < r.p->buffer_sets; s++) r.slot_rank[s] = -1;
  char name[64];
  for (int q = 0; q < m->size; q++) {
    rank_state *rs = &m->ranks[q];
    rs->info.jobs = 0;
    rs->inflight = 0;
    rs->nbatch = 0;
    rs->ready = q == 0;
    for (int d = 0; d < rs->info.ndevices; d++) {
      snprintf(name, sizeof name, "r%d/%s", q, rs->names[d]);
      if (q == 0) report_rename_device(r.rep, d, name);
      else report_add_device(r.rep, name);
    }
  }
  uint64_t t0 = now_ns();
  r.deadline = t0 + (uint64_t)(r.o.timeout_ms ? r.o.timeout_ms : DEFAULT_RUN_TIMEOUT_MS) * 1000000ull;
  r.pid = ++m->next_pid;
  /* compile once per target: the lowest rank of each target compiles, and
   * sends the artifacts to the others of its target */
  for (int q = 0; q < m->size; q++) {
    compiler[q] = q;
    for (int o = 0; o < q; o++)
      if (!strcmp(m->ranks[o].info.target, m->ranks[q].info.target) && !mpi_is_lost(m, o)) {
        compiler[q] = o;
        break;
      }
  }
  send_program(&r, compiler);
  char *compile_error = NULL;
  int crc = mpi_compile_here(m, h, &compile_error);
  if (crc != SCHEDRUN_OK && !r.rank_error) {
    /* no job can run here either: the run ends with the error, said once */
    r.rank_error = crc;
    snprintf(r.rank_error_text, sizeof r.rank_error_text, "%s", compile_error ? compile_error : schedrun_strerror(crc));
  }
  free(compile_error);
  {
    int *to = calloc((size_t)m->size, sizeof *to);
    size_t n = 0;
    for (int q = 1; to && q < m->size; q++)
      if (compiler[q] == 0 && !mpi_is_lost(m, q)) to[n++] = q;
    mpi_send_artifacts(m, h, r.pid, to, n);
    free(to);
  }
  m->ranks[0].info.kernels_compiled = 0;
  int rc = SCHEDRUN_OK;
  bool grace = false;
  /* the ranks load and compile at once; jobs are placed once every rank
   * is ready (or lost), so that the first jobs do not all land on rank 0,
   * but not later than READY_WAIT_MS after rank 0 is: a rank still compiling
   * (another target) or waiting for artifacts joins when it is ready */
  uint64_t ready_by = now_ns() + READY_WAIT_MS * 1000000ull;
  while (!all_ready(&r) && left_ms(&r) > 0 && now_ns() < ready_by) take_events(&r, 20, NULL);
  while (r.done < r.total) {
    while (r.next < r.total && !placing_over(&r) && place(&r)) {
    }
    for (int q = 1; q < m->size; q++) flush(&r, q);
    if (placing_over(&r) && r.done == r.next) break; /* what was placed is done */
    take_events(&r, 20, NULL);
    maybe_progress(&r);
    if (left_ms(&r) == 0) {
      /* jobs' own deadlines end them; a rank that never answers is lost by
       * its heartbeat; past a grace of that long, the run ends */
      if (!grace) {
        grace = true;
        r.deadline = now_ns() + (uint64_t)m->o.lost_after_ms * 1000000ull + 2000000000ull;
        continue;
      }
      rc = err_set(err, SCHEDRUN_ETIMEOUT, "run of '%s': %zu of %zu jobs done within the run's time limit", r.p->name,
                   r.done, r.total);
      for (size_t i = 0; i < r.next; i++)
        if (r.where[i] >= 0) fail(&r, i, SCHEDRUN_ETIMEOUT, "the run's time limit passed");
      break;
    }
  }
  if (r.lost[0] && r.next < r.total) {
    char why[260];
    snprintf(why, sizeof why, "not started: %s", r.lost);
    for (size_t i = r.next; i < r.total; i++) {
      assert(r.where[i] == OUT_NOWHERE); /* never placed: no rank holds a place for it */
      r.where[i] = OUT_DONE;
    }
    r.done += r.total - r.next;
    report_not_started(r.rep, r.next, SCHEDRUN_ELOST, why);
  }
  collect_stats(&r);
  uint64_t compiled = 0;
  schedrun_compile_count(m->s, &compiled, NULL);
  m->ranks[0].info.kernels_compiled = compiled;
  if (r.o.progress) r.o.progress((uint32_t)r.done, (uint32_t)r.total, r.o.progress_user);
  free(compiler);
  free(r.where);
  free(r.slot_rank);
  report_finish(r.rep, now_ns() - t0);
  *out = r.rep;
  if (rc) return rc;
  if (r.rank_error) return err_set(err, r.rank_error, "%s", r.rank_error_text);
  return report_status(r.rep, err);
}

int schedrun_mpi_run(schedrun_mpi_t *m, schedrun_program_t *p, const schedrun_run_options_t *opts,
                     schedrun_report_t **out, schedrun_error_t *err) {
  if (out) *out = NULL;
  if (!m) return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_run: the MPI scheduler is NULL");
  if (m->rank != 0) return mpi_serve(m, err);
  if (!p || !out)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_run: %s is NULL", !p ? "the program" : "out");
  if (p->s && p->s != m->s)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_run: the program belongs to another scheduler");
  if (!p->p->text)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_run: '%s' was made with the builder; only programs loaded "
                                         "from a config can be sent to other ranks", p->p->name);
  return mpi_run_root(m, p, opts, out, err);
}
