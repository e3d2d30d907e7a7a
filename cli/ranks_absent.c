/* ranks.h for a sched-run built without MPI: one process, as always. */
#include <stdlib.h>
#include <string.h>

#include "ranks.h"

void ranks_silence_others(void) {}

int ranks_start(cli_ranks *r) {
  memset(r, 0, sizeof *r);
  r->size = 1;
  return ranks_refuse_singleton("this sched-run was built without MPI");
}

void ranks_share(cli_ranks *r, int status, const char *devices, int no_cache) {
  (void)r, (void)status, (void)devices, (void)no_cache;
}

int ranks_serve(cli_ranks *r, const char *devices_override) {
  (void)r, (void)devices_override;
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
