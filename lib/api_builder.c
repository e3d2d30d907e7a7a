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
#include "lib/builder_doc.h"

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
  int at = bd_call(b, NULL, "the program '%s'", name);
  b->root = bd_map(b, at); /* the first node is the document's root */
  bd_pair(b, b->root, "version", bd_scalar(b, "1", at, 0), at);
  bd_pair(b, b->root, "name", bd_scalar(b, name, at, 0), at);
  b->steps = bd_seq(b, at);
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
  int at = bd_call(b, NULL, "the runs of '%s'", b->name);
  if (repeat) bd_pair(b, b->root, "repeat", bd_number(b, repeat, true, at, 0), at);
  if (buffer_sets) bd_pair(b, b->root, "buffer_sets", bd_number(b, buffer_sets, true, at, 0), at);
  if (jobs) bd_pair(b, b->root, "jobs", bd_number(b, jobs, true, at, 0), at);
}

void schedrun_builder_devices(schedrun_builder_t *b, const char *devices) {
  if (!bd_usable(b, "schedrun_builder_devices", "devices", devices)) return;
  int at = bd_call(b, NULL, "the devices of '%s'", b->name);
  bd_pair(b, b->root, "devices", bd_scalar(b, devices, at, 0), at);
}

/* The params list: "ptr, f32, i32" -> [ptr, f32, i32]. */
static int params_list(schedrun_builder_t *b, const char *params, int at) {
  int s = bd_seq(b, at);
  char *copy = xstrdup(params), *save = NULL;
  if (!copy) b->failed = true;
  for (char *t = copy ? strtok_r(copy, ", ", &save) : NULL; t; t = strtok_r(NULL, ", ", &save))
    bd_item(b, s, bd_scalar(b, t, at, 0));
  free(copy);
  return s;
}

static void kernel(schedrun_builder_t *b, const char *fn, const char *name, const char *params, const char *key,
                   const char *text, const char *entry) {
  if (!bd_usable(b, fn, "name", name) || !bd_usable(b, fn, "params", params) || !bd_usable(b, fn, key, text)) return;
  int at = bd_call(b, NULL, "kernel '%s'", name);
  if (!b->kernels) bd_pair(b, b->root, "kernels", b->kernels = bd_map(b, at), at);
  int k = bd_map(b, at);
  bd_pair(b, k, "params", params_list(b, params, at), at);
  bd_pair(b, k, key, bd_scalar(b, text, at, 0), at);
  if (entry) bd_pair(b, k, "entry", bd_scalar(b, entry, at, 0), at);
  bd_pair(b, b->kernels, name, k, at);
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
  *at = bd_call(b, NULL, "buffer '%s'", name);
  if (!b->buffers) bd_pair(b, b->root, "buffers", b->buffers = bd_map(b, *at), *at);
  int m = bd_map(b, *at);
  bd_pair(b, m, "type", bd_scalar(b, type, *at, 0), *at);
  bd_pair(b, m, "count", bd_number(b, (double)count, true, *at, 0), *at);
  if (flags & SCHEDRUN_BUFFER_OUTPUT) bd_pair(b, m, "output", bd_scalar(b, "true", *at, 0), *at);
  if (flags & SCHEDRUN_BUFFER_RESIDENT) bd_pair(b, m, "resident", bd_scalar(b, "true", *at, 0), *at);
  if (flags & ~(SCHEDRUN_BUFFER_OUTPUT | SCHEDRUN_BUFFER_RESIDENT))
    bd_misuse(b, "buffer '%s': unknown flags 0x%x", name, (unsigned)flags);
  bd_pair(b, b->buffers, name, m, *at);
  b->last_buffer = m;
  return m;
}

void schedrun_builder_shape(schedrun_builder_t *b, const uint64_t *dims, size_t ndims) {
  if (!b || b->failed) return;
  if (!b->last_buffer) {
    bd_misuse(b, "schedrun_builder_shape: no buffer was added before it");
    return;
  }
  if (!dims && ndims) {
    bd_misuse(b, "schedrun_builder_shape: dims is NULL with %zu dimensions", ndims);
    return;
  }
  int at = bd_call(b, "dims", "the shape of the buffer before it%s", "");
  int s = bd_seq(b, at);
  for (size_t d = 0; d < ndims; d++) bd_item(b, s, bd_number(b, (double)dims[d], true, at, (int)d + 1));
  bd_pair(b, b->last_buffer, "shape", s, at);
}

void schedrun_builder_buffer(schedrun_builder_t *b, const char *name, const char *type, uint64_t count,
                             const void *init, size_t init_bytes, int flags) {
  if (!bd_usable(b, "schedrun_builder_buffer", "name", name) || !bd_usable(b, "schedrun_builder_buffer", "type", type)) return;
  if (!init && init_bytes) {
    bd_misuse(b, "schedrun_builder_buffer: buffer '%s': init is NULL with %zu bytes", name, init_bytes);
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
  int in = bd_map(b, at);
  bd_pair(b, in, "memory", bd_number(b, (double)b->nblobs, true, at, 0), at);
  b->nblobs++;
  bd_pair(b, m, "init", in, at);
}

void schedrun_builder_buffer_file(schedrun_builder_t *b, const char *name, const char *type, uint64_t count,
                                  const char *path, int flags) {
  const char *fn = "schedrun_builder_buffer_file";
  if (!bd_usable(b, fn, "name", name) || !bd_usable(b, fn, "type", type) || !bd_usable(b, fn, "path", path)) return;
  int at;
  int m = buffer_begin(b, name, type, count, flags, &at);
  int in = bd_map(b, at);
  bd_pair(b, in, "file", bd_scalar(b, path, at, 0), at);
  bd_pair(b, m, "init", in, at);
}

/* A step at the current depth: its call, described with its index path. */
static int step(schedrun_builder_t *b, int *at, const char *part, const char *fmt, const char *arg) {
  uint32_t n = ++b->count[b->depth];
  char what[256];
  snprintf(what, sizeof what, fmt, arg ? arg : "");
  *at = bd_call(b, part, "step %s%s%u (%s)", b->path, b->path[0] ? "." : "", n, what);
  b->last_launch = b->last_tune = b->last_constants = 0;
  int m = bd_map(b, *at);
  bd_item(b, b->seq[b->depth], m);
  return m;
}

static int dims(schedrun_builder_t *b, const unsigned d[3], int at) {
  int s = bd_seq(b, at);
  int n = d[2] > 1 ? 3 : d[1] > 1 ? 2 : 1;
  for (int i = 0; i < n; i++) bd_item(b, s, bd_number(b, d[i], true, at, 0));
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
  int m = bd_map(b, at), cands = bd_seq(b, at);
  for (size_t i = 0; i < t->nblocks; i++) bd_item(b, cands, dims(b, t->blocks[i], at));
  bd_pair(b, m, "block", cands, at);
  bd_pair(b, m, "grid", bd_scalar(b, t->grid, at, 0), at);
  if (t->nkey) {
    int keys = bd_seq(b, at);
    for (size_t i = 0; i < t->nkey; i++) bd_item(b, keys, bd_scalar(b, t->key[i], at, 0));
    bd_pair(b, m, "key", keys, at);
  }
  bd_pair(b, l, "autotune", m, at);
  b->last_tune = m;
}

/* A launch with grid and block, or autotuned (t). */
static void launch(schedrun_builder_t *b, const char *kernel_name, const unsigned grid[3], const unsigned block[3],
                   const tune_args *t, const char *const *args, size_t nargs) {
  int at;
  int st = step(b, &at, "args", "launch of kernel '%s'", kernel_name);
  int l = bd_map(b, at);
  bd_pair(b, l, "kernel", bd_scalar(b, kernel_name, at, 0), at);
  if (t) {
    autotune(b, l, t, at);
  } else {
    bd_pair(b, l, "grid", dims(b, grid, at), at);
    bd_pair(b, l, "block", dims(b, block, at), at);
  }
  int a = bd_seq(b, at);
  for (size_t i = 0; i < nargs; i++) {
    /* "NAME[EXPR]" is buffer NAME from element EXPR (a '+' before the '['
     * makes it an expression instead); anything else is as in YAML */
    const char *plus = args[i] ? strchr(args[i], '+') : NULL;
    const char *bracket = args[i] ? strchr(args[i], '[') : NULL;
    if (bracket && args[i][strlen(args[i]) - 1] == ']' && bracket != args[i] && (!plus || plus > bracket)) {
      char *name = xstrndup(args[i], (size_t)(bracket - args[i]));
      char *off = xstrndup(bracket + 1, strlen(bracket + 1) - 1);
      int o = bd_map(b, at);
      bd_pair(b, o, "buffer", bd_scalar(b, name, at, (int)i + 1), at);
      bd_pair(b, o, "offset", bd_scalar(b, off, at, (int)i + 1), at);
      bd_place(b, o, at, (int)i + 1);
      bd_item(b, a, o);
      free(name);
      free(off);
    } else {
      bd_item(b, a, bd_scalar(b, args[i], at, (int)i + 1));
    }
  }
  bd_pair(b, l, "args", a, at);
  bd_pair(b, st, "launch", l, at);
  b->last_launch = l;
  if (!t) b->last_tune = 0;
}

void schedrun_builder_launch(schedrun_builder_t *b, const char *kernel_name, const unsigned grid[3],
                             const unsigned block[3], const char *const *args, size_t nargs) {
  const char *fn = "schedrun_builder_launch";
  if (!bd_usable(b, fn, "kernel", kernel_name) || !bd_usable(b, fn, "grid", grid) || !bd_usable(b, fn, "block", block)) return;
  if (nargs && !bd_usable(b, fn, "args", args)) return;
  launch(b, kernel_name, grid, block, NULL, args, nargs);
}

void schedrun_builder_launch_autotune(schedrun_builder_t *b, const char *kernel_name, const unsigned (*blocks)[3],
                                      size_t nblocks, const char *grid, const char *const *key, size_t nkey,
                                      const char *const *args, size_t nargs) {
  const char *fn = "schedrun_builder_launch_autotune";
  if (!bd_usable(b, fn, "kernel", kernel_name) || !bd_usable(b, fn, "grid", grid)) return;
  if ((nblocks && !bd_usable(b, fn, "blocks", blocks)) || (nkey && !bd_usable(b, fn, "key", key)) ||
      (nargs && !bd_usable(b, fn, "args", args)))
    return;
  tune_args t = {blocks, nblocks, grid, key, nkey};
  launch(b, kernel_name, NULL, NULL, &t, args, nargs);
}

void schedrun_builder_autotune_constant(schedrun_builder_t *b, const char *name, const long long *values, size_t n) {
  const char *fn = "schedrun_builder_autotune_constant";
  if (!bd_usable(b, fn, "name", name) || (n && !bd_usable(b, fn, "values", values))) return;
  if (!b->last_tune) {
    bd_misuse(b, "schedrun_builder_autotune_constant: the step added before it is not an autotuned launch");
    return;
  }
  int at = bd_call(b, NULL, "autotune constant '%s' of the launch before it", name);
  if (!b->last_constants) {
    b->last_constants = bd_map(b, at);
    bd_pair(b, b->last_tune, "constants", b->last_constants, at);
  }
  int vals = bd_seq(b, at);
  for (size_t i = 0; i < n; i++) bd_item(b, vals, bd_number(b, (double)values[i], true, at, 0));
  bd_pair(b, b->last_constants, name, vals, at);
}

void schedrun_builder_shared(schedrun_builder_t *b, unsigned bytes) {
  if (!b || b->failed) return;
  if (!b->last_launch) {
    bd_misuse(b, "schedrun_builder_shared: the step added before it is not a launch");
    return;
  }
  int at = bd_call(b, NULL, "the dynamic shared memory of the launch before it%s", "");
  bd_pair(b, b->last_launch, "shared", bd_number(b, bytes, true, at, 0), at);
  b->last_launch = 0; /* once per launch */
}

void schedrun_builder_copy(schedrun_builder_t *b, const char *from, const char *to, const char *count,
                           const char *from_offset, const char *to_offset) {
  const char *fn = "schedrun_builder_copy";
  if (!bd_usable(b, fn, "from", from) || !bd_usable(b, fn, "to", to) || !bd_usable(b, fn, "count", count)) return;
  int at;
  int st = step(b, &at, NULL, "copy from '%s'", from);
  int c = bd_map(b, at);
  bd_pair(b, c, "from", bd_scalar(b, from, at, 0), at);
  bd_pair(b, c, "to", bd_scalar(b, to, at, 0), at);
  bd_pair(b, c, "count", bd_scalar(b, count, at, 0), at);
  if (from_offset) bd_pair(b, c, "from_offset", bd_scalar(b, from_offset, at, 0), at);
  if (to_offset) bd_pair(b, c, "to_offset", bd_scalar(b, to_offset, at, 0), at);
  bd_pair(b, st, "copy", c, at);
}

void schedrun_builder_fill(schedrun_builder_t *b, const char *buffer, const char *value, const char *count,
                           const char *offset) {
  const char *fn = "schedrun_builder_fill";
  if (!bd_usable(b, fn, "buffer", buffer) || !bd_usable(b, fn, "value", value)) return;
  int at;
  int st = step(b, &at, NULL, "fill of '%s'", buffer);
  int f = bd_map(b, at);
  bd_pair(b, f, "buffer", bd_scalar(b, buffer, at, 0), at);
  bd_pair(b, f, "value", bd_scalar(b, value, at, 0), at);
  if (count) bd_pair(b, f, "count", bd_scalar(b, count, at, 0), at);
  if (offset) bd_pair(b, f, "offset", bd_scalar(b, offset, at, 0), at);
  bd_pair(b, st, "fill", f, at);
}

void schedrun_builder_host(schedrun_builder_t *b, const char *name, schedrun_host_fn fn, void *user) {
  const char *fname = "schedrun_builder_host";
  if (!bd_usable(b, fname, "name", name)) return;
  if (!fn) {
    bd_misuse(b, "%s: host step '%s': fn is NULL", fname, name);
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
  int h = bd_map(b, at);
  bd_pair(b, h, "name", bd_scalar(b, name, at, 0), at);
  bd_pair(b, h, "task", bd_number(b, (double)b->nhostfns++, true, at, 0), at);
  bd_pair(b, st, "host", h, at);
}

/* Opens a loop step's body: the steps added next go into it. */
static void open_body(schedrun_builder_t *b, int loop, int at) {
  if (b->depth >= PROG_MAX_DEPTH) {
    bd_misuse(b, "%s: loops nest at most %d deep", b->what[at - 1], PROG_MAX_DEPTH);
    return;
  }
  int body = bd_seq(b, at);
  bd_pair(b, loop, "body", body, at);
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
  int l = bd_map(b, at);
  bd_pair(b, l, "trips", bd_number(b, trips, true, at, 0), at);
  bd_pair(b, st, "loop", l, at);
  open_body(b, l, at);
}

void schedrun_builder_while(schedrun_builder_t *b, const char *flag_buffer, uint64_t index, unsigned max_trips) {
  if (!bd_usable(b, "schedrun_builder_while", "flag_buffer", flag_buffer)) return;
  int at;
  int st = step(b, &at, NULL, "while loop on '%s'", flag_buffer);
  int l = bd_map(b, at);
  int w = bd_map(b, at);
  bd_pair(b, w, "buffer", bd_scalar(b, flag_buffer, at, 0), at);
  bd_pair(b, w, "index", bd_number(b, (double)index, true, at, 0), at);
  bd_pair(b, l, "while", w, at);
  bd_pair(b, l, "max_trips", bd_number(b, max_trips, true, at, 0), at);
  bd_pair(b, st, "loop", l, at);
  open_body(b, l, at);
}

void schedrun_builder_end(schedrun_builder_t *b) {
  if (!b) return;
  if (b->depth == 0) {
    bd_misuse(b, "schedrun_builder_end: no loop is open (after step %u)", b->count[0]);
    return;
  }
  b->depth--;
  char *dot = strrchr(b->path, '.');
  if (dot) *dot = '\0';
  else b->path[0] = '\0';
}

static int expect_begin(schedrun_builder_t *b, const char *buffer, const char *part, double tol, int *at) {
  *at = bd_call(b, part, "the expectation on '%s'", buffer);
  if (!b->expect) bd_pair(b, b->root, "expect", b->expect = bd_map(b, *at), *at);
  int m = bd_map(b, *at);
  if (tol > 0) bd_pair(b, m, "tol", bd_number(b, tol, false, *at, 0), *at);
  bd_pair(b, b->expect, buffer, m, *at);
  return m;
}

void schedrun_builder_expect_at(schedrun_builder_t *b, const char *buffer, const uint64_t *index,
                                const char *const *values, size_t n, const char *sum, double tol) {
  const char *fn = "schedrun_builder_expect_at";
  if (!bd_usable(b, fn, "buffer", buffer) || (n && (!bd_usable(b, fn, "index", index) || !bd_usable(b, fn, "values", values))))
    return;
  int at;
  int m = expect_begin(b, buffer, "at", tol, &at);
  if (n) {
    int a = bd_map(b, at);
    for (size_t i = 0; i < n; i++) {
      char k[32];
      snprintf(k, sizeof k, "%llu", (unsigned long long)index[i]);
      int key = bd_scalar(b, k, at, (int)i + 1), val = bd_scalar(b, values[i], at, (int)i + 1);
      if (!key || !val || !yaml_document_append_mapping_pair(&b->doc, a, key, val)) b->failed = true;
    }
    bd_pair(b, m, "at", a, at);
  }
  if (sum) bd_pair(b, m, "sum", bd_scalar(b, sum, at, 0), at);
}

void schedrun_builder_expect_values(schedrun_builder_t *b, const char *buffer, const char *const *values, size_t n,
                                    const char *sum, double tol) {
  if (!bd_usable(b, "schedrun_builder_expect_values", "buffer", buffer) ||
      (n && !bd_usable(b, "schedrun_builder_expect_values", "values", values)))
    return;
  int at;
  int m = expect_begin(b, buffer, "values", tol, &at);
  int s = bd_seq(b, at);
  for (size_t i = 0; i < n; i++) bd_item(b, s, bd_scalar(b, values[i], at, (int)i + 1));
  bd_pair(b, m, "values", s, at);
  if (sum) bd_pair(b, m, "sum", bd_scalar(b, sum, at, 0), at);
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
  bd_pair(b, b->root, "program", b->steps, 1);
  if (b->failed) return err_set(err, SCHEDRUN_ENOMEM, "%s: out of memory while it was built", b->name);
  prog_source src = {where, b, b->blobs, b->nblobs, b->hostfns ? b->hostfns : (const prog_hostfn *)"", b->nhostfns};
  prog_program *p = NULL;
  int rc = prog_load_document(&b->doc, b->name, &src, &p, err);
  /* the document is the loader's now (deleted); this builder is spent */
  yaml_document_initialize(&b->doc, NULL, NULL, NULL, 1, 1);
  b->root = 0;
  bd_misuse(b, "schedrun_builder_finish was called already");
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
