/* A test double of libcuda.so.1 for the hook's tests (no GPU).
 *
 * Devices: FAKE_CUDA_DEVICES=N (default 1, at most 8) devices, ordinals 0..N-1. Each has a
 * primary context (cuDevicePrimaryCtxRetain), a fixed handle: device D's is 0xc0 + 0x10 * D
 * (0xc0, 0xd0, 0xe0, ...). The current context is per thread (cuCtxSetCurrent); a thread that set
 * none is on device 0 (cuCtxGetCurrent gives 0xc0 then, cuCtxGetDevice 0), and so is one that set a
 * handle that is none of these. Everything below happens on the device of the calling thread's
 * current context. UUIDs (cuDeviceGetUuid, cuDeviceGetUuid_v2): the 16 bytes
 * 66 61 6b 65 ("fake") 00 00 00 00 00 00 00 00 00 00 00 D, i.e. in NVML's text form
 * "GPU-66616b65-0000-0000-0000-0000000000DD" with DD the ordinal as two lowercase hex digits.
 *
 * Kernels run synchronously in the launching thread: they sleep the number of
 * nanoseconds that their first kernel parameter points to (a uint64_t), then append
 * "pid start_ns end_ns function\n" to the file named by FAKE_CUDA_LOG; on a device D >= 1 the
 * line is "pid start_ns end_ns function dev=D\n".
 * With FAKE_CUDA_GPU=FILE they are asynchronous instead, on one GPU shared by every process
 * that names the same FILE: a launch returns at once and its kernel runs after all work
 * launched before it on that device, by any process (first come, first served, one kernel at a
 * time); device 0 is FILE, device D >= 1 is FILE.D, a queue of its own, so that different
 * devices run at the same time. Events complete when the work on their device recorded before
 * them has (the device current at cuEventRecord), and synchronize calls wait for the work of the
 * current device. With FAKE_CUDA_SLOW_LAUNCHES=N:US there, the first N launches of the process
 * take US us each before their kernels are queued (the real driver loads a kernel's module on its
 * first launch). Device memory is a counter per device with a fixed total (FAKE_CUDA_TOTAL_MEM
 * bytes each, default 16 GiB); an allocation counts on the current device (cuMemCreate: on the
 * device its properties name) and its free gives it back there. Events and streams
 * are trivial, since all work is finished when a launch returns; a stream can capture.
 * Captures begun in the global mode (CU_STREAM_CAPTURE_MODE_GLOBAL, 0) are invalidated, as the
 * real driver does, by a potentially unsafe call (an event query or synchronize, a stream or
 * context synchronize) from any thread whose capture interaction mode
 * (cuThreadExchangeStreamCaptureMode) is the global one, the default: the call fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) and says so on stderr, and cuStreamEndCapture then
 * fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901).
 *
 * Build: gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic -o libcuda.so.1 fake_cuda.c
 * (-Bsymbolic: function addresses handed out by cuGetProcAddress are the library's own, as
 * with the real driver, not those of an LD_PRELOAD library exporting the same names.)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/file.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;
#define OK 0
#define ERR_INVALID_VALUE 1
#define ERR_OOM 2
#define ERR_NOT_INITIALIZED 3
#define ERR_INVALID_DEVICE 101
#define ERR_NOT_FOUND 500
#define ERR_CAPTURE_UNSUPPORTED 900
#define ERR_CAPTURE_INVALIDATED 901
#define EXPORT __attribute__((visibility("default")))

struct fake_stream { int capturing, global; };

/* Captures in the global mode under way, and whether one of them was invalidated. */
static int global_captures, captures_invalidated;
static __thread int capture_mode; /* this thread's capture interaction mode (0: global) */
/* A potentially unsafe call named `what`: whether it may go on (else the capture is invalid). */
static int capture_safe(const char *what) {
  if (capture_mode != 0 || !__atomic_load_n(&global_captures, __ATOMIC_ACQUIRE)) return 1;
  __atomic_store_n(&captures_invalidated, 1, __ATOMIC_RELEASE);
  fprintf(stderr, "fake_cuda: %s during a global capture\n", what);
  return 0;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
#define MAX_DEVICES 8
static uint64_t total_mem, used_mem[MAX_DEVICES], next_addr = 0x7f0000000000ull;
#define MAX_ALLOCS 65536
static struct { uint64_t addr, size; int managed, dev; } allocs[MAX_ALLOCS];

/* FAKE_CUDA_DEVICES, read once. */
static int device_count(void) {
  static int n;
  int v = __atomic_load_n(&n, __ATOMIC_RELAXED);
  if (v) return v;
  const char *e = getenv("FAKE_CUDA_DEVICES");
  v = (e && *e) ? atoi(e) : 1;
  if (v < 1) v = 1;
  if (v > MAX_DEVICES) v = MAX_DEVICES;
  __atomic_store_n(&n, v, __ATOMIC_RELAXED);
  return v;
}
static int valid_device(int dev) { return dev >= 0 && dev < device_count(); }

/* Primary contexts: fixed handles that encode the ordinal. */
#define CTX_BASE 0xc0u
#define CTX_STEP 0x10u
static void *device_ctx(int dev) { return (void *)(uintptr_t)(CTX_BASE + CTX_STEP * (unsigned)dev); }
static __thread void *current_ctx;
static int ctx_device(void *ctx) {
  uintptr_t v = (uintptr_t)ctx;
  if (v < CTX_BASE || (v - CTX_BASE) % CTX_STEP) return 0;
  uintptr_t dev = (v - CTX_BASE) / CTX_STEP;
  return dev < (uintptr_t)device_count() ? (int)dev : 0;
}
/* The device of the calling thread's current context. */
static int current_device(void) { return ctx_device(current_ctx); }

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void log_kernel(const char *fn, int dev, uint64_t start, uint64_t end, uint64_t queued);

/* The shared GPUs of FAKE_CUDA_GPU: the time a device's queue runs until, in its file. */
static uint64_t queued_until[MAX_DEVICES]; /* this process's work on each device ends then */
static uint64_t device_queued_until(int dev) { return __atomic_load_n(&queued_until[dev], __ATOMIC_ACQUIRE); }
static uint64_t gpu_enqueue(const char *gpu, int dev, uint64_t ns) {
  char path[4096];
  if (dev) snprintf(path, sizeof path, "%s.%d", gpu, dev);
  else snprintf(path, sizeof path, "%s", gpu);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return now_ns();
  flock(fd, LOCK_EX);
  uint64_t busy = 0;
  if (pread(fd, &busy, sizeof busy, 0) != sizeof busy) busy = 0;
  uint64_t now = now_ns(), start = busy > now ? busy : now;
  if (queued_until[dev] > start) start = queued_until[dev];
  uint64_t end = start + ns;
  if (pwrite(fd, &end, sizeof end, 0) != sizeof end) { /* the test sees wrong timings */ }
  flock(fd, LOCK_UN);
  close(fd);
  __atomic_store_n(&queued_until[dev], end, __ATOMIC_RELEASE);
  return start;
}
static void sleep_until(uint64_t t) {
  struct timespec until = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
  while (now_ns() < t && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) != 0) {
  }
}

/* FAKE_CUDA_SLOW_LAUNCHES=N:US: the process's first N launches each spend US us in the driver
 * before their kernels are queued, as the real one loading the modules of N kernels on their
 * first launches. */
static void first_launch_delay(void) {
  static int launched;
  const char *v = getenv("FAKE_CUDA_SLOW_LAUNCHES");
  if (!v) return;
  char *us = NULL;
  long n = strtol(v, &us, 10);
  if (*us != ':' || __sync_fetch_and_add(&launched, 1) >= n) return;
  sleep_until(now_ns() + strtoull(us + 1, NULL, 10) * 1000ull);
}

static void run_kernel(const char *fn, void **params) {
  uint64_t ns = (params && params[0]) ? *(uint64_t *)params[0] : 0;
  int dev = current_device();
  const char *gpu = getenv("FAKE_CUDA_GPU");
  if (gpu && *gpu) {
    first_launch_delay();
    pthread_mutex_lock(&lock);
    uint64_t queued = now_ns();
    uint64_t start = gpu_enqueue(gpu, dev, ns);
    pthread_mutex_unlock(&lock);
    log_kernel(fn, dev, start, start + ns, queued);
    return;
  }
  uint64_t start = now_ns(), end;
  /* Sleep rather than spin: a GPU kernel does not use the launching CPU, and spinning
   * "kernels" of several processes would make a busy test machine stretch them. */
  struct timespec until = {(time_t)((start + ns) / 1000000000ull), (long)((start + ns) % 1000000000ull)};
  while (ns && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) != 0) {
  }
  end = now_ns();
  log_kernel(fn, dev, start, end, 0);
}

/* A line per kernel: pid, start, end, function, then on the shared GPUs "queued=" when it was
 * launched (it waited from then to its start behind the work queued before it), and " dev=N"
 * for a device other than the first. */
static void log_kernel(const char *fn, int dev, uint64_t start, uint64_t end, uint64_t queued) {
  const char *path = getenv("FAKE_CUDA_LOG");
  if (!path || !*path) return;
  char line[192], where[16] = "", when[40] = "";
  if (dev) snprintf(where, sizeof where, " dev=%d", dev);
  if (queued) snprintf(when, sizeof when, " queued=%llu", (unsigned long long)queued);
  int n = snprintf(line, sizeof line, "%d %llu %llu %s%s%s\n", (int)getpid(),
                   (unsigned long long)start, (unsigned long long)end, fn, when, where);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    if (write(fd, line, n) != n) { /* a test will notice the missing line */ }
    close(fd);
  }
}

static void init_mem(void) {
  if (total_mem) return;
  const char *t = getenv("FAKE_CUDA_TOTAL_MEM");
  total_mem = (t && *t) ? strtoull(t, NULL, 0) : (16ull << 30);
}

/* Managed memory may exceed the device (it lives on the host when it does not fit) and is
 * not counted as device memory in use. */
static CUresult mem_alloc_on(uint64_t *out, uint64_t size, int managed, int dev) {
  if (!initialized) return ERR_NOT_INITIALIZED;
  if (!out || !size) return ERR_INVALID_VALUE;
  if (!valid_device(dev)) return ERR_INVALID_DEVICE;
  CUresult r = ERR_OOM;
  pthread_mutex_lock(&lock);
  init_mem();
  if (managed || size <= total_mem - used_mem[dev]) {
    for (int i = 0; i < MAX_ALLOCS; i++) {
      if (allocs[i].size == 0) {
        allocs[i].addr = next_addr;
        allocs[i].size = size;
        allocs[i].managed = managed;
        allocs[i].dev = dev;
        next_addr += (size + 0xfffff) & ~0xfffffull;
        if (!managed) used_mem[dev] += size;
        *out = allocs[i].addr;
        r = OK;
        break;
      }
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

static CUresult mem_alloc_kind(uint64_t *out, uint64_t size, int managed) {
  return mem_alloc_on(out, size, managed, current_device());
}
static CUresult mem_alloc(uint64_t *out, uint64_t size) { return mem_alloc_kind(out, size, 0); }

static CUresult mem_free(uint64_t addr) {
  CUresult r = ERR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCS; i++) {
    if (allocs[i].size && allocs[i].addr == addr) {
      if (!allocs[i].managed) used_mem[allocs[i].dev] -= allocs[i].size;
      allocs[i].size = 0;
      r = OK;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}

/* ---- initialisation, devices, contexts ---- */
EXPORT CUresult cuInit(unsigned flags) {
  (void)flags;
  if (getenv("FAKE_CUDA_SAY_MPS")) {
    const char *v = getenv("CUDA_MPS_PIPE_DIRECTORY");
    fprintf(stderr, "fake_cuda: cuInit sees CUDA_MPS_PIPE_DIRECTORY=%s\n", v ? v : "(unset)");
  }
  initialized = 1;
  return OK;
}
EXPORT CUresult cuDriverGetVersion(int *v) { if (!v) return ERR_INVALID_VALUE; *v = 13000; return OK; }
EXPORT CUresult cuDeviceGetCount(int *n) {
  if (!initialized) return ERR_NOT_INITIALIZED;
  if (!n) return ERR_INVALID_VALUE;
  *n = device_count(); return OK;
}
EXPORT CUresult cuDeviceGet(int *d, int ordinal) {
  if (!initialized) return ERR_NOT_INITIALIZED;
  if (!d) return ERR_INVALID_VALUE;
  if (!valid_device(ordinal)) return ERR_INVALID_DEVICE;
  *d = ordinal; return OK;
}
typedef struct { unsigned char bytes[16]; } CUuuid;
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, int dev) {
  if (!initialized) return ERR_NOT_INITIALIZED;
  if (!uuid) return ERR_INVALID_VALUE;
  if (!valid_device(dev)) return ERR_INVALID_DEVICE;
  static const unsigned char fake[4] = {0x66, 0x61, 0x6b, 0x65};
  memset(uuid->bytes, 0, sizeof uuid->bytes);
  memcpy(uuid->bytes, fake, sizeof fake);
  uuid->bytes[15] = (unsigned char)dev;
  return OK;
}
EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, int dev) { return cuDeviceGetUuid_v2(uuid, dev); }
EXPORT CUresult cuCtxGetDevice(int *d) { if (!d) return ERR_INVALID_VALUE; *d = current_device(); return OK; }
EXPORT CUresult cuCtxSynchronize(void) {
  if (!capture_safe("cuCtxSynchronize")) return ERR_CAPTURE_UNSUPPORTED;
  sleep_until(device_queued_until(current_device())); return OK;
}
EXPORT CUresult cuCtxGetCurrent(void **ctx) { *ctx = initialized ? (current_ctx ? current_ctx : device_ctx(0)) : NULL; return OK; }
EXPORT CUresult cuCtxSetCurrent(void *ctx) { current_ctx = ctx; return OK; }
static int primary_retained[MAX_DEVICES];
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  if (!initialized) return ERR_NOT_INITIALIZED;
  if (!ctx) return ERR_INVALID_VALUE;
  if (!valid_device(dev)) return ERR_INVALID_DEVICE;
  __sync_fetch_and_add(&primary_retained[dev], 1);
  *ctx = device_ctx(dev);
  return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  if (!initialized) return ERR_NOT_INITIALIZED;
  if (!valid_device(dev)) return ERR_INVALID_DEVICE;
  int n = __atomic_load_n(&primary_retained[dev], __ATOMIC_RELAXED);
  while (n > 0 && !__atomic_compare_exchange_n(&primary_retained[dev], &n, n - 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRelease(int dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  if (!bytes) return ERR_INVALID_VALUE;
  if (!valid_device(dev)) return ERR_INVALID_DEVICE;
  pthread_mutex_lock(&lock); init_mem(); *bytes = total_mem; pthread_mutex_unlock(&lock);
  return OK;
}

/* ---- launches ---- */
EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s; (void)extra;
  run_kernel("cuLaunchKernel", params); return OK;
}
EXPORT CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s; (void)extra;
  run_kernel("cuLaunchKernel_ptsz", params); return OK;
}
EXPORT CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) {
  (void)config; (void)f; (void)extra; run_kernel("cuLaunchKernelEx", params); return OK;
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const void *config, void *f, void **params, void **extra) {
  (void)config; (void)f; (void)extra; run_kernel("cuLaunchKernelEx_ptsz", params); return OK;
}
EXPORT CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s;
  run_kernel("cuLaunchCooperativeKernel", params); return OK;
}
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                               unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s;
  run_kernel("cuLaunchCooperativeKernel_ptsz", params); return OK;
}
/* A graph "exec" is a pointer to the uint64_t duration of its one kernel. */
EXPORT CUresult cuGraphLaunch(void *exec, CUstream s) { (void)s; void *p[1] = {exec}; run_kernel("cuGraphLaunch", p); return OK; }
EXPORT CUresult cuGraphLaunch_ptsz(void *exec, CUstream s) { (void)s; void *p[1] = {exec}; run_kernel("cuGraphLaunch_ptsz", p); return OK; }

/* ---- streams, capture, events ---- */
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) { (void)flags; *s = calloc(1, sizeof(struct fake_stream)); return OK; }
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { free(s); return OK; }
EXPORT CUresult cuStreamSynchronize(CUstream s) {
  (void)s;
  if (!capture_safe("cuStreamSynchronize")) return ERR_CAPTURE_UNSUPPORTED;
  sleep_until(device_queued_until(current_device())); return OK;
}
static int is_real_stream(CUstream s) { return (uintptr_t)s > 0x10; }
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
  if (!is_real_stream(s)) return ERR_INVALID_VALUE;
  struct fake_stream *f = s;
  f->capturing = 1;
  f->global = mode == 0;
  if (f->global && __atomic_fetch_add(&global_captures, 1, __ATOMIC_ACQ_REL) == 0)
    __atomic_store_n(&captures_invalidated, 0, __ATOMIC_RELEASE);
  return OK;
}
EXPORT CUresult cuStreamEndCapture(CUstream s, void **graph) {
  if (!is_real_stream(s)) return ERR_INVALID_VALUE;
  struct fake_stream *f = s;
  f->capturing = 0;
  if (graph) *graph = NULL;
  if (f->global) {
    f->global = 0;
    __atomic_fetch_sub(&global_captures, 1, __ATOMIC_ACQ_REL);
    if (__atomic_load_n(&captures_invalidated, __ATOMIC_ACQUIRE)) return ERR_CAPTURE_INVALIDATED;
  }
  return OK;
}
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) {
  *status = is_real_stream(s) ? ((struct fake_stream *)s)->capturing : 0; return OK;
}
EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, int *status) { return cuStreamIsCapturing(s, status); }
EXPORT CUresult cuThreadExchangeStreamCaptureMode(int *mode) { int old = capture_mode; capture_mode = *mode; *mode = old; return OK; }
static int events_recorded;
/* An event is the time the work recorded before it ends, or the time it was recorded on an idle
 * device (0: none). */
EXPORT CUresult cuEventCreate(void **e, unsigned flags) { (void)flags; *e = calloc(1, sizeof(uint64_t)); return OK; }
EXPORT CUresult cuEventRecord(void *e, CUstream s) {
  uint64_t queued = device_queued_until(current_device()), now = now_ns();
  *(uint64_t *)e = queued > now ? queued : now;
  if (is_real_stream(s) && ((struct fake_stream *)s)->capturing) {
    /* The real driver would invalidate the capture. */
    fprintf(stderr, "fake_cuda: cuEventRecord on a capturing stream\n");
    return ERR_CAPTURE_UNSUPPORTED;
  }
  __sync_fetch_and_add(&events_recorded, 1); return OK;
}
EXPORT CUresult cuEventRecord_ptsz(void *e, CUstream s) { return cuEventRecord(e, s); }
/* FAKE_CUDA_DONE_LATENCY_US=US: an event is seen done US us after the work before it ended, as
 * a real GPU's completions are seen microseconds after its kernels end (the elapsed time between
 * two events is not changed). */
static uint64_t done_latency_ns(void) {
  static int64_t ns = -1;
  if (ns < 0) {
    const char *v = getenv("FAKE_CUDA_DONE_LATENCY_US");
    ns = v ? (int64_t)strtoull(v, NULL, 10) * 1000 : 0;
  }
  return (uint64_t)ns;
}
/* FAKE_CUDA_NEVER_DONE: events never complete (work that waits on another process). */
EXPORT CUresult cuEventQuery(void *e) {
  if (!capture_safe("cuEventQuery")) return ERR_CAPTURE_UNSUPPORTED;
  if (getenv("FAKE_CUDA_NEVER_DONE")) return 600;
  return now_ns() >= *(uint64_t *)e + done_latency_ns() ? OK : 600;
}
EXPORT CUresult cuEventSynchronize(void *e) {
  if (!capture_safe("cuEventSynchronize")) return ERR_CAPTURE_UNSUPPORTED;
  sleep_until(*(uint64_t *)e + done_latency_ns()); return OK;
}
EXPORT CUresult cuEventDestroy_v2(void *e) { free(e); return OK; }
EXPORT CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
  uint64_t ta = *(uint64_t *)a, tb = *(uint64_t *)b;
  if (cuEventQuery(a) != OK || cuEventQuery(b) != OK) return 600;
  *ms = (float)((double)((int64_t)(tb - ta)) / 1e6);
  return OK;
}
EXPORT CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { return cuEventElapsedTime(ms, a, b); }

/* ---- memory ---- */
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return mem_alloc(p, n); }
/* FAKE_CUDA_SAY_MANAGED: managed allocations and prefetches are reported on stderr. */
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags) {
  CUresult r = mem_alloc_kind(p, n, 1);
  if (r == OK && getenv("FAKE_CUDA_SAY_MANAGED"))
    fprintf(stderr, "fake_cuda: managed %#llx %zu flags %u\n", (unsigned long long)*p, n, flags);
  return r;
}
static CUresult prefetch(const char *fn, CUdeviceptr p, size_t n, const char *to) {
  int found = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_ALLOCS; i++)
    if (allocs[i].size && allocs[i].managed && p >= allocs[i].addr && p + n <= allocs[i].addr + allocs[i].size) found = 1;
  pthread_mutex_unlock(&lock);
  if (!found) return ERR_INVALID_VALUE;
  if (getenv("FAKE_CUDA_SAY_MANAGED"))
    fprintf(stderr, "fake_cuda: %s %#llx %zu to %s\n", fn, (unsigned long long)p, n, to);
  return OK;
}
struct mem_location { int type, id; };
EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, struct mem_location to, unsigned flags, CUstream s) {
  (void)flags; (void)s;
  if (to.type != 1 && to.type != 2) return ERR_INVALID_VALUE;
  return prefetch("cuMemPrefetchAsync_v2", p, n, to.type == 2 ? "host" : "device");
}
EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, int dev, CUstream s) {
  (void)s; return prefetch("cuMemPrefetchAsync", p, n, dev < 0 ? "host" : "device");
}
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem) {
  (void)elem; if (!pitch) return ERR_INVALID_VALUE;
  size_t pt = (w + 511) & ~(size_t)511;
  CUresult r = mem_alloc(p, (uint64_t)pt * h);
  if (r == OK) *pitch = pt;
  return r;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return mem_free(p); }
static int pool_trims;
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { (void)s; return mem_alloc(p, n); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) { (void)s; return mem_alloc(p, n); }
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, CUstream s) { (void)pool; (void)s; return mem_alloc(p, n); }
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pool, CUstream s) { (void)pool; (void)s; return mem_alloc(p, n); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { (void)s; return mem_free(p); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { (void)s; return mem_free(p); }
EXPORT CUresult cuDeviceGetMemPool(void **pool, int dev) { (void)dev; *pool = (void *)0x900d; return OK; }
EXPORT CUresult cuMemPoolTrimTo(void *pool, size_t keep) {
  (void)pool; (void)keep; __sync_fetch_and_add(&pool_trims, 1);
  if (getenv("FAKE_CUDA_SAY_TRIM")) fprintf(stderr, "fake_cuda: pool trimmed\n");
  return OK;
}
struct mem_prop { int type, handle_types, loc_type, loc_id; };
EXPORT CUresult cuMemCreate(uint64_t *handle, size_t n, const struct mem_prop *prop, unsigned long long flags) {
  (void)flags; if (!prop) return ERR_INVALID_VALUE;
  /* CU_MEM_LOCATION_TYPE_DEVICE: on the device it names. */
  return mem_alloc_on(handle, n, 0, prop->loc_type == 1 ? prop->loc_id : current_device());
}
EXPORT CUresult cuMemRelease(uint64_t handle) { return mem_free(handle); }
struct array_desc { size_t w, h; unsigned format, channels; };
struct array3d_desc { size_t w, h, d; unsigned format, channels, flags; };
static uint64_t format_bytes(unsigned f) { return f == 1 || f == 8 ? 1 : f == 2 || f == 9 || f == 0x10 ? 2 : 4; }
EXPORT CUresult cuArrayCreate_v2(void **array, const struct array_desc *d) {
  if (!d || !array) return ERR_INVALID_VALUE;
  uint64_t addr = 0;
  CUresult r = mem_alloc(&addr, d->w * (d->h ? d->h : 1) * format_bytes(d->format) * d->channels);
  *array = (void *)addr;
  return r;
}
EXPORT CUresult cuArray3DCreate_v2(void **array, const struct array3d_desc *d) {
  if (!d || !array) return ERR_INVALID_VALUE;
  uint64_t addr = 0;
  CUresult r = mem_alloc(&addr, d->w * (d->h ? d->h : 1) * (d->d ? d->d : 1) * format_bytes(d->format) * d->channels);
  *array = (void *)addr;
  return r;
}
EXPORT CUresult cuArrayDestroy(void *array) { return mem_free((uint64_t)array); }
EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
  if (!free_ || !total) return ERR_INVALID_VALUE;
  int dev = current_device();
  pthread_mutex_lock(&lock); init_mem(); *free_ = total_mem - used_mem[dev]; *total = total_mem; pthread_mutex_unlock(&lock);
  return OK;
}
EXPORT CUresult cuMemGetInfo(unsigned *free_, unsigned *total) {
  size_t f, t; CUresult r = cuMemGetInfo_v2(&f, &t);
  if (r == OK) { *free_ = f > 0xffffffffu ? 0xffffffffu : (unsigned)f; *total = t > 0xffffffffu ? 0xffffffffu : (unsigned)t; }
  return r;
}

/* The 32-bit ABI of cuDeviceTotalMem (exported, not wrapped by the hook). */
EXPORT CUresult cuDeviceTotalMem(unsigned *bytes, int dev) {
  size_t t = 0; CUresult r = cuDeviceTotalMem_v2(&t, dev);
  if (r == OK) *bytes = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
  return r;
}
/* A "future" launch ABI that is no exported symbol: what the hook cannot wrap. */
static CUresult internal_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s; (void)extra;
  run_kernel("internal_launch", params); return OK;
}

/* ---- cuGetProcAddress: base name, ABI version and stream flavour to a function ---- */
#define PER_THREAD 2 /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, unsigned long long flags);
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, unsigned long long flags, int *status);
struct entry { const char *name; int since; int ptsz; void *fn; };
#define E(name, since, ptsz, fn) {name, since, ptsz, (void *)fn}
static const struct entry table[] = {
  E("cuInit", 2000, 0, cuInit),
  E("cuDriverGetVersion", 2020, 0, cuDriverGetVersion),
  E("cuDeviceGet", 2000, 0, cuDeviceGet),
  E("cuDeviceGetCount", 2000, 0, cuDeviceGetCount),
  E("cuDeviceTotalMem", 2000, 0, cuDeviceTotalMem),
  E("cuDeviceTotalMem", 3020, 0, cuDeviceTotalMem_v2),
  E("cuCtxSynchronize", 2000, 0, cuCtxSynchronize),
  E("cuCtxGetDevice", 2000, 0, cuCtxGetDevice),
  E("cuCtxGetCurrent", 4000, 0, cuCtxGetCurrent),
  E("cuCtxSetCurrent", 4000, 0, cuCtxSetCurrent),
  E("cuDeviceGetUuid", 9020, 0, cuDeviceGetUuid),
  E("cuDeviceGetUuid", 11040, 0, cuDeviceGetUuid_v2),
  E("cuDevicePrimaryCtxRetain", 7000, 0, cuDevicePrimaryCtxRetain),
  E("cuDevicePrimaryCtxRelease", 7000, 0, cuDevicePrimaryCtxRelease),
  E("cuDevicePrimaryCtxRelease", 11000, 0, cuDevicePrimaryCtxRelease_v2),
  E("cuGetProcAddress", 11030, 0, cuGetProcAddress),
  E("cuGetProcAddress", 12000, 0, cuGetProcAddress_v2),
  E("cuLaunchKernel", 4000, 0, cuLaunchKernel),
  E("cuLaunchKernel", 7000, 1, cuLaunchKernel_ptsz),
  E("cuLaunchKernel", 99000, 0, internal_launch),
  E("cuLaunchKernelEx", 11060, 0, cuLaunchKernelEx),
  E("cuLaunchKernelEx", 11060, 1, cuLaunchKernelEx_ptsz),
  E("cuLaunchCooperativeKernel", 9000, 0, cuLaunchCooperativeKernel),
  E("cuLaunchCooperativeKernel", 9000, 1, cuLaunchCooperativeKernel_ptsz),
  E("cuGraphLaunch", 10000, 0, cuGraphLaunch),
  E("cuGraphLaunch", 10000, 1, cuGraphLaunch_ptsz),
  E("cuStreamCreate", 2000, 0, cuStreamCreate),
  E("cuStreamDestroy", 4000, 0, cuStreamDestroy_v2),
  E("cuStreamSynchronize", 2000, 0, cuStreamSynchronize),
  E("cuStreamBeginCapture", 10010, 0, cuStreamBeginCapture_v2),
  E("cuStreamEndCapture", 10000, 0, cuStreamEndCapture),
  E("cuStreamIsCapturing", 10000, 0, cuStreamIsCapturing),
  E("cuStreamIsCapturing", 10000, 1, cuStreamIsCapturing_ptsz),
  E("cuEventCreate", 2000, 0, cuEventCreate),
  E("cuEventRecord", 2000, 0, cuEventRecord),
  E("cuEventRecord", 7000, 1, cuEventRecord_ptsz),
  E("cuEventQuery", 2000, 0, cuEventQuery),
  E("cuEventSynchronize", 2000, 0, cuEventSynchronize),
  E("cuEventDestroy", 4000, 0, cuEventDestroy_v2),
  E("cuEventElapsedTime", 2000, 0, cuEventElapsedTime),
  E("cuEventElapsedTime", 12080, 0, cuEventElapsedTime_v2),
  E("cuMemAlloc", 3020, 0, cuMemAlloc_v2),
  E("cuMemAllocManaged", 6000, 0, cuMemAllocManaged),
  E("cuMemAllocPitch", 3020, 0, cuMemAllocPitch_v2),
  E("cuMemFree", 3020, 0, cuMemFree_v2),
  E("cuMemAllocAsync", 11020, 0, cuMemAllocAsync),
  E("cuMemAllocAsync", 11020, 1, cuMemAllocAsync_ptsz),
  E("cuMemAllocFromPoolAsync", 11020, 0, cuMemAllocFromPoolAsync),
  E("cuMemAllocFromPoolAsync", 11020, 1, cuMemAllocFromPoolAsync_ptsz),
  E("cuMemFreeAsync", 11020, 0, cuMemFreeAsync),
  E("cuMemFreeAsync", 11020, 1, cuMemFreeAsync_ptsz),
  E("cuDeviceGetMemPool", 11020, 0, cuDeviceGetMemPool),
  E("cuMemPoolTrimTo", 11020, 0, cuMemPoolTrimTo),
  E("cuMemCreate", 10020, 0, cuMemCreate),
  E("cuMemRelease", 10020, 0, cuMemRelease),
  E("cuArrayCreate", 3020, 0, cuArrayCreate_v2),
  E("cuArray3DCreate", 3020, 0, cuArray3DCreate_v2),
  E("cuArrayDestroy", 2000, 0, cuArrayDestroy),
  E("cuMemGetInfo", 2000, 0, cuMemGetInfo),
  E("cuMemGetInfo", 3020, 0, cuMemGetInfo_v2),
  E("cuThreadExchangeStreamCaptureMode", 10010, 0, cuThreadExchangeStreamCaptureMode),
};

static void *lookup(const char *sym, int version, unsigned long long flags) {
  const struct entry *best = NULL;
  int want_ptsz = (flags & PER_THREAD) != 0;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    const struct entry *e = &table[i];
    if (strcmp(e->name, sym) != 0 || e->since > version) continue;
    if (e->ptsz && !want_ptsz) continue;
    /* Prefer the per-thread flavour when asked for, then the newest ABI. */
    if (!best || (e->ptsz && !best->ptsz) || (e->ptsz == best->ptsz && e->since > best->since)) best = e;
  }
  return best ? best->fn : NULL;
}

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int version, unsigned long long flags) {
  if (!sym || !pfn) return ERR_INVALID_VALUE;
  *pfn = lookup(sym, version, flags);
  return *pfn ? OK : ERR_NOT_FOUND;
}
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, unsigned long long flags, int *status) {
  CUresult r = cuGetProcAddress(sym, pfn, version, flags);
  if (status) *status = r == OK ? 0 : 1;
  return r;
}
