// Empty-kernel launch loop: the cost the hook adds to each launch.
// Prints one JSON line: launches, seconds, launches per second, ns per launch.
// Build: nvcc -O2 -o launch_loop launch_loop.cu   (static cudart: it resolves the driver
// through cuGetProcAddress, the path PyTorch uses)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

__global__ void empty() {}

static void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  const char *label = argc > 2 ? argv[2] : "";
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  for (int i = 0; i < 10000; i++) empty<<<1, 1, 0, s>>>();
  check(cudaStreamSynchronize(s), "warm-up");
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; i++) empty<<<1, 1, 0, s>>>();
  auto t1 = std::chrono::steady_clock::now();
  check(cudaStreamSynchronize(s), "sync");
  auto t2 = std::chrono::steady_clock::now();
  check(cudaGetLastError(), "launch");
  double launch_s = std::chrono::duration<double>(t1 - t0).count();
  double total_s = std::chrono::duration<double>(t2 - t0).count();
  printf("{\"bench\":\"launch_loop\",\"label\":\"%s\",\"launches\":%ld,\"launch_seconds\":%.6f,"
         "\"total_seconds\":%.6f,\"launches_per_s\":%.1f,\"ns_per_launch\":%.2f}\n",
         label, n, launch_s, total_s, n / launch_s, launch_s * 1e9 / n);
  return 0;
}
