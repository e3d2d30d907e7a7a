/*
 * What the config loader's files share (loader.c: the document and the
 * kernels; load_buffers.c: buffers and expectations; load_steps.c: the
 * program's steps): the loader's
 * state and its helpers for reading YAML nodes. Every helper that finds a
 * problem reports it with the node's place and carries on, so that one load
 * reports every problem. Private to program/.
 */
#ifndef SCHEDRUN_LOAD_UTIL_H
#define SCHEDRUN_LOAD_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <yaml.h>

#include "program/program.h"

#define MAX_PROBLEMS 100

typedef struct ld {
  yaml_document_t doc;
  const char *file;
  schedrun_error_t *err;
  int problems;
  prog_program *p;
  uint32_t next_command;
  uint64_t steps;        /* steps loaded so far, an alias's each time it is used */
  bool too_many_steps;   /* past PROG_MAX_STEPS: no more steps are loaded */
  bool u64_literal_ok;   /* the expression parsed is a u64 kernel argument */
  bool block_ok;         /* the expression parsed is an autotuned launch's grid: $block is known */
  bool loop_is_while[PROG_MAX_DEPTH];
  uint64_t buffer_bytes; /* all buffers so far */
  bool out_of_memory;    /* a problem was an allocation: the load fails with ENOMEM */
  /* a document made by the program builder: where a place is, and the
   * memory its buffers' `init: {memory: K}` name (NULL for YAML text) */
  const prog_source *src;
} ld;

typedef yaml_node_t node;

static inline node *ld_get(ld *l, int id) { return yaml_document_get_node(&l->doc, id); }
static inline const char *ld_sval(const node *n) { return (const char *)n->data.scalar.value; }
/* How many items sequence node n has. */
static inline size_t ld_items(const node *n) {
  return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

prog_loc ld_loc_of(const node *n);
/* One problem, as "file:line:col: message" (at most MAX_PROBLEMS are kept). */
void ld_problem(ld *l, const node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *ld_kind_name(const node *n);
/* A mapping whose keys must come from `keys` (NULL-terminated): vals[i] is
 * the value of keys[i], or NULL. */
bool ld_read_map(ld *l, node *n, const char *what, const char *const *keys, node **vals);
bool ld_is_scalar(ld *l, node *n, const char *what);
bool ld_read_int(ld *l, node *n, const char *what, int64_t lo, int64_t hi, int64_t *out);
bool ld_read_num(ld *l, node *n, const char *what, double *out);
const char *ld_read_str(ld *l, node *n, const char *what);
bool ld_parse_type(const char *s, prog_type *t);
bool ld_type_is_int(prog_type t);
bool ld_value_fits(prog_type t, double v);
void ld_store_elem(prog_type t, uint8_t *base, uint64_t i, double v);

/* A number as written: an integer literal kept exact (the whole of the i64
 * and u64 ranges), anything else a double. */
typedef struct ld_num {
  enum { LD_FLOAT, LD_INT, LD_UINT } kind; /* LD_UINT: above INT64_MAX */
  int64_t i;
  uint64_t u;
  double f;
} ld_num;
/* Reads a number; an integer literal outside 64 bits, or a float that
 * overflows a double, is a problem naming it. */
bool ld_read_number(ld *l, node *n, const char *what, ld_num *out);
/* An expression's value as a number; u64_literal: its bits are a lone
 * literal above INT64_MAX (prog_expr.u64_literal). */
ld_num ld_num_of(prog_value v, bool u64_literal);
/* Whether v fits an element of type t exactly (an integer type: an integer
 * in range; f32: finite as a float). */
bool ld_num_fits(prog_type t, const ld_num *v);
/* Stores v (which fits) as element i of type t: integers exactly. */
void ld_store_num(prog_type t, uint8_t *base, uint64_t i, const ld_num *v);
/* The 64-bit pattern an integer element of type t holds: sign-extended for
 * the signed types, zero-extended for the unsigned ones. */
uint64_t ld_num_bits(prog_type t, const ld_num *v);
/* An expression at loop depth `depth`; a constant one is computed now. */
bool ld_parse_expr_node(ld *l, node *n, int depth, const char *what, prog_expr *out);
/* The same for `text` instead of the node's own (NULL: the node's), its
 * problems placed at the node. */
bool ld_parse_expr_text(ld *l, node *n, const char *text, int depth, const char *what, prog_expr *out);
/* The value of a constant integer expression. */
bool ld_const_int(const prog_expr *e, int64_t *v);
/* The index of the buffer a node names, or -1 (reported). */
int ld_buffer_ref(ld *l, node *n, const char *what);
/* calloc for what node n describes (at least one element, so that NULL means
 * failure): NULL with "out of memory for <what>" reported. */
void *ld_calloc(ld *l, const node *n, size_t count, size_t size, const char *what);
/* The file that node n names as `rel` (relative to the config), at most
 * max_bytes, NUL-terminated: its data and length, or NULL with "cannot read
 * <what> file 'rel': why" reported. *path, when asked for, gets its path. */
char *ld_read_file(ld *l, node *n, const char *rel, const char *what, uint64_t max_bytes, size_t *len, char **path);

/* load_steps.c: a list of steps at loop depth `depth`; returns how many
 * recorded nodes they unroll to (capped just past PROG_MAX_NODES). */
uint64_t ld_load_steps(ld *l, node *n, int depth, prog_step **out, uint32_t *nout);

/* load_buffers.c: the `buffers` and `expect` mappings. */
void ld_load_buffers(ld *l, node *n);
void ld_load_expect(ld *l, node *n);

/* A launch's block, or an autotune candidate: 1 to 3 sizes within CUDA's
 * limits (load_steps.c). */
bool ld_read_block(ld *l, node *n, const char *what, uint32_t b[3]);
/* A launch's `autotune:` map, for kernel k, into st->u.launch.tune
 * (load_tune.c). */
bool ld_load_tune(ld *l, node *n, int depth, const prog_kernel *k, prog_step *st);

#endif
