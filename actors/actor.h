/*
 * The actor runtime: a thread that owns its state and a mailbox, an inproc
 * ZeroMQ PULL socket named after the actor. Others send it msgpack messages
 * through PUSH sockets; nobody touches its state but its handler, which runs
 * one message at a time (on its thread, or on a guest's: below), so the
 * state needs no locks of its own.
 *
 * actor_start returns once the actor has bound its mailbox and run its start
 * hook (a synchronous handshake: a failed start is an error, not a half-alive
 * thread). The actor stops when its handler says so (on TERM, usually);
 * actor_join then waits for the thread and frees it.
 */
#ifndef SCHEDRUN_ACTOR_H
#define SCHEDRUN_ACTOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <zmq.h>

#include "common/common.h"
#include "messages/msg.h"

typedef struct actor actor_t;
typedef struct msg_queue msg_queue;

enum { ACTOR_CONTINUE = 0, ACTOR_STOP = 1 };

typedef struct actor_def {
  /* In the actor's thread, before the handshake completes. May be NULL. */
  int (*start)(actor_t *self, schedrun_error_t *err);
  /* One decoded message; returns ACTOR_CONTINUE or ACTOR_STOP. */
  int (*handle)(actor_t *self, msg *m);
  /* In the actor's thread, after the last message. May be NULL. */
  void (*stop)(actor_t *self);
  /* Descriptors the actor's thread also sleeps on, looked up before each
   * sleep (at most ACTOR_WAKE_FDS, how many returned). When one becomes
   * readable, `woken` runs on the thread without the turn (it must empty
   * what it must, safely beside a guest), then the handler gets a TICK if
   * the turn is free: a guest holding it must see to what the TICK was for.
   * Both may be NULL. */
  int (*wake_fds)(actor_t *self, int *fds);
  void (*woken)(actor_t *self);
} actor_def;
#define ACTOR_WAKE_FDS 2

/* How long a receiver keeps polling (yielding the CPU each time) before it
 * sleeps: in a pipeline the next message is often microseconds away, and
 * waking a sleeping thread costs more than that. */
#define ACTOR_SPIN_NS 30000

int actor_start(void *zctx, const actor_def *def, const char *name, void *state, actor_t **out,
                schedrun_error_t *err);
/* The same, with the actor's receive spin (0: sleep at once), and a queue
 * beside its mailbox (below; NULL: none) that it polls while it spins: when
 * the queue has messages its handler gets a QUEUED message, as when the
 * doorbell rings, and takes them. */
int actor_start_spin(void *zctx, const actor_def *def, const char *name, void *state, uint64_t spin_ns,
                     msg_queue *queue, actor_t **out, schedrun_error_t *err);
/* ---- guests: an idle actor's queue, run on another thread ----
 *
 * An actor's handler runs for one message at a time, under the actor's turn
 * (a mutex), not necessarily on the actor's own thread: while the turn is
 * free, a thread that has just queued a message for the actor, or is
 * waiting for what the actor will do next, may take the turn and run the
 * handler on what is queued itself (a guest). The message is the same
 * msgpack bytes, handled by the same code, one at a time, so the actor
 * still owns its state; what a guest saves is the hop to the actor's
 * thread and that thread's spinning beside the caller's. Only messages in
 * the queue are a guest's: the mailbox stays the thread's, and before the
 * thread handles a mailbox message it takes the queue, so order holds.
 *
 * A guest that polls the queue (msgq_poll_begin ... msgq_poll_end) must,
 * after it stops, run what it finds or, when the turn is busy, ring the
 * actor (the holder may have looked at the queue before the push). */
typedef enum { ACTOR_TURN_RAN, ACTOR_TURN_BUSY, ACTOR_TURN_STOPPED } actor_turn;
/* Runs the handler on the calling thread for everything queued (a QUEUED
 * message at a time, until the queue is empty), if the turn is free and the
 * actor has not stopped. When the handler says ACTOR_STOP here, the actor's
 * thread is woken to end. The actor must have a queue and must live (see
 * actor_join). */
actor_turn actor_run_queue_here(actor_t *a);
/* Runs fn(a, arg) on the calling thread under the actor's turn, if the turn
 * is free and the actor has not stopped: a guest's errand that the actor's
 * own code defines (fn may run the handler; it must not stop the actor).
 * The actor must live. */
actor_turn actor_run_here(actor_t *a, void (*fn)(actor_t *self, void *arg), void *arg);
/* Whether the calling thread is the actor's own. */
bool actor_on_own_thread(const actor_t *a);
/* How many times guests have taken the actor's queue (any thread). */
uint64_t actor_guest_rounds(const actor_t *a);

/* Waits for the actor's thread to end (it has stopped, or been told to);
 * its mailbox stays bound, so that a peer's late send does not wait on a
 * closed name. Once is enough; a second call returns at once. */
void actor_wait(actor_t *a);
/* Waits for the actor's thread, closes its mailbox and frees it; returns
 * how many malformed messages it dropped over its life. No guest may be
 * running or enter. Stopping actors that send to one another: actor_wait
 * each, then actor_join each. */
uint64_t actor_join(actor_t **a);

void *actor_state(const actor_t *a);
const char *actor_name(const actor_t *a);
/* Malformed messages received and dropped so far (they have no reliable
 * sender to answer). Safe from any thread while the actor lives. */
uint64_t actor_malformed(const actor_t *a);

/* Counts a malformed message the actor's handler found (one that came by
 * another way than its mailbox). */
void actor_count_malformed(actor_t *a);

/* Asks for a TICK message (MSG_TICK, job 0) to the actor's handler at or
 * soon after at_ns (the now_ns clock): the earliest time asked for wins, and
 * each TICK clears it, so a handler asks again for what is still ahead.
 * From the handler only (its thread, or a guest's: then the thread is rung,
 * and a TICK may come early; a handler checks what is due). */
void actor_wake_at(actor_t *self, uint64_t at_ns);

/* Encodes m and sends it to the actor named `to`. From the actor's handler
 * only (the sockets are the actor's, used under its turn). m stays the
 * caller's. */
int actor_send(actor_t *self, const char *to, msg *m);

/* Sends ERROR for `job` to `to`, with the teardown steps that have already run. */
int actor_send_error(actor_t *self, const char *to, uint64_t job, int code, const char *text,
                     const char *const *teardown, size_t nteardown);

/* ---- mailboxes outside actors (the library's client side) ---- */

void *mbox_bind(void *zctx, const char *name, schedrun_error_t *err);    /* PULL */
void *mbox_connect(void *zctx, const char *name, schedrun_error_t *err); /* PUSH */
void mbox_close(void *sock);
int mbox_send(void *sock, msg *m, schedrun_error_t *err);
/* m, encoded, as a ZeroMQ message for zmq_msg_send: encoded in a buffer the
 * calling thread keeps, then copied into the message (one allocation of
 * ZeroMQ's, none up to its 33-byte inline size); a message of more than
 * MBOX_COPY_MAX bytes (outputs) takes the buffer itself, without a copy. */
#define MBOX_COPY_MAX (8u << 10)
/* A thread's encoding buffer after it was handed on is made again at its
 * size when that is at most this much. */
#define MBOX_KEEP_MAX (256u << 10)
int mbox_encode(msg *m, zmq_msg_t *zm, schedrun_error_t *err);
/* Decodes a received message into m and closes it: SCHEDRUN_OK, or
 * SCHEDRUN_EPROTO for malformed bytes (m is then empty). */
int mbox_decode(zmq_msg_t *zm, msg *m);
/* Closes zm, a message mbox_encode made of m that was not sent: the bytes it
 * lent go back into m, as if it had never been encoded. */
void mbox_unsent(zmq_msg_t *zm, msg *m);
/* Waits up to timeout_ms (-1: forever) for one well-formed message. Returns
 * SCHEDRUN_ETIMEOUT when none came; malformed ones are skipped and counted in
 * *malformed when given. */
int mbox_recv(void *sock, int timeout_ms, msg *m, uint64_t *malformed, schedrun_error_t *err);
/* The same, polling for up to spin_ns before sleeping; with a queue (may be
 * NULL), polling it too: SCHEDRUN_EAGAIN when it has messages (m is then
 * untouched). Its sleep also ends when one of the nfds descriptors fds
 * becomes readable: SCHEDRUN_EAGAIN too. */
int mbox_recv_spin(void *sock, int timeout_ms, uint64_t spin_ns, msg_queue *q, const int *fds, int nfds, msg *m,
                   uint64_t *malformed, schedrun_error_t *err);

/* ---- a queue beside a mailbox ----
 *
 * A stream of small messages to a busy receiver, on an inproc ZeroMQ
 * PUSH/PULL pair of its own beside the receiver's mailbox: the sender rings
 * the receiver's mailbox (a QUEUED message) only when the queue was idle,
 * and the receiver, on that doorbell, takes everything queued since. A lone
 * message waits for nothing; a burst costs one wake. The bytes are the same
 * msgpack messages, decoded as strictly as the mailbox's.
 *
 * Any thread may push (the PUSH socket is used under `lock`, whose mutex is
 * the full barrier ZeroMQ asks for when a socket changes threads); any
 * thread may take (the PULL socket is used under `take_lock`). `queued`
 * counts the messages sent and not yet taken: a taker takes exactly those,
 * so it never asks the socket for a message that is not there, and a
 * receiver polls the count, not the socket.
 *
 * SUBMITs pushed while the queue holds messages not yet taken are gathered
 * (one caller submitting jobs one by one faster than the scheduler takes
 * them): their fields wait in `gather`, in columns, and leave as one
 * SUBMIT_MANY, encoded and sent under `lock` when the queue is next taken
 * or when a push cannot join them. A taker is sure to come (something
 * counted is waiting for it), and it finds the SUBMIT_MANY behind what was
 * counted before it, in push order. A SUBMIT that finds the queue empty
 * leaves at once, as any message does, and so does one that carries data
 * (inputs, hand-offs). */
#define MSGQ_GATHER_JOBS 1024 /* jobs in one gathered SUBMIT_MANY */
typedef struct msgq_gather {
  uint64_t *cols[MSG_SUBMIT_COLUMNS]; /* of cap elements, n used */
  size_t n, cap;
  uint64_t job;  /* the first's; the others follow it one by one */
  char from[32]; /* theirs, all the same */
} msgq_gather;

struct msg_queue {
  pthread_mutex_t lock; /* pushers: push, rung, gather */
  void *push;
  bool rung; /* a doorbell is on its way, and the queue not taken since */
  msgq_gather gather;   /* never holds jobs while queued is 0 */
  pthread_mutex_t take_lock; /* takers: pull */
  void *pull;
  _Atomic bool again; /* a taker found another taking: take once more */
  _Atomic size_t queued; /* messages sent, not yet taken */
  _Atomic int pollers;   /* receivers polling the queue themselves */
};

/* A queue with no sockets yet (msgq_open makes them). */
void msgq_init(msg_queue *q);
/* Binds the queue's PULL socket to inproc://q.<name> in zctx and connects its
 * PUSH socket to it. */
int msgq_open(msg_queue *q, void *zctx, const char *name, schedrun_error_t *err);
/* Closes the sockets (before their context ends); what is still queued is
 * dropped. msgq_destroy closes them too, and frees the rest. */
void msgq_close(msg_queue *q);
void msgq_destroy(msg_queue *q);
/* Sends m; *ring is true when the caller must now ring the receiver. */
int msgq_push(msg_queue *q, msg *m, bool *ring, schedrun_error_t *err);
/* Whether anything is queued now (no lock: a hint for a polling receiver). */
bool msgq_any(msg_queue *q);
/* A receiver polls the queue itself (msgq_any, then msgq_drain) between
 * these two: pushes meanwhile do not ring. After msgq_poll_end the receiver
 * must look once more, and take what it finds: a push that saw it polling
 * rang nobody. */
void msgq_poll_begin(msg_queue *q);
void msgq_poll_end(msg_queue *q);
/* Whether someone must ring the receiver for what is queued: true (and the
 * queue counts as rung) when it holds messages and no doorbell is on its
 * way. For a poller that stopped and could not take them. */
bool msgq_claim_ring(msg_queue *q);
/* The doorbell could not be sent: the next push rings again. */
void msgq_unring(msg_queue *q);
/* Takes everything queued and hands each message, in order, to fn (which
 * returns false for a type it does not take); returns how many messages
 * were malformed or refused. When another thread is taking, returns at
 * once, and that thread takes what this one would have. */
size_t msgq_drain(msg_queue *q, bool (*fn)(void *ctx, msg *m), void *ctx);

#endif
