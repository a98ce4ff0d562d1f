/* Off-CPU pairing across CPUs (tests/sched.rs): the thread moves itself
 * between CPU 1 and CPU 0 with sched_setaffinity 500 times each way; each
 * move switches it out on one CPU and back in on the other, so the two
 * context-switch records of one off-CPU interval are in different per-CPU
 * rings. Prints how many moves really changed the CPU. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

static int moved;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    int before = sched_getcpu();
    if (sched_setaffinity(0, sizeof s, &s) == 0 && sched_getcpu() == cpu && before != cpu)
        moved++;
}

__attribute__((noinline)) int hop(int n) {
    for (int i = 0; i < n; i++) {
        pin(1);
        pin(0);
    }
    return n;
}

int main(void) {
    hop(500);
    printf("moved %d\n", moved);
    return 0;
}
