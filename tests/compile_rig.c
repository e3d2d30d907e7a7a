/* See compile_rig.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "compile_rig.h"

/* Starts the compile actor over r's cache directory, and a client socket to it. */
static void rig_start(rig *r, int workers) {
  schedrun_error_t err = {0};
  r->core.compile_workers = workers;
  r->st = compile_state_new(&r->core);
  assert_int_equal(actor_start(r->core.zctx, &compile_actor_def, ACTOR_COMPILE, r->st, &r->actor, &err), SCHEDRUN_OK);
  /* inproc does not reconnect to a new binding: connect each time */
  r->out = mbox_connect(r->core.zctx, ACTOR_COMPILE, &err);
}

static void rig_stop(rig *r) {
  msg t;
  msg_init(&t, MSG_TERM, 0, "client");
  mbox_send(r->out, &t, NULL);
  msg_free(&t);
  actor_join(&r->actor);
  compile_state_free(r->st);
  mbox_close(r->out);
}

void rig_up(rig *r, int workers) {
  memset(r, 0, sizeof *r);
  snprintf(r->dir, sizeof r->dir, "/tmp/schedrun-cc-XXXXXX");
  assert_non_null(mkdtemp(r->dir));
  r->core.zctx = zmq_ctx_new();
  r->core.cache_dir = strdup(r->dir);
  schedrun_error_t err = {0};
  r->inbox = mbox_bind(r->core.zctx, "client", &err);
  rig_start(r, workers);
}

/* Restarts the actor over the same cache directory: memory cache empty. */
void rig_restart(rig *r, int workers) {
  rig_stop(r);
  rig_start(r, workers);
}

void rig_down(rig *r, bool keep_dir) {
  rig_stop(r);
  mbox_close(r->inbox);
  zmq_ctx_term(r->core.zctx);
  if (!keep_dir) fs_remove_tree(r->dir);
  free(r->core.cache_dir);
}


void rig_send_compile(rig *r, uint64_t job, const kdef *k, size_t n) {
  msg m;
  msg_init(&m, MSG_COMPILE, job, "client");
  m.body.compile.program = job;
  m.body.compile.target = strdup("host");
  m.body.compile.arch = strdup("x86_64");
  m.body.compile.kernels.v = calloc(n, sizeof(msg_kernel));
  for (size_t i = 0; i < n; i++) {
    char where[64];
    snprintf(where, sizeof where, "p%llu.yaml:%zu:3", (unsigned long long)job, 10 * i + 4);
    m.body.compile.kernels.v[i] = (msg_kernel){strdup(k[i].name), strdup(k[i].name), strdup(k[i].params),
                                               strdup(k[i].source), strdup(where), strdup("k.cu"), 1};
    m.body.compile.kernels.n++;
  }
  assert_int_equal(mbox_send(r->out, &m, NULL), SCHEDRUN_OK);
  msg_free(&m);
}

void rig_recv(rig *r, msg *m) {
  schedrun_error_t err = {0};
  if (mbox_recv(r->inbox, 120000, m, NULL, &err)) fail_msg("no reply: %s", err.message);
}

int64_t rig_stat(rig *r, const char *name) {
  msg q;
  msg_init(&q, MSG_STATUS, 999, "client");
  mbox_send(r->out, &q, NULL);
  msg_free(&q);
  msg m;
  rig_recv(r, &m);
  assert_int_equal(m.type, MSG_STATUS);
  int64_t v = -1;
  for (size_t i = 0; i < m.body.status.items.n; i++)
    if (!strcmp(m.body.status.items.v[i].name, name)) v = m.body.status.items.v[i].value;
  msg_free(&m);
  return v;
}

/* The moments compile errors left the actor (actors/compile_state.h's hook):
 * each error's job, and whether the active compile mode was reset by then. */
static pthread_mutex_t left_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uint64_t job;
  bool reset;
} left[64];
static int nleft;

void schedrun_test_compile_error_leaves(uint64_t job, bool mode_reset) {
  pthread_mutex_lock(&left_lock);
  if (nleft < 64) {
    left[nleft].job = job;
    left[nleft++].reset = mode_reset;
  }
  pthread_mutex_unlock(&left_lock);
}

/* Job's error left the actor once, with the mode already reset. */
void rig_left_forget(void) {
  pthread_mutex_lock(&left_lock);
  nleft = 0;
  pthread_mutex_unlock(&left_lock);
}

void rig_left_after_reset(uint64_t job) {
  int seen = 0;
  bool reset = true;
  pthread_mutex_lock(&left_lock);
  for (int i = 0; i < nleft; i++)
    if (left[i].job == job) {
      seen++;
      reset = reset && left[i].reset;
    }
  pthread_mutex_unlock(&left_lock);
  if (seen != 1) fail_msg("job %llu's compile error left the actor %d times, not once", (unsigned long long)job, seen);
  if (!reset) fail_msg("job %llu's compile error left before the active compile mode was reset", (unsigned long long)job);
}

const char *rig_slow_cxx(char dir[64], const char *marker) {
  snprintf(dir, 64, "/tmp/schedrun-slowcc-XXXXXX");
  if (!mkdtemp(dir)) fail_msg("mkdtemp: cannot make a directory under /tmp");
  static char wrapper[128];
  snprintf(wrapper, sizeof wrapper, "%s/slow-c++", dir);
  FILE *f = fopen(wrapper, "w");
  assert_non_null(f);
  /* the last argument is the source; `exec sleep` keeps the pid written;
   * RIG_VERSION_DELAY (seconds) makes `--version` slow to answer */
  fprintf(f,
          "#!/bin/sh\n"
          "case \"$1\" in --version) [ -n \"$RIG_VERSION_DELAY\" ] && sleep \"$RIG_VERSION_DELAY\";; esac\n"
          "for a in \"$@\"; do src=\"$a\"; done\n"
          "case \"$src\" in *.cpp) if grep -q '%s' \"$src\"; then echo $$ > '%s/pid.tmp'; "
          "mv '%s/pid.tmp' '%s/pid'; exec sleep 240; fi;; esac\n"
          "exec c++ \"$@\"\n",
          marker, dir, dir, dir);
  fclose(f);
  chmod(wrapper, 0755);
  return wrapper;
}

pid_t rig_slow_pid(const char *dir) {
  char path[128];
  snprintf(path, sizeof path, "%s/pid", dir);
  char *text = tu_slurp(path, NULL);
  pid_t pid = text ? (pid_t)atol(text) : 0;
  free(text);
  return pid;
}

bool rig_process_gone(pid_t pid) { return kill(pid, 0) != 0; }
