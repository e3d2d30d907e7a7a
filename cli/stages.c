/*
 * sched-run on a stages config (docs/config.md, "Job graphs"): loads the
 * graph, submits it `repeat` times ($run = the repeat's index), waits for
 * every stage of every run and says how each went. Exit statuses as for a
 * program config: 0 every stage verified, 1 an expectation failed, 2 a bad
 * config, 3 a kernel did not compile, 4 another failure, 128 + the signal.
 * A stage that did not run because one before it failed follows from that
 * failure and decides nothing by itself.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interrupt.h"
#include "json_out.h"
#include "notes.h"
#include "schedrun.h"
#include "stages.h"

enum { EXIT_VERIFIED = 0, EXIT_MISMATCH = 1, EXIT_USAGE = 2, EXIT_COMPILE = 3, EXIT_OTHER = 4 };

typedef struct stage_result {
  int run;
  size_t node;
  schedrun_job_result_t *r;
} stage_result;

static int status_of(const stage_result *res, size_t n) {
  int st = EXIT_VERIFIED;
  for (size_t i = 0; i < n; i++) {
    int s = res[i].r ? schedrun_job_result_info(res[i].r)->status : SCHEDRUN_EINTERNAL;
    if (s == SCHEDRUN_ECOMPILE) return EXIT_COMPILE;
    if (s == SCHEDRUN_EVERIFY && st == EXIT_VERIFIED) st = EXIT_MISMATCH;
    else if (s != SCHEDRUN_OK && s != SCHEDRUN_EVERIFY && s != SCHEDRUN_EDEPEND) st = EXIT_OTHER;
  }
  return st;
}

static const char *sig_name(void) { return interrupt_signal() ? interrupt_name(interrupt_signal()) : NULL; }

/* The one --json object (cli/json_out.c), with a `stages` array: every
 * stage of every repeat. */
static void print_json(const char *path, const char *what, int status, const char *message, schedrun_t *s,
                       const schedrun_graph_t *g, const stage_result *res, size_t n) {
  json_object *stages = json_object_new_array(), *failures = json_object_new_array();
  for (size_t i = 0; i < n; i++) {
    json_object *st = json_object_new_object();
    const schedrun_job_info_t *in = res[i].r ? schedrun_job_result_info(res[i].r) : NULL;
    json_object_object_add(st, "stage", json_object_new_string(schedrun_graph_node_name(g, res[i].node)));
    json_object_object_add(st, "run", json_object_new_int(res[i].run));
    if (in) {
      json_object_object_add(st, "status", json_object_new_string(in->status ? schedrun_strerror(in->status) : "ok"));
      json_object_object_add(st, "verified", json_object_new_boolean(in->verified));
      if (in->device >= 0)
        json_object_object_add(st, "device", json_object_new_string(schedrun_device_name(s, in->device)));
      json_object_object_add(st, "execute_ms", json_object_new_double((double)in->execute_ns / 1e6));
      json_object_object_add(st, "handoffs_local", json_object_new_int((int)in->handoffs_local));
      json_object_object_add(st, "handoffs_copied", json_object_new_int((int)in->handoffs_copied));
      json_object_object_add(st, "handoffs_peer", json_object_new_int((int)in->handoffs_peer));
      json_object_object_add(st, "bytes_in", json_object_new_int64((int64_t)in->bytes_in));
      json_object_object_add(st, "bytes_out", json_object_new_int64((int64_t)in->bytes_out));
      json_object_object_add(st, "bytes_peer", json_object_new_int64((int64_t)in->bytes_peer));
      if (*schedrun_job_result_error(res[i].r))
        json_object_object_add(st, "error", json_object_new_string(schedrun_job_result_error(res[i].r)));
    }
    json_object_array_add(stages, st);
    if (in && in->status != SCHEDRUN_OK) {
      char line[2048];
      snprintf(line, sizeof line, "stage '%s' (run %d): %s: %s", schedrun_graph_node_name(g, res[i].node), res[i].run,
               schedrun_strerror(in->status), schedrun_job_result_error(res[i].r));
      json_object_array_add(failures, json_object_new_string(line));
    }
  }
  cli_outcome oc = {status, what, path, sig_name(), message, s, NULL, NULL, NULL,
                    g ? schedrun_graph_name(g) : NULL, stages, failures};
  json_print_outcome(&oc);
}

int stages_run(const char *path, const stages_opts *o) {
  schedrun_error_t err = {0};
  schedrun_graph_t *g = NULL;
  int rc = schedrun_graph_load_file(path, &g, &err);
  if (rc != SCHEDRUN_OK) {
    fprintf(stderr, "%s\n", err.message);
    int st = rc == SCHEDRUN_ENOMEM ? EXIT_OTHER : EXIT_USAGE;
    if (o->json) print_json(path, st == EXIT_USAGE ? "config-error" : "failed", st, err.message, NULL, NULL, NULL, 0);
    schedrun_error_clear(&err);
    return st;
  }
  schedrun_options_t opts;
  schedrun_options_init(&opts);
  opts.devices = o->devices ? o->devices : schedrun_graph_devices(g) ? schedrun_graph_devices(g) : "auto";
  opts.no_disk_cache = o->no_cache;
  opts.retune = o->retune;
  opts.compile_timeout_ms = o->compile_timeout_s * 1000;
  schedrun_t *s = NULL;
  if ((rc = schedrun_open(&s, &opts, &err)) != SCHEDRUN_OK) {
    fprintf(stderr, "sched-run: %s\n", err.message);
    int st = rc == SCHEDRUN_EINVAL ? EXIT_USAGE : EXIT_OTHER;
    if (o->json) print_json(path, st == EXIT_USAGE ? "usage-error" : "failed", st, err.message, NULL, g, NULL, 0);
    schedrun_error_clear(&err);
    schedrun_graph_free(&g);
    return st;
  }
  interrupt_watch(s);
  note_opened(s, o->no_cache, o->quiet || o->json);
  int repeat = o->repeat ? o->repeat : schedrun_graph_repeat(g);
  size_t nodes = schedrun_graph_size(g), n = (size_t)repeat * nodes;
  schedrun_job_t *ids = calloc(n, sizeof *ids);
  stage_result *res = calloc(n, sizeof *res);
  int status = EXIT_VERIFIED;
  const char *message = NULL;
  size_t submitted = 0;
  if (!ids || !res) {
    status = EXIT_OTHER;
    message = "out of memory";
  }
  /* --timeout bounds the whole run: every job's deadline, so that one still
   * running then fails (its device lost) as in a program config's run */
  schedrun_graph_set_timeout(g, interrupt_left_ms()); /* loading took some */
  for (int r = 0; status == EXIT_VERIFIED && r < repeat; r++) {
    schedrun_graph_set_run(g, r);
    if ((rc = schedrun_graph_submit(s, g, &ids[submitted], &err)) != SCHEDRUN_OK) {
      status = rc == SCHEDRUN_EINVAL ? EXIT_USAGE : EXIT_OTHER;
      message = err.message;
      break;
    }
    for (size_t k = 0; k < nodes; k++) res[submitted + k] = (stage_result){r, k, NULL};
    submitted += nodes;
  }
  if (message) fprintf(stderr, "sched-run: %s\n", message);
  if (o->dot) {
    interrupt_phase("writing --dot", 0);
    schedrun_error_t ferr = {0};
    if (schedrun_graph_write_dot(g, o->dot, &ferr) != SCHEDRUN_OK) {
      fprintf(stderr, "sched-run: --dot: %s\n", ferr.message);
      if (status == EXIT_VERIFIED) status = EXIT_OTHER;
    }
    schedrun_error_clear(&ferr);
  }
  for (size_t i = 0; i < submitted; i++) schedrun_wait(s, ids[i], -1, &res[i].r, NULL); /* each ends by its deadline */
  int sig = interrupt_signal();
  if (status == EXIT_VERIFIED) status = sig ? 128 + sig : status_of(res, submitted);
  size_t verified = 0;
  for (size_t i = 0; i < submitted; i++)
    verified += res[i].r && schedrun_job_result_info(res[i].r)->status == SCHEDRUN_OK;
  if (sig)
    fprintf(stderr, "sched-run: interrupted by %s: %zu of %zu stage runs finished and verified\n", interrupt_name(sig),
            verified, submitted);
  for (size_t i = 0; i < submitted; i++) {
    const schedrun_job_info_t *in = res[i].r ? schedrun_job_result_info(res[i].r) : NULL;
    if (in && in->status != SCHEDRUN_OK && !o->json)
      fprintf(stderr, "sched-run: stage '%s' (run %d): %s: %s\n", schedrun_graph_node_name(g, res[i].node), res[i].run,
              schedrun_strerror(in->status), schedrun_job_result_error(res[i].r));
  }
  const char *name = schedrun_graph_name(g) ? schedrun_graph_name(g) : path;
  if (o->json) {
    const char *what = sig                       ? "interrupted"
                       : status == EXIT_VERIFIED ? "verified"
                       : status == EXIT_MISMATCH ? "not-verified"
                       : status == EXIT_COMPILE  ? "compile-error"
                       : status == EXIT_USAGE    ? "usage-error"
                                                 : "failed";
    print_json(path, what, status, message, s, g, res, submitted);
  } else if (!o->quiet && submitted) {
    printf("%s: %s on %d device%s (%s%s)\n", name,
           sig ? "INTERRUPTED" : status == EXIT_VERIFIED ? "verified" : "NOT verified", schedrun_device_count(s),
           schedrun_device_count(s) == 1 ? "" : "s", schedrun_device_name(s, 0), schedrun_device_count(s) > 1 ? ", ..." : "");
    printf("  %d run%s of %zu stages: %zu jobs, %zu verified, %zu failed\n", repeat, repeat == 1 ? "" : "s", nodes,
           submitted, verified, submitted - verified);
    for (size_t i = 0; i < submitted; i++) {
      const schedrun_job_info_t *in = res[i].r ? schedrun_job_result_info(res[i].r) : NULL;
      if (!in) continue;
      printf("  %-16s run %-3d %-8s %-20s execute %.3f ms, hand-offs: %u on the device, %u from a peer, %u copied\n",
             schedrun_graph_node_name(g, res[i].node), res[i].run,
             in->device >= 0 ? schedrun_device_name(s, in->device) : "host",
             in->status == SCHEDRUN_OK ? "verified" : schedrun_strerror(in->status), (double)in->execute_ns / 1e6,
             in->handoffs_local, in->handoffs_peer, in->handoffs_copied);
    }
  }
  for (size_t i = 0; res && i < submitted; i++) schedrun_job_result_free(&res[i].r);
  free(res);
  free(ids);
  schedrun_error_clear(&err);
  interrupt_watch(NULL);
  schedrun_close(&s);
  schedrun_graph_free(&g);
  return status;
}
