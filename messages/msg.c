/* Message type names and construction. */
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
