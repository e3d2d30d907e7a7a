/*
 * schedrun_report_write_trace: a run as a Chrome trace (the Trace Event
 * Format; Perfetto and chrome://tracing open it).
 *
 * - Each job is an async span ("b"/"e", id = its index) from submission to
 *   completion: async spans may overlap, and they do, many jobs being in
 *   flight at once.
 * - Its phases are complete ("X") spans on lanes per actor: compile, record,
 *   and execute per device. Spans on one lane must nest, so when phases of
 *   different jobs overlap in time (a RECORD waiting in the record actor's
 *   mailbox while another is handled) they go to the first lane of their
 *   kind that is free: "record", "record #2", ... Each lane's spans are
 *   then disjoint by construction.
 * - The first jobs of each device whose backend times its nodes (host
 *   devices: 16 jobs, 1024 nodes each) have a span per node of their replay
 *   on a lane of the device's launches, named after the program's step.
 * - Flow events link a job's submission, its phases and its completion
 *   (submit and done are zero-length spans on the client lanes), for the
 *   first MAX_FLOW_JOBS jobs.
 * - Counter tracks: jobs in flight, and jobs submitted but not yet
 *   executing, sampled at most MAX_COUNTER_SAMPLES times each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/report.h"

#define MAX_FLOW_JOBS 10000
#define MAX_COUNTER_SAMPLES 20000

enum { KIND_CLIENT, KIND_COMPILE, KIND_RECORD, KIND_DEVICE0 };

typedef struct span {
  uint64_t t0, t1;
  uint32_t job;  /* index into the timelines */
  uint16_t kind; /* KIND_* (+ device; + ndevices + device for launches) */
  uint16_t phase; /* 0 submit, 1 compile, 2 record, 3 execute, 4 done, 5 a timed node */
  int lane;      /* the tid it lands on */
  uint64_t tag;  /* a timed node's command */
} span;

typedef struct lanes {
  int kind;
  uint64_t *busy_until; /* per sub-lane of this kind */
  int n;
  int tid0;
} lanes;

typedef struct tracer {
  strbuf sb;
  bool first;
  uint64_t base;
} tracer;

static void comma(tracer *t) {
  sb_adds(&t->sb, t->first ? "\n" : ",\n");
  t->first = false;
}

static double us(const tracer *t, uint64_t ns) { return ns >= t->base ? (double)(ns - t->base) / 1e3 : 0; }

static int by_start(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  if (x->t1 != y->t1) return x->t1 > y->t1 ? -1 : 1; /* the longer first, so that equal starts nest */
  return 0;
}

typedef struct change {
  uint64_t t;
  int delta;
} change;

static int by_time(const void *a, const void *b) {
  const change *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->delta - y->delta; /* leaving before arriving at one instant */
}

static void counter(tracer *t, const char *name, change *c, size_t n) {
  qsort(c, n, sizeof *c, by_time);
  size_t every = n / MAX_COUNTER_SAMPLES + 1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    v += c[i].delta;
    if (i % every && i + 1 < n) continue;
    comma(t);
    sb_adds(&t->sb, "{\"name\": ");
    sb_add_json(&t->sb, name);
    sb_addf(&t->sb, ", \"ph\": \"C\", \"pid\": 1, \"ts\": %.3f, \"args\": {\"value\": %ld}}", us(t, c[i].t), v);
  }
}

int schedrun_report_write_trace(const schedrun_report_t *r, const char *path, schedrun_error_t *err) {
  if (!r || !path) return err_set(err, SCHEDRUN_EINVAL, "schedrun_report_write_trace: %s is NULL", r ? "path" : "the report");
  int repeat, jobs;
  report_shape(r, &repeat, &jobs);
  size_t total = (size_t)repeat * (size_t)jobs, nt = 0, nlaunch = 0;
  for (size_t i = 0; i < total; i++) {
    size_t n;
    report_launches(r, i, &n);
    nlaunch += n;
  }
  report_times *tl = calloc(total ? total : 1, sizeof *tl);
  size_t *index = calloc(total ? total : 1, sizeof *index); /* timeline -> job index */
  span *sp = calloc(total * 5 + nlaunch + 1, sizeof *sp);
  change *inflight = calloc(total ? total * 2 : 1, sizeof *inflight), *queued = calloc(total ? total * 2 : 1, sizeof *queued);
  int ndev = schedrun_report_summary(r)->ndevices, nkinds = KIND_DEVICE0 + 2 * ndev;
  lanes *ln = calloc((size_t)nkinds, sizeof *ln);
  tracer t = {{0}, true, UINT64_MAX};
  sb_init(&t.sb);
  int rc = SCHEDRUN_OK;
  if (!tl || !index || !sp || !inflight || !queued || !ln) {
    rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory writing the trace");
    goto out;
  }
  for (size_t i = 0; i < total; i++)
    if (report_timeline(r, i, &tl[nt]) && tl[nt].t_submit) {
      if (tl[nt].t_submit < t.base) t.base = tl[nt].t_submit;
      index[nt++] = i;
    }
  if (t.base == UINT64_MAX) t.base = 0;
  /* every phase as a span, then the spans of each kind onto free lanes */
  size_t ns = 0, ni = 0, nq = 0;
  for (size_t k = 0; k < nt; k++) {
    const report_times *j = &tl[k];
    uint64_t done = j->t_done > j->t_submit ? j->t_done : j->t_submit;
    sp[ns++] = (span){j->t_submit, j->t_submit, (uint32_t)k, KIND_CLIENT, 0, 0, 0};
    if (j->t_compile) sp[ns++] = (span){j->t_compile, j->t_compile + j->compile_ns, (uint32_t)k, KIND_COMPILE, 1, 0, 0};
    if (j->t_record) sp[ns++] = (span){j->t_record, j->t_record + j->record_ns, (uint32_t)k, KIND_RECORD, 2, 0, 0};
    if (j->t_execute && j->device >= 0 && j->device < ndev)
      sp[ns++] = (span){j->t_execute, j->t_execute + j->execute_ns, (uint32_t)k, (uint16_t)(KIND_DEVICE0 + j->device),
                        3, 0, 0};
    sp[ns++] = (span){done, done, (uint32_t)k, KIND_CLIENT, 4, 0, 0};
    size_t nl;
    const uint64_t *l = report_launches(r, index[k], &nl);
    for (size_t q = 0; l && j->device >= 0 && j->device < ndev && q < nl; q++)
      if (l[3 * q + 1] && l[3 * q + 2] >= l[3 * q + 1])
        sp[ns++] = (span){l[3 * q + 1], l[3 * q + 2], (uint32_t)k, (uint16_t)(KIND_DEVICE0 + ndev + j->device), 5, 0,
                          l[3 * q]};
    inflight[ni++] = (change){j->t_submit, +1};
    inflight[ni++] = (change){done, -1};
    queued[nq++] = (change){j->t_submit, +1};
    queued[nq++] = (change){j->t_execute && j->t_execute < done ? j->t_execute : done, -1};
  }
  qsort(sp, ns, sizeof *sp, by_start);
  for (size_t i = 0; i < ns; i++) {
    lanes *l = &ln[sp[i].kind];
    int pick = -1;
    for (int k = 0; k < l->n && pick < 0; k++)
      if (l->busy_until[k] <= sp[i].t0) pick = k;
    if (pick < 0) {
      uint64_t *b = realloc(l->busy_until, (size_t)(l->n + 1) * sizeof *b);
      if (!b) {
        rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory writing the trace");
        goto out;
      }
      l->busy_until = b;
      pick = l->n++;
    }
    l->busy_until[pick] = sp[i].t1;
    sp[i].lane = pick;
  }
  /* lane numbers: each kind's sub-lanes in a block */
  int tid = 1;
  for (int k = 0; k < nkinds; k++) {
    ln[k].tid0 = tid;
    tid += ln[k].n ? ln[k].n : 1;
  }
  sb_adds(&t.sb, "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [");
  comma(&t);
  sb_adds(&t.sb, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": ");
  sb_add_json(&t.sb, report_name(r));
  sb_adds(&t.sb, "}}");
  for (int k = 0; k < nkinds; k++)
    for (int s = 0; s < ln[k].n; s++) {
      char name[96];
      const char *base = k == KIND_CLIENT ? "client" : k == KIND_COMPILE ? "compile" : k == KIND_RECORD ? "record" : NULL;
      char dev[64];
      if (!base) {
        int d = k - KIND_DEVICE0;
        snprintf(dev, sizeof dev, "%s %s", d < ndev ? "execute" : "launches", report_device_name(r, d % ndev));
        base = dev;
      }
      if (s) snprintf(name, sizeof name, "%s #%d", base, s + 1);
      else snprintf(name, sizeof name, "%s", base);
      comma(&t);
      sb_addf(&t.sb, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": ",
              ln[k].tid0 + s);
      sb_add_json(&t.sb, name);
      sb_addf(&t.sb, "}}");
      comma(&t);
      sb_addf(&t.sb, "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"sort_index\": %d}}",
              ln[k].tid0 + s, ln[k].tid0 + s);
    }
  static const char *const phase_name[] = {"submit", "compile", "record", "execute", "done"};
  for (size_t i = 0; i < ns; i++) {
    const span *s = &sp[i];
    const report_times *j = &tl[s->job];
    int lane = ln[s->kind].tid0 + s->lane;
    comma(&t);
    if (s->phase == 5) {
      sb_adds(&t.sb, "{\"name\": ");
      sb_add_json(&t.sb, report_command(r, s->tag));
      sb_addf(&t.sb,
              ", \"cat\": \"launch\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
              "\"args\": {\"run\": %d, \"job\": %d, \"command\": %llu}}",
              lane, us(&t, s->t0), (double)(s->t1 - s->t0) / 1e3, j->run, j->job, (unsigned long long)s->tag);
      continue;
    }
    sb_addf(&t.sb,
            "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
            "\"args\": {\"run\": %d, \"job\": %d}}",
            phase_name[s->phase], s->phase == 0 || s->phase == 4 ? "client" : "phase", lane, us(&t, s->t0),
            (double)(s->t1 - s->t0) / 1e3, j->run, j->job);
    if (s->job >= MAX_FLOW_JOBS) continue;
    /* the job's flow: starts at submit, steps through each phase, ends at done */
    comma(&t);
    sb_addf(&t.sb, "{\"name\": \"job\", \"cat\": \"job\", \"ph\": \"%s\", \"id\": %u, \"pid\": 1, \"tid\": %d, \"ts\": %.3f%s}",
            s->phase == 0 ? "s" : s->phase == 4 ? "f" : "t", s->job, lane, us(&t, s->t0),
            s->phase == 4 ? ", \"bp\": \"e\"" : "");
  }
  for (size_t k = 0; k < nt; k++) {
    const report_times *j = &tl[k];
    uint64_t done = j->t_done > j->t_submit ? j->t_done : j->t_submit;
    for (int be = 0; be < 2; be++) {
      comma(&t);
      sb_addf(&t.sb,
              "{\"name\": \"job %d.%d\", \"cat\": \"jobs\", \"ph\": \"%s\", \"id\": %zu, \"pid\": 1, \"tid\": %d, "
              "\"ts\": %.3f}",
              j->run, j->job, be ? "e" : "b", k, ln[KIND_CLIENT].tid0, us(&t, be ? done : j->t_submit));
    }
  }
  counter(&t, "jobs in flight", inflight, ni);
  counter(&t, "jobs waiting to execute", queued, nq);
  sb_adds(&t.sb, "\n]}\n");
  if (t.sb.failed) rc = err_set(err, SCHEDRUN_ENOMEM, "out of memory writing the trace");
  else rc = fs_write_output(path, t.sb.data, t.sb.len, err);
out:
  sb_free(&t.sb);
  for (int k = 0; ln && k < nkinds; k++) free(ln[k].busy_until);
  free(ln);
  free(tl);
  free(index);
  free(sp);
  free(inflight);
  free(queued);
  return rc;
}

int schedrun_check_output(const char *path, int directory, schedrun_error_t *err) {
  if (!path) return err_set(err, SCHEDRUN_EINVAL, "schedrun_check_output: path is NULL");
  return fs_check_output(path, directory != 0, err);
}
