/* The result of schedrun_run: one entry per (run, job), and a summary. */
#ifndef SCHEDRUN_REPORT_H
#define SCHEDRUN_REPORT_H

#include "lib/result.h"
#include "program/program.h"
#include "schedrun.h"

schedrun_report_t *report_new(const schedrun_t *s, const prog_program *p, int repeat, int jobs, bool keep);
/* Files the result of job `index` (run * jobs + job), taking it over (it is
 * freed here). Returns false for a duplicate. */
bool report_add(schedrun_report_t *r, size_t index, schedrun_job_result_t *res);
void report_finish(schedrun_report_t *r, uint64_t wall_ns);
/* SCHEDRUN_OK, SCHEDRUN_EVERIFY, or the first job error, with err filled. */
int report_status(const schedrun_report_t *r, schedrun_error_t *err);

#endif
