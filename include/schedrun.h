/*
 * schedrun: a GPU work scheduler.
 *
 * Kernels are compiled once into a content-addressed cache, programs are
 * recorded once per execution context into replayable sequences, and jobs are
 * executed on one device or many. This header is the whole public API: every
 * public name starts with `schedrun_`. Functions that can fail return a status
 * (SCHEDRUN_OK or a negative SCHEDRUN_E* code) and, where they take one, fill a
 * schedrun_error_t with a sentence that says what went wrong and where. The library
 * never prints and never exits.
 */
#ifndef SCHEDRUN_H
#define SCHEDRUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SCHEDRUN_VERSION_MAJOR 0
#define SCHEDRUN_VERSION_MINOR 7
#define SCHEDRUN_VERSION_PATCH 0

/* Public functions are the only symbols the shared library exports; the
 * library is built with hidden visibility and this marks what is public. */
#if defined(SCHEDRUN_BUILDING) && defined(__GNUC__)
#define SCHEDRUN_EXTERN __attribute__((visibility("default")))
#else
#define SCHEDRUN_EXTERN
#endif

/* The library's version as "MAJOR.MINOR.PATCH", as built (the header's
 * SCHEDRUN_VERSION_* are the version compiled against). */
SCHEDRUN_EXTERN const char *schedrun_version(void);

/* ---- status codes ---------------------------------------------------- */

enum schedrun_status {
  SCHEDRUN_OK = 0,
  SCHEDRUN_EINVAL = -1,    /* a bad API argument */
  SCHEDRUN_ENOMEM = -2,    /* out of memory */
  SCHEDRUN_ECONFIG = -3,   /* a config that does not load */
  SCHEDRUN_ECOMPILE = -4,  /* a kernel that does not compile */
  SCHEDRUN_EVERIFY = -5,   /* outputs that do not match `expect` */
  SCHEDRUN_EBACKEND = -6,  /* a device or backend failure */
  SCHEDRUN_EPROTO = -7,    /* a malformed message */
  SCHEDRUN_ETIMEOUT = -8,  /* a wait that ran out of time */
  SCHEDRUN_ECLOSED = -9,   /* the scheduler is closed or closing */
  SCHEDRUN_EIO = -10,      /* a file that cannot be read or written */
  SCHEDRUN_EINTERNAL = -11, /* a broken invariant inside schedrun */
  SCHEDRUN_EALREADY = -12,  /* the job's result went to another waiting thread */
  SCHEDRUN_EDEADLK = -13,   /* the call would wait for the thread it runs on (a callback) */
  SCHEDRUN_EAGAIN = -14,    /* no room: max_inflight jobs are in flight */
  SCHEDRUN_EFAULT = -15,    /* a kernel faulted or ended its device's process */
  SCHEDRUN_ELOST = -16,     /* the device was lost to an earlier fault or deadline */
  SCHEDRUN_EDEPEND = -17,   /* a job this one runs after did not complete successfully */
  SCHEDRUN_EHOST = -18,     /* a host task or host step returned failure */
  SCHEDRUN_EBUSY = -19      /* registered memory is bound to a job not yet complete */
};

/* A short, static name for a status code ("config error", ...). */
SCHEDRUN_EXTERN const char *schedrun_strerror(int code);

/* Filled by functions that fail. `message` is heap-allocated (one line per
 * problem); release it with schedrun_error_clear. A zeroed struct is empty. */
typedef struct schedrun_error {
  int code;
  char *message;
} schedrun_error_t;

SCHEDRUN_EXTERN void schedrun_error_clear(schedrun_error_t *err);

/* ---- the scheduler ----------------------------------------------------- */

typedef struct schedrun_options {
  const char *devices;   /* "auto" (default), "host", "host:N", "cuda", "all" */
  const char *cache_dir; /* NULL: $SCHEDRUN_CACHE_DIR, else $XDG_CACHE_HOME/schedrun,
                            else ~/.cache/schedrun */
  int no_disk_cache;     /* 1: compile into a private temporary cache */
  int compile_workers;   /* threads compiling kernels; 0: one per core */
  int spin_us;           /* how long idle threads poll before sleeping: 0 default
                            (30 us), negative: never (saves CPU, costs latency) */
  int max_inflight;      /* back-pressure: jobs submitted and not yet complete at once;
                            0: 65536. Past it schedrun_submit waits for room (see
                            submit_timeout_ms). Completions make room by themselves;
                            results not yet collected are the caller's to take */
  int host_in_process;   /* 1: host devices run kernels in this process instead of one
                            worker process each: a process hop less per job, but a
                            kernel that faults or calls exit() ends the program, and a
                            deadline cannot stop a kernel that never returns */
  int record_always;     /* 1: send every job through the record actor, even when
                            its recording cannot have changed (slower; for diagnosis
                            and for measuring the fast path) */
  int record_whole_program; /* 1: every RECORD walks and compares the whole program,
                            not only the steps that depend on the job (slower; for
                            diagnosis and for measuring the difference) */
  int no_batching;       /* 1: every job its own message at every hop and its own
                            submission to its device, as the pipeline was first built
                            (slower under load; for diagnosis and for measuring
                            batches) */
  int no_caller_scheduling; /* 1: the scheduler's messages are handled on its own thread
                            only; by default a thread submitting or waiting for a job
                            handles them itself while the scheduler is idle, saving a
                            hop and a spinning thread per job (for diagnosis and for
                            measuring that) */
  int compile_timeout_ms; /* a kernel compile running longer is killed and fails
                            (SCHEDRUN_ECOMPILE); 0: 300000 (5 minutes) */
  int time_nodes;        /* 1: time every node of each device's first 16 jobs, for
                            the trace (schedrun_report_write_trace). Host devices
                            always do, at no cost; a CUDA device does when asked,
                            running those jobs node by node with events around each
                            instead of as one graph launch (same results, more launch
                            overhead) */
  int retune;            /* 1: autotuned launches time their candidates again instead of
                            taking the choices the kernel cache holds, and replace them;
                            performance models start afresh (calibrated again) */
  const char *placement; /* where jobs go: "model" (the device where a job is expected
                            to finish first, from each program's history of execute
                            times per device kind, kept in the cache directory),
                            "least-loaded" (the device with the fewest jobs), or NULL /
                            "auto": model on devices of several kinds, else least-loaded */
} schedrun_options_t;

SCHEDRUN_EXTERN void schedrun_options_init(schedrun_options_t *opts);

typedef struct schedrun schedrun_t;

/*
 * Threads. Every function may be called from any thread, concurrently, and
 * from inside a completion callback. Callbacks run on the scheduler's
 * completion thread, which is also the thread that delivers results: there a
 * wait with a timeout other than 0, schedrun_run, schedrun_shutdown and
 * schedrun_close answer SCHEDRUN_EDEADLK at once instead of waiting for
 * themselves, and schedrun_submit answers SCHEDRUN_EAGAIN instead of waiting
 * for room. Any number of threads may wait for one job (schedrun_wait,
 * schedrun_wait_any, in any mix): exactly one of them gets its result, and the
 * others get SCHEDRUN_EALREADY as soon as it is taken.
 */

/* Starts the actors (scheduler, compile, record, one execute per device). */
SCHEDRUN_EXTERN int schedrun_open(schedrun_t **out, const schedrun_options_t *opts, schedrun_error_t *err);
/* Shuts down (as schedrun_shutdown), stops every actor and frees everything;
 * sets *s to NULL. It returns within about 2 seconds whatever a compiler or a
 * kernel is doing: running compiles are stopped and devices still busy are
 * abandoned. SCHEDRUN_EDEADLK, leaving *s as it was, from a completion
 * callback. NULL is fine. */
SCHEDRUN_EXTERN int schedrun_close(schedrun_t **s);

SCHEDRUN_EXTERN int schedrun_device_count(const schedrun_t *s);

/* Whether a compile session (the active compile mode) is open right now, and
 * how many kernels the in-memory cache knows. */
SCHEDRUN_EXTERN int schedrun_compile_status(schedrun_t *s, int *active_sessions, int *cache_entries, schedrun_error_t *err);
/* The kernels of the compile sessions open now, and how many of them are
 * compiled (resolved: from a cache, compiled, or failed). */
SCHEDRUN_EXTERN int schedrun_compile_progress(schedrun_t *s, int *kernels, int *done, schedrun_error_t *err);
/* The library's own counters. messages_dropped counts messages that could not
 * be decoded, on every actor's mailbox and the client's; a job whose message
 * was dropped still completes, with an error naming the cause. */
#define SCHEDRUN_MAX_DEVICES 64
typedef struct schedrun_stats {
  uint64_t submitted, completed;
  uint64_t in_flight; /* submitted, not yet complete (max_inflight bounds it) */
  uint64_t held;      /* submitted, result not yet handed over */
  uint64_t messages_dropped;
  int devices_lost;
  /* per device (schedrun_device_count of them): the jobs placed there, of
   * them those placed by the performance model, and the model's mean error
   * over the jobs it predicted there: |actual - expected| / expected (0 when
   * it predicted none, as before a program is calibrated) */
  struct {
    uint64_t placed, by_model, predicted;
    double model_error;
  } placement[SCHEDRUN_MAX_DEVICES];
  /* lone jobs (nothing else in flight, no callback, no timeout, no host
   * steps) that the submitting thread posted to a host device itself, to be
   * collected by the wait for them; and of them, those the device's own
   * thread collected because nobody was waiting when they ended */
  uint64_t posted, posted_late;
} schedrun_stats_t;

SCHEDRUN_EXTERN int schedrun_get_stats(schedrun_t *s, schedrun_stats_t *out, schedrun_error_t *err);

/* An autotuned launch's choice (a config's `autotune:`), for one kind of
 * device and one key: made by timing the candidates in this process, or
 * taken from the kernel cache, where an earlier process left it. */
#define SCHEDRUN_MAX_CANDIDATES 16
typedef struct schedrun_tune_info {
  char kernel[64];  /* the kernel's name */
  char where[256];  /* the launch in its config: file:line:col */
  char key[128];    /* the key's arguments and their values ("n=4096"); "" without a key */
  char device[64];  /* the kind of device it was made for ("host", "cuda sm_90") */
  unsigned block[3], grid[3]; /* the choice; grid as the first launch that took it had it */
  int timed;        /* 1: this process timed the candidates; 0: the kernel cache had the choice */
  unsigned ncandidates;
  unsigned candidates[SCHEDRUN_MAX_CANDIDATES][3];
  /* each candidate's median time per launch, as timed when the choice was
   * made (by this process or the one that left it in the cache) */
  uint64_t candidate_ns[SCHEDRUN_MAX_CANDIDATES];
  /* with `constants`: the chosen values ("TILE=16 WARPS=2") and each
   * candidate's; "" without */
  char constants[64];
  char candidate_constants[SCHEDRUN_MAX_CANDIDATES][64];
} schedrun_tune_info_t;

/* How many choices the scheduler has made or read so far, and choice i, in
 * the order they were made. */
SCHEDRUN_EXTERN size_t schedrun_tune_count(const schedrun_t *s);
SCHEDRUN_EXTERN int schedrun_tune_get(const schedrun_t *s, size_t i, schedrun_tune_info_t *out, schedrun_error_t *err);
/* Why device i was lost (a kernel fault, a job past its deadline), or NULL
 * while it works. Jobs placed later go to the other devices; jobs pinned to a
 * lost device fail with SCHEDRUN_ELOST and this reason. */
SCHEDRUN_EXTERN const char *schedrun_device_lost(const schedrun_t *s, int i);
/* "host:0", "cuda:1", ...; NULL when i is out of range. */
SCHEDRUN_EXTERN const char *schedrun_device_name(const schedrun_t *s, int i);
/* Why "auto" or "all" fell back to host devices (no driver, no GPU), or NULL. */
SCHEDRUN_EXTERN const char *schedrun_device_fallback(const schedrun_t *s);

/* ---- the kernel cache ------------------------------------------------------ */

/* What kernels compile for here: the backend's target and architecture
 * ("host", "cuda sm_90"). Processes with the same target can share compiled
 * kernels (schedrun_program_artifacts, schedrun_cache_publish). */
SCHEDRUN_EXTERN const char *schedrun_compile_target(const schedrun_t *s);
/* The directory of the disk cache. *temporary (when not NULL) is set to 1
 * when it is a private one removed at close: asked for (no_disk_cache), or
 * because neither HOME nor XDG_CACHE_HOME names a place for the cache. */
SCHEDRUN_EXTERN const char *schedrun_cache_dir(const schedrun_t *s, int *temporary);
/* How many kernels this scheduler compiled since it opened (cache hits and
 * published artifacts are not compiles). */
SCHEDRUN_EXTERN int schedrun_compile_count(schedrun_t *s, uint64_t *compiled, schedrun_error_t *err);

/* ---- programs ------------------------------------------------------------ */

typedef struct schedrun_program schedrun_program_t;

/* Loads a config (format: docs/config.md). On failure err->message has one
 * "file:line:column: message" line per problem and the status is
 * SCHEDRUN_ECONFIG. */
SCHEDRUN_EXTERN int schedrun_program_load_file(schedrun_t *s, const char *path, schedrun_program_t **out,
                            schedrun_error_t *err);
/* `origin` names the text in error messages (a file name, "<string>"). */
SCHEDRUN_EXTERN int schedrun_program_load_string(schedrun_t *s, const char *yaml, const char *origin,
                              schedrun_program_t **out, schedrun_error_t *err);
/* Host work between device work: a host step of a program
 * (schedrun_builder_host), or a host task of a job graph
 * (schedrun_graph_host). While its function runs it sees its buffers as host
 * memory (schedrun_host_task_buffer and the other schedrun_host_task_*
 * calls). */
typedef struct schedrun_host_task schedrun_host_task_t;
/* Returns 0, or non-zero to fail (a SCHEDRUN_E* code is kept, any other value
 * is SCHEDRUN_EHOST), with schedrun_host_task_fail's reason if given. A
 * graph's host task runs on the completion thread, a program's host step on
 * its device's thread: keep either short, and do not wait there for jobs. */
typedef int (*schedrun_host_fn)(schedrun_host_task_t *t, void *user);

/*
 * The program builder: the same program a config describes, made by calls.
 * Each call adds what the config's keys would (docs/config.md); strings are
 * written as in a config (types "f32", expressions "$iter * 64"). Nothing is
 * checked until schedrun_builder_finish, which runs the config loader's
 * checks and names, for every problem, the call it comes from:
 * "saxpy: step 2.1 (launch of kernel 'scale'), args[1]: ...". A call whose
 * arguments cannot be taken at all (a NULL name) is reported there too.
 */
typedef struct schedrun_builder schedrun_builder_t;

SCHEDRUN_EXTERN int schedrun_builder_new(schedrun_builder_t **out, const char *name, schedrun_error_t *err);
/* The config's repeat, buffer_sets and jobs (0 keeps the default, 1), and devices. */
SCHEDRUN_EXTERN void schedrun_builder_runs(schedrun_builder_t *b, int repeat, int buffer_sets, int jobs);
SCHEDRUN_EXTERN void schedrun_builder_devices(schedrun_builder_t *b, const char *devices);
/* A kernel: params as "ptr, f32, i32"; entry NULL: the name. Its source as
 * text, or from a file (relative to the current directory). */
SCHEDRUN_EXTERN void schedrun_builder_kernel(schedrun_builder_t *b, const char *name, const char *params,
                                             const char *source, const char *entry);
SCHEDRUN_EXTERN void schedrun_builder_kernel_file(schedrun_builder_t *b, const char *name, const char *params,
                                                  const char *path, const char *entry);
/* A buffer's flags: written by --output (`output: true`); resident
 * (`resident: true`): it stays on its device between the jobs of a buffer
 * set, each job starting from what the last one left (docs/config.md). */
#define SCHEDRUN_BUFFER_OUTPUT 1
#define SCHEDRUN_BUFFER_RESIDENT 2
/* A buffer of `count` elements of `type` ("f32", "i32", ... "u8"): its
 * initial contents copied from init (exactly count x element size bytes;
 * NULL: zeroed), or from a file as `init: {file: ...}` reads it; flags:
 * SCHEDRUN_BUFFER_* (1 is SCHEDRUN_BUFFER_OUTPUT). */
SCHEDRUN_EXTERN void schedrun_builder_buffer(schedrun_builder_t *b, const char *name, const char *type, uint64_t count,
                                             const void *init, size_t init_bytes, int flags);
SCHEDRUN_EXTERN void schedrun_builder_buffer_file(schedrun_builder_t *b, const char *name, const char *type,
                                                  uint64_t count, const char *path, int flags);
/* Gives the buffer added last a shape (a config's `shape: [d0, d1, ...]`):
 * ndims sizes, in C order, whose product is its count. Its .npy files are
 * read and written with that shape, and a mismatch names both. */
SCHEDRUN_EXTERN void schedrun_builder_shape(schedrun_builder_t *b, const uint64_t *dims, size_t ndims);
/* Steps, in order. A launch's args are strings: a buffer's name, "NAME[EXPR]"
 * for a buffer from element EXPR, a number, or an expression. grid and block
 * are x, y, z (unused ones 1). copy and fill take expressions; NULL for an
 * optional one keeps its default. */
SCHEDRUN_EXTERN void schedrun_builder_launch(schedrun_builder_t *b, const char *kernel, const unsigned grid[3],
                                             const unsigned block[3], const char *const *args, size_t nargs);
/* A launch whose block is chosen by timing candidates (a config's
 * `autotune:`): nblocks candidate blocks (x, y, z), the grid as an
 * expression that may read a candidate's x size as $block
 * ("(4096 + $block - 1) / $block"), and the key: names of the kernel's
 * scalar parameters (as its source names them) whose values the choice
 * depends on (nkey 0: none). The choice is made once per kind of device and
 * key, and kept in the kernel cache (schedrun_tune_get says what it is). */
/* Candidate values of a named constant of the autotuned launch added just
 * before (a config's `autotune: {constants: {NAME: [values]}}`): its kernel
 * is compiled once per combination of the constants' values, each behind
 * `#define NAME value`, and the grid may read $NAME. */
SCHEDRUN_EXTERN void schedrun_builder_autotune_constant(schedrun_builder_t *b, const char *name,
                                                        const long long *values, size_t n);
SCHEDRUN_EXTERN void schedrun_builder_launch_autotune(schedrun_builder_t *b, const char *kernel, const unsigned (*blocks)[3],
                                                      size_t nblocks, const char *grid, const char *const *key,
                                                      size_t nkey, const char *const *args, size_t nargs);
/* Gives the launch added last `bytes` of dynamic shared memory per block
 * (a config's `shared: BYTES`): what the kernel's `extern __shared__` array
 * holds, at most 48 KiB. Called right after schedrun_builder_launch, once. */
SCHEDRUN_EXTERN void schedrun_builder_shared(schedrun_builder_t *b, unsigned bytes);
SCHEDRUN_EXTERN void schedrun_builder_copy(schedrun_builder_t *b, const char *from, const char *to, const char *count,
                                           const char *from_offset, const char *to_offset);
SCHEDRUN_EXTERN void schedrun_builder_fill(schedrun_builder_t *b, const char *buffer, const char *value,
                                           const char *count, const char *offset);
/* A loop of `trips` trips, or while flag_buffer[index] != 0 (at most
 * max_trips): the steps added next form its body, until schedrun_builder_end.
 * Loops nest up to 8 deep. */
SCHEDRUN_EXTERN void schedrun_builder_loop(schedrun_builder_t *b, unsigned trips);
SCHEDRUN_EXTERN void schedrun_builder_while(schedrun_builder_t *b, const char *flag_buffer, uint64_t index,
                                            unsigned max_trips);
SCHEDRUN_EXTERN void schedrun_builder_end(schedrun_builder_t *b);
/* A host step: fn runs on the host between the device steps before and
 * after it, with every buffer of the job as host memory
 * (schedrun_host_task_buffer; what it writes reaches the steps after it).
 * Host steps stand at the top level of the program, not inside loops; a
 * config cannot have them. A non-zero return fails the job, naming the step. */
SCHEDRUN_EXTERN void schedrun_builder_host(schedrun_builder_t *b, const char *name, schedrun_host_fn fn, void *user);
/* Expectations, checked after every job: elements by index, or the first
 * n elements; values are numbers or expressions, as strings. Optionally the
 * sum (an expression; NULL: none). tol: the allowed absolute difference, as
 * a config's `tol` (0: the defaults, docs/config.md). */
SCHEDRUN_EXTERN void schedrun_builder_expect_at(schedrun_builder_t *b, const char *buffer, const uint64_t *index,
                                                const char *const *values, size_t n, const char *sum, double tol);
SCHEDRUN_EXTERN void schedrun_builder_expect_values(schedrun_builder_t *b, const char *buffer,
                                                    const char *const *values, size_t n, const char *sum, double tol);
/* Checks everything and makes the program (as schedrun_program_load_*
 * would): SCHEDRUN_ECONFIG with one line per problem, each naming its call.
 * The builder is spent either way; free it. */
SCHEDRUN_EXTERN int schedrun_builder_finish(schedrun_builder_t *b, schedrun_program_t **out, schedrun_error_t *err);
SCHEDRUN_EXTERN void schedrun_builder_free(schedrun_builder_t **b);

/* Gives the program back: returns at once; its submitted jobs still finish,
 * then everything recorded or allocated for it is released. NULL is fine. */
SCHEDRUN_EXTERN void schedrun_program_free(schedrun_program_t **p);

SCHEDRUN_EXTERN const char *schedrun_program_name(const schedrun_program_t *p);
/* The config's `repeat`, `buffer_sets`, `jobs` and `devices`. */
SCHEDRUN_EXTERN int schedrun_program_repeat(const schedrun_program_t *p);
SCHEDRUN_EXTERN int schedrun_program_buffer_sets(const schedrun_program_t *p);
SCHEDRUN_EXTERN int schedrun_program_jobs(const schedrun_program_t *p);
SCHEDRUN_EXTERN const char *schedrun_program_devices(const schedrun_program_t *p);

/* One of a program's buffers, as declared: what a job's inputs must hold and
 * what its outputs are (bindings for other languages size and type them from
 * this). The strings live as long as the program. */
#define SCHEDRUN_MAX_DIMS 8
typedef struct schedrun_buffer_info {
  const char *name;
  const char *type;  /* "f32", "i32", ... (docs/config.md) */
  size_t elem_size;  /* bytes per element */
  uint64_t count;    /* elements */
  int ndims;         /* its `shape`'s dimensions; 0: none (one dimension of count) */
  uint64_t dims[SCHEDRUN_MAX_DIMS];
} schedrun_buffer_info_t;
/* The number of p's buffers (0 for NULL). */
SCHEDRUN_EXTERN int schedrun_program_buffer_count(const schedrun_program_t *p);
/* Buffer i of p (0 <= i < schedrun_program_buffer_count), in declaration
 * order. SCHEDRUN_EINVAL for a NULL argument or an index out of range. */
SCHEDRUN_EXTERN int schedrun_program_buffer(const schedrun_program_t *p, int i, schedrun_buffer_info_t *out);

/* The recorded state of one execution context {program, device, slot}: its
 * node count and how many nodes its jobs created, updated in place and
 * reused, over its life (a job whose recording cannot have changed reuses it
 * without a RECORD; it counts here too). All zero when nothing was recorded. */
typedef struct schedrun_counters {
  uint64_t nodes, created, updated, reused;
} schedrun_counters_t;

/* Called once per compiled kernel of a program: `name` is the artifact's
 * place in the cache ("TARGET/xx/KEY.ext"), `path` the file there. */
typedef void (*schedrun_artifact_fn)(const char *name, const char *path, void *user);
/* The compiled kernels of p, once a job of p has compiled them here (a
 * record_only job will do); SCHEDRUN_EINVAL before. */
SCHEDRUN_EXTERN int schedrun_program_artifacts(schedrun_t *s, const schedrun_program_t *p, schedrun_artifact_fn fn,
                                               void *user, schedrun_error_t *err);
/* Publishes one artifact file made by another process with the same
 * compile target under `name` (as schedrun_program_artifacts gave it): its
 * name, header, key and SHA-256 are checked as a cache read checks them
 * (SCHEDRUN_EINVAL for a bad name, SCHEDRUN_EIO for bad bytes), then it is
 * written atomically. A kernel then found in the cache is not compiled. */
SCHEDRUN_EXTERN int schedrun_cache_publish(schedrun_t *s, const char *name, const void *data, size_t len,
                                           schedrun_error_t *err);

SCHEDRUN_EXTERN int schedrun_record_counters(schedrun_t *s, const schedrun_program_t *p, int device, int slot,
                          schedrun_counters_t *out, schedrun_error_t *err);

/* ---- jobs ------------------------------------------------------------------ */

/* A submitted job; 0 is never one. */
typedef uint64_t schedrun_job_t;

/*
 * The caller's host memory, registered (StarPU's starpu_vector_data_register
 * is the model): a job bound to it (schedrun_job_options_t.binds) starts
 * that buffer from the memory's bytes, instead of its `init`, and writes the
 * buffer back into it once the job has run, before the job completes; no
 * byte travels in a message. Lifetimes: the memory stays the caller's, and
 * must stay valid and untouched from the submit of a job bound to it until
 * that job has completed (its result is there, or its callback ran); a
 * registration may be bound to one incomplete job at a time, or to a job
 * that runs after it (its `after` names that job), so that jobs bound to
 * one registration run in the order they were submitted.
 * schedrun_buffer_unregister refuses (SCHEDRUN_EBUSY, naming the job) while
 * a job bound to it has not completed. schedrun_close detaches every
 * registration; their handles must still be freed with
 * schedrun_buffer_unregister.
 */
typedef struct schedrun_buffer schedrun_buffer_t;
/* Registers `bytes` (more than 0) of memory at `data`. */
SCHEDRUN_EXTERN int schedrun_buffer_register(schedrun_t *s, void *data, size_t bytes, schedrun_buffer_t **out,
                                             schedrun_error_t *err);
/*
 * Registers `bytes` (more than 0) of device `device`'s own memory at device
 * address `address`, allocated by the caller (on CUDA a CUdeviceptr from
 * cuMemAlloc in that device's primary context; the range must lie in one
 * allocation of that device, which is checked). A job bound to it runs on
 * that device (a job pinned elsewhere is refused), and its buffer is that
 * memory: nothing is copied in or out, and the job's bytes_in and bytes_out
 * count nothing for it. The job runs in an execution context of its own,
 * made for the memory it is bound to and recorded once for it, so jobs
 * bound to the same memory replay one recording. Lifetimes as above: the
 * memory stays the caller's, and must stay allocated and untouched by the
 * caller's own work from the submit of a job bound to it until that job has
 * completed. Refused (SCHEDRUN_EINVAL) on backends whose devices have no
 * memory of their own for a caller to allocate (host devices: use
 * schedrun_host_alloc), and for programs with resident buffers.
 */
SCHEDRUN_EXTERN int schedrun_buffer_register_device(schedrun_t *s, int device, uint64_t address, size_t bytes,
                                                    schedrun_buffer_t **out, schedrun_error_t *err);
/* Ends a registration and frees its handle (*b becomes NULL; NULL is fine). */
SCHEDRUN_EXTERN int schedrun_buffer_unregister(schedrun_buffer_t **b, schedrun_error_t *err);

/*
 * Host memory the scheduler's devices reach directly (CUDA's
 * cuMemHostAlloc and StarPU's starpu_malloc are the models): `bytes` (more
 * than 0) of zeroed, page-aligned memory, the caller's to read and write.
 * Registered (schedrun_buffer_register) at a page boundary within it, it is
 * used in place: a job bound to it runs its kernels on this very memory,
 * and neither fills the buffer from it nor writes the buffer back (the
 * job's bytes_in and bytes_out count nothing for it). On host devices the
 * registration must start at a page boundary within it, and a resident
 * buffer bound to it is copied in and out as above; on CUDA it is pinned
 * memory mapped for every device (cuMemHostAlloc), which kernels read and
 * write across the bus, and a job bound to it runs in an execution context
 * of its own as with schedrun_buffer_register_device (not for programs with
 * resident buffers). Other registered memory is copied. Lifetimes: it stays valid until schedrun_host_free or
 * schedrun_close, whichever comes first; schedrun_host_free refuses
 * (SCHEDRUN_EBUSY, nothing freed) while a registration lies in it, and
 * SCHEDRUN_EINVAL for memory that is not an allocation of this scheduler.
 */
SCHEDRUN_EXTERN int schedrun_host_alloc(schedrun_t *s, size_t bytes, void **data, schedrun_error_t *err);
SCHEDRUN_EXTERN int schedrun_host_free(schedrun_t *s, void *data, schedrun_error_t *err);

/* A job's buffer bound to registered memory of exactly its size. */
typedef struct schedrun_bind {
  const char *buffer;
  schedrun_buffer_t *memory;
} schedrun_bind_t;

/* A buffer's whole contents for one job, instead of its `init`. */
typedef struct schedrun_input {
  const char *buffer;
  const void *data;
  size_t bytes; /* count * element size */
} schedrun_input_t;

typedef struct schedrun_job_result schedrun_job_result_t;
/* Called once per job, from schedrun's completion thread; the callback owns the
 * result (free it with schedrun_job_result_free) and must not block for long. */
typedef void (*schedrun_job_callback)(schedrun_job_t job, schedrun_job_result_t *result, void *user);

typedef struct schedrun_job_options {
  int run;          /* the job's $run; it also picks the buffer set: run % buffer_sets */
  int job;          /* the job's $job */
  int device;       /* -1 (default): the scheduler places it; else pinned to that device */
  int keep_outputs; /* 1: every buffer comes back in the result */
  const schedrun_input_t *inputs;
  size_t ninputs;
  int timeout_ms;   /* a deadline from submission: a job still waiting or running then
                       completes with SCHEDRUN_ETIMEOUT naming what it was doing, and a
                       device stuck in it is lost; 0: none */
  int submit_timeout_ms; /* how long schedrun_submit may wait for room under
                            max_inflight: -1 (the default) without limit, 0 not at
                            all (SCHEDRUN_EAGAIN at once) */
  schedrun_job_callback on_complete; /* NULL: collect the result with schedrun_wait* */
  void *user;
  int record_only;  /* 1: compile and record the job, then complete without running it
                       (no outputs; a recording or evaluation error fails it as usual) */
  const schedrun_job_t *after; /* jobs this one runs after: it starts once every one of
                                  them has completed successfully, and completes with
                                  SCHEDRUN_EDEPEND, naming the first that did not, once
                                  they all completed otherwise. Each must be a job whose
                                  result has not been handed over yet (to a waiter or a
                                  callback); others are refused. Buffers are handed from
                                  job to job in a graph (schedrun_graph_*) */
  size_t nafter;
  const schedrun_bind_t *binds; /* buffers bound to registered memory (schedrun_buffer_register);
                                   not in job graphs */
  size_t nbinds;
} schedrun_job_options_t;

SCHEDRUN_EXTERN void schedrun_job_options_init(schedrun_job_options_t *o);

/* Submits one job of program p and returns at once (or, with max_inflight jobs
 * in flight, once there is room: see submit_timeout_ms; SCHEDRUN_EAGAIN when
 * none came). Every submitted job completes exactly once: with a result, or
 * with an error status. */
SCHEDRUN_EXTERN int schedrun_submit(schedrun_t *s, schedrun_program_t *p, const schedrun_job_options_t *o, schedrun_job_t *out,
                 schedrun_error_t *err);
/* Submits n jobs of program p in one call, job i with opts[i] (opts NULL:
 * the defaults for every one), and puts their ids in out[0..n). Cheaper per
 * job than n calls of schedrun_submit: one lock and one message per batch of
 * up to 1024 jobs. Room under max_inflight is waited for as each batch's
 * first job's submit_timeout_ms allows. Every job's options are checked
 * before any is submitted. Jobs with `after` make the call submit the jobs
 * one by one, as schedrun_submit would. On failure the jobs whose out[i] is
 * non-zero were submitted (and complete as usual); the others were not. */
SCHEDRUN_EXTERN int schedrun_submit_many(schedrun_t *s, schedrun_program_t *p, size_t n, const schedrun_job_options_t *opts,
                                         schedrun_job_t *out, schedrun_error_t *err);
/* Waits up to timeout_ms for the n jobs and hands over their results:
 * results[i] for jobs[i], taken in the order they complete. SCHEDRUN_ETIMEOUT:
 * results[i] is set for those handed over, the others stay pending. A job a
 * thread waits for with schedrun_wait at the same time may be handed to
 * that thread; this call then waits for the rest until its timeout. */
SCHEDRUN_EXTERN int schedrun_wait_many(schedrun_t *s, size_t n, const schedrun_job_t *jobs, int timeout_ms,
                                       schedrun_job_result_t **results, schedrun_error_t *err);
/* Waits up to timeout_ms (-1: no limit, 0: only look) for that job and hands
 * over its result. SCHEDRUN_ETIMEOUT leaves it pending. SCHEDRUN_EALREADY: another
 * thread took it meanwhile. A job already handed over, or one with a callback,
 * is SCHEDRUN_EINVAL. */
SCHEDRUN_EXTERN int schedrun_wait(schedrun_t *s, schedrun_job_t job, int timeout_ms, schedrun_job_result_t **out, schedrun_error_t *err);
/* Submits one job and waits for its result (schedrun_submit, then
 * schedrun_wait with no timeout: the job's own timeout_ms bounds it). When it
 * is the only job in flight, the calling thread places it and runs it on its
 * device itself, with no hop through the library's threads: the lowest
 * latency for a lone job. o may be NULL; o->on_complete must be NULL. From a
 * completion callback it answers SCHEDRUN_EDEADLK. */
SCHEDRUN_EXTERN int schedrun_submit_wait(schedrun_t *s, schedrun_program_t *p, const schedrun_job_options_t *o,
                                         schedrun_job_result_t **out, schedrun_error_t *err);
/* The next completed job not yet handed over (in completion order).
 * SCHEDRUN_EINVAL when no job is left that it could wait for (every one was
 * handed over, or reports to a callback). */
SCHEDRUN_EXTERN int schedrun_wait_any(schedrun_t *s, int timeout_ms, schedrun_job_t *job, schedrun_job_result_t **out,
                   schedrun_error_t *err);
/* Waits until every submitted job has completed (results stay collectable). */
SCHEDRUN_EXTERN int schedrun_wait_all(schedrun_t *s, int timeout_ms, schedrun_error_t *err);
/* Stops taking jobs and drains: running compiles are stopped first (the compile
 * session is torn down, its compiler processes killed), then jobs not started
 * complete with SCHEDRUN_ECLOSED and started ones get timeout_ms (-1: two
 * minutes) to finish. Those still running then are ended: their devices are
 * abandoned (host workers killed, GPU contexts reset), the jobs complete with
 * SCHEDRUN_ELOST, and the call returns SCHEDRUN_ETIMEOUT saying so once the
 * drain is done. Afterwards schedrun_submit and every query answer
 * SCHEDRUN_ECLOSED at once. */
SCHEDRUN_EXTERN int schedrun_shutdown(schedrun_t *s, int timeout_ms, schedrun_error_t *err);

typedef struct schedrun_job_info {
  int status; /* SCHEDRUN_OK; SCHEDRUN_EVERIFY when outputs did not match; else why it failed */
  int device;
  int run, job;
  int verified; /* 1 when it ran and every expectation held */
  uint64_t compile_ns, record_ns, execute_ns;
  uint64_t nodes_created, nodes_updated, nodes_reused;
  /* buffers handed to this job by the jobs it runs after (schedrun_graph_*):
   * taken on the device they were left on, with no copy through the host;
   * and copied once, from another device or from host memory */
  uint32_t handoffs_local, handoffs_copied;
  /* handed from another device straight across, device to device (host
   * devices; GPUs whose peer access the driver allows): no copy through
   * the host */
  uint32_t handoffs_peer;
  /* the bytes this job moved: host to device (contents from `init` or an
   * input, the second half of a hand-off through the host), device to host
   * (outputs read back, the first half) and from device to device across
   * devices (peer hand-offs) */
  uint64_t bytes_in, bytes_out, bytes_peer;
} schedrun_job_info_t;

SCHEDRUN_EXTERN const schedrun_job_info_t *schedrun_job_result_info(const schedrun_job_result_t *r);
/* Why it failed, or which expectation did not hold; "" when it verified. */
SCHEDRUN_EXTERN const char *schedrun_job_result_error(const schedrun_job_result_t *r);
/* A buffer's contents after the job: buffers with expectations always, every
 * buffer with keep_outputs. NULL when absent. */
SCHEDRUN_EXTERN const void *schedrun_job_result_output(const schedrun_job_result_t *r, const char *buffer, size_t *bytes);
SCHEDRUN_EXTERN void schedrun_job_result_free(schedrun_job_result_t **r);

/* ---- job graphs: jobs that run after jobs and hand buffers on --------------- */

/*
 * A graph of jobs and host tasks, submitted at once. An edge makes a node
 * run after another; a hand-off also moves a buffer: the producer's buffer
 * after it ran becomes the consumer's buffer before it runs (instead of its
 * `init`). Between jobs on one device the buffer stays on the device (a
 * device copy, counted in the consumer's handoffs_local); between devices
 * it goes device to device where they can reach each other's memory
 * (handoffs_peer: host devices always, GPUs with peer access), else it is
 * copied once, through the host (handoffs_copied). A job the caller did not
 * pin to a device runs on the device that holds the most bytes handed to it.
 * A node starts when every node it runs after completed successfully; when
 * one did not, it completes with SCHEDRUN_EDEPEND naming that node's job and
 * its error (a failure ends every path through it). Cycles and unknown nodes
 * are refused by schedrun_graph_submit, which gives every node a job id for
 * schedrun_wait*, or its callback.
 */
typedef struct schedrun_graph schedrun_graph_t;

SCHEDRUN_EXTERN int schedrun_graph_new(schedrun_graph_t **out, schedrun_error_t *err);
/* Adds a job of p with options o (NULL: defaults; `after`, `on_complete` and
 * `user` are as in schedrun_submit; inputs are copied). *node is its index. */
SCHEDRUN_EXTERN int schedrun_graph_job(schedrun_graph_t *g, schedrun_program_t *p, const schedrun_job_options_t *o,
                                       int *node, schedrun_error_t *err);
/* Adds a host task named `name`: fn runs on the host, with the buffers handed
 * to it. Its result (schedrun_wait) holds every buffer it ends with. */
SCHEDRUN_EXTERN int schedrun_graph_host(schedrun_graph_t *g, const char *name, schedrun_host_fn fn, void *user,
                                        int *node, schedrun_error_t *err);
/* node runs after `before`. */
SCHEDRUN_EXTERN int schedrun_graph_after(schedrun_graph_t *g, int node, int before, schedrun_error_t *err);
/* `to` runs after `from`, and from's buffer from_buffer becomes to's
 * to_buffer (for a job, a buffer of its program of the same size; for a host
 * task, any name). */
SCHEDRUN_EXTERN int schedrun_graph_handoff(schedrun_graph_t *g, int from, const char *from_buffer, int to,
                                           const char *to_buffer, schedrun_error_t *err);
SCHEDRUN_EXTERN size_t schedrun_graph_size(const schedrun_graph_t *g);
/* Node i's name: its stage's (a stages config), its host task's, or its
 * program's; NULL when out of range. */
SCHEDRUN_EXTERN const char *schedrun_graph_node_name(const schedrun_graph_t *g, size_t node);
/* Sets every job's $run (options.run), for the next submission. */
SCHEDRUN_EXTERN void schedrun_graph_set_run(schedrun_graph_t *g, int run);
/* Sets every job's deadline (options.timeout_ms, from submission; 0: none),
 * for the next submission: a job still waiting or running then completes
 * with SCHEDRUN_ETIMEOUT, and the jobs after it with SCHEDRUN_EDEPEND. */
SCHEDRUN_EXTERN void schedrun_graph_set_timeout(schedrun_graph_t *g, int timeout_ms);
/* Loads a stages config (docs/config.md, "Job graphs"): a graph of stages,
 * each a job of a program config, with `after` and `inputs` between them.
 * Every problem is one "file:line:col: message" line (SCHEDRUN_ECONFIG);
 * a cycle is one of them. The graph owns the stages' programs. */
SCHEDRUN_EXTERN int schedrun_graph_load_file(const char *path, schedrun_graph_t **out, schedrun_error_t *err);
/* A stages config's name, devices (NULL: none given) and repeat (1 when
 * none given, and for graphs made by calls). */
SCHEDRUN_EXTERN const char *schedrun_graph_name(const schedrun_graph_t *g);
SCHEDRUN_EXTERN const char *schedrun_graph_devices(const schedrun_graph_t *g);
SCHEDRUN_EXTERN int schedrun_graph_repeat(const schedrun_graph_t *g);
/* Whether the config at path is a stages config (1) or not (0); negative
 * (a SCHEDRUN_E* code, err says why) when it cannot be read or parsed. */
SCHEDRUN_EXTERN int schedrun_config_is_graph(const char *path, schedrun_error_t *err);
/* Submits every node; ids[i] (n = schedrun_graph_size) is node i's job. The
 * graph stays the caller's: submit it again or free it. */
SCHEDRUN_EXTERN int schedrun_graph_submit(schedrun_t *s, schedrun_graph_t *g, schedrun_job_t *ids, schedrun_error_t *err);
/* Writes the graph as Graphviz DOT to path ("-": standard output). */
SCHEDRUN_EXTERN int schedrun_graph_write_dot(const schedrun_graph_t *g, const char *path, schedrun_error_t *err);
SCHEDRUN_EXTERN void schedrun_graph_free(schedrun_graph_t **g);

/* In a host task: buffer `name` (handed to it, or made by schedrun_host_task_output),
 * writable; NULL when it has none of that name. */
SCHEDRUN_EXTERN void *schedrun_host_task_buffer(schedrun_host_task_t *t, const char *name, size_t *bytes);
/* Makes (zeroed) or resizes buffer `name` of a graph's host task, to hand
 * on; NULL without memory. In a program's host step the buffers are the
 * program's: it returns buffer `name` when it has `bytes` bytes, else NULL. */
SCHEDRUN_EXTERN void *schedrun_host_task_output(schedrun_host_task_t *t, const char *name, size_t bytes);
/* The task's name and job id. */
SCHEDRUN_EXTERN const char *schedrun_host_task_name(const schedrun_host_task_t *t);
SCHEDRUN_EXTERN schedrun_job_t schedrun_host_task_job(const schedrun_host_task_t *t);
/* Says why the task fails (returned by the task, it fails with this text). */
SCHEDRUN_EXTERN int schedrun_host_task_fail(schedrun_host_task_t *t, const char *why);

/* ---- runs: a whole config, many jobs, one report ------------------------------ */

typedef struct schedrun_run_options {
  int repeat;       /* 0: the config's */
  int jobs;         /* 0: the config's */
  int keep_outputs; /* 1: keep every buffer of every job for schedrun_report_output */
  int timeout_ms;   /* a bound on the whole run; 0: 10 minutes. Jobs still running
                       then complete with SCHEDRUN_ETIMEOUT (their devices are lost) */
  int job_timeout_ms; /* each job's own deadline (schedrun_job_options_t.timeout_ms); 0: none.
                         A schedrun_shutdown from another thread ends the run early: jobs
                         not started complete with SCHEDRUN_ECLOSED, started ones finish,
                         and the report holds what finished */
  /* called from the calling thread now and then while the run goes on */
  void (*progress)(uint32_t done, uint32_t total, void *user);
  void *progress_user;
  int check_only;   /* 1: every job is compiled and recorded, none runs (record_only) */
  /* called like progress, saying the phase: "compiling" (kernels_done of
     kernels_total compiled), "recording" (compiled, no job done yet) or
     "running" (done of total jobs) */
  void (*progress_phase)(const char *phase, uint32_t done, uint32_t total, uint32_t kernels_done,
                         uint32_t kernels_total, void *user);
} schedrun_run_options_t;

SCHEDRUN_EXTERN void schedrun_run_options_init(schedrun_run_options_t *opts);


typedef struct schedrun_device_stats {
  char name[32];
  uint64_t jobs;
  uint64_t nodes_created, nodes_updated, nodes_reused;
  uint64_t busy_ns; /* time spent executing */
  uint64_t launches;   /* submissions to the device (CUDA graph launches): one per job when its loops run there */
  uint64_t loop_syncs; /* while-loop trips driven from the host, a synchronisation each */
  char loops[160];     /* how while loops run on the device; "" before the first */
  /* bytes its jobs moved (schedrun_job_info_t): host to device, device to
   * host, and from another device into this one */
  uint64_t bytes_in, bytes_out, bytes_peer;
  /* batches of jobs whose inputs were copied in while the batch before
   * them ran (CUDA: a copy stream beside the kernels of another buffer set) */
  uint64_t batches_beside;
} schedrun_device_stats_t;

typedef struct schedrun_summary {
  uint32_t runs, jobs, verified, failed;
  uint64_t compile_ns, record_ns, execute_ns, wall_ns;
  uint64_t nodes_created, nodes_updated, nodes_reused;
  uint64_t cache_hits, cache_misses; /* kernel cache, this run */
  int ndevices;
  schedrun_device_stats_t devices[SCHEDRUN_MAX_DEVICES];
} schedrun_summary_t;

typedef struct schedrun_report schedrun_report_t;

/* Runs the program `repeat` times, `jobs` instances each, over `buffer_sets`
 * buffer sets, and verifies `expect` after every job. Returns SCHEDRUN_OK when
 * every job verified, SCHEDRUN_EVERIFY when some did not (the report says which),
 * or another code when the run could not complete (the report, if any, still
 * holds what did). */
SCHEDRUN_EXTERN int schedrun_run(schedrun_t *s, schedrun_program_t *p, const schedrun_run_options_t *opts,
              schedrun_report_t **out, schedrun_error_t *err);

SCHEDRUN_EXTERN const schedrun_summary_t *schedrun_report_summary(const schedrun_report_t *r);
SCHEDRUN_EXTERN size_t schedrun_report_failure_count(const schedrun_report_t *r);
/* "run 2, job 0, device host:1: buffer out[17]: expected 3, got 2" */
SCHEDRUN_EXTERN const char *schedrun_report_failure(const schedrun_report_t *r, size_t i);
/* The contents of `buffer` after (run, job); needs keep_outputs. NULL when
 * absent. */
SCHEDRUN_EXTERN const void *schedrun_report_output(const schedrun_report_t *r, int run, int job,
                                const char *buffer, size_t *bytes);
/* The device (index) that ran (run, job), or -1. */
SCHEDRUN_EXTERN int schedrun_report_device(const schedrun_report_t *r, int run, int job);
/* What happened to (run, job): SCHEDRUN_OK and *out filled, or SCHEDRUN_EINVAL when
 * there is no such job in the report. */
SCHEDRUN_EXTERN int schedrun_report_job(const schedrun_report_t *r, int run, int job, schedrun_job_info_t *out);
/* The summary as one JSON object, the one `sched-run --json` prints (less
 * the command's own keys: status, exit, config, fallback, errors): schema
 * SCHEDRUN_REPORT_SCHEMA, program, verified, runs, jobs, jobs_verified,
 * jobs_failed, compile_ms_sum, record_ms_sum, execute_ms_sum, wall_ms,
 * cache_hits, cache_misses, nodes_created, nodes_updated, nodes_reused,
 * devices (name, jobs, nodes_*, busy_ms, launches, loop_syncs, bytes_in,
 * bytes_out, bytes_peer, batches_beside, loops) and
 * failures. Heap string; free() it. */
#define SCHEDRUN_REPORT_SCHEMA 1
SCHEDRUN_EXTERN char *schedrun_report_json(const schedrun_report_t *r);
/* Writes a Chrome trace event file (opens in Perfetto): one lane per actor
 * and per device, with each job's compile, record and execution spans. */
SCHEDRUN_EXTERN int schedrun_report_write_trace(const schedrun_report_t *r, const char *path, schedrun_error_t *err);
/* Writes program p as it is recorded, as Graphviz DOT, to path ("-":
 * standard output): one cluster per {device, binding slot} a job of report r
 * ran in (r NULL: one, for device 0 and slot 0), with its launches, copies
 * and fills in order, each with its command and record id and its values
 * as recorded for that context's first job; while loops as clusters. */
SCHEDRUN_EXTERN int schedrun_program_write_dot(const schedrun_program_t *p, const schedrun_report_t *r, const char *path,
                                               schedrun_error_t *err);
/* Writes output buffers as NumPy .npy files (dtype and shape set) under dir,
 * created if needed: dir/<buffer>.npy for run 0, job 0, and, when the run
 * has several runs or jobs, dir/run<R>/job<J>/<buffer>.npy for each. Which
 * buffers: every one with all; else those the config marks `output: true`,
 * or, when it marks none, those it has expectations for. The run must have
 * kept its outputs (keep_outputs); jobs that failed are left out. */
SCHEDRUN_EXTERN int schedrun_report_write_npy(const schedrun_report_t *r, const char *dir, int all, schedrun_error_t *err);
/* Whether the writers above could write at path, found out before a run
 * without writing anything: a file (directory 0: the trace, the DOT file;
 * "-" is standard output) or a directory of files (directory 1: the .npy
 * outputs, made with its parents if missing). SCHEDRUN_OK, or SCHEDRUN_EIO
 * saying what stands in the way (a missing or unwritable directory, a
 * directory where a file goes, a file where a directory goes). */
SCHEDRUN_EXTERN int schedrun_check_output(const char *path, int directory, schedrun_error_t *err);
SCHEDRUN_EXTERN void schedrun_report_free(schedrun_report_t **r);

#ifdef __cplusplus
}
#endif
#endif /* SCHEDRUN_H */
