/*
 * sched-run's handling of SIGINT, SIGTERM and SIGHUP. The signals are blocked
 * in every thread and taken by one thread of ours with sigwait, so nothing runs
 * in a signal handler: the first signal shuts the scheduler down (jobs not
 * started complete as closed, running ones get a short grace), so that the run
 * returns what finished and sched-run can write its summary, trace and JSON
 * and clean up; a second signal ends the process at once, and so does a
 * first one once the run is over and only outputs are being written.
 */
#ifndef SCHED_RUN_INTERRUPT_H
#define SCHED_RUN_INTERRUPT_H

#include "schedrun.h"

/* Blocks the signals and starts the thread; call before any other thread
 * starts (they inherit the mask). 0, or -1 when the thread cannot start. */
int interrupt_start(void);
/* Ends the process (exit 4, saying what it was doing) `seconds` after
 * interrupt_start, and a moment more: --timeout bounds the whole process,
 * loading and writing outputs included. 0, or -1. */
int interrupt_bound(int seconds);
/* What is left of that bound, in ms (at least 1). */
int interrupt_left_ms(void);
/* What the process is doing, for the messages; `outputs` when there is
 * nothing left to shut down: the run is over and files are written (a write
 * may wait for a FIFO's reader; each output is written whole under its name,
 * or not at all), or the process is an MPI rank serving rank 0. Then a first
 * signal ends the process at once. */
void interrupt_phase(const char *what, int outputs);
/* The scheduler a first signal shuts down (NULL: none yet); watching one
 * makes the phase "running the jobs". */
void interrupt_watch(schedrun_t *s);
/* The signal that arrived first, or 0. */
int interrupt_signal(void);
/* "SIGINT", ... */
const char *interrupt_name(int sig);

#endif
