/* The C++ text that checks a kernel's declared `params` against its
 * signature at compile time, shared by every compile target. Self-contained
 * (no standard headers), so NVRTC takes it as well as the host compiler. */
#ifndef SCHEDRUN_KERNEL_ABI_H
#define SCHEDRUN_KERNEL_ABI_H

#include "common/common.h"
#include "gpu/backend.h"

/* Type traits used by the checks; put once before the kernel source. */
extern const char kernel_abi_traits[];
/* static_asserts for req's entry and params; put after the kernel source. */
void kernel_abi_checks(strbuf *sb, const gpu_compile_req *req);
/* The traits, a #line directive so that compiler messages point into the
 * config (or kernel file), the kernel's source, and the checks: the part of a
 * translation unit every target shares. */
void kernel_abi_source(strbuf *sb, const gpu_compile_req *req);
/* "typename __sched_param<I, decltype(entry)>::type" for parameter i. */
void kernel_abi_param_type(strbuf *sb, const gpu_compile_req *req, uint32_t i);

#endif
