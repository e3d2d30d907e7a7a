/* Message type names and construction. */
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
    [MSG_QUEUED] = "QUEUED",
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
  case MSG_SUBMIT_MANY: return m->body.submit_many.jobs.n;
  case MSG_EXECUTE_MANY: return m->body.execute_many.jobs.n;
  case MSG_COMPLETE_MANY: return m->body.complete_many.jobs.n;
  case MSG_EXECUTED_MANY: return m->body.executed_many.jobs.n;
  default: return m->job != 0;
  }
}

void msg_tally_sent(const msg *m) {
  if (m->type <= 0 || m->type >= MSG__END) return;
  atomic_fetch_add_explicit(&tallies[m->type].jobs, jobs_of(m), memory_order_relaxed);
}

uint64_t msg_tally_jobs(int type) {
  return type > 0 && type < MSG__END ? atomic_load_explicit(&tallies[type].jobs, memory_order_relaxed) : 0;
}
