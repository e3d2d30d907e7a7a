/*
 * Host devices that run kernels in the library's own process: the worker's
 * request handler (gpu/host/host_worker.c) compiled into the library, for
 * host_in_process. Faster by one process hop per launch, but a kernel that
 * faults ends the program, and a deadline cannot stop a kernel.
 */
#include "gpu/host/host_worker_abi.h"
#define HW_IN_PROCESS 1
#include "gpu/host/host_worker.c"
