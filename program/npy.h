/*
 * NumPy's .npy format (version 1.0 written; 1.0, 2.0 and 3.0 read): a magic
 * string, a header that is a Python dict literal {'descr', 'fortran_order',
 * 'shape'}, then the elements. Buffers are written with their shape (one
 * dimension when they have none), in little-endian and C order; a file read
 * must hold exactly the buffer's element type and, for a buffer with a
 * shape, that shape, else its count (any shape with that many elements).
 */
#ifndef SCHEDRUN_NPY_H
#define SCHEDRUN_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "program/program.h"

/* Whether data starts like a .npy file. */
bool npy_is(const uint8_t *data, size_t len);
/* The header of an array of type t and shape dims[0..ndims) (ndims 0: one
 * dimension of count), padded so that the data starts 64-byte aligned; its
 * length, or 0 when cap is too small. */
size_t npy_header(prog_type t, uint32_t ndims, const uint64_t *dims, uint64_t count, uint8_t *out, size_t cap);
/* Checks a .npy image against the type and shape wanted (ndims 0: any shape
 * of count elements); NULL and *offset (where the elements start) when they
 * match, else why not (in why). */
const char *npy_check(const uint8_t *data, size_t len, prog_type t, uint64_t count, uint32_t ndims,
                      const uint64_t *dims, size_t *offset, char *why, size_t why_len);

#endif
