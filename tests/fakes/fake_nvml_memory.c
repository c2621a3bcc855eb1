/* A test double of libnvidia-ml.so.1 with just what the hook's memory report needs: one
 * device with 16 GiB, 1 GiB of it used by someone else, 256 MiB reserved (v2).
 * Build: gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -Wl,-Bsymbolic -o libnvidia-ml.so.1 ...
 */
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))
#define GIB (1ull << 30)

struct mem { unsigned long long total, free, used; };
struct mem_v2 { unsigned version; unsigned long long total, reserved, free, used; };

EXPORT int nvmlInit_v2(void) { return 0; }
EXPORT int nvmlShutdown(void) { return 0; }
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **dev) {
  if (i != 0) return 2;
  *dev = (void *)0xde1;
  return 0;
}
EXPORT int nvmlDeviceGetMemoryInfo(void *dev, struct mem *m) {
  if (dev != (void *)0xde1 || !m) return 2;
  m->total = 16 * GIB;
  m->used = GIB;
  m->free = 15 * GIB;
  return 0;
}
EXPORT int nvmlDeviceGetMemoryInfo_v2(void *dev, struct mem_v2 *m) {
  if (dev != (void *)0xde1 || !m) return 2;
  m->total = 16 * GIB;
  m->reserved = GIB / 4;
  m->used = GIB;
  m->free = 16 * GIB - GIB / 4 - GIB;
  return 0;
}
