/* See notes.h. */
#include <stdio.h>

#include "notes.h"

void note_opened(const schedrun_t *s, bool no_cache, bool quiet) {
  int temporary = 0;
  schedrun_cache_dir(s, &temporary);
  if (temporary && !no_cache && !quiet)
    fprintf(stderr, "sched-run: note: neither HOME nor XDG_CACHE_HOME is set: compiled kernels are kept in a "
                    "temporary cache, removed at exit (SCHEDRUN_CACHE_DIR names a lasting one)\n");
}
