// A plain nvcc program whose kernels go out through cudaLaunchKernelEx (the driver's
// cuLaunchKernelEx). Prints a checksum as JSON, so runs with and without the hook can be compared.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
  const int n = 1 << 22;
  float *x, *y;
  if (cudaMalloc(&x, n * sizeof(float)) || cudaMalloc(&y, n * sizeof(float))) return 1;
  float *h = new float[n];
  for (int i = 0; i < n; i++) h[i] = (float)(i % 1000) * 0.001f;
  cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(y, h, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((n + 255) / 256);
  cfg.blockDim = dim3(256);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  for (int k = 0; k < 100; k++) {
    cudaError_t e = cudaLaunchKernelEx(&cfg, saxpy, n, 0.5f, (const float *)x, y);
    if (e != cudaSuccess) {
      printf("{\"bench\":\"launch_ex\",\"error\":\"%s\"}\n", cudaGetErrorString(e));
      return 1;
    }
  }
  cudaMemcpy(h, y, n * sizeof(float), cudaMemcpyDeviceToHost);
  double sum = 0;
  for (int i = 0; i < n; i++) sum += h[i];
  printf("{\"bench\":\"launch_ex\",\"checksum\":%.6f}\n", sum);
  return 0;
}
