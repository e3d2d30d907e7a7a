/*
 * schedrun_mpi: one schedrun per MPI rank, driven from rank 0.
 *
 * Link with libschedrun_mpi (pkg-config schedrun-mpi, CMake
 * schedrun::schedrun_mpi) instead of libschedrun: it holds the whole library
 * plus this part, so programs that do not use MPI keep a library free of it.
 *
 * Every rank opens its own scheduler (its devices, its kernel cache) and a
 * gateway thread that carries messages between rank 0 and it over MPI.
 * schedrun_mpi_run on rank 0 runs a program across every rank: the program
 * is sent once to each, its kernels are compiled once per compile target
 * (schedrun_compile_target) and the artifacts sent to the ranks that share
 * it, and jobs are placed on the least loaded rank, kept on the rank that
 * holds the recording for their buffer set while it is not much busier.
 * On the other ranks schedrun_mpi_run serves rank 0 until it is done.
 *
 * MPI must be initialized with at least MPI_THREAD_SERIALIZED. Between
 * schedrun_mpi_open and schedrun_mpi_close the gateway thread makes every MPI
 * call of this library (on a duplicate of the communicator); the program must
 * not call MPI meanwhile unless MPI provides MPI_THREAD_MULTIPLE.
 *
 * A rank that stops answering (killed, stopped, its node gone) is lost
 * after lost_after_ms: its jobs fail with SCHEDRUN_ELOST naming the rank and
 * its host, and rank 0 places no more jobs there. MPI itself cannot finish
 * cleanly with a lost rank: see schedrun_mpi_lost.
 */
#ifndef SCHEDRUN_MPI_H
#define SCHEDRUN_MPI_H

#include <mpi.h>

#include "schedrun.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct schedrun_mpi schedrun_mpi_t;

typedef struct schedrun_mpi_options {
  int heartbeat_ms;  /* how often ranks tell each other they live; 0: 250 */
  int lost_after_ms; /* a rank not heard from for this long is lost; 0: 10000 */
  int batch;         /* jobs per MPI message at most; 0: 256; 1: one message per job */
  int inflight_per_device; /* jobs rank 0 keeps out per device of a rank; 0: 512 */
  int open_wait_ms;  /* how long the ranks wait for each other while they open (each opens its
                        devices first); a rank silent past it fails the open; 0: 60000 */
} schedrun_mpi_options_t;

SCHEDRUN_EXTERN void schedrun_mpi_options_init(schedrun_mpi_options_t *o);

/* Collective over comm: every rank opens a scheduler with opts and learns
 * the others' hosts, devices and compile targets. */
SCHEDRUN_EXTERN int schedrun_mpi_open(schedrun_mpi_t **out, MPI_Comm comm, const schedrun_options_t *opts,
                                      const schedrun_mpi_options_t *mo, schedrun_error_t *err);
SCHEDRUN_EXTERN int schedrun_mpi_rank(const schedrun_mpi_t *m);
SCHEDRUN_EXTERN int schedrun_mpi_size(const schedrun_mpi_t *m);
/* This rank's own scheduler. */
SCHEDRUN_EXTERN schedrun_t *schedrun_mpi_local(schedrun_mpi_t *m);

/* On rank 0: runs p (loaded with schedrun_program_load_*) across every
 * rank as schedrun_run runs it on one process, with the same options and
 * outcomes. The report's devices are every rank's, named "rR/NAME"
 * ("r1/host:0"). Other ranks load p from its text, with its file name for
 * relative kernel and data files: those must be readable at the same path
 * on every node.
 * On the other ranks: serves rank 0 until its run is over (p, opts and
 * out are ignored; *out is NULL): SCHEDRUN_OK after a run, SCHEDRUN_ECLOSED
 * when rank 0 closed instead of running again, SCHEDRUN_ELOST when rank 0
 * went silent. Every rank calls it once per run of rank 0; a rank that does
 * not know how many runs there will be calls it until it is not
 * SCHEDRUN_OK. */
SCHEDRUN_EXTERN int schedrun_mpi_run(schedrun_mpi_t *m, schedrun_program_t *p, const schedrun_run_options_t *opts,
                                     schedrun_report_t **out, schedrun_error_t *err);

typedef struct schedrun_mpi_rank_info {
  int rank;
  char host[64];
  char target[96];        /* schedrun_compile_target on that rank */
  int ndevices;
  int first_device;       /* index of its first device in rank 0's report */
  uint64_t jobs;          /* jobs of the last run it ran */
  uint64_t kernels_compiled;   /* kernels it compiled since it opened */
  uint64_t artifacts_received; /* artifacts it took from another rank */
  int lost;               /* 1: it stopped answering */
  char lost_why[160];
} schedrun_mpi_rank_info_t;

/* What rank 0 knows of `rank` (after a run: its jobs and counters). */
SCHEDRUN_EXTERN int schedrun_mpi_rank_info(const schedrun_mpi_t *m, int rank, schedrun_mpi_rank_info_t *out);
/* How many ranks were lost. With one lost, MPI_Finalize cannot complete:
 * end the job with MPI_Abort after schedrun_mpi_close. */
SCHEDRUN_EXTERN int schedrun_mpi_lost(const schedrun_mpi_t *m);

/* Stops the gateway and closes this rank's scheduler; on rank 0 it first
 * tells the ranks still serving that there are no more runs. */
SCHEDRUN_EXTERN int schedrun_mpi_close(schedrun_mpi_t **m);

#ifdef __cplusplus
}
#endif
#endif /* SCHEDRUN_MPI_H */
