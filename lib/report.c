/* See report.h. Also the JSON summary and the Chrome trace writer. */
#include <stdio.h>
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "lib/api.h"
#include "lib/report.h"

typedef struct job_entry {
  bool seen;
  schedrun_job_info_t info;
  uint64_t t_submit, t_compile, t_record, t_execute, t_done;
  msg_u64s launches;   /* timed nodes, for the first jobs of each device */
  msg_outputs outputs; /* kept outputs */
  char **names;
} job_entry;

struct schedrun_report {
  int repeat, jobs;
  bool keep;
  char *name;
  char (*device_names)[32];
  job_entry *entries;
  char **failures;
  size_t nfailures, cap;
  int first_error;
  char *first_error_text;
  schedrun_summary_t sum;
  const gpu_backend *backend;
  report_buffer *buffers;
  size_t nbuffers;
  char **commands; /* what each command (step) is, for the trace's launch spans */
  uint32_t ncommands;
  gpu_counters at_start[SCHEDRUN_MAX_DEVICES]; /* counters are reported as growth over the run */
  int nlocal; /* devices of this process; those after them are other processes' */
  /* jobs unstarted_from .. the last never started (unstarted_status, not 0):
   * they have no entry written, so that millions of them cost nothing */
  size_t unstarted_from;
  int unstarted_status;
};

static size_t total_jobs(const schedrun_report_t *r) { return (size_t)r->repeat * (size_t)r->jobs; }

static bool unstarted(const schedrun_report_t *r, size_t i) {
  return r->unstarted_status != 0 && i >= r->unstarted_from;
}

schedrun_report_t *report_new(const schedrun_t *s, const prog_program *p, int repeat, int jobs, bool keep) {
  schedrun_report_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->repeat = repeat;
  r->jobs = jobs;
  r->keep = keep;
  r->name = xstrdup(p->name);
  r->entries = calloc((size_t)repeat * (size_t)jobs, sizeof *r->entries);
  int nd = schedrun_device_count(s);
  r->device_names = calloc(SCHEDRUN_MAX_DEVICES, sizeof *r->device_names);
  if (!r->entries || !r->device_names || !r->name) {
    free(r->entries);
    free(r->device_names);
    free(r->name);
    free(r);
    return NULL;
  }
  r->sum.ndevices = nd;
  r->nlocal = nd;
  r->buffers = calloc(p->nbuffers ? p->nbuffers : 1, sizeof *r->buffers);
  for (uint32_t b = 0; r->buffers && b < p->nbuffers; b++) {
    report_buffer *rb = &r->buffers[r->nbuffers];
    rb->name = xstrdup(p->buffers[b].name);
    if (!rb->name) break;
    rb->type = p->buffers[b].type;
    rb->count = p->buffers[b].count;
    rb->ndims = p->buffers[b].ndims;
    memcpy(rb->dims, p->buffers[b].dims, sizeof rb->dims);
    rb->output = p->buffers[b].output;
    for (uint32_t e = 0; e < p->nexpects; e++) rb->expected |= p->expects[e].buffer == b;
    r->nbuffers++;
  }
  r->commands = calloc(p->ncommands ? p->ncommands : 1, sizeof *r->commands);
  for (uint32_t c = 0; r->commands && c < p->ncommands && c < 4096; c++) {
    char what[256];
    prog_describe_command(p, c, what, sizeof what);
    r->commands[c] = xstrdup(what);
    r->ncommands = c + 1;
  }
  r->backend = s->core.backend;
  for (int d = 0; d < nd; d++) r->backend->ops->counters(r->backend, d, &r->at_start[d]);
  for (int d = 0; d < nd; d++) {
    snprintf(r->device_names[d], sizeof r->device_names[d], "%s", schedrun_device_name(s, d));
    snprintf(r->sum.devices[d].name, sizeof r->sum.devices[d].name, "%s", r->device_names[d]);
  }
  r->sum.runs = (uint32_t)repeat;
  return r;
}

static void add_failure(schedrun_report_t *r, char *text) {
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

bool report_add(schedrun_report_t *r, size_t index, schedrun_job_result_t *res) {
  assert(index < total_jobs(r) && !unstarted(r, index)); /* a job that never started has no result */
  job_entry *e = &r->entries[index];
  if (e->seen) {
    schedrun_job_result_free(&res);
    return false;
  }
  e->seen = true;
  e->info = res->info;
  e->t_submit = res->t_submit;
  e->t_compile = res->t_compile;
  e->t_record = res->t_record;
  e->t_execute = res->t_execute;
  e->t_done = res->t_done;
  e->launches = res->launches;
  memset(&res->launches, 0, sizeof res->launches);
  const schedrun_job_info_t *c = &res->info;
  int run = (int)(index / (size_t)r->jobs), job = (int)(index % (size_t)r->jobs);
  const char *dev = c->device >= 0 && c->device < r->sum.ndevices ? r->device_names[c->device] : "-";
  schedrun_summary_t *sm = &r->sum;
  sm->jobs++;
  sm->compile_ns += c->compile_ns;
  sm->record_ns += c->record_ns;
  sm->execute_ns += c->execute_ns;
  sm->nodes_created += c->nodes_created;
  sm->nodes_updated += c->nodes_updated;
  sm->nodes_reused += c->nodes_reused;
  sm->cache_hits += res->cache_hits;
  sm->cache_misses += res->cache_misses;
  if (c->device >= 0 && c->device < sm->ndevices) {
    schedrun_device_stats_t *ds = &sm->devices[c->device];
    ds->jobs++;
    ds->nodes_created += c->nodes_created;
    ds->nodes_updated += c->nodes_updated;
    ds->nodes_reused += c->nodes_reused;
    ds->busy_ns += c->execute_ns;
    ds->bytes_in += c->bytes_in;
    ds->bytes_out += c->bytes_out;
    ds->bytes_peer += c->bytes_peer;
  }
  strbuf sb;
  sb_init(&sb);
  if (c->status == SCHEDRUN_OK) {
    sm->verified++;
  } else {
    sm->failed++;
    if (c->status == SCHEDRUN_EVERIFY) {
      sb_addf(&sb, "run %d, job %d, device %s: %s", run, job, dev, res->error ? res->error : "");
    } else {
      if (!r->first_error) {
        r->first_error = c->status;
        r->first_error_text = xstrdup(res->error);
      }
      sb_addf(&sb, "run %d, job %d, device %s: %s: %s", run, job, dev, schedrun_strerror(c->status),
              res->error ? res->error : "");
    }
    add_failure(r, sb_take(&sb));
  }
  if (r->keep) {
    e->outputs = res->outputs;
    e->names = res->names;
    memset(&res->outputs, 0, sizeof res->outputs);
    res->names = NULL;
  }
  schedrun_job_result_free(&res);
  return true;
}

void report_not_started(schedrun_report_t *r, size_t first, int status, const char *why) {
  assert(status != SCHEDRUN_OK && first < total_jobs(r) && r->unstarted_status == 0);
  size_t added = total_jobs(r) - first;
  r->unstarted_from = first;
  r->unstarted_status = status;
  r->sum.jobs += (uint32_t)added;
  r->sum.failed += (uint32_t)added;
  if (!r->first_error) {
    r->first_error = status;
    r->first_error_text = xstrdup(why);
  }
  strbuf sb;
  sb_init(&sb);
  size_t last = total_jobs(r) - 1;
  int r0 = (int)(first / (size_t)r->jobs), j0 = (int)(first % (size_t)r->jobs);
  int r1 = (int)(last / (size_t)r->jobs), j1 = (int)(last % (size_t)r->jobs);
  if (added == 1) sb_addf(&sb, "run %d, job %d, device -: %s: %s", r0, j0, schedrun_strerror(status), why);
  else
    sb_addf(&sb, "%zu jobs, run %d, job %d to run %d, job %d, device -: %s: %s", added, r0, j0, r1, j1,
            schedrun_strerror(status), why);
  add_failure(r, sb_take(&sb));
}

void report_finish(schedrun_report_t *r, uint64_t wall_ns) {
  r->sum.wall_ns = wall_ns;
  for (int d = 0; d < r->nlocal; d++) {
    gpu_counters c = {0};
    r->backend->ops->counters(r->backend, d, &c);
    schedrun_device_stats_t *ds = &r->sum.devices[d];
    ds->launches = c.launches - r->at_start[d].launches;
    ds->loop_syncs = c.host_trips - r->at_start[d].host_trips;
    ds->batches_beside = c.beside - r->at_start[d].beside;
    snprintf(ds->loops, sizeof ds->loops, "%s", c.loops);
  }
}

int report_add_device(schedrun_report_t *r, const char *name) {
  if (r->sum.ndevices >= SCHEDRUN_MAX_DEVICES) return -1;
  int d = r->sum.ndevices++;
  report_rename_device(r, d, name);
  return d;
}

void report_rename_device(schedrun_report_t *r, int d, const char *name) {
  assert(d >= 0 && d < r->sum.ndevices);
  snprintf(r->device_names[d], sizeof r->device_names[d], "%s", name);
  snprintf(r->sum.devices[d].name, sizeof r->sum.devices[d].name, "%s", name);
}

void report_device_counters(schedrun_report_t *r, int d, uint64_t launches, uint64_t loop_syncs, uint64_t beside,
                            const char *loops) {
  assert(d >= r->nlocal && d < r->sum.ndevices); /* this process's come from its backend */
  schedrun_device_stats_t *ds = &r->sum.devices[d];
  ds->launches = launches;
  ds->loop_syncs = loop_syncs;
  ds->batches_beside = beside;
  snprintf(ds->loops, sizeof ds->loops, "%s", loops ? loops : "");
}

int report_status(const schedrun_report_t *r, schedrun_error_t *err) {
  if (r->first_error) return err_set(err, r->first_error, "%s", r->first_error_text ? r->first_error_text : "");
  if (r->nfailures)
    return err_set(err, SCHEDRUN_EVERIFY, "%s%s", r->failures[0], r->nfailures > 1 ? " (and more; see the report)" : "");
  return SCHEDRUN_OK;
}

const schedrun_summary_t *schedrun_report_summary(const schedrun_report_t *r) { return r ? &r->sum : NULL; }
size_t schedrun_report_failure_count(const schedrun_report_t *r) { return r ? r->nfailures : 0; }
const char *schedrun_report_failure(const schedrun_report_t *r, size_t i) {
  return r && i < r->nfailures ? r->failures[i] : NULL;
}

/* Job (run, job)'s index in the report, or false when there is no such job. */
static bool index_of(const schedrun_report_t *r, int run, int job, size_t *i) {
  if (!r || run < 0 || job < 0 || run >= r->repeat || job >= r->jobs) return false;
  *i = (size_t)run * (size_t)r->jobs + (size_t)job;
  return true;
}

static const job_entry *entry_at(const schedrun_report_t *r, int run, int job) {
  size_t i;
  return index_of(r, run, job, &i) && !unstarted(r, i) && r->entries[i].seen ? &r->entries[i] : NULL;
}

const void *schedrun_report_output(const schedrun_report_t *r, int run, int job, const char *buffer, size_t *bytes) {
  const job_entry *e = entry_at(r, run, job);
  if (bytes) *bytes = 0;
  if (!e || !buffer) return NULL;
  for (size_t i = 0; i < e->outputs.n; i++)
    if (e->names[i] && !strcmp(e->names[i], buffer)) {
      if (bytes) *bytes = e->outputs.v[i].data.len;
      return e->outputs.v[i].data.data;
    }
  return NULL;
}

int schedrun_report_device(const schedrun_report_t *r, int run, int job) {
  const job_entry *e = entry_at(r, run, job);
  return e ? e->info.device : -1;
}

int schedrun_report_job(const schedrun_report_t *r, int run, int job, schedrun_job_info_t *out) {
  if (!out) return SCHEDRUN_EINVAL;
  const job_entry *e = entry_at(r, run, job);
  if (e) {
    *out = e->info;
    return SCHEDRUN_OK;
  }
  size_t i;
  if (index_of(r, run, job, &i) && unstarted(r, i)) {
    *out = (schedrun_job_info_t){.status = r->unstarted_status, .device = -1, .run = run, .job = job};
    return SCHEDRUN_OK;
  }
  return SCHEDRUN_EINVAL;
}

/* ---- JSON ---- */

char *schedrun_report_json(const schedrun_report_t *r) {
  if (!r) return NULL;
  const schedrun_summary_t *s = &r->sum;
  strbuf sb;
  sb_init(&sb);
  /* the keys and meanings of sched-run --json (docs/config.md, "The JSON
   * report"), which prints this object with the command's own keys added */
  sb_addf(&sb, "{\"schema\": %d, \"program\": ", SCHEDRUN_REPORT_SCHEMA);
  sb_add_json(&sb, r->name);
  sb_addf(&sb,
          ", \"verified\": %s, \"runs\": %u, \"jobs\": %u, \"jobs_verified\": %u, \"jobs_failed\": %u, "
          "\"compile_ms_sum\": %.3f, \"record_ms_sum\": %.3f, \"execute_ms_sum\": %.3f, \"wall_ms\": %.3f, "
          "\"cache_hits\": %llu, \"cache_misses\": %llu, \"nodes_created\": %llu, \"nodes_updated\": %llu, "
          "\"nodes_reused\": %llu, \"devices\": [",
          s->failed == 0 && s->jobs == (uint32_t)(r->repeat * r->jobs) ? "true" : "false", s->runs, s->jobs,
          s->verified, s->failed, s->compile_ns / 1e6, s->record_ns / 1e6, s->execute_ns / 1e6, s->wall_ns / 1e6,
          (unsigned long long)s->cache_hits, (unsigned long long)s->cache_misses,
          (unsigned long long)s->nodes_created, (unsigned long long)s->nodes_updated,
          (unsigned long long)s->nodes_reused);
  for (int d = 0; d < s->ndevices; d++) {
    const schedrun_device_stats_t *ds = &s->devices[d];
    sb_addf(&sb, "%s{\"name\": ", d ? ", " : "");
    sb_add_json(&sb, ds->name);
    sb_addf(&sb,
            ", \"jobs\": %llu, \"nodes_created\": %llu, \"nodes_updated\": %llu, \"nodes_reused\": %llu, "
            "\"busy_ms\": %.3f, \"launches\": %llu, \"loop_syncs\": %llu, \"bytes_in\": %llu, "
            "\"bytes_out\": %llu, \"bytes_peer\": %llu, \"batches_beside\": %llu, \"loops\": ",
            (unsigned long long)ds->jobs, (unsigned long long)ds->nodes_created,
            (unsigned long long)ds->nodes_updated, (unsigned long long)ds->nodes_reused, ds->busy_ns / 1e6,
            (unsigned long long)ds->launches, (unsigned long long)ds->loop_syncs, (unsigned long long)ds->bytes_in,
            (unsigned long long)ds->bytes_out, (unsigned long long)ds->bytes_peer,
            (unsigned long long)ds->batches_beside);
    sb_add_json(&sb, ds->loops);
    sb_adds(&sb, "}");
  }
  sb_adds(&sb, "], \"failures\": [");
  for (size_t i = 0; i < r->nfailures; i++) {
    if (i) sb_adds(&sb, ", ");
    sb_add_json(&sb, r->failures[i]);
  }
  sb_adds(&sb, "]}");
  /* the caller frees it with the C library's free() (common/alloc.h) */
  char *text = sb.failed ? NULL : sys_strdup(sb.data);
  sb_free(&sb);
  return text;
}

/* ---- Chrome trace ---- */

void schedrun_report_free(schedrun_report_t **pr) {
  if (!pr || !*pr) return;
  schedrun_report_t *r = *pr;
  /* the jobs that never started have no entry written: their pages of
   * the array were never touched, and are not now */
  size_t filed = r->unstarted_status ? r->unstarted_from : total_jobs(r);
  for (size_t i = 0; i < filed; i++) {
    for (size_t k = 0; k < r->entries[i].outputs.n; k++) {
      msg_bytes_free(r->entries[i].outputs.v[k].data.data, r->entries[i].outputs.v[k].data.len);
      free(r->entries[i].names[k]);
    }
    free(r->entries[i].outputs.v);
    free(r->entries[i].names);
    free(r->entries[i].launches.v);
  }
  free(r->entries);
  free(r->device_names);
  for (size_t i = 0; i < r->nfailures; i++) free(r->failures[i]);
  free(r->failures);
  free(r->first_error_text);
  free(r->name);
  for (size_t b = 0; b < r->nbuffers; b++) free(r->buffers[b].name);
  free(r->buffers);
  for (uint32_t c = 0; c < r->ncommands; c++) free(r->commands[c]);
  free(r->commands);
  free(r);
  *pr = NULL;
}

const report_buffer *report_buffers(const schedrun_report_t *r, size_t *n) {
  *n = r->nbuffers;
  return r->buffers;
}

void report_shape(const schedrun_report_t *r, int *repeat, int *jobs) {
  *repeat = r->repeat;
  *jobs = r->jobs;
}

bool report_timeline(const schedrun_report_t *r, size_t i, report_times *out) {
  if (i >= total_jobs(r) || unstarted(r, i) || !r->entries[i].seen) return false;
  const job_entry *e = &r->entries[i];
  *out = (report_times){(int)(i / (size_t)r->jobs), (int)(i % (size_t)r->jobs), e->info.device,
                        e->t_submit, e->t_compile, e->info.compile_ns, e->t_record, e->info.record_ns,
                        e->t_execute, e->info.execute_ns, e->t_done};
  return true;
}

const char *report_name(const schedrun_report_t *r) { return r->name; }

const char *report_device_name(const schedrun_report_t *r, int d) {
  return d >= 0 && d < r->sum.ndevices ? r->device_names[d] : "-";
}

const uint64_t *report_launches(const schedrun_report_t *r, size_t i, size_t *n) {
  *n = 0;
  if (i >= total_jobs(r) || unstarted(r, i) || !r->entries[i].seen) return NULL;
  *n = r->entries[i].launches.n / 3;
  return r->entries[i].launches.v;
}

const char *report_command(const schedrun_report_t *r, uint64_t tag) {
  return tag < r->ncommands && r->commands[tag] ? r->commands[tag] : "a step";
}
