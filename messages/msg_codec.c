/*
 * The msgpack codec for every message, driven by one schema table per body
 * (msg_schema.h): the tables, the destructor and the decoder here, the
 * encoder in msg_encode.c.
 *
 * Decoding happens in two steps, each of which rejects bad bytes with
 * SCHEDRUN_EPROTO instead of crashing:
 *   1. msg_parse (msg_parse.h) checks that the bytes form exactly one
 *      object, no deeper than MSG_MAX_DEPTH, whose containers claim no more
 *      elements than there are bytes left (so an absurd length never
 *      allocates), then has msgpack-c's unpacker read them into a tree of
 *      msgpack objects;
 *   2. the schema walk copies each field out, checking its type, range and
 *      length. The envelope is the array [v, type, job, from, body] and a
 *      body the array of its schema's fields in order: no keys to write,
 *      look up or compare, and a wrong number of fields is refused.
 */
#include <msgpack.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "messages/msg.h"
#include "messages/msg_parse.h"
#include "messages/msg_schema.h"

/* ---- schemas ------------------------------------------------------------ */

#define F(T, fname, kind) {#fname, kind, offsetof(T, fname), NULL}
#define FA(T, fname, sub) {#fname, FK_ARR, offsetof(T, fname), &sub}
/* a field inside a nested struct: errors call it by its last name */
#define FN(T, path, key, kind) {key, kind, offsetof(T, path), NULL}
#define SCHEMA(var, T, ...)                                                          \
  static const field var##_fields[] = {__VA_ARGS__};                                 \
  static const schema var = {#T, sizeof(T), SCHEDRUN__ARRAY_LEN(var##_fields), var##_fields}

SCHEMA(kernel_s, msg_kernel, F(msg_kernel, name, FK_STR), F(msg_kernel, entry, FK_STR),
       F(msg_kernel, params, FK_STR), F(msg_kernel, source, FK_STR), F(msg_kernel, where, FK_STR),
       F(msg_kernel, source_file, FK_STR), F(msg_kernel, first_line, FK_U32));
SCHEMA(module_s, msg_module, F(msg_module, name, FK_STR), F(msg_module, key, FK_STR),
       F(msg_module, path, FK_STR));
SCHEMA(output_s, msg_output, F(msg_output, buffer, FK_U32), F(msg_output, data, FK_BIN));
SCHEMA(stat_s, msg_stat, F(msg_stat, name, FK_STR), F(msg_stat, value, FK_I64));

SCHEMA(submit_s, msg_submit, F(msg_submit, program, FK_U64), F(msg_submit, run, FK_U32),
       F(msg_submit, job_index, FK_U32), F(msg_submit, slot, FK_U32),
       F(msg_submit, device, FK_I32), F(msg_submit, keep, FK_U32), FA(msg_submit, inputs, output_s),
       F(msg_submit, deadline, FK_U64), F(msg_submit, record_only, FK_U32), F(msg_submit, park, FK_U64S),
       F(msg_submit, takes, FK_U64S));
SCHEMA(compile_s, msg_compile, F(msg_compile, program, FK_U64), F(msg_compile, target, FK_STR),
       F(msg_compile, arch, FK_STR), FA(msg_compile, kernels, kernel_s));
SCHEMA(compiled_s, msg_compiled, F(msg_compiled, program, FK_U64),
       F(msg_compiled, target, FK_STR), FA(msg_compiled, modules, module_s),
       F(msg_compiled, hits, FK_U32), F(msg_compiled, misses, FK_U32));
SCHEMA(record_s, msg_record, F(msg_record, program, FK_U64), F(msg_record, device, FK_U32),
       F(msg_record, slot, FK_U32), F(msg_record, run, FK_U32), F(msg_record, job_index, FK_U32),
       F(msg_record, bindings, FK_U64S), FA(msg_record, modules, module_s));
SCHEMA(recorded_s, msg_recorded, F(msg_recorded, program, FK_U64),
       F(msg_recorded, device, FK_U32), F(msg_recorded, slot, FK_U32),
       F(msg_recorded, sequence, FK_U64), FN(msg_recorded, counts.created, "created", FK_U32),
       FN(msg_recorded, counts.updated, "updated", FK_U32), FN(msg_recorded, counts.reused, "reused", FK_U32));
SCHEMA(execute_s, msg_execute, F(msg_execute, program, FK_U64), F(msg_execute, device, FK_U32),
       F(msg_execute, slot, FK_U32), F(msg_execute, sequence, FK_U64),
       F(msg_execute, bindings, FK_U64S), F(msg_execute, keep, FK_U32), FA(msg_execute, inputs, output_s),
       F(msg_execute, client, FK_STR), F(msg_execute, run, FK_U32), F(msg_execute, job_index, FK_U32),
       F(msg_execute, compile_ns, FK_U64), F(msg_execute, record_ns, FK_U64),
       FN(msg_execute, counts.created, "created", FK_U32), FN(msg_execute, counts.updated, "updated", FK_U32),
       FN(msg_execute, counts.reused, "reused", FK_U32), F(msg_execute, cache_hits, FK_U32),
       F(msg_execute, cache_misses, FK_U32), F(msg_execute, t_submit, FK_U64), F(msg_execute, t_compile, FK_U64),
       F(msg_execute, t_record, FK_U64), F(msg_execute, deadline, FK_U64), F(msg_execute, park, FK_U64S),
       F(msg_execute, takes, FK_U64S));
SCHEMA(executed_s, msg_executed, F(msg_executed, program, FK_U64),
       F(msg_executed, device, FK_U32), FA(msg_executed, outputs, output_s),
       F(msg_executed, exec_start, FK_U64), F(msg_executed, exec_ns, FK_U64));
SCHEMA(complete_s, msg_complete, F(msg_complete, status, FK_I32),
       F(msg_complete, program, FK_U64), F(msg_complete, device, FK_I32),
       F(msg_complete, run, FK_U32), F(msg_complete, job_index, FK_U32),
       FA(msg_complete, outputs, output_s), F(msg_complete, compile_ns, FK_U64),
       F(msg_complete, record_ns, FK_U64), F(msg_complete, execute_ns, FK_U64),
       FN(msg_complete, counts.created, "created", FK_U32), FN(msg_complete, counts.updated, "updated", FK_U32),
       FN(msg_complete, counts.reused, "reused", FK_U32), F(msg_complete, cache_hits, FK_U32),
       F(msg_complete, cache_misses, FK_U32), F(msg_complete, text, FK_STR),
       F(msg_complete, t_submit, FK_U64), F(msg_complete, t_compile, FK_U64), F(msg_complete, t_record, FK_U64),
       F(msg_complete, t_execute, FK_U64), F(msg_complete, t_done, FK_U64), F(msg_complete, launches, FK_U64S),
       F(msg_complete, parcels, FK_U64S), F(msg_complete, handoffs_local, FK_U32),
       F(msg_complete, handoffs_copied, FK_U32), F(msg_complete, handoffs_peer, FK_U32),
       F(msg_complete, bytes_in, FK_U64), F(msg_complete, bytes_out, FK_U64), F(msg_complete, bytes_peer, FK_U64));
SCHEMA(error_s, msg_error, F(msg_error, code, FK_I32), F(msg_error, origin, FK_STR),
       F(msg_error, job, FK_U64), F(msg_error, text, FK_STR),
       F(msg_error, teardown, FK_STRS));
SCHEMA(status_s, msg_status, FA(msg_status, items, stat_s));
static const schema term_s = {"msg_term", 0, 0, NULL};
SCHEMA(release_s, msg_release, F(msg_release, program, FK_U64));
SCHEMA(cancel_s, msg_cancel, F(msg_cancel, program, FK_U64), F(msg_cancel, code, FK_I32),
       F(msg_cancel, waited_ms, FK_U64));
SCHEMA(submit_many_s, msg_submit_many, F(msg_submit_many, programs, FK_U64S), F(msg_submit_many, runs, FK_U64S),
       F(msg_submit_many, job_indexes, FK_U64S), F(msg_submit_many, slots, FK_U64S),
       F(msg_submit_many, devices, FK_U64S), F(msg_submit_many, keeps, FK_U64S),
       F(msg_submit_many, deadlines, FK_U64S), F(msg_submit_many, record_onlys, FK_U64S),
       F(msg_submit_many, input_jobs, FK_U64S), FA(msg_submit_many, inputs, output_s),
       F(msg_submit_many, park_jobs, FK_U64S), F(msg_submit_many, park, FK_U64S),
       F(msg_submit_many, take_jobs, FK_U64S), F(msg_submit_many, takes, FK_U64S));
SCHEMA(execute_many_s, msg_execute_many, F(msg_execute_many, program, FK_U64), F(msg_execute_many, device, FK_U32),
       F(msg_execute_many, slot, FK_U32), F(msg_execute_many, sequence, FK_U64),
       F(msg_execute_many, bindings, FK_U64S), F(msg_execute_many, client, FK_STR), F(msg_execute_many, nodes, FK_U32),
       F(msg_execute_many, jobs, FK_U64S), F(msg_execute_many, runs, FK_U64S),
       F(msg_execute_many, job_indexes, FK_U64S), F(msg_execute_many, keeps, FK_U64S),
       F(msg_execute_many, t_submits, FK_U64S), F(msg_execute_many, deadlines, FK_U64S),
       F(msg_execute_many, input_jobs, FK_U64S), FA(msg_execute_many, inputs, output_s),
       F(msg_execute_many, park_jobs, FK_U64S), F(msg_execute_many, park, FK_U64S),
       F(msg_execute_many, take_jobs, FK_U64S), F(msg_execute_many, takes, FK_U64S));
SCHEMA(complete_many_s, msg_complete_many, F(msg_complete_many, program, FK_U64),
       F(msg_complete_many, device, FK_I32), F(msg_complete_many, nodes, FK_U32), F(msg_complete_many, jobs, FK_U64S),
       F(msg_complete_many, runs, FK_U64S), F(msg_complete_many, job_indexes, FK_U64S),
       F(msg_complete_many, t_submits, FK_U64S), F(msg_complete_many, t_executes, FK_U64S),
       F(msg_complete_many, t_dones, FK_U64S), F(msg_complete_many, execute_ns, FK_U64S),
       F(msg_complete_many, output_jobs, FK_U64S), FA(msg_complete_many, outputs, output_s),
       F(msg_complete_many, handoffs_local, FK_U64S), F(msg_complete_many, handoffs_copied, FK_U64S),
       F(msg_complete_many, parcel_jobs, FK_U64S), F(msg_complete_many, parcels, FK_U64S),
       F(msg_complete_many, handoffs_peer, FK_U64S), F(msg_complete_many, bytes_in, FK_U64S),
       F(msg_complete_many, bytes_out, FK_U64S), F(msg_complete_many, bytes_peer, FK_U64S));
SCHEMA(executed_many_s, msg_executed_many, F(msg_executed_many, program, FK_U64),
       F(msg_executed_many, device, FK_U32), F(msg_executed_many, jobs, FK_U64S));

const schema *const msg_body_schema[MSG__END] = {
    [MSG_SUBMIT] = &submit_s,     [MSG_COMPILE] = &compile_s,   [MSG_COMPILED] = &compiled_s,
    [MSG_RECORD] = &record_s,     [MSG_RECORDED] = &recorded_s, [MSG_EXECUTE] = &execute_s,
    [MSG_EXECUTED] = &executed_s, [MSG_COMPLETE] = &complete_s, [MSG_ERROR] = &error_s,
    [MSG_STATUS] = &status_s,     [MSG_TERM] = &term_s,         [MSG_RELEASE] = &release_s,
    [MSG_CANCEL] = &cancel_s,     [MSG_SUBMIT_MANY] = &submit_many_s, [MSG_EXECUTE_MANY] = &execute_many_s,
    [MSG_COMPLETE_MANY] = &complete_many_s, [MSG_EXECUTED_MANY] = &executed_many_s, [MSG_QUEUED] = &term_s,
    [MSG_TICK] = &term_s,
};


/* ---- free --------------------------------------------------------------- */

static void free_struct(const schema *s, void *base) {
  for (size_t i = 0; i < s->nfields; i++) {
    const field *f = &s->fields[i];
    void *p = (char *)base + f->off;
    switch (f->kind) {
    case FK_STR: free(*(char **)p); *(char **)p = NULL; break;
    case FK_BIN: msg_bytes_free(((msg_bytes *)p)->data, ((msg_bytes *)p)->len); memset(p, 0, sizeof(msg_bytes)); break;
    case FK_U64S: free(((msg_u64s *)p)->v); memset(p, 0, sizeof(msg_u64s)); break;
    case FK_STRS: {
      msg_strs *a = p;
      for (size_t k = 0; k < a->n; k++) free(a->v[k]);
      free(a->v);
      memset(a, 0, sizeof *a);
      break;
    }
    case FK_ARR: {
      any_arr *a = p;
      for (size_t k = 0; k < a->n; k++) free_struct(f->sub, (char *)a->v + k * f->sub->size);
      free(a->v);
      memset(a, 0, sizeof *a);
      break;
    }
    default: break;
    }
  }
}

void msg_free(msg *m) {
  if (!m) return;
  if (m->type > 0 && m->type < MSG__END) free_struct(msg_body_schema[m->type], &m->body);
  free(m->from);
  memset(m, 0, sizeof *m);
}

/* ---- decode: the schema walk ------------------------------------------------- */

typedef struct dctx {
  schedrun_error_t *err;
  const char *type;
  bool local; /* lent blocks may be claimed (msg_decode_local) */
} dctx;

static int bad(dctx *d, const char *where, const char *what) {
  return err_set(d->err, SCHEDRUN_EPROTO, "malformed %s message: %s: %s", d->type, where, what);
}

/* A lent block where bytes go (msg.h, "Lent bytes"): claimed from the
 * table, owned by the message from now on. */
static int claim_lent(dctx *d, const char *w, const msgpack_object *o, msg_bytes *b) {
  if (!d->local) return bad(d, w, "lent bytes cannot come from another process");
  if (o->via.ext.type != MSG_EXT_LENT || o->via.ext.size != 16) return bad(d, w, "expected bytes");
  const uint8_t *e = (const uint8_t *)o->via.ext.ptr;
  uint64_t t = 0, len = 0;
  for (int i = 0; i < 8; i++) {
    t |= (uint64_t)e[i] << (8 * i);
    len |= (uint64_t)e[8 + i] << (8 * i);
  }
  if (len > SIZE_MAX || !(b->data = msg_claim(t, (size_t)len)))
    return bad(d, w, "names lent bytes that are not lent (claimed already, or never lent)");
  b->len = (size_t)len;
  return SCHEDRUN_OK;
}

static int get_int(dctx *d, const char *where, const msgpack_object *o, int64_t lo, uint64_t hi,
                   bool is_signed, uint64_t *u, int64_t *s) {
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    if (o->via.u64 > hi) return bad(d, where, "integer out of range");
    if (u) *u = o->via.u64;
    if (s) *s = (int64_t)o->via.u64;
    return SCHEDRUN_OK;
  }
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    if (!is_signed || o->via.i64 < lo) return bad(d, where, "integer out of range");
    if (s) *s = o->via.i64;
    return SCHEDRUN_OK;
  }
  return bad(d, where, "expected an integer");
}

static int get_str(dctx *d, const char *where, const msgpack_object *o, char **out) {
  if (o->type != MSGPACK_OBJECT_STR) return bad(d, where, "expected a string");
  if (o->via.str.size > MSG_MAX_STRING) return bad(d, where, "string too long");
  *out = malloc(o->via.str.size + 1);
  if (!*out) return err_set(d->err, SCHEDRUN_ENOMEM, "out of memory decoding %s", d->type);
  if (o->via.str.size) memcpy(*out, o->via.str.ptr, o->via.str.size); /* an empty one may have no bytes */
  (*out)[o->via.str.size] = '\0';
  return SCHEDRUN_OK;
}

static int get_array(dctx *d, const char *where, const msgpack_object *o, size_t elem, void **v,
                     size_t *n) {
  if (o->type != MSGPACK_OBJECT_ARRAY) return bad(d, where, "expected an array");
  if (o->via.array.size > MSG_MAX_ARRAY) return bad(d, where, "array too long");
  *n = 0;
  *v = NULL;
  if (o->via.array.size == 0) return SCHEDRUN_OK;
  *v = calloc(o->via.array.size, elem);
  if (!*v) return err_set(d->err, SCHEDRUN_ENOMEM, "out of memory decoding %s", d->type);
  return SCHEDRUN_OK;
}

static int decode_struct(dctx *d, const schema *s, const msgpack_object *o, void *base);

static int decode_field(dctx *d, const field *f, const msgpack_object *o, void *p) {
  const char *w = f->name;
  uint64_t u = 0;
  int64_t sv = 0;
  int rc;
  switch (f->kind) {
  case FK_U32:
    if ((rc = get_int(d, w, o, 0, UINT32_MAX, false, &u, NULL))) return rc;
    *(uint32_t *)p = (uint32_t)u;
    return SCHEDRUN_OK;
  case FK_I32:
    if ((rc = get_int(d, w, o, INT32_MIN, INT32_MAX, true, NULL, &sv))) return rc;
    *(int32_t *)p = (int32_t)sv;
    return SCHEDRUN_OK;
  case FK_U64:
    if ((rc = get_int(d, w, o, 0, UINT64_MAX, false, &u, NULL))) return rc;
    *(uint64_t *)p = u;
    return SCHEDRUN_OK;
  case FK_I64:
    if ((rc = get_int(d, w, o, INT64_MIN, INT64_MAX, true, NULL, &sv))) return rc;
    *(int64_t *)p = sv;
    return SCHEDRUN_OK;
  case FK_STR:
    return get_str(d, w, o, (char **)p);
  case FK_BIN: {
    if (o->type == MSGPACK_OBJECT_EXT) return claim_lent(d, w, o, p);
    if (o->type != MSGPACK_OBJECT_BIN) return bad(d, w, "expected bytes");
    msg_bytes *b = p;
    b->len = o->via.bin.size;
    b->data = msg_bytes_alloc(b->len);
    if (!b->data) return err_set(d->err, SCHEDRUN_ENOMEM, "out of memory decoding %s", d->type);
    if (b->len) memcpy(b->data, o->via.bin.ptr, b->len);
    return SCHEDRUN_OK;
  }
  case FK_U64S: {
    /* a column: bytes, 8 per element, little-endian (msg.h) */
    msg_u64s *a = p;
    if (o->type != MSGPACK_OBJECT_BIN) return bad(d, w, "expected a column (bytes)");
    if (o->via.bin.size % 8) return bad(d, w, "a column's length is not a multiple of 8 bytes");
    if (o->via.bin.size / 8 > MSG_MAX_ARRAY) return bad(d, w, "array too long");
    a->n = 0;
    a->v = NULL;
    size_t n = o->via.bin.size / 8;
    if (n == 0) return SCHEDRUN_OK;
    if (!(a->v = malloc(n * sizeof *a->v))) return err_set(d->err, SCHEDRUN_ENOMEM, "out of memory decoding %s", d->type);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(a->v, o->via.bin.ptr, n * 8);
#else
    const uint8_t *b = (const uint8_t *)o->via.bin.ptr;
    for (size_t k = 0; k < n; k++) {
      uint64_t v = 0;
      for (int i = 7; i >= 0; i--) v = v << 8 | b[8 * k + (size_t)i];
      a->v[k] = v;
    }
#endif
    a->n = n;
    return SCHEDRUN_OK;
  }
  case FK_STRS: {
    msg_strs *a = p;
    if ((rc = get_array(d, w, o, sizeof(char *), (void **)&a->v, &a->n))) return rc;
    for (uint32_t k = 0; k < o->via.array.size; k++) {
      if ((rc = get_str(d, w, &o->via.array.ptr[k], &a->v[k]))) return rc;
      a->n++;
    }
    return SCHEDRUN_OK;
  }
  case FK_ARR: {
    any_arr *a = p;
    if ((rc = get_array(d, w, o, f->sub->size, &a->v, &a->n))) return rc;
    for (uint32_t k = 0; k < o->via.array.size; k++) {
      /* count first, so a failure half-way frees what was filled */
      a->n++;
      if ((rc = decode_struct(d, f->sub, &o->via.array.ptr[k], (char *)a->v + k * f->sub->size)))
        return rc;
    }
    return SCHEDRUN_OK;
  }
  }
  return bad(d, w, "unknown field kind");
}

static int decode_struct(dctx *d, const schema *s, const msgpack_object *o, void *base) {
  if (o->type != MSGPACK_OBJECT_ARRAY) return bad(d, s->name, "expected an array of its fields");
  if (o->via.array.size != s->nfields) {
    char what[80];
    snprintf(what, sizeof what, "expected %zu field%s, got %u", s->nfields, s->nfields == 1 ? "" : "s",
             (unsigned)o->via.array.size);
    return bad(d, s->name, what);
  }
  for (size_t i = 0; i < s->nfields; i++) {
    int rc = decode_field(d, &s->fields[i], &o->via.array.ptr[i], (char *)base + s->fields[i].off);
    if (rc) return rc;
  }
  return SCHEDRUN_OK;
}

/* Batch messages: every column has as many elements as the first, `jobs`
 * (one per job; job ids not 0, unless the first column is another), and
 * each input or output names a job of the batch, in job order. */
static int check_columns(dctx *d, const msg_u64s *jobs, const msg_u64s *const *cols, const char *const *names,
                         size_t ncols, const msg_u64s *owners, const char *owner_name, size_t nitems) {
  const char *first = names && ncols && cols[0] == jobs ? names[0] : "jobs";
  if (jobs->n == 0) return bad(d, first, "a batch of no jobs");
  for (size_t k = 0; k < jobs->n && !strcmp(first, "jobs"); k++)
    if (jobs->v[k] == 0) return bad(d, "jobs", "job id 0");
  for (size_t c = 0; c < ncols; c++)
    if (cols[c]->n != jobs->n) return bad(d, names[c], "the column's length is not the number of jobs");
  if (owners->n != nitems) return bad(d, owner_name, "the column's length is not the number of items it places");
  for (size_t i = 0; i < owners->n; i++)
    if (owners->v[i] >= jobs->n || (i && owners->v[i] < owners->v[i - 1]))
      return bad(d, owner_name, "names no job of the batch, or is out of job order");
  return SCHEDRUN_OK;
}

/* Parcels taken are {buffer, device, address} triples. */
static int check_takes(dctx *d, const msg_u64s *takes) {
  if (takes->n % 3) return bad(d, "takes", "not a list of {buffer, device, address} triples");
  return SCHEDRUN_OK;
}

static int check_batch(dctx *d, const msg *m) {
  static const msg_u64s none = {NULL, 0};
  if (m->type == MSG_SUBMIT) return check_takes(d, &m->body.submit.takes);
  if (m->type == MSG_EXECUTE) return check_takes(d, &m->body.execute.takes);
  if (m->type == MSG_SUBMIT_MANY) {
    const msg_submit_many *b = &m->body.submit_many;
    const msg_u64s *cols[] = {&b->programs, &b->runs,  &b->job_indexes, &b->slots,
                              &b->devices,  &b->keeps, &b->deadlines,   &b->record_onlys};
    static const char *const names[] = {"programs", "runs",  "job_indexes", "slots",
                                        "devices",  "keeps", "deadlines",   "record_onlys"};
    int rc = check_takes(d, &b->takes);
    if (rc == SCHEDRUN_OK)
      rc = check_columns(d, &b->programs, cols, names, SCHEDRUN__ARRAY_LEN(cols), &b->input_jobs, "input_jobs",
                         b->inputs.n);
    /* the first column counts the jobs (its values are not ids) */
    if (rc == SCHEDRUN_OK) rc = check_columns(d, &b->programs, cols, names, 1, &b->park_jobs, "park_jobs", b->park.n);
    if (rc == SCHEDRUN_OK) rc = check_columns(d, &b->programs, cols, names, 1, &b->take_jobs, "take_jobs", b->takes.n / 3);
    /* the columns of msg_submit's 32-bit fields */
    static const int narrow[] = {1, 2, 3, 5, 7};
    for (size_t c = 0; rc == SCHEDRUN_OK && c < SCHEDRUN__ARRAY_LEN(narrow); c++)
      for (size_t k = 0; k < cols[narrow[c]]->n; k++)
        if (cols[narrow[c]]->v[k] > UINT32_MAX) {
          rc = bad(d, names[narrow[c]], "an element is over 32 bits");
          break;
        }
    return rc;
  }
  if (m->type == MSG_EXECUTE_MANY) {
    const msg_execute_many *x = &m->body.execute_many;
    const msg_u64s *cols[] = {&x->runs, &x->job_indexes, &x->keeps, &x->t_submits, &x->deadlines};
    const char *names[] = {"runs", "job_indexes", "keeps", "t_submits", "deadlines"};
    int rc = check_takes(d, &x->takes);
    if (rc == SCHEDRUN_OK)
      rc = check_columns(d, &x->jobs, cols, names, SCHEDRUN__ARRAY_LEN(cols), &x->input_jobs, "input_jobs",
                         x->inputs.n);
    if (rc == SCHEDRUN_OK) rc = check_columns(d, &x->jobs, NULL, NULL, 0, &x->park_jobs, "park_jobs", x->park.n);
    if (rc == SCHEDRUN_OK) rc = check_columns(d, &x->jobs, NULL, NULL, 0, &x->take_jobs, "take_jobs", x->takes.n / 3);
    return rc;
  }
  if (m->type == MSG_COMPLETE_MANY) {
    const msg_complete_many *c = &m->body.complete_many;
    const msg_u64s *cols[] = {&c->runs,       &c->job_indexes, &c->t_submits,      &c->t_executes,
                              &c->t_dones,    &c->execute_ns,  &c->handoffs_local, &c->handoffs_copied,
                              &c->handoffs_peer, &c->bytes_in,  &c->bytes_out,      &c->bytes_peer};
    const char *names[] = {"runs",    "job_indexes", "t_submits",      "t_executes",
                           "t_dones", "execute_ns",  "handoffs_local", "handoffs_copied",
                           "handoffs_peer", "bytes_in", "bytes_out", "bytes_peer"};
    int rc = check_columns(d, &c->jobs, cols, names, SCHEDRUN__ARRAY_LEN(cols), &c->output_jobs, "output_jobs",
                           c->outputs.n);
    if (rc == SCHEDRUN_OK) rc = check_columns(d, &c->jobs, NULL, NULL, 0, &c->parcel_jobs, "parcel_jobs", c->parcels.n);
    return rc;
  }
  if (m->type == MSG_EXECUTED_MANY) return check_columns(d, &m->body.executed_many.jobs, NULL, NULL, 0, &none, "jobs", 0);
  return SCHEDRUN_OK;
}

static int decode(const void *data, size_t len, msg *m, bool local, schedrun_error_t *err) {
  memset(m, 0, sizeof *m);
  dctx d = {err, "?", local};
  if (!data || len == 0) return bad(&d, "envelope", "empty message");
  if (len > MSG_MAX_BYTES) return bad(&d, "envelope", "message too large");
  msgpack_object obj;
  const char *why = msg_parse(data, len, &obj);
  if (why) return bad(&d, "envelope", why);
  const msgpack_object *o = &obj;
  int rc = SCHEDRUN_OK;
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 5) {
    rc = bad(&d, "envelope", "expected an array of v, type, job, from, body");
    goto out;
  }
  const msgpack_object *e = o->via.array.ptr;
  uint64_t u = 0;
  if (!(rc = get_int(&d, "v", &e[0], 0, UINT32_MAX, false, &u, NULL)) && u != MSG_VERSION)
    rc = bad(&d, "v", "unsupported version");
  m->v = (uint32_t)u;
  if (rc == SCHEDRUN_OK && !(rc = get_int(&d, "type", &e[1], 0, UINT32_MAX, false, &u, NULL)) &&
      (u == 0 || u >= MSG__END))
    rc = bad(&d, "type", "unknown message type");
  if (rc == SCHEDRUN_OK) m->type = (int)u;
  if (rc == SCHEDRUN_OK) rc = get_int(&d, "job", &e[2], 0, UINT64_MAX, false, &m->job, NULL);
  if (rc == SCHEDRUN_OK) rc = get_str(&d, "from", &e[3], &m->from);
  if (rc == SCHEDRUN_OK) {
    d.type = msg_type_name(m->type);
    rc = decode_struct(&d, msg_body_schema[m->type], &e[4], &m->body);
    if (rc == SCHEDRUN_OK) rc = check_batch(&d, m);
  }
out:
  if (rc != SCHEDRUN_OK) {
    int type = m->type;
    if (type <= 0 || type >= MSG__END) m->type = 0;
    msg_free(m);
  }
  return rc;
}

int msg_decode(const void *data, size_t len, msg *m, schedrun_error_t *err) { return decode(data, len, m, false, err); }

int msg_decode_local(const void *data, size_t len, msg *m, schedrun_error_t *err) {
  return decode(data, len, m, true, err);
}

/* Moves bytes `from` holds into the slots of `to` whose block was lent
 * (no data, a length), field by field. */
static void take_back(const schema *s, void *to, void *from) {
  for (size_t i = 0; i < s->nfields; i++) {
    const field *f = &s->fields[i];
    void *t = (char *)to + f->off, *fr = (char *)from + f->off;
    if (f->kind == FK_BIN) {
      msg_bytes *a = t, *b = fr;
      if (!a->data && a->len && b->data && b->len == a->len) {
        a->data = b->data;
        b->data = NULL;
      }
    } else if (f->kind == FK_ARR) {
      any_arr *a = t, *b = fr;
      for (size_t k = 0; k < a->n && k < b->n; k++)
        take_back(f->sub, (char *)a->v + k * f->sub->size, (char *)b->v + k * f->sub->size);
    }
  }
}

void msg_unlend(msg *m, const void *data, size_t len) {
  msg back;
  if (decode(data, len, &back, true, NULL) != SCHEDRUN_OK) return; /* nothing claimed: ZeroMQ's free reclaims */
  if (back.type == m->type) take_back(msg_body_schema[m->type], &m->body, &back.body);
  msg_free(&back);
}
