/* Calls of known durations for the record-time time filter (`-t`) and
 * --duration tests: `slow` sleeps 3 ms (never less), `tiny` takes
 * nanoseconds; `outer` calls 100 tiny, one slow and one `mid`, which calls
 * 10 tiny and one slow. `main ROUNDS [SPIN_MS]` runs ROUNDS outers, then
 * (with SPIN_MS) calls `tick` in a loop for SPIN_MS milliseconds, and
 * prints the round count and how many ticks ran. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) int tiny(int i) {
    __asm__ volatile("" ::: "memory");
    return i * 3;
}

__attribute__((noinline)) void slow(void) {
    struct timespec ts = {0, 3 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

__attribute__((noinline)) long mid(long x) {
    long s = 0;
    for (int i = 0; i < 10; i++) s += tiny(i);
    slow();
    return s + x;
}

__attribute__((noinline)) long outer(int r) {
    long s = 0;
    for (int i = 0; i < 100; i++) s += tiny(i);
    slow();
    return s + mid(r);
}

__attribute__((noinline)) long tick(long i) {
    __asm__ volatile("" ::: "memory");
    return i + 1;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    double spin = argc > 2 ? atof(argv[2]) : 0;
    long s = 0;
    for (int r = 0; r < rounds; r++) s += outer(r);
    long ticks = 0;
    if (spin > 0) {
        double end = now_ms() + spin;
        while (now_ms() < end)
            for (int k = 0; k < 1000; k++) ticks = tick(ticks);
    }
    printf("%d rounds %ld ticks %ld\n", rounds, ticks, s);
    return 0;
}
