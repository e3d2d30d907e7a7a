/* What sched-run says on standard error about the scheduler it opened. */
#ifndef SCHED_RUN_NOTES_H
#define SCHED_RUN_NOTES_H

#include <stdbool.h>

#include "schedrun.h"

/* A note when kernels are cached for this run only although the user did not
 * ask (--no-cache) for that: the environment names no cache directory. */
void note_opened(const schedrun_t *s, bool no_cache, bool quiet);

#endif
