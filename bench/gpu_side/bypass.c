/* A CUDA program that goes around libgpushare.so while attached through it, for
 * bench/gpu_side/bypass.sh: gpushared must report it (gpu.violations).
 *
 * usage: bypass MODE ROUTE SECONDS
 *   MODE   control   256 MiB and a spinning kernel, all through the hook (must not be reported)
 *          memory    the control's 256 MiB through the hook, then 4 GiB the hook does not see,
 *                    held for SECONDS
 *          activity  attaches through the hook (cuInit), then runs a spinning kernel for SECONDS
 *                    around it, without ever holding a lease
 *   ROUTE  elf       the real entry points of the libcuda.so.1 already loaded, found in its
 *                    .dynsym on disk (no dlsym, so the hook's dlsym cannot step in)
 *          dlmopen   a second, private copy of libcuda.so.1 in a new link-map namespace
 *                    (dlmopen(LM_ID_NEWLM)), with its own driver state
 * The hooked side always uses dlopen("libcuda.so.1") and dlsym, which the hook interposes.
 * Prints JSON lines: "ready" (with the pid) once set up, "bypass" with what the route gave,
 * "done" at the end; errors as {"event":"error",...} with exit status 1.
 *
 * Build: gcc -O1 -Wall -o bypass bypass.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

struct driver {
    const char *route;
    CUresult (*init)(unsigned int);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*module_load_data)(CUmodule *, const void *);
    CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*ctx_synchronize)(void);
};

/* Spins each thread for `cycles` clock cycles. */
static const char SPIN_PTX[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 cycles)\n"
    "{\n"
    "  .reg .pred %p;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [cycles];\n"
    "  mov.u64 %rd2, %clock64;\n"
    "L1:\n"
    "  mov.u64 %rd3, %clock64;\n"
    "  sub.s64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.s64 %p, %rd4, %rd1;\n"
    "  @%p bra L1;\n"
    "  ret;\n"
    "}\n";

static const char *mode, *route;

static void fail(const char *what, long code) {
    printf("{\"event\":\"error\",\"mode\":\"%s\",\"route\":\"%s\",\"what\":\"%s\",\"code\":%ld}\n",
           mode, route, what, code);
    fflush(stdout);
    exit(1);
}

static void check(const char *what, CUresult r) {
    if (r != 0) fail(what, r);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

typedef void *(*lookup_fn)(void *, const char *);

static void resolve(struct driver *d, void *handle, lookup_fn look) {
#define GET(field, name)                                   \
    do {                                                   \
        *(void **)&d->field = look(handle, name);          \
        if (!d->field) fail("missing symbol " name, 0);    \
    } while (0)
    GET(init, "cuInit");
    GET(device_get, "cuDeviceGet");
    GET(primary_retain, "cuDevicePrimaryCtxRetain");
    GET(ctx_set_current, "cuCtxSetCurrent");
    GET(mem_alloc, "cuMemAlloc_v2");
    GET(module_load_data, "cuModuleLoadData");
    GET(module_get_function, "cuModuleGetFunction");
    GET(launch, "cuLaunchKernel");
    GET(ctx_synchronize, "cuCtxSynchronize");
#undef GET
}

static void *by_dlsym(void *handle, const char *name) { return dlsym(handle, name); }

/* ---- the elf route: the loaded libcuda's own .dynsym ---- */

static char cuda_path[4096];
static uintptr_t cuda_base;

static int find_cuda(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (info->dlpi_name && strstr(info->dlpi_name, "libcuda.so")) {
        snprintf(cuda_path, sizeof cuda_path, "%s", info->dlpi_name);
        cuda_base = info->dlpi_addr;
        return 1;
    }
    return 0;
}

static void *by_elf(void *unused, const char *name) {
    static unsigned char *file;
    static size_t size;
    const Elf64_Ehdr *eh;
    const Elf64_Shdr *sh;
    int i;
    (void)unused;
    if (!file) {
        struct stat st;
        int fd;
        dl_iterate_phdr(find_cuda, NULL);
        if (!cuda_path[0]) fail("libcuda.so.1 is not loaded", 0);
        fd = open(cuda_path, O_RDONLY);
        if (fd < 0 || fstat(fd, &st) != 0) fail("cannot open libcuda", 0);
        size = (size_t)st.st_size;
        file = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (file == MAP_FAILED) fail("cannot map libcuda", 0);
    }
    eh = (const Elf64_Ehdr *)file;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_shoff + (size_t)eh->e_shnum * sizeof *sh > size)
        fail("libcuda is not a readable ELF file", 0);
    sh = (const Elf64_Shdr *)(file + eh->e_shoff);
    for (i = 0; i < eh->e_shnum; i++) {
        const Elf64_Sym *sym;
        const char *strtab;
        size_t n, k;
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum) continue;
        sym = (const Elf64_Sym *)(file + sh[i].sh_offset);
        strtab = (const char *)(file + sh[sh[i].sh_link].sh_offset);
        n = sh[i].sh_size / sizeof *sym;
        for (k = 0; k < n; k++)
            if (sym[k].st_value && strcmp(strtab + sym[k].st_name, name) == 0)
                return (void *)(cuda_base + sym[k].st_value);
    }
    return NULL;
}

/* ---- both sides ---- */

static CUcontext set_up(struct driver *d) {
    CUdevice dev;
    CUcontext ctx;
    check("cuInit", d->init(0));
    check("cuDeviceGet", d->device_get(&dev, 0));
    check("cuDevicePrimaryCtxRetain", d->primary_retain(&ctx, dev));
    check("cuCtxSetCurrent", d->ctx_set_current(ctx));
    return ctx;
}

/* Runs the spinning kernel on every SM for `seconds`, a ~10 ms kernel at a time. */
static long spin(struct driver *d, double seconds) {
    CUmodule module;
    CUfunction fn;
    unsigned long long cycles = 10ULL * 1000 * 1000; /* ~5-10 ms at 1-2 GHz */
    void *args[] = {&cycles};
    double end = now() + seconds;
    long launches = 0;
    check("cuModuleLoadData", d->module_load_data(&module, SPIN_PTX));
    check("cuModuleGetFunction", d->module_get_function(&fn, module, "spin"));
    while (now() < end) {
        check("cuLaunchKernel", d->launch(fn, 1024, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        check("cuCtxSynchronize", d->ctx_synchronize());
        launches++;
    }
    return launches;
}

int main(int argc, char **argv) {
    struct driver hooked = {.route = "hook"}, around = {0};
    void *handle;
    double seconds;
    CUdeviceptr p;
    if (argc != 4) {
        fprintf(stderr, "usage: bypass control|memory|activity elf|dlmopen SECONDS\n");
        return 2;
    }
    mode = argv[1];
    route = argv[2];
    seconds = atof(argv[3]);

    /* Attach through the hook, as any CUDA program does. */
    handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!handle) fail("dlopen libcuda.so.1", 0);
    resolve(&hooked, handle, by_dlsym);
    set_up(&hooked);
    if (strcmp(mode, "activity") != 0) check("cuMemAlloc (hooked, 256 MiB)", hooked.mem_alloc(&p, 256UL << 20));
    printf("{\"event\":\"ready\",\"mode\":\"%s\",\"route\":\"%s\",\"pid\":%d}\n", mode, route, (int)getpid());
    fflush(stdout);

    if (strcmp(mode, "control") == 0) {
        long n = spin(&hooked, seconds);
        printf("{\"event\":\"done\",\"mode\":\"control\",\"launches\":%ld}\n", n);
        return 0;
    }

    /* Go around it. */
    around.route = route;
    if (strcmp(route, "elf") == 0) {
        resolve(&around, NULL, by_elf);
    } else if (strcmp(route, "dlmopen") == 0) {
        void *private_copy = dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!private_copy) {
            printf("{\"event\":\"error\",\"mode\":\"%s\",\"route\":\"dlmopen\",\"what\":\"dlmopen\",\"message\":\"%s\"}\n",
                   mode, dlerror());
            return 1;
        }
        resolve(&around, private_copy, by_dlsym);
        set_up(&around);
    } else {
        fail("unknown route", 0);
    }
    {
        Dl_info info;
        const char *where = dladdr(*(void **)&around.mem_alloc, &info) && info.dli_fname ? info.dli_fname : "?";
        printf("{\"event\":\"bypass\",\"mode\":\"%s\",\"route\":\"%s\",\"cuMemAlloc_v2_in\":\"%s\","
               "\"same_pointer_as_hooked\":%s}\n",
               mode, route, where, around.mem_alloc == hooked.mem_alloc ? "true" : "false");
        fflush(stdout);
    }
    if (strcmp(mode, "memory") == 0) {
        check("cuMemAlloc (around the hook, 4 GiB)", around.mem_alloc(&p, 4UL << 30));
        printf("{\"event\":\"allocated\",\"bytes\":%lu}\n", 4UL << 30);
        fflush(stdout);
        usleep((useconds_t)(seconds * 1e6));
        printf("{\"event\":\"done\",\"mode\":\"memory\"}\n");
    } else {
        long n = spin(&around, seconds);
        printf("{\"event\":\"done\",\"mode\":\"activity\",\"launches\":%ld}\n", n);
    }
    return 0;
}
