/* A CUDA driver client for the hook's tests. Built three ways, like the programs the hook
 * meets:
 *   -DVIA_DLSYM  dlopen("libcuda.so.1") and dlsym of each versioned name (CuPy, cuDNN, ...)
 *   -DVIA_PROC   dlsym of cuGetProcAddress_v2 only, then everything through it (static cudart)
 *   -DVIA_LINK   linked with -lcuda, direct calls
 * It runs the operations given as arguments and prints one line per operation:
 *   launch:N:NS  launch_ptsz:N:NS  launch_ex:N:NS  coop:N:NS  graph:N:NS   N kernels of NS ns
 *   capture:N:NS    N launches on a capturing stream
 *   capture_mix:N:NS  N times: a launch on a capturing stream, then one on the null stream
 *   capture_held:MS:NS  a kernel of NS ns on the null stream (the process takes a lease), then
 *                   a capture of MS ms, a launch on it every 100 us
 *   (each capture is in the global mode; its cuStreamEndCapture's result follows: "... end=R")
 *   threads:T:N     T threads, each launching N kernels of 1 ms
 *   gpu_threads:T:N  likewise, thread i on device i (its primary context made current)
 *   alternate:D:N:NS  the main thread launches N kernels of NS ns on each of devices 0..D-1,
 *                   one device after the other (making each one's primary context current
 *                   before its launch, never synchronizing until the end, as JAX launches on
 *                   several GPUs) -> "alternate D N -> R"; the main thread stays on the last
 *                   device
 *   run:MS:NS:SYNC:GAP  kernels of NS ns for MS ms, a cuCtxSynchronize after every SYNC of them
 *                   (0: only at the end) and GAP us of host work after each -> "run K kernels -> R
 *                   from=T0 to=T1" (CLOCK_MONOTONIC ns when it began and stopped launching)
 *                   (with SYNC 1, also the median and 99th percentile of launch-to-done in us)
 *   burst:MS:NS:N:GAP  for MS ms: N kernels of NS ns back to back, then GAP us of host work,
 *                   never synchronizing but at the end -> "burst K kernels"
 *   alloc:B  managed:B  async:B  pool:B  pitch:W:H  create:B   -> "alloc B -> RESULT"
 *   array:W:H  array3d:W:H:D   float CUDA arrays              -> "array W H -> RESULT"
 *   nvml     nvmlDeviceGetMemoryInfo and _v2 of device 0    -> "nvml total=T free=F used=U"
 *            (without calling cuInit first)
 *   free:I   frees the I-th allocation (0-based, any kind)     -> "free I -> RESULT"
 *   info     cuMemGetInfo_v2    -> "info free=F total=T"
 *   info1    cuMemGetInfo (v1)  -> "info1 free=F total=T"
 *   total    cuDeviceTotalMem_v2 of the current device (see device:D) -> "total T"
 *   device:D  makes device D's primary context current in this (the main) thread:
 *            cuDeviceGet, cuDevicePrimaryCtxRetain, cuCtxSetCurrent -> "device D -> RESULT";
 *            the later operations of the main thread (and of a fork child) run on device D,
 *            those of the threads of threads:T:N do not; create:B allocates on it
 *   fork:OP  runs OP in a fork child and waits for it
 *   getenv:NAME  prints "env NAME=VALUE" after cuInit
 *   rtld_next  prints the file of dlsym(RTLD_NEXT, "cuInit")
 *   sleep:MS
 * The first operation that needs the driver calls cuInit(0) and prints "init RESULT".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUstream;

#define DECL(ret, name, args) typedef ret(*name##_t) args;
DECL(CUresult, cuInit, (unsigned))
DECL(CUresult, cuLaunchKernel, (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **))
DECL(CUresult, cuLaunchKernelEx, (const void *, void *, void **, void **))
DECL(CUresult, cuLaunchCooperativeKernel, (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **))
DECL(CUresult, cuGraphLaunch, (void *, CUstream))
DECL(CUresult, cuStreamCreate, (CUstream *, unsigned))
DECL(CUresult, cuStreamBeginCapture, (CUstream, int))
DECL(CUresult, cuStreamEndCapture, (CUstream, void **))
DECL(CUresult, cuMemAlloc, (CUdeviceptr *, size_t))
DECL(CUresult, cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned))
DECL(CUresult, cuMemAllocPitch, (CUdeviceptr *, size_t *, size_t, size_t, unsigned))
DECL(CUresult, cuMemFree, (CUdeviceptr))
DECL(CUresult, cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))
DECL(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, void *, CUstream))
DECL(CUresult, cuMemFreeAsync, (CUdeviceptr, CUstream))
DECL(CUresult, cuMemCreate, (uint64_t *, size_t, const void *, unsigned long long))
DECL(CUresult, cuMemRelease, (uint64_t))
DECL(CUresult, cuMemGetInfo_v1, (unsigned *, unsigned *))
DECL(CUresult, cuMemGetInfo, (size_t *, size_t *))
DECL(CUresult, cuDeviceTotalMem, (size_t *, int))
DECL(CUresult, cuArrayCreate, (void **, const void *))
DECL(CUresult, cuArrayDestroy, (void *))
DECL(CUresult, cuCtxSynchronize, (void))
DECL(CUresult, cuDeviceGet, (int *, int))
DECL(CUresult, cuDevicePrimaryCtxRetain, (void **, int))
DECL(CUresult, cuCtxSetCurrent, (void *))

static struct {
  cuInit_t init;
  cuLaunchKernel_t launch, launch_ptsz;
  cuLaunchKernelEx_t launch_ex;
  cuLaunchCooperativeKernel_t coop;
  cuGraphLaunch_t graph;
  cuStreamCreate_t stream_create;
  cuStreamBeginCapture_t begin_capture;
  cuStreamEndCapture_t end_capture;
  cuMemAlloc_t alloc;
  cuMemAllocManaged_t managed;
  cuMemAllocPitch_t pitch;
  cuMemFree_t free;
  cuMemAllocAsync_t async;
  cuMemAllocFromPoolAsync_t pool;
  cuMemFreeAsync_t free_async;
  cuMemCreate_t create;
  cuMemRelease_t release;
  cuMemGetInfo_v1_t info1;
  cuMemGetInfo_t info;
  cuDeviceTotalMem_t total;
  cuArrayCreate_t array, array3d;
  cuArrayDestroy_t array_destroy;
  cuCtxSynchronize_t sync;
  cuDeviceGet_t device_get;
  cuDevicePrimaryCtxRetain_t primary_retain;
  cuCtxSetCurrent_t set_current;
} cu;

#if defined(VIA_LINK)
/* Prototypes of the real exported names; the program links with -lcuda. */
CUresult cuInit(unsigned);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
CUresult cuLaunchKernel_ptsz(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
CUresult cuLaunchKernelEx(const void *, void *, void **, void **);
CUresult cuLaunchCooperativeKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **);
CUresult cuGraphLaunch(void *, CUstream);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, void **);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, void *, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemCreate(uint64_t *, size_t, const void *, unsigned long long);
CUresult cuMemRelease(uint64_t);
CUresult cuMemGetInfo(unsigned *, unsigned *);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuDeviceTotalMem_v2(size_t *, int);
CUresult cuArrayCreate_v2(void **, const void *);
CUresult cuArray3DCreate_v2(void **, const void *);
CUresult cuArrayDestroy(void *);
CUresult cuCtxSynchronize(void);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
static void resolve(void) {
  cu.sync = cuCtxSynchronize;
  cu.device_get = cuDeviceGet; cu.primary_retain = cuDevicePrimaryCtxRetain; cu.set_current = cuCtxSetCurrent;
  cu.array = cuArrayCreate_v2; cu.array3d = cuArray3DCreate_v2; cu.array_destroy = cuArrayDestroy;
  cu.init = cuInit; cu.launch = cuLaunchKernel; cu.launch_ptsz = cuLaunchKernel_ptsz;
  cu.launch_ex = cuLaunchKernelEx; cu.coop = cuLaunchCooperativeKernel; cu.graph = cuGraphLaunch;
  cu.stream_create = cuStreamCreate; cu.begin_capture = cuStreamBeginCapture_v2; cu.end_capture = cuStreamEndCapture;
  cu.alloc = cuMemAlloc_v2; cu.managed = cuMemAllocManaged; cu.pitch = cuMemAllocPitch_v2; cu.free = cuMemFree_v2;
  cu.async = cuMemAllocAsync; cu.pool = cuMemAllocFromPoolAsync; cu.free_async = cuMemFreeAsync;
  cu.create = cuMemCreate; cu.release = cuMemRelease; cu.info1 = cuMemGetInfo; cu.info = cuMemGetInfo_v2;
  cu.total = cuDeviceTotalMem_v2;
}
#else
static void *lib;
#if defined(VIA_PROC)
typedef CUresult (*get_proc_t)(const char *, void **, int, unsigned long long, int *);
static get_proc_t get_proc;
/* base name, ABI version, per-thread default stream */
static void *sym(const char *base, const char *versioned, int version, int ptsz) {
  (void)versioned;
  void *p = NULL;
  int status = -1;
  CUresult r = get_proc(base, &p, version, ptsz ? 2 : 0, &status);
  if (r != 0 || !p) { fprintf(stderr, "cuGetProcAddress_v2(%s) failed: %d\n", base, r); exit(3); }
  return p;
}
#else
static void *sym(const char *base, const char *versioned, int version, int ptsz) {
  (void)base; (void)version; (void)ptsz;
  void *p = dlsym(lib, versioned);
  if (!p) { fprintf(stderr, "dlsym(%s) failed: %s\n", versioned, dlerror()); exit(3); }
  return p;
}
#endif
static void resolve(void) {
  lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "dlopen failed: %s\n", dlerror()); exit(3); }
#if defined(VIA_PROC)
  get_proc = (get_proc_t)dlsym(lib, "cuGetProcAddress_v2");
  if (!get_proc) { fprintf(stderr, "no cuGetProcAddress_v2\n"); exit(3); }
  /* Static cudart asks for cuGetProcAddress itself through it, and uses the answer. */
  void *self = sym("cuGetProcAddress", "cuGetProcAddress_v2", 13000, 0);
  get_proc = (get_proc_t)self;
#endif
  cu.init = (cuInit_t)sym("cuInit", "cuInit", 2000, 0);
  cu.launch = (cuLaunchKernel_t)sym("cuLaunchKernel", "cuLaunchKernel", 4000, 0);
  cu.launch_ptsz = (cuLaunchKernel_t)sym("cuLaunchKernel", "cuLaunchKernel_ptsz", 7000, 1);
  cu.launch_ex = (cuLaunchKernelEx_t)sym("cuLaunchKernelEx", "cuLaunchKernelEx", 11060, 0);
  cu.coop = (cuLaunchCooperativeKernel_t)sym("cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", 9000, 0);
  cu.graph = (cuGraphLaunch_t)sym("cuGraphLaunch", "cuGraphLaunch", 10000, 0);
  cu.stream_create = (cuStreamCreate_t)sym("cuStreamCreate", "cuStreamCreate", 2000, 0);
  cu.begin_capture = (cuStreamBeginCapture_t)sym("cuStreamBeginCapture", "cuStreamBeginCapture_v2", 10010, 0);
  cu.end_capture = (cuStreamEndCapture_t)sym("cuStreamEndCapture", "cuStreamEndCapture", 10000, 0);
  cu.alloc = (cuMemAlloc_t)sym("cuMemAlloc", "cuMemAlloc_v2", 3020, 0);
  cu.managed = (cuMemAllocManaged_t)sym("cuMemAllocManaged", "cuMemAllocManaged", 6000, 0);
  cu.pitch = (cuMemAllocPitch_t)sym("cuMemAllocPitch", "cuMemAllocPitch_v2", 3020, 0);
  cu.free = (cuMemFree_t)sym("cuMemFree", "cuMemFree_v2", 3020, 0);
  cu.async = (cuMemAllocAsync_t)sym("cuMemAllocAsync", "cuMemAllocAsync", 11020, 0);
  cu.pool = (cuMemAllocFromPoolAsync_t)sym("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 11020, 0);
  cu.free_async = (cuMemFreeAsync_t)sym("cuMemFreeAsync", "cuMemFreeAsync", 11020, 0);
  cu.create = (cuMemCreate_t)sym("cuMemCreate", "cuMemCreate", 10020, 0);
  cu.release = (cuMemRelease_t)sym("cuMemRelease", "cuMemRelease", 10020, 0);
  cu.info1 = (cuMemGetInfo_v1_t)sym("cuMemGetInfo", "cuMemGetInfo", 2000, 0);
  cu.info = (cuMemGetInfo_t)sym("cuMemGetInfo", "cuMemGetInfo_v2", 3020, 0);
  cu.total = (cuDeviceTotalMem_t)sym("cuDeviceTotalMem", "cuDeviceTotalMem_v2", 3020, 0);
  cu.array = (cuArrayCreate_t)sym("cuArrayCreate", "cuArrayCreate_v2", 3020, 0);
  cu.array3d = (cuArrayCreate_t)sym("cuArray3DCreate", "cuArray3DCreate_v2", 3020, 0);
  cu.array_destroy = (cuArrayDestroy_t)sym("cuArrayDestroy", "cuArrayDestroy", 2000, 0);
  cu.sync = (cuCtxSynchronize_t)sym("cuCtxSynchronize", "cuCtxSynchronize", 2000, 0);
  cu.device_get = (cuDeviceGet_t)sym("cuDeviceGet", "cuDeviceGet", 2000, 0);
  cu.primary_retain = (cuDevicePrimaryCtxRetain_t)sym("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 7000, 0);
  cu.set_current = (cuCtxSetCurrent_t)sym("cuCtxSetCurrent", "cuCtxSetCurrent", 4000, 0);
}
#endif

struct thread_arg { unsigned long long n; CUresult r; int dev; };
static void *launcher(void *p) {
  struct thread_arg *a = p;
  uint64_t ns = 1000000;
  void *params[1] = {&ns};
  if (a->dev >= 0) {
    int dev = -1;
    void *ctx = NULL;
    a->r = cu.device_get(&dev, a->dev);
    if (a->r == 0) a->r = cu.primary_retain(&ctx, dev);
    if (a->r == 0) a->r = cu.set_current(ctx);
  }
  for (unsigned long long i = 0; i < a->n && a->r == 0; i++)
    a->r = cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
  return NULL;
}

static int initialized;
static int current_device; /* of the main thread, set by device:D */
static void ensure_init(void) {
  if (initialized) return;
  initialized = 1;
  CUresult r = cu.init(0);
  printf("init %d\n", r);
  fflush(stdout);
  if (r != 0) exit(4);
}

enum kind { K_PTR, K_ASYNC, K_HANDLE, K_ARRAY };
static struct { enum kind kind; uint64_t v; } allocs[1024];
static int nallocs;

static void record(enum kind k, uint64_t v) { allocs[nallocs].kind = k; allocs[nallocs].v = v; nallocs++; }

static int cmp_ll(const void *x, const void *y) {
  long long a = *(const long long *)x, b = *(const long long *)y;
  return (a > b) - (a < b);
}

static void run(const char *op) {
  unsigned long long a = 0, b = 0;
  unsigned long long c = 0, d = 0;
  char name[32] = {0};
  sscanf(op, "%31[a-z_13]:%llu:%llu:%llu:%llu", name, &a, &b, &c, &d);
  if (strcmp(name, "sleep") == 0) { usleep(a * 1000); return; }
  if (strcmp(name, "fork") == 0) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { initialized = 0; run(strchr(op, ':') + 1); fflush(stdout); _exit(0); }
    int st; waitpid(pid, &st, 0);
    return;
  }
  if (!strcmp(name, "nvml")) { /* NVML does not need cuInit */
    CUresult r;
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!nvml) { printf("nvml none\n"); return; }
    int (*init)(void) = (int (*)(void))dlsym(nvml, "nvmlInit_v2");
    int (*get)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
    int (*info)(void *, unsigned long long *) = (int (*)(void *, unsigned long long *))dlsym(nvml, "nvmlDeviceGetMemoryInfo");
    int (*info2)(void *, void *) = (int (*)(void *, void *))dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2");
    void *dev = NULL;
    unsigned long long m[3] = {0};
    struct { unsigned version; unsigned long long total, reserved, free, used; } m2 = {(unsigned)(sizeof m2 | (2u << 24)), 0, 0, 0, 0};
    init();
    get(0, &dev);
    r = info(dev, m);
    printf("nvml total=%llu free=%llu used=%llu -> %d\n", m[0], m[1], m[2], r);
    r = info2(dev, &m2);
    printf("nvml2 total=%llu reserved=%llu free=%llu used=%llu -> %d\n", m2.total, m2.reserved, m2.free, m2.used, r);
    fflush(stdout);
    return;
  }
  ensure_init();
  if (strncmp(op, "getenv:", 7) == 0) {
    const char *v = getenv(op + 7);
    printf("env %s=%s\n", op + 7, v ? v : "(unset)");
    fflush(stdout);
    return;
  }
  if (strcmp(name, "procget") == 0) {
#if defined(VIA_PROC)
    /* procget:N:VERSION, N: 0 = cuLaunchKernel, 1 = cuDeviceTotalMem */
    const char *names[2] = {"cuLaunchKernel", "cuDeviceTotalMem"};
    void *p = NULL;
    int status = 0;
    Dl_info info;
    CUresult r = get_proc(names[a & 1], &p, (int)b, 0, &status);
    const char *file = p && dladdr(p, &info) && info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;
    printf("procget %s %llu -> %d %s\n", names[a & 1], b, r, file ? file + 1 : "none");
#else
    printf("procget n/a\n");
#endif
    fflush(stdout);
    return;
  }
  if (strcmp(name, "procself") == 0) {
#if defined(VIA_PROC)
    /* cuGetProcAddress asked for itself, at the 4- and the 5-argument ABI. */
    const int versions[2] = {11030, 12000};
    void *found[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
      Dl_info info;
      int status = 0;
      get_proc("cuGetProcAddress", &found[i], versions[i], 0, &status);
      int ok = found[i] && dladdr(found[i], &info) && info.dli_sname && info.dli_fname;
      const char *file = ok ? strrchr(info.dli_fname, '/') : NULL;
      printf("procself %d %s %s\n", versions[i], ok ? info.dli_sname : "none",
             ok ? (file ? file + 1 : info.dli_fname) : "none");
    }
    printf("procself distinct %d\n", found[0] != found[1]);
#else
    printf("procself n/a\n");
#endif
    fflush(stdout);
    return;
  }
  if (strcmp(name, "rtld_next") == 0) {
    Dl_info info;
    void *p = dlsym(RTLD_NEXT, "cuInit");
    printf("rtld_next %s\n", p && dladdr(p, &info) && info.dli_fname ? info.dli_fname : "none");
    fflush(stdout);
    return;
  }
  if (strcmp(name, "threads") == 0 || strcmp(name, "gpu_threads") == 0) {
    pthread_t t[64];
    struct thread_arg args[64] = {{0, 0, -1}};
    CUresult r = 0;
    int per_gpu = strcmp(name, "gpu_threads") == 0;
    if (a > 64) a = 64;
    for (unsigned long long i = 0; i < a; i++) {
      args[i].n = b;
      args[i].dev = per_gpu ? (int)i : -1;
      pthread_create(&t[i], NULL, launcher, &args[i]);
    }
    for (unsigned long long i = 0; i < a; i++) { pthread_join(t[i], NULL); if (args[i].r) r = args[i].r; }
    printf("%s %llu %llu -> %d\n", name, a, b, r);
    fflush(stdout);
    return;
  }
  uint64_t ns = b;
  void *params[1] = {&ns};
  CUresult r = 0;
  if (!strcmp(name, "burst")) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long long k = 0;
    for (;;) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= (long long)a || r) break;
      for (unsigned long long i = 0; i < c && r == 0; i++, k++)
        r = cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
      if (d) usleep(d);
    }
    cu.sync();
    printf("burst %llu kernels -> %d\n", k, r);
    fflush(stdout);
    return;
  }
  if (!strcmp(name, "run")) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long long k = 0;
    static long long lat[1 << 16];
    for (;;) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= (long long)a || r) break;
      r = cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
      k++;
      if (c && k % c == 0) cu.sync();
      if (c == 1 && k <= (1 << 16)) {
        struct timespec e;
        clock_gettime(CLOCK_MONOTONIC, &e);
        lat[k - 1] = ((e.tv_sec - t.tv_sec) * 1000000000ll + (e.tv_nsec - t.tv_nsec)) / 1000;
      }
      if (d) usleep(d);
    }
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cu.sync();
    printf("run %llu kernels -> %d from=%llu to=%llu", k, r,
           (unsigned long long)t0.tv_sec * 1000000000ull + (unsigned long long)t0.tv_nsec,
           (unsigned long long)t1.tv_sec * 1000000000ull + (unsigned long long)t1.tv_nsec);
    if (c == 1 && k) {
      unsigned long long n = k < (1 << 16) ? k : (1 << 16);
      qsort(lat, n, sizeof lat[0], cmp_ll);
      printf(" p50=%lld p99=%lld", lat[n / 2], lat[(n * 99) / 100]);
    }
    printf("\n");
    fflush(stdout);
    return;
  }
  if (!strcmp(name, "capture_mix")) {
    CUstream s = NULL;
    cu.stream_create(&s, 0);
    cu.begin_capture(s, 0);
    for (unsigned long long i = 0; i < a && r == 0; i++) {
      r = cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
      if (r == 0) r = cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    }
    int end = cu.end_capture(s, NULL);
    printf("capture_mix %llu -> %d end=%d\n", a, r, end);
    fflush(stdout);
    return;
  }
  if (!strcmp(name, "capture_held")) {
    CUstream s = NULL;
    uint64_t none = 0;
    void *no_work[1] = {&none};
    r = cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    cu.stream_create(&s, 0);
    cu.begin_capture(s, 0);
    struct timespec t, e;
    clock_gettime(CLOCK_MONOTONIC, &t);
    unsigned long long k = 0;
    do {
      if (r == 0) r = cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, s, no_work, NULL);
      k++;
      usleep(100);
      clock_gettime(CLOCK_MONOTONIC, &e);
    } while ((e.tv_sec - t.tv_sec) * 1000 + (e.tv_nsec - t.tv_nsec) / 1000000 < (long long)a);
    int end = cu.end_capture(s, NULL);
    printf("capture_held %llu -> %d end=%d\n", k, r, end);
    fflush(stdout);
    return;
  }
  if (!strcmp(name, "alternate")) {
    void *ctx[64] = {0};
    ns = c;
    if (a > 64) a = 64;
    for (unsigned long long i = 0; i < a && r == 0; i++) {
      int dev = -1;
      r = cu.device_get(&dev, (int)i);
      if (r == 0) r = cu.primary_retain(&ctx[i], dev);
    }
    for (unsigned long long k = 0; k < b && r == 0; k++)
      for (unsigned long long i = 0; i < a && r == 0; i++) {
        r = cu.set_current(ctx[i]);
        if (r == 0) r = cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
      }
    for (unsigned long long i = 0; i < a && r == 0; i++) {
      r = cu.set_current(ctx[i]);
      if (r == 0) r = cu.sync();
      if (r == 0) current_device = (int)i;
    }
    printf("alternate %llu %llu -> %d\n", a, b, r);
    fflush(stdout);
    return;
  }
  if (!strcmp(name, "device")) {
    int dev = -1;
    void *ctx = NULL;
    r = cu.device_get(&dev, (int)a);
    if (r == 0) r = cu.primary_retain(&ctx, dev);
    if (r == 0) r = cu.set_current(ctx);
    if (r == 0) current_device = dev;
    printf("device %llu -> %d\n", a, r);
    fflush(stdout);
    return;
  }
  if (!strcmp(name, "launch") || !strcmp(name, "launch_ptsz") || !strcmp(name, "launch_ex") ||
      !strcmp(name, "coop") || !strcmp(name, "graph") || !strcmp(name, "capture")) {
    CUstream s = NULL;
    if (!strcmp(name, "capture")) { cu.stream_create(&s, 0); cu.begin_capture(s, 0); }
    for (unsigned long long i = 0; i < a && r == 0; i++) {
      if (!strcmp(name, "launch") || !strcmp(name, "capture")) r = cu.launch(NULL, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
      else if (!strcmp(name, "launch_ptsz")) r = cu.launch_ptsz(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
      else if (!strcmp(name, "launch_ex")) {
        struct { unsigned dims[7]; CUstream s; void *attrs; unsigned n; } config = {{1, 1, 1, 1, 1, 1, 0}, NULL, NULL, 0};
        r = cu.launch_ex(&config, NULL, params, NULL);
      } else if (!strcmp(name, "coop")) r = cu.coop(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params);
      else r = cu.graph(&ns, NULL);
    }
    int end = s ? cu.end_capture(s, NULL) : 0;
    printf("%s %llu -> %d", name, a, r);
    if (s) printf(" end=%d", end);
    printf("\n");
  } else if (!strcmp(name, "alloc") || !strcmp(name, "managed") || !strcmp(name, "async") || !strcmp(name, "pool")) {
    CUdeviceptr p = 0;
    if (!strcmp(name, "alloc")) r = cu.alloc(&p, a);
    else if (!strcmp(name, "managed")) r = cu.managed(&p, a, 1);
    else if (!strcmp(name, "async")) r = cu.async(&p, a, NULL);
    else r = cu.pool(&p, a, (void *)0x900d, NULL);
    if (r == 0) record(strcmp(name, "alloc") && strcmp(name, "managed") ? K_ASYNC : K_PTR, p);
    printf("%s %llu -> %d\n", name, a, r);
  } else if (!strcmp(name, "pitch")) {
    CUdeviceptr p = 0;
    size_t pitch = 0;
    r = cu.pitch(&p, &pitch, a, b, 4);
    if (r == 0) record(K_PTR, p);
    printf("pitch %llu %llu -> %d pitch=%zu\n", a, b, r, pitch);
  } else if (!strcmp(name, "create")) {
    struct { int type, handle_types, loc_type, loc_id; void *win32; unsigned char flags[8]; } prop = {1, 0, 1, current_device, NULL, {0}};
    uint64_t h = 0;
    r = cu.create(&h, a, &prop, 0);
    if (r == 0) record(K_HANDLE, h);
    printf("create %llu -> %d\n", a, r);
  } else if (!strcmp(name, "array") || !strcmp(name, "array3d")) {
    unsigned long long c = 0;
    sscanf(op, "%*[a-z_13]:%*u:%*u:%llu", &c);
    void *arr = NULL;
    if (!strcmp(name, "array")) {
      struct { size_t w, h; unsigned format, channels; } d = {a, b, 0x20, 1};
      r = cu.array(&arr, &d);
    } else {
      struct { size_t w, h, d; unsigned format, channels, flags; } d = {a, b, c, 0x20, 1, 0};
      r = cu.array3d(&arr, &d);
    }
    if (r == 0) record(K_ARRAY, (uint64_t)arr);
    printf("%s %llu %llu -> %d\n", name, a, b, r);
  } else if (!strcmp(name, "free")) {
    if ((int)a >= nallocs) { printf("free %llu -> no such allocation\n", a); return; }
    if (allocs[a].kind == K_PTR) r = cu.free(allocs[a].v);
    else if (allocs[a].kind == K_ASYNC) r = cu.free_async(allocs[a].v, NULL);
    else if (allocs[a].kind == K_ARRAY) r = cu.array_destroy((void *)allocs[a].v);
    else r = cu.release(allocs[a].v);
    printf("free %llu -> %d\n", a, r);
  } else if (!strcmp(name, "info")) {
    size_t f = 0, t = 0;
    r = cu.info(&f, &t);
    printf("info free=%zu total=%zu -> %d\n", f, t, r);
  } else if (!strcmp(name, "info1")) {
    unsigned f = 0, t = 0;
    r = cu.info1(&f, &t);
    printf("info1 free=%u total=%u -> %d\n", f, t, r);
  } else if (!strcmp(name, "total")) {
    size_t t = 0;
    r = cu.total(&t, current_device);
    printf("total %zu -> %d\n", t, r);
  } else {
    fprintf(stderr, "unknown operation %s\n", op);
    exit(2);
  }
  fflush(stdout);
}

int main(int argc, char **argv) {
  resolve();
  for (int i = 1; i < argc; i++) run(argv[i]);
  return 0;
}
