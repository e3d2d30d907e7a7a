/*
 * Decoding a message in one pass over its bytes: msgpack-c's unpacker,
 * calling back for every value, checked against the message's schema
 * (msg_schema.h) where it stands and written into the message at once. See
 * msg_decode.c.
 * Private to messages/.
 */
#ifndef SCHEDRUN_MSG_DECODE_H
#define SCHEDRUN_MSG_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "messages/msg.h"

/* Decodes p[0..n) into m (zeroed by the caller): SCHEDRUN_OK when the bytes
 * are exactly one envelope whose body matches its type's schema, else
 * SCHEDRUN_EPROTO (or SCHEDRUN_ENOMEM) with the place named in *err, and m
 * holding what was decoded so far (msg_free frees it). Lent bytes are
 * claimed only when `local`. The checks across fields (a batch's columns)
 * are the caller's. */
int msg_visit(const uint8_t *p, size_t n, msg *m, bool local, schedrun_error_t *err);

#endif
