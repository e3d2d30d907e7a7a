/*
 * The program builder: a program made by C calls instead of YAML text. Each
 * call adds nodes to an in-memory libyaml document, the same tree a config
 * parses into, and schedrun_builder_finish hands it to the one loader that
 * checks configs, so a builder program and its YAML twin are the same
 * program by construction. Each node carries the builder call that made it
 * in its place, and the loader names that call in its errors ("step 2.1
 * (launch of kernel 'scale'), args[1]: ...") instead of a line and column.
 * Buffer contents given as memory travel beside the document (`init:
 * {memory: K}`, which YAML text cannot use).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "lib/api.h"

#define MAX_PARTS 4

struct schedrun_builder {
  yaml_document_t doc;
  char *name;
  int root, kernels, buffers, steps, expect; /* node ids; 0: none yet */
  int last_buffer;                           /* the mapping of the buffer added last, 0: none */
  int last_launch;                           /* the launch's mapping when the step added last is one, else 0 */
  int last_tune, last_constants;             /* its autotune mapping (0: not autotuned), and its constants (0: none yet) */
  int seq[PROG_MAX_DEPTH + 1];               /* the step list being added to, per depth */
  uint32_t count[PROG_MAX_DEPTH + 1];        /* steps added so far, per depth */
  int depth;
  char path[64];                             /* "2.1": the index path of the open loops */
  char **what;                               /* per call: what it made ("step 2.1 (...)") */
  const char **part;                         /* per call: what its numbered parts are ("args") */
  size_t ncalls, cap;
  prog_blob *blobs;
  size_t nblobs;
  prog_hostfn *hostfns; /* host steps' functions: `host: {task: K}` runs hostfns[K] */
  size_t nhostfns;
  bool failed;    /* out of memory: finish says so */
  char *misuse;   /* the first call that could not be made (finish says so) */
};

static void misuse(schedrun_builder_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void misuse(schedrun_builder_t *b, const char *fmt, ...) {
  if (b->misuse) return;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&b->misuse, fmt, ap) < 0) b->misuse = NULL, b->failed = true;
  va_end(ap);
}

/* A new builder call: its number (the place of the nodes it makes). */
static int call(schedrun_builder_t *b, const char *part, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int call(schedrun_builder_t *b, const char *part, const char *fmt, ...) {
  if (b->ncalls == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 32;
    char **w = realloc(b->what, cap * sizeof *w);
    if (w) b->what = w;
    const char **pt = w ? realloc(b->part, cap * sizeof *pt) : NULL;
    if (pt) b->part = pt;
    if (!w || !pt) {
      b->failed = true;
      return 0;
    }
    b->cap = cap;
  }
  va_list ap;
  va_start(ap, fmt);
  char *w = NULL;
  if (vasprintf(&w, fmt, ap) < 0) w = NULL;
  va_end(ap);
  if (!w) b->failed = true;
  b->what[b->ncalls] = w;
  b->part[b->ncalls] = part;
  return (int)++b->ncalls;
}

static void place(schedrun_builder_t *b, int id, int at, int sub) {
  yaml_node_t *n = yaml_document_get_node(&b->doc, id);
  if (!n) return;
  n->start_mark.line = at > 0 ? (size_t)at - 1 : 0;
  n->start_mark.column = (size_t)sub;
  n->end_mark = n->start_mark;
}

/* Folded style: the loader takes no column inside it, so the place stays
 * the builder call's. */
static int scalar(schedrun_builder_t *b, const char *text, int at, int sub) {
  int id = yaml_document_add_scalar(&b->doc, NULL, (yaml_char_t *)(text ? text : ""), -1, YAML_FOLDED_SCALAR_STYLE);
  if (!id) b->failed = true;
  else place(b, id, at, sub);
  return id;
}

static int number(schedrun_builder_t *b, double v, bool integer, int at, int sub) {
  char s[64];
  if (integer) snprintf(s, sizeof s, "%.0f", v);
  else snprintf(s, sizeof s, "%.17g", v);
  return scalar(b, s, at, sub);
}

static int map(schedrun_builder_t *b, int at) {
  int id = yaml_document_add_mapping(&b->doc, NULL, YAML_BLOCK_MAPPING_STYLE);
  if (!id) b->failed = true;
  else place(b, id, at, 0);
  return id;
}

static int seq(schedrun_builder_t *b, int at) {
  int id = yaml_document_add_sequence(&b->doc, NULL, YAML_BLOCK_SEQUENCE_STYLE);
  if (!id) b->failed = true;
  else place(b, id, at, 0);
  return id;
}

static void pair(schedrun_builder_t *b, int m, const char *key, int value, int at) {
  int k = scalar(b, key, at, 0);
  if (!m || !k || !value || !yaml_document_append_mapping_pair(&b->doc, m, k, value)) b->failed = true;
}

static void item(schedrun_builder_t *b, int s, int value) {
  if (!s || !value || !yaml_document_append_sequence_item(&b->doc, s, value)) b->failed = true;
}

static bool usable(schedrun_builder_t *b, const char *fn, const char *what, const void *p) {
  if (!b) return false;
  if (!p) {
    misuse(b, "%s: %s is NULL", fn, what);
    return false;
  }
  return true;
}

int schedrun_builder_new(schedrun_builder_t **out, const char *name, schedrun_error_t *err) {
  if (!out || !name) return err_set(err, SCHEDRUN_EINVAL, "schedrun_builder_new: %s is NULL", out ? "name" : "out");
  *out = NULL;
  schedrun_builder_t *b = calloc(1, sizeof *b);
  if (!b) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  b->name = xstrdup(name);
  if (!b->name || !yaml_document_initialize(&b->doc, NULL, NULL, NULL, 1, 1)) {
    free(b->name);
    free(b);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  int at = call(b, NULL, "the program '%s'", name);
  b->root = map(b, at); /* the first node is the document's root */
  pair(b, b->root, "version", scalar(b, "1", at, 0), at);
  pair(b, b->root, "name", scalar(b, name, at, 0), at);
  b->steps = seq(b, at);
  b->seq[0] = b->steps;
  *out = b;
  return SCHEDRUN_OK;
}

void schedrun_builder_free(schedrun_builder_t **pb) {
  if (!pb || !*pb) return;
  schedrun_builder_t *b = *pb;
  yaml_document_delete(&b->doc);
  for (size_t i = 0; i < b->ncalls; i++) free(b->what[i]);
  free(b->what);
  free(b->part);
  for (size_t i = 0; i < b->nblobs; i++) free((void *)b->blobs[i].data);
  free(b->blobs);
  free(b->hostfns);
  free(b->misuse);
  free(b->name);
  free(b);
  *pb = NULL;
}

void schedrun_builder_runs(schedrun_builder_t *b, int repeat, int buffer_sets, int jobs) {
  if (!b) return;
  int at = call(b, NULL, "the runs of '%s'", b->name);
  if (repeat) pair(b, b->root, "repeat", number(b, repeat, true, at, 0), at);
  if (buffer_sets) pair(b, b->root, "buffer_sets", number(b, buffer_sets, true, at, 0), at);
  if (jobs) pair(b, b->root, "jobs", number(b, jobs, true, at, 0), at);
}

void schedrun_builder_devices(schedrun_builder_t *b, const char *devices) {
  if (!usable(b, "schedrun_builder_devices", "devices", devices)) return;
  int at = call(b, NULL, "the devices of '%s'", b->name);
  pair(b, b->root, "devices", scalar(b, devices, at, 0), at);
}

/* The params list: "ptr, f32, i32" -> [ptr, f32, i32]. */
static int params_list(schedrun_builder_t *b, const char *params, int at) {
  int s = seq(b, at);
  char *copy = xstrdup(params), *save = NULL;
  if (!copy) b->failed = true;
  for (char *t = copy ? strtok_r(copy, ", ", &save) : NULL; t; t = strtok_r(NULL, ", ", &save))
    item(b, s, scalar(b, t, at, 0));
  free(copy);
  return s;
}

static void kernel(schedrun_builder_t *b, const char *fn, const char *name, const char *params, const char *key,
                   const char *text, const char *entry) {
  if (!usable(b, fn, "name", name) || !usable(b, fn, "params", params) || !usable(b, fn, key, text)) return;
  int at = call(b, NULL, "kernel '%s'", name);
  if (!b->kernels) pair(b, b->root, "kernels", b->kernels = map(b, at), at);
  int k = map(b, at);
  pair(b, k, "params", params_list(b, params, at), at);
  pair(b, k, key, scalar(b, text, at, 0), at);
  if (entry) pair(b, k, "entry", scalar(b, entry, at, 0), at);
  pair(b, b->kernels, name, k, at);
}

void schedrun_builder_kernel(schedrun_builder_t *b, const char *name, const char *params, const char *source,
                             const char *entry) {
  kernel(b, "schedrun_builder_kernel", name, params, "source", source, entry);
}

void schedrun_builder_kernel_file(schedrun_builder_t *b, const char *name, const char *params, const char *path,
                                  const char *entry) {
  kernel(b, "schedrun_builder_kernel_file", name, params, "file", path, entry);
}

static int buffer_begin(schedrun_builder_t *b, const char *name, const char *type, uint64_t count, int flags,
                        int *at) {
  *at = call(b, NULL, "buffer '%s'", name);
  if (!b->buffers) pair(b, b->root, "buffers", b->buffers = map(b, *at), *at);
  int m = map(b, *at);
  pair(b, m, "type", scalar(b, type, *at, 0), *at);
  pair(b, m, "count", number(b, (double)count, true, *at, 0), *at);
  if (flags & SCHEDRUN_BUFFER_OUTPUT) pair(b, m, "output", scalar(b, "true", *at, 0), *at);
  if (flags & SCHEDRUN_BUFFER_RESIDENT) pair(b, m, "resident", scalar(b, "true", *at, 0), *at);
  if (flags & ~(SCHEDRUN_BUFFER_OUTPUT | SCHEDRUN_BUFFER_RESIDENT))
    misuse(b, "buffer '%s': unknown flags 0x%x", name, (unsigned)flags);
  pair(b, b->buffers, name, m, *at);
  b->last_buffer = m;
  return m;
}

void schedrun_builder_shape(schedrun_builder_t *b, const uint64_t *dims, size_t ndims) {
  if (!b || b->failed) return;
  if (!b->last_buffer) {
    misuse(b, "schedrun_builder_shape: no buffer was added before it");
    return;
  }
  if (!dims && ndims) {
    misuse(b, "schedrun_builder_shape: dims is NULL with %zu dimensions", ndims);
    return;
  }
  int at = call(b, "dims", "the shape of the buffer before it%s", "");
  int s = seq(b, at);
  for (size_t d = 0; d < ndims; d++) item(b, s, number(b, (double)dims[d], true, at, (int)d + 1));
  pair(b, b->last_buffer, "shape", s, at);
}

void schedrun_builder_buffer(schedrun_builder_t *b, const char *name, const char *type, uint64_t count,
                             const void *init, size_t init_bytes, int flags) {
  if (!usable(b, "schedrun_builder_buffer", "name", name) || !usable(b, "schedrun_builder_buffer", "type", type)) return;
  if (!init && init_bytes) {
    misuse(b, "schedrun_builder_buffer: buffer '%s': init is NULL with %zu bytes", name, init_bytes);
    return;
  }
  int at;
  int m = buffer_begin(b, name, type, count, flags, &at);
  if (!init) return; /* zeroed */
  prog_blob *nb = realloc(b->blobs, (b->nblobs + 1) * sizeof *nb);
  void *copy = malloc(init_bytes ? init_bytes : 1);
  if (!nb || !copy) {
    if (nb) b->blobs = nb;
    free(copy);
    b->failed = true;
    return;
  }
  b->blobs = nb;
  if (init_bytes) memcpy(copy, init, init_bytes);
  b->blobs[b->nblobs] = (prog_blob){copy, init_bytes};
  int in = map(b, at);
  pair(b, in, "memory", number(b, (double)b->nblobs, true, at, 0), at);
  b->nblobs++;
  pair(b, m, "init", in, at);
}

void schedrun_builder_buffer_file(schedrun_builder_t *b, const char *name, const char *type, uint64_t count,
                                  const char *path, int flags) {
  const char *fn = "schedrun_builder_buffer_file";
  if (!usable(b, fn, "name", name) || !usable(b, fn, "type", type) || !usable(b, fn, "path", path)) return;
  int at;
  int m = buffer_begin(b, name, type, count, flags, &at);
  int in = map(b, at);
  pair(b, in, "file", scalar(b, path, at, 0), at);
  pair(b, m, "init", in, at);
}

/* A step at the current depth: its call, described with its index path. */
static int step(schedrun_builder_t *b, int *at, const char *part, const char *fmt, const char *arg) {
  uint32_t n = ++b->count[b->depth];
  char what[256];
  snprintf(what, sizeof what, fmt, arg ? arg : "");
  *at = call(b, part, "step %s%s%u (%s)", b->path, b->path[0] ? "." : "", n, what);
  b->last_launch = b->last_tune = b->last_constants = 0;
  int m = map(b, *at);
  item(b, b->seq[b->depth], m);
  return m;
}

static int dims(schedrun_builder_t *b, const unsigned d[3], int at) {
  int s = seq(b, at);
  int n = d[2] > 1 ? 3 : d[1] > 1 ? 2 : 1;
  for (int i = 0; i < n; i++) item(b, s, number(b, d[i], true, at, 0));
  return s;
}

/* An autotuned launch's candidates, grid and key (a config's `autotune:`). */
typedef struct tune_args {
  const unsigned (*blocks)[3];
  size_t nblocks;
  const char *grid;
  const char *const *key;
  size_t nkey;
} tune_args;

static void autotune(schedrun_builder_t *b, int l, const tune_args *t, int at) {
  int m = map(b, at), cands = seq(b, at);
  for (size_t i = 0; i < t->nblocks; i++) item(b, cands, dims(b, t->blocks[i], at));
  pair(b, m, "block", cands, at);
  pair(b, m, "grid", scalar(b, t->grid, at, 0), at);
  if (t->nkey) {
    int keys = seq(b, at);
    for (size_t i = 0; i < t->nkey; i++) item(b, keys, scalar(b, t->key[i], at, 0));
    pair(b, m, "key", keys, at);
  }
  pair(b, l, "autotune", m, at);
  b->last_tune = m;
}

/* A launch with grid and block, or autotuned (t). */
static void launch(schedrun_builder_t *b, const char *kernel_name, const unsigned grid[3], const unsigned block[3],
                   const tune_args *t, const char *const *args, size_t nargs) {
  int at;
  int st = step(b, &at, "args", "launch of kernel '%s'", kernel_name);
  int l = map(b, at);
  pair(b, l, "kernel", scalar(b, kernel_name, at, 0), at);
  if (t) {
    autotune(b, l, t, at);
  } else {
    pair(b, l, "grid", dims(b, grid, at), at);
    pair(b, l, "block", dims(b, block, at), at);
  }
  int a = seq(b, at);
  for (size_t i = 0; i < nargs; i++) {
    /* "NAME[EXPR]" is buffer NAME from element EXPR (a '+' before the '['
     * makes it an expression instead); anything else is as in YAML */
    const char *plus = args[i] ? strchr(args[i], '+') : NULL;
    const char *bracket = args[i] ? strchr(args[i], '[') : NULL;
    if (bracket && args[i][strlen(args[i]) - 1] == ']' && bracket != args[i] && (!plus || plus > bracket)) {
      char *name = xstrndup(args[i], (size_t)(bracket - args[i]));
      char *off = xstrndup(bracket + 1, strlen(bracket + 1) - 1);
      int o = map(b, at);
      pair(b, o, "buffer", scalar(b, name, at, (int)i + 1), at);
      pair(b, o, "offset", scalar(b, off, at, (int)i + 1), at);
      place(b, o, at, (int)i + 1);
      item(b, a, o);
      free(name);
      free(off);
    } else {
      item(b, a, scalar(b, args[i], at, (int)i + 1));
    }
  }
  pair(b, l, "args", a, at);
  pair(b, st, "launch", l, at);
  b->last_launch = l;
  if (!t) b->last_tune = 0;
}

void schedrun_builder_launch(schedrun_builder_t *b, const char *kernel_name, const unsigned grid[3],
                             const unsigned block[3], const char *const *args, size_t nargs) {
  const char *fn = "schedrun_builder_launch";
  if (!usable(b, fn, "kernel", kernel_name) || !usable(b, fn, "grid", grid) || !usable(b, fn, "block", block)) return;
  if (nargs && !usable(b, fn, "args", args)) return;
  launch(b, kernel_name, grid, block, NULL, args, nargs);
}

void schedrun_builder_launch_autotune(schedrun_builder_t *b, const char *kernel_name, const unsigned (*blocks)[3],
                                      size_t nblocks, const char *grid, const char *const *key, size_t nkey,
                                      const char *const *args, size_t nargs) {
  const char *fn = "schedrun_builder_launch_autotune";
  if (!usable(b, fn, "kernel", kernel_name) || !usable(b, fn, "grid", grid)) return;
  if ((nblocks && !usable(b, fn, "blocks", blocks)) || (nkey && !usable(b, fn, "key", key)) ||
      (nargs && !usable(b, fn, "args", args)))
    return;
  tune_args t = {blocks, nblocks, grid, key, nkey};
  launch(b, kernel_name, NULL, NULL, &t, args, nargs);
}

void schedrun_builder_autotune_constant(schedrun_builder_t *b, const char *name, const long long *values, size_t n) {
  const char *fn = "schedrun_builder_autotune_constant";
  if (!usable(b, fn, "name", name) || (n && !usable(b, fn, "values", values))) return;
  if (!b->last_tune) {
    misuse(b, "schedrun_builder_autotune_constant: the step added before it is not an autotuned launch");
    return;
  }
  int at = call(b, NULL, "autotune constant '%s' of the launch before it", name);
  if (!b->last_constants) {
    b->last_constants = map(b, at);
    pair(b, b->last_tune, "constants", b->last_constants, at);
  }
  int vals = seq(b, at);
  for (size_t i = 0; i < n; i++) item(b, vals, number(b, (double)values[i], true, at, 0));
  pair(b, b->last_constants, name, vals, at);
}

void schedrun_builder_shared(schedrun_builder_t *b, unsigned bytes) {
  if (!b || b->failed) return;
  if (!b->last_launch) {
    misuse(b, "schedrun_builder_shared: the step added before it is not a launch");
    return;
  }
  int at = call(b, NULL, "the dynamic shared memory of the launch before it%s", "");
  pair(b, b->last_launch, "shared", number(b, bytes, true, at, 0), at);
  b->last_launch = 0; /* once per launch */
}

void schedrun_builder_copy(schedrun_builder_t *b, const char *from, const char *to, const char *count,
                           const char *from_offset, const char *to_offset) {
  const char *fn = "schedrun_builder_copy";
  if (!usable(b, fn, "from", from) || !usable(b, fn, "to", to) || !usable(b, fn, "count", count)) return;
  int at;
  int st = step(b, &at, NULL, "copy from '%s'", from);
  int c = map(b, at);
  pair(b, c, "from", scalar(b, from, at, 0), at);
  pair(b, c, "to", scalar(b, to, at, 0), at);
  pair(b, c, "count", scalar(b, count, at, 0), at);
  if (from_offset) pair(b, c, "from_offset", scalar(b, from_offset, at, 0), at);
  if (to_offset) pair(b, c, "to_offset", scalar(b, to_offset, at, 0), at);
  pair(b, st, "copy", c, at);
}

void schedrun_builder_fill(schedrun_builder_t *b, const char *buffer, const char *value, const char *count,
                           const char *offset) {
  const char *fn = "schedrun_builder_fill";
  if (!usable(b, fn, "buffer", buffer) || !usable(b, fn, "value", value)) return;
  int at;
  int st = step(b, &at, NULL, "fill of '%s'", buffer);
  int f = map(b, at);
  pair(b, f, "buffer", scalar(b, buffer, at, 0), at);
  pair(b, f, "value", scalar(b, value, at, 0), at);
  if (count) pair(b, f, "count", scalar(b, count, at, 0), at);
  if (offset) pair(b, f, "offset", scalar(b, offset, at, 0), at);
  pair(b, st, "fill", f, at);
}

void schedrun_builder_host(schedrun_builder_t *b, const char *name, schedrun_host_fn fn, void *user) {
  const char *fname = "schedrun_builder_host";
  if (!usable(b, fname, "name", name)) return;
  if (!fn) {
    misuse(b, "%s: host step '%s': fn is NULL", fname, name);
    return;
  }
  prog_hostfn *v = realloc(b->hostfns, (b->nhostfns + 1) * sizeof *v);
  if (!v) {
    b->failed = true;
    return;
  }
  b->hostfns = v;
  b->hostfns[b->nhostfns] = (prog_hostfn){fn, user};
  int at;
  int st = step(b, &at, NULL, "host step '%s'", name);
  int h = map(b, at);
  pair(b, h, "name", scalar(b, name, at, 0), at);
  pair(b, h, "task", number(b, (double)b->nhostfns++, true, at, 0), at);
  pair(b, st, "host", h, at);
}

/* Opens a loop step's body: the steps added next go into it. */
static void open_body(schedrun_builder_t *b, int loop, int at) {
  if (b->depth >= PROG_MAX_DEPTH) {
    misuse(b, "%s: loops nest at most %d deep", b->what[at - 1], PROG_MAX_DEPTH);
    return;
  }
  int body = seq(b, at);
  pair(b, loop, "body", body, at);
  size_t len = strlen(b->path);
  snprintf(b->path + len, sizeof b->path - len, "%s%u", len ? "." : "", b->count[b->depth]);
  b->depth++;
  b->seq[b->depth] = body;
  b->count[b->depth] = 0;
}

void schedrun_builder_loop(schedrun_builder_t *b, unsigned trips) {
  if (!b) return;
  int at;
  char t[32];
  snprintf(t, sizeof t, "%u", trips);
  int st = step(b, &at, NULL, "loop of %s trips", t);
  int l = map(b, at);
  pair(b, l, "trips", number(b, trips, true, at, 0), at);
  pair(b, st, "loop", l, at);
  open_body(b, l, at);
}

void schedrun_builder_while(schedrun_builder_t *b, const char *flag_buffer, uint64_t index, unsigned max_trips) {
  if (!usable(b, "schedrun_builder_while", "flag_buffer", flag_buffer)) return;
  int at;
  int st = step(b, &at, NULL, "while loop on '%s'", flag_buffer);
  int l = map(b, at);
  int w = map(b, at);
  pair(b, w, "buffer", scalar(b, flag_buffer, at, 0), at);
  pair(b, w, "index", number(b, (double)index, true, at, 0), at);
  pair(b, l, "while", w, at);
  pair(b, l, "max_trips", number(b, max_trips, true, at, 0), at);
  pair(b, st, "loop", l, at);
  open_body(b, l, at);
}

void schedrun_builder_end(schedrun_builder_t *b) {
  if (!b) return;
  if (b->depth == 0) {
    misuse(b, "schedrun_builder_end: no loop is open (after step %u)", b->count[0]);
    return;
  }
  b->depth--;
  char *dot = strrchr(b->path, '.');
  if (dot) *dot = '\0';
  else b->path[0] = '\0';
}

static int expect_begin(schedrun_builder_t *b, const char *buffer, const char *part, double tol, int *at) {
  *at = call(b, part, "the expectation on '%s'", buffer);
  if (!b->expect) pair(b, b->root, "expect", b->expect = map(b, *at), *at);
  int m = map(b, *at);
  if (tol > 0) pair(b, m, "tol", number(b, tol, false, *at, 0), *at);
  pair(b, b->expect, buffer, m, *at);
  return m;
}

void schedrun_builder_expect_at(schedrun_builder_t *b, const char *buffer, const uint64_t *index,
                                const char *const *values, size_t n, const char *sum, double tol) {
  const char *fn = "schedrun_builder_expect_at";
  if (!usable(b, fn, "buffer", buffer) || (n && (!usable(b, fn, "index", index) || !usable(b, fn, "values", values))))
    return;
  int at;
  int m = expect_begin(b, buffer, "at", tol, &at);
  if (n) {
    int a = map(b, at);
    for (size_t i = 0; i < n; i++) {
      char k[32];
      snprintf(k, sizeof k, "%llu", (unsigned long long)index[i]);
      int key = scalar(b, k, at, (int)i + 1), val = scalar(b, values[i], at, (int)i + 1);
      if (!key || !val || !yaml_document_append_mapping_pair(&b->doc, a, key, val)) b->failed = true;
    }
    pair(b, m, "at", a, at);
  }
  if (sum) pair(b, m, "sum", scalar(b, sum, at, 0), at);
}

void schedrun_builder_expect_values(schedrun_builder_t *b, const char *buffer, const char *const *values, size_t n,
                                    const char *sum, double tol) {
  if (!usable(b, "schedrun_builder_expect_values", "buffer", buffer) ||
      (n && !usable(b, "schedrun_builder_expect_values", "values", values)))
    return;
  int at;
  int m = expect_begin(b, buffer, "values", tol, &at);
  int s = seq(b, at);
  for (size_t i = 0; i < n; i++) item(b, s, scalar(b, values[i], at, (int)i + 1));
  pair(b, m, "values", s, at);
  if (sum) pair(b, m, "sum", scalar(b, sum, at, 0), at);
}

/* Where a place of the document is: the builder call that made it, and the
 * numbered part of it (an argument, an index). */
static void where(void *ctx, prog_loc at, char *out, size_t n) {
  const schedrun_builder_t *b = ctx;
  int c = at.line, sub = at.col - 1;
  if (c < 1 || (size_t)c > b->ncalls || !b->what[c - 1]) {
    snprintf(out, n, "%s", b->name);
    return;
  }
  if (sub > 0 && b->part[c - 1]) snprintf(out, n, "%s: %s, %s[%d]", b->name, b->what[c - 1], b->part[c - 1], sub - 1);
  else snprintf(out, n, "%s: %s", b->name, b->what[c - 1]);
}

int schedrun_builder_finish(schedrun_builder_t *b, schedrun_program_t **out, schedrun_error_t *err) {
  if (!b || !out) return err_set(err, SCHEDRUN_EINVAL, "schedrun_builder_finish: %s is NULL", b ? "out" : "the builder");
  *out = NULL;
  if (b->failed) return err_set(err, SCHEDRUN_ENOMEM, "%s: out of memory while it was built", b->name);
  if (b->misuse) return err_set(err, SCHEDRUN_EINVAL, "%s: %s", b->name, b->misuse);
  if (b->depth) return err_set(err, SCHEDRUN_EINVAL, "%s: loop step %s is not closed (schedrun_builder_end)", b->name, b->path);
  pair(b, b->root, "program", b->steps, 1);
  if (b->failed) return err_set(err, SCHEDRUN_ENOMEM, "%s: out of memory while it was built", b->name);
  prog_source src = {where, b, b->blobs, b->nblobs, b->hostfns ? b->hostfns : (const prog_hostfn *)"", b->nhostfns};
  prog_program *p = NULL;
  int rc = prog_load_document(&b->doc, b->name, &src, &p, err);
  /* the document is the loader's now (deleted); this builder is spent */
  yaml_document_initialize(&b->doc, NULL, NULL, NULL, 1, 1);
  b->root = 0;
  misuse(b, "schedrun_builder_finish was called already");
  if (rc != SCHEDRUN_OK) return rc;
  /* a kernel's source came from a call, not from lines of a file */
  for (uint32_t i = 0; i < p->nkernels; i++) {
    prog_kernel *k = &p->kernels[i];
    if (!k->source_file || strcmp(k->source_file, b->name) != 0) continue; /* from a file */
    char *f = NULL;
    if (asprintf(&f, "%s: kernel '%s'", b->name, k->name) < 0) f = NULL;
    if (f) {
      free(k->source_file);
      k->source_file = f;
      k->first_line = 1;
    }
  }
  return api_wrap_program(p, out, err);
}
