/* A stand-in for libnvidia-ml.so.1, for tests on machines without a GPU.
 *
 * It exports only the NVML entry points gpushare calls (nvml-wrapper resolves symbols lazily, so
 * the others may be missing). All state lives in a text file named by $FAKE_NVML_STATE and is
 * re-read on every call, so a test can change it while the daemon runs:
 *
 *   count N                  number of devices (default 1)
 *   mode INDEX MODE          compute mode (0 default, 1 exclusive thread, 2 prohibited,
 *                            3 exclusive process); written back by nvmlDeviceSetComputeMode
 *   proc INDEX PID BYTES     a process with a compute context on device INDEX
 *   gproc INDEX PID BYTES    a process with a graphics context on device INDEX
 *   util INDEX PID SM        per-process utilization: PID kept the SMs of device INDEX SM percent
 *                            busy, in a sample stamped with the time of the call (so there is
 *                            always a sample newer than the caller's last one)
 *   deny_set 1               nvmlDeviceSetComputeMode fails with NVML_ERROR_NO_PERMISSION
 *   fail_init 1              nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED
 *
 * Compute mode changes and init/shutdown are also appended, one a line, to STATE.calls.
 *
 * Built with -DOLD_DRIVER it lacks nvmlDeviceGetProcessUtilization and
 * nvmlDeviceGetGraphicsRunningProcesses_v3, as drivers before them do.
 *
 * Build: gcc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef struct fake_device *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_UNKNOWN 999

#define MAX_DEVICES 8
#define MAX_PROCS 64
#define TOTAL_MEMORY (80ULL << 30)

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

struct fake_device {
    unsigned int index;
};

struct proc {
    unsigned int device, pid;
    unsigned long long bytes;
};

struct util {
    unsigned int device, pid, sm;
};

struct state {
    unsigned int count;
    int mode[MAX_DEVICES];
    struct proc procs[MAX_PROCS];
    unsigned int nprocs;
    struct proc gprocs[MAX_PROCS];
    unsigned int ngprocs;
    struct util utils[MAX_PROCS];
    unsigned int nutils;
    int deny_set, fail_init;
};

static struct fake_device devices[MAX_DEVICES];
static int initialized;

static const char *state_path(void) {
    static char next_to_library[4096];
    const char *env = getenv("FAKE_NVML_STATE");
    Dl_info info;
    char *slash;
    if (env && *env) return env;
    if (!next_to_library[0] && dladdr((void *)state_path, &info) && info.dli_fname) {
        snprintf(next_to_library, sizeof next_to_library, "%s", info.dli_fname);
        slash = strrchr(next_to_library, '/');
        if (slash)
            snprintf(slash + 1, sizeof next_to_library - (size_t)(slash + 1 - next_to_library), "fake_nvml.state");
        else
            snprintf(next_to_library, sizeof next_to_library, "fake_nvml.state");
    }
    return next_to_library[0] ? next_to_library : NULL;
}

static void log_call(const char *what, unsigned int a, int b) {
    const char *path = state_path();
    char calls[4096];
    FILE *f;
    if (!path) return;
    snprintf(calls, sizeof calls, "%s.calls", path);
    f = fopen(calls, "a");
    if (!f) return;
    fprintf(f, "%s %u %d\n", what, a, b);
    fclose(f);
}

static void load(struct state *s) {
    const char *path = state_path();
    char line[256];
    FILE *f;
    memset(s, 0, sizeof *s);
    s->count = 1;
    if (!path || !(f = fopen(path, "r"))) return;
    while (fgets(line, sizeof line, f)) {
        unsigned int a, b;
        unsigned long long c;
        int m;
        if (sscanf(line, "count %u", &a) == 1) {
            s->count = a > MAX_DEVICES ? MAX_DEVICES : a;
        } else if (sscanf(line, "mode %u %d", &a, &m) == 2) {
            if (a < MAX_DEVICES) s->mode[a] = m;
        } else if (sscanf(line, "proc %u %u %llu", &a, &b, &c) == 3) {
            if (s->nprocs < MAX_PROCS) {
                s->procs[s->nprocs].device = a;
                s->procs[s->nprocs].pid = b;
                s->procs[s->nprocs].bytes = c;
                s->nprocs++;
            }
        } else if (sscanf(line, "gproc %u %u %llu", &a, &b, &c) == 3) {
            if (s->ngprocs < MAX_PROCS) {
                s->gprocs[s->ngprocs].device = a;
                s->gprocs[s->ngprocs].pid = b;
                s->gprocs[s->ngprocs].bytes = c;
                s->ngprocs++;
            }
        } else if (sscanf(line, "util %u %u %llu", &a, &b, &c) == 3) {
            if (s->nutils < MAX_PROCS) {
                s->utils[s->nutils].device = a;
                s->utils[s->nutils].pid = b;
                s->utils[s->nutils].sm = (unsigned int)c;
                s->nutils++;
            }
        } else if (sscanf(line, "deny_set %d", &m) == 1) {
            s->deny_set = m;
        } else if (sscanf(line, "fail_init %d", &m) == 1) {
            s->fail_init = m;
        }
    }
    fclose(f);
}

/* Rewrites the state file (through a rename, so readers never see half a file). */
static int save(const struct state *s) {
    const char *path = state_path();
    char tmp[4096];
    unsigned int i;
    FILE *f;
    if (!path) return 0;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    if (!(f = fopen(tmp, "w"))) return -1;
    fprintf(f, "count %u\n", s->count);
    for (i = 0; i < s->count; i++) fprintf(f, "mode %u %d\n", i, s->mode[i]);
    for (i = 0; i < s->nprocs; i++)
        fprintf(f, "proc %u %u %llu\n", s->procs[i].device, s->procs[i].pid, s->procs[i].bytes);
    for (i = 0; i < s->ngprocs; i++)
        fprintf(f, "gproc %u %u %llu\n", s->gprocs[i].device, s->gprocs[i].pid, s->gprocs[i].bytes);
    for (i = 0; i < s->nutils; i++)
        fprintf(f, "util %u %u %u\n", s->utils[i].device, s->utils[i].pid, s->utils[i].sm);
    if (s->deny_set) fprintf(f, "deny_set 1\n");
    if (s->fail_init) fprintf(f, "fail_init 1\n");
    if (fclose(f) != 0) return -1;
    return rename(tmp, path);
}

static int device_index(nvmlDevice_t device, const struct state *s, unsigned int *index) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!device || device < devices || device >= devices + MAX_DEVICES) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->index >= s->count) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
    struct state s;
    unsigned int i;
    load(&s);
    log_call("init", 0, 0);
    if (s.fail_init) return NVML_ERROR_DRIVER_NOT_LOADED;
    for (i = 0; i < MAX_DEVICES; i++) devices[i].index = i;
    initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
    log_call("shutdown", 0, 0);
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    struct state s;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    load(&s);
    *count = s.count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    struct state s;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    load(&s);
    if (!device || index >= s.count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    struct state s;
    unsigned int i;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    if (!name) return NVML_ERROR_INVALID_ARGUMENT;
    if ((unsigned int)snprintf(name, length, "Fake GPU %u", i) >= length) return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    struct state s;
    unsigned int i;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    if (!uuid) return NVML_ERROR_INVALID_ARGUMENT;
    if ((unsigned int)snprintf(uuid, length, "GPU-fa4e0000-0000-0000-0000-%012u", i) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, int *mode) {
    struct state s;
    unsigned int i;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = s.mode[i];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, int mode) {
    struct state s;
    unsigned int i;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    log_call("set_compute_mode", i, mode);
    if (mode < 0 || mode > 3) return NVML_ERROR_INVALID_ARGUMENT;
    if (s.deny_set) return NVML_ERROR_NO_PERMISSION;
    s.mode[i] = mode;
    return save(&s) ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

static unsigned long long used_memory(const struct state *s, unsigned int index) {
    unsigned long long used = 512ULL << 20; /* what the driver itself keeps */
    unsigned int k;
    for (k = 0; k < s->nprocs; k++)
        if (s->procs[k].device == index) used += s->procs[k].bytes;
    return used;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    struct state s;
    unsigned int i;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = TOTAL_MEMORY;
    memory->used = used_memory(&s, i);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    struct state s;
    unsigned int i;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = TOTAL_MEMORY;
    memory->reserved = 0;
    memory->used = used_memory(&s, i);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

/* Copies the processes of device INDEX from LIST into INFOS, as the *RunningProcesses_v3 calls do. */
static nvmlReturn_t running(const struct proc *list, unsigned int n_list, unsigned int index,
                            unsigned int *count, nvmlProcessInfo_t *infos) {
    unsigned int k, n = 0, room;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    for (k = 0; k < n_list; k++)
        if (list[k].device == index) n++;
    room = *count;
    *count = n;
    if (n == 0) return NVML_SUCCESS;
    if (room < n || !infos) return NVML_ERROR_INSUFFICIENT_SIZE;
    n = 0;
    for (k = 0; k < n_list; k++) {
        if (list[k].device != index) continue;
        infos[n].pid = list[k].pid;
        infos[n].usedGpuMemory = list[k].bytes;
        infos[n].gpuInstanceId = 0xFFFFFFFFu;
        infos[n].computeInstanceId = 0xFFFFFFFFu;
        n++;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    struct state s;
    unsigned int i;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    return running(s.procs, s.nprocs, i, count, infos);
}

#ifndef OLD_DRIVER
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    struct state s;
    unsigned int i;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    return running(s.gprocs, s.ngprocs, i, count, infos);
}

/* As the driver: NOT_FOUND without samples newer than lastSeenTimeStamp; with a NULL buffer or
 * too small a count, INSUFFICIENT_SIZE and the count needed. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *count,
                                             unsigned long long lastSeenTimeStamp) {
    struct state s;
    struct timeval tv;
    unsigned long long now;
    unsigned int i, k, n = 0, room;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    gettimeofday(&tv, NULL);
    now = (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
    if (now > lastSeenTimeStamp)
        for (k = 0; k < s.nutils; k++)
            if (s.utils[k].device == i) n++;
    room = *count;
    *count = n;
    if (n == 0) return NVML_ERROR_NOT_FOUND;
    if (room < n || !utilization) return NVML_ERROR_INSUFFICIENT_SIZE;
    n = 0;
    for (k = 0; k < s.nutils; k++) {
        if (s.utils[k].device != i) continue;
        memset(&utilization[n], 0, sizeof utilization[n]);
        utilization[n].pid = s.utils[k].pid;
        utilization[n].timeStamp = now;
        utilization[n].smUtil = s.utils[k].sm;
        n++;
    }
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    struct state s;
    unsigned int i;
    int rc;
    load(&s);
    if ((rc = device_index(device, &s, &i))) return rc;
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = s.nprocs ? 50 : 0;
    utilization->memory = 0;
    return NVML_SUCCESS;
}
