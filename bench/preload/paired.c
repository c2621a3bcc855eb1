/* Paired start-up times: runs PROGRAM [ARGS...] N times without and N times with LD_PRELOAD=HOOK,
 * alternating (the order flips every pair), and prints the median wall time of each and the
 * median of the pairs' differences, in microseconds. A machine whose load drifts slows both
 * members of a pair alike, so the paired difference stays steady where the means do not.
 *   paired N HOOK PROGRAM [ARGS...]  ->  "plain_us=... hook_us=... added_us=... (N pairs)"
 */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double run(char **argv, char **envp) {
  struct timespec a, b;
  pid_t pid;
  int status;
  clock_gettime(CLOCK_MONOTONIC, &a);
  if (posix_spawn(&pid, argv[0], NULL, NULL, argv, envp) != 0) { perror("posix_spawn"); exit(1); }
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "%s failed\n", argv[0]);
    exit(1);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  return (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
}

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: paired N HOOK PROGRAM [ARGS...]\n"); return 2; }
  int n = atoi(argv[1]);
  /* The environment without LD_PRELOAD, and the same with the hook. */
  int count = 0;
  for (char **e = environ; *e; e++) count++;
  char **plain = calloc(count + 1, sizeof *plain), **hooked = calloc(count + 2, sizeof *hooked);
  int k = 0;
  for (char **e = environ; *e; e++)
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) plain[k] = hooked[k] = *e, k++;
  char *pre = malloc(strlen(argv[2]) + 12);
  sprintf(pre, "LD_PRELOAD=%s", argv[2]);
  hooked[k] = pre;
  double *p = malloc(n * sizeof *p), *h = malloc(n * sizeof *h), *d = malloc(n * sizeof *d);
  for (int i = 0; i < 20; i++) run(argv + 3, plain), run(argv + 3, hooked);
  for (int i = 0; i < n; i++) {
    if (i % 2) {
      h[i] = run(argv + 3, hooked);
      p[i] = run(argv + 3, plain);
    } else {
      p[i] = run(argv + 3, plain);
      h[i] = run(argv + 3, hooked);
    }
    d[i] = h[i] - p[i];
  }
  printf("plain_us=%.1f hook_us=%.1f added_us=%.1f (%d pairs)\n", median(p, n), median(h, n),
         median(d, n), n);
  return 0;
}
