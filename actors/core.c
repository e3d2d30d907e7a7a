/* The shared program registry and the ERROR helper every actor uses. */
#include <stdlib.h>
#include <string.h>

#include "actors/actor.h"
#include "actors/core.h"

const prog_program *core_program(schedrun_core *c, uint64_t id) {
  pthread_mutex_lock(&c->reg_lock);
  const prog_program *p = hmap_get(&c->programs, &id);
  pthread_mutex_unlock(&c->reg_lock);
  return p;
}

int actor_send_error(actor_t *self, const char *to, uint64_t job, int code, const char *text,
                     const char *const *teardown, size_t nteardown) {
  msg m;
  msg_init(&m, MSG_ERROR, job, actor_name(self));
  msg_error *e = &m.body.error;
  e->code = code;
  e->origin = xstrdup(actor_name(self));
  e->job = job;
  e->text = xstrdup(text ? text : "");
  e->teardown.v = calloc(nteardown ? nteardown : 1, sizeof(char *));
  for (size_t i = 0; e->teardown.v && i < nteardown; i++) e->teardown.v[e->teardown.n++] = xstrdup(teardown[i]);
  int rc = actor_send(self, to, &m);
  msg_free(&m);
  return rc;
}
