/* The autotuned launches' choices, as the record actor made them
 * (actors/record_tune.h). */
#include <string.h>

#include "lib/api.h"

_Static_assert(SCHEDRUN_MAX_CANDIDATES == PROG_MAX_CANDIDATES, "one bound on candidates");

/* The table changes under its own lock: reading it leaves the scheduler
 * as it was. */
static tune_table *table_of(const schedrun_t *s) { return (tune_table *)&s->core.tunes; }

size_t schedrun_tune_count(const schedrun_t *s) { return s ? tune_table_count(table_of(s)) : 0; }

int schedrun_tune_get(const schedrun_t *s, size_t i, schedrun_tune_info_t *out, schedrun_error_t *err) {
  if (!s || !out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_tune_get: %s is NULL", !s ? "the scheduler" : "out");
  tune_entry e;
  if (!tune_table_get(table_of(s), i, &e))
    return err_set(err, SCHEDRUN_EINVAL, "schedrun_tune_get: no choice %zu (there are %zu)", i,
                   tune_table_count(table_of(s)));
  memset(out, 0, sizeof *out);
  _Static_assert(sizeof out->kernel == sizeof e.kernel && sizeof out->where == sizeof e.where &&
                     sizeof out->key == sizeof e.keyvals && sizeof out->device == sizeof e.device,
                 "the same texts");
  memcpy(out->kernel, e.kernel, sizeof out->kernel);
  memcpy(out->where, e.where, sizeof out->where);
  memcpy(out->key, e.keyvals, sizeof out->key);
  memcpy(out->device, e.device, sizeof out->device);
  for (int d = 0; d < 3; d++) {
    out->block[d] = e.block[d];
    out->grid[d] = e.grid[d];
  }
  out->timed = e.timed;
  out->ncandidates = e.ncand;
  for (uint32_t c = 0; c < e.ncand; c++) {
    for (int d = 0; d < 3; d++) out->candidates[c][d] = e.cand[c][d];
    out->candidate_ns[c] = e.cand_ns[c];
    _Static_assert(sizeof out->candidate_constants[c] == sizeof e.constants[c], "the same texts");
    memcpy(out->candidate_constants[c], e.constants[c], sizeof e.constants[c]);
  }
  if (e.choice < e.ncand) memcpy(out->constants, e.constants[e.choice], sizeof out->constants);
  return SCHEDRUN_OK;
}
