/* Library calls through the PLT/GOT (tests/libcalls.rs): qsort with an
 * instrumented comparator (calls into the program from the library),
 * memcpy, and pthread_mutex_lock under contention from 4 threads. Prints
 * the numbers the test checks the trace against. With a second argument,
 * dlopens that plugin (plugin.c) and calls its plugin_fill 3 times. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64
#define THREADS 4
#define ROUNDS 200

static int cmp_calls;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long counter;

__attribute__((noinline)) int compare_ints(const void *a, const void *b) {
    cmp_calls++;
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) void sort_numbers(int *v) {
    qsort(v, N, sizeof v[0], compare_ints);
}

__attribute__((noinline)) void copy_block(char *dst, const char *src, size_t n) {
    memcpy(dst, src, n);
}

__attribute__((noinline)) void bump(void) {
    pthread_mutex_lock(&lock);
    long c = counter;
    for (volatile int i = 0; i < 200; i++) {
    }
    counter = c + 1;
    pthread_mutex_unlock(&lock);
}

__attribute__((noinline)) void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++)
        bump();
    return NULL;
}

int main(int argc, char **argv) {
    int copies = argc > 1 ? atoi(argv[1]) : 10;
    int v[N];
    for (int i = 0; i < N; i++)
        v[i] = (i * 7919) % 101;
    sort_numbers(v);
    static char a[4096], b[4096];
    for (int i = 0; i < copies; i++)
        copy_block(b, a, sizeof a);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    if (argc > 2) {
        void *h = dlopen(argv[2], RTLD_NOW);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        size_t (*fill)(char *, size_t) = (size_t (*)(char *, size_t))dlsym(h, "plugin_fill");
        size_t total = 0;
        for (int i = 0; i < 3; i++)
            total += fill(b, 100 + i);
        printf("plugin %zu\n", total);
    }
    printf("cmp %d counter %ld sorted %d\n", cmp_calls, counter, v[0] <= v[N - 1]);
    return 0;
}
