/* schedrun_mpi: opening (every rank's scheduler, who is who), the ranks'
 * info, and closing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi/mpi_internal.h"

/* What each rank tells the others at open, gathered by all. */
typedef struct hello {
  int32_t status;
  int32_t ndevices;
  char message[256];
  char host[64];
  char target[96];
  char names[SCHEDRUN_MAX_DEVICES][32];
} hello;

#define TAG_CONNECT 7302
#define TAG_HELLO 7303
#define TAG_TABLE 7304

/* Waits for n requests until deadline_ns, testing every millisecond: no
 * blocking call, so that a rank that stopped answering while the ranks open
 * ends the open with an error instead of a hang. 0, or the index of a request
 * still incomplete (and left so) at the deadline; -2 when MPI failed. */
static int wait_until(MPI_Request *reqs, int n, uint64_t deadline_ns) {
  for (;;) {
    int done = 0;
    if (MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return -2;
    if (done) return 0;
    if (now_ns() >= deadline_ns) break;
    usleep(1000);
  }
  for (int i = 0; i < n; i++) {
    int done = 0;
    if (reqs[i] != MPI_REQUEST_NULL && (MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)) return i;
  }
  return 0;
}

/* Requests a failed exchange leaves: cancelled where MPI can, then let go. */
static void drop_requests(MPI_Request *reqs, int n) {
  for (int i = 0; i < n; i++)
    if (reqs[i] != MPI_REQUEST_NULL) {
      MPI_Cancel(&reqs[i]);
      MPI_Request_free(&reqs[i]);
    }
}

/* Every rank's hello, in all[], on every rank: rank 0 gathers them and sends
 * the table back, each step bounded by deadline_ns. */
static int exchange_hellos(schedrun_mpi_t *m, const hello *me, hello *all, uint64_t deadline_ns,
                           schedrun_error_t *err) {
  int n = m->size, late = 0;
  MPI_Request *reqs = calloc((size_t)n, sizeof *reqs);
  if (!reqs) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (int i = 0; i < n; i++) reqs[i] = MPI_REQUEST_NULL;
  int rc = SCHEDRUN_OK;
  if (m->rank == 0) {
    all[0] = *me;
    for (int r = 1; r < n; r++) MPI_Irecv(&all[r], (int)sizeof *all, MPI_BYTE, r, TAG_HELLO, m->comm, &reqs[r]);
    late = wait_until(reqs, n, deadline_ns);
    if (late) {
      rc = late < 0 ? err_set(err, SCHEDRUN_EINTERNAL, "schedrun_mpi_open: the ranks could not exchange who they are")
                    : err_set(err, SCHEDRUN_ELOST, "schedrun_mpi_open: rank %d did not say who it is within %.0f s "
                              "(stopped, or its devices did not open)", late, (double)m->o.open_wait_ms / 1e3);
      drop_requests(reqs, n);
    } else {
      for (int r = 1; r < n; r++)
        MPI_Isend(all, (int)(sizeof *all * (size_t)n), MPI_BYTE, r, TAG_TABLE, m->comm, &reqs[r]);
      late = wait_until(reqs, n, deadline_ns);
      if (late) {
        rc = err_set(err, SCHEDRUN_ELOST, "schedrun_mpi_open: rank %d did not take the table of ranks within %.0f s",
                     late, (double)m->o.open_wait_ms / 1e3);
        drop_requests(reqs, n);
      }
    }
  } else {
    MPI_Isend(me, (int)sizeof *me, MPI_BYTE, 0, TAG_HELLO, m->comm, &reqs[0]);
    MPI_Irecv(all, (int)(sizeof *all * (size_t)n), MPI_BYTE, 0, TAG_TABLE, m->comm, &reqs[1]);
    late = wait_until(reqs, 2, deadline_ns);
    if (late) {
      rc = err_set(err, SCHEDRUN_ELOST, "schedrun_mpi_open: no word from rank 0 within %.0f s",
                   (double)m->o.open_wait_ms / 1e3);
      drop_requests(reqs, 2);
    }
  }
  free(reqs);
  return rc;
}

void schedrun_mpi_options_init(schedrun_mpi_options_t *o) {
  if (o) memset(o, 0, sizeof *o);
}

int schedrun_mpi_rank(const schedrun_mpi_t *m) { return m ? m->rank : -1; }
int schedrun_mpi_size(const schedrun_mpi_t *m) { return m ? m->size : 0; }
schedrun_t *schedrun_mpi_local(schedrun_mpi_t *m) { return m ? m->s : NULL; }

int schedrun_mpi_lost(const schedrun_mpi_t *m) {
  if (!m) return 0;
  schedrun_mpi_t *mm = (schedrun_mpi_t *)m;
  pthread_mutex_lock(&mm->lock);
  int n = 0;
  for (int r = 0; r < m->size; r++) n += m->ranks[r].info.lost != 0;
  pthread_mutex_unlock(&mm->lock);
  return n;
}

int schedrun_mpi_rank_info(const schedrun_mpi_t *m, int rank, schedrun_mpi_rank_info_t *out) {
  if (!m || !out || rank < 0 || rank >= m->size) return SCHEDRUN_EINVAL;
  schedrun_mpi_t *mm = (schedrun_mpi_t *)m;
  pthread_mutex_lock(&mm->lock);
  *out = m->ranks[rank].info;
  pthread_mutex_unlock(&mm->lock);
  return SCHEDRUN_OK;
}

static void free_mpi(schedrun_mpi_t *m) {
  while (m->in_head) {
    wire_in *w = m->in_head;
    m->in_head = w->next;
    mpi_in_free(w);
  }
  while (m->out_head) {
    wire_out *o = m->out_head;
    m->out_head = o->next;
    free(o->data);
    free(o);
  }
  while (m->local_head) {
    local_done *d = m->local_head;
    m->local_head = d->next;
    schedrun_job_result_free(&d->res);
    free(d);
  }
  for (int r = 0; m->ranks && r < m->size; r++) {
    free(m->ranks[r].batch);
    free(m->ranks[r].batch_timeout);
  }
  free(m->ranks);
  free(m->serve_state);
  msgpack_sbuffer_destroy(&m->done_tokens);
  msgpack_sbuffer_destroy(&m->done_bodies);
  pthread_mutex_destroy(&m->lock);
  pthread_cond_destroy(&m->cond);
  free(m);
}

int schedrun_mpi_open(schedrun_mpi_t **out, MPI_Comm comm, const schedrun_options_t *opts,
                      const schedrun_mpi_options_t *mo, schedrun_error_t *err) {
  if (!out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_open: out is NULL");
  *out = NULL;
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited) return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_open: MPI is not initialized");
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_SERIALIZED)
    return err_set(err, SCHEDRUN_EINVAL,
                   "schedrun_mpi_open: MPI provides thread level %d; schedrun_mpi needs MPI_THREAD_SERIALIZED "
                   "(MPI_Init_thread)", provided);
  schedrun_mpi_t *m = calloc(1, sizeof *m);
  if (!m) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  pthread_mutex_init(&m->lock, NULL);
  pthread_cond_init(&m->cond, NULL);
  msgpack_sbuffer_init(&m->done_tokens);
  msgpack_sbuffer_init(&m->done_bodies);
  msgpack_packer_init(&m->done_tk, &m->done_tokens, msgpack_sbuffer_write);
  msgpack_packer_init(&m->done_bd, &m->done_bodies, msgpack_sbuffer_write);
  schedrun_mpi_options_init(&m->o);
  if (mo) m->o = *mo;
  if (m->o.heartbeat_ms <= 0) m->o.heartbeat_ms = 250;
  if (m->o.lost_after_ms <= 0) m->o.lost_after_ms = 10000;
  if (m->o.batch <= 0) m->o.batch = 256;
  if (m->o.inflight_per_device <= 0) m->o.inflight_per_device = 512;
  if (m->o.open_wait_ms <= 0) m->o.open_wait_ms = 60000;
  if (MPI_Comm_dup(comm, &m->comm) != MPI_SUCCESS) {
    free_mpi(m);
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_mpi_open: cannot duplicate the communicator");
  }
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(m->comm, &m->rank);
  MPI_Comm_size(m->comm, &m->size);
  /* connect every rank to rank 0 now, before the schedulers start: a
   * connection that MPI's TCP transport opens later, on a machine whose
   * cores the actors keep busy, can time out (it reports EINPROGRESS). Every
   * wait of the open is bounded by open_wait_ms. */
  uint64_t deadline = now_ns() + (uint64_t)m->o.open_wait_ms * 1000000ull;
  int tokens[2] = {m->rank, 0}, rc = SCHEDRUN_OK;
  for (int r = 1; r < m->size && (m->rank == 0 || r == 1) && rc == SCHEDRUN_OK; r++) {
    int peer = m->rank == 0 ? r : 0;
    MPI_Request reqs[2];
    MPI_Isend(&tokens[0], 1, MPI_INT, peer, TAG_CONNECT, m->comm, &reqs[0]);
    MPI_Irecv(&tokens[1], 1, MPI_INT, peer, TAG_CONNECT, m->comm, &reqs[1]);
    if (wait_until(reqs, 2, deadline)) {
      drop_requests(reqs, 2);
      rc = err_set(err, SCHEDRUN_ELOST, "schedrun_mpi_open: rank %d did not answer within %.0f s", peer,
                   (double)m->o.open_wait_ms / 1e3);
    }
  }
  if (rc != SCHEDRUN_OK) {
    MPI_Comm_free(&m->comm);
    free_mpi(m);
    return rc;
  }
  m->ranks = calloc((size_t)m->size, sizeof *m->ranks);
  hello *all = calloc((size_t)m->size, sizeof *all);
  hello me;
  memset(&me, 0, sizeof me);
  schedrun_error_t e = {0};
  me.status = m->ranks && all ? schedrun_open(&m->s, opts, &e) : SCHEDRUN_ENOMEM;
  snprintf(me.message, sizeof me.message, "%s", e.message ? e.message : me.status ? "out of memory" : "");
  schedrun_error_clear(&e);
  char host[MPI_MAX_PROCESSOR_NAME];
  int hl = 0;
  MPI_Get_processor_name(host, &hl);
  snprintf(me.host, sizeof me.host, "%.*s", hl, host);
  if (m->s) {
    me.ndevices = schedrun_device_count(m->s);
    snprintf(me.target, sizeof me.target, "%s", schedrun_compile_target(m->s));
    for (int d = 0; d < me.ndevices && d < SCHEDRUN_MAX_DEVICES; d++)
      snprintf(me.names[d], sizeof me.names[d], "%s", schedrun_device_name(m->s, d));
  }
  /* every rank learns every rank's outcome, so all fail together; a rank
   * that does not answer in time fails the open where it is awaited */
  if (!all || !m->ranks) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  else rc = exchange_hellos(m, &me, all, now_ns() + (uint64_t)m->o.open_wait_ms * 1000000ull, err);
  int first = 0;
  for (int r = 0; rc == SCHEDRUN_OK && r < m->size; r++) {
    if (all[r].status != SCHEDRUN_OK) {
      rc = err_set(err, all[r].status, "rank %d (host %s): %s", r, all[r].host, all[r].message);
      break;
    }
    rank_state *rs = &m->ranks[r];
    rs->info.rank = r;
    memcpy(rs->info.host, all[r].host, sizeof rs->info.host);
    rs->info.host[sizeof rs->info.host - 1] = '\0';
    memcpy(rs->info.target, all[r].target, sizeof rs->info.target);
    rs->info.target[sizeof rs->info.target - 1] = '\0';
    rs->info.ndevices = all[r].ndevices;
    rs->info.first_device = first;
    memcpy(rs->names, all[r].names, sizeof rs->names);
    for (int d = 0; d < SCHEDRUN_MAX_DEVICES; d++) rs->names[d][31] = '\0';
    first += all[r].ndevices;
    rs->batch = calloc((size_t)m->o.batch, sizeof *rs->batch);
    rs->batch_timeout = calloc((size_t)m->o.batch, sizeof *rs->batch_timeout);
    if (!rs->batch || !rs->batch_timeout) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  free(all);
  if (rc == SCHEDRUN_OK && pthread_create(&m->gateway, NULL, mpi_gateway_main, m) != 0)
    rc = err_set(err, SCHEDRUN_EINTERNAL, "schedrun_mpi_open: cannot start the gateway thread");
  if (rc != SCHEDRUN_OK) {
    schedrun_close(&m->s);
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    free_mpi(m);
    return rc;
  }
  m->gateway_started = true;
  *out = m;
  return SCHEDRUN_OK;
}

int schedrun_mpi_close(schedrun_mpi_t **mp) {
  if (!mp || !*mp) return SCHEDRUN_OK;
  schedrun_mpi_t *m = *mp;
  if (m->gateway_started) {
    /* ranks still serving stop: no more runs (the gateway sends this before
     * it stops) */
    for (int q = 1; m->rank == 0 && q < m->size; q++) {
      if (mpi_is_lost(m, q)) continue;
      msgpack_sbuffer sb;
      msgpack_packer pk;
      wire_pack_begin(&sb, &pk, W_STOP, 1);
      mpi_send(m, q, &sb);
    }
    atomic_store(&m->stop, true);
    pthread_join(m->gateway, NULL);
  }
  int rc = schedrun_close(&m->s);
  if (rc != SCHEDRUN_OK) return rc;
  if (!schedrun_mpi_lost(m)) MPI_Comm_free(&m->comm);
  free_mpi(m);
  *mp = NULL;
  return SCHEDRUN_OK;
}
