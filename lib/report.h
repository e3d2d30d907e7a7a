/* The result of schedrun_run: one entry per (run, job), and a summary. */
#ifndef SCHEDRUN_REPORT_H
#define SCHEDRUN_REPORT_H

#include "lib/result.h"
#include "program/program.h"
#include "schedrun.h"

/* What the report keeps of the program's buffers (the program may go first). */
typedef struct report_buffer {
  char *name;
  prog_type type;
  uint64_t count;
  uint32_t ndims; /* its shape (prog_buffer) */
  uint64_t dims[PROG_MAX_DIMS];
  bool output;   /* marked `output: true` */
  bool expected; /* has an expectation */
} report_buffer;

schedrun_report_t *report_new(const schedrun_t *s, const prog_program *p, int repeat, int jobs, bool keep);
/* Files the result of job `index` (run * jobs + job), taking it over (it is
 * freed here). Returns false for a duplicate. */
bool report_add(schedrun_report_t *r, size_t index, schedrun_job_result_t *res);
/* Jobs `first` to the last, none of them filed, never started (a rank was
 * lost): failed with `status` and `why`, named by one failure line for the
 * range, and answered by schedrun_report_job (device -1, nothing else)
 * without an entry written for each (a long run has millions of them).
 * Once per report. */
void report_not_started(schedrun_report_t *r, size_t first, int status, const char *why);
/* A device of another process (an MPI rank), after this process's: its
 * index, or -1 past SCHEDRUN_MAX_DEVICES. Its counters come from
 * report_device_counters, not from this process's backend. */
int report_add_device(schedrun_report_t *r, const char *name);
void report_rename_device(schedrun_report_t *r, int d, const char *name);
void report_device_counters(schedrun_report_t *r, int d, uint64_t launches, uint64_t loop_syncs, uint64_t beside,
                            const char *loops);
void report_finish(schedrun_report_t *r, uint64_t wall_ns);
/* SCHEDRUN_OK, SCHEDRUN_EVERIFY, or the first job error, with err filled. */
int report_status(const schedrun_report_t *r, schedrun_error_t *err);
const report_buffer *report_buffers(const schedrun_report_t *r, size_t *n);

/* One job's timeline (CLOCK_MONOTONIC ns; 0: the phase did not happen). */
typedef struct report_times {
  int run, job, device;
  uint64_t t_submit, t_compile, compile_ns, t_record, record_ns, t_execute, execute_ns, t_done;
} report_times;
/* Job i (run * jobs + job)'s timeline; false when it is not in the report. */
bool report_timeline(const schedrun_report_t *r, size_t i, report_times *out);
const char *report_name(const schedrun_report_t *r);
/* Job i's timed nodes: n triples {tag, start, end}; NULL when none. */
const uint64_t *report_launches(const schedrun_report_t *r, size_t i, size_t *n);
/* What command `tag` of the program is ("kernel 'k' (file:line:col)"). */
const char *report_command(const schedrun_report_t *r, uint64_t tag);
const char *report_device_name(const schedrun_report_t *r, int d);
/* The run's shape: repeat and jobs. */
void report_shape(const schedrun_report_t *r, int *repeat, int *jobs);

#endif
