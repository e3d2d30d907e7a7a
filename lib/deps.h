/*
 * Jobs that run after jobs: the client side of job graphs (schedrun_graph_*)
 * and of schedrun_job_options_t.after. Private to lib/.
 *
 * A job that must wait is registered (it has an id, it counts as in flight)
 * but its SUBMIT stays here until every job it runs after has completed: the
 * library sees every completion, exactly once, so it is where a completion
 * can release the jobs after it. A released job's SUBMIT carries the parcels
 * handed to it (device memory its producers left, see
 * actors/execute_handoff.c) and host bytes from host tasks as inputs; a job
 * whose producer failed completes here, with SCHEDRUN_EDEPEND. Everything
 * in a dep_node is read and written under s->lock.
 */
#ifndef SCHEDRUN_LIB_DEPS_H
#define SCHEDRUN_LIB_DEPS_H

#include "lib/api.h"

/* A buffer handed to a node, filled when its producer completes. */
typedef struct dep_in {
  char *name;       /* the consumer's buffer */
  uint32_t buffer;  /* a job's: its index in the program */
  int device;       /* a parcel's device; -1: host bytes in data */
  uint64_t addr;    /* the parcel */
  uint8_t *data;    /* host bytes (from a host task, or a parcel read for one) */
  size_t bytes;
  bool filled;
  /* sent with its producer (lib/deps_group.c): taken from what job
   * kept_job keeps on its device by its park entry kept_park */
  bool kept;
  uint64_t kept_job;
  uint32_t kept_park;
} dep_in;

/* An edge to a node that runs after this one. */
typedef struct dep_out {
  pending_job *to;
  int in;        /* index in to's ins; -1: order only */
  int park;      /* a job producer: the parcel's index in its park list */
  char *from;    /* a host task producer: the buffer it hands on */
} dep_out;

struct dep_node {
  size_t waiting;   /* nodes it runs after, not yet complete */
  int fail_status;  /* the first of them that did not succeed: why */
  char *fail_why;
  char *root;       /* the first failure on the path to it ("job 3 ('a') failed: ...") */
  dep_in *ins;
  size_t nins;
  dep_out *outs;
  size_t nouts, outs_cap;
  bool held;        /* not yet released: SUBMIT (a job) or the task waits here */
  bool is_job, pinned;
  /* sent with the jobs before it, before they completed (lib/deps_group.c):
   * it still waits for them here, and a COMPLETE that comes for it first
   * waits in `early` (its predecessors' outcome decides what it means) */
  bool ahead;
  schedrun_job_result_t *early;
  /* while deps_group_send looks (zero outside it): in the group, edges
   * from the group seen, one of them hands nothing on */
  bool in_group, group_bad;
  size_t group_in;
  msg submit;       /* a job's SUBMIT, sent when it is released */
  schedrun_host_fn fn; /* a host task */
  void *user;
  char *name;       /* the program's or the task's, for messages */
};

/* What a round of completions released, for after the lock: SUBMITs to
 * send, and results (failures decided here) to file like any completion. */
typedef struct deps_work {
  pending_job **ready; /* waiting reached 0 */
  size_t nready, ready_cap;
  msg *send;           /* released jobs' SUBMITs */
  size_t nsend, send_cap;
  pending_job **done;  /* completed here: their results */
  schedrun_job_result_t **results;
  size_t ndone, done_cap;
  bool host_ready;     /* a host task was left for the completion thread */
} deps_work;

dep_node *deps_node_new(void);
void deps_node_free(schedrun_t *s, dep_node *d, bool free_parcels);
/* Adds an edge from pj (creating its node) to `to`; -1 without memory. */
int deps_add_out(pending_job *pj, pending_job *to, int in, int park, const char *from);
/* Makes pj (its node made) run after the jobs `after` (lock held, ids
 * checked by api_after_check): an edge from each still incomplete; the
 * first that completed without success already fails it. */
void deps_after(schedrun_t *s, pending_job *pj, const schedrun_job_t *after, size_t nafter);
/* pj completed with r (under lock): the nodes after it learn it, those
 * with nothing left to wait for go to w->ready; pj's node is freed. */
void deps_completed(schedrun_t *s, pending_job *pj, schedrun_job_result_t *r, deps_work *w);
/* Settles w->ready (under lock): failures complete (into w->done, and on
 * through their own nodes after), jobs are released (w->send), host tasks
 * are left for the completion thread. */
void deps_settle(schedrun_t *s, deps_work *w);
/* The SUBMITs for released job pj (lock held, its SUBMIT filled by
 * release_job): its own, and those of the jobs after it that go with it
 * (lib/deps_group.c), onto w->send. */
void deps_group_send(schedrun_t *s, pending_job *pj, deps_work *w);
/* Moves what was handed to a job into its SUBMIT (lock held): parcels and
 * kept buffers as takes, host bytes as inputs. NULL, or why it cannot run. */
char *deps_release_job(schedrun_t *s, pending_job *pj);
/* A job's result, filed (lock held): what the ahead job's COMPLETE means
 * now. True when r was kept or dropped (the caller files nothing). */
bool deps_early(schedrun_t *s, pending_job *pj, schedrun_job_result_t *r);
/* Notes how long a job of p ran (lock held), for deps_group_send. */
void deps_note_run(schedrun_t *s, const prog_program *p, uint64_t execute_ns);
/* Sends w's SUBMITs (without the lock); a job that cannot be sent (the
 * scheduler shut down) completes with the error, through api_file_results. */
void deps_send(schedrun_t *s, deps_work *w, bool on_completer);
void deps_work_free(deps_work *w);
/* Files w's results and sends its SUBMITs: s->lock held on entry, released
 * on return (lib/api_open.c). */
void api_file_work(schedrun_t *s, deps_work *w, bool on_completer);
/* Whether a job of p is held here (lock held): its program's RELEASE waits. */
bool deps_program_held(schedrun_t *s, const prog_program *p);
/* Sends the RELEASEs that waited for held jobs now gone (no lock held). */
void deps_late_releases(schedrun_t *s);
/* Runs the host tasks left for the completion thread (no lock held). */
void deps_run_host_tasks(schedrun_t *s);
/* A result made here: status, text, the job's numbers; NULL without memory. */
schedrun_job_result_t *deps_result(pending_job *pj, int status, const char *text);
/* Frees a result nobody will file, and the parcels it left (0 entries,
 * kept on their device, free nothing). NULL: nothing. */
void deps_drop_result(schedrun_t *s, schedrun_job_result_t *r);
/* Whether pj's result says it succeeded. */
bool deps_succeeded(const schedrun_job_result_t *r);

#endif
