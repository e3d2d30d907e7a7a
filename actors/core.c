/* The shared program registry. */
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
