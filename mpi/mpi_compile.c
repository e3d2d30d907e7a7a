/* Compiling once per compile target: the rank that compiles, and the
 * artifacts it sends to the ranks that share its target. */
#include <stdlib.h>

#include "common/artifact.h"
#include "mpi/mpi_internal.h"

int mpi_compile_here(schedrun_mpi_t *m, schedrun_program_t *p, char **why) {
  *why = NULL;
  schedrun_job_options_t o;
  schedrun_job_options_init(&o);
  o.record_only = 1;
  o.device = 0;
  schedrun_job_t id = 0;
  schedrun_job_result_t *r = NULL;
  schedrun_error_t err = {0};
  int rc = schedrun_submit(m->s, p, &o, &id, &err);
  if (rc == SCHEDRUN_OK) rc = schedrun_wait(m->s, id, -1, &r, &err);
  if (rc == SCHEDRUN_OK) rc = schedrun_job_result_info(r)->status;
  if (rc != SCHEDRUN_OK)
    *why = xstrdup(r ? schedrun_job_result_error(r) : err.message ? err.message : schedrun_strerror(rc));
  schedrun_job_result_free(&r);
  schedrun_error_clear(&err);
  return rc;
}

typedef struct art_list {
  msgpack_sbuffer items;
  msgpack_packer pk;
  uint32_t n;
} art_list;

static void add_artifact(const char *name, const char *path, void *user) {
  art_list *a = user;
  char *data = NULL;
  size_t len = 0;
  if (fs_read_owned(path, ARTIFACT_MAX_BYTES, &data, &len, NULL) != SCHEDRUN_OK) return; /* the others compile it themselves */
  msgpack_pack_array(&a->pk, 2);
  wire_pack_str(&a->pk, name);
  wire_pack_bin(&a->pk, data, len);
  a->n++;
  free(data);
}

void mpi_send_artifacts(schedrun_mpi_t *m, schedrun_program_t *p, uint64_t pid, const int *to, size_t n) {
  if (n == 0) return;
  art_list a = {.n = 0};
  msgpack_sbuffer_init(&a.items);
  msgpack_packer_init(&a.pk, &a.items, msgpack_sbuffer_write);
  schedrun_program_artifacts(m->s, p, add_artifact, &a, NULL); /* none: the others compile */
  for (size_t i = 0; i < n; i++) {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    wire_pack_begin(&sb, &pk, W_ARTIFACTS, 3);
    msgpack_pack_uint64(&pk, pid);
    msgpack_pack_array(&pk, a.n);
    if (a.items.size) msgpack_sbuffer_write(&sb, a.items.data, a.items.size);
    mpi_send(m, to[i], &sb);
  }
  msgpack_sbuffer_destroy(&a.items);
}
