/*
 * schedrun_report_write_npy: a run's output buffers as NumPy .npy files.
 *
 * Layout under DIR: <buffer>.npy holds run 0, job 0; when the run has more
 * than one run or job, run<R>/job<J>/<buffer>.npy holds every one (run 0,
 * job 0 included). Jobs that failed before their end are left out; those
 * whose expectations did not hold are written. Files are written
 * atomically, so a reader never sees a partial one.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/report.h"
#include "program/npy.h"

static int write_one(const char *path, const report_buffer *b, const void *data, size_t bytes,
                     schedrun_error_t *err) {
  uint8_t header[512];
  size_t hl = npy_header(b->type, b->ndims, b->dims, b->count, header, sizeof header);
  uint8_t *all = hl ? malloc(hl + bytes) : NULL;
  if (!all) return err_set(err, SCHEDRUN_ENOMEM, "out of memory writing %s", path);
  memcpy(all, header, hl);
  memcpy(all + hl, data, bytes);
  int rc = fs_write_atomic(path, all, hl + bytes, err);
  free(all);
  return rc;
}

int schedrun_report_write_npy(const schedrun_report_t *r, const char *dir, int all, schedrun_error_t *err) {
  if (!r || !dir || !*dir)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_report_write_npy: %s is NULL", r ? "the directory" : "the report");
  size_t nb;
  const report_buffer *bufs = report_buffers(r, &nb);
  bool marked = false;
  for (size_t b = 0; b < nb; b++) marked |= bufs[b].output;
  int repeat, jobs;
  report_shape(r, &repeat, &jobs);
  int rc = fs_mkdir_p(dir, err);
  for (int run = 0; rc == SCHEDRUN_OK && run < repeat; run++)
    for (int job = 0; rc == SCHEDRUN_OK && job < jobs; job++) {
      schedrun_job_info_t info;
      if (schedrun_report_job(r, run, job, &info) != SCHEDRUN_OK ||
          (info.status != SCHEDRUN_OK && info.status != SCHEDRUN_EVERIFY))
        continue; /* a job that did not run to its end has no outputs to write */
      char sub[4200];
      snprintf(sub, sizeof sub, "%s/run%d/job%d", dir, run, job);
      bool many = repeat > 1 || jobs > 1;
      if (many && (rc = fs_mkdir_p(sub, err))) break;
      for (size_t b = 0; rc == SCHEDRUN_OK && b < nb; b++) {
        if (!all && !(marked ? bufs[b].output : bufs[b].expected)) continue;
        size_t bytes;
        const void *data = schedrun_report_output(r, run, job, bufs[b].name, &bytes);
        if (!data || bytes != bufs[b].count * prog_type_size(bufs[b].type)) {
          rc = err_set(err, SCHEDRUN_EINVAL,
                       "schedrun_report_write_npy: buffer '%s' of run %d, job %d was not kept (run with keep_outputs)",
                       bufs[b].name, run, job);
          break;
        }
        char path[4400];
        if (run == 0 && job == 0) {
          snprintf(path, sizeof path, "%s/%s.npy", dir, bufs[b].name);
          if ((rc = write_one(path, &bufs[b], data, bytes, err))) break;
        }
        if (many) {
          snprintf(path, sizeof path, "%s/%s.npy", sub, bufs[b].name);
          if ((rc = write_one(path, &bufs[b], data, bytes, err))) break;
        }
      }
    }
  return rc;
}
