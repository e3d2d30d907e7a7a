/*
 * The record actor's node lists: what a recording holds per node, and how
 * a program is walked, for one job's bindings and variables, into the list
 * of nodes it wants (unrolling `trips` loops, recording a `while` body once
 * as a child sequence). Walking touches no recording.
 */
#ifndef SCHEDRUN_RECORD_NODES_H
#define SCHEDRUN_RECORD_NODES_H

#include <stdbool.h>
#include <stdint.h>

#include "actors/exec_ctx_key.h"
#include "actors/record_tune.h"
#include "common/common.h"
#include "gpu/backend.h"
#include "messages/msg.h"
#include "program/program.h"

/* One recorded node and what it was recorded with. 64 bytes + its args. */
typedef struct rec_node {
  node_key key;
  uint16_t seq_no; /* which sequence of the recording: 0 root, else a while body */
  uint8_t kind;    /* gpu_node_kind */
  uint32_t index;  /* position in that sequence, for seq_update */
  uint32_t arg0, nargs;
  union {
    struct {
      gpu_function fn;
      uint32_t grid[3], block[3];
      uint32_t shared; /* dynamic shared memory, bytes */
    } launch;
    struct {
      uint64_t dst, src, bytes;
    } copy;
    struct {
      uint64_t dst, count, pattern;
      uint32_t elem_size;
      uint8_t resizes; /* its count or offset depends on the job */
    } fill;
    struct {
      uint64_t flag;
      uint32_t max_trips;
      uint16_t body_no;
    } loop;
  } u;
} rec_node;

/* A node whose parameters depend on the job ($job or $run in one of its
 * step's expressions): what it takes to evaluate it again alone. 32 bytes. */
typedef struct dyn_node {
  const prog_step *st;
  uint32_t node;  /* its position in the list */
  uint32_t rid;   /* its record id */
  uint32_t iter0; /* the iterations of its enclosing loops: iters[iter0, iter0 + depth) */
  uint16_t seq_no;
  uint8_t depth;
} dyn_node;

typedef struct node_list {
  rec_node *v;
  uint32_t n, cap;
  uint64_t *args;
  uint32_t nargs, args_cap;
  uint16_t nseqs;
  dyn_node *dyn; /* the nodes that depend on the job, in list order */
  uint32_t ndyn, dyn_cap;
  int64_t *iters;
  uint32_t niters, iters_cap;
  /* the program's host steps cut its top level into segments, each a root
   * sequence of its own: segs[k] is segment k's sequence number (segs[0] is
   * 0); a program without host steps has one */
  uint16_t segs[PROG_MAX_HOST_STEPS + 1];
  uint16_t nsegs;
} node_list;

void nl_reset(node_list *l);
void nl_free(node_list *l);
/* dst becomes a copy of src; -1 when out of memory. */
int nl_copy(node_list *dst, const node_list *src);

/* Builds in `want` the nodes program p records for RECORD r, with kernel k's
 * function fns[k]; an autotuned launch's grid and block come from
 * record_tune_choose with `tune` (NULL: the program has none). On failure
 * returns -1 and `why` holds "file:line:col: what", naming the step. */
int record_walk(node_list *want, const prog_program *p, const msg_record *r, const gpu_function *fns, tune_ctx *tune,
                strbuf *why);
/* Evaluates again, for RECORD r, the nodes of `of` that depend on the job,
 * appending them to `out` (reset first) in the order of of->dyn: out->v[k]
 * is of->dyn[k]'s node as r wants it. Same failures as record_walk. */
int record_walk_dynamic(node_list *out, const node_list *of, const prog_program *p, const msg_record *r,
                        const gpu_function *fns, tune_ctx *tune, strbuf *why);

#endif
