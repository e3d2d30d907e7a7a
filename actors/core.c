/* The shared program registry. */
#include <assert.h>
#include <stdio.h>
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

bool core_buffer_get(schedrun_core *c, uint64_t id, core_buffer *out) {
  pthread_mutex_lock(&c->reg_lock);
  const core_buffer *b = hmap_get(&c->buffers, &id);
  if (b) *out = *b;
  pthread_mutex_unlock(&c->reg_lock);
  return b != NULL;
}

void core_free_parcel(schedrun_core *c, uint64_t device, uint64_t addr) {
  /* a kept buffer's take names no device; a kept park's parcel is 0 */
  if (device < (uint64_t)c->ndevices && addr) c->backend->ops->mem_free(c->backend, (int)device, addr);
}

void core_free_parcels(schedrun_core *c, const msg_u64s *takes) {
  for (size_t i = 0; i + 2 < takes->n; i += 3)
    if (!(takes->v[i] & (MSG_TAKE_RESIDENT | MSG_TAKE_BOUND))) core_free_parcel(c, takes->v[i + 1], takes->v[i + 2]);
}

int core_send_queued(actor_t *self, msg_queue *q, const char *to, msg *m) {
  bool ring = false;
  schedrun_error_t err = {0};
  int rc = msgq_push(q, m, &ring, &err);
  schedrun_error_clear(&err);
  if (rc) return actor_send(self, to, m); /* the mailbox says what cannot be sent, job by job */
  if (!ring) return SCHEDRUN_OK;
  msg bell;
  msg_init(&bell, MSG_QUEUED, m->job, actor_name(self));
  rc = actor_send(self, to, &bell);
  msg_free(&bell);
  if (rc) msgq_unring(q);
  return rc;
}

int core_send_complete(actor_t *self, schedrun_core *c, const char *to, msg *m) {
  if (!c->queue_completions || strcmp(to, ACTOR_CLIENT) != 0) return actor_send(self, to, m);
  return core_send_queued(self, &c->to_client, to, m);
}

void core_name_devices(schedrun_core *c) {
  assert(c->ndevices >= 0 && c->ndevices <= SCHEDRUN_MAX_DEVICES);
  for (int d = 0; d < c->ndevices; d++) snprintf(c->execute_names[d], sizeof c->execute_names[d], ACTOR_EXECUTE_FMT, d);
}

int core_send_execute(actor_t *self, schedrun_core *c, int dev, msg *m) {
  assert(dev >= 0 && dev < c->ndevices);
  const char *to = c->execute_names[dev];
  if (c->no_batching) return actor_send(self, to, m);
  return core_send_queued(self, &c->to_execute[dev], to, m);
}

int core_send_executed(actor_t *self, schedrun_core *c, const char *to, msg *m) {
  if (c->no_batching || strcmp(to, ACTOR_SCHEDULER) != 0) return actor_send(self, to, m);
  return core_send_queued(self, &c->to_scheduler, to, m);
}
