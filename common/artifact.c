/* See artifact.h. */
#include <stdlib.h>
#include <string.h>

#include "common/artifact.h"

static const char magic[8] = {'S', 'C', 'H', 'E', 'D', 'A', 'R', '1'};

static void sha_hex(const void *p, size_t n, char out[65]) {
  hash_ctx *h = hash_new();
  hash_add(h, p, n);
  hash_final_hex(h, out);
}

int artifact_write(const char *path, const char *key, const void *payload, size_t len,
                   schedrun_error_t *err) {
  if (strlen(key) != 64) return err_set(err, SCHEDRUN_EINVAL, "artifact key must be 64 hex digits");
  uint8_t *buf = malloc(ARTIFACT_HEADER + len);
  if (!buf) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  uint32_t version = 1, zero = 0;
  uint64_t n = len;
  char sum[65];
  sha_hex(payload, len, sum);
  memcpy(buf, magic, 8);
  memcpy(buf + 8, &version, 4);
  memcpy(buf + 12, &zero, 4);
  memcpy(buf + 16, &n, 8);
  memcpy(buf + 24, sum, 64);
  memcpy(buf + 88, key, 64);
  if (len) memcpy(buf + ARTIFACT_HEADER, payload, len);
  int rc = fs_write_atomic(path, buf, ARTIFACT_HEADER + len, err);
  free(buf);
  return rc;
}

const char *artifact_check(const void *file, size_t size, const char *key) {
  const uint8_t *data = file;
  uint32_t version;
  uint64_t n = 0;
  char sum[65];
  if (size < ARTIFACT_HEADER) return "shorter than its header";
  if (memcmp(data, magic, 8) != 0) return "not a schedrun artifact";
  if (memcpy(&version, data + 8, 4), version != 1) return "an unknown artifact version";
  if (memcpy(&n, data + 16, 8), n != size - ARTIFACT_HEADER) return "truncated or padded";
  if (strlen(key) != 64 || memcmp(data + 88, key, 64) != 0) return "stored under another key";
  if (sha_hex(data + ARTIFACT_HEADER, (size_t)n, sum), memcmp(sum, data + 24, 64) != 0)
    return "corrupted (checksum mismatch)";
  return NULL;
}

int artifact_read(const char *path, const char *key, uint8_t **payload, size_t *len,
                  schedrun_error_t *err) {
  *payload = NULL;
  *len = 0;
  char *data;
  size_t size;
  int rc = fs_read_owned(path, ARTIFACT_MAX_BYTES, &data, &size, err);
  if (rc) return rc;
  const char *why = artifact_check(data, size, key);
  if (why) {
    free(data);
    return err_set(err, SCHEDRUN_EIO, "%s: %s", path, why);
  }
  size_t n = size - ARTIFACT_HEADER;
  memmove(data, data + ARTIFACT_HEADER, n);
  *payload = (uint8_t *)data;
  *len = n;
  return SCHEDRUN_OK;
}
