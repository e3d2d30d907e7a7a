/*
 * Programs through the public API: loading a config (file or text), joining a
 * scheduler on the first job, and giving a program back once its jobs are done.
 */
#include <stdlib.h>
#include <string.h>

#include "lib/deps.h"

int api_wrap_program(prog_program *p, schedrun_program_t **out, schedrun_error_t *err) {
  schedrun_program_t *h = calloc(1, sizeof *h);
  if (!h) {
    prog_free(p);
    return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  }
  h->p = p;
  *out = h;
  return SCHEDRUN_OK;
}

/* A program loaded into scheduler s runs on s's devices: a config that names
 * others is refused rather than run where it did not ask to run. */
static int devices_fit(const schedrun_t *s, prog_program *p, schedrun_error_t *err) {
  if (!s || p->devices_at.line == 0 ||
      gpu_devices_fit(p->devices, s->opened_devices, s->core.backend, s->fallback != NULL))
    return SCHEDRUN_OK;
  strbuf names;
  sb_init(&names);
  for (int d = 0; d < s->core.ndevices; d++) sb_addf(&names, "%s%s", d ? ", " : "", s->core.backend->ops->device_name(s->core.backend, d));
  int rc = err_set(err, SCHEDRUN_ECONFIG,
                   "%s:%d:%d: devices '%s' are not this scheduler's: it was opened with devices '%s' (%s); open "
                   "one with the program's devices (schedrun_program_devices), or load the program without a "
                   "scheduler to run it wherever it is submitted",
                   p->path, p->devices_at.line, p->devices_at.col, p->devices, s->opened_devices,
                   names.data ? names.data : "");
  sb_free(&names);
  prog_free(p);
  return rc;
}

int schedrun_program_load_file(schedrun_t *s, const char *path, schedrun_program_t **out, schedrun_error_t *err) {
  if (!out || !path) return err_set(err, SCHEDRUN_EINVAL, "schedrun_program_load_file: %s is NULL", out ? "path" : "out");
  *out = NULL;
  prog_program *p;
  int rc = prog_load_file(path, &p, err);
  if (!rc) rc = devices_fit(s, p, err);
  return rc ? rc : api_wrap_program(p, out, err);
}

int schedrun_program_load_string(schedrun_t *s, const char *yaml, const char *origin, schedrun_program_t **out,
                                 schedrun_error_t *err) {
  if (!out || !yaml) return err_set(err, SCHEDRUN_EINVAL, "schedrun_program_load_string: %s is NULL", out ? "yaml" : "out");
  *out = NULL;
  prog_program *p;
  int rc = prog_load_string(yaml, strlen(yaml), origin ? origin : "<string>", &p, err);
  if (!rc) rc = devices_fit(s, p, err);
  return rc ? rc : api_wrap_program(p, out, err);
}

int api_attach(schedrun_t *s, schedrun_program_t *h, schedrun_error_t *err) {
  if (h->s == s) return SCHEDRUN_OK;
  if (h->s) return err_set(err, SCHEDRUN_EINVAL, "program '%s' belongs to another scheduler", h->p->name);
  pthread_mutex_lock(&s->core.reg_lock);
  h->id = ++s->next_program;
  int rc = hmap_put(&s->core.programs, &h->id, h->p);
  pthread_mutex_unlock(&s->core.reg_lock);
  if (rc) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  h->s = s;
  h->next = s->programs;
  s->programs = h;
  return SCHEDRUN_OK;
}

void schedrun_program_free(schedrun_program_t **ph) {
  if (!ph || !*ph) return;
  schedrun_program_t *h = *ph;
  schedrun_t *s = h->s;
  *ph = NULL;
  if (!s) {
    prog_free(h->p);
    free(h);
    return;
  }
  pthread_mutex_lock(&s->lock);
  for (schedrun_program_t **pp = &s->programs; *pp; pp = &(*pp)->next)
    if (*pp == h) {
      *pp = h->next;
      break;
    }
  bool closed = s->closed;
  /* jobs of it still held for the jobs they run after have not reached the
   * scheduler: the RELEASE waits until they have (deps_late_releases) */
  bool later = !closed && deps_program_held(s, h->p);
  if (later && s->nlate == s->late_cap) {
    size_t cap = s->late_cap ? 2 * s->late_cap : 4;
    uint64_t *v = realloc(s->late_release, cap * sizeof *v);
    if (v) {
      s->late_release = v;
      s->late_cap = cap;
    } else {
      later = false; /* without memory: released now; its held jobs fail, naming the release */
    }
  }
  if (later) s->late_release[s->nlate++] = h->id;
  pthread_mutex_unlock(&s->lock);
  /* ask the actors to drop what they hold for it once its jobs are done; the
   * completion thread frees it when they answer (or the scheduler's close) */
  if (!closed && !later) api_send_release(s, h->id);
  free(h);
}

void api_send_release(schedrun_t *s, uint64_t program) {
  msg r;
  msg_init(&r, MSG_RELEASE, 0, ACTOR_CLIENT);
  r.body.release.program = program;
  pthread_mutex_lock(&s->send_lock);
  if (!s->term_sent) mbox_send(s->outbox, &r, NULL);
  pthread_mutex_unlock(&s->send_lock);
  msg_free(&r);
}

const char *schedrun_program_name(const schedrun_program_t *p) { return p ? p->p->name : NULL; }
int schedrun_program_repeat(const schedrun_program_t *p) { return p ? p->p->repeat : 0; }
int schedrun_program_buffer_sets(const schedrun_program_t *p) { return p ? p->p->buffer_sets : 0; }
int schedrun_program_jobs(const schedrun_program_t *p) { return p ? p->p->jobs : 0; }
const char *schedrun_program_devices(const schedrun_program_t *p) { return p ? p->p->devices : NULL; }

int schedrun_program_buffer_count(const schedrun_program_t *p) { return p ? (int)p->p->nbuffers : 0; }

int schedrun_program_buffer(const schedrun_program_t *p, int i, schedrun_buffer_info_t *out) {
  if (!p || !out || i < 0 || (uint32_t)i >= p->p->nbuffers) return SCHEDRUN_EINVAL;
  const prog_buffer *b = &p->p->buffers[i];
  _Static_assert(SCHEDRUN_MAX_DIMS == PROG_MAX_DIMS, "the public shape holds every dimension");
  memset(out, 0, sizeof *out);
  out->name = b->name;
  out->type = prog_type_name(b->type);
  out->elem_size = prog_type_size(b->type);
  out->count = b->count;
  out->ndims = (int)b->ndims;
  for (uint32_t d = 0; d < b->ndims; d++) out->dims[d] = b->dims[d];
  return SCHEDRUN_OK;
}
