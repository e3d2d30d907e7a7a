/* A job's result, as the library hands it out, built from its COMPLETE. */
#ifndef SCHEDRUN_RESULT_H
#define SCHEDRUN_RESULT_H

#include "messages/msg.h"
#include "program/program.h"
#include "schedrun.h"

struct schedrun_job_result {
  schedrun_job_t id;
  schedrun_job_info_t info;
  char *error;
  msg_outputs outputs;
  char **names; /* the buffer name of each output */
  uint64_t t_submit, t_compile, t_record, t_execute, t_done;
  uint32_t cache_hits, cache_misses;
  msg_u64s launches; /* {tag, start, end} per timed node (msg_complete.launches) */
  msg_u64s parcels;  /* hand-offs the job left on its device (msg_complete.parcels) */
};

/* Takes c's outputs; verifies them against p's expectations (a failure makes
 * the status SCHEDRUN_EVERIFY); keeps only expected buffers unless keep. */
schedrun_job_result_t *result_from_complete(uint64_t id, msg_complete *c, const prog_program *p, bool keep);

/* The inverse, for a result that travels on (to another MPI rank): c gets
 * r's numbers, times, error and outputs (taken from r; r is freed after as
 * usual). A verification failure goes as SCHEDRUN_OK: the receiver verifies
 * the outputs against its own copy of the program. */
void result_to_complete(schedrun_job_result_t *r, uint64_t program, msg_complete *c);

#endif
