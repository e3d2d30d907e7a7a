/*
 * How much memory this machine can still give a host device: its arena is a
 * memory file, whose pages come from RAM as they are touched, so a buffer
 * larger than what is left would not fail when allocated but later, as a
 * SIGBUS in the worker or the kernel's OOM killer ending a process. The
 * backend checks here first and refuses with the numbers.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "gpu/host/host_device.h"

/* A number in a one-line file (a cgroup's limit or usage); false when the
 * file is absent or says "max". */
static bool read_u64_file(const char *path, uint64_t *v) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fscanf(f, "%" SCNu64, v) == 1;
  fclose(f);
  return ok;
}

void host_memory_room(uint64_t *avail, uint64_t *total) {
  *avail = *total = UINT64_MAX;
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    uint64_t kib;
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "MemTotal: %" SCNu64 " kB", &kib) == 1) *total = kib << 10;
      else if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1) *avail = kib << 10;
    }
    fclose(f);
  }
  /* a container's limit (cgroup v2, then v1) */
  uint64_t limit, used;
  if ((read_u64_file("/sys/fs/cgroup/memory.max", &limit) && read_u64_file("/sys/fs/cgroup/memory.current", &used)) ||
      (read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", &limit) &&
       read_u64_file("/sys/fs/cgroup/memory/memory.usage_in_bytes", &used))) {
    if (limit < *total) *total = limit;
    uint64_t left = used < limit ? limit - used : 0;
    if (left < *avail) *avail = left;
  }
  if (*avail > *total) *avail = *total;
}
