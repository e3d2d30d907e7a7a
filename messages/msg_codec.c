/*
 * The msgpack codec for every message, driven by one schema table per body
 * (msg_schema.h): the tables, the destructor and the decoder here, the
 * encoder in msg_encode.c.
 *
 * Decoding (msg_decode.c) is one pass of msgpack-c's unpacker that checks
 * every value against the schema where it stands, then the checks across
 * fields here (a batch's columns against its jobs); bad bytes give
 * SCHEDRUN_EPROTO, naming the place, instead of a crash. The envelope is
 * the array [v, type, job, from, body] and a body the array of its schema's
 * fields in order: no keys to write, look up or compare, and a wrong number
 * of fields is refused.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "messages/msg.h"
#include "messages/msg_decode.h"
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
       F(msg_executed_many, device, FK_U32), F(msg_executed_many, jobs, FK_U64S),
       F(msg_executed_many, exec_ns, FK_U64S));

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

/* ---- decode: the checks across fields ------------------------------------ */

typedef struct dctx {
  schedrun_error_t *err;
  const char *type;
} dctx;

static int bad(dctx *d, const char *where, const char *what) {
  return err_set(d->err, SCHEDRUN_EPROTO, "malformed %s message: %s: %s", d->type, where, what);
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
  if (m->type == MSG_EXECUTED_MANY) {
    const msg_u64s *cols[] = {&m->body.executed_many.exec_ns};
    const char *names[] = {"exec_ns"};
    return check_columns(d, &m->body.executed_many.jobs, cols, names, 1, &none, "jobs", 0);
  }
  return SCHEDRUN_OK;
}

static int decode(const void *data, size_t len, msg *m, bool local, schedrun_error_t *err) {
  memset(m, 0, sizeof *m);
  dctx d = {err, "?"};
  if (!data || len == 0) return bad(&d, "envelope", "empty message");
  if (len > MSG_MAX_BYTES) return bad(&d, "envelope", "message too large");
  int rc = msg_visit(data, len, m, local, err);
  if (rc == SCHEDRUN_OK) {
    d.type = msg_type_name(m->type);
    rc = check_batch(&d, m);
  }
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
