#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <signal.h>
#include <sys/time.h>
#define NI __attribute__((noinline, noipa))
NI unsigned long fib(unsigned long n) { if (n < 2) return n; return fib(n - 1) + fib(n - 2); }
NI void *worker(void *arg) { return (void *)fib((unsigned long)arg); }
NI unsigned long rec(unsigned long n) { if (n == 0) return 0; return rec(n - 1) + 1; }
NI void *deep_worker(void *arg) { return (void *)rec((unsigned long)arg); }
NI int in_child(void) { return (int)fib(10); }
int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "threads";
    if (mode[0] == 't') {
        pthread_t t[8];
        for (long i = 0; i < 8; i++) pthread_create(&t[i], 0, worker, (void *)15);
        unsigned long sum = 0;
        for (int i = 0; i < 8; i++) { void *r; pthread_join(t[i], &r); sum += (unsigned long)r; }
        printf("%lu\n", sum);
    } else if (mode[0] == 'f') {
        pid_t p = fork();
        if (p == 0) { printf("child %d\n", in_child()); fflush(stdout); _exit(0); }
        int st; waitpid(p, &st, 0);
        printf("parent %lu\n", fib(12));
    } else if (mode[0] == 'e') {
        printf("before exec %lu\n", fib(5));
        fflush(stdout);
        execl(argv[0], argv[0], "x", (char *)0);
        return 1;
    } else if (mode[0] == 'p') {
        /* exec with a fast profiling timer (a -pg image's, 1 ms instead of
           10 ms): the new image must not die of SIGPROF before glibc
           installs its handler again. */
        struct sigaction sa;
        sigaction(SIGPROF, 0, &sa);
        if (sa.sa_handler != SIG_DFL) {
            struct itimerval it = {{0, 1000}, {0, 1000}};
            setitimer(ITIMER_PROF, &it, 0);
        }
        printf("before exec %lu\n", fib(5));
        fflush(stdout);
        execl(argv[0], argv[0], "x", (char *)0);
        return 1;
    } else if (mode[0] == 'x') {
        printf("after exec %lu\n", fib(8));
    } else {
        /* deep: 100000 on the main stack, then 300000 on a big thread stack */
        printf("%lu\n", rec(100000));
        pthread_attr_t a; pthread_attr_init(&a); pthread_attr_setstacksize(&a, 256UL << 20);
        pthread_t t; void *r;
        pthread_create(&t, &a, deep_worker, (void *)300000); pthread_join(t, &r);
        printf("%lu\n", (unsigned long)r);
    }
    return 0;
}
