/* Self time for gprof (tests/hooks.rs): small functions of odd sizes
 * next to each other (at -O1 they start at any byte), each with its own
 * self time, and `busy`, which spins about 800 ms (more than a 16-bit
 * histogram count holds at microseconds). */
#include <stdio.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((no_instrument_function)) static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

__attribute__((noinline)) void spin_a(void) { for (int i = 0; i < 300000; i++) sink += i; }
__attribute__((noinline)) void spin_b(void) { for (int i = 0; i < 600000; i++) sink ^= i; }
__attribute__((noinline)) void spin_c(void) { for (int i = 0; i < 900000; i++) sink += i * 3; }
__attribute__((noinline)) void busy(void) {
    long long end = now_ns() + 800000000LL;
    while (now_ns() < end) sink++;
}

int main(void) {
    for (int k = 0; k < 100; k++) {
        spin_a();
        spin_b();
        spin_c();
    }
    busy();
    printf("%lu\n", sink > 0 ? 1UL : 0UL);
    return 0;
}
