/*
 * Out of memory where an actor opens state for a request: the compile actor
 * cannot open a session, the scheduler cannot create a program's state for a
 * RELEASE or take a job for a SUBMIT. Each answers with SCHEDRUN_ENOMEM,
 * saying what it left as it was (an ERROR's teardown; for a SUBMIT, the
 * job's COMPLETE says nothing of it was kept), and works again afterwards.
 * And the config loader: an allocation it cannot make fails the load with
 * ENOMEM and the place, never a program that silently lacks part of what
 * the config says.
 *
 * This program replaces calloc (alloc.h's sr_calloc where the library
 * keeps caches of small blocks) to fail exactly one allocation of a chosen
 * size while armed, so it is built without sanitizers (they own calloc).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "actors/compile_state.h"
#include "actors/scheduler_state.h"
#include "program/program.h"
#include "test_util.h"

#ifdef SCHEDRUN_ALLOC_CACHE
#define real_calloc(n, size) sr_cache_calloc(n, size)
#else
extern void *__libc_calloc(size_t n, size_t size);
#define real_calloc(n, size) __libc_calloc(n, size)
#endif

static _Atomic size_t fail_size; /* the next calloc of fail_size bytes in all fails */

/* calloc here is alloc.h's name: sr_calloc with the caches */
void *calloc(size_t n, size_t size) {
  size_t f = atomic_load(&fail_size);
  if (f && n * size == f && atomic_compare_exchange_strong(&fail_size, &f, 0)) {
    errno = ENOMEM;
    return NULL;
  }
  return real_calloc(n, size);
}

typedef struct rig {
  schedrun_core core;
  void *inbox, *out;
  actor_t *actor;
} rig;

static void rig_up(rig *r, const char *actor) {
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

static void rig_down(rig *r) {
  mbox_close(r->out);
  mbox_close(r->inbox);
  zmq_ctx_term(r->core.zctx);
  hmap_destroy(&r->core.programs);
  pthread_mutex_destroy(&r->core.reg_lock);
}

/* TERM, then join the rig's actor. */
static void stop_actor(rig *r) {
  msg t;
  msg_init(&t, MSG_TERM, 0, "client");
  mbox_send(r->out, &t, NULL);
  msg_free(&t);
  actor_join(&r->actor);
}

static void send_recv(rig *r, msg *m, msg *reply) {
  assert_int_equal(mbox_send(r->out, m, NULL), SCHEDRUN_OK);
  schedrun_error_t err = {0};
  if (mbox_recv(r->inbox, TU_PATIENCE_MS, reply, NULL, &err)) fail_msg("no reply: %s", err.message);
}

static void compile_msg(msg *m, uint64_t id) {
  msg_init(m, MSG_COMPILE, id, "client");
  m->body.compile.program = id;
  m->body.compile.target = strdup("host");
  m->body.compile.arch = strdup("x86_64");
  m->body.compile.kernels.v = real_calloc(1, sizeof(msg_kernel));
  m->body.compile.kernels.v[0] =
      (msg_kernel){strdup("k"), strdup("k"), strdup("ptr"), strdup("extern \"C\" __global__ void k(int *p) { p[0] = 3; }\n"),
                   strdup("oom.yaml:4:3"), strdup("oom.yaml"), 6};
  m->body.compile.kernels.n = 1;
}

static void test_compile_session_out_of_memory(void **st) {
  (void)st;
  rig r;
  rig_up(&r, ACTOR_COMPILE);
  compile_state *cs = compile_state_new(&r.core);
  schedrun_error_t err = {0};
  assert_int_equal(actor_start(r.core.zctx, &compile_actor_def, ACTOR_COMPILE, cs, &r.actor, &err), SCHEDRUN_OK);
  msg m, reply;
  compile_msg(&m, 1);
  send_recv(&r, &m, &reply); /* the target opens; the kernel compiles (or comes from the cache) */
  assert_int_equal(reply.type, MSG_COMPILED);
  msg_free(&reply);
  atomic_store(&fail_size, sizeof(session));
  m.job = 2;
  m.body.compile.program = 2;
  send_recv(&r, &m, &reply);
  assert_int_equal(atomic_load(&fail_size), 0); /* the session's allocation was the one refused */
  assert_int_equal(reply.type, MSG_ERROR);
  assert_int_equal(reply.body.error.code, SCHEDRUN_ENOMEM);
  assert_int_equal(reply.body.error.teardown.n, 1);
  assert_string_equal(reply.body.error.teardown.v[0], "open no compile session: the active compile mode is unchanged");
  msg_free(&reply);
  m.job = 3; /* and the next COMPILE works */
  m.body.compile.program = 3;
  send_recv(&r, &m, &reply);
  assert_int_equal(reply.type, MSG_COMPILED);
  msg_free(&reply);
  msg_free(&m);
  stop_actor(&r);
  compile_state_free(cs);
  rig_down(&r);
}

/* The scheduler alone, answering the rig's client. */
static scheduler_state *scheduler_up(rig *r) {
  rig_up(r, ACTOR_SCHEDULER);
  scheduler_state *ss = scheduler_state_new(&r->core);
  assert_non_null(ss);
  schedrun_error_t err = {0};
  assert_int_equal(actor_start(r->core.zctx, &scheduler_actor_def, ACTOR_SCHEDULER, ss, &r->actor, &err), SCHEDRUN_OK);
  return ss;
}

static void scheduler_down(rig *r, scheduler_state *ss) {
  stop_actor(r);
  scheduler_state_free(ss);
  rig_down(r);
}

static void test_release_out_of_memory(void **st) {
  (void)st;
  rig r;
  scheduler_state *ss = scheduler_up(&r);
  msg m, reply;
  msg_init(&m, MSG_RELEASE, 5, "client");
  m.body.release.program = 42; /* never ran here: the scheduler creates its state to answer */
  atomic_store(&fail_size, sizeof(prog_state));
  send_recv(&r, &m, &reply);
  msg_free(&m);
  assert_int_equal(atomic_load(&fail_size), 0);
  assert_int_equal(reply.type, MSG_ERROR);
  assert_int_equal(reply.body.error.code, SCHEDRUN_ENOMEM);
  assert_int_equal(reply.body.error.teardown.n, 1);
  assert_string_equal(reply.body.error.teardown.v[0], "release nothing: the program's state is as it was");
  msg_free(&reply);
  scheduler_down(&r, ss);
}

/* A SUBMIT the scheduler has no memory to take a job for is answered with
 * SCHEDRUN_ENOMEM, naming the job, not dropped (its client would wait for
 * good); the next SUBMIT is taken as usual (refused here for its unknown
 * program, which only a job it took can be). */
static void test_submit_out_of_memory(void **st) {
  (void)st;
  rig r;
  scheduler_state *ss = scheduler_up(&r);
  msg m, reply;
  msg_init(&m, MSG_SUBMIT, 77, "client");
  m.body.submit.program = 42;
  m.body.submit.run = 3;
  m.body.submit.job_index = 9;
  m.body.submit.device = -1;
  atomic_store(&fail_size, sizeof(job));
  send_recv(&r, &m, &reply);
  assert_int_equal(atomic_load(&fail_size), 0); /* the job's allocation was the one refused */
  assert_int_equal(reply.type, MSG_COMPLETE);
  assert_true(reply.job == 77);
  assert_int_equal(reply.body.complete.status, SCHEDRUN_ENOMEM);
  assert_int_equal(reply.body.complete.device, -1);
  assert_int_equal(reply.body.complete.run, 3);
  assert_int_equal(reply.body.complete.job_index, 9);
  if (!strstr(reply.body.complete.text, "could not take job 77 (run 3, job 9)"))
    fail_msg("the answer does not name the job: %s", reply.body.complete.text);
  msg_free(&reply);
  m.job = 78;
  send_recv(&r, &m, &reply);
  msg_free(&m);
  assert_int_equal(reply.type, MSG_COMPLETE);
  assert_true(reply.job == 78);
  assert_int_equal(reply.body.complete.status, SCHEDRUN_EINVAL);
  assert_string_equal(reply.body.complete.text, "no such program\nteardown: keep nothing of the job (it was never "
                                                "taken): free its inputs and the buffers handed to it");
  msg_free(&reply);
  scheduler_down(&r, ss);
}

/* Each of the loader's allocations that a config sizes, refused in turn. */
static void test_loader_out_of_memory(void **st) {
  (void)st;
  static const char yaml[] = "version: 1\n"
                             "kernels:\n"
                             "  k: {params: [ptr, i32, f32, f32, f32], source: 'x'}\n"
                             "buffers:\n"
                             "  a: {type: i32, count: 12347, init: {fill: 7}}\n"
                             "program:\n"
                             "  - launch: {kernel: k, grid: 1, block: 1, args: [a, 1, 2, 3, 4]}\n"
                             "expect:\n"
                             "  a: {values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}\n";
  static const struct {
    size_t bytes;
    const char *want;
  } cases[] = {
      {12347 * sizeof(int32_t), "t.yaml:5:38: out of memory for the buffer's contents"},
      {5 * sizeof(prog_type), "t.yaml:3:15: out of memory for the kernel's params"},
      {5 * sizeof(prog_arg), "t.yaml:7:50: out of memory for the launch's args"},
      {11 * sizeof(double), "t.yaml:9:15: out of memory for the expected values"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    prog_program *p = NULL;
    schedrun_error_t err = {0};
    atomic_store(&fail_size, cases[i].bytes);
    int rc = prog_load_string(yaml, strlen(yaml), "t.yaml", &p, &err);
    assert_int_equal(atomic_load(&fail_size), 0); /* the allocation was made, and refused */
    assert_int_equal(rc, SCHEDRUN_ENOMEM);
    assert_int_equal(err.code, SCHEDRUN_ENOMEM);
    assert_null(p);
    if (!strstr(err.message, cases[i].want)) fail_msg("case %zu: %s", i, err.message);
    schedrun_error_clear(&err);
  }
  /* and unarmed, the same config loads */
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(prog_load_string(yaml, strlen(yaml), "t.yaml", &p, &err), SCHEDRUN_OK);
  assert_int_equal(p->buffers[0].count, 12347);
  assert_int_equal(p->kernels[0].nparams, 5);
  prog_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_compile_session_out_of_memory),
      cmocka_unit_test(test_release_out_of_memory),
      cmocka_unit_test(test_submit_out_of_memory),
      cmocka_unit_test(test_loader_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
