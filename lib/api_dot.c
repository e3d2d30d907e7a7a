/*
 * schedrun_program_write_dot: a program as it is recorded, as Graphviz DOT.
 *
 * One cluster per execution context the report's jobs ran in ({device,
 * binding slot}), holding that context's recorded nodes in order: each
 * launch, copy and fill with its command (pre-order step index) and record
 * id (the unrolled iteration), its values evaluated as for the context's
 * first job; a `trips` loop is unrolled as the recording is; a `while` loop
 * is a node of its own with its body in a cluster it repeats. At most
 * DOT_MAX_NODES nodes per context are drawn; a last node says how many more.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/api.h"
#include "lib/report.h"

#define DOT_MAX_NODES 1000

typedef struct dot {
  strbuf *sb;
  const prog_program *p;
  const schedrun_t *s; /* the program's scheduler (its autotuned choices), or NULL */
  prog_env env;
  char prefix[32];  /* node names: <prefix>n<k> */
  uint32_t n, more; /* nodes drawn, nodes left out */
  int64_t last;     /* the previous node in its sequence, or -1 */
} dot;

/* Appends text to a DOT label, escaped. */
static void esc(strbuf *sb, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') sb_addf(sb, "\\%c", *s);
    else if (*s == '\n') sb_adds(sb, "\\n");
    else sb_add(sb, s, 1);
  }
}

static void value(dot *d, const prog_expr *e, char *out, size_t n) {
  prog_value v;
  const char *bad = e->n ? prog_expr_eval(e, &d->env, &v) : NULL;
  if (!e->n) snprintf(out, n, "0");
  else if (bad) snprintf(out, n, "(%s)", bad);
  else if (v.is_int) snprintf(out, n, "%lld", (long long)v.i);
  else snprintf(out, n, "%g", v.f);
}

/* An autotuned launch's grid and block: the choice made for it (the first
 * device kind's), else its candidates. */
static void tuned(dot *d, const prog_step *st, char *out, size_t n) {
  char where[256];
  prog_where(d->p, st->loc, where, sizeof where);
  schedrun_tune_info_t t;
  for (size_t i = 0; d->s && schedrun_tune_get(d->s, i, &t, NULL) == SCHEDRUN_OK; i++)
    if (!strcmp(t.where, where)) {
      snprintf(out, n, "grid %u,%u,%u block %u,%u,%u%s%s (autotuned on %s%s%s)\n", t.grid[0], t.grid[1], t.grid[2],
               t.block[0], t.block[1], t.block[2], t.constants[0] ? " " : "", t.constants, t.device,
               t.key[0] ? ", " : "", t.key);
      return;
    }
  snprintf(out, n, "autotune, not chosen yet: %s\n", st->u.launch.tune->spec ? st->u.launch.tune->spec : "");
}

/* Draws one node with its label; links it after the previous one. */
static int64_t node(dot *d, const char *shape, const char *label, uint32_t cmd, uint32_t rid) {
  if (d->n >= DOT_MAX_NODES) {
    d->more++;
    return -1;
  }
  int64_t id = d->n++;
  sb_addf(d->sb, "    %sn%lld [shape=%s, label=\"", d->prefix, (long long)id, shape);
  esc(d->sb, label);
  sb_addf(d->sb, "\\ncommand %u, record id %u\"];\n", cmd, rid);
  if (d->last >= 0) sb_addf(d->sb, "    %sn%lld -> %sn%lld;\n", d->prefix, (long long)d->last, d->prefix, (long long)id);
  d->last = id;
  return id;
}

static void steps(dot *d, const prog_step *st, uint32_t n, int depth, uint32_t rid);

static void step(dot *d, const prog_step *st, int depth, uint32_t rid) {
  const prog_program *p = d->p;
  char label[1024], v1[64], v2[64], v3[64];
  switch (st->kind) {
  case ST_LOOP:
    for (uint32_t it = 0; it < st->u.loop.trips; it++) {
      d->env.v[EXV_ITER0 + depth] = it;
      steps(d, st->u.loop.body, st->u.loop.nbody, depth + 1, rid * st->u.loop.trips + it);
    }
    return;
  case ST_LAUNCH: {
    const prog_kernel *k = &p->kernels[st->u.launch.kernel];
    char shared[40] = "";
    if (st->u.launch.shared) snprintf(shared, sizeof shared, "shared %u bytes\n", st->u.launch.shared);
    char dims[512];
    if (st->u.launch.tune) tuned(d, st, dims, sizeof dims);
    else snprintf(dims, sizeof dims, "grid %u,%u,%u block %u,%u,%u\n", st->u.launch.grid[0], st->u.launch.grid[1],
                  st->u.launch.grid[2], st->u.launch.block[0], st->u.launch.block[1], st->u.launch.block[2]);
    size_t at = (size_t)snprintf(label, sizeof label, "launch %s\n%s%s(", k->name, dims, shared);
    for (uint32_t a = 0; a < st->u.launch.nargs && at < sizeof label; a++) {
      const prog_arg *pa = &st->u.launch.args[a];
      value(d, &pa->expr, v1, sizeof v1);
      if (pa->is_buffer)
        at += (size_t)snprintf(label + at, sizeof label - at, "%s%s%s%s", a ? ", " : "", p->buffers[pa->buffer].name,
                               pa->expr.n ? "+" : "", pa->expr.n ? v1 : "");
      else at += (size_t)snprintf(label + at, sizeof label - at, "%s%s", a ? ", " : "", v1);
    }
    if (at < sizeof label) snprintf(label + at, sizeof label - at, ")");
    node(d, "box", label, st->command, rid);
    return;
  }
  case ST_COPY:
    value(d, &st->u.copy.count, v1, sizeof v1);
    value(d, &st->u.copy.from_offset, v2, sizeof v2);
    value(d, &st->u.copy.to_offset, v3, sizeof v3);
    snprintf(label, sizeof label, "copy %s elements\n%s[%s] -> %s[%s]", v1, p->buffers[st->u.copy.from].name, v2,
             p->buffers[st->u.copy.to].name, v3);
    node(d, "cds", label, st->command, rid);
    return;
  case ST_FILL: {
    const prog_buffer *b = &p->buffers[st->u.fill.buffer];
    value(d, &st->u.fill.value, v1, sizeof v1);
    value(d, &st->u.fill.offset, v2, sizeof v2);
    if (st->u.fill.count.n) value(d, &st->u.fill.count, v3, sizeof v3);
    else snprintf(v3, sizeof v3, "to the end");
    snprintf(label, sizeof label, "fill %s = %s\nfrom %s, count %s", b->name, v1, v2, v3);
    node(d, "parallelogram", label, st->command, rid);
    return;
  }
  case ST_HOST:
    snprintf(label, sizeof label, "host step %s\n(the job's buffers in host memory)", p->hosts[st->u.host.index].name);
    node(d, "octagon", label, st->command, rid);
    return;
  case ST_WHILE: {
    snprintf(label, sizeof label, "while %s[%llu] != 0\nat most %u trips", p->buffers[st->u.loop.buffer].name,
             (unsigned long long)st->u.loop.index, st->u.loop.max_trips);
    int64_t head = node(d, "diamond", label, st->command, rid);
    if (head < 0) return;
    /* the body: a cluster of its own, entered from the head, back to it */
    sb_addf(d->sb, "    subgraph cluster_%sbody%lld {\n    label=\"while body\"; style=dashed;\n", d->prefix, (long long)head);
    d->last = -1;
    int64_t first = d->n;
    d->env.v[EXV_ITER0 + depth] = 0;
    steps(d, st->u.loop.body, st->u.loop.nbody, depth + 1, rid);
    sb_adds(d->sb, "    }\n");
    /* the edges in and out of the body stay outside its cluster, so that
     * the loop's head is drawn outside it */
    if (d->last >= 0) {
      sb_addf(d->sb, "    %sn%lld -> %sn%lld;\n", d->prefix, (long long)head, d->prefix, (long long)first);
      sb_addf(d->sb, "    %sn%lld -> %sn%lld [style=dashed, label=\"again\"];\n", d->prefix, (long long)d->last,
              d->prefix, (long long)head);
    }
    d->last = head;
    return;
  }
  }
}

static void steps(dot *d, const prog_step *st, uint32_t n, int depth, uint32_t rid) {
  for (uint32_t i = 0; i < n; i++) step(d, &st[i], depth, rid);
}

int schedrun_program_write_dot(const schedrun_program_t *h, const schedrun_report_t *r, const char *path,
                               schedrun_error_t *err) {
  if (!h || !path) return err_set(err, SCHEDRUN_EINVAL, "schedrun_program_write_dot: %s is NULL", h ? "path" : "the program");
  const prog_program *p = h->p;
  int repeat = 1, jobs = 1;
  if (r) report_shape(r, &repeat, &jobs);
  strbuf sb;
  sb_init(&sb);
  sb_adds(&sb, "digraph schedrun {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n  label=\"");
  esc(&sb, p->name);
  sb_adds(&sb, " as recorded\";\n");
  /* each context once, drawn for the first job that ran in it */
  bool seen[SCHEDRUN_MAX_DEVICES][64];
  memset(seen, 0, sizeof seen);
  int clusters = 0;
  for (int run = 0; run < repeat; run++)
    for (int job = 0; job < jobs; job++) {
      int dev = r ? schedrun_report_device(r, run, job) : 0;
      int slot = run % (p->buffer_sets > 0 ? p->buffer_sets : 1);
      if (dev < 0 || dev >= SCHEDRUN_MAX_DEVICES || slot >= 64 || seen[dev][slot]) continue;
      seen[dev][slot] = true;
      dot d = {&sb, p, h->s, {{0}}, "", 0, 0, -1};
      d.env.v[EXV_JOB] = job;
      d.env.v[EXV_RUN] = run;
      d.env.v[EXV_DEVICE] = dev;
      snprintf(d.prefix, sizeof d.prefix, "d%ds%d", dev, slot);
      sb_addf(&sb, "  subgraph cluster_%s {\n    label=\"device %d, binding slot %d (as recorded for run %d, job %d)\";\n",
              d.prefix, dev, slot, run, job);
      steps(&d, p->steps, p->nsteps, 0, 0);
      if (d.more) {
        sb_addf(&sb, "    %smore [shape=note, label=\"... %u more nodes\"];\n", d.prefix, d.more);
        if (d.last >= 0) sb_addf(&sb, "    %sn%lld -> %smore;\n", d.prefix, (long long)d.last, d.prefix);
      }
      sb_adds(&sb, "  }\n");
      clusters++;
    }
  sb_adds(&sb, "}\n");
  if (sb.failed) {
    sb_free(&sb);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory writing the graph");
  }
  int rc = clusters ? fs_write_output(path, sb.data, sb.len, err)
                    : err_set(err, SCHEDRUN_EINVAL, "schedrun_program_write_dot: no job of the report ran on a device");
  sb_free(&sb);
  return rc;
}
