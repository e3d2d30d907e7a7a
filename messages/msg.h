/*
 * The messages actors exchange, and their msgpack codec.
 *
 * Every message is an envelope, the msgpack array [v, type, job, from, body];
 * the body is the array of its type's fields, in the order of its schema. Messages are self-contained: ids, sizes,
 * strings and bytes, plus device handles (buffer addresses, sequence handles)
 * that are meaningful to the backend, and tickets of lent bytes (below),
 * never a pointer into another actor's memory. All strings and arrays of a decoded message are heap-allocated and
 * owned by it; msg_free releases them.
 *
 * One schema table per body drives both the encoder and the decoder, so the two
 * cannot drift apart. The decoder is strict: a body has exactly its schema's
 * number of fields, each of its type, and lengths are bounded.
 */
#ifndef SCHEDRUN_MSG_H
#define SCHEDRUN_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "schedrun.h"

/* 2: envelope and bodies are arrays in schema order; 3: SUBMIT_MANY hands
 * buffers on; 4: CANCEL of one compile session */
#define MSG_VERSION 4
#define MSG_MAX_BYTES (1u << 30)     /* a whole message */
#define MSG_MAX_STRING (16u << 20)   /* one string (kernel sources, logs) */
#define MSG_MAX_ARRAY (1u << 22)     /* elements of one array */

typedef enum msg_type {
  MSG_SUBMIT = 1,
  MSG_COMPILE,
  MSG_COMPILED,
  MSG_RECORD,
  MSG_RECORDED,
  MSG_EXECUTE,
  MSG_EXECUTED,
  MSG_COMPLETE,
  MSG_ERROR,
  MSG_STATUS,
  MSG_TERM,
  MSG_RELEASE,
  MSG_CANCEL,
  MSG_SUBMIT_MANY,
  MSG_EXECUTE_MANY,
  MSG_COMPLETE_MANY,
  MSG_EXECUTED_MANY,
  MSG_QUEUED,
  MSG_TICK, /* an actor's own timer (actor_wake_at) */
  MSG__END
} msg_type;

const char *msg_type_name(int type);

typedef struct msg_bytes { uint8_t *data; size_t len; } msg_bytes;
/* A column of integers: on the wire one msgpack bin of 8 bytes per
 * element, little-endian, so that a batch's columns cost a copy each, not
 * a msgpack value per job. */
typedef struct msg_u64s { uint64_t *v; size_t n; } msg_u64s;
typedef struct msg_strs { char **v; size_t n; } msg_strs;

/* A kernel to compile: its source and how to call it. */
typedef struct msg_kernel {
  char *name;   /* the config's key */
  char *entry;  /* extern "C" function */
  char *params; /* "f32,ptr,ptr,i32" */
  char *source;
  char *where;  /* "file:line:col" of the kernel in its config */
  char *source_file;   /* the file the source's lines come from */
  uint32_t first_line; /* line of the source's first line in source_file */
} msg_kernel;
typedef struct msg_kernels { msg_kernel *v; size_t n; } msg_kernels;

/* A compiled kernel: its cache key and artifact. */
typedef struct msg_module {
  char *name;
  char *key;  /* 64 hex digits */
  char *path; /* artifact in the cache */
} msg_module;
typedef struct msg_modules { msg_module *v; size_t n; } msg_modules;

/* A buffer's contents: a job's input (replacing the buffer's `init`) or a
 * buffer read back after it ran. */
typedef struct msg_output { uint32_t buffer; msg_bytes data; } msg_output;
typedef struct msg_outputs { msg_output *v; size_t n; } msg_outputs;

typedef struct msg_stat { char *name; int64_t value; } msg_stat;
typedef struct msg_stats { msg_stat *v; size_t n; } msg_stats;

/* Counters of one RECORD: nodes created, updated in place, reused as they were. */
typedef struct msg_counts { uint32_t created, updated, reused; } msg_counts;

/* Hand-offs kept on the device (a job graph's steps sent together): a park
 * entry with MSG_PARK_LOCAL set leaves the buffer with its device's execute
 * actor, for a job after it there, instead of in a parcel that COMPLETE
 * returns (its place in COMPLETE's parcels is 0); a take
 * {buffer | k << 32, MSG_TAKE_LOCAL, producer job} fills the buffer from
 * what that job left there by its park entry k. */
#define MSG_PARK_LOCAL (1ull << 63)
#define MSG_TAKE_LOCAL 0xffffffffull
#define MSG_TAKE_BUFFER(v) ((uint32_t)(v))
#define MSG_TAKE_PARK(v) ((uint32_t)((v) >> 32))
/* A take {buffer | MSG_TAKE_RESIDENT, device, address} fills a resident
 * buffer from its copy on another device (the buffer set moves there):
 * copied, never freed (it is that context's buffer, not a parcel). */
#define MSG_TAKE_RESIDENT (1ull << 62)
/* A take {buffer | MSG_TAKE_BOUND, registration, address} binds the buffer
 * to memory the caller registered (core_buffer). Host memory (address 0):
 * the buffer starts from it, and is written back into it once the job has
 * run. Memory the devices reach at `address`: the buffer is that memory, in
 * the job's bound execution context (scheduler_bound_slot). */
#define MSG_TAKE_BOUND (1ull << 61)
/* msg_execute.keep and EXECUTE_MANY's keeps: the job's outputs come back
 * (every buffer); its resident buffers stay as the last job on the device
 * left them (set by the scheduler only). */
#define MSG_KEEP_OUTPUTS 1u
#define MSG_KEEP_RESIDENT 2u

typedef struct msg_submit {
  uint64_t program;
  uint32_t run, job_index, slot;
  int32_t device; /* -1: the scheduler places it */
  uint32_t keep;  /* 1: read back every buffer */
  msg_outputs inputs; /* contents for some buffers, instead of their init */
  uint64_t deadline;  /* CLOCK_MONOTONIC ns by which the job must complete; 0: none */
  uint32_t record_only; /* 1: compile and record, and complete without running */
  /* hand-offs between jobs (a job graph): buffers to leave on the device
   * after the job, one parcel each (their addresses come back in COMPLETE);
   * and parcels to fill buffers from before it, as {buffer, device, address}
   * triples, each consumed (freed) by this job */
  msg_u64s park, takes;
} msg_submit;

/* SUBMIT for several jobs in one message (schedrun_submit_many, and the
 * SUBMITs a queue gathers): job k has id `job` + k of the envelope. In
 * columns, as EXECUTE_MANY: one element per job in each, the fields of
 * msg_submit (devices as two's complement, -1 all ones); inputs in job
 * order, each with its job's position in input_jobs; hand-offs too, each
 * park entry and take triple with its job's position (park_jobs,
 * take_jobs): a graph's steps sent together. */
typedef struct msg_submit_many {
  msg_u64s programs, runs, job_indexes, slots, devices, keeps, deadlines, record_onlys;
  msg_u64s input_jobs;
  msg_outputs inputs;
  /* hand-offs, as in EXECUTE_MANY: each entry with its job's position */
  msg_u64s park_jobs, park, take_jobs, takes;
} msg_submit_many;
#define MSG_SUBMIT_COLUMNS 8 /* programs ... record_onlys */
/* The columns of b, in the order above. */
void msg_submit_columns(msg_submit_many *b, msg_u64s *cols[MSG_SUBMIT_COLUMNS]);
/* A SUBMIT's column values, in that order. */
void msg_submit_values(const msg_submit *sb, uint64_t v[MSG_SUBMIT_COLUMNS]);
/* Room for n jobs and nin inputs in an empty b: SCHEDRUN_OK, or
 * SCHEDRUN_ENOMEM (b then holds what msg_free frees). */
int msg_submit_many_reserve(msg_submit_many *b, size_t n, size_t nin);
/* Adds sb as b's next job, within what was reserved, moving its inputs
 * (sb then has none); sb hands nothing on (no park, no takes). */
void msg_submit_many_add(msg_submit_many *b, msg_submit *sb);
/* Room in an empty b's hand-off lists for npark park entries and ntakes
 * take values: SCHEDRUN_OK, or SCHEDRUN_ENOMEM (b then holds what msg_free
 * frees). */
int msg_submit_many_reserve_handoffs(msg_submit_many *b, size_t npark, size_t ntakes);
/* msg_submit_many_add for a job that hands buffers on, within what was
 * reserved: its park entries and takes join b's lists, owned by its
 * position; sb then has none. */
void msg_submit_many_add_handing(msg_submit_many *b, msg_submit *sb);
/* Job k of b as a SUBMIT, without inputs; a device that is not an int32
 * becomes INT32_MAX (no such device). */
void msg_submit_many_get(const msg_submit_many *b, size_t k, msg_submit *sb);

typedef struct msg_compile {
  uint64_t program;
  char *target, *arch;
  msg_kernels kernels;
} msg_compile;

typedef struct msg_compiled {
  uint64_t program;
  char *target;
  msg_modules modules;
  uint32_t hits, misses;
} msg_compiled;

typedef struct msg_record {
  uint64_t program;
  uint32_t device, slot, run, job_index;
  msg_u64s bindings; /* device address of each buffer, in program order */
  msg_modules modules;
} msg_record;

typedef struct msg_recorded {
  uint64_t program;
  uint32_t device, slot;
  uint64_t sequence; /* backend handle of the recorded sequence */
  msg_counts counts;
} msg_recorded;

typedef struct msg_execute {
  uint64_t program;
  uint32_t device, slot;
  uint64_t sequence;
  msg_u64s bindings;
  uint32_t keep;
  msg_outputs inputs;
  /* what the execute actor needs to answer the client itself (COMPLETE goes
   * straight there; the scheduler gets a small EXECUTED) */
  char *client;
  uint32_t run, job_index;
  uint64_t compile_ns, record_ns;
  msg_counts counts;
  uint32_t cache_hits, cache_misses;
  uint64_t t_submit, t_compile, t_record;
  uint64_t deadline; /* the job's (msg_submit.deadline): the device is given until then */
  msg_u64s park, takes; /* as in msg_submit */
} msg_execute;

/* EXECUTE for a run of jobs of one execution context that replay its
 * recording as it is (no RECORD before them; each job's counts are
 * {0, 0, nodes}). What they share is sent once; what differs per job is in
 * columns, one element per job in batch order: job k has id jobs.v[k]. The
 * envelope's job is the first one's. Inputs are listed in job order, each
 * with the batch position of its job in input_jobs. */
typedef struct msg_execute_many {
  uint64_t program;
  uint32_t device, slot;
  uint64_t sequence;
  msg_u64s bindings;
  char *client;
  uint32_t nodes;
  msg_u64s jobs, runs, job_indexes, keeps, t_submits, deadlines;
  msg_u64s input_jobs;
  msg_outputs inputs;
  /* hand-offs (msg_submit.park and .takes), each entry with its job's batch
   * position: take_jobs has one element per {buffer, device, address}
   * triple of takes */
  msg_u64s park_jobs, park, take_jobs, takes;
} msg_execute_many;

/* The successful COMPLETEs of several jobs run by one device, to their
 * client, in columns as in EXECUTE_MANY (outputs in job order, each with its
 * job's batch position in output_jobs). A job that failed is answered alone,
 * with COMPLETE. */
typedef struct msg_complete_many {
  uint64_t program;
  int32_t device;
  uint32_t nodes;
  msg_u64s jobs, runs, job_indexes, t_submits, t_executes, t_dones, execute_ns;
  msg_u64s output_jobs;
  msg_outputs outputs;
  /* hand-offs: each job's counts (columns), and the parcels left, each
   * with its job's batch position */
  msg_u64s handoffs_local, handoffs_copied;
  msg_u64s parcel_jobs, parcels;
  /* each job's traffic, as in msg_complete */
  msg_u64s handoffs_peer, bytes_in, bytes_out, bytes_peer;
} msg_complete_many;

/* The jobs of EXECUTE_MANYs that completed, to the scheduler; each job that
 * failed came back as its own ERROR. */
typedef struct msg_executed_many {
  uint64_t program;
  uint32_t device;
  msg_u64s jobs;
  msg_u64s exec_ns; /* each job's execute time, for the performance models */
} msg_executed_many;

typedef struct msg_executed {
  uint64_t program;
  uint32_t device;
  msg_outputs outputs;
  uint64_t exec_start; /* CLOCK_MONOTONIC ns */
  uint64_t exec_ns;
} msg_executed;

typedef struct msg_complete {
  int32_t status;
  uint64_t program;
  int32_t device;
  uint32_t run, job_index;
  msg_outputs outputs;
  uint64_t compile_ns, record_ns, execute_ns;
  msg_counts counts;
  uint32_t cache_hits, cache_misses;
  char *text; /* the error, "" when none */
  /* the job's timeline (CLOCK_MONOTONIC ns; 0 for a phase it did not have) */
  uint64_t t_submit, t_compile, t_record, t_execute, t_done;
  /* {tag, start, end} of each node of the replay, for the first jobs of a
   * device whose backend times its nodes; empty otherwise */
  msg_u64s launches;
  /* the parcels the job left on its device (msg_submit.park, in order), and
   * how its taken parcels arrived: on the device they were left on, or
   * copied from another device or through the host */
  msg_u64s parcels;
  uint32_t handoffs_local, handoffs_copied;
  /* taken from another device straight across (no copy through the host);
   * and the bytes the job moved: host to device (init, inputs, the second
   * half of a hand-off through the host), device to host (outputs read back,
   * the first half), device to device across devices */
  uint32_t handoffs_peer;
  uint64_t bytes_in, bytes_out, bytes_peer;
} msg_complete;

typedef struct msg_error {
  int32_t code;
  char *origin;      /* the actor that failed */
  uint64_t job;
  char *text;
  msg_strs teardown; /* steps run before the error was forwarded */
} msg_error;

typedef struct msg_status { msg_stats items; } msg_status;
typedef struct msg_release { uint64_t program; } msg_release;
/* Stop compiles. Job 0 (a shutdown): every active session is torn down and
 * answered with ERROR (SCHEDRUN_ECLOSED). Job J: the session of job J only
 * (its jobs' deadlines passed while it compiled, after waited_ms), answered
 * at once with ERROR `code`; its compiles that no other session waits for
 * are stopped. */
typedef struct msg_cancel {
  uint64_t program;
  int32_t code;
  uint64_t waited_ms;
} msg_cancel;

typedef struct msg {
  uint32_t v;
  int type; /* msg_type */
  uint64_t job;
  char *from;
  union {
    msg_submit submit;
    msg_compile compile;
    msg_compiled compiled;
    msg_record record;
    msg_recorded recorded;
    msg_execute execute;
    msg_executed executed;
    msg_complete complete;
    msg_error error;
    msg_status status;
    msg_release release;
    msg_cancel cancel;
    msg_submit_many submit_many;
    msg_execute_many execute_many;
    msg_complete_many complete_many;
    msg_executed_many executed_many;
  } body;
} msg;

/* A zeroed message of `type` from `from` (copied). */
int msg_init(msg *m, int type, uint64_t job, const char *from);
void msg_free(msg *m);

/*
 * Lent bytes. Between actors of one process a job's inputs and outputs do
 * not travel inside their messages: bytes of MSG_LEND_MIN or more are lent
 * instead. The encoder enters the block in this process's table of lent
 * blocks, writes a msgpack extension (type MSG_EXT_LENT, 16 bytes: the
 * ticket and the length, little-endian) where the bin would be, and takes
 * the block out of the message it encodes (its pointer becomes NULL: the
 * message no longer owns it). The decoder claims the ticket back and the
 * decoded message owns the block, the same pointer: no copy on either side,
 * whatever the size, and a message stays small. A message whose bytes die
 * without being decoded (it could not be sent, its receiver stopped) gives
 * its blocks back with msg_reclaim. Tickets are never reused and the decoder
 * only takes blocks the table holds, so bytes naming a ticket that is not
 * lent (forged, or a message decoded twice) are refused, never followed.
 * Bytes for another process (MPI ranks) are never lent: msg_encode writes
 * them in the message, and msg_decode refuses a lent block.
 */
#define MSG_LEND_MIN 4096u
#define MSG_EXT_LENT 1
/* Enters data (malloc'ed, len bytes) in the table: its ticket, or 0
 * without memory. */
uint64_t msg_lend(uint8_t *data, size_t len);
/* Takes a lent block out of the table: its bytes, now the caller's; NULL
 * when the ticket is not lent, or was lent with another length. */
uint8_t *msg_claim(uint64_t ticket, size_t len);
/* Frees a lent block that was never claimed (nothing when it was). */
void msg_reclaim(uint64_t ticket);
/* Blocks lent and not yet claimed or reclaimed, in this process. */
size_t msg_lent_count(void);
/* A job's bytes: len bytes, from the blocks of that length freed before
 * (msg_bytes_free keeps up to 64 MiB of them, so that blocks made and freed
 * job after job keep their pages), else malloc'ed. Either way a malloc'ed
 * block: free() is always right for it. */
uint8_t *msg_bytes_alloc(size_t len);
/* Frees a malloc'ed block of at least len bytes (data of a msg_bytes of
 * that length), keeping it for msg_bytes_alloc when there is room. */
void msg_bytes_free(uint8_t *data, size_t len);

/* The tickets one encoding lent, and where in the message each block was. */
typedef struct msg_lent { msg_bytes *slot; uint64_t ticket; } msg_lent;
typedef struct msg_lending { msg_lent *v; size_t n, cap; } msg_lending;

/* Encodes m into a malloc'ed buffer, every byte inside it (for another
 * process). Fails only on a bad type, a limit or no memory. */
int msg_encode(const msg *m, uint8_t **out, size_t *len, schedrun_error_t *err);
/* Encodes m at the end of a growable buffer (*buf of *cap bytes, *len used)
 * for a receiver in this process: its bytes of MSG_LEND_MIN or more are lent,
 * listed in *lent (emptied first), and leave m. On failure nothing is lent,
 * m holds what it held and the buffer what it held. A block already taken
 * out of m (a message sent once already) makes it fail. */
int msg_encode_append(msg *m, uint8_t **buf, size_t *len, size_t *cap, msg_lending *lent, schedrun_error_t *err);
/* m's bytes were lent to `data` (msg_encode_append), which will not be sent:
 * claims them back into m, where they were. */
void msg_unlend(msg *m, const void *data, size_t len);
/* Puts every block `lent` lists back in the message it was lent from (that
 * encoding's bytes will not be sent), and empties the list. */
void msg_lending_return(msg_lending *lent);
/* Gives back every block `lent` lists (freeing it when it was never claimed). */
void msg_lending_reclaim(const msg_lending *lent);
/* Decodes data into m. Malformed input gives SCHEDRUN_EPROTO and a sentence naming
 * the field; m is then empty (nothing to free, but msg_free is harmless).
 * msg_decode refuses lent blocks (bytes from another process);
 * msg_decode_local claims them (bytes msg_encode_append made here). */
int msg_decode(const void *data, size_t len, msg *m, schedrun_error_t *err);
int msg_decode_local(const void *data, size_t len, msg *m, schedrun_error_t *err);

/* What went through ZeroMQ sockets in this process, by type: for each
 * message a sender handed to a socket (msg_tally_sent), the jobs it carried
 * (a batch's jobs, or its own job). Relaxed counts, any thread; for tests
 * that check every job's messages took the one transport. */
void msg_tally_sent(const msg *m);
/* The same for a message of `type` carrying `jobs` that was sent as bytes. */
void msg_tally_add(int type, uint64_t jobs);
uint64_t msg_tally_jobs(int type);
/* Messages of `type` a socket could not deliver (no one receiving: the peer
 * had stopped, or the send timed out). */
void msg_tally_unsent(int type);
uint64_t msg_tally_unsent_count(int type);

#endif
