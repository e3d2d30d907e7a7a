/*
 * sched-run across MPI ranks (mpirun -n N sched-run config.yaml, or srun):
 * rank 0 reads the config and does all the talking; the other ranks serve
 * it and print nothing. sched-run itself is built with ranks_absent.c (one
 * process, never MPI's libraries) and hands over to sched-run-mpi, built
 * with ranks.c where MPI is found, when a launcher started it.
 */
#ifndef SCHED_RUN_RANKS_H
#define SCHED_RUN_RANKS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>

#include "schedrun.h"

typedef struct cli_ranks {
  bool active; /* started by an MPI launcher */
  int rank, size;
  struct schedrun_mpi *m;
  int batch; /* --rank-batch; 0: the default */
  bool open_failed; /* schedrun_mpi_open failed: the ranks cannot finish MPI together */
} cli_ranks;

/* This process's rank as an MPI launcher set it, or NULL when none started it. */
const char *ranks_launcher_rank(void);
/* First thing in main: a sched-run without MPI that an MPI launcher started
 * becomes sched-run-mpi (beside it in a build tree, in libexec/ installed), so that only runs across ranks load
 * MPI. Returns only to refuse (the exit status), or 0 to go on. */
int ranks_handover(char **argv);
/* The refusal shared by both builds: 2 when SLURM_NTASKS says this process
 * should be one of several tasks (said on stderr), else 0. */
int ranks_refuse_singleton(const char *why);
/* Why, for a sched-run that can run across ranks. */
#define RANKS_NOT_A_RANK "this process was not started as an MPI rank; start it with `srun --mpi=pmix` (or mpirun)"
/* Before anything prints: on a rank other than 0, standard output and
 * error go to /dev/null. */
void ranks_silence_others(void);
/* Joins MPI when an MPI launcher started this process. Refuses (exit status
 * 2, said on stderr) a singleton that SLURM_NTASKS says should have been
 * one of several tasks. Returns 0 or the exit status. */
int ranks_start(cli_ranks *r);
/* Rank 0, once the config is loaded or not: tells the other ranks the
 * devices to open and how (or, status != 0, to stop). */
void ranks_share(cli_ranks *r, int status, const char *devices, int no_cache, int compile_timeout_ms);
/* A rank other than 0: takes what rank 0 shares (the devices, as --devices
 * or the config gave them to it), opens, serves the run, closes; the exit
 * status. */
int ranks_serve(cli_ranks *r);
/* Rank 0: opens every rank's scheduler; *s is this rank's. */
int ranks_open(cli_ranks *r, const schedrun_options_t *o, schedrun_t **s, schedrun_error_t *err);
/* schedrun_run on s, or across the ranks. */
int ranks_run(cli_ranks *r, schedrun_t *s, schedrun_program_t *p, const schedrun_run_options_t *ro,
              schedrun_report_t **rep, schedrun_error_t *err);
/* The summary's lines about ranks, and --json's "ranks" array. */
void ranks_print(const cli_ranks *r, FILE *f);
json_object *ranks_json(const cli_ranks *r, const schedrun_report_t *rep);
/* Closes (with s set to NULL) and leaves MPI (MPI_Abort when a rank was
 * lost, MPI_Finalize otherwise); returns status. */
int ranks_end(cli_ranks *r, schedrun_t **s, int status);

#endif
