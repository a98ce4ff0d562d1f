// 4 threads call patchable functions in a loop while the main thread
// switches them on and off 10,000 times through the runtime's C API
// (`fntrace_enable` / `fntrace_disable`, found with dlsym).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#define NI __attribute__((noinline, noipa))
static atomic_int stop;
static volatile unsigned long twelve = 12;
NI unsigned long fib(unsigned long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
NI unsigned long work(unsigned long n) { return fib(n) + 1; }
NI void *worker(void *a) {
    (void)a;
    unsigned long s = 0, rounds = 0;
    while (!atomic_load(&stop)) { s += work(twelve); rounds++; }
    return (void *)(s == rounds * 145 ? 1UL : 0UL);
}
int main(void) {
    long (*en)(const char *) = (long (*)(const char *))dlsym(RTLD_DEFAULT, "fntrace_enable");
    long (*dis)(const char *) = (long (*)(const char *))dlsym(RTLD_DEFAULT, "fntrace_disable");
    if (!en || !dis) { printf("no fntrace runtime\n"); return 1; }
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, worker, 0);
    int ok = 1;
    for (int i = 0; i < 10000; i++) {
        if (dis("^(fib|work)$") != 2) ok = 0;
        if (en("^(fib|work)$") != 2) ok = 0;
    }
    atomic_store(&stop, 1);
    unsigned long good = 0;
    for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); good += (unsigned long)r; }
    printf("switching ok %d, workers ok %lu\n", ok, good);
    return 0;
}
