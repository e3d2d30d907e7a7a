/*
 * One msgpack object from bytes, in one pass: the structure is checked as it
 * is read (exactly one object, no deeper than MSG_MAX_DEPTH, no container
 * claiming more elements than there are bytes, nothing after it) and the
 * tree is built as msgpack-c's objects in an arena of the calling thread's,
 * emptied at its next parse and kept for it (msgpack-c's own unpacker, after
 * a separate scan of the bytes, took twice as long for a SUBMIT).
 * Strings, bytes and extensions point into the bytes parsed.
 */
#ifndef SCHEDRUN_MSG_PARSE_H
#define SCHEDRUN_MSG_PARSE_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

/* NULL when p[0..n) is exactly one well-formed object (*root, valid until
 * the thread's next msg_parse); else why it is not. */
const char *msg_parse(const uint8_t *p, size_t n, msgpack_object *root);

#endif
