/* What a sched_yield costs a thread that shares its CPU with a CPU-bound
 * process: the share of that CPU a spinning thread gets with and without
 * a yield every 4096 spins (the pool's idle worker yields that often).
 * Run it through scripts/yield-share.sh, which pins a busy process on the
 * same CPU first. Not built by cargo.
 *
 *   yield_share CPU YIELD   (YIELD: 1 = yield every 4096 spins, 0 = never)
 *
 * Prints the spinner's share of CPU over 3 s of wall time. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static atomic_int stop;
static int yields;

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *spin(void *arg) {
    (void)arg;
    unsigned long spins = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        if (yields && ++spins % 4096 == 0)
            sched_yield();
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause(); /* as the pool's spin_loop */
#else
        __asm__ __volatile__("" ::: "memory");
#endif
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CPU YIELD\n", argv[0]);
        return 2;
    }
    int cpu = atoi(argv[1]);
    yields = atoi(argv[2]);
    pthread_t thread;
    if (pthread_create(&thread, NULL, spin, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(thread, sizeof set, &set) != 0) {
        fprintf(stderr, "cannot pin the spinner to CPU %d\n", cpu);
        return 1;
    }
    clockid_t clock;
    pthread_getcpuclockid(thread, &clock);
    double wall0 = seconds(CLOCK_MONOTONIC), cpu0 = seconds(clock);
    struct timespec three = {3, 0};
    nanosleep(&three, NULL);
    double wall1 = seconds(CLOCK_MONOTONIC), cpu1 = seconds(clock);
    atomic_store_explicit(&stop, 1, memory_order_relaxed);
    pthread_join(thread, NULL);
    printf("yield every 4096 spins: %s  share of CPU %d: %.3f\n", yields ? "yes" : "no ",
           cpu, (cpu1 - cpu0) / (wall1 - wall0));
    return 0;
}
