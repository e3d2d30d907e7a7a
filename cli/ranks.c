/* See ranks.h. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interrupt.h"
#include "ranks.h"
#include "schedrun_mpi.h"

enum { SHARE_DEVICES = 256 };

/* What rank 0 tells the others before they open. */
typedef struct share {
  int32_t status; /* non-zero: the config did not load; stop with this status */
  int32_t no_cache;
  int32_t compile_timeout_ms;
  char devices[SHARE_DEVICES];
} share;

int ranks_handover(char **argv) {
  (void)argv;
  return 0; /* this is the program that runs across ranks */
}

/* A serving rank's own standard error, kept for what only it can say (rank
 * 0 lost: rank 0 cannot say so itself). */
static int serving_stderr = -1;

void ranks_silence_others(void) {
  const char *rank = ranks_launcher_rank();
  if (!rank || atoi(rank) == 0) return;
  int null = open("/dev/null", O_WRONLY);
  if (null < 0) return;
  serving_stderr = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  dup2(null, STDOUT_FILENO);
  dup2(null, STDERR_FILENO);
  close(null);
}

int ranks_start(cli_ranks *r) {
  memset(r, 0, sizeof *r);
  r->size = 1;
  if (!ranks_launcher_rank()) return ranks_refuse_singleton(RANKS_NOT_A_RANK);
  int provided = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "sched-run: MPI did not start\n");
    return 4;
  }
  r->active = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r->size);
  return 0;
}

void ranks_share(cli_ranks *r, int status, const char *devices, int no_cache, int compile_timeout_ms) {
  if (!r->active) return;
  share sh;
  memset(&sh, 0, sizeof sh);
  sh.status = status;
  sh.no_cache = no_cache;
  sh.compile_timeout_ms = compile_timeout_ms;
  snprintf(sh.devices, sizeof sh.devices, "%s", devices ? devices : "");
  MPI_Bcast(&sh, (int)sizeof sh, MPI_BYTE, 0, MPI_COMM_WORLD);
}

/* A serving rank's exit status: rank 0 reports the run's own outcome. */
static int exit_for(int rc) {
  return rc == SCHEDRUN_OK || rc == SCHEDRUN_ECLOSED ? 0 : rc == SCHEDRUN_EINVAL || rc == SCHEDRUN_ECONFIG ? 2 : 4;
}

int ranks_serve(cli_ranks *r) {
  /* a serving rank has no summary to write: a first signal ends it at once
   * (the launcher then ends the others, rank 0 saying why) */
  interrupt_phase("serving rank 0's jobs", 1);
  share sh;
  memset(&sh, 0, sizeof sh);
  MPI_Bcast(&sh, (int)sizeof sh, MPI_BYTE, 0, MPI_COMM_WORLD);
  sh.devices[SHARE_DEVICES - 1] = '\0';
  if (sh.status != 0) {
    MPI_Finalize();
    return sh.status;
  }
  schedrun_options_t opts;
  schedrun_options_init(&opts);
  opts.devices = sh.devices;
  opts.no_disk_cache = sh.no_cache;
  opts.compile_timeout_ms = sh.compile_timeout_ms;
  schedrun_error_t err = {0};
  int rc = schedrun_mpi_open(&r->m, MPI_COMM_WORLD, &opts, NULL, &err);
  r->open_failed = rc != SCHEDRUN_OK;
  if (rc == SCHEDRUN_OK) {
    schedrun_report_t *rep = NULL;
    rc = schedrun_mpi_run(r->m, NULL, NULL, &rep, &err);
  }
  if (rc != SCHEDRUN_OK && rc != SCHEDRUN_ECLOSED && serving_stderr >= 0) {
    /* rank 0 stopped or gone: Open MPI's text says only that a rank ended */
    dprintf(serving_stderr, "sched-run: rank %d: %s\n", r->rank, err.message ? err.message : schedrun_strerror(rc));
  }
  schedrun_error_clear(&err);
  schedrun_t *none = NULL;
  return ranks_end(r, &none, exit_for(rc));
}

int ranks_open(cli_ranks *r, const schedrun_options_t *o, schedrun_t **s, schedrun_error_t *err) {
  if (!r->active) return schedrun_open(s, o, err);
  schedrun_mpi_options_t mo;
  schedrun_mpi_options_init(&mo);
  mo.batch = r->batch;
  int rc = schedrun_mpi_open(&r->m, MPI_COMM_WORLD, o, &mo, err);
  r->open_failed = rc != SCHEDRUN_OK;
  *s = rc == SCHEDRUN_OK ? schedrun_mpi_local(r->m) : NULL;
  return rc;
}

int ranks_run(cli_ranks *r, schedrun_t *s, schedrun_program_t *p, const schedrun_run_options_t *ro,
              schedrun_report_t **rep, schedrun_error_t *err) {
  if (!r->active) return schedrun_run(s, p, ro, rep, err);
  return schedrun_mpi_run(r->m, p, ro, rep, err);
}

void ranks_print(const cli_ranks *r, FILE *f) {
  if (!r->active || !r->m) return;
  for (int q = 0; q < r->size; q++) {
    schedrun_mpi_rank_info_t info;
    if (schedrun_mpi_rank_info(r->m, q, &info) != SCHEDRUN_OK) continue;
    fprintf(f, "  rank %-3d %s: %d device%s, %llu jobs, %llu kernels compiled, %llu taken from another rank%s%s\n", q,
            info.host, info.ndevices, info.ndevices == 1 ? "" : "s", (unsigned long long)info.jobs,
            (unsigned long long)info.kernels_compiled, (unsigned long long)info.artifacts_received,
            info.lost ? "; LOST: " : "", info.lost ? info.lost_why : "");
  }
}

json_object *ranks_json(const cli_ranks *r, const schedrun_report_t *rep) {
  if (!r->active || !r->m) return NULL;
  const schedrun_summary_t *sum = schedrun_report_summary(rep);
  json_object *a = json_object_new_array();
  for (int q = 0; q < r->size; q++) {
    schedrun_mpi_rank_info_t info;
    if (schedrun_mpi_rank_info(r->m, q, &info) != SCHEDRUN_OK) continue;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "rank", json_object_new_int(q));
    json_object_object_add(o, "host", json_object_new_string(info.host));
    json_object_object_add(o, "target", json_object_new_string(info.target));
    json_object *devs = json_object_new_array();
    for (int d = 0; d < info.ndevices; d++) {
      int g = info.first_device + d;
      json_object_array_add(devs, sum && g < sum->ndevices ? json_object_new_string(sum->devices[g].name)
                                                           : json_object_new_int(g));
    }
    json_object_object_add(o, "devices", devs);
    json_object_object_add(o, "jobs", json_object_new_int64((int64_t)info.jobs));
    json_object_object_add(o, "kernels_compiled", json_object_new_int64((int64_t)info.kernels_compiled));
    json_object_object_add(o, "artifacts_received", json_object_new_int64((int64_t)info.artifacts_received));
    json_object_object_add(o, "lost", info.lost ? json_object_new_string(info.lost_why) : NULL);
    json_object_array_add(a, o);
  }
  return a;
}

int ranks_end(cli_ranks *r, schedrun_t **s, int status) {
  if (!r->active) {
    schedrun_close(s);
    return status;
  }
  int lost = schedrun_mpi_lost(r->m);
  schedrun_mpi_close(&r->m);
  *s = NULL;
  /* MPI cannot finish with a rank gone, or with ranks that did not all open
   * (MPI_Finalize would wait for the missing one) */
  if (lost || r->open_failed) MPI_Abort(MPI_COMM_WORLD, status ? status : 4);
  MPI_Finalize();
  return status;
}
