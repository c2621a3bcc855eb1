/* Takes part of every CPU's time at a priority above the tests', in bursts, as a hypervisor's
 * steal on a shared CI machine does: for checking that the timing-dependent tests hold there.
 *
 *   gcc -O2 -pthread -o /tmp/cpu_steal tests/tools/cpu_steal.c
 *   /tmp/cpu_steal BURST_US PERIOD_US &    # e.g. 5000 50000: a tenth of each CPU
 *   tests/run.sh; kill %1
 *
 * One thread per online CPU, pinned to it, SCHED_FIFO: each period it spins for BURST_US/2 to
 * 3*BURST_US/2 and sleeps the rest of PERIOD_US, give or take half (a random phase per CPU).
 * Needs root (real-time priority); the kernel's real-time throttling keeps 5% for the others. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long burst_us, period_us;

static long now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000L + t.tv_nsec / 1000;
}

static void *steal(void *arg) {
    long cpu = (long)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    struct sched_param p = {.sched_priority = 90};
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) != 0)
        fprintf(stderr, "cpu_steal: no real-time priority on CPU %ld (run as root)\n", cpu);
    unsigned seed = (unsigned)cpu * 7919u + 1u;
    for (;;) {
        long until = now_us() + burst_us / 2 + rand_r(&seed) % (burst_us + 1);
        while (now_us() < until) {
        }
        long rest = period_us - burst_us;
        usleep((useconds_t)(rest / 2 + rand_r(&seed) % (rest + 1)));
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3 || (burst_us = atol(argv[1])) <= 0 || (period_us = atol(argv[2])) <= burst_us) {
        fprintf(stderr, "usage: cpu_steal BURST_US PERIOD_US (PERIOD_US > BURST_US > 0)\n");
        return 2;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_t t;
    for (long i = 0; i < cpus; i++)
        pthread_create(&t, NULL, steal, (void *)i);
    pause();
    return 0;
}
