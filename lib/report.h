/* The result of sched_run: one entry per (run, job), and a summary. */
#ifndef SCHED_REPORT_H
#define SCHED_REPORT_H

#include "lib/result.h"
#include "program/program.h"
#include "sched.h"

sched_report_t *report_new(const sched_t *s, const prog_program *p, int repeat, int jobs, bool keep);
/* Files the result of job `index` (run * jobs + job), taking it over (it is
 * freed here). Returns false for a duplicate. */
bool report_add(sched_report_t *r, size_t index, sched_job_result_t *res);
void report_finish(sched_report_t *r, uint64_t wall_ns);
/* SCHED_OK, SCHED_EVERIFY, or the first job error, with err filled. */
int report_status(const sched_report_t *r, sched_error_t *err);

#endif
