/*
 * The translation unit a kernel becomes on the CPU, shared by the host
 * compile target and the driver double: the prelude (CUDA's built-ins), the
 * block runner when the source needs one (gpu/host/host_blocks.hpp), the
 * source with its extern __shared__ arrays made pointers into the launch's
 * dynamic shared memory, and one launcher per kernel.
 *
 * A launcher is
 *   int __sched_launch_<entry>(const unsigned *grid, const unsigned *block,
 *                              const uint64_t *args, unsigned shared_bytes,
 *                              char *text, unsigned text_cap)
 * and returns 0, or -1 with a NUL-terminated text naming the kernel (a block
 * whose barrier not all its threads reached, say).
 */
#ifndef SCHEDRUN_HOST_KERNEL_TU_H
#define SCHEDRUN_HOST_KERNEL_TU_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"

/* The 1-based line of identifier `ident` in C/C++ source, outside comments,
 * strings and characters; 0 when it is not there. */
int host_find_ident(const char *src, const char *ident);
/* Whether src uses __shared__, a barrier or a warp operation, so that its
 * kernels run their blocks' threads as fibers. */
bool host_tu_needs_blocks(const char *src);
/* The prelude, with the block runner when `blocks`. */
void host_tu_prelude(strbuf *sb, bool blocks);
/* src, its `extern __shared__ T name[];` declarations made `T *name = <the
 * launch's dynamic shared memory>;` (same lines). Returns 0, or the line of
 * such a declaration outside a function, which the host cannot give a
 * per-block address. */
int host_tu_source(strbuf *sb, const char *src);
/* The launcher of kernel `name`, whose symbol ends in `entry`: `unpack`
 * (statements that make its arguments from __a) then `call` (the kernel
 * call, a statement), once per thread of the grid. */
void host_tu_launcher(strbuf *sb, const char *entry, const char *name, const char *unpack, const char *call,
                      bool blocks);

#endif
