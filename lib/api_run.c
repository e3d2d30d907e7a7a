/*
 * schedrun_run: a whole config as many jobs and one report. Jobs are
 * submitted while there is room under max_inflight and collected in
 * submission order as they complete, so a run of any size holds a bounded
 * number of jobs. Every job's deadline is at most the run's, so a kernel that
 * never returns ends the run on time (its device is lost) instead of hanging it.
 */
#include <stdlib.h>
#include <string.h>

#include "lib/api.h"
#include "lib/report.h"

#define DEFAULT_RUN_TIMEOUT_MS (10 * 60 * 1000)

void schedrun_run_options_init(schedrun_run_options_t *o) {
  if (o) memset(o, 0, sizeof *o);
}

typedef struct run_state {
  schedrun_t *s;
  const schedrun_run_options_t *o;
  const prog_program *p;
  schedrun_report_t *rep;
  int jobs;
  size_t total, done;
  uint64_t deadline, last_progress;
  schedrun_job_t *ids; /* ring of submitted, not yet collected jobs */
  size_t cap, head, count;
} run_state;

static int left_ms(const run_state *r) {
  uint64_t now = now_ns();
  return now >= r->deadline ? 0 : (int)((r->deadline - now) / 1000000ull);
}

/* Tells progress_phase where the run is: before its first job is done,
 * compiling (while a compile session is open) or recording. */
static void report_phase(run_state *r) {
  int kernels = 0, compiled = 0;
  if (r->done == 0 && schedrun_compile_progress(r->s, &kernels, &compiled, NULL) == SCHEDRUN_OK && kernels > 0) {
    r->o->progress_phase("compiling", 0, (uint32_t)r->total, (uint32_t)compiled, (uint32_t)kernels,
                         r->o->progress_user);
    return;
  }
  r->o->progress_phase(r->done == 0 ? "recording" : "running", (uint32_t)r->done, (uint32_t)r->total, 0, 0,
                       r->o->progress_user);
}

/* Calls the progress callbacks, at most every 100 ms. */
static void maybe_progress(run_state *r) {
  uint64_t now = now_ns();
  if ((r->o->progress || r->o->progress_phase) && now - r->last_progress > 100000000ull) {
    if (r->o->progress) r->o->progress((uint32_t)r->done, (uint32_t)r->total, r->o->progress_user);
    if (r->o->progress_phase) report_phase(r);
    r->last_progress = now;
  }
}

/* Collects the oldest submitted job into the report. */
static int collect_one(run_state *r, schedrun_error_t *err) {
  schedrun_job_result_t *res = NULL;
  schedrun_job_t id = r->ids[r->head];
  for (;;) {
    maybe_progress(r);
    int left = left_ms(r);
    /* past the run's deadline the jobs' own deadlines (no later) end them:
     * wait a little more for those completions */
    int slice = left == 0 ? 2000 : (r->o->progress || r->o->progress_phase) && left > 100 ? 100 : left;
    int wrc = schedrun_wait(r->s, id, slice, &res, NULL);
    if (wrc == SCHEDRUN_OK) break;
    if (wrc != SCHEDRUN_ETIMEOUT || left == 0)
      return err_set(err, SCHEDRUN_ETIMEOUT, "run of '%s': %zu of %zu jobs done within the run's time limit",
                     r->p->name, r->done, r->total);
  }
  r->head = (r->head + 1) % r->cap;
  r->count--;
  report_add(r->rep, (size_t)(res->info.run * r->jobs + res->info.job), res);
  r->done++;
  return SCHEDRUN_OK;
}

int schedrun_run(schedrun_t *s, schedrun_program_t *h, const schedrun_run_options_t *opts, schedrun_report_t **out,
                 schedrun_error_t *err) {
  if (out) *out = NULL;
  if (!s || !h || !out)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_run: %s is NULL", !s ? "the scheduler" : !h ? "the program" : "out");
  if (api_on_completer(s))
    return err_set(err, SCHEDRUN_EDEADLK, "schedrun_run: called from a completion callback, whose thread delivers "
                                          "the run's completions; run from another thread");
  schedrun_run_options_t o;
  schedrun_run_options_init(&o);
  if (opts) o = *opts;
  if (o.repeat < 0 || o.jobs < 0 || o.timeout_ms < 0 || o.job_timeout_ms < 0)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_run: repeat, jobs, timeout_ms and job_timeout_ms must be >= 0");
  const prog_program *p = h->p;
  int repeat = o.repeat ? o.repeat : p->repeat, jobs = o.jobs ? o.jobs : p->jobs;
  if ((uint64_t)repeat * (uint64_t)jobs > 10000000ull)
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_run: %d runs of %d jobs is too many (at most 10,000,000 jobs)",
                   repeat, jobs);
  int timeout = o.timeout_ms ? o.timeout_ms : DEFAULT_RUN_TIMEOUT_MS;
  run_state r = {.s = s, .o = &o, .p = p, .jobs = jobs};
  r.total = (size_t)repeat * (size_t)jobs;
  r.cap = s->max_inflight < r.total ? s->max_inflight : r.total;
  if (r.cap == 0) r.cap = 1;
  r.rep = report_new(s, p, repeat, jobs, o.keep_outputs != 0);
  r.ids = calloc(r.cap, sizeof *r.ids);
  if (!r.rep || !r.ids) {
    schedrun_report_free(&r.rep);
    free(r.ids);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  uint64_t t0 = now_ns();
  r.deadline = t0 + (uint64_t)timeout * 1000000ull;
  int rc = SCHEDRUN_OK;
  size_t submitted = 0;
  schedrun_job_options_t jo;
  schedrun_job_options_init(&jo);
  jo.keep_outputs = o.keep_outputs;
  jo.record_only = o.check_only;
  jo.submit_timeout_ms = 0; /* no room: collect first */
  for (int run = 0; run < repeat && rc == SCHEDRUN_OK; run++)
    for (int j = 0; j < jobs && rc == SCHEDRUN_OK; j++) {
      jo.run = run;
      jo.job = j;
      int left = left_ms(&r);
      /* the run's jobs share the run's deadline, so that they can go to a
       * device together (one submission runs until one deadline); a job
       * timeout shorter than what is left is the job's own */
      bool own = o.job_timeout_ms && o.job_timeout_ms < left;
      jo.timeout_ms = own ? o.job_timeout_ms : left > 0 ? left : 1;
      uint64_t deadline = own || left <= 0 ? 0 : r.deadline;
      while (r.count == r.cap && rc == SCHEDRUN_OK) rc = collect_one(&r, err);
      if (rc) break;
      size_t slot = (r.head + r.count) % r.cap;
      rc = api_submit(s, h, &jo, deadline, true, false, &r.ids[slot], err);
      while (rc == SCHEDRUN_EAGAIN && r.count > 0) {
        /* others hold the room: make some by collecting ours */
        schedrun_error_clear(err);
        rc = collect_one(&r, err);
        if (rc == SCHEDRUN_OK) rc = api_submit(s, h, &jo, deadline, true, false, &r.ids[(r.head + r.count) % r.cap], err);
      }
      if (rc == SCHEDRUN_OK) {
        r.count++;
        submitted++;
        if ((submitted & 255) == 0) maybe_progress(&r); /* while a long run is submitted, too */
      }
    }
  /* collect what is still out; every submitted job is waited for */
  schedrun_error_t cerr = {0};
  while (r.count > 0) {
    int crc = collect_one(&r, rc ? &cerr : err);
    if (crc) {
      if (rc == SCHEDRUN_OK) rc = crc;
      break;
    }
  }
  schedrun_error_clear(&cerr);
  if (o.progress) o.progress((uint32_t)r.done, (uint32_t)r.total, o.progress_user);
  free(r.ids);
  if (submitted == 0 && rc) {
    /* nothing ran (a wrong argument, a closed scheduler): no report */
    schedrun_report_free(&r.rep);
    return rc;
  }
  report_finish(r.rep, now_ns() - t0);
  *out = r.rep;
  if (rc) return rc;
  return report_status(r.rep, err);
}
