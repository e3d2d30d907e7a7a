/* The message codec: every type round-trips, in bytes that msgpack-c's own
 * library reads and writes back identically; malformed bytes are rejected
 * with SCHEDRUN_EPROTO, never a crash (this test also runs under ASan). */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "messages/msg.h"
#include "test_util.h"

static uint8_t *enc(const msg *m, size_t *len) {
  uint8_t *buf = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(msg_encode(m, &buf, len, &err), SCHEDRUN_OK);
  assert_non_null(buf);
  return buf;
}

/* Writes m's bytes to $SCHEDRUN_WRITE_SEED_DIR/<TYPE> when set: the fuzzer's
 * seed for the type (tests/fuzz/corpus/codec). Every message round-tripped
 * here writes its type's seed: the last of a type is kept. */
static void write_seed(const msg *m) {
  const char *dir = getenv("SCHEDRUN_WRITE_SEED_DIR");
  if (!dir) return;
  size_t len;
  uint8_t *buf = enc(m, &len);
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, msg_type_name(m->type));
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, len, f), len);
  fclose(f);
  free(buf);
}

/* The codec is msgpack-c's packer and unpacker, built from its headers
 * (messages/msg_encode.c, msg_decode.c): libmsgpackc itself reads the bytes
 * as exactly one object, the envelope, and writes that object back byte for
 * byte (both write every value in its shortest form). */
static void msgpack_c_agrees(const msg *m, const uint8_t *buf, size_t len) {
  msgpack_zone z;
  assert_true(msgpack_zone_init(&z, 4096));
  msgpack_object o;
  size_t off = 0;
  assert_int_equal(msgpack_unpack((const char *)buf, len, &off, &z, &o), MSGPACK_UNPACK_SUCCESS);
  assert_int_equal(off, len);
  assert_int_equal(o.type, MSGPACK_OBJECT_ARRAY);
  assert_int_equal(o.via.array.size, 5);
  assert_int_equal(o.via.array.ptr[1].via.u64, (uint64_t)m->type);
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  assert_int_equal(msgpack_pack_object(&pk, o), 0);
  assert_int_equal(sb.size, len);
  assert_memory_equal(sb.data, buf, len);
  msgpack_sbuffer_destroy(&sb);
  msgpack_zone_destroy(&z);
}

static void roundtrip(msg *m, msg *out) {
  size_t len;
  uint8_t *buf = enc(m, &len);
  msgpack_c_agrees(m, buf, len);
  schedrun_error_t err = {0};
  int rc = msg_decode(buf, len, out, &err);
  if (rc) fail_msg("decode failed: %s", err.message);
  free(buf);
  write_seed(m);
  assert_int_equal(out->v, MSG_VERSION);
  assert_int_equal(out->type, m->type);
  assert_true(out->job == m->job);
  assert_string_equal(out->from, m->from);
}

static char *s(const char *x) { return strdup(x); }

static void test_submit(void **st) {
  (void)st;
  msg m, o;
  msg_init(&m, MSG_SUBMIT, 0xfffffffffffffff0ull, "client");
  m.body.submit = (msg_submit){7, 3, 9, 1, -1, 1};
  roundtrip(&m, &o);
  assert_true(o.body.submit.program == 7);
  assert_int_equal(o.body.submit.run, 3);
  assert_int_equal(o.body.submit.job_index, 9);
  assert_int_equal(o.body.submit.slot, 1);
  assert_int_equal(o.body.submit.device, -1);
  assert_int_equal(o.body.submit.keep, 1);
  msg_free(&m);
  msg_free(&o);
}

/* m's bytes are refused by the decoder, with `named` in the sentence. */
static void refused(const msg *m, const char *named) {
  size_t len;
  uint8_t *buf = enc(m, &len);
  msg o;
  schedrun_error_t err = {0};
  assert_int_equal(msg_decode(buf, len, &o, &err), SCHEDRUN_EPROTO);
  if (!strstr(err.message, named)) fail_msg("'%s' does not name %s", err.message, named);
  free(buf);
  schedrun_error_clear(&err);
}

/* SUBMIT_MANY, built job by job: every job's fields and inputs back, in
 * order (a device of -1 included). */
static void submit_many_of(msg *m, uint32_t n, uint32_t with_input) {
  msg_init(m, MSG_SUBMIT_MANY, 100, "client");
  assert_int_equal(msg_submit_many_reserve(&m->body.submit_many, n, 1), SCHEDRUN_OK);
  for (uint32_t k = 0; k < n; k++) {
    msg_submit sb = {4, k, 10 + k, k % 2, (int32_t)k - 1, k & 1, {NULL, 0}, 1000ull * k, k == 2};
    if (k == with_input) {
      sb.inputs.v = calloc(1, sizeof(msg_output));
      sb.inputs.n = 1;
      sb.inputs.v[0].buffer = 2;
      sb.inputs.v[0].data.data = (uint8_t *)strdup("abcd");
      sb.inputs.v[0].data.len = 4;
    }
    msg_submit_many_add(&m->body.submit_many, &sb);
    assert_null(sb.inputs.v); /* moved */
  }
}

static void test_submit_many(void **st) {
  (void)st;
  msg m, o;
  submit_many_of(&m, 3, 1);
  roundtrip(&m, &o);
  const msg_submit_many *b = &o.body.submit_many;
  assert_int_equal(b->programs.n, 3);
  for (uint32_t k = 0; k < 3; k++) {
    msg_submit a;
    msg_submit_many_get(b, k, &a);
    assert_true(a.program == 4 && a.run == k && a.job_index == 10 + k && a.slot == k % 2);
    assert_int_equal(a.device, (int)k - 1);
    assert_int_equal(a.keep, k & 1);
    assert_true(a.deadline == 1000ull * k);
    assert_int_equal(a.record_only, k == 2);
    assert_int_equal(a.inputs.n, 0);
  }
  assert_int_equal(b->inputs.n, 1);
  assert_int_equal(b->input_jobs.n, 1);
  assert_int_equal(b->input_jobs.v[0], 1);
  assert_int_equal(b->inputs.v[0].buffer, 2);
  assert_memory_equal(b->inputs.v[0].data.data, "abcd", 4);
  assert_string_equal(msg_type_name(MSG_SUBMIT_MANY), "SUBMIT_MANY");
  msg_free(&o);
  /* a device past int32 is no device; columns that do not match are refused */
  m.body.submit_many.devices.v[0] = (uint64_t)INT32_MAX + 5;
  msg_submit a;
  msg_submit_many_get(&m.body.submit_many, 0, &a);
  assert_int_equal(a.device, INT32_MAX);
  m.body.submit_many.runs.n = 2;
  refused(&m, "runs: the column's length is not the number of jobs");
  m.body.submit_many.runs.n = 3;
  m.body.submit_many.slots.v[2] = (uint64_t)UINT32_MAX + 1;
  refused(&m, "slots: an element is over 32 bits");
  m.body.submit_many.slots.v[2] = 0;
  m.body.submit_many.input_jobs.v[0] = 3;
  refused(&m, "input_jobs: names no job of the batch");
  msg_free(&m);
  msg_init(&m, MSG_SUBMIT_MANY, 100, "client");
  refused(&m, "programs: a batch of no jobs");
  msg_free(&m);
}

/* SUBMIT_MANY with hand-offs (a graph's steps sent together): each job's
 * park entries and takes back with its position, kept ones marked; lists
 * that do not place their items on the batch's jobs in order are refused,
 * naming them. */
static void test_submit_many_hands_on(void **st) {
  (void)st;
  msg m, o;
  msg_init(&m, MSG_SUBMIT_MANY, 200, "client");
  msg_submit_many *b = &m.body.submit_many;
  assert_int_equal(msg_submit_many_reserve(b, 3, 0), SCHEDRUN_OK);
  assert_int_equal(msg_submit_many_reserve_handoffs(b, 3, 6), SCHEDRUN_OK);
  for (uint32_t k = 0; k < 3; k++) {
    msg_submit sb = {4, 0, k, 0, -1, 0, {NULL, 0}, 0, 0, {NULL, 0}, {NULL, 0}};
    if (k < 2) { /* jobs 0 and 1 keep buffer 1 for the next */
      sb.park.v = malloc(sizeof(uint64_t));
      sb.park.v[0] = 1 | MSG_PARK_LOCAL;
      sb.park.n = 1;
    }
    if (k > 0) { /* jobs 1 and 2 take it into buffer 0 */
      sb.takes.v = malloc(3 * sizeof(uint64_t));
      sb.takes.v[0] = 0 | (uint64_t)0 << 32;
      sb.takes.v[1] = MSG_TAKE_LOCAL;
      sb.takes.v[2] = 200 + k - 1;
      sb.takes.n = 3;
    }
    msg_submit_many_add_handing(b, &sb);
    assert_null(sb.park.v); /* moved */
    assert_null(sb.takes.v);
  }
  roundtrip(&m, &o);
  const msg_submit_many *ob = &o.body.submit_many;
  assert_int_equal(ob->park.n, 2);
  assert_int_equal(ob->park_jobs.n, 2);
  assert_int_equal(ob->take_jobs.n, 2);
  assert_int_equal(ob->takes.n, 6);
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(ob->park_jobs.v[i], i);
    assert_true(ob->park.v[i] == (1 | MSG_PARK_LOCAL));
    assert_int_equal(ob->take_jobs.v[i], i + 1);
    assert_int_equal(MSG_TAKE_BUFFER(ob->takes.v[3 * i]), 0);
    assert_int_equal(MSG_TAKE_PARK(ob->takes.v[3 * i]), 0);
    assert_true(ob->takes.v[3 * i + 1] == MSG_TAKE_LOCAL);
    assert_int_equal(ob->takes.v[3 * i + 2], 200 + i);
  }
  msg_free(&o);
  b->take_jobs.v[1] = 0; /* before job 1's: out of order */
  refused(&m, "take_jobs: names no job of the batch, or is out of job order");
  b->take_jobs.v[1] = 2;
  b->park_jobs.v[1] = 3;
  refused(&m, "park_jobs: names no job of the batch");
  b->park_jobs.v[1] = 1;
  b->takes.n = 5;
  refused(&m, "takes: not a list of {buffer, device, address} triples");
  b->takes.n = 6;
  b->park_jobs.n = 1;
  refused(&m, "park_jobs: the column's length is not the number of items it places");
  msg_free(&m);
}

static msg_u64s col(size_t n, uint64_t base) {
  msg_u64s c = {calloc(n ? n : 1, sizeof(uint64_t)), n};
  for (size_t k = 0; k < n; k++) c.v[k] = base + k;
  return c;
}

static msg_outputs outs(size_t n) {
  msg_outputs o = {calloc(n ? n : 1, sizeof(msg_output)), n};
  for (size_t i = 0; i < n; i++) {
    o.v[i].buffer = (uint32_t)i;
    o.v[i].data.data = (uint8_t *)strdup("wxyz");
    o.v[i].data.len = 4;
  }
  return o;
}

/* The batch messages: every column back, element by element. */
static void test_batches(void **st) {
  (void)st;
  msg m, o;
  msg_init(&m, MSG_EXECUTE_MANY, 40, "scheduler");
  msg_execute_many *x = &m.body.execute_many;
  x->program = 3;
  x->device = 1;
  x->slot = 2;
  x->sequence = 0xabcdef;
  x->bindings = col(2, 0x1000);
  x->client = s("client");
  x->nodes = 7;
  x->jobs = col(3, 40);
  x->runs = col(3, 0);
  x->job_indexes = col(3, 10);
  x->keeps = col(3, 0);
  x->t_submits = col(3, 1000);
  x->deadlines = col(3, 0);
  x->input_jobs = col(2, 0);
  x->input_jobs.v[1] = 2;
  x->inputs = outs(2);
  x->park_jobs = col(2, 0); /* jobs 0 and 2 leave buffers 1 and 0 */
  x->park_jobs.v[1] = 2;
  x->park = col(2, 1);
  x->park.v[1] = 0;
  x->take_jobs = col(1, 1); /* job 1 takes buffer 0 from device 1 */
  x->takes = col(3, 0);
  x->takes.v[2] = 0x9000;
  roundtrip(&m, &o);
  const msg_execute_many *y = &o.body.execute_many;
  assert_true(y->park.n == 2 && y->park_jobs.v[1] == 2 && y->park.v[0] == 1 && y->park.v[1] == 0);
  assert_true(y->takes.n == 3 && y->take_jobs.n == 1 && y->take_jobs.v[0] == 1 && y->takes.v[2] == 0x9000);
  assert_true(y->program == 3 && y->device == 1 && y->slot == 2 && y->sequence == 0xabcdef && y->nodes == 7);
  assert_string_equal(y->client, "client");
  assert_int_equal(y->jobs.n, 3);
  for (size_t k = 0; k < 3; k++) {
    assert_true(y->jobs.v[k] == 40 + k && y->runs.v[k] == k && y->job_indexes.v[k] == 10 + k);
    assert_true(y->t_submits.v[k] == 1000 + k && y->deadlines.v[k] == k && y->keeps.v[k] == k);
  }
  assert_int_equal(y->inputs.n, 2);
  assert_true(y->input_jobs.v[0] == 0 && y->input_jobs.v[1] == 2);
  assert_memory_equal(y->inputs.v[1].data.data, "wxyz", 4);
  msg_free(&o);

  /* a column one short, an input of no job, inputs out of job order: refused by name */
  x->runs.n = 2;
  refused(&m, "runs");
  x->runs.n = 3;
  x->input_jobs.v[1] = 3;
  refused(&m, "input_jobs");
  x->input_jobs.v[0] = 2;
  x->input_jobs.v[1] = 1;
  refused(&m, "job order");
  x->input_jobs.v[0] = 0;
  x->input_jobs.v[1] = 2;
  x->takes.n = 2; /* not a triple */
  refused(&m, "takes");
  x->takes.n = 3;
  x->take_jobs.v[0] = 3; /* a parcel for no job of the batch */
  refused(&m, "take_jobs");
  x->take_jobs.v[0] = 1;
  x->park_jobs.n = 1; /* a parked buffer without its job */
  refused(&m, "park_jobs");
  x->park_jobs.n = 2;
  x->jobs.v[1] = 0;
  x->input_jobs.v[0] = 0;
  refused(&m, "job id 0");
  msg_free(&m);

  msg_init(&m, MSG_COMPLETE_MANY, 50, "execute.0");
  msg_complete_many *c = &m.body.complete_many;
  c->program = 3;
  c->device = 1;
  c->nodes = 9;
  c->jobs = col(2, 50);
  c->runs = col(2, 4);
  c->job_indexes = col(2, 8);
  c->t_submits = col(2, 100);
  c->t_executes = col(2, 200);
  c->t_dones = col(2, 300);
  c->execute_ns = col(2, 5);
  c->output_jobs = col(3, 0);
  c->output_jobs.v[2] = 1;
  c->outputs = outs(3);
  c->handoffs_local = col(2, 1);
  c->handoffs_copied = col(2, 0);
  c->parcel_jobs = col(1, 1);
  c->parcels = col(1, 0x5000);
  c->handoffs_peer = col(2, 3);
  c->bytes_in = col(2, 1ull << 40);
  c->bytes_out = col(2, 4096);
  c->bytes_peer = col(2, 7);
  roundtrip(&m, &o);
  const msg_complete_many *d = &o.body.complete_many;
  assert_true(d->handoffs_local.v[1] == 2 && d->handoffs_copied.v[0] == 0 && d->parcels.v[0] == 0x5000 &&
              d->parcel_jobs.v[0] == 1);
  for (size_t k = 0; k < 2; k++)
    assert_true(d->handoffs_peer.v[k] == 3 + k && d->bytes_in.v[k] == (1ull << 40) + k &&
                d->bytes_out.v[k] == 4096 + k && d->bytes_peer.v[k] == 7 + k);
  assert_true(d->program == 3 && d->device == 1 && d->nodes == 9 && d->jobs.n == 2);
  for (size_t k = 0; k < 2; k++)
    assert_true(d->jobs.v[k] == 50 + k && d->runs.v[k] == 4 + k && d->job_indexes.v[k] == 8 + k &&
                d->t_submits.v[k] == 100 + k && d->t_executes.v[k] == 200 + k && d->t_dones.v[k] == 300 + k &&
                d->execute_ns.v[k] == 5 + k);
  assert_true(d->outputs.n == 3 && d->output_jobs.v[0] == 0 && d->output_jobs.v[1] == 1 && d->output_jobs.v[2] == 1);
  msg_free(&o);
  c->output_jobs.n = 2; /* an output without its job */
  refused(&m, "output_jobs");
  c->output_jobs.n = 3;
  c->handoffs_copied.n = 1; /* a column one short */
  refused(&m, "handoffs_copied");
  c->handoffs_copied.n = 2;
  free(c->bytes_peer.v);
  c->bytes_peer = col(3, 7); /* a column one long */
  refused(&m, "bytes_peer");
  free(c->bytes_peer.v);
  c->bytes_peer = col(2, 7);
  c->parcel_jobs.v[0] = 2; /* a parcel of no job */
  refused(&m, "parcel_jobs");
  msg_free(&m);

  msg_init(&m, MSG_EXECUTED_MANY, 60, "execute.1");
  m.body.executed_many.program = 5;
  m.body.executed_many.device = 1;
  m.body.executed_many.jobs = col(4, 60);
  m.body.executed_many.exec_ns = col(4, 900);
  roundtrip(&m, &o);
  assert_true(o.body.executed_many.program == 5 && o.body.executed_many.device == 1);
  for (size_t k = 0; k < 4; k++) assert_true(o.body.executed_many.jobs.v[k] == 60 + k);
  for (size_t k = 0; k < 4; k++) assert_true(o.body.executed_many.exec_ns.v[k] == 900 + k);
  msg_free(&o);
  m.body.executed_many.exec_ns.n = 3; /* a time short */
  refused(&m, "exec_ns");
  m.body.executed_many.exec_ns.n = 4;
  m.body.executed_many.jobs.n = 0; /* a batch of nothing */
  refused(&m, "no jobs");
  m.body.executed_many.jobs.n = 4;
  msg_free(&m);

  msg_init(&m, MSG_QUEUED, 70, "client");
  roundtrip(&m, &o);
  assert_string_equal(msg_type_name(MSG_QUEUED), "QUEUED");
  msg_free(&o);
  msg_free(&m);
}

static void test_compile_and_compiled(void **st) {
  (void)st;
  msg m, o;
  msg_init(&m, MSG_COMPILE, 5, "scheduler");
  m.body.compile.program = 2;
  m.body.compile.target = s("host");
  m.body.compile.arch = s("sm_90");
  m.body.compile.kernels.v = calloc(2, sizeof(msg_kernel));
  m.body.compile.kernels.n = 2;
  for (int i = 0; i < 2; i++) {
    msg_kernel *k = &m.body.compile.kernels.v[i];
    k->name = s(i ? "b" : "a");
    k->entry = s(i ? "eb" : "ea");
    k->params = s("f32,ptr");
    k->source = s(i ? "src b \xe2\x82\xac" : "");
    k->where = s("x.yaml:3:4");
    k->source_file = s("x.yaml");
    k->first_line = 5 + (uint32_t)i;
  }
  roundtrip(&m, &o);
  assert_int_equal(o.body.compile.kernels.n, 2);
  for (int i = 0; i < 2; i++) {
    assert_string_equal(o.body.compile.kernels.v[i].name, m.body.compile.kernels.v[i].name);
    assert_string_equal(o.body.compile.kernels.v[i].entry, m.body.compile.kernels.v[i].entry);
    assert_string_equal(o.body.compile.kernels.v[i].source, m.body.compile.kernels.v[i].source);
    assert_int_equal(o.body.compile.kernels.v[i].first_line, 5 + i);
  }
  assert_string_equal(o.body.compile.arch, "sm_90");
  msg_free(&m);
  msg_free(&o);

  msg_init(&m, MSG_COMPILED, 5, "compile");
  m.body.compiled.program = 2;
  m.body.compiled.target = s("host");
  m.body.compiled.modules.v = calloc(1, sizeof(msg_module));
  m.body.compiled.modules.n = 1;
  m.body.compiled.modules.v[0] = (msg_module){s("a"), s("00ff"), s("/c/a.so")};
  m.body.compiled.hits = 4;
  m.body.compiled.misses = 1;
  roundtrip(&m, &o);
  assert_string_equal(o.body.compiled.modules.v[0].path, "/c/a.so");
  assert_string_equal(o.body.compiled.modules.v[0].key, "00ff");
  assert_int_equal(o.body.compiled.hits, 4);
  assert_int_equal(o.body.compiled.misses, 1);
  msg_free(&m);
  msg_free(&o);
}

static void test_record_family(void **st) {
  (void)st;
  msg m, o;
  msg_init(&m, MSG_RECORD, 1, "scheduler");
  msg_record *r = &m.body.record;
  r->program = 1;
  r->device = 3;
  r->slot = 1;
  r->run = 2;
  r->job_index = 4;
  r->bindings.v = malloc(3 * sizeof(uint64_t));
  r->bindings.n = 3;
  r->bindings.v[0] = 0;
  r->bindings.v[1] = UINT64_MAX;
  r->bindings.v[2] = 0x7f0000001000ull;
  roundtrip(&m, &o);
  assert_int_equal(o.body.record.bindings.n, 3);
  for (int i = 0; i < 3; i++) assert_true(o.body.record.bindings.v[i] == r->bindings.v[i]);
  assert_int_equal(o.body.record.modules.n, 0);
  assert_int_equal(o.body.record.device, 3);
  msg_free(&m);
  msg_free(&o);

  msg_init(&m, MSG_RECORDED, 1, "record");
  m.body.recorded = (msg_recorded){1, 2, 3, 0xdeadbeefull, {10, 20, 30}};
  roundtrip(&m, &o);
  assert_int_equal(o.body.recorded.counts.created, 10);
  assert_int_equal(o.body.recorded.counts.updated, 20);
  assert_int_equal(o.body.recorded.counts.reused, 30);
  assert_true(o.body.recorded.sequence == 0xdeadbeefull);
  msg_free(&m);
  msg_free(&o);

  msg_init(&m, MSG_EXECUTE, 1, "scheduler");
  m.body.execute.sequence = 77;
  m.body.execute.keep = 1;
  roundtrip(&m, &o);
  assert_true(o.body.execute.sequence == 77);
  assert_int_equal(o.body.execute.keep, 1);
  msg_free(&m);
  msg_free(&o);

  msg_init(&m, MSG_EXECUTED, 1, "execute.0");
  m.body.executed.outputs.v = calloc(2, sizeof(msg_output));
  m.body.executed.outputs.n = 2;
  m.body.executed.outputs.v[0].buffer = 3;
  m.body.executed.outputs.v[0].data.data = malloc(1000);
  m.body.executed.outputs.v[0].data.len = 1000;
  for (int i = 0; i < 1000; i++) m.body.executed.outputs.v[0].data.data[i] = (uint8_t)(i * 7);
  m.body.executed.outputs.v[1].buffer = 0;
  m.body.executed.outputs.v[1].data.data = malloc(1);
  m.body.executed.outputs.v[1].data.len = 0;
  m.body.executed.exec_ns = 123456789;
  roundtrip(&m, &o);
  assert_int_equal(o.body.executed.outputs.n, 2);
  assert_int_equal(o.body.executed.outputs.v[0].data.len, 1000);
  assert_memory_equal(o.body.executed.outputs.v[0].data.data, m.body.executed.outputs.v[0].data.data, 1000);
  assert_int_equal(o.body.executed.outputs.v[1].data.len, 0);
  assert_true(o.body.executed.exec_ns == 123456789);
  msg_free(&m);
  msg_free(&o);
}

static void test_complete_error_status_term_release(void **st) {
  (void)st;
  msg m, o;
  msg_init(&m, MSG_COMPLETE, 9, "scheduler");
  m.body.complete.status = SCHEDRUN_ECOMPILE;
  m.body.complete.device = -1;
  m.body.complete.text = s("kernel 'x': boom");
  m.body.complete.counts = (msg_counts){1, 2, 3};
  m.body.complete.cache_misses = 2;
  roundtrip(&m, &o);
  assert_int_equal(o.body.complete.status, SCHEDRUN_ECOMPILE);
  assert_int_equal(o.body.complete.device, -1);
  assert_string_equal(o.body.complete.text, "kernel 'x': boom");
  assert_int_equal(o.body.complete.counts.reused, 3);
  assert_int_equal(o.body.complete.cache_misses, 2);
  msg_free(&m);
  msg_free(&o);

  msg_init(&m, MSG_ERROR, 9, "compile");
  m.body.error.code = SCHEDRUN_ECOMPILE;
  m.body.error.origin = s("compile");
  m.body.error.job = 9;
  m.body.error.text = s("two kernels failed");
  m.body.error.teardown.v = calloc(3, sizeof(char *));
  m.body.error.teardown.n = 3;
  m.body.error.teardown.v[0] = s("reset the active compile mode");
  m.body.error.teardown.v[1] = s("drain 0 pending compiles");
  m.body.error.teardown.v[2] = s("evict 2 failed cache entries");
  roundtrip(&m, &o);
  assert_int_equal(o.body.error.teardown.n, 3);
  assert_string_equal(o.body.error.teardown.v[0], "reset the active compile mode");
  assert_string_equal(o.body.error.teardown.v[2], "evict 2 failed cache entries");
  assert_int_equal(o.body.error.code, SCHEDRUN_ECOMPILE);
  msg_free(&m);
  msg_free(&o);

  msg_init(&m, MSG_STATUS, 0, "compile");
  m.body.status.items.v = calloc(1, sizeof(msg_stat));
  m.body.status.items.n = 1;
  m.body.status.items.v[0] = (msg_stat){s("compile_mode_active"), -5};
  roundtrip(&m, &o);
  assert_string_equal(o.body.status.items.v[0].name, "compile_mode_active");
  assert_true(o.body.status.items.v[0].value == -5);
  msg_free(&m);
  msg_free(&o);

  msg_init(&m, MSG_TERM, 0, "client");
  roundtrip(&m, &o);
  msg_free(&m);
  msg_free(&o);

  msg_init(&m, MSG_RELEASE, 0, "client");
  m.body.release.program = 42;
  roundtrip(&m, &o);
  assert_true(o.body.release.program == 42);
  msg_free(&m);
  msg_free(&o);

  msg_init(&m, MSG_CANCEL, 0, "scheduler");
  m.body.cancel.program = 7;
  roundtrip(&m, &o);
  assert_true(o.body.cancel.program == 7);
  assert_string_equal(msg_type_name(MSG_CANCEL), "CANCEL");
  msg_free(&m);
  msg_free(&o);
}

/* ---- malformed input ---- */

static void expect_reject(const void *data, size_t len, const char *needle) {
  msg o;
  schedrun_error_t err = {0};
  assert_int_equal(msg_decode(data, len, &o, &err), SCHEDRUN_EPROTO);
  assert_non_null(err.message);
  if (needle && !strstr(err.message, needle)) fail_msg("'%s' lacks '%s'", err.message, needle);
  assert_int_equal(o.type, 0);
  schedrun_error_clear(&err);
  msg_free(&o);
}

static uint8_t *sample(size_t *len) {
  msg m;
  msg_init(&m, MSG_COMPILE, 5, "scheduler");
  m.body.compile.target = s("host");
  m.body.compile.arch = s("x");
  m.body.compile.kernels.v = calloc(1, sizeof(msg_kernel));
  m.body.compile.kernels.n = 1;
  m.body.compile.kernels.v[0] = (msg_kernel){s("k"), s("k"), s("ptr"), s("src"), s("f:1:1"), s("f"), 2};
  uint8_t *b = enc(&m, len);
  msg_free(&m);
  return b;
}

/* The encoder refuses what the decoder would refuse, naming the job: a
 * message that cannot arrive is never sent. */
static void test_encoder_limits(void **st) {
  (void)st;
  msg m;
  uint8_t *buf;
  size_t len;
  schedrun_error_t err = {0};
  msg_init(&m, MSG_COMPLETE, 77, "execute.0");
  m.body.complete.text = malloc(MSG_MAX_STRING + 2);
  assert_non_null(m.body.complete.text);
  memset(m.body.complete.text, 'x', MSG_MAX_STRING + 1);
  m.body.complete.text[MSG_MAX_STRING + 1] = '\0';
  assert_int_equal(msg_encode(&m, &buf, &len, &err), SCHEDRUN_EPROTO);
  assert_non_null(strstr(err.message, "COMPLETE for job 77 cannot be sent: a string is over 16 MiB"));
  schedrun_error_clear(&err);
  m.body.complete.text[MSG_MAX_STRING] = '\0'; /* exactly at the limit: fine, and it decodes */
  assert_int_equal(msg_encode(&m, &buf, &len, &err), SCHEDRUN_OK);
  msg o;
  assert_int_equal(msg_decode(buf, len, &o, &err), SCHEDRUN_OK);
  assert_int_equal(strlen(o.body.complete.text), MSG_MAX_STRING);
  msg_free(&o);
  free(buf);
  msg_free(&m);

  msg_init(&m, MSG_RECORD, 5, "scheduler");
  m.body.record.bindings.n = MSG_MAX_ARRAY + 1;
  m.body.record.bindings.v = calloc(m.body.record.bindings.n, sizeof(uint64_t));
  assert_non_null(m.body.record.bindings.v);
  assert_int_equal(msg_encode(&m, &buf, &len, &err), SCHEDRUN_EPROTO);
  assert_non_null(strstr(err.message, "RECORD for job 5 cannot be sent: an array is over its limit"));
  schedrun_error_clear(&err);
  msg_free(&m);

  /* over 1 GiB in all */
  msg_init(&m, MSG_EXECUTED, 9, "execute.0");
  m.body.executed.outputs.v = calloc(2, sizeof(msg_output));
  assert_non_null(m.body.executed.outputs.v);
  m.body.executed.outputs.n = 2;
  for (int i = 0; i < 2; i++) {
    m.body.executed.outputs.v[i].data.len = 600u << 20;
    m.body.executed.outputs.v[i].data.data = calloc(1, 600u << 20);
    assert_non_null(m.body.executed.outputs.v[i].data.data);
  }
  assert_int_equal(msg_encode(&m, &buf, &len, &err), SCHEDRUN_EPROTO);
  assert_non_null(strstr(err.message, "EXECUTED for job 9 cannot be sent: the message is over 1 GiB"));
  schedrun_error_clear(&err);
  msg_free(&m);
}

static void test_truncated_everywhere(void **st) {
  (void)st;
  size_t len;
  uint8_t *b = sample(&len);
  for (size_t cut = 0; cut < len; cut++) expect_reject(b, cut, NULL);
  free(b);
}

static void test_bad_structure(void **st) {
  (void)st;
  /* an array of 3, not the envelope's 5 */
  expect_reject("\x93\x01\x02\x03", 4, "envelope");
  /* an invalid msgpack byte */
  expect_reject("\xc1", 1, "invalid");
  /* array32 claiming 4 billion elements */
  expect_reject("\xdd\xff\xff\xff\xff\x00", 6, "more elements");
  /* map32 claiming 2 billion pairs */
  expect_reject("\xdf\x7f\xff\xff\xff\x00\x00", 7, "more elements");
  /* claims that each fit the bytes left but not all together: an array of 5
   * whose first element claims the other 4 bytes (refused before allocating) */
  expect_reject("\xdc\x00\x05\x94\x01\x01\x01\x01", 8, "more elements");
  /* str32 running past the end */
  expect_reject("\xdb\x00\x10\x00\x00" "abc", 8, "truncated");
  /* trailing bytes after a valid message */
  size_t len;
  uint8_t *b = sample(&len);
  uint8_t *b2 = malloc(len + 1);
  memcpy(b2, b, len);
  b2[len] = 0xc0;
  expect_reject(b2, len + 1, "trailing");
  free(b2);
  free(b);
  /* nesting: refused at the first container the schema does not expect
   * there, so nothing deeper than a schema is built (msg_decode.c) */
  uint8_t deep[64];
  memset(deep, 0x91, sizeof deep);
  deep[63] = 0x01;
  expect_reject(deep, sizeof deep, "envelope: expected an array of v, type, job, from, body");
  /* the same inside a valid envelope: RELEASE's program, 56 arrays deep */
  uint8_t env[64] = {0x95, MSG_VERSION, MSG_RELEASE, 0x01, 0xa1, 't', 0x91};
  memset(env + 7, 0x91, sizeof env - 8);
  env[63] = 0x01;
  expect_reject(env, sizeof env, "RELEASE message: program: expected an integer");
}

/* Hand-built envelopes, for wrong types and missing/extra fields. */

static void pk_str(msgpack_packer *pk, const char *v) {
  msgpack_pack_str(pk, strlen(v));
  msgpack_pack_str_body(pk, v, strlen(v));
}

typedef enum { BAD_NONE, BAD_TYPE_STR, BAD_UNKNOWN_TYPE, BAD_MISSING, BAD_EXTRA, BAD_WRONG_FIELD_TYPE,
               BAD_RANGE, BAD_VERSION, BAD_ENVELOPE_EXTRA, BAD_BODY_MAP, BAD_ENVELOPE_MAP } bad_kind;

/* A RELEASE by hand: [v, type, job, from, [program]], or one thing wrong. */
static uint8_t *build_release(bad_kind k, size_t *len) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  if (k == BAD_ENVELOPE_MAP) { /* the first wire form: keys and values */
    msgpack_pack_map(&pk, 5);
    pk_str(&pk, "v"); msgpack_pack_uint32(&pk, MSG_VERSION);
    pk_str(&pk, "type"); msgpack_pack_uint32(&pk, MSG_RELEASE);
    pk_str(&pk, "job"); msgpack_pack_uint64(&pk, 1);
    pk_str(&pk, "from"); pk_str(&pk, "t");
    pk_str(&pk, "body"); msgpack_pack_array(&pk, 1); msgpack_pack_uint64(&pk, 1);
    *len = sb.size;
    return (uint8_t *)msgpack_sbuffer_release(&sb);
  }
  msgpack_pack_array(&pk, k == BAD_ENVELOPE_EXTRA ? 6 : 5);
  msgpack_pack_uint32(&pk, k == BAD_VERSION ? 1 : MSG_VERSION);
  if (k == BAD_TYPE_STR) pk_str(&pk, "RELEASE");
  else msgpack_pack_uint32(&pk, k == BAD_UNKNOWN_TYPE ? 99 : MSG_RELEASE);
  msgpack_pack_uint64(&pk, 1);
  pk_str(&pk, "t");
  if (k == BAD_MISSING) {
    msgpack_pack_array(&pk, 0);
  } else if (k == BAD_EXTRA) {
    msgpack_pack_array(&pk, 2);
    msgpack_pack_uint64(&pk, 1);
    msgpack_pack_uint64(&pk, 1);
  } else if (k == BAD_BODY_MAP) {
    msgpack_pack_map(&pk, 1);
    pk_str(&pk, "program");
    msgpack_pack_uint64(&pk, 1);
  } else {
    msgpack_pack_array(&pk, 1);
    if (k == BAD_WRONG_FIELD_TYPE) pk_str(&pk, "1");
    else if (k == BAD_RANGE) msgpack_pack_int64(&pk, -1);
    else msgpack_pack_uint64(&pk, 1);
  }
  if (k == BAD_ENVELOPE_EXTRA) msgpack_pack_uint64(&pk, 2);
  *len = sb.size;
  return (uint8_t *)msgpack_sbuffer_release(&sb);
}

static void test_fields(void **st) {
  (void)st;
  size_t len;
  uint8_t *b = build_release(BAD_NONE, &len);
  msg o;
  schedrun_error_t err = {0};
  assert_int_equal(msg_decode(b, len, &o, &err), SCHEDRUN_OK);
  assert_true(o.body.release.program == 1);
  assert_int_equal(o.job, 1);
  assert_string_equal(o.from, "t");
  msg_free(&o);
  free(b);
  struct { bad_kind k; const char *needle; } cases[] = {
      {BAD_TYPE_STR, "type: expected an integer"},
      {BAD_UNKNOWN_TYPE, "type: unknown message type"},
      {BAD_MISSING, "RELEASE message: msg_release: expected 1 field, got 0"},
      {BAD_EXTRA, "msg_release: expected 1 field, got 2"},
      {BAD_WRONG_FIELD_TYPE, "program: expected an integer"},
      {BAD_RANGE, "program: integer out of range"},
      {BAD_VERSION, "v: unsupported version"},
      {BAD_ENVELOPE_EXTRA, "envelope: expected an array of v, type, job, from, body"},
      {BAD_BODY_MAP, "msg_release: expected an array of its fields"},
      {BAD_ENVELOPE_MAP, "envelope: expected an array of v, type, job, from, body"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    b = build_release(cases[i].k, &len);
    expect_reject(b, len, cases[i].needle);
    free(b);
  }
}

static void pack_envelope(msgpack_packer *pk, int type, uint64_t job) {
  msgpack_pack_array(pk, 5);
  msgpack_pack_uint32(pk, MSG_VERSION);
  msgpack_pack_uint32(pk, (uint32_t)type);
  msgpack_pack_uint64(pk, job);
  pk_str(pk, "x");
}

static void test_u32_range(void **st) {
  (void)st;
  /* a RECORDED whose device (u32) holds 2^40 */
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  pack_envelope(&pk, MSG_RECORDED, 1);
  /* program, device, slot, sequence, created, updated, reused */
  msgpack_pack_array(&pk, 7);
  msgpack_pack_uint64(&pk, 1);
  msgpack_pack_uint64(&pk, 1ull << 40);
  for (int k = 0; k < 5; k++) msgpack_pack_uint32(&pk, 0);
  expect_reject(sb.data, sb.size, "device: integer out of range");
  msgpack_sbuffer_destroy(&sb);
}

/* A column of integers is a bin of 8 bytes per element: an EXECUTED_MANY
 * whose jobs column is 7 bytes, or an array, is refused naming it; 16 bytes
 * are two jobs, read little-endian. */
static void build_executed_many(msgpack_packer *pk, int form) {
  pack_envelope(pk, MSG_EXECUTED_MANY, 0);
  msgpack_pack_array(pk, 4); /* program, device, jobs, exec_ns */
  msgpack_pack_uint64(pk, 1);
  msgpack_pack_uint32(pk, 0);
  static const unsigned char two[16] = {5, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  if (form == 0) { /* two jobs: 5 and 256, which took 5 and 256 ns */
    msgpack_pack_bin(pk, 16);
    msgpack_pack_bin_body(pk, two, 16);
    msgpack_pack_bin(pk, 16);
    msgpack_pack_bin_body(pk, two, 16);
  } else if (form == 1) { /* 7 bytes */
    msgpack_pack_bin(pk, 7);
    msgpack_pack_bin_body(pk, two, 7);
  } else { /* an array of integers, the old form */
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, 5);
  }
  if (form != 0) { /* times as they should be: the jobs column is what is wrong */
    msgpack_pack_bin(pk, 16);
    msgpack_pack_bin_body(pk, two, 16);
  }
}

static void test_columns(void **st) {
  (void)st;
  for (int form = 0; form < 3; form++) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    build_executed_many(&pk, form);
    if (form == 0) {
      msg o;
      schedrun_error_t err = {0};
      assert_int_equal(msg_decode(sb.data, sb.size, &o, &err), SCHEDRUN_OK);
      assert_int_equal(o.body.executed_many.jobs.n, 2);
      assert_int_equal(o.body.executed_many.jobs.v[0], 5);
      assert_int_equal(o.body.executed_many.jobs.v[1], 256);
      assert_int_equal(o.body.executed_many.exec_ns.v[1], 256);
      msg_free(&o);
    } else {
      expect_reject(sb.data, sb.size, form == 1 ? "jobs: a column's length is not a multiple of 8" : "jobs: expected a column");
    }
    msgpack_sbuffer_destroy(&sb);
  }
}

static void test_random_bytes(void **st) {
  (void)st;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  uint8_t buf[512];
  size_t len;
  uint8_t *good = sample(&len);
  int accepted = 0;
  for (int round = 0; round < 20000; round++) {
    size_t n;
    if (round % 2) {
      /* a valid message with a few bytes flipped */
      n = len < sizeof buf ? len : sizeof buf;
      memcpy(buf, good, n);
      for (int f = 0; f < 3; f++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        buf[x % n] ^= (uint8_t)(x >> 32);
      }
    } else {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      n = 1 + x % sizeof buf;
      for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        buf[i] = (uint8_t)x;
      }
    }
    msg o;
    schedrun_error_t err = {0};
    int rc = msg_decode(buf, n, &o, &err);
    assert_true(rc == SCHEDRUN_OK || rc == SCHEDRUN_EPROTO);
    if (rc == SCHEDRUN_OK) {
      accepted++;
      assert_true(o.type > 0 && o.type < MSG__END);
    }
    msg_free(&o);
    schedrun_error_clear(&err);
  }
  free(good);
  /* flipping bytes of strings leaves valid messages: some must pass */
  assert_true(accepted > 0);
}

/* A COMPLETE with one small output (inline) and two large ones (lent). */
static void complete_with_outputs(msg *m, size_t big) {
  msg_init(m, MSG_COMPLETE, 42, "execute-0");
  m->body.complete.text = s("");
  msg_outputs *o = &m->body.complete.outputs;
  o->v = calloc(3, sizeof *o->v);
  o->n = 3;
  size_t lens[] = {MSG_LEND_MIN - 1, big, MSG_LEND_MIN};
  for (size_t i = 0; i < 3; i++) {
    o->v[i].buffer = (uint32_t)i;
    o->v[i].data.len = lens[i];
    o->v[i].data.data = malloc(lens[i]);
    for (size_t k = 0; k < lens[i]; k++) o->v[i].data.data[k] = (uint8_t)(k * 7 + i);
  }
}

/* Bytes of MSG_LEND_MIN or more are lent, not copied: the message is small
 * whatever they weigh, the decoded message owns the very block the sender
 * had, element by element equal; smaller bytes travel inside. Lent bytes
 * are refused by the decoder of bytes from another process, and a ticket is
 * claimed once: the same bytes decoded again are refused. */
static void test_lent_bytes(void **st) {
  (void)st;
  size_t before = msg_lent_count();
  msg m, o;
  complete_with_outputs(&m, 3u << 20);
  const uint8_t *blocks[3];
  for (int i = 0; i < 3; i++) blocks[i] = m.body.complete.outputs.v[i].data.data;
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  msg_lending lent = {0};
  schedrun_error_t err = {0};
  assert_int_equal(msg_encode_append(&m, &buf, &len, &cap, &lent, &err), SCHEDRUN_OK);
  assert_int_equal(lent.n, 2);
  assert_true(len < 8192); /* 3 MiB of outputs, lent */
  assert_int_equal(msg_lent_count(), before + 2);
  assert_non_null(m.body.complete.outputs.v[0].data.data); /* small: still the sender's */
  assert_null(m.body.complete.outputs.v[1].data.data);
  assert_null(m.body.complete.outputs.v[2].data.data);
  /* from another process: refused, and nothing claimed */
  assert_int_equal(msg_decode(buf, len, &o, &err), SCHEDRUN_EPROTO);
  assert_non_null(strstr(err.message, "another process"));
  schedrun_error_clear(&err);
  assert_int_equal(msg_lent_count(), before + 2);
  assert_int_equal(msg_decode_local(buf, len, &o, &err), SCHEDRUN_OK);
  assert_int_equal(msg_lent_count(), before);
  assert_int_equal(o.body.complete.outputs.n, 3);
  for (size_t i = 0; i < 3; i++) {
    const msg_bytes *b = &o.body.complete.outputs.v[i].data;
    assert_int_equal(o.body.complete.outputs.v[i].buffer, i);
    if (i) assert_ptr_equal(b->data, blocks[i]); /* the same block: no copy */
    for (size_t k = 0; k < b->len; k++)
      if (b->data[k] != (uint8_t)(k * 7 + i)) fail_msg("output %zu byte %zu is %u", i, k, b->data[k]);
  }
  assert_int_equal(o.body.complete.outputs.v[1].data.len, 3u << 20);
  msg o2;
  assert_int_equal(msg_decode_local(buf, len, &o2, &err), SCHEDRUN_EPROTO);
  assert_non_null(strstr(err.message, "not lent"));
  schedrun_error_clear(&err);
  /* sent twice: the second encoding is refused, nothing lent */
  size_t len2 = 0;
  assert_int_equal(msg_encode_append(&m, &buf, &len2, &cap, &lent, &err), SCHEDRUN_EPROTO);
  assert_non_null(strstr(err.message, "lent already"));
  schedrun_error_clear(&err);
  assert_int_equal(lent.n, 0);
  assert_int_equal(msg_lent_count(), before);
  free(buf);
  free(lent.v);
  msg_free(&m);
  msg_free(&o);
}

/* Bytes that will not be sent give their blocks back: msg_unlend puts them
 * back in the message they came from (the next encoding lends them again);
 * msg_lending_reclaim frees those never claimed. A failed encoding (a
 * message over a limit) lends nothing and leaves the message whole. */
static void test_lent_bytes_back(void **st) {
  (void)st;
  size_t before = msg_lent_count();
  msg m;
  complete_with_outputs(&m, 100000);
  const uint8_t *big = m.body.complete.outputs.v[1].data.data;
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  msg_lending lent = {0};
  schedrun_error_t err = {0};
  assert_int_equal(msg_encode_append(&m, &buf, &len, &cap, &lent, &err), SCHEDRUN_OK);
  assert_null(m.body.complete.outputs.v[1].data.data);
  msg_unlend(&m, buf, len);
  assert_ptr_equal(m.body.complete.outputs.v[1].data.data, big);
  assert_non_null(m.body.complete.outputs.v[2].data.data);
  assert_int_equal(msg_lent_count(), before);
  len = 0;
  assert_int_equal(msg_encode_append(&m, &buf, &len, &cap, &lent, &err), SCHEDRUN_OK);
  assert_int_equal(lent.n, 2);
  msg_lending_reclaim(&lent); /* the bytes died unsent: the blocks are freed (ASan checks) */
  assert_int_equal(msg_lent_count(), before);
  msg o;
  assert_int_equal(msg_decode_local(buf, len, &o, &err), SCHEDRUN_EPROTO);
  schedrun_error_clear(&err);
  msg_free(&m);
  /* over a limit: the string is too long, the outputs stay in m */
  complete_with_outputs(&m, 100000);
  free(m.body.complete.text);
  m.body.complete.text = malloc(MSG_MAX_STRING + 2);
  memset(m.body.complete.text, 'a', MSG_MAX_STRING + 1);
  m.body.complete.text[MSG_MAX_STRING + 1] = 0;
  len = 0;
  assert_int_equal(msg_encode_append(&m, &buf, &len, &cap, &lent, &err), SCHEDRUN_EPROTO);
  schedrun_error_clear(&err);
  assert_int_equal(lent.n, 0);
  for (int i = 0; i < 3; i++) assert_non_null(m.body.complete.outputs.v[i].data.data);
  assert_int_equal(msg_lent_count(), before);
  msg_free(&m);
  free(buf);
  free(lent.v);
}

/* The table of lent blocks under churn: about 5,000 in flight at a time
 * while 45,000 are lent and claimed in an order unlike the lending order,
 * so that live tickets share home slots (backward-shift deletion must keep
 * every one reachable); each is found exactly once, with its own bytes. */
static void test_lent_table(void **st) {
  (void)st;
  enum { LIVE = 5000, ROUNDS = 40, TURN = 1000 };
  size_t before = msg_lent_count();
  uint64_t ticket[LIVE];
  size_t value[LIVE], next = 0;
  uint32_t rng = 12345;
  for (size_t i = 0; i < LIVE; i++) {
    uint8_t *b = malloc(sizeof next);
    memcpy(b, &next, sizeof next);
    value[i] = next++;
    ticket[i] = msg_lend(b, sizeof next);
    assert_true(ticket[i] != 0);
  }
  assert_int_equal(msg_lent_count(), before + LIVE);
  assert_null(msg_claim(ticket[0], sizeof next + 1)); /* another length: not this block */
  for (int r = 0; r <= ROUNDS; r++) {
    size_t turn = r == ROUNDS ? LIVE : TURN;
    for (size_t k = 0; k < turn; k++) {
      rng = rng * 1103515245u + 12345u;
      size_t i = r == ROUNDS ? k : (rng >> 8) % LIVE;
      uint8_t *b = msg_claim(ticket[i], sizeof next);
      if (!b) fail_msg("round %d: ticket %llu (value %zu) not found", r, (unsigned long long)ticket[i], value[i]);
      size_t v;
      memcpy(&v, b, sizeof v);
      assert_int_equal(v, value[i]);
      free(b);
      assert_null(msg_claim(ticket[i], sizeof next));
      if (r < ROUNDS) { /* its place gets a new block */
        b = malloc(sizeof next);
        memcpy(b, &next, sizeof next);
        value[i] = next++;
        ticket[i] = msg_lend(b, sizeof next);
        assert_true(ticket[i] != 0);
      }
    }
  }
  assert_int_equal(msg_lent_count(), before);
  msg_reclaim(ticket[0]); /* claimed already: nothing */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_submit),
      cmocka_unit_test(test_submit_many),
      cmocka_unit_test(test_submit_many_hands_on),
      cmocka_unit_test(test_batches),
      cmocka_unit_test(test_compile_and_compiled),
      cmocka_unit_test(test_record_family),
      cmocka_unit_test(test_complete_error_status_term_release),
      cmocka_unit_test(test_encoder_limits),
      cmocka_unit_test(test_truncated_everywhere),
      cmocka_unit_test(test_bad_structure),
      cmocka_unit_test(test_fields),
      cmocka_unit_test(test_u32_range),
      cmocka_unit_test(test_columns),
      cmocka_unit_test(test_random_bytes),
      cmocka_unit_test(test_lent_bytes),
      cmocka_unit_test(test_lent_bytes_back),
      cmocka_unit_test(test_lent_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
