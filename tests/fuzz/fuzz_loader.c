/*
 * libFuzzer target: the config loader. Any text must load or be refused with
 * SCHEDRUN_ECONFIG and "file:line:column: message" lines, never crash or hang.
 * Files a config names are read relative to a directory that does not exist,
 * so the fuzzer reaches none of this machine's files.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "program/program.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  prog_program *p = NULL;
  schedrun_error_t err = {0};
  int rc = prog_load_string((const char *)data, size, "/nonexistent/fuzz.yaml", &p, &err);
  if (rc == SCHEDRUN_OK) {
    assert(p);
    prog_free(p);
  } else {
    assert(!p && err.message);
    assert(rc == SCHEDRUN_ECONFIG || rc == SCHEDRUN_ENOMEM);
    if (rc == SCHEDRUN_ECONFIG) assert(strncmp(err.message, "/nonexistent/fuzz.yaml:", 23) == 0);
  }
  schedrun_error_clear(&err);
  return 0;
}
