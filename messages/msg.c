/* Message type names and construction. */
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "messages/msg.h"

static const char *const type_names[MSG__END] = {
    [MSG_SUBMIT] = "SUBMIT",     [MSG_COMPILE] = "COMPILE", [MSG_COMPILED] = "COMPILED",
    [MSG_RECORD] = "RECORD",     [MSG_RECORDED] = "RECORDED", [MSG_EXECUTE] = "EXECUTE",
    [MSG_EXECUTED] = "EXECUTED", [MSG_COMPLETE] = "COMPLETE", [MSG_ERROR] = "ERROR",
    [MSG_STATUS] = "STATUS",     [MSG_TERM] = "TERM",       [MSG_RELEASE] = "RELEASE",
    [MSG_CANCEL] = "CANCEL",     [MSG_SUBMIT_MANY] = "SUBMIT_MANY",
    [MSG_EXECUTE_MANY] = "EXECUTE_MANY", [MSG_COMPLETE_MANY] = "COMPLETE_MANY", [MSG_EXECUTED_MANY] = "EXECUTED_MANY",
    [MSG_QUEUED] = "QUEUED",     [MSG_TICK] = "TICK",
};

const char *msg_type_name(int type) {
  if (type <= 0 || type >= MSG__END) return "?";
  return type_names[type];
}

int msg_init(msg *m, int type, uint64_t job, const char *from) {
  memset(m, 0, sizeof *m);
  m->v = MSG_VERSION;
  m->type = type;
  m->job = job;
  m->from = xstrdup(from ? from : "");
  return m->from ? SCHEDRUN_OK : SCHEDRUN_ENOMEM;
}

/* ---- SUBMIT_MANY's columns ---- */

void msg_submit_columns(msg_submit_many *b, msg_u64s *cols[MSG_SUBMIT_COLUMNS]) {
  msg_u64s *c[MSG_SUBMIT_COLUMNS] = {&b->programs, &b->runs,  &b->job_indexes, &b->slots,
                                     &b->devices,  &b->keeps, &b->deadlines,   &b->record_onlys};
  memcpy(cols, c, sizeof c);
}

void msg_submit_values(const msg_submit *sb, uint64_t v[MSG_SUBMIT_COLUMNS]) {
  v[0] = sb->program;
  v[1] = sb->run;
  v[2] = sb->job_index;
  v[3] = sb->slot;
  v[4] = (uint64_t)(int64_t)sb->device;
  v[5] = sb->keep;
  v[6] = sb->deadline;
  v[7] = sb->record_only;
}

int msg_submit_many_reserve(msg_submit_many *b, size_t n, size_t nin) {
  msg_u64s *cols[MSG_SUBMIT_COLUMNS];
  msg_submit_columns(b, cols);
  for (int c = 0; c < MSG_SUBMIT_COLUMNS; c++) {
    assert(cols[c]->n == 0 && !cols[c]->v);
    if (n && !(cols[c]->v = malloc(n * sizeof(uint64_t)))) return SCHEDRUN_ENOMEM;
  }
  if (nin && (!(b->input_jobs.v = malloc(nin * sizeof(uint64_t))) || !(b->inputs.v = calloc(nin, sizeof(msg_output)))))
    return SCHEDRUN_ENOMEM;
  return SCHEDRUN_OK;
}

void msg_submit_many_add(msg_submit_many *b, msg_submit *sb) {
  assert(sb->park.n == 0 && sb->takes.n == 0); /* such a job travels alone */
  msg_u64s *cols[MSG_SUBMIT_COLUMNS];
  msg_submit_columns(b, cols);
  uint64_t v[MSG_SUBMIT_COLUMNS];
  msg_submit_values(sb, v);
  size_t k = b->programs.n;
  for (int c = 0; c < MSG_SUBMIT_COLUMNS; c++) cols[c]->v[cols[c]->n++] = v[c];
  for (size_t i = 0; i < sb->inputs.n; i++) {
    b->input_jobs.v[b->input_jobs.n++] = k;
    b->inputs.v[b->inputs.n++] = sb->inputs.v[i];
  }
  free(sb->inputs.v);
  sb->inputs = (msg_outputs){NULL, 0};
}

int msg_submit_many_reserve_handoffs(msg_submit_many *b, size_t npark, size_t ntakes) {
  assert(!b->park.v && !b->takes.v && ntakes % 3 == 0);
  if (npark && (!(b->park.v = malloc(npark * sizeof(uint64_t))) || !(b->park_jobs.v = malloc(npark * sizeof(uint64_t)))))
    return SCHEDRUN_ENOMEM;
  if (ntakes &&
      (!(b->takes.v = malloc(ntakes * sizeof(uint64_t))) || !(b->take_jobs.v = malloc(ntakes / 3 * sizeof(uint64_t)))))
    return SCHEDRUN_ENOMEM;
  return SCHEDRUN_OK;
}

void msg_submit_many_add_handing(msg_submit_many *b, msg_submit *sb) {
  size_t k = b->programs.n;
  assert(sb->takes.n % 3 == 0);
  for (size_t i = 0; i < sb->park.n; i++) {
    b->park_jobs.v[b->park_jobs.n++] = k;
    b->park.v[b->park.n++] = sb->park.v[i];
  }
  for (size_t i = 0; i < sb->takes.n; i++) {
    if (i % 3 == 0) b->take_jobs.v[b->take_jobs.n++] = k;
    b->takes.v[b->takes.n++] = sb->takes.v[i];
  }
  free(sb->park.v);
  free(sb->takes.v);
  sb->park = sb->takes = (msg_u64s){NULL, 0};
  msg_submit_many_add(b, sb);
}

void msg_submit_many_get(const msg_submit_many *b, size_t k, msg_submit *sb) {
  assert(k < b->programs.n); /* the decoder checked every column's length */
  uint64_t d = b->devices.v[k];
  *sb = (msg_submit){.program = b->programs.v[k],
                     .run = (uint32_t)b->runs.v[k],
                     .job_index = (uint32_t)b->job_indexes.v[k],
                     .slot = (uint32_t)b->slots.v[k],
                     .device = d <= INT32_MAX ? (int32_t)d : d == UINT64_MAX ? -1 : INT32_MAX,
                     .keep = (uint32_t)b->keeps.v[k],
                     .deadline = b->deadlines.v[k],
                     .record_only = (uint32_t)b->record_onlys.v[k]};
}

/* ---- what went through ZeroMQ ---- */

/* one cache line per type, so that senders of different types do not
 * share one */
typedef struct tally {
  _Atomic uint64_t jobs;
  char pad[64 - sizeof(uint64_t)];
} tally;
static tally tallies[MSG__END];

/* the jobs a message carries: a batch's, or its own */
static uint64_t jobs_of(const msg *m) {
  switch (m->type) {
  case MSG_SUBMIT_MANY: return m->body.submit_many.programs.n;
  case MSG_EXECUTE_MANY: return m->body.execute_many.jobs.n;
  case MSG_COMPLETE_MANY: return m->body.complete_many.jobs.n;
  case MSG_EXECUTED_MANY: return m->body.executed_many.jobs.n;
  default: return m->job != 0;
  }
}

void msg_tally_sent(const msg *m) { msg_tally_add(m->type, jobs_of(m)); }

void msg_tally_add(int type, uint64_t jobs) {
  if (type <= 0 || type >= MSG__END) return;
  atomic_fetch_add_explicit(&tallies[type].jobs, jobs, memory_order_relaxed);
}

uint64_t msg_tally_jobs(int type) {
  return type > 0 && type < MSG__END ? atomic_load_explicit(&tallies[type].jobs, memory_order_relaxed) : 0;
}

static _Atomic uint64_t unsent[MSG__END];

void msg_tally_unsent(int type) {
  if (type > 0 && type < MSG__END) atomic_fetch_add_explicit(&unsent[type], 1, memory_order_relaxed);
}

uint64_t msg_tally_unsent_count(int type) {
  return type > 0 && type < MSG__END ? atomic_load_explicit(&unsent[type], memory_order_relaxed) : 0;
}
