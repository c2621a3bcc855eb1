/* What the hook adds to each launch, without a GPU's noise: cuLaunchKernel of the test double
 * libcuda.so.1 (tests/fakes/fake_cuda.c, whose launch is two clock reads) called N times in a
 * loop, through dlopen + dlsym as the CUDA runtime does. Run plain and under the hook; the
 * difference of the ns per launch is the hook's cost, lease renewals included.
 * Prints one JSON line.   Build: gcc -O2 -o wrapper_cost wrapper_cost.c -ldl
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 10000000;
  const char *label = argc > 2 ? argv[2] : "";
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
  launch_fn launch = (launch_fn)dlsym(cuda, "cuLaunchKernel");
  if (!init || !launch || init(0) != 0) { fprintf(stderr, "no cuInit/cuLaunchKernel\n"); return 1; }
  for (long i = 0; i < 100000; i++) launch(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
  double t0 = now_s();
  for (long i = 0; i < n; i++) launch(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
  double dt = now_s() - t0;
  printf("{\"bench\":\"wrapper_cost\",\"label\":\"%s\",\"launches\":%ld,\"seconds\":%.6f,"
         "\"ns_per_launch\":%.3f}\n", label, n, dt, dt * 1e9 / n);
  return 0;
}
