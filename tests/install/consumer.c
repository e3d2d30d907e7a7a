/*
 * A program that embeds libschedrun the way a user would: it includes the C
 * library's <pthread.h> and <sched.h> beside <schedrun.h>, defines functions
 * whose names are common enough to be a library's internals, and runs a config
 * on a thread of its own.
 *
 *   consumer CONFIG    exit 0 when every job of CONFIG verified
 */
#include <pthread.h>
#include <sched.h>
#include <schedrun.h>
#include <stdio.h>
#include <string.h>

/* Names a library could use inside; a static or shared link must keep ours. */
int err_set(int a) { return a + 1; }
int hmap_put(int a) { return a * 2; }
char *xstrdup(const char *s) { return (char *)s; }
double now_ns(void) { return 42.0; }
int msg_encode(void) { return 7; }

struct job {
  const char *config;
  int rc;
  char why[512];
};

static void *run_config(void *arg) {
  struct job *j = arg;
  schedrun_t *s = NULL;
  schedrun_program_t *p = NULL;
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host";
  j->rc = 1;
  if (schedrun_open(&s, &o, &err) != SCHEDRUN_OK || schedrun_program_load_file(s, j->config, &p, &err) != SCHEDRUN_OK ||
      schedrun_run(s, p, NULL, &r, &err) != SCHEDRUN_OK) {
    snprintf(j->why, sizeof j->why, "%s", err.message ? err.message : "failed");
  } else {
    const schedrun_summary_t *sum = schedrun_report_summary(r);
    if (sum->jobs > 0 && sum->verified == sum->jobs && sum->failed == 0) j->rc = 0;
    snprintf(j->why, sizeof j->why, "%u of %u jobs verified", sum->verified, sum->jobs);
  }
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
  schedrun_error_clear(&err);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: consumer CONFIG\n");
    return 2;
  }
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", SCHEDRUN_VERSION_MAJOR, SCHEDRUN_VERSION_MINOR, SCHEDRUN_VERSION_PATCH);
  if (strcmp(schedrun_version(), want) != 0) {
    fprintf(stderr, "consumer: library %s, header %s\n", schedrun_version(), want);
    return 1;
  }
  if (err_set(1) != 2 || hmap_put(3) != 6 || now_ns() != 42.0 || msg_encode() != 7 || !xstrdup("x")) {
    fprintf(stderr, "consumer: its own functions were replaced by the library's\n");
    return 1;
  }
  struct job j = {.config = argv[1]};
  pthread_t t;
  if (pthread_create(&t, NULL, run_config, &j) != 0) return 1;
  pthread_join(t, NULL);
  sched_yield(); /* from <sched.h>: the C library's, untouched */
  printf("consumer: %s (schedrun %s)\n", j.why, schedrun_version());
  return j.rc;
}
