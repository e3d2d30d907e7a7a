/*
 * Execution-context keys. A recorded node is found by
 *   {program, device, binding slot, command, record id}:
 * the first three name a recorded sequence (seq_key), the last two a node in
 * it (node_key). One command recorded many times (per device, per unrolled
 * iteration, per buffer set in flight) has one state per full key; nothing is
 * ever stored per command alone.
 */
#ifndef SCHEDRUN_EXEC_CTX_KEY_H
#define SCHEDRUN_EXEC_CTX_KEY_H

#include <stdint.h>

typedef struct seq_key {
  uint64_t program;
  uint32_t device;
  uint32_t slot;
} seq_key;

typedef struct node_key {
  uint32_t command;   /* the step's pre-order index in the program */
  uint32_t record_id; /* which recording of it: the unrolled iteration, nested
                         loops composing in mixed radix (outer * trips + inner) */
} node_key;

#endif
