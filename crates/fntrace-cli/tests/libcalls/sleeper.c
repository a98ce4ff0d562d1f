/* Off-CPU time (tests/libcalls.rs, record --sched): 3 threads each sleep
 * 50 ms 10 times inside nap(), which measures the wall time of its sleeps
 * itself and prints it with the thread id; spin() burns CPU without
 * sleeping. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

__attribute__((noinline)) long long nap(void) {
    long long t0 = now_ns();
    for (int i = 0; i < 10; i++) {
        struct timespec d = {0, 50 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
    return now_ns() - t0;
}

__attribute__((noinline)) unsigned long spin(void) {
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 20 * 1000 * 1000; i++)
        x += i;
    return x;
}

static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) void *sleeper(void *arg) {
    (void)arg;
    spin();
    long long slept = nap();
    pthread_mutex_lock(&out);
    printf("slept %ld %lld\n", (long)syscall(SYS_gettid), slept);
    pthread_mutex_unlock(&out);
    return NULL;
}

int main(void) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, sleeper, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    return 0;
}
