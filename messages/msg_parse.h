/*
 * One msgpack object from bytes, through msgpack-c's unpacker, with the
 * checks msgpack-c does not make done first, in one pass over the bytes
 * that allocates nothing: they are exactly one object (nothing after it),
 * no deeper than MSG_MAX_DEPTH, and no container claims more elements than
 * there are bytes left, in itself and in the whole message (msgpack-c
 * allocates a container's elements when it reads its header, so a 5-byte
 * message claiming 2^32 elements would otherwise ask for 64 GiB). The tree
 * is then msgpack_unpack's, in a zone of the calling thread's, cleared at
 * its next parse and kept for it. Strings, bytes and extensions point into
 * the bytes parsed.
 */
#ifndef SCHEDRUN_MSG_PARSE_H
#define SCHEDRUN_MSG_PARSE_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

/* NULL when p[0..n) is exactly one well-formed object (*root, valid until
 * the thread's next msg_parse); else why it is not. */
const char *msg_parse(const uint8_t *p, size_t n, msgpack_object *root);

/* The checks alone: NULL when p[0..n) passes them. */
const char *msg_scan(const uint8_t *p, size_t n);

#endif
