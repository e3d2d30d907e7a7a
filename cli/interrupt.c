/* See interrupt.h. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "interrupt.h"

#define GRACE_MS 2000 /* running jobs get this long to finish */

/* sched-run is a program: this state is the process's, like its signals */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static schedrun_t *watched;
static _Atomic int first;
static sigset_t signals;

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
    /* the shutdown may take its grace: this thread stays free for a second signal */
    pthread_t t;
    if (pthread_create(&t, NULL, shutdown_main, NULL) == 0) pthread_detach(t);
  }
  return NULL;
}

int interrupt_start(void) {
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
  /* a signal that came before there was a scheduler to shut down */
  if (s && atomic_load(&first)) schedrun_shutdown(s, GRACE_MS, NULL);
  pthread_mutex_unlock(&lock);
}

int interrupt_signal(void) { return atomic_load(&first); }

const char *interrupt_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}
