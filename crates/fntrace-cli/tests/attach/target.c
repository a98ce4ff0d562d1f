/* A long-running program for `fntrace record -p`: four worker threads call
 * small functions in a loop and check every result against a closed form;
 * the main thread answers commands on standard input:
 *   "rate"  -> "rate ITERATIONS NANOSECONDS" since the previous "rate"
 *   "spawn" -> starts a short-lived fifth thread (calls during a window)
 *   "retire" -> stops the last worker that still runs, answers "retired N"
 *              (N workers left)
 *   "quit"  -> stops the workers, prints "ok iterations=N errors=E", exits
 *              with status 0 if no result was wrong, 3 otherwise.
 * With an argument N, each worker sleeps 1 ms every N iterations (a paced
 * load that keeps traces small); without, it runs flat out. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static atomic_int retired[4];
static atomic_ulong iterations;
static atomic_ulong errors;
static long pace;

__attribute__((noinline)) long leaf_add(long a, long b) { return a + b; }
__attribute__((noinline)) long leaf_mul(long a, long b) { return a * b; }
__attribute__((noinline)) long middle(long i) { return leaf_add(leaf_mul(i, 3), leaf_mul(i, i)); }
__attribute__((noinline)) long outer(long i) { return leaf_add(middle(i), middle(i + 1)); }

static void *worker(void *arg) {
    long seed = (long)arg;
    unsigned long n = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed) &&
           !atomic_load_explicit(&retired[seed / 7], memory_order_relaxed)) {
        long i = (long)(n % 1000) + seed;
        long want = (3 * i + i * i) + (3 * (i + 1) + (i + 1) * (i + 1));
        if (outer(i) != want) atomic_fetch_add(&errors, 1);
        n++;
        if ((n & 255) == 0) atomic_fetch_add(&iterations, 256);
        if (pace && n % pace == 0) usleep(1000);
    }
    return 0;
}

static void *short_lived(void *arg) {
    (void)arg;
    for (long i = 0; i < 1000; i++)
        if (outer(i) != (3 * i + i * i) + (3 * (i + 1) + (i + 1) * (i + 1))) atomic_fetch_add(&errors, 1);
    return 0;
}

static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + t.tv_nsec;
}

int main(int argc, char **argv) {
    pthread_t th[4];
    if (argc > 1) pace = atol(argv[1]);
    for (long k = 0; k < 4; k++) pthread_create(&th[k], 0, worker, (void *)(k * 7));
    setvbuf(stdout, 0, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    char line[64];
    unsigned long last_n = 0;
    unsigned long long last_t = now_ns();
    int running = 4;
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "rate", 4)) {
            unsigned long n = atomic_load(&iterations);
            unsigned long long t = now_ns();
            printf("rate %lu %llu\n", n - last_n, t - last_t);
            last_n = n;
            last_t = t;
        } else if (!strncmp(line, "spawn", 5)) {
            pthread_t s;
            pthread_create(&s, 0, short_lived, 0);
            pthread_join(s, 0);
            printf("spawned\n");
        } else if (!strncmp(line, "retire", 6) && running > 0) {
            running--;
            atomic_store(&retired[running], 1);
            pthread_join(th[running], 0);
            printf("retired %d\n", running);
        } else if (!strncmp(line, "quit", 4)) {
            break;
        }
    }
    atomic_store(&stop, 1);
    for (int k = 0; k < running; k++) pthread_join(th[k], 0);
    printf("ok iterations=%lu errors=%lu\n", atomic_load(&iterations), atomic_load(&errors));
    return atomic_load(&errors) ? 3 : 0;
}
