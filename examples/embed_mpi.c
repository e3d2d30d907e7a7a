/*
 * Embedding libschedrun_mpi: every rank opens its own scheduler; rank 0 loads
 * a config and runs it across all ranks; the others serve it. Run it with
 * `mpirun -n 2 embed_mpi config.yaml`. Link with pkg-config schedrun-mpi.
 */
#include <stdio.h>

#include "schedrun_mpi.h"

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (argc != 2) {
    fprintf(stderr, "usage: mpirun -n N embed_mpi config.yaml\n");
    MPI_Finalize();
    return 2;
  }
  schedrun_error_t err = {0};
  schedrun_mpi_t *m = NULL;
  schedrun_program_t *p = NULL;
  schedrun_report_t *rep = NULL;
  int rc = schedrun_mpi_open(&m, MPI_COMM_WORLD, NULL, NULL, &err); /* collective */
  int rank = m ? schedrun_mpi_rank(m) : -1;
  if (rc == SCHEDRUN_OK && rank == 0) rc = schedrun_program_load_file(schedrun_mpi_local(m), argv[1], &p, &err);
  /* rank 0 runs the program on every rank's devices; the others serve it
   * (when rank 0 could not load it, its close tells them: SCHEDRUN_ECLOSED) */
  if (rc == SCHEDRUN_OK) rc = schedrun_mpi_run(m, p, NULL, &rep, &err);
  if (rank != 0 && rc == SCHEDRUN_ECLOSED) rc = SCHEDRUN_OK;
  if (rank == 0) {
    const schedrun_summary_t *sum = schedrun_report_summary(rep);
    if (sum)
      printf("embed_mpi: %u of %u jobs verified on %d ranks (%d devices)\n", sum->verified, sum->jobs,
             schedrun_mpi_size(m), sum->ndevices);
    for (int r = 0; r < schedrun_mpi_size(m); r++) {
      schedrun_mpi_rank_info_t info;
      if (schedrun_mpi_rank_info(m, r, &info) == SCHEDRUN_OK)
        printf("  rank %d on %s: %llu jobs, %llu kernels compiled, %llu received\n", r, info.host,
               (unsigned long long)info.jobs, (unsigned long long)info.kernels_compiled,
               (unsigned long long)info.artifacts_received);
    }
  }
  if (rc != SCHEDRUN_OK) fprintf(stderr, "rank %d: %s\n", rank, err.message ? err.message : schedrun_strerror(rc));
  schedrun_error_clear(&err);
  schedrun_report_free(&rep);
  schedrun_program_free(&p);
  int lost = schedrun_mpi_lost(m);
  schedrun_mpi_close(&m);
  if (lost) MPI_Abort(MPI_COMM_WORLD, 4); /* MPI cannot finish with a rank gone */
  MPI_Finalize();
  return rc == SCHEDRUN_OK ? 0 : 1;
}
