/*
 * Cache artifacts on disk: a fixed header, then the payload (a shared object,
 * a cubin). The header names the cache key and carries the payload's length
 * and SHA-256, so a reader detects a truncated, corrupted or foreign file and
 * treats it as a miss instead of loading it.
 *
 *   "SCHEDAR1" | u32 version | u32 0 | u64 payload length |
 *   64 hex digits: SHA-256 of the payload | 64 hex digits: the cache key
 */
#ifndef SCHEDRUN_ARTIFACT_H
#define SCHEDRUN_ARTIFACT_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

#define ARTIFACT_HEADER 152
/* No artifact is larger: a file in the cache that is, is not one. */
#define ARTIFACT_MAX_BYTES (1ull << 30)

/* Publishes atomically (temporary file, then rename). */
int artifact_write(const char *path, const char *key, const void *payload, size_t len,
                   schedrun_error_t *err);
/* Reads and verifies; *payload is malloc'ed. SCHEDRUN_EIO with the reason when
 * the file is missing, short, corrupted or for another key. */
int artifact_read(const char *path, const char *key, uint8_t **payload, size_t *len,
                  schedrun_error_t *err);

/* Why a whole artifact file's bytes are not a good artifact for `key`
 * (short, foreign, truncated, another key, corrupted), or NULL when they are. */
const char *artifact_check(const void *file, size_t size, const char *key);

#endif
