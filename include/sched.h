/*
 * sched: a GPU work scheduler.
 *
 * Kernels are compiled once into a content-addressed cache, programs are
 * recorded once per execution context into replayable sequences, and jobs are
 * executed on one device or many. This header is the whole public API: every
 * public name starts with `sched_`. Functions that can fail return a status
 * (SCHED_OK or a negative SCHED_E* code) and, where they take one, fill a
 * sched_error_t with a sentence that says what went wrong and where. The library
 * never prints and never exits.
 */
#ifndef SCHED_H
#define SCHED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SCHED_VERSION_MAJOR 0
#define SCHED_VERSION_MINOR 1
#define SCHED_VERSION_PATCH 0

/* ---- status codes ---------------------------------------------------- */

enum sched_status {
  SCHED_OK = 0,
  SCHED_EINVAL = -1,    /* a bad API argument */
  SCHED_ENOMEM = -2,    /* out of memory */
  SCHED_ECONFIG = -3,   /* a config that does not load */
  SCHED_ECOMPILE = -4,  /* a kernel that does not compile */
  SCHED_EVERIFY = -5,   /* outputs that do not match `expect` */
  SCHED_EBACKEND = -6,  /* a device or backend failure */
  SCHED_EPROTO = -7,    /* a malformed message */
  SCHED_ETIMEOUT = -8,  /* a wait that ran out of time */
  SCHED_ECLOSED = -9,   /* the scheduler is closed or closing */
  SCHED_EIO = -10,      /* a file that cannot be read or written */
  SCHED_EINTERNAL = -11 /* a broken invariant inside sched */
};

/* A short, static name for a status code ("config error", ...). */
const char *sched_strerror(int code);

/* Filled by functions that fail. `message` is heap-allocated (one line per
 * problem); release it with sched_error_clear. A zeroed struct is empty. */
typedef struct sched_error {
  int code;
  char *message;
} sched_error_t;

void sched_error_clear(sched_error_t *err);

/* ---- the scheduler ----------------------------------------------------- */

typedef struct sched_options {
  const char *devices;   /* "auto" (default), "host", "host:N", "cuda", "all" */
  const char *cache_dir; /* NULL: $SCHED_CACHE_DIR, else ~/.cache/sched */
  int no_disk_cache;     /* 1: compile into a private temporary cache */
  int compile_workers;   /* threads compiling kernels; 0: one per core */
  int spin_us;           /* how long idle threads poll before sleeping: 0 default
                            (30 us), negative: never (saves CPU, costs latency) */
  int record_always;     /* 1: send every job through the record actor, even when
                            its recording cannot have changed (slower; for diagnosis
                            and for measuring the fast path) */
} sched_options_t;

void sched_options_init(sched_options_t *opts);

typedef struct sched sched_t;

/* Starts the actors (scheduler, compile, record, one execute per device). */
int sched_open(sched_t **out, const sched_options_t *opts, sched_error_t *err);
/* Stops every actor and frees everything; sets *s to NULL. NULL is fine. */
void sched_close(sched_t **s);

int sched_device_count(const sched_t *s);

/* Whether a compile session (the active compile mode) is open right now, and
 * how many kernels the in-memory cache knows. */
int sched_compile_status(sched_t *s, int *active_sessions, int *cache_entries, sched_error_t *err);
/* "host:0", "cuda:1", ...; NULL when i is out of range. */
const char *sched_device_name(const sched_t *s, int i);
/* Why "auto" or "all" fell back to host devices (no driver, no GPU), or NULL. */
const char *sched_device_fallback(const sched_t *s);

/* ---- programs ------------------------------------------------------------ */

typedef struct sched_program sched_program_t;

/* Loads a config (format: CONFIG.md). On failure err->message has one
 * "file:line:column: message" line per problem and the status is
 * SCHED_ECONFIG. */
int sched_program_load_file(sched_t *s, const char *path, sched_program_t **out,
                            sched_error_t *err);
/* `origin` names the text in error messages (a file name, "<string>"). */
int sched_program_load_string(sched_t *s, const char *yaml, const char *origin,
                              sched_program_t **out, sched_error_t *err);
/* Gives the program back: returns at once; its submitted jobs still finish,
 * then everything recorded or allocated for it is released. NULL is fine. */
void sched_program_free(sched_program_t **p);

const char *sched_program_name(const sched_program_t *p);
/* The config's `repeat`, `buffer_sets`, `jobs` and `devices`. */
int sched_program_repeat(const sched_program_t *p);
int sched_program_buffer_sets(const sched_program_t *p);
int sched_program_jobs(const sched_program_t *p);
const char *sched_program_devices(const sched_program_t *p);

/* The recorded state of one execution context {program, device, slot}: its
 * node count and how many nodes its jobs created, updated in place and
 * reused, over its life (a job whose recording cannot have changed reuses it
 * without a RECORD; it counts here too). All zero when nothing was recorded. */
typedef struct sched_counters {
  uint64_t nodes, created, updated, reused;
} sched_counters_t;

int sched_record_counters(sched_t *s, const sched_program_t *p, int device, int slot,
                          sched_counters_t *out, sched_error_t *err);

/* ---- jobs ------------------------------------------------------------------ */

/* A submitted job; 0 is never one. */
typedef uint64_t sched_job_t;

/* A buffer's whole contents for one job, instead of its `init`. */
typedef struct sched_input {
  const char *buffer;
  const void *data;
  size_t bytes; /* count * element size */
} sched_input_t;

typedef struct sched_job_result sched_job_result_t;
/* Called once per job, from sched's completion thread; the callback owns the
 * result (free it with sched_job_result_free) and must not block for long. */
typedef void (*sched_job_callback)(sched_job_t job, sched_job_result_t *result, void *user);

typedef struct sched_job_options {
  int run;          /* the job's $run; it also picks the buffer set: run % buffer_sets */
  int job;          /* the job's $job */
  int device;       /* -1 (default): the scheduler places it; else pinned to that device */
  int keep_outputs; /* 1: every buffer comes back in the result */
  const sched_input_t *inputs;
  size_t ninputs;
  sched_job_callback on_complete; /* NULL: collect the result with sched_wait* */
  void *user;
} sched_job_options_t;

void sched_job_options_init(sched_job_options_t *o);

/* Submits one job of program p and returns at once. Every submitted job
 * completes exactly once: with a result, or with an error status. */
int sched_submit(sched_t *s, sched_program_t *p, const sched_job_options_t *o, sched_job_t *out,
                 sched_error_t *err);
/* Waits up to timeout_ms (-1: no limit) for that job and hands over its result.
 * SCHED_ETIMEOUT leaves it pending; waiting twice for one job, or for a job
 * with a callback, is SCHED_EINVAL. */
int sched_wait(sched_t *s, sched_job_t job, int timeout_ms, sched_job_result_t **out, sched_error_t *err);
/* The next completed job not yet waited for (in completion order). */
int sched_wait_any(sched_t *s, int timeout_ms, sched_job_t *job, sched_job_result_t **out,
                   sched_error_t *err);
/* Waits until every submitted job has completed (results stay collectable). */
int sched_wait_all(sched_t *s, int timeout_ms, sched_error_t *err);
/* Stops taking jobs and drains: jobs not started complete with SCHED_ECLOSED,
 * started ones finish. Afterwards sched_submit answers SCHED_ECLOSED. */
int sched_shutdown(sched_t *s, int timeout_ms, sched_error_t *err);

typedef struct sched_job_info {
  int status; /* SCHED_OK; SCHED_EVERIFY when outputs did not match; else why it failed */
  int device;
  int run, job;
  int verified; /* 1 when it ran and every expectation held */
  uint64_t compile_ns, record_ns, execute_ns;
  uint64_t nodes_created, nodes_updated, nodes_reused;
} sched_job_info_t;

const sched_job_info_t *sched_job_result_info(const sched_job_result_t *r);
/* Why it failed, or which expectation did not hold; "" when it verified. */
const char *sched_job_result_error(const sched_job_result_t *r);
/* A buffer's contents after the job: buffers with expectations always, every
 * buffer with keep_outputs. NULL when absent. */
const void *sched_job_result_output(const sched_job_result_t *r, const char *buffer, size_t *bytes);
void sched_job_result_free(sched_job_result_t **r);

/* ---- runs: a whole config, many jobs, one report ------------------------------ */

typedef struct sched_run_options {
  int repeat;       /* 0: the config's */
  int jobs;         /* 0: the config's */
  int keep_outputs; /* 1: keep every buffer of every job for sched_report_output */
  int timeout_ms;   /* a bound on the whole run; 0: 10 minutes */
  /* called from the calling thread now and then while the run goes on */
  void (*progress)(uint32_t done, uint32_t total, void *user);
  void *progress_user;
} sched_run_options_t;

void sched_run_options_init(sched_run_options_t *opts);

#define SCHED_MAX_DEVICES 64

typedef struct sched_device_stats {
  char name[32];
  uint64_t jobs;
  uint64_t nodes_created, nodes_updated, nodes_reused;
  uint64_t busy_ns; /* time spent executing */
} sched_device_stats_t;

typedef struct sched_summary {
  uint32_t runs, jobs, verified, failed;
  uint64_t compile_ns, record_ns, execute_ns, wall_ns;
  uint64_t nodes_created, nodes_updated, nodes_reused;
  uint64_t cache_hits, cache_misses; /* kernel cache, this run */
  int ndevices;
  sched_device_stats_t devices[SCHED_MAX_DEVICES];
} sched_summary_t;

typedef struct sched_report sched_report_t;

/* Runs the program `repeat` times, `jobs` instances each, over `buffer_sets`
 * buffer sets, and verifies `expect` after every job. Returns SCHED_OK when
 * every job verified, SCHED_EVERIFY when some did not (the report says which),
 * or another code when the run could not complete (the report, if any, still
 * holds what did). */
int sched_run(sched_t *s, sched_program_t *p, const sched_run_options_t *opts,
              sched_report_t **out, sched_error_t *err);

const sched_summary_t *sched_report_summary(const sched_report_t *r);
size_t sched_report_failure_count(const sched_report_t *r);
/* "run 2, job 0, device host:1: buffer out[17]: expected 3, got 2" */
const char *sched_report_failure(const sched_report_t *r, size_t i);
/* The contents of `buffer` after (run, job); needs keep_outputs. NULL when
 * absent. */
const void *sched_report_output(const sched_report_t *r, int run, int job,
                                const char *buffer, size_t *bytes);
/* The device (index) that ran (run, job), or -1. */
int sched_report_device(const sched_report_t *r, int run, int job);
/* What happened to (run, job): SCHED_OK and *out filled, or SCHED_EINVAL when
 * there is no such job in the report. */
int sched_report_job(const sched_report_t *r, int run, int job, sched_job_info_t *out);
/* The summary as one JSON object. Heap string; free() it. */
char *sched_report_json(const sched_report_t *r);
/* Writes a Chrome trace event file (opens in Perfetto): one lane per actor
 * and per device, with each job's compile, record and execution spans. */
int sched_report_write_trace(const sched_report_t *r, const char *path, sched_error_t *err);
void sched_report_free(sched_report_t **r);

#ifdef __cplusplus
}
#endif
#endif /* SCHED_H */
