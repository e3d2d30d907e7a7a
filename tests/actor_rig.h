/*
 * One actor on its own, for tests that talk to it in raw messages: a core
 * without devices' actors, a "client" mailbox the actor answers to, and a
 * socket to the actor's mailbox.
 */
#ifndef SCHEDRUN_TESTS_ACTOR_RIG_H
#define SCHEDRUN_TESTS_ACTOR_RIG_H

#include <string.h>
#include <zmq.h>

#include "actors/core.h"
#include "test_util.h"

typedef struct rig {
  schedrun_core core;
  void *inbox, *out;
  actor_t *actor;
} rig;

static inline void rig_up(rig *r, const char *actor) {
  memset(r, 0, sizeof *r);
  r->core.zctx = zmq_ctx_new();
  r->core.ndevices = 1;
  r->core.compile_workers = 1;
  r->core.cache_dir = (char *)tu_env("SCHEDRUN_CACHE_DIR");
  pthread_mutex_init(&r->core.reg_lock, NULL);
  hmap_init(&r->core.programs, sizeof(uint64_t));
  schedrun_error_t err = {0};
  r->inbox = mbox_bind(r->core.zctx, "client", &err);
  assert_non_null(r->inbox);
  r->out = mbox_connect(r->core.zctx, actor, &err);
  assert_non_null(r->out);
}

static inline void rig_down(rig *r) {
  mbox_close(r->out);
  mbox_close(r->inbox);
  zmq_ctx_term(r->core.zctx);
  hmap_destroy(&r->core.programs);
  pthread_mutex_destroy(&r->core.reg_lock);
}

/* TERM, then join the rig's actor. */
static inline void stop_actor(rig *r) {
  msg t;
  msg_init(&t, MSG_TERM, 0, "client");
  mbox_send(r->out, &t, NULL);
  msg_free(&t);
  actor_join(&r->actor);
}

/* The actor's next message to the client. */
static inline void rig_recv(rig *r, msg *reply) {
  schedrun_error_t err = {0};
  if (mbox_recv(r->inbox, TU_PATIENCE_MS, reply, NULL, &err)) fail_msg("no reply: %s", err.message);
}

static inline void send_recv(rig *r, msg *m, msg *reply) {
  assert_int_equal(mbox_send(r->out, m, NULL), SCHEDRUN_OK);
  rig_recv(r, reply);
}

#endif
