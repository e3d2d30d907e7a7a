/* A job's result, as the library hands it out, built from its COMPLETE. */
#ifndef SCHED_RESULT_H
#define SCHED_RESULT_H

#include "messages/msg.h"
#include "program/program.h"
#include "sched.h"

struct sched_job_result {
  sched_job_t id;
  sched_job_info_t info;
  char *error;
  msg_outputs outputs;
  char **names; /* the buffer name of each output */
  uint64_t t_submit, t_compile, t_record, t_execute, t_done;
  uint32_t cache_hits, cache_misses;
};

/* Takes c's outputs; verifies them against p's expectations (a failure makes
 * the status SCHED_EVERIFY); keeps only expected buffers unless keep. */
sched_job_result_t *result_from_complete(uint64_t id, msg_complete *c, const prog_program *p, bool keep);

#endif
