/*
 * The double's streams: work queued by a launch runs on the stream's own
 * thread after the call that queued it has returned, in order per stream and
 * concurrently across streams, as on a device.
 *
 * Every stream (and each context's legacy default stream, a NULL CUstream)
 * has a queue and a thread, started at its first work. A call that the
 * documentation says may wait for the device (a synchronous copy or memset,
 * cuStreamSynchronize, cuMemFree, cuModuleUnload, the last release of a
 * primary context) waits here, with dbl_lock let go meanwhile so that the
 * stream's thread and other callers go on. cuStreamQuery says
 * CUDA_ERROR_NOT_READY while its stream has work.
 *
 * A kernel's fault (a block whose barrier not all its threads reach, a copy
 * node over freed memory) does not fail the launch that queued it: it is
 * kept on the context (sticky) and returned by every later launch, query,
 * synchronize and copy there, and the context's queued work is dropped, as
 * a driver does until the context is destroyed.
 *
 * A kernel named in SCHEDRUN_CUDA_DOUBLE_FAULT faults (without running) as
 * a wild address would on a device (the double's kernels run in the
 * process: a real wild pointer would end it).
 *
 * A kernel named in SCHEDRUN_CUDA_DOUBLE_HANG never returns: its stream
 * stops there for good (without running anything, so no core is spent). A
 * later call that would wait for that context cannot return: the double
 * says which call and which kernel on standard error and ends the process
 * with status 87, so that a test sees at once what on a GPU would hang.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "double.h"

pthread_mutex_t dbl_qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER; /* some work finished, or a stream hung */

struct ditem {
  struct ditem *next;
  dwork w;      /* a kernel, copy or fill, when graph and event are NULL */
  dexec *graph; /* a graph launch: what was instantiated, as it was at launch */
  devent *event; /* a record of an event: its number event_n */
  uint64_t event_n;
  devent *wait;  /* cuStreamWaitEvent: the stream waits until wait's record wait_n has run */
  uint64_t wait_n;
};

/* Whether `list` (NAME[=V],...) names entry: its V (or "") then, else NULL. */
static const char *named(const char *list, const char *entry) {
  size_t n = strlen(entry);
  for (const char *p = list; p && *p;) {
    size_t k = strcspn(p, ",");
    if (k >= n && strncmp(p, entry, n) == 0 && (k == n || p[n] == '=')) return k == n ? "" : p + n + 1;
    p += k + (p[k] == ',');
  }
  return NULL;
}

CUresult dbl_run_kernel(const dwork *w) {
  const dfunc *f = w->u.k.f; /* alive: its module's unload waits for the context's work */
  if (named(dbl_hang_list, f->k->name)) return DBL_HUNG;
  const char *code = named(dbl_fault_list, f->k->name);
  if (code) return *code ? (CUresult)atoi(code) : CUDA_ERROR_ILLEGAL_ADDRESS; /* as an illegal address would */
  char text[512];
  struct timespec c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  if (f->run(w->u.k.grid, w->u.k.block, w->u.k.args, w->u.k.shared, text, sizeof text) != 0) {
    /* a GPU would hang or compute garbage; the double says which kernel, and the context has faulted */
    fprintf(stderr, "cuda-double: %s\n", text);
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  if (dbl_slowdown > 1) {
    /* a slower device: the kernel holds its stream for `slowdown` times the
     * CPU time it took (this thread's own, whatever else the machine runs) */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) * 1e9 + (double)(c1.tv_nsec - c0.tv_nsec);
    double more = cpu * (dbl_slowdown - 1);
    struct timespec t = {(time_t)(more / 1e9), (long)fmod(more, 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
  }
  return CUDA_SUCCESS;
}

dstream *dbl_stream(CUstream s, dctx *x) { return s ? (dstream *)s : &x->null_stream; }

static void item_free(struct ditem *it) {
  if (it->graph) dbl_exec_snapshot_free(it->graph);
  free(it);
}

/* What hung the context, for the message: the first kernel of the item. */
static const char *hung_name(const struct ditem *it) {
  if (!it->graph) return it->w.u.k.f->k->name;
  const char *name = "a kernel";
  dbl_exec_first_kernel(it->graph, &name);
  return name;
}

static void *stream_main(void *arg) {
  dstream *st = arg;
  dctx *x = st->ctx;
  pthread_mutex_lock(&dbl_qlock);
  for (;;) {
    while (!st->head && !st->destroyed) pthread_cond_wait(&st->more, &dbl_qlock);
    if (!st->head) break; /* destroyed, and its work done */
    struct ditem *it = st->head; /* stays queued (counted pending) while it runs */
    if (it->wait) {
      /* work queued on another stream first; a kernel there that never
       * returns holds this stream too, as on a device */
      devent *ev = it->wait;
      while (ev->done < it->wait_n && ev->ctx->sticky == CUDA_SUCCESS && x->sticky == CUDA_SUCCESS)
        pthread_cond_wait(&g_done, &dbl_qlock);
      if (--ev->queued == 0 && ev->destroyed) free(ev);
      it->wait = NULL;
    }
    bool run = x->sticky == CUDA_SUCCESS;
    pthread_mutex_unlock(&dbl_qlock);
    CUresult r = !run || it->event ? CUDA_SUCCESS : it->graph ? dbl_exec_run(it->graph) : dbl_run_step(&it->w);
    uint64_t t = it->event ? now_ns() : 0;
    pthread_mutex_lock(&dbl_qlock);
    if (it->event) {
      devent *ev = it->event;
      if (it->event_n > ev->done) {
        ev->done = it->event_n;
        ev->t_ns = t;
      }
      ev->queued--;
      it->event = NULL;
      if (ev->destroyed && !ev->queued) free(ev);
    }
    if (r == DBL_HUNG) {
      x->hung = hung_name(it);
      dbl_count("hang");
      pthread_cond_broadcast(&g_done);
      for (;;) pthread_cond_wait(&st->more, &dbl_qlock); /* never returns, as the kernel */
    }
    if (r != CUDA_SUCCESS && x->sticky == CUDA_SUCCESS) {
      x->sticky = r;
      dbl_count("fault");
    }
    st->head = it->next;
    if (!st->head) st->tail = NULL;
    st->pending--;
    x->pending--;
    pthread_cond_broadcast(&g_done);
    item_free(it);
  }
  bool own = st != &x->null_stream;
  pthread_mutex_unlock(&dbl_qlock);
  if (own) {
    pthread_cond_destroy(&st->more);
    free(st);
  }
  return NULL;
}

static CUresult enqueue(dstream *st, struct ditem *it) {
  pthread_mutex_lock(&dbl_qlock);
  if (!st->started) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &a, stream_main, st);
    pthread_attr_destroy(&a);
    if (e) {
      pthread_mutex_unlock(&dbl_qlock);
      item_free(it);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    st->started = true;
  }
  if (st->tail) st->tail->next = it;
  else st->head = it;
  st->tail = it;
  st->pending++;
  st->ctx->pending++;
  pthread_cond_signal(&st->more);
  pthread_mutex_unlock(&dbl_qlock);
  return CUDA_SUCCESS;
}

CUresult dbl_enqueue_kernel(dstream *st, const dwork *w) {
  struct ditem *it = calloc(1, sizeof *it);
  if (!it) return CUDA_ERROR_OUT_OF_MEMORY;
  it->w = *w;
  return enqueue(st, it);
}

CUresult dbl_enqueue_graph(dstream *st, dexec *snapshot) {
  struct ditem *it = calloc(1, sizeof *it);
  if (!it) {
    dbl_exec_snapshot_free(snapshot);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  it->graph = snapshot;
  return enqueue(st, it);
}

/* A wait that can never end: said, and the process ends (double.h). */
static _Noreturn void hang_exit(const dctx *x, const char *call, const char *why) {
  fprintf(stderr, "cuda-double: %s waits forever: kernel %s on device %d never returns (SCHEDRUN_CUDA_DOUBLE_HANG); %s\n",
          call, x->hung, x->ordinal, why);
  _exit(DBL_HANG_STATUS);
}

/* The end of a wait (dbl_qlock held): x's fault, dbl_lock taken back. */
static CUresult wait_end(const dctx *x) {
  CUresult r = x->sticky;
  pthread_mutex_unlock(&dbl_qlock);
  pthread_mutex_lock(&dbl_lock);
  return r;
}

/* Queues a marker of ev's latest record on st: a record (`wait` false) or
 * a wait for it; ev lives until the marker has run. */
static CUresult enqueue_marker(dstream *st, devent *ev, bool wait) {
  struct ditem *it = calloc(1, sizeof *it);
  if (!it) return CUDA_ERROR_OUT_OF_MEMORY;
  it->w.type = CU_GRAPH_NODE_TYPE_EMPTY;
  pthread_mutex_lock(&dbl_qlock);
  if (wait) {
    it->wait = ev;
    it->wait_n = ev->issued; /* its latest record at the call, as the driver does */
  } else {
    it->event = ev;
    it->event_n = ev->issued;
  }
  ev->queued++;
  pthread_mutex_unlock(&dbl_qlock);
  CUresult r = enqueue(st, it);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_lock(&dbl_qlock);
    ev->queued--;
    pthread_mutex_unlock(&dbl_qlock);
  }
  return r;
}

CUresult dbl_enqueue_event(dstream *st, devent *ev) { return enqueue_marker(st, ev, false); }

CUresult dbl_enqueue_wait(dstream *st, devent *ev) { return enqueue_marker(st, ev, true); }

CUresult dbl_event_wait(devent *ev, const char *call) {
  pthread_mutex_unlock(&dbl_lock); /* held once, by the entry point */
  pthread_mutex_lock(&dbl_qlock);
  dctx *x = ev->ctx;
  uint64_t want = ev->issued;
  while (ev->done < want && !x->hung && x->sticky == CUDA_SUCCESS) pthread_cond_wait(&g_done, &dbl_qlock);
  if (ev->done < want && x->sticky == CUDA_SUCCESS) hang_exit(x, call, "an event recorded after it cannot complete");
  return wait_end(x);
}

void dbl_event_release(devent *ev) {
  pthread_mutex_lock(&dbl_qlock);
  ev->destroyed = true;
  bool now = !ev->queued;
  pthread_mutex_unlock(&dbl_qlock);
  if (now) free(ev);
}

void dbl_stream_init(dstream *st, dctx *x) {
  st->ctx = x;
  pthread_cond_init(&st->more, NULL);
}

void dbl_stream_destroy(dstream *st) {
  pthread_mutex_lock(&dbl_qlock);
  st->destroyed = true;
  bool now = !st->started; /* else its thread frees it once its work is done */
  pthread_cond_signal(&st->more);
  pthread_mutex_unlock(&dbl_qlock);
  if (now) {
    pthread_cond_destroy(&st->more);
    free(st);
  }
}

CUresult dbl_sticky(const dctx *x) {
  pthread_mutex_lock(&dbl_qlock);
  CUresult r = x->sticky;
  pthread_mutex_unlock(&dbl_qlock);
  return r;
}

CUresult dbl_query(const dstream *st) {
  pthread_mutex_lock(&dbl_qlock);
  CUresult r = st->ctx->sticky != CUDA_SUCCESS ? st->ctx->sticky : st->pending ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  pthread_mutex_unlock(&dbl_qlock);
  return r;
}

CUresult dbl_wait(dctx *x, const dstream *st, const char *call) {
  pthread_mutex_unlock(&dbl_lock); /* held once, by the entry point */
  pthread_mutex_lock(&dbl_qlock);
  while ((st ? st->pending : x->pending) && !x->hung) pthread_cond_wait(&g_done, &dbl_qlock);
  if (st ? st->pending : x->pending)
    hang_exit(x, call, "a call that may wait for the device, made on a context whose work cannot end");
  return wait_end(x);
}

void dbl_ctx_reset(dctx *x) {
  pthread_mutex_lock(&dbl_qlock);
  x->sticky = CUDA_SUCCESS;
  pthread_mutex_unlock(&dbl_qlock);
}

bool dbl_any_hung(const dctx *const *ctxs, int n) {
  bool any = false;
  pthread_mutex_lock(&dbl_qlock);
  for (int i = 0; i < n; i++) any |= ctxs[i] && ctxs[i]->hung;
  pthread_mutex_unlock(&dbl_qlock);
  return any;
}
