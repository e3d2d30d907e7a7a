/*
 * libFuzzer target: expressions. Any text must parse or be refused with a
 * sentence; what parses must evaluate (at every depth, with extreme variable
 * values) to a value or an error, never overflow or crash.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "program/program.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  int depth = data[0] % (PROG_MAX_DEPTH + 1);
  prog_expr e;
  char why[256];
  if (prog_expr_parse(text, depth, &e, why, sizeof why) == NULL) {
    static const int64_t extremes[] = {0, 1, -1, INT64_MAX, INT64_MIN, 1000000007};
    for (size_t k = 0; k < sizeof extremes / sizeof extremes[0]; k++) {
      prog_env env;
      for (int v = 0; v < EXV__COUNT; v++) env.v[v] = extremes[(k + (size_t)v) % 6];
      prog_value out;
      (void)prog_expr_eval(&e, &env, &out);
    }
    prog_expr_free(&e);
  } else {
    assert(why[0]);
  }
  free(text);
  return 0;
}
