/*
 * The program model: what a config describes, checked and resolved, immutable
 * once loaded. Kernels, buffers (with their initial contents), a tree of steps
 * (launch, copy, fill, loop, while) and the expectations to verify.
 *
 * Every step has a `command` number, its index in a pre-order walk of the
 * tree. Together with a record id (which unrolled iteration) it names one
 * recorded node inside an execution context; see actors/exec_ctx_key.h.
 */
#ifndef SCHEDRUN_PROGRAM_H
#define SCHEDRUN_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

#define PROG_MAX_DEPTH 8          /* loop nesting */
#define PROG_MAX_HOST_STEPS 32    /* host steps in a program (builder only) */
#define PROG_MAX_NODES (1u << 22) /* recorded nodes after unrolling */
/* steps as loaded (a loop's body once, a YAML alias each time it is used):
 * bounds the memory a small document can ask for (an alias bomb) */
#define PROG_MAX_STEPS (1u << 18)
/* One buffer, and all of a program's buffers together: far past what a
 * device holds (whether one can is asked when a job is placed there). A
 * job's bytes are lent to its messages, never copied into them. */
#define PROG_MAX_BUFFER_BYTES (1ull << 40)
/* Kernel sources travel in one COMPILE message. */
#define PROG_MAX_SOURCE_BYTES (8u << 20)
#define PROG_MAX_SOURCES_BYTES (256u << 20)
#define PROG_MAX_PARAMS 64 /* a kernel's parameters */
/* a grid's sizes (CUDA's limits): x, and y and z */
#define PROG_GRID_MAX_X 2147483647u
#define PROG_GRID_MAX_YZ 65535u
/* a launch's dynamic shared memory: 48 KiB, what every CUDA device gives a
 * block without the kernel opting in to more */
#define PROG_MAX_SHARED (48u * 1024)
#define PROG_MAX_ENTRY 128 /* characters of a kernel's entry name */
/* A config file: its inline sources, and room for the rest. */
#define PROG_MAX_CONFIG_BYTES (PROG_MAX_SOURCES_BYTES + (64u << 20))

typedef enum prog_type { PT_I32, PT_U32, PT_I64, PT_U64, PT_F32, PT_F64, PT_PTR, PT_U8 } prog_type;

size_t prog_type_size(prog_type t);
const char *prog_type_name(prog_type t);
bool prog_type_is_float(prog_type t);

typedef struct prog_loc { int line, col; } prog_loc; /* 1-based */

/* ---- expressions ---- */

/* $block: the x size of an autotuned launch's candidate block, in its grid */
enum { EXV_ITER0 = 0, EXV_JOB = PROG_MAX_DEPTH, EXV_DEVICE, EXV_RUN, EXV_BLOCK, EXV__COUNT };

enum { PROG_USES_JOB = 1, PROG_USES_RUN = 2, PROG_USES_DEVICE = 4, PROG_USES_BLOCK = 8 };

typedef struct prog_value {
  bool is_int;
  int64_t i;
  double f;
} prog_value;

typedef struct prog_expr_op {
  uint8_t op;  /* EXO_* in expr.c */
  uint8_t var; /* EXV_* */
  prog_value num;
} prog_expr_op;

typedef struct prog_expr {
  prog_expr_op *ops; /* reverse Polish */
  uint32_t n;
  bool constant;     /* no variables */
  uint32_t depth_used; /* deepest $iterK used + 1, 0 when none */
  uint32_t iters_used; /* bit K: $iterK (or $iter at depth K) is used */
  bool u64_literal;    /* a lone integer literal above INT64_MAX, its bits held in
                          the one op's i (only a u64 kernel argument takes one) */
} prog_expr;

typedef struct prog_env {
  int64_t v[EXV__COUNT];
} prog_env;

/* Parses `text`. `depth` is the loop nesting at the place of use: $iter means
 * $iter{depth-1}. Returns NULL on success, else a static-lifetime message
 * written into why_buf. */
const char *prog_expr_parse(const char *text, int depth, prog_expr *out, char *why_buf,
                            size_t why_len);
/* The same; on failure *at is the offset in text of the character at fault. */
const char *prog_expr_parse_at(const char *text, int depth, prog_expr *out, char *why_buf, size_t why_len,
                               size_t *at);
/* Returns NULL, or why evaluation failed (division by zero). */
const char *prog_expr_eval(const prog_expr *e, const prog_env *env, prog_value *out);
void prog_expr_free(prog_expr *e);
/* Which of $job, $run, $device the expression reads (PROG_USES_* bits). */
unsigned prog_expr_uses(const prog_expr *e);
double prog_value_f(prog_value v);

/* ---- the model ---- */

typedef struct prog_kernel {
  char *name, *entry, *source;
  char *source_file;   /* the file the source lines come from */
  uint32_t first_line; /* line in source_file of the source's first line */
  prog_type *params;
  uint32_t nparams;
  char *params_text; /* "f32,ptr,ptr,i32" */
  prog_loc loc;
  /* every launch of it autotunes named constants: only its variants (the
   * kernels made for them) are compiled and loaded, not it */
  bool variants_only;
  bool launched_plain; /* while loading: a launch uses it as it is */
} prog_kernel;

#define PROG_MAX_DIMS 8 /* dimensions of a buffer's shape */

typedef struct prog_buffer {
  char *name;
  prog_type type;
  uint64_t count;
  /* `shape: [d0, d1, ...]`, row-major (C order), whose product is count;
   * ndims 0: one-dimensional, count elements */
  uint32_t ndims;
  uint64_t dims[PROG_MAX_DIMS];
  uint8_t *image; /* initial contents, count * size bytes; NULL: zeroed */
  bool output;    /* `output: true`: written by --output */
  bool resident;  /* `resident: true`: stays on its device between the jobs of a buffer set */
  prog_loc loc;
} prog_buffer;

typedef enum { ST_LAUNCH, ST_COPY, ST_FILL, ST_LOOP, ST_WHILE, ST_HOST } prog_step_kind;

/* A host step's C function (schedrun_builder_host): it runs between the
 * program's device steps with the job's buffers in host memory. */
typedef struct prog_host {
  char *name;
  schedrun_host_fn fn;
  void *user;
} prog_host;

typedef struct prog_arg {
  bool is_buffer;
  uint32_t buffer;
  prog_expr expr; /* the scalar, or the buffer offset in elements (may be empty) */
} prog_arg;

/* An autotuned launch (`autotune:`): the block is one of the candidates,
 * chosen by timing each on the device (actors/record_tune.c), and the grid
 * an expression that may read the candidate's x size as $block. `key`
 * lists the scalar arguments whose values the choice depends on. With
 * `constants`, a candidate is a block and a value for each named constant:
 * the launch's kernel is compiled once per combination of values (a kernel
 * of the program of its own, the source behind `#define NAME value` lines),
 * and the grid may read a constant as $NAME. */
#define PROG_MAX_CANDIDATES 16
#define PROG_MAX_CONSTANTS 4
typedef struct prog_tune {
  uint32_t blocks[PROG_MAX_CANDIDATES][3]; /* each candidate's block */
  uint32_t nblocks;                        /* the candidates */
  uint32_t kernels[PROG_MAX_CANDIDATES];   /* each candidate's kernel: the launch's, or its variant */
  uint8_t combo[PROG_MAX_CANDIDATES];      /* each candidate's combination of constants' values */
  char *constants[PROG_MAX_CANDIDATES];    /* each combination as "TILE=8 WARPS=2"; NULL without constants */
  uint32_t ncombos;                        /* 1 without constants */
  prog_expr grid[PROG_MAX_CANDIDATES][3];  /* per combination: x, y, z; an empty y or z is 1 */
  uint32_t key[PROG_MAX_PARAMS]; /* argument positions */
  char *key_names[PROG_MAX_PARAMS]; /* as the config names them */
  uint32_t nkey;
  char *spec; /* the candidates, the grid and the key as text: part of the choice's cache key */
} prog_tune;

void prog_tune_free(prog_tune *t);

typedef struct prog_step prog_step;
struct prog_step {
  prog_step_kind kind;
  uint32_t command;
  prog_loc loc;
  union {
    struct {
      uint32_t kernel;
      uint32_t grid[3], block[3];
      uint32_t shared; /* dynamic shared memory per block, bytes (`shared:`) */
      prog_arg *args;
      uint32_t nargs;
      prog_tune *tune; /* NULL: grid and block as given */
    } launch;
    struct {
      uint32_t from, to;
      prog_expr count, from_offset, to_offset;
    } copy;
    struct {
      uint32_t buffer;
      prog_expr value, count, offset; /* count empty: to the end */
    } fill;
    struct {
      uint32_t trips;    /* ST_LOOP */
      uint32_t buffer;   /* ST_WHILE: the flag's buffer and element */
      uint64_t index;
      uint32_t max_trips;
      prog_step *body;
      uint32_t nbody;
    } loop;
    struct {
      uint32_t index; /* in prog_program.hosts; the host steps in order */
    } host;
  } u;
};

typedef enum { EXP_VALUES, EXP_AT, EXP_SUM } prog_expect_kind;

typedef struct prog_expect {
  uint32_t buffer;
  prog_expect_kind kind;
  uint64_t *index; /* EXP_AT */
  double *values;  /* EXP_VALUES: n values from index 0; EXP_AT: one per index */
  uint64_t *bits;  /* an integer buffer's: the same values exactly, as the 64-bit
                      pattern an element holds (prog_element_bits) */
  prog_expr *exprs; /* NULL, or one per value: those with ops depend on $job, $run or
                       $device and are computed per job (values[] holds the rest) */
  size_t n;
  double sum;
  prog_expr sum_expr; /* ops when the sum depends on $job, $run or $device */
  /* an element passes when |got - want| <= tol + rtol * |want| (numpy's
   * isclose); both >= 0 */
  double tol, rtol;
  prog_loc loc;
} prog_expect;

typedef struct prog_program {
  char *name;
  char *path; /* the config file, or the origin name */
  char *text; /* the config's text as loaded (sent as is to other processes) */
  size_t text_len;
  char *devices;      /* the config's devices:, or "auto" */
  prog_loc devices_at; /* where the config says it; line 0: it does not */
  int repeat, buffer_sets, jobs;
  prog_kernel *kernels;
  uint32_t nkernels;
  prog_buffer *buffers;
  uint32_t nbuffers;
  uint32_t nresident; /* buffers with `resident: true` */
  prog_step *steps;
  uint32_t nsteps;
  uint32_t ncommands;
  prog_expect *expects;
  uint32_t nexpects;
  prog_host *hosts; /* the host steps, in program order (top level only) */
  uint32_t nhosts;
  /* which per-job variables the steps' expressions use (PROG_USES_*; not
   * the expectations'): a job whose values of these match the last recording
   * of its context changes nothing */
  unsigned uses;
} prog_program;


/* A document built in memory rather than parsed from text (the program
 * builder): its places are the builder's own (`where` writes "step 2.1
 * (launch of kernel 'k')" for a place), and `init: {memory: K}` takes buffer
 * contents from blobs[K]. */
typedef struct prog_blob { const void *data; size_t len; } prog_blob;
typedef struct prog_hostfn { schedrun_host_fn fn; void *user; } prog_hostfn;
typedef struct prog_source {
  void (*where)(void *ctx, prog_loc at, char *out, size_t n);
  void *ctx;
  const prog_blob *blobs;
  size_t nblobs;
  const prog_hostfn *hostfns; /* `host: {name: N, task: K}` runs hostfns[K] */
  size_t nhostfns;
} prog_source;
/* Loads a libyaml document (taken over and deleted) made as src describes;
 * problems are reported as "PLACE: message". */
int prog_load_document(void *yaml_document, const char *origin, const prog_source *src, prog_program **out,
                       schedrun_error_t *err);

/* Loads a config; every problem becomes one "file:line:col: message" line of
 * err->message, and the status is SCHEDRUN_ECONFIG. */
int prog_load_file(const char *path, prog_program **out, schedrun_error_t *err);
int prog_load_string(const char *text, size_t len, const char *origin, prog_program **out,
                     schedrun_error_t *err);
void prog_free(prog_program *p);

int prog_find_buffer(const prog_program *p, const char *name);
/* Element `flat` of b as its index: "7" for a one-dimensional buffer, "1, 3"
 * for one of shape [2, 4]. */
void prog_index_text(const prog_buffer *b, uint64_t flat, char *out, size_t n);
/* b's shape as written in a config: "[2, 4]" (one-dimensional: "[count]"). */
void prog_shape_text(const prog_buffer *b, char *out, size_t n);
/* "kernel 'k' (file:line:col)" or "the copy step at file:line:col": what
 * step `cmd` (its pre-order command index) is, for error messages. */
void prog_describe_command(const prog_program *p, uint32_t cmd, char *out, size_t n);
/* "file:line:col" of a place in p's config. */
void prog_where(const prog_program *p, prog_loc loc, char *out, size_t n);

/* Checks one buffer's contents against the program's expectations for it.
 * Returns true when they hold; else appends "buffer NAME[i]: expected E, got A"
 * to why. */
bool prog_verify_buffer(const prog_program *p, uint32_t buffer, const void *data, size_t len, const prog_env *env,
                        strbuf *why);
double prog_element(prog_type t, const void *data, uint64_t i);
/* Element i of an integer type as 64 bits: sign-extended for i32 and i64,
 * zero-extended for u8, u32 and u64. */
uint64_t prog_element_bits(prog_type t, const void *data, uint64_t i);

#endif
