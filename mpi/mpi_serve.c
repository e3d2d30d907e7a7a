/*
 * A rank other than 0 serving rank 0's run: loads the program from its text,
 * compiles it and sends the artifacts to the ranks that share its target (or
 * takes theirs), runs the jobs rank 0 sends in batches and sends their
 * COMPLETEs back, and answers the end of the run with its counters.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend.h"
#include "mpi/mpi_internal.h"

typedef struct serve {
  schedrun_mpi_t *m;
  schedrun_program_t *p;
  uint64_t pid;
  gpu_counters at_start[SCHEDRUN_MAX_DEVICES];
  _Atomic uint64_t jobs;
} serve;

typedef struct job_ctx {
  serve *sv;
  uint64_t token;
} job_ctx;

static void send_ready(serve *sv, int status, const char *text) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  wire_pack_begin(&sb, &pk, W_READY, 4);
  msgpack_pack_uint64(&pk, sv->pid);
  msgpack_pack_int32(&pk, status);
  wire_pack_str(&pk, text);
  mpi_send(sv->m, 0, &sb);
}

/* A job done here: its result as a COMPLETE, for rank 0 (which verifies it
 * again against its own copy of the program, so a mismatch travels as OK
 * with the outputs that show it). */
static void job_done(schedrun_job_t id, schedrun_job_result_t *r, void *user) {
  (void)id;
  job_ctx *jc = user;
  serve *sv = jc->sv;
  msg c;
  msg_init(&c, MSG_COMPLETE, 0, "gateway");
  result_to_complete(r, sv->pid, &c.body.complete);
  mpi_complete_up(sv->m, jc->token, &c);
  msg_free(&c);
  schedrun_job_result_free(&r);
  atomic_fetch_add(&sv->jobs, 1);
  free(jc);
}

/* A job rank 0 sent that could not start here fails with why. */
static void fail_token(serve *sv, uint64_t token, int status, const char *why) {
  msg c;
  msg_init(&c, MSG_COMPLETE, 0, "gateway");
  c.body.complete.status = status;
  c.body.complete.program = sv->pid;
  c.body.complete.device = -1;
  c.body.complete.text = xstrdup(why);
  mpi_complete_up(sv->m, token, &c);
  msg_free(&c);
}

static void on_program(serve *sv, wire_rd *rd) {
  uint64_t pid = 0, role = 0;
  char *origin = NULL;
  const char *text = NULL;
  size_t len = 0;
  wire_rd members;
  if (!wire_u64(rd, &pid) || !(origin = wire_strdup(rd)) || !wire_bytes(rd, &text, &len) || !wire_u64(rd, &role) ||
      !wire_array(rd, &members)) {
    free(origin);
    return; /* malformed: rank 0 never hears READY and places no job here */
  }
  schedrun_program_free(&sv->p);
  sv->pid = pid;
  atomic_store(&sv->jobs, 0);
  const gpu_backend *be = sv->m->s->core.backend;
  for (int d = 0; d < sv->m->s->core.ndevices; d++) be->ops->counters(be, d, &sv->at_start[d]);
  char *copy = malloc(len + 1);
  schedrun_error_t e = {0};
  int rc = SCHEDRUN_ENOMEM;
  if (copy) {
    memcpy(copy, text, len);
    copy[len] = '\0';
    /* without a scheduler: rank 0 chose the devices (sched-run --devices may
     * override the config's), and this rank runs on the ones it opened */
    rc = schedrun_program_load_string(NULL, copy, origin, &sv->p, &e);
  }
  free(copy);
  free(origin);
  if (rc != SCHEDRUN_OK) {
    send_ready(sv, rc, e.message ? e.message : "out of memory");
    schedrun_error_clear(&e);
    return;
  }
  if (role == ROLE_COMPILE) {
    int to[SCHEDRUN_MPI_MAX_MEMBERS];
    size_t n = 0;
    uint64_t r;
    while (members.i < members.n && n < SCHEDRUN_MPI_MAX_MEMBERS && wire_u64(&members, &r))
      if (r > 0 && r < (uint64_t)sv->m->size && r != (uint64_t)sv->m->rank) to[n++] = (int)r;
    char *why = NULL;
    int crc = mpi_compile_here(sv->m, sv->p, &why);
    mpi_send_artifacts(sv->m, sv->p, sv->pid, to, n); /* none when it failed: they compile themselves */
    /* a compile error goes to rank 0 whole (kernel, place, log, teardown) */
    send_ready(sv, crc, crc == SCHEDRUN_OK ? "" : why ? why : schedrun_strerror(crc));
    free(why);
    return;
  }
  if (role != ROLE_WAIT) send_ready(sv, SCHEDRUN_OK, "");
}

static void on_artifacts(serve *sv, wire_rd *rd) {
  uint64_t pid = 0;
  wire_rd list;
  if (!wire_u64(rd, &pid) || pid != sv->pid || !wire_array(rd, &list)) return;
  for (uint32_t i = 0; i < list.n; i++) {
    wire_rd item;
    const char *data = NULL;
    size_t len = 0;
    char *name = NULL;
    if (!wire_array(&list, &item) || !(name = wire_strdup(&item)) || !wire_bytes(&item, &data, &len)) {
      free(name);
      break;
    }
    /* a bad artifact is not published; the kernel then compiles here */
    if (schedrun_cache_publish(sv->m->s, name, data, len, NULL) == SCHEDRUN_OK) sv->m->published++;
    free(name);
  }
  send_ready(sv, SCHEDRUN_OK, "");
}

static void on_submit(serve *sv, wire_rd *rd) {
  uint64_t pid = 0;
  wire_rd tokens, timeouts;
  const char *body = NULL;
  size_t len = 0;
  if (!wire_u64(rd, &pid) || !wire_array(rd, &tokens) || !wire_array(rd, &timeouts) || !wire_bytes(rd, &body, &len) ||
      tokens.n != timeouts.n)
    return;
  uint64_t *tk = calloc(tokens.n ? tokens.n : 1, sizeof *tk);
  int64_t *to = calloc(tokens.n ? tokens.n : 1, sizeof *to);
  for (uint32_t i = 0; tk && to && i < tokens.n; i++)
    if (!wire_u64(&tokens, &tk[i]) || !wire_i64(&timeouts, &to[i])) tk[i] = 0;
  msg m;
  schedrun_error_t e = {0};
  int rc = tk && to ? msg_decode(body, len, &m, &e) : SCHEDRUN_ENOMEM;
  if (rc == SCHEDRUN_OK && (m.type != MSG_SUBMIT_MANY || m.body.submit_many.programs.n != tokens.n)) {
    msg_free(&m);
    rc = err_set(&e, SCHEDRUN_EPROTO, "a SUBMIT batch that does not match its tokens");
  }
  for (uint32_t i = 0; rc == SCHEDRUN_OK && i < tokens.n; i++) {
    if (!tk[i]) continue;
    msg_submit one;
    msg_submit_many_get(&m.body.submit_many, i, &one);
    const msg_submit *sb = &one;
    job_ctx *jc = malloc(sizeof *jc);
    schedrun_job_options_t o;
    schedrun_job_options_init(&o);
    o.run = (int)sb->run;
    o.job = (int)sb->job_index;
    o.keep_outputs = sb->keep != 0;
    o.record_only = sb->record_only != 0;
    o.timeout_ms = to[i] > 0 && to[i] < INT32_MAX ? (int)to[i] : 0;
    o.on_complete = job_done;
    o.user = jc;
    schedrun_error_t je = {0};
    int jrc = !jc ? SCHEDRUN_ENOMEM : pid != sv->pid || !sv->p ? SCHEDRUN_EINVAL : SCHEDRUN_OK;
    if (jc) *jc = (job_ctx){sv, tk[i]};
    schedrun_job_t id = 0;
    if (jrc == SCHEDRUN_OK) jrc = schedrun_submit(sv->m->s, sv->p, &o, &id, &je);
    if (jrc != SCHEDRUN_OK) {
      free(jc);
      fail_token(sv, tk[i], jrc, je.message ? je.message : "this rank has no such program loaded");
    }
    schedrun_error_clear(&je);
  }
  if (rc == SCHEDRUN_OK) msg_free(&m);
  else
    for (uint32_t i = 0; i < tokens.n; i++)
      if (tk && tk[i]) fail_token(sv, tk[i], rc, e.message ? e.message : "out of memory");
  schedrun_error_clear(&e);
  free(tk);
  free(to);
}

static void on_done(serve *sv, wire_rd *rd) {
  uint64_t pid = 0;
  if (!wire_u64(rd, &pid)) return;
  schedrun_wait_all(sv->m->s, -1, NULL);
  uint64_t compiled = 0;
  schedrun_compile_count(sv->m->s, &compiled, NULL);
  int nd = sv->m->s->core.ndevices;
  msgpack_sbuffer sb;
  msgpack_packer pk;
  wire_pack_begin(&sb, &pk, W_STATS, 6);
  msgpack_pack_uint64(&pk, pid);
  msgpack_pack_uint64(&pk, atomic_load(&sv->jobs));
  msgpack_pack_uint64(&pk, compiled);
  msgpack_pack_uint64(&pk, sv->m->published);
  msgpack_pack_array(&pk, (uint32_t)nd);
  const gpu_backend *be = sv->m->s->core.backend;
  for (int d = 0; d < nd; d++) {
    gpu_counters c = {0};
    be->ops->counters(be, d, &c);
    msgpack_pack_array(&pk, 4);
    msgpack_pack_uint64(&pk, c.launches - sv->at_start[d].launches);
    msgpack_pack_uint64(&pk, c.host_trips - sv->at_start[d].host_trips);
    msgpack_pack_uint64(&pk, c.beside - sv->at_start[d].beside);
    wire_pack_str(&pk, c.loops);
  }
  mpi_send(sv->m, 0, &sb);
}

int mpi_serve(schedrun_mpi_t *m, schedrun_error_t *err) {
  /* it outlives this call: jobs of a lost rank 0 may still complete here
   * until the scheduler closes */
  if (!m->serve_state && !(m->serve_state = calloc(1, sizeof(serve))))
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  serve *svp = m->serve_state;
  svp->m = m;
  int rc = SCHEDRUN_OK;
  for (bool over = false; !over;) {
    wire_in *w = mpi_next(m, -1);
    if (!w) continue;
    wire_rd rd;
    wire_rd_init(&rd, &w->u.data);
    uint64_t kind;
    if (w->kind != W_LOST) wire_u64(&rd, &kind);
    switch (w->kind) {
    case W_PROGRAM: on_program(svp, &rd); break;
    case W_ARTIFACTS: on_artifacts(svp, &rd); break;
    case W_SUBMIT: on_submit(svp, &rd); break;
    case W_DONE:
      on_done(svp, &rd);
      over = true;
      break;
    case W_STOP:
      rc = err_set(err, SCHEDRUN_ECLOSED, "rank 0 closed: no more runs");
      over = true;
      break;
    case W_LOST:
      if (w->src == 0) {
        pthread_mutex_lock(&m->lock);
        rc = err_set(err, SCHEDRUN_ELOST, "%s", m->ranks[0].info.lost_why);
        pthread_mutex_unlock(&m->lock);
        over = true;
      }
      break;
    default: break;
    }
    mpi_in_free(w);
  }
  /* jobs still out (rank 0 lost) finish before the program goes */
  if (rc != SCHEDRUN_OK) schedrun_wait_all(m->s, 2000, NULL);
  schedrun_program_free(&svp->p);
  return rc;
}
