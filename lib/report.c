/* See report.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/report.h"

typedef struct job_result {
  bool seen, verified;
  int status;
  int device;
  uint64_t compile_ns, record_ns, execute_ns;
  msg_counts counts;
  msg_outputs outputs; /* kept outputs */
} job_result;

struct sched_report {
  int repeat, jobs;
  bool keep;
  const prog_program *p; /* for verification; used only during the run */
  char **buffer_names;
  uint32_t nbuffers;
  char (*device_names)[32];
  job_result *results;
  char **failures;
  size_t nfailures, cap;
  int first_error;
  char *first_error_text;
  sched_summary_t sum;
};

sched_report_t *report_new(const sched_t *s, const prog_program *p, int repeat, int jobs, bool keep) {
  sched_report_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->repeat = repeat;
  r->keep = keep;
  r->jobs = jobs;
  r->p = p;
  r->results = calloc((size_t)repeat * (size_t)jobs, sizeof *r->results);
  r->buffer_names = calloc(p->nbuffers ? p->nbuffers : 1, sizeof(char *));
  int nd = sched_device_count(s);
  r->device_names = calloc((size_t)(nd ? nd : 1), sizeof *r->device_names);
  if (!r->results || !r->buffer_names || !r->device_names) {
    free(r->results);
    free(r->buffer_names);
    free(r->device_names);
    free(r);
    return NULL;
  }
  r->nbuffers = p->nbuffers;
  for (uint32_t b = 0; b < p->nbuffers; b++) r->buffer_names[b] = xstrdup(p->buffers[b].name);
  r->sum.ndevices = nd;
  for (int d = 0; d < nd; d++) {
    snprintf(r->device_names[d], sizeof r->device_names[d], "%s", sched_device_name(s, d));
    snprintf(r->sum.devices[d].name, sizeof r->sum.devices[d].name, "%s", r->device_names[d]);
  }
  r->sum.runs = (uint32_t)repeat;
  return r;
}

static void add_failure(sched_report_t *r, char *text) {
  if (!text) return;
  if (r->nfailures == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 16;
    char **f = realloc(r->failures, cap * sizeof *f);
    if (!f) {
      free(text);
      return;
    }
    r->failures = f;
    r->cap = cap;
  }
  r->failures[r->nfailures++] = text;
}

bool report_add(sched_report_t *r, size_t index, msg_complete *c) {
  job_result *jr = &r->results[index];
  if (jr->seen) return false;
  jr->seen = true;
  jr->status = c->status;
  jr->device = c->device;
  jr->compile_ns = c->compile_ns;
  jr->record_ns = c->record_ns;
  jr->execute_ns = c->execute_ns;
  jr->counts = c->counts;
  int run = (int)(index / (size_t)r->jobs), job = (int)(index % (size_t)r->jobs);
  const char *dev = c->device >= 0 && c->device < r->sum.ndevices ? r->device_names[c->device] : "-";
  sched_summary_t *sm = &r->sum;
  sm->jobs++;
  sm->compile_ns += c->compile_ns;
  sm->record_ns += c->record_ns;
  sm->execute_ns += c->execute_ns;
  sm->nodes_created += c->counts.created;
  sm->nodes_updated += c->counts.updated;
  sm->nodes_reused += c->counts.reused;
  sm->cache_hits += c->cache_hits;
  sm->cache_misses += c->cache_misses;
  if (c->device >= 0 && c->device < sm->ndevices) {
    sched_device_stats_t *ds = &sm->devices[c->device];
    ds->jobs++;
    ds->nodes_created += c->counts.created;
    ds->nodes_updated += c->counts.updated;
    ds->nodes_reused += c->counts.reused;
    ds->busy_ns += c->execute_ns;
  }
  strbuf sb;
  sb_init(&sb);
  if (c->status != SCHED_OK) {
    sm->failed++;
    if (!r->first_error) {
      r->first_error = c->status;
      r->first_error_text = xstrdup(c->text);
    }
    sb_addf(&sb, "run %d, job %d, device %s: %s: %s", run, job, dev, sched_strerror(c->status), c->text);
    add_failure(r, sb_take(&sb));
    return true;
  }
  bool ok = true;
  for (size_t i = 0; i < c->outputs.n; i++) {
    const msg_output *o = &c->outputs.v[i];
    if (o->buffer >= r->nbuffers) continue;
    strbuf why;
    sb_init(&why);
    if (!prog_verify_buffer(r->p, o->buffer, o->data.data, o->data.len, &why)) {
      ok = false;
      sb_addf(&sb, "run %d, job %d, device %s: %s", run, job, dev, why.data ? why.data : "");
      add_failure(r, sb_take(&sb));
    }
    sb_free(&why);
  }
  if (ok) sm->verified++;
  else sm->failed++;
  jr->verified = ok;
  if (r->keep) {
    jr->outputs = c->outputs;
    memset(&c->outputs, 0, sizeof c->outputs);
  }
  return true;
}

void report_finish(sched_report_t *r, uint64_t wall_ns) {
  r->sum.wall_ns = wall_ns;
  r->p = NULL;
}

int report_status(const sched_report_t *r, sched_error_t *err) {
  if (r->first_error) return err_set(err, r->first_error, "%s", r->first_error_text ? r->first_error_text : "");
  if (r->nfailures)
    return err_set(err, SCHED_EVERIFY, "%s%s", r->failures[0],
                   r->nfailures > 1 ? " (and more; see the report)" : "");
  return SCHED_OK;
}

const sched_summary_t *sched_report_summary(const sched_report_t *r) { return r ? &r->sum : NULL; }
size_t sched_report_failure_count(const sched_report_t *r) { return r ? r->nfailures : 0; }
const char *sched_report_failure(const sched_report_t *r, size_t i) {
  return r && i < r->nfailures ? r->failures[i] : NULL;
}

static const job_result *result_at(const sched_report_t *r, int run, int job) {
  if (!r || run < 0 || job < 0 || run >= r->repeat || job >= r->jobs) return NULL;
  const job_result *jr = &r->results[(size_t)run * (size_t)r->jobs + (size_t)job];
  return jr->seen ? jr : NULL;
}

const void *sched_report_output(const sched_report_t *r, int run, int job, const char *buffer,
                                size_t *bytes) {
  const job_result *jr = result_at(r, run, job);
  if (bytes) *bytes = 0;
  if (!jr || !buffer) return NULL;
  for (size_t i = 0; i < jr->outputs.n; i++) {
    uint32_t b = jr->outputs.v[i].buffer;
    if (b < r->nbuffers && !strcmp(r->buffer_names[b], buffer)) {
      if (bytes) *bytes = jr->outputs.v[i].data.len;
      return jr->outputs.v[i].data.data;
    }
  }
  return NULL;
}

int sched_report_device(const sched_report_t *r, int run, int job) {
  const job_result *jr = result_at(r, run, job);
  return jr ? jr->device : -1;
}

int sched_report_job(const sched_report_t *r, int run, int job, sched_job_info_t *out) {
  const job_result *jr = result_at(r, run, job);
  if (!jr || !out) return SCHED_EINVAL;
  *out = (sched_job_info_t){jr->status,         jr->device,          jr->verified,       jr->compile_ns,
                            jr->record_ns,      jr->execute_ns,      jr->counts.created, jr->counts.updated,
                            jr->counts.reused};
  return SCHED_OK;
}

void sched_report_free(sched_report_t **pr) {
  if (!pr || !*pr) return;
  sched_report_t *r = *pr;
  size_t total = (size_t)r->repeat * (size_t)r->jobs;
  for (size_t i = 0; i < total; i++) {
    for (size_t k = 0; k < r->results[i].outputs.n; k++) free(r->results[i].outputs.v[k].data.data);
    free(r->results[i].outputs.v);
  }
  free(r->results);
  for (uint32_t b = 0; b < r->nbuffers; b++) free(r->buffer_names[b]);
  free(r->buffer_names);
  free(r->device_names);
  for (size_t i = 0; i < r->nfailures; i++) free(r->failures[i]);
  free(r->failures);
  free(r->first_error_text);
  free(r);
  *pr = NULL;
}
