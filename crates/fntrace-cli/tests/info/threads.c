/* Threads for tests/info.rs: three workers recurse deeply many times
 * (their streams span many chunks), one of them is still inside calls when
 * main returns (no exit recorded, calls without exit), and one is named. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) long down(int n) { return n == 0 ? 1 : 1 + down(n - 1); }

static void *worker(void *arg) {
    long s = 0;
    for (int i = 0; i < 20000; i++)
        s += down(20 + (int)(long)arg);
    return (void *)s;
}

__attribute__((noinline)) void forever(void) {
    for (;;)
        pause();
}

static void *stuck(void *arg) {
    (void)arg;
    down(5);
    forever();
    return NULL;
}

int main(void) {
    pthread_t t[3], s;
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    pthread_setname_np(t[1], "named-worker");
    pthread_create(&s, NULL, stuck, NULL);
    long sum = 0;
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (long)r;
    }
    usleep(20000);
    printf("%ld\n", sum);
    return 0;
}
