/* See interrupt.h. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "interrupt.h"

#define GRACE_MS 2000 /* running jobs get this long to finish */
#define TIMEOUT_SLACK_MS 500 /* past --timeout, the process ends whatever it is doing */

/* sched-run is a program: this state is the process's, like its signals */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static schedrun_t *watched;
static _Atomic int first;
static _Atomic int writing; /* the run is over: outputs are being written */
static sigset_t signals;
static struct timespec started; /* CLOCK_MONOTONIC at interrupt_start */
static int timeout_s;
static _Atomic(const char *) phase = "starting";

/* Shuts the watched scheduler down, holding the lock so that it is not
 * closed meanwhile (interrupt_watch(NULL) waits for this). */
static void *shutdown_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  if (watched) schedrun_shutdown(watched, GRACE_MS, NULL);
  pthread_mutex_unlock(&lock);
  return NULL;
}

static void *signal_main(void *arg) {
  (void)arg;
  for (;;) {
    int sig;
    if (sigwait(&signals, &sig) != 0) continue;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&first, &expected, sig)) _exit(128 + expected); /* a second signal */
    if (atomic_load(&writing)) {
      /* nothing is left to shut down, and a write may wait for a reader
       * that never comes (a FIFO): an output is written whole or not at all */
      fprintf(stderr, "sched-run: interrupted by %s while %s\n", interrupt_name(sig), atomic_load(&phase));
      _exit(128 + sig);
    }
    /* the shutdown may take its grace: this thread stays free for a second signal */
    pthread_t t;
    if (pthread_create(&t, NULL, shutdown_main, NULL) == 0) pthread_detach(t);
  }
  return NULL;
}

static int64_t ms_since_start(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)(now.tv_sec - started.tv_sec) * 1000 + (now.tv_nsec - started.tv_nsec) / 1000000;
}

/* The hard bound: --timeout (and a little slack for the run to end on its
 * own and say so) after the process started, it ends. */
static void *deadline_main(void *arg) {
  (void)arg;
  struct timespec at = started;
  int64_t ms = (int64_t)timeout_s * 1000 + TIMEOUT_SLACK_MS;
  at.tv_sec += (time_t)(ms / 1000);
  at.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (at.tv_nsec >= 1000000000L) {
    at.tv_sec++;
    at.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR) {
  }
  fprintf(stderr, "sched-run: timed out: --timeout %d s ran out while %s\n", timeout_s, atomic_load(&phase));
  _exit(4); /* EXIT_OTHER */
}

int interrupt_bound(int seconds) {
  timeout_s = seconds;
  pthread_t t;
  if (pthread_create(&t, NULL, deadline_main, NULL) != 0) return -1;
  pthread_detach(t);
  return 0;
}

int interrupt_left_ms(void) {
  int64_t left = (int64_t)timeout_s * 1000 - ms_since_start();
  return left < 1 ? 1 : left > INT32_MAX ? INT32_MAX : (int)left;
}

void interrupt_phase(const char *what, int outputs) {
  atomic_store(&phase, what);
  atomic_store(&writing, outputs);
}

int interrupt_start(void) {
  clock_gettime(CLOCK_MONOTONIC, &started);
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  if (pthread_sigmask(SIG_BLOCK, &signals, NULL) != 0) return -1;
  pthread_t t;
  if (pthread_create(&t, NULL, signal_main, NULL) != 0) return -1;
  pthread_detach(t);
  return 0;
}

void interrupt_watch(schedrun_t *s) {
  pthread_mutex_lock(&lock);
  watched = s;
  if (s) atomic_store(&phase, "running the jobs"); /* the config is loaded and the devices are up */
  /* a signal that came before there was a scheduler to shut down */
  if (s && atomic_load(&first)) schedrun_shutdown(s, GRACE_MS, NULL);
  pthread_mutex_unlock(&lock);
}

int interrupt_signal(void) { return atomic_load(&first); }

const char *interrupt_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}
