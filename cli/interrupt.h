/*
 * sched-run's handling of SIGINT, SIGTERM and SIGHUP. The signals are blocked
 * in every thread and taken by one thread of ours with sigwait, so nothing runs
 * in a signal handler: the first signal shuts the scheduler down (jobs not
 * started complete as closed, running ones get a short grace), so that the run
 * returns what finished and sched-run can write its summary, trace and JSON
 * and clean up; a second signal ends the process at once.
 */
#ifndef SCHED_RUN_INTERRUPT_H
#define SCHED_RUN_INTERRUPT_H

#include "schedrun.h"

/* Blocks the signals and starts the thread; call before any other thread
 * starts (they inherit the mask). 0, or -1 when the thread cannot start. */
int interrupt_start(void);
/* The scheduler a first signal shuts down (NULL: none yet). */
void interrupt_watch(schedrun_t *s);
/* The signal that arrived first, or 0. */
int interrupt_signal(void);
/* "SIGINT", ... */
const char *interrupt_name(int sig);

#endif
