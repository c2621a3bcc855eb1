// Does a context whose stream waits on a stream memory operation (cuStreamWaitValue32 on
// pinned host memory) take GPU time from another context under time-slicing? And how soon
// does the gated work start once the host writes the value?
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

__global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}

static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(int argc, char **argv) {
  const char *role = argv[1];
  double us = atof(argv[2]);      // kernel length
  double secs = atof(argv[3]);
  int sync_every = argc > 4 ? atoi(argv[4]) : 4;
  cudaFree(0);
  int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
  long long cycles = (long long)(us * clk / 1000.0);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (!strcmp(role, "runner")) {
    // launches us-long kernels for secs, synchronizing every sync_every; prints kernels/s
    double t0 = now(); long n = 0;
    while (now() - t0 < secs) {
      for (int i = 0; i < sync_every; i++) spin<<<132, 128, 0, s>>>(cycles);
      cudaStreamSynchronize(s); n += sync_every;
    }
    double dt = now() - t0;
    printf("runner %.0fus sync%d: %.1f kernels/s (%.3f of GPU)\n", us, sync_every, n / dt, n * us * 1e-6 / dt);
  } else {
    // gated: queue work behind a wait on pinned memory, hold it for secs, then open
    volatile unsigned *flag; CUdeviceptr dflag;
    cudaHostAlloc((void **)&flag, 64, cudaHostAllocMapped);
    *flag = 0;
    cudaHostGetDevicePointer((void **)&dflag, (void *)flag, 0);
    CUresult r = cuStreamWaitValue32((CUstream)s, dflag, 1, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) { printf("cuStreamWaitValue32: %d\n", r); return 1; }
    cudaEvent_t done; cudaEventCreate(&done);
    int queued = atoi(argv[4]);
    for (int i = 0; i < queued; i++) spin<<<132, 128, 0, s>>>(cycles);
    cudaEventRecord(done, s);
    printf("gated: %d kernels queued, query=%d\n", queued, cudaEventQuery(done));
    fflush(stdout);
    usleep((useconds_t)(secs * 1e6));
    printf("gated: before open query=%d\n", cudaEventQuery(done));
    double t0 = now();
    *flag = 1;
    __sync_synchronize();
    cudaEventSynchronize(done);
    double dt = now() - t0;
    printf("gated: opened, %d kernels of %.0fus done after %.1f us (%.1f us over their length)\n", queued, us, dt * 1e6, dt * 1e6 - queued * us);
  }
  return 0;
}
