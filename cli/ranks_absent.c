/* ranks.h for sched-run itself: one process, as always; started by an MPI
 * launcher, it hands over to sched-run-mpi, an internal program found beside
 * sched-run in a build tree and in SCHEDRUN_CLI_LIBEXEC (relative to
 * sched-run's directory) once installed. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"

int ranks_handover(char **argv) {
  if (!ranks_launcher_rank()) return 0;
#ifdef SCHEDRUN_CLI_HANDOVER
  char self[PATH_MAX], mpi[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(mpi, sizeof mpi, "%s/sched-run-mpi", self); /* a build tree */
    if (access(mpi, X_OK) != 0) snprintf(mpi, sizeof mpi, "%s/%s/sched-run-mpi", self, SCHEDRUN_CLI_LIBEXEC);
    execv(mpi, argv); /* returns only when it could not */
    fprintf(stderr, "sched-run: started by an MPI launcher, but %s cannot run: %s\n", mpi, strerror(errno));
  } else {
    fprintf(stderr, "sched-run: started by an MPI launcher, but its own path is unknown: %s\n", strerror(errno));
  }
  return 4;
#else
  (void)argv;
  fprintf(stderr, "sched-run: started by an MPI launcher, but built without MPI (rebuild where Open MPI or MPICH "
                  "is installed)\n");
  return 2;
#endif
}

void ranks_silence_others(void) {}

int ranks_start(cli_ranks *r) {
  memset(r, 0, sizeof *r);
  r->size = 1;
#ifdef SCHEDRUN_CLI_HANDOVER
  return ranks_refuse_singleton(RANKS_NOT_A_RANK);
#else
  return ranks_refuse_singleton("this sched-run was built without MPI");
#endif
}

void ranks_share(cli_ranks *r, int status, const char *devices, int no_cache, int compile_timeout_ms) {
  (void)r, (void)status, (void)devices, (void)no_cache, (void)compile_timeout_ms;
}

int ranks_serve(cli_ranks *r) {
  (void)r;
  return 0; /* never called: without MPI there is only rank 0 */
}

int ranks_open(cli_ranks *r, const schedrun_options_t *o, schedrun_t **s, schedrun_error_t *err) {
  (void)r;
  return schedrun_open(s, o, err);
}

int ranks_run(cli_ranks *r, schedrun_t *s, schedrun_program_t *p, const schedrun_run_options_t *ro,
              schedrun_report_t **rep, schedrun_error_t *err) {
  (void)r;
  return schedrun_run(s, p, ro, rep, err);
}

void ranks_print(const cli_ranks *r, FILE *f) { (void)r, (void)f; }

json_object *ranks_json(const cli_ranks *r, const schedrun_report_t *rep) {
  (void)r, (void)rep;
  return NULL;
}

int ranks_end(cli_ranks *r, schedrun_t **s, int status) {
  (void)r;
  schedrun_close(s);
  return status;
}
