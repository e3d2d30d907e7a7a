/*
 * Inside schedrun_mpi: the gateway (the one thread that calls MPI), the
 * messages ranks exchange, and the state rank 0 keeps about the others.
 *
 * Every MPI message is one msgpack array whose first element is its kind
 * (wire_kind). Jobs travel as the library's own SUBMIT_MANY and COMPLETE
 * bodies (messages/msg.h), wrapped with rank 0's job tokens.
 */
#ifndef SCHEDRUN_MPI_INTERNAL_H
#define SCHEDRUN_MPI_INTERNAL_H

#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/api.h"
#include "schedrun_mpi.h"

typedef enum wire_kind {
  W_PROGRAM = 1, /* 0 -> r: [k, pid, origin, text, role, [members]] */
  W_READY,       /* r -> 0: [k, pid, status, text] (loaded; compiled or published) */
  W_ARTIFACTS,   /* compiling rank -> member: [k, pid, [[name, bytes]...]] */
  W_SUBMIT,      /* 0 -> r: [k, pid, [token...], [timeout_ms...], SUBMIT_MANY] */
  W_COMPLETE,    /* r -> 0: [k, [token...], [COMPLETE...]] */
  W_BEAT,        /* either way: [k] */
  W_DONE,        /* 0 -> r: [k, pid]: the run is over */
  W_STATS,       /* r -> 0: [k, pid, jobs, compiled, received, [[launches, syncs, loops]...]] */
  W_STOP,        /* 0 -> r: [k]: rank 0 closed, no more runs */
  W_LOST,        /* not sent: the gateway's word that a peer went silent */
  W_KINDS
} wire_kind;

/* What a rank does with a new program (W_PROGRAM's role). */
enum { ROLE_LOAD = 0, ROLE_COMPILE = 1, ROLE_WAIT = 2 };

/* A received message (or a W_LOST notice), as it waits in the inbox. */
typedef struct wire_in {
  struct wire_in *next;
  int src;
  uint8_t *data;
  size_t len;
  msgpack_unpacked u; /* decoded; u.data is the array */
  int kind;
} wire_in;

/* A message waiting for the gateway to send it. */
typedef struct wire_out {
  struct wire_out *next;
  int dest;
  uint8_t *data;
  size_t len;
} wire_out;

/* Reading one received array, element by element, with the first problem
 * kept to name it. */
typedef struct wire_rd {
  const msgpack_object *v;
  uint32_t n, i;
  const char *bad;
} wire_rd;

void wire_rd_init(wire_rd *r, const msgpack_object *array);
bool wire_u64(wire_rd *r, uint64_t *out);
bool wire_i64(wire_rd *r, int64_t *out);
/* Strings and byte strings point into the message (not terminated). */
bool wire_bytes(wire_rd *r, const char **data, size_t *len);
/* An inner array, to read with its own wire_rd. */
bool wire_array(wire_rd *r, wire_rd *inner);
/* A copy of a string element, terminated; NULL on a problem. */
char *wire_strdup(wire_rd *r);

/* Packing into a growable buffer (msgpack_sbuffer). */
void wire_pack_begin(msgpack_sbuffer *sb, msgpack_packer *pk, int kind, uint32_t elements);
void wire_pack_str(msgpack_packer *pk, const char *s);
void wire_pack_bin(msgpack_packer *pk, const void *data, size_t len);

typedef struct rank_state {
  schedrun_mpi_rank_info_t info;
  char names[SCHEDRUN_MAX_DEVICES][32];
  uint64_t last_heard; /* gateway: now_ns of the last message from it */
  /* rank 0's run: */
  bool ready;
  uint32_t inflight;
  /* jobs placed, not yet sent: tokens and timeouts */
  uint64_t *batch;
  int64_t *batch_timeout;
  size_t nbatch;
} rank_state;

struct schedrun_mpi {
  MPI_Comm comm;
  int rank, size;
  schedrun_mpi_options_t o;
  schedrun_t *s;
  rank_state *ranks;
  /* the gateway */
  pthread_t gateway;
  bool gateway_started;
  atomic_bool stop;
  pthread_mutex_t lock; /* the queues below and the ranks' lost flags */
  pthread_cond_t cond;  /* signalled when the inbox or the results gain something */
  wire_in *in_head, *in_tail;
  wire_out *out_head, *out_tail;
  /* COMPLETEs this rank's callbacks packed, sent by the gateway in one
   * message each time round */
  msgpack_sbuffer done_tokens, done_bodies;
  msgpack_packer done_tk, done_bd;
  uint32_t ndone;
  /* rank 0: results of its own jobs, filed by their callbacks */
  struct local_done *local_head, *local_tail;
  uint64_t next_pid;
  uint64_t published; /* artifacts this rank took from others */
  void *serve_state; /* a serving rank's: its jobs' callbacks use it until close */
};

typedef struct local_done {
  struct local_done *next;
  uint64_t token;
  schedrun_job_result_t *res;
} local_done;

/* The gateway thread; started by schedrun_mpi_open. */
void *mpi_gateway_main(void *arg);
/* Whether the gateway has declared peer lost. */
bool mpi_is_lost(schedrun_mpi_t *m, int peer);
/* Queues a packed message (taking sb's buffer) for dest. */
void mpi_send(schedrun_mpi_t *m, int dest, msgpack_sbuffer *sb);
/* The next inbox message, waiting up to timeout_ms (-1: no limit); NULL when
 * none came. The caller frees it with mpi_in_free. */
wire_in *mpi_next(schedrun_mpi_t *m, int timeout_ms);
void mpi_in_free(wire_in *w);
/* Files one job's COMPLETE for rank 0 (from a completion callback). */
void mpi_complete_up(schedrun_mpi_t *m, uint64_t token, msg *complete);

/* Compiles p on this rank: one record_only job on device 0. Returns its
 * status; *why (heap, or NULL) gets its error: the kernel, its place, the
 * compiler's log and the teardown, which a serving rank sends rank 0. */
int mpi_compile_here(schedrun_mpi_t *m, schedrun_program_t *p, char **why);
/* Sends p's compiled kernels (W_ARTIFACTS) to each of the n ranks. */
#define SCHEDRUN_MPI_MAX_MEMBERS 4096
void mpi_send_artifacts(schedrun_mpi_t *m, schedrun_program_t *p, uint64_t pid, const int *to, size_t n);

int mpi_run_root(schedrun_mpi_t *m, schedrun_program_t *p, const schedrun_run_options_t *opts, schedrun_report_t **out,
                 schedrun_error_t *err);
int mpi_serve(schedrun_mpi_t *m, schedrun_error_t *err);

#endif
