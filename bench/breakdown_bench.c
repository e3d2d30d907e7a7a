/*
 * Where a job's time goes. Prints key=value lines:
 *   the floor: a raw inproc ZeroMQ round trip between two threads;
 *   the codec: encoding + decoding one SUBMIT, EXECUTE and COMPLETE;
 *   one job's latency split by phase (medians over sequential jobs), from
 *   the job's timeline: client -> scheduler, scheduler work, the RECORD
 *   round trip, scheduler -> execute, execution, execute -> scheduler ->
 *   COMPLETE, and COMPLETE -> the waiting caller.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "actors/actor.h"
#include "lib/result.h"
#include "messages/msg.h"
#include "bench/bench_util.h"
#include "schedrun.h"



/* ---- the floor ---- */

#define PINGS 20000
static void *ponger(void *z) {
  void *in = zmq_socket(z, ZMQ_PULL), *out = zmq_socket(z, ZMQ_PUSH);
  zmq_connect(in, "inproc://ping");
  zmq_connect(out, "inproc://pong");
  char buf[64];
  for (int i = 0; i < PINGS; i++) {
    zmq_recv(in, buf, sizeof buf, 0);
    zmq_send(out, buf, 16, 0);
  }
  zmq_close(in);
  zmq_close(out);
  return NULL;
}

static void floor_bench(void) {
  void *z = zmq_ctx_new();
  zmq_ctx_set(z, ZMQ_IO_THREADS, 0);
  void *out = zmq_socket(z, ZMQ_PUSH), *in = zmq_socket(z, ZMQ_PULL);
  zmq_bind(out, "inproc://ping");
  zmq_bind(in, "inproc://pong");
  pthread_t t;
  pthread_create(&t, NULL, ponger, z);
  static double rtt[PINGS];
  char buf[64] = {0};
  for (int i = 0; i < PINGS; i++) {
    uint64_t t0 = bench_ns();
    zmq_send(out, buf, 16, 0);
    zmq_recv(in, buf, sizeof buf, 0);
    rtt[i] = (bench_ns() - t0) / 1e3;
  }
  pthread_join(t, NULL);
  zmq_close(out);
  zmq_close(in);
  zmq_ctx_term(z);
  printf("zmq_roundtrip_us=%.2f\n", bench_median(rtt, PINGS));
}

/* ---- the codec ---- */

static double codec_ns(msg *m) {
  enum { N = 100000 };
  uint64_t t0 = bench_ns();
  for (int i = 0; i < N; i++) {
    uint8_t *buf;
    size_t len;
    msg_encode(m, &buf, &len, NULL);
    msg d;
    msg_decode(buf, len, &d, NULL);
    msg_free(&d);
    free(buf);
  }
  return (double)(bench_ns() - t0) / N;
}

static void codec_bench(void) {
  msg m;
  msg_init(&m, MSG_SUBMIT, 12345, "client");
  m.body.submit = (msg_submit){1, 2, 3, 0, -1, 0, {NULL, 0}};
  printf("codec_submit_ns=%.0f\n", codec_ns(&m));
  msg_free(&m);
  msg_init(&m, MSG_EXECUTE, 12345, "scheduler");
  m.body.execute.program = 1;
  m.body.execute.sequence = 0x7f0000001000ull;
  m.body.execute.bindings.v = calloc(3, sizeof(uint64_t));
  m.body.execute.bindings.n = 3;
  printf("codec_execute_ns=%.0f\n", codec_ns(&m));
  msg_free(&m);
  msg_init(&m, MSG_COMPLETE, 12345, "scheduler");
  m.body.complete.text = strdup("");
  m.body.complete.t_submit = bench_ns();
  printf("codec_complete_ns=%.0f\n", codec_ns(&m));
  msg_free(&m);
}

/* ---- one job, phase by phase ---- */

static const char empty_program[] =
    "version: 1\nname: empty\n"
    "kernels:\n  empty:\n    params: []\n    source: |\n      extern \"C\" __global__ void empty() {}\n"
    "program:\n  - launch: {kernel: empty, grid: 1, block: 1, args: []}\n";

static void phases(int record_always) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  o.record_always = record_always;
  schedrun_t *s;
  schedrun_error_t err = {0};
  schedrun_program_t *p;
  if (schedrun_open(&s, &o, &err) || schedrun_program_load_string(s, empty_program, "b.yaml", &p, &err)) {
    fprintf(stderr, "%s\n", err.message);
    exit(1);
  }
  enum { N = 2000, PH = 8 };
  static double v[PH][N];
  for (int i = 0; i < N + 20; i++) {
    schedrun_job_t id;
    schedrun_job_result_t *r;
    uint64_t c0 = bench_ns();
    if (schedrun_submit(s, p, NULL, &id, &err) || schedrun_wait(s, id, -1, &r, &err)) {
      fprintf(stderr, "%s\n", err.message);
      exit(1);
    }
    uint64_t c1 = bench_ns();
    if (i >= 20) { /* past compile and the first recording */
      int k = i - 20;
      uint64_t rec_end = r->t_record ? r->t_record + r->info.record_ns : 0;
      uint64_t exec_end = r->t_execute + r->info.execute_ns;
      v[0][k] = (r->t_submit - c0) / 1e3;                                   /* client -> scheduler */
      v[1][k] = ((r->t_record ? r->t_record : r->t_submit) - r->t_submit) / 1e3; /* scheduler work */
      v[2][k] = r->info.record_ns / 1e3;                                    /* RECORD round trip */
      v[3][k] = (r->t_execute - (rec_end ? rec_end : r->t_submit)) / 1e3;    /* -> execute */
      v[4][k] = r->info.execute_ns / 1e3;                                   /* execution */
      v[5][k] = (r->t_done - exec_end) / 1e3;                               /* -> scheduler, COMPLETE */
      v[6][k] = (c1 - r->t_done) / 1e3;                                     /* -> caller */
      v[7][k] = (c1 - c0) / 1e3;
    }
    schedrun_job_result_free(&r);
  }
  const char *names[PH] = {"client_to_scheduler", "scheduler_work",      "record_roundtrip", "to_execute",
                           "execute",             "back_to_scheduler", "complete_to_caller", "total"};
  for (int k = 0; k < PH; k++) printf("phase_%s_%s_us=%.2f\n", record_always ? "always" : "fast", names[k], bench_median(v[k], N));
  schedrun_program_free(&p);
  schedrun_close(&s);
}

int main(void) {
  floor_bench();
  codec_bench();
  phases(1);
  phases(0);
  return 0;
}
