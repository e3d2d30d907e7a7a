/* Recorded state per execution-context key. The record actor is driven by
 * RECORD messages with chosen bindings, and every recorded sequence is run
 * and checked element by element, every loop iteration: create, reuse, update
 * only the nodes whose bindings changed, separate state per slot and device,
 * and a failed RECORD that leaves the recording intact. Then the loop
 * through the whole API: 8 unrolled iterations, 2 buffer sets, 4 runs.
 *
 * test_shared_slot.c runs the same loop (record_loop.h) against a deliberately
 * broken record actor that keeps one state per command, and expects exactly
 * the stale data this test would catch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "actors/actor.h"
#include "actors/core.h"
#include "common/artifact.h"
#include "record_loop.h"
#include "test_util.h"

static const char program_yaml[] =
    "version: 1\n"
    "kernels:\n"
    "  fill_slice:\n"
    "    params: [ptr, i32, f32]\n"
    "    source: |\n"
    "      extern \"C\" __global__ void fill_slice(float *p, int n, float v) {\n"
    "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (i < n) p[i] = v;\n"
    "      }\n"
    "buffers:\n"
    "  out: {type: f32, count: 512}\n"
    "  src: {type: f32, count: 8}\n"
    "  dst: {type: f32, count: 8}\n"
    "program:\n"
    "  - loop:\n"
    "      trips: 8\n"
    "      body:\n"
    "        - launch: {kernel: fill_slice, grid: 1, block: 64,\n"
    "                   args: [{buffer: out, offset: \"$iter * 64\"}, 64, \"$iter + 1\"]}\n"
    "  - copy: {from: src, to: dst, count: 8}\n";

typedef struct rig {
  schedrun_core core;
  record_state *st;
  actor_t *actor;
  void *inbox, *out;
  prog_program *p;
  char dir[64], artifact[128], key[65];
} rig;

static void rig_up(rig *r) {
  memset(r, 0, sizeof *r);
  schedrun_error_t err = {0};
  assert_int_equal(gpu_host_open(2, tu_gpu_opts(), &r->core.backend, &err), SCHEDRUN_OK);
  r->core.ndevices = 2;
  r->core.zctx = zmq_ctx_new();
  pthread_mutex_init(&r->core.reg_lock, NULL);
  hmap_init(&r->core.programs, sizeof(uint64_t));
  if (prog_load_string(program_yaml, strlen(program_yaml), "p.yaml", &r->p, &err)) fail_msg("%s", err.message);
  uint64_t id = 1;
  hmap_put(&r->core.programs, &id, r->p);
  /* the kernel, compiled into an artifact as the compile actor would */
  snprintf(r->dir, sizeof r->dir, "/tmp/schedrun-rec-XXXXXX");
  assert_non_null(mkdtemp(r->dir));
  const prog_kernel *k = &r->p->kernels[0];
  gpu_compile_req req = {k->name, k->entry, k->source, "p.yaml", k->first_line, k->params, k->nparams, "x86_64"};
  uint8_t *img;
  size_t len;
  char *log = NULL;
  if (gpu_host_target.compile(NULL, &req, r->dir, &img, &len, &log, &err)) fail_msg("%s\n%s", err.message, log);
  free(log);
  memset(r->key, 'a', 64);
  snprintf(r->artifact, sizeof r->artifact, "%s/fill.so", r->dir);
  assert_int_equal(artifact_write(r->artifact, r->key, img, len, &err), SCHEDRUN_OK);
  free(img);
  r->inbox = mbox_bind(r->core.zctx, "client", &err);
  r->st = record_state_new(&r->core);
  assert_int_equal(actor_start(r->core.zctx, &record_actor_def, ACTOR_RECORD, r->st, &r->actor, &err), SCHEDRUN_OK);
  r->out = mbox_connect(r->core.zctx, ACTOR_RECORD, &err);
}

static void rig_down(rig *r) {
  msg t;
  msg_init(&t, MSG_TERM, 0, "client");
  mbox_send(r->out, &t, NULL);
  msg_free(&t);
  assert_int_equal(actor_join(&r->actor), 0);
  record_state_free(r->st);
  mbox_close(r->out);
  mbox_close(r->inbox);
  zmq_ctx_term(r->core.zctx);
  prog_free(r->p);
  hmap_destroy(&r->core.programs);
  pthread_mutex_destroy(&r->core.reg_lock);
  gpu_backend_close(&r->core.backend);
  fs_remove_tree(r->dir);
}

/* Sends RECORD; returns the reply (RECORDED or ERROR). */
static void record(rig *r, uint32_t device, uint32_t slot, const uint64_t *b, size_t nb, msg *reply) {
  msg m;
  msg_init(&m, MSG_RECORD, 7, "client");
  msg_record *rc = &m.body.record;
  rc->program = 1;
  rc->device = device;
  rc->slot = slot;
  rc->bindings.v = malloc(nb * sizeof(uint64_t));
  memcpy(rc->bindings.v, b, nb * sizeof(uint64_t));
  rc->bindings.n = nb;
  rc->modules.v = calloc(1, sizeof(msg_module));
  rc->modules.v[0] = (msg_module){strdup("fill_slice"), strdup(r->key), strdup(r->artifact)};
  rc->modules.n = 1;
  assert_int_equal(mbox_send(r->out, &m, NULL), SCHEDRUN_OK);
  msg_free(&m);
  schedrun_error_t err = {0};
  if (mbox_recv(r->inbox, TU_PATIENCE_MS, reply, NULL, &err)) fail_msg("%s", err.message);
}

static uint64_t alloc(rig *r, int dev, size_t bytes) {
  uint64_t a;
  schedrun_error_t err = {0};
  assert_int_equal(r->core.backend->ops->mem_alloc(r->core.backend, dev, bytes, &a, &err), SCHEDRUN_OK);
  return a;
}

static void expect_counts(const msg *m, uint32_t created, uint32_t updated, uint32_t reused) {
  assert_int_equal(m->type, MSG_RECORDED);
  const msg_counts *c = &m->body.recorded.counts;
  if (c->created != created || c->updated != updated || c->reused != reused)
    fail_msg("counts %u/%u/%u, expected %u/%u/%u", c->created, c->updated, c->reused, created, updated, reused);
}

/* Zeroes out-buffers, runs the recorded sequence, and checks every slice. */
static void run_and_check(rig *r, const msg *rec, int dev, uint64_t out, uint64_t other_out, uint64_t dst,
                          const float *src_values) {
  gpu_backend *b = r->core.backend;
  schedrun_error_t err = {0};
  b->ops->mem_zero(b, dev, out, 512 * 4, &err);
  if (other_out) b->ops->mem_zero(b, dev, other_out, 512 * 4, &err);
  assert_int_equal(b->ops->seq_launch((gpu_seq *)(uintptr_t)rec->body.recorded.sequence, 0, NULL, &err), SCHEDRUN_OK);
  float h[512];
  b->ops->copy_dtoh(b, dev, h, out, sizeof h, &err);
  for (int it = 0; it < 8; it++)
    for (int t = 0; t < 64; t++)
      if (h[it * 64 + t] != (float)(it + 1))
        fail_msg("iteration %d: out[%d] = %g, expected %d", it, it * 64 + t, h[it * 64 + t], it + 1);
  if (other_out) {
    /* the buffers bound before must not be written any more */
    b->ops->copy_dtoh(b, dev, h, other_out, sizeof h, &err);
    for (int i = 0; i < 512; i++)
      if (h[i] != 0) fail_msg("stale binding: the old buffer got out[%d] = %g (iteration %d)", i, h[i], i / 64);
  }
  float d[8];
  b->ops->copy_dtoh(b, dev, d, dst, sizeof d, &err);
  for (int i = 0; i < 8; i++) assert_true(d[i] == src_values[i]);
}

/* A backend whose in-place update is refused once, part-way through, and
 * whose sequence creation can be made to fail. */
static const gpu_ops *real_ops;
static gpu_ops refusing_ops;
static int updates_before_refusal, creates_before_failure;

static int refusing_update(gpu_seq *s, uint32_t index, const gpu_node *n, schedrun_error_t *err) {
  if (updates_before_refusal-- == 0) return err_set(err, SCHEDRUN_EBACKEND, "the update was refused (test)");
  return real_ops->seq_update(s, index, n, err);
}

static int failing_create(gpu_backend *b, int dev, gpu_seq **out, schedrun_error_t *err) {
  if (creates_before_failure-- == 0) return err_set(err, SCHEDRUN_EBACKEND, "no sequence today (test)");
  return real_ops->seq_create(b, dev, out, err);
}

/* An update refused half-way (as a driver refuses some changes to an
 * instantiated graph) rebuilds the recording: the job records and runs
 * right, counted as created nodes. When the rebuild fails too, the error
 * names both failures and says the recording was dropped (not kept), and
 * the next RECORD of that context creates it afresh. */
static void test_refused_update_rebuilds(void **st) {
  (void)st;
  rig r;
  rig_up(&r);
  gpu_backend *be = r.core.backend;
  schedrun_error_t err = {0};
  uint64_t A = alloc(&r, 0, 2048), B = alloc(&r, 0, 2048), S1 = alloc(&r, 0, 32), D = alloc(&r, 0, 32);
  float s1[8];
  for (int i = 0; i < 8; i++) s1[i] = (float)(10 + i);
  be->ops->copy_htod(be, 0, S1, s1, sizeof s1, &err);
  msg m;
  uint64_t bind1[] = {A, S1, D}, bind2[] = {B, S1, D};
  record(&r, 0, 0, bind1, 3, &m);
  expect_counts(&m, 9, 0, 0);
  msg_free(&m);
  real_ops = be->ops;
  refusing_ops = *be->ops;
  refusing_ops.seq_update = refusing_update;
  refusing_ops.seq_create = failing_create;
  updates_before_refusal = 3; /* 8 launches move with `out`: the fourth is refused */
  creates_before_failure = 1;
  be->ops = &refusing_ops;
  record(&r, 0, 0, bind2, 3, &m);
  assert_int_equal(m.type, MSG_RECORDED);
  expect_counts(&m, 9, 0, 0); /* rebuilt */
  be->ops = real_ops;
  run_and_check(&r, &m, 0, B, A, D, s1);
  msg_free(&m);

  be->ops = &refusing_ops;
  updates_before_refusal = 0;
  creates_before_failure = 0;
  record(&r, 0, 0, bind1, 3, &m);
  be->ops = real_ops;
  assert_int_equal(m.type, MSG_ERROR);
  assert_non_null(strstr(m.body.error.text, "the update was refused (test)"));
  assert_non_null(strstr(m.body.error.text, "no sequence today (test)"));
  assert_int_equal(m.body.error.teardown.n, 1);
  assert_string_equal(m.body.error.teardown.v[0],
                      "drop the recording of this execution context: the next job records it afresh");
  msg_free(&m);
  record(&r, 0, 0, bind1, 3, &m);
  expect_counts(&m, 9, 0, 0); /* created afresh */
  run_and_check(&r, &m, 0, A, B, D, s1);
  msg_free(&m);
  rig_down(&r);
}

static void test_create_reuse_update_per_key(void **st) {
  (void)st;
  rig r;
  rig_up(&r);
  gpu_backend *be = r.core.backend;
  schedrun_error_t err = {0};
  uint64_t A = alloc(&r, 0, 2048), B = alloc(&r, 0, 2048), S1 = alloc(&r, 0, 32), S2 = alloc(&r, 0, 32),
           D = alloc(&r, 0, 32);
  float s1[8], s2[8];
  for (int i = 0; i < 8; i++) s1[i] = (float)(10 + i), s2[i] = (float)(-20 - i);
  be->ops->copy_htod(be, 0, S1, s1, sizeof s1, &err);
  be->ops->copy_htod(be, 0, S2, s2, sizeof s2, &err);
  msg m;

  uint64_t bind1[] = {A, S1, D};
  record(&r, 0, 0, bind1, 3, &m);
  expect_counts(&m, 9, 0, 0); /* first RECORD creates */
  run_and_check(&r, &m, 0, A, 0, D, s1);
  msg_free(&m);

  record(&r, 0, 0, bind1, 3, &m);
  expect_counts(&m, 0, 0, 9); /* same bindings: reused as is */
  run_and_check(&r, &m, 0, A, 0, D, s1);
  msg_free(&m);

  uint64_t bind2[] = {B, S1, D};
  record(&r, 0, 0, bind2, 3, &m);
  expect_counts(&m, 0, 8, 1); /* out moved: exactly the 8 launches that bind it */
  run_and_check(&r, &m, 0, B, A, D, s1);
  msg_free(&m);

  uint64_t bind3[] = {B, S2, D};
  record(&r, 0, 0, bind3, 3, &m);
  expect_counts(&m, 0, 1, 8); /* src moved: only the copy */
  run_and_check(&r, &m, 0, B, A, D, s2);
  msg_free(&m);

  /* another slot and another device have their own state */
  record(&r, 0, 1, bind1, 3, &m);
  expect_counts(&m, 9, 0, 0);
  run_and_check(&r, &m, 0, A, B, D, s1);
  msg_free(&m);
  uint64_t A1 = alloc(&r, 1, 2048), S1d = alloc(&r, 1, 32), D1 = alloc(&r, 1, 32);
  be->ops->copy_htod(be, 1, S1d, s1, sizeof s1, &err);
  uint64_t bind_d1[] = {A1, S1d, D1};
  record(&r, 1, 0, bind_d1, 3, &m);
  expect_counts(&m, 9, 0, 0);
  run_and_check(&r, &m, 1, A1, 0, D1, s1);
  msg_free(&m);
  /* slot 0 of device 0 still holds its last recording */
  record(&r, 0, 0, bind3, 3, &m);
  expect_counts(&m, 0, 0, 9);
  run_and_check(&r, &m, 0, B, A, D, s2);
  msg_free(&m);

  /* a bad RECORD answers ERROR and leaves the recording as it was */
  uint64_t short_bind[] = {A, S1};
  record(&r, 0, 0, short_bind, 2, &m);
  assert_int_equal(m.type, MSG_ERROR);
  assert_non_null(strstr(m.body.error.text, "binds 2 buffers"));
  assert_int_equal(m.body.error.teardown.n, 1);
  msg_free(&m);
  record(&r, 0, 0, bind3, 3, &m);
  expect_counts(&m, 0, 0, 9);
  msg_free(&m);

  /* the totals of the key, through STATUS */
  msg q;
  msg_init(&q, MSG_STATUS, 0, "client");
  q.body.status.items.v = calloc(3, sizeof(msg_stat));
  q.body.status.items.v[0] = (msg_stat){strdup("program"), 1};
  q.body.status.items.v[1] = (msg_stat){strdup("device"), 0};
  q.body.status.items.v[2] = (msg_stat){strdup("slot"), 0};
  q.body.status.items.n = 3;
  mbox_send(r.out, &q, NULL);
  msg_free(&q);
  assert_int_equal(mbox_recv(r.inbox, TU_PATIENCE_MS, &m, NULL, &err), SCHEDRUN_OK);
  int64_t want[] = {9, 9, 9, 36}; /* nodes, created, updated, reused */
  const char *names[] = {"nodes", "created", "updated", "reused"};
  for (int k = 0; k < 4; k++)
    for (size_t i = 0; i < m.body.status.items.n; i++)
      if (!strcmp(m.body.status.items.v[i].name, names[k])) assert_true(m.body.status.items.v[i].value == want[k]);
  msg_free(&m);

  uint64_t all[] = {A, B, S1, S2, D};
  for (int i = 0; i < 5; i++) be->ops->mem_free(be, 0, all[i]);
  be->ops->mem_free(be, 1, A1);
  be->ops->mem_free(be, 1, S1d);
  be->ops->mem_free(be, 1, D1);
  rig_down(&r);
}

static void test_loop_every_slice_every_run(void **st) {
  (void)st;
  schedrun_t *s = NULL;
  schedrun_program_t *p = NULL;
  schedrun_error_t err = {0};
  char why[256];
  assert_int_equal(loop_run_and_compare(&s, &p, why, sizeof why), SCHEDRUN_OK);
  if (why[0]) fail_msg("%s", why);
  /* per key: each buffer set's recording was created once and updated once */
  for (int slot = 0; slot < 2; slot++) {
    schedrun_counters_t c;
    assert_int_equal(schedrun_record_counters(s, p, 0, slot, &c, &err), SCHEDRUN_OK);
    assert_int_equal(c.nodes, 8);
    assert_int_equal(c.created, 8);
    assert_int_equal(c.updated, 8);
    assert_int_equal(c.reused, 0);
  }
  schedrun_counters_t none;
  assert_int_equal(schedrun_record_counters(s, p, 0, 5, &none, &err), SCHEDRUN_OK);
  assert_int_equal(none.nodes, 0);
  assert_int_equal(schedrun_record_counters(s, p, 3, 0, &none, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  schedrun_program_free(&p);
  schedrun_close(&s);
}

/* A program that reads no per-job variable: after its first recording, jobs
 * reuse it without a RECORD, and the per-key counters still count them. */
static void test_reuse_without_record_counted(void **st) {
  (void)st;
  static const char text[] =
      "version: 1\nrepeat: 5\n"
      "kernels:\n  fill_slice:\n    params: [ptr, i32, f32]\n    source: |\n"
      "      extern \"C\" __global__ void fill_slice(float *p, int n, float v) {\n"
      "        int i = blockIdx.x * blockDim.x + threadIdx.x;\n        if (i < n) p[i] = v;\n      }\n"
      "buffers:\n  out: {type: f32, count: 256}\n"
      "program:\n  - loop:\n      trips: 4\n      body:\n"
      "        - launch: {kernel: fill_slice, grid: 1, block: 64, args: [{buffer: out, offset: \"$iter * 64\"}, 64, \"$iter\"]}\n";
  for (int always = 0; always < 2; always++) {
    schedrun_options_t o;
    schedrun_options_init(&o);
    o.devices = "host:1";
    o.record_always = always;
    schedrun_t *s;
    schedrun_error_t err = {0};
    assert_int_equal(schedrun_open(&s, &o, &err), SCHEDRUN_OK);
    schedrun_program_t *p;
    assert_int_equal(schedrun_program_load_string(s, text, "reuse.yaml", &p, &err), SCHEDRUN_OK);
    schedrun_run_options_t ro;
    schedrun_run_options_init(&ro);
    ro.keep_outputs = 1;
    schedrun_report_t *r;
    if (schedrun_run(s, p, &ro, &r, &err)) fail_msg("%s", err.message);
    for (int run = 0; run < 5; run++) {
      const float *out = schedrun_report_output(r, run, 0, "out", NULL);
      for (int i = 0; i < 256; i++) assert_true(out[i] == (float)(i / 64));
      schedrun_job_info_t info;
      assert_int_equal(schedrun_report_job(r, run, 0, &info), SCHEDRUN_OK);
      assert_int_equal(info.nodes_created, run == 0 ? 4 : 0);
      assert_int_equal(info.nodes_reused, run == 0 ? 0 : 4);
      assert_int_equal(info.nodes_updated, 0);
      if (run > 0) {
        /* with the fast path no RECORD round trip happened at all */
        if (always) assert_true(info.record_ns > 0);
        else assert_int_equal(info.record_ns, 0);
      }
    }
    schedrun_counters_t c;
    assert_int_equal(schedrun_record_counters(s, p, 0, 0, &c, &err), SCHEDRUN_OK);
    assert_int_equal(c.nodes, 4);
    assert_int_equal(c.created, 4);
    assert_int_equal(c.reused, 16);
    assert_int_equal(c.updated, 0);
    schedrun_report_free(&r);
    schedrun_program_free(&p);
    schedrun_close(&s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reuse_without_record_counted),
      cmocka_unit_test(test_create_reuse_update_per_key),
      cmocka_unit_test(test_refused_update_rebuilds),
      cmocka_unit_test(test_loop_every_slice_every_run),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
