/*
 * libFuzzer target: the message decoder. Any bytes must decode or be refused
 * with SCHEDRUN_EPROTO, never crash; what decodes must encode again and decode
 * to the same bytes (the codec is one schema in both directions).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "messages/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  msg m;
  schedrun_error_t err = {0};
  int rc = msg_decode(data, size, &m, &err);
  if (rc != SCHEDRUN_OK) {
    assert(rc == SCHEDRUN_EPROTO && err.message);
    schedrun_error_clear(&err);
    return 0;
  }
  uint8_t *buf = NULL, *again = NULL;
  size_t len = 0, len2 = 0;
  if (msg_encode(&m, &buf, &len, &err) == SCHEDRUN_OK) {
    msg m2;
    int rc2 = msg_decode(buf, len, &m2, &err);
    assert(rc2 == SCHEDRUN_OK);
    assert(msg_encode(&m2, &again, &len2, &err) == SCHEDRUN_OK);
    assert(len2 == len && memcmp(buf, again, len) == 0);
    msg_free(&m2);
  }
  schedrun_error_clear(&err);
  free(buf);
  free(again);
  msg_free(&m);
  return 0;
}
