/*
 * The gateway: the one thread of a rank that calls MPI. Each time round it
 * sends what the rank queued (and the COMPLETEs its callbacks packed, as one
 * message), finishes sends, receives every message waiting, sends a
 * heartbeat when one is due, and declares lost a peer it has not heard from
 * for lost_after_ms. MPI has no descriptor that ZeroMQ could poll, so the
 * gateway polls MPI itself and meets the rest of the rank through two
 * locked queues of the same msgpack bytes; idle, it sleeps 100 us at a time
 * so that it does not take a core from the actors.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi/mpi_internal.h"

#define TAG 7301
#define STOP_FLUSH_NS 1000000000ull /* what is still unsent at stop gets this long */

typedef struct pending_send {
  MPI_Request req;
  uint8_t *data;
  int dest;
} pending_send;

typedef struct pending_recv {
  MPI_Request req;
  uint8_t *data;
  size_t len;
  int src;
} pending_recv;

typedef struct gateway {
  schedrun_mpi_t *m;
  pending_send *sends;
  size_t nsends, cap;
  pending_recv *recvs;
  size_t nrecvs, rcap;
  uint64_t last_beat;
} gateway;

void mpi_in_free(wire_in *w) {
  if (!w) return;
  msgpack_unpacked_destroy(&w->u);
  free(w->data);
  free(w);
}

static void push_in(schedrun_mpi_t *m, wire_in *w) {
  pthread_mutex_lock(&m->lock);
  if (m->in_tail) m->in_tail->next = w;
  else m->in_head = w;
  m->in_tail = w;
  pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
}

void mpi_send(schedrun_mpi_t *m, int dest, msgpack_sbuffer *sb) {
  wire_out *o = calloc(1, sizeof *o);
  if (!o || !sb->data) { /* out of memory: the job it carried fails by its deadline */
    free(o);
    msgpack_sbuffer_destroy(sb);
    return;
  }
  o->dest = dest;
  o->len = sb->size;
  o->data = (uint8_t *)msgpack_sbuffer_release(sb);
  pthread_mutex_lock(&m->lock);
  if (m->out_tail) m->out_tail->next = o;
  else m->out_head = o;
  m->out_tail = o;
  pthread_mutex_unlock(&m->lock);
}

wire_in *mpi_next(schedrun_mpi_t *m, int timeout_ms) {
  struct timespec dl = api_deadline_in(timeout_ms < 0 ? 0 : timeout_ms);
  pthread_mutex_lock(&m->lock);
  while (!m->in_head && !m->local_head) {
    if (timeout_ms < 0) pthread_cond_wait(&m->cond, &m->lock);
    else if (pthread_cond_timedwait(&m->cond, &m->lock, &dl) != 0) break;
  }
  wire_in *w = m->in_head;
  if (w) {
    m->in_head = w->next;
    if (!m->in_head) m->in_tail = NULL;
    w->next = NULL;
  }
  pthread_mutex_unlock(&m->lock);
  return w;
}

/* Marks a peer lost (once) and tells the rank through its inbox. */
static void lose(schedrun_mpi_t *m, int peer, const char *why) {
  pthread_mutex_lock(&m->lock);
  rank_state *r = &m->ranks[peer];
  bool first = !r->info.lost;
  if (first) {
    r->info.lost = 1;
    /* a long reason is cut to fit the fixed field */
    if (snprintf(r->info.lost_why, sizeof r->info.lost_why, "rank %d (host %s) lost: %s", peer, r->info.host, why) >=
        (int)sizeof r->info.lost_why)
      r->info.lost_why[sizeof r->info.lost_why - 1] = '\0';
  }
  pthread_mutex_unlock(&m->lock);
  if (!first) return;
  wire_in *w = calloc(1, sizeof *w);
  if (!w) return;
  msgpack_unpacked_init(&w->u);
  w->src = peer;
  w->kind = W_LOST;
  push_in(m, w);
}

bool mpi_is_lost(schedrun_mpi_t *m, int peer) {
  pthread_mutex_lock(&m->lock);
  bool l = m->ranks[peer].info.lost != 0;
  pthread_mutex_unlock(&m->lock);
  return l;
}

static void start_send(gateway *g, int dest, uint8_t *data, size_t len) {
  schedrun_mpi_t *m = g->m;
  if (mpi_is_lost(m, dest) || len > (size_t)INT32_MAX) {
    free(data);
    return;
  }
  if (g->nsends == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 64;
    pending_send *n = realloc(g->sends, cap * sizeof *n);
    if (!n) {
      free(data);
      return;
    }
    g->sends = n;
    g->cap = cap;
  }
  pending_send *p = &g->sends[g->nsends];
  int rc = MPI_Isend(data, (int)len, MPI_BYTE, dest, TAG, m->comm, &p->req);
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, text, &n);
    free(data);
    lose(m, dest, text);
    return;
  }
  p->data = data;
  p->dest = dest;
  g->nsends++;
}

/* Finishes the sends that are done; a failed one loses its peer. */
static bool test_sends(gateway *g) {
  bool any = false;
  for (size_t i = 0; i < g->nsends;) {
    int flag = 0;
    MPI_Status st;
    int rc = MPI_Test(&g->sends[i].req, &flag, &st);
    if (rc != MPI_SUCCESS || flag) {
      if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int n = 0;
        MPI_Error_string(rc, text, &n);
        lose(g->m, g->sends[i].dest, text);
      }
      free(g->sends[i].data);
      g->sends[i] = g->sends[--g->nsends];
      any = true;
      continue;
    }
    i++;
  }
  return any;
}

/* The COMPLETEs packed since the last time, as one W_COMPLETE; NULL if none. */
static wire_out *take_completes(schedrun_mpi_t *m) {
  if (m->ndone == 0) return NULL;
  msgpack_sbuffer sb;
  msgpack_packer pk;
  wire_pack_begin(&sb, &pk, W_COMPLETE, 3);
  msgpack_pack_array(&pk, m->ndone);
  msgpack_sbuffer_write(&sb, m->done_tokens.data, m->done_tokens.size);
  msgpack_pack_array(&pk, m->ndone);
  msgpack_sbuffer_write(&sb, m->done_bodies.data, m->done_bodies.size);
  msgpack_sbuffer_clear(&m->done_tokens);
  msgpack_sbuffer_clear(&m->done_bodies);
  m->ndone = 0;
  wire_out *o = calloc(1, sizeof *o);
  if (!o || !sb.data) {
    free(o);
    msgpack_sbuffer_destroy(&sb);
    return NULL;
  }
  o->dest = 0;
  o->len = sb.size;
  o->data = (uint8_t *)msgpack_sbuffer_release(&sb);
  return o;
}

static bool send_queued(gateway *g) {
  schedrun_mpi_t *m = g->m;
  pthread_mutex_lock(&m->lock);
  wire_out *list = m->out_head;
  m->out_head = m->out_tail = NULL;
  wire_out *done = take_completes(m);
  pthread_mutex_unlock(&m->lock);
  if (done) {
    done->next = list;
    list = done;
  }
  bool any = list != NULL;
  while (list) {
    wire_out *o = list;
    list = o->next;
    start_send(g, o->dest, o->data, o->len);
    free(o);
  }
  return any;
}

/* Takes one received message over: decoded, then into the inbox (a
 * heartbeat ends here). */
static void deliver(schedrun_mpi_t *m, int src, uint8_t *buf, size_t len) {
  wire_in *w = calloc(1, sizeof *w);
  if (!w) {
    free(buf);
    return;
  }
  w->src = src;
  w->data = buf;
  w->len = len;
  msgpack_unpacked_init(&w->u);
  size_t off = 0;
  uint64_t kind = 0;
  wire_rd rd;
  if (msgpack_unpack_next(&w->u, (const char *)buf, len, &off) == MSGPACK_UNPACK_SUCCESS) {
    wire_rd_init(&rd, &w->u.data);
    wire_u64(&rd, &kind);
  }
  if (kind == 0 || kind >= W_LOST || kind == W_BEAT) { /* a heartbeat, or not ours: nothing more to do */
    mpi_in_free(w);
    return;
  }
  w->kind = (int)kind;
  push_in(m, w);
}

/* Receives without ever blocking: a matched probe, then a receive that
 * completes in its own time. A peer that stops in the middle of a large
 * message (which MPI sends in pieces) leaves its receive pending here,
 * while heartbeats go on and the peer is declared lost. */
static bool receive(gateway *g) {
  schedrun_mpi_t *m = g->m;
  bool any = false;
  for (;;) {
    int flag = 0, count = 0;
    MPI_Status st;
    MPI_Message mm;
    if (MPI_Improbe(MPI_ANY_SOURCE, TAG, m->comm, &flag, &mm, &st) != MPI_SUCCESS || !flag) break;
    MPI_Get_count(&st, MPI_BYTE, &count);
    any = true;
    if (g->nrecvs == g->rcap) {
      size_t cap = g->rcap ? g->rcap * 2 : 16;
      pending_recv *n = realloc(g->recvs, cap * sizeof *n);
      if (!n) break; /* out of memory: the message waits in MPI for the next round */
      g->recvs = n;
      g->rcap = cap;
    }
    pending_recv *p = &g->recvs[g->nrecvs];
    p->data = malloc(count > 0 ? (size_t)count : 1);
    p->len = count > 0 ? (size_t)count : 0;
    p->src = st.MPI_SOURCE;
    if (!p->data || MPI_Imrecv(p->data, count, MPI_BYTE, &mm, &p->req) != MPI_SUCCESS) {
      free(p->data); /* the matched message is dropped; its jobs end by their deadlines */
      continue;
    }
    g->nrecvs++;
  }
  for (size_t i = 0; i < g->nrecvs;) {
    int flag = 0;
    pending_recv *p = &g->recvs[i];
    int rc = MPI_Test(&p->req, &flag, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !flag) {
      i++;
      continue;
    }
    any = true;
    if (p->src >= 0 && p->src < m->size) m->ranks[p->src].last_heard = now_ns();
    if (rc == MPI_SUCCESS) deliver(m, p->src, p->data, p->len);
    else free(p->data);
    *p = g->recvs[--g->nrecvs];
  }
  return any;
}

static void beat(gateway *g, uint64_t now) {
  schedrun_mpi_t *m = g->m;
  if (now - g->last_beat < (uint64_t)m->o.heartbeat_ms * 1000000ull) return;
  g->last_beat = now;
  for (int r = 0; r < m->size; r++) {
    if (r == m->rank || (m->rank != 0 && r != 0)) continue; /* rank 0 and each other rank watch each other */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    wire_pack_begin(&sb, &pk, W_BEAT, 1);
    size_t len = sb.size;
    uint8_t *data = (uint8_t *)msgpack_sbuffer_release(&sb);
    if (data) start_send(g, r, data, len); /* not to a lost peer */
    if (mpi_is_lost(m, r)) continue;
    uint64_t heard = m->ranks[r].last_heard; /* may be after `now`: receive() runs after it is read */
    uint64_t quiet = now > heard ? now - heard : 0;
    if (quiet > (uint64_t)m->o.lost_after_ms * 1000000ull) {
      char why[96];
      snprintf(why, sizeof why, "nothing heard from it for %.1f s", (double)quiet / 1e9);
      lose(m, r, why);
    }
  }
}

void *mpi_gateway_main(void *arg) {
  gateway g = {.m = arg};
  schedrun_mpi_t *m = g.m;
  uint64_t start = now_ns(), stop_at = 0;
  for (int r = 0; r < m->size; r++) m->ranks[r].last_heard = start;
  unsigned idle = 0;
  for (;;) {
    uint64_t now = now_ns();
    if (atomic_load(&m->stop)) {
      if (!stop_at) stop_at = now;
      pthread_mutex_lock(&m->lock);
      bool queued = m->out_head || m->ndone;
      pthread_mutex_unlock(&m->lock);
      if ((!queued && g.nsends == 0) || now - stop_at > STOP_FLUSH_NS) break;
    }
    bool busy = send_queued(&g);
    busy |= test_sends(&g);
    busy |= receive(&g);
    beat(&g, now);
    if (busy) {
      idle = 0;
    } else if (++idle < 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
  /* sends a lost peer never took, and receives it never finished: their
   * buffers stay with MPI */
  for (size_t i = 0; i < g.nsends; i++) {
    int flag = 0;
    MPI_Test(&g.sends[i].req, &flag, MPI_STATUS_IGNORE);
    if (flag) free(g.sends[i].data);
  }
  free(g.sends);
  for (size_t i = 0; i < g.nrecvs; i++) {
    int flag = 0;
    MPI_Test(&g.recvs[i].req, &flag, MPI_STATUS_IGNORE);
    if (flag) free(g.recvs[i].data);
  }
  free(g.recvs);
  return NULL;
}

void mpi_complete_up(schedrun_mpi_t *m, uint64_t token, msg *complete) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  schedrun_error_t err = {0};
  if (msg_encode(complete, &bytes, &len, &err) != SCHEDRUN_OK) {
    /* its outputs cannot travel in one MPI message (over 1 GiB), or no
     * memory: the job fails at rank 0, saying so, without them */
    msg f;
    msg_init(&f, MSG_COMPLETE, complete->job, "gateway");
    const msg_complete *c = &complete->body.complete;
    f.body.complete.status = err.code ? err.code : SCHEDRUN_ENOMEM;
    f.body.complete.program = c->program;
    f.body.complete.device = c->device;
    f.body.complete.run = c->run;
    f.body.complete.job_index = c->job_index;
    f.body.complete.text = xstrdup(err.message ? err.message : "out of memory");
    schedrun_error_clear(&err);
    int rc = msg_encode(&f, &bytes, &len, NULL);
    msg_free(&f);
    if (rc != SCHEDRUN_OK) return; /* out of memory: rank 0's deadline ends it */
  }
  pthread_mutex_lock(&m->lock);
  msgpack_pack_uint64(&m->done_tk, token);
  msgpack_pack_bin(&m->done_bd, len);
  msgpack_pack_bin_body(&m->done_bd, bytes, len);
  m->ndone++;
  pthread_mutex_unlock(&m->lock);
  free(bytes);
}
