/*
 * The config loader: YAML (libyaml's document API) to a checked prog_program.
 *
 * The whole document is walked even after a problem is found, so that one run
 * reports every problem, each as "file:line:col: message" (1-based, pointing
 * at the offending node). Nothing is returned unless there were none.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "program/load_util.h"
#include "program/npy.h"
#include "program/yaml_depth.h"

/* ---- kernels ---- */

static void load_kernels(ld *l, node *n) {
  if (n->type != YAML_MAPPING_NODE) {
    ld_problem(l, n, "kernels must be a mapping of kernel names, not %s", ld_kind_name(n));
    return;
  }
  size_t count = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
  l->p->kernels = ld_calloc(l, n, count, sizeof(prog_kernel), "the kernels");
  if (!l->p->kernels) return;
  for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
    node *k = ld_get(l, pr->key), *v = ld_get(l, pr->value);
    if (!k || !v || !ld_is_scalar(l, k, "a kernel name")) continue;
    const char *name = ld_sval(k);
    bool dup = false;
    for (uint32_t i = 0; i < l->p->nkernels; i++)
      if (strcmp(l->p->kernels[i].name, name) == 0) dup = true;
    if (dup) {
      ld_problem(l, k, "kernel '%s' is defined twice", name);
      continue;
    }
    prog_kernel *kr = &l->p->kernels[l->p->nkernels++];
    kr->name = xstrdup(name);
    kr->loc = ld_loc_of(k);
    static const char *const keys[] = {"params", "source", "file", "entry", NULL};
    node *f[4];
    char what[160];
    snprintf(what, sizeof what, "kernel '%s'", name);
    if (!ld_read_map(l, v, what, keys, f)) continue;
    if (!f[0]) ld_problem(l, v, "kernel '%s' has no params (a list of types)", name);
    else if (f[0]->type != YAML_SEQUENCE_NODE)
      ld_problem(l, f[0], "params of kernel '%s' must be a list of types", name);
    else if (ld_items(f[0]) > PROG_MAX_PARAMS)
      ld_problem(l, f[0], "kernel '%s' has %zu params; at most %d", name,
              ld_items(f[0]), PROG_MAX_PARAMS);
    else {
      size_t np = ld_items(f[0]);
      kr->params = ld_calloc(l, f[0], np, sizeof(prog_type), "the kernel's params");
      strbuf txt;
      sb_init(&txt);
      for (size_t i = 0; kr->params && i < np; i++) {
        node *t = ld_get(l, f[0]->data.sequence.items.start[i]);
        prog_type ty;
        if (!t || !ld_is_scalar(l, t, "a parameter type")) continue;
        if (!ld_parse_type(ld_sval(t), &ty) || ty == PT_U8) {
          ld_problem(l, t, "unknown parameter type '%s' (known: i32 u32 i64 u64 f32 f64 ptr)",
                  ld_sval(t));
          continue;
        }
        kr->params[kr->nparams++] = ty;
        sb_addf(&txt, "%s%s", i ? "," : "", prog_type_name(ty));
      }
      kr->params_text = sb_take(&txt);
    }
    if (f[1] && f[2]) ld_problem(l, f[2], "kernel '%s' has both source and file; give one", name);
    else if (f[1]) {
      if (ld_is_scalar(l, f[1], "source")) {
        if (f[1]->data.scalar.length > PROG_MAX_SOURCE_BYTES)
          ld_problem(l, f[1], "kernel '%s' has %zu bytes of source; at most %u MiB", name, f[1]->data.scalar.length,
                  PROG_MAX_SOURCE_BYTES >> 20);
        kr->source = xstrdup(ld_sval(f[1]));
        kr->source_file = xstrdup(l->file);
        bool block = f[1]->data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
                     f[1]->data.scalar.style == YAML_FOLDED_SCALAR_STYLE;
        kr->first_line = (uint32_t)f[1]->start_mark.line + (block ? 2 : 1);
      }
    } else if (f[2]) {
      const char *rel = ld_read_str(l, f[2], "file");
      if (rel) {
        char *path = NULL;
        size_t len = 0;
        char *data = ld_read_file(l, f[2], rel, "kernel", PROG_MAX_SOURCE_BYTES, &len, &path);
        if (data && memchr(data, '\0', len)) {
          ld_problem(l, f[2], "kernel file '%s' is not text", rel);
        } else if (data) {
          kr->source = data;
          data = NULL;
          kr->source_file = path;
          path = NULL;
          kr->first_line = 1;
        }
        free(data);
        free(path);
      }
    } else {
      ld_problem(l, v, "kernel '%s' needs source (inline) or file", name);
    }
    if (f[3]) {
      const char *e = ld_read_str(l, f[3], "entry");
      if (e) kr->entry = xstrdup(e);
    }
    if (!kr->entry) kr->entry = xstrdup(name);
    bool ident = kr->entry[0] != '\0';
    for (const char *c = kr->entry; *c; c++)
      if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
            (c != kr->entry && *c >= '0' && *c <= '9')))
        ident = false;
    if (!ident) ld_problem(l, f[3] ? f[3] : k, "entry '%s' is not a C function name", kr->entry);
    else if (strlen(kr->entry) > PROG_MAX_ENTRY)
      ld_problem(l, f[3] ? f[3] : k, "entry of kernel '%s' has %zu characters; at most %d", name, strlen(kr->entry),
              PROG_MAX_ENTRY);
  }
}

/* ---- top level ---- */

static bool devices_valid(const char *s);

/* "a+b": one part of each kind, host and CUDA. */
static bool mixed_valid(const char *s) {
  const char *plus = strchr(s, '+');
  char a[64];
  if ((size_t)(plus - s) >= sizeof a || strchr(plus + 1, '+')) return false;
  snprintf(a, sizeof a, "%.*s", (int)(plus - s), s);
  const char *b = plus + 1;
  bool ah = !strncmp(a, "host", 4), bh = !strncmp(b, "host", 4);
  bool ac = !strncmp(a, "cuda", 4), bc = !strncmp(b, "cuda", 4);
  return devices_valid(a) && devices_valid(b) && ((ah && bc) || (ac && bh));
}

static bool devices_valid(const char *s) {
  if (strchr(s, '+')) return mixed_valid(s);
  if (!strcmp(s, "auto") || !strcmp(s, "host") || !strcmp(s, "cuda") || !strcmp(s, "all"))
    return true;
  if (!strncmp(s, "host:", 5)) {
    char *end;
    long n = strtol(s + 5, &end, 10);
    return s[5] && *end == '\0' && n >= 1 && n <= SCHEDRUN_MAX_DEVICES;
  }
  if (!strncmp(s, "cuda:", 5)) {
    const char *p = s + 5;
    if (!*p) return false;
    while (*p) {
      char *end;
      long n = strtol(p, &end, 10);
      if (end == p || n < 0 || n >= SCHEDRUN_MAX_DEVICES) return false;
      p = end;
      if (*p == ',') p++;
      else if (*p) return false;
    }
    return true;
  }
  return false;
}

static void load_doc(ld *l, node *root) {
  static const char *const keys[] = {"version", "name",    "devices", "repeat", "buffer_sets", "jobs",
                                     "kernels", "buffers", "program", "expect", NULL};
  node *f[10];
  prog_program *p = l->p;
  if (root->type == YAML_MAPPING_NODE)
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top; pr++) {
      node *k = ld_get(l, pr->key);
      if (k && k->type == YAML_SCALAR_NODE && !strcmp(ld_sval(k), "stages")) {
        ld_problem(l, k, "this is a stages config (a job graph): sched-run runs it from its file; a program "
                         "loads it with schedrun_graph_load_file");
        return;
      }
    }
  if (!ld_read_map(l, root, "the config", keys, f)) return;
  int64_t v;
  if (!f[0]) ld_problem(l, root, "version is missing (this format is version 1)");
  else if (ld_read_int(l, f[0], "version", 0, INT32_MAX, &v) && v != 1)
    ld_problem(l, f[0], "version %lld is not supported (this is version 1)", (long long)v);
  if (f[1] && ld_read_str(l, f[1], "name")) p->name = xstrdup(ld_sval(f[1]));
  p->devices = xstrdup("auto");
  char spec[160] = "";
  if (f[2] && f[2]->type == YAML_SEQUENCE_NODE) {
    /* [cuda, host:1]: devices of both kinds, as "cuda+host:1" */
    yaml_node_item_t *it = f[2]->data.sequence.items.start;
    size_t n = (size_t)(f[2]->data.sequence.items.top - it);
    for (size_t i = 0; i < n && n == 2; i++) {
      node *x = ld_get(l, it[i]);
      if (!x || !ld_read_str(l, x, "an item of devices")) {
        spec[0] = '\0';
        break;
      }
      size_t len = strlen(spec);
      snprintf(spec + len, sizeof spec - len, "%s%s", i ? "+" : "", ld_sval(x));
    }
    if (n != 2)
      ld_problem(l, f[2], "devices lists %zu kind%s; a list names two, one host and one CUDA ([cuda, host:1])", n,
                 n == 1 ? "" : "s");
  } else if (f[2] && ld_read_str(l, f[2], "devices")) {
    snprintf(spec, sizeof spec, "%s", ld_sval(f[2]));
  }
  if (spec[0] && !devices_valid(spec)) {
    ld_problem(l, f[2], "devices '%s' is not one of auto, host, host:N, cuda, cuda:I,J, all, or a list of one "
                        "host and one CUDA kind ([cuda, host:1])", spec);
  } else if (spec[0]) {
    free(p->devices);
    p->devices = xstrdup(spec);
    p->devices_at = ld_loc_of(f[2]);
  }
  p->repeat = p->buffer_sets = p->jobs = 1;
  if (f[3] && ld_read_int(l, f[3], "repeat", 1, 1000000, &v)) p->repeat = (int)v;
  if (f[4] && ld_read_int(l, f[4], "buffer_sets", 1, 64, &v)) p->buffer_sets = (int)v;
  if (f[5] && ld_read_int(l, f[5], "jobs", 1, 1000000, &v)) p->jobs = (int)v;
  if (f[6]) {
    load_kernels(l, f[6]);
    uint64_t sources = 0;
    for (uint32_t i = 0; i < p->nkernels; i++) sources += p->kernels[i].source ? strlen(p->kernels[i].source) : 0;
    if (sources > PROG_MAX_SOURCES_BYTES)
      ld_problem(l, f[6], "the kernels have %llu bytes of source in all; at most %u MiB", (unsigned long long)sources,
              PROG_MAX_SOURCES_BYTES >> 20);
  }
  if (f[7]) ld_load_buffers(l, f[7]);
  if (!f[8]) ld_problem(l, root, "program is missing (a list of steps)");
  else {
    uint64_t nodes = ld_load_steps(l, f[8], 0, &p->steps, &p->nsteps);
    if (nodes > PROG_MAX_NODES && !l->too_many_steps)
      ld_problem(l, f[8], "the program unrolls to more than %u recorded nodes", PROG_MAX_NODES);
  }
  p->ncommands = l->next_command;
  if (f[9]) ld_load_expect(l, f[9]);
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* The document in l->doc (deleted here) becomes the program: *out, or
 * every problem in l->err. */
static int load_parsed(ld *l, prog_program **out) {
  node *root = yaml_document_get_root_node(&l->doc);
  if (!root) ld_problem(l, NULL, "the config is empty");
  else load_doc(l, root);
  yaml_document_delete(&l->doc);
  if (!l->p->name) {
    const char *b = base_name(l->file);
    const char *dot = strrchr(b, '.');
    l->p->name = dot && dot != b ? xstrndup(b, (size_t)(dot - b)) : xstrdup(b);
  }
  if (l->problems > MAX_PROBLEMS)
    err_append(l->err, SCHEDRUN_ECONFIG, "%s: %d more problems not shown", l->file, l->problems - MAX_PROBLEMS);
  if (l->problems) {
    prog_free(l->p);
    if (l->out_of_memory && l->err) l->err->code = SCHEDRUN_ENOMEM;
    return l->out_of_memory ? SCHEDRUN_ENOMEM : SCHEDRUN_ECONFIG;
  }
  *out = l->p;
  return SCHEDRUN_OK;
}

int prog_load_string(const char *text, size_t len, const char *origin, prog_program **out,
                     schedrun_error_t *err) {
  *out = NULL;
  ld l;
  memset(&l, 0, sizeof l);
  l.file = origin ? origin : "<string>";
  l.err = err;
  if (err) schedrun_error_clear(err);
  l.p = calloc(1, sizeof(prog_program));
  if (!l.p) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  l.p->path = xstrdup(l.file);

  if (!prog_yaml_parse(l.file, text, len, &l.doc, err)) {
    prog_free(l.p);
    return err && err->code == SCHEDRUN_ENOMEM ? SCHEDRUN_ENOMEM : SCHEDRUN_ECONFIG;
  }
  int rc = load_parsed(&l, out);
  if (rc != SCHEDRUN_OK) return rc;
  (*out)->text = malloc(len + 1);
  if (!(*out)->text) {
    prog_free(*out);
    *out = NULL;
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  memcpy((*out)->text, text, len);
  (*out)->text[len] = '\0';
  (*out)->text_len = len;
  return SCHEDRUN_OK;
}

int prog_load_document(void *yaml_document, const char *origin, const prog_source *src, prog_program **out,
                       schedrun_error_t *err) {
  *out = NULL;
  ld l;
  memset(&l, 0, sizeof l);
  l.doc = *(yaml_document_t *)yaml_document;
  memset(yaml_document, 0, sizeof(yaml_document_t)); /* ours now */
  l.file = origin ? origin : "<builder>";
  l.err = err;
  l.src = src;
  if (err) schedrun_error_clear(err);
  l.p = calloc(1, sizeof(prog_program));
  if (!l.p) {
    yaml_document_delete(&l.doc);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  l.p->path = xstrdup(l.file);
  return load_parsed(&l, out);
}

int prog_load_file(const char *path, prog_program **out, schedrun_error_t *err) {
  *out = NULL;
  char *data;
  size_t len;
  schedrun_error_t e = {0};
  if (fs_read_input(path, PROG_MAX_CONFIG_BYTES, &data, &len, &e) != SCHEDRUN_OK) {
    err_set(err, SCHEDRUN_ECONFIG, "%s", e.message);
    schedrun_error_clear(&e);
    return SCHEDRUN_ECONFIG;
  }
  int rc = prog_load_string(data, len, path, out, err);
  free(data);
  return rc;
}

