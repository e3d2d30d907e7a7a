/*
 * The compile actor on a test bench: started over a cache directory of its
 * own, driven by messages from a "client" mailbox, and the hook that sees
 * when each compile error leaves the actor (actors/compile_state.h). Also a
 * C++ compiler wrapper that hangs over one kernel, for compiles that must
 * be stopped. Shared by the compile tests.
 */
#ifndef SCHEDRUN_TEST_COMPILE_RIG_H
#define SCHEDRUN_TEST_COMPILE_RIG_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "actors/actor.h"
#include "actors/core.h"
#include "test_util.h"

typedef struct rig {
  schedrun_core core;
  compile_state *st;
  actor_t *actor;
  void *inbox, *out;
  char dir[64];
} rig;

typedef struct kdef {
  const char *name, *params, *source;
} kdef;

/* A fresh cache directory, the "client" mailbox, and the actor with
 * `workers` compile workers. */
void rig_up(rig *r, int workers);
/* Restarts the actor over the same cache directory: memory cache empty. */
void rig_restart(rig *r, int workers);
/* Stops the actor; removes the directory unless keep_dir. */
void rig_down(rig *r, bool keep_dir);
/* COMPILE of n kernels for job (its program: job), on the host target;
 * kernel i is placed at p<job>.yaml:<10i+4>:3. */
void rig_send_compile(rig *r, uint64_t job, const kdef *k, size_t n);
/* The next message to the client, or the test fails. */
void rig_recv(rig *r, msg *m);
/* A STATUS item of the actor. */
int64_t rig_stat(rig *r, const char *name);
/* Fails unless job's compile error left the actor once, with the active
 * compile mode already reset. */
void rig_left_after_reset(uint64_t job);
/* Forgets the errors seen so far (a new scheduler numbers its jobs from 1
 * again). */
void rig_left_forget(void);

/* A C++ compiler wrapper (its path; static storage) that hangs, as
 * `sleep`, over a source holding `marker`, writing its pid to dir/pid; it
 * compiles everything else. dir is made under /tmp. */
const char *rig_slow_cxx(char dir[64], const char *marker);
/* The pid the wrapper wrote, or 0 before it hangs. */
pid_t rig_slow_pid(const char *dir);
/* Whether no process has that pid (killed and reaped). */
bool rig_process_gone(pid_t pid);

#endif
