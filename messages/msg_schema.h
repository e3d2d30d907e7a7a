/*
 * The schema tables that drive the msgpack codec (messages/msg_codec.c
 * defines them and decodes; msg_encode.c encodes): one table per message
 * body, naming each field, its kind and its place in the struct. On the
 * wire a body is a msgpack array of its fields' values in the table's order
 * (the names are for error messages only).
 * Private to messages/.
 */
#ifndef SCHEDRUN_MSG_SCHEMA_H
#define SCHEDRUN_MSG_SCHEMA_H

#include <stddef.h>

#include "messages/msg.h"

typedef enum { FK_U32, FK_I32, FK_U64, FK_I64, FK_STR, FK_BIN, FK_U64S, FK_STRS, FK_ARR } field_kind;

typedef struct schema schema;
typedef struct field {
  const char *name; /* what errors call it */
  field_kind kind;
  size_t off;
  const schema *sub; /* FK_ARR: element schema */
} field;

struct schema {
  const char *name;
  size_t size; /* of one element, for FK_ARR */
  size_t nfields;
  const field *fields;
};

/* Arrays of anything share this layout (pointer, count). */
typedef struct { void *v; size_t n; } any_arr;

/* The body schema of each message type (NULL for none). */
extern const schema *const msg_body_schema[MSG__END];

#endif
