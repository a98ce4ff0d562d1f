/* A -pg program with a thread forks; the child calls leaf() 3,000 times,
   then execs another -pg program (argv[1]), which calls other() 500 times. */
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#define NI __attribute__((noinline, noipa))
NI unsigned long fib(unsigned long n) { if (n < 2) return n; return fib(n - 1) + fib(n - 2); }
NI void *worker(void *arg) { return (void *)fib((unsigned long)arg); }
NI int leaf(int i) { return i * 3 + 1; }
int main(int argc, char **argv) {
    pthread_t t;
    pthread_create(&t, 0, worker, (void *)20);
    pid_t p = fork();
    if (p == 0) {
        volatile int s = 0;
        for (int i = 0; i < 3000; i++) s += leaf(i);
        printf("child %d\n", s);
        fflush(stdout);
        execl(argv[1], argv[1], (char *)0);
        _exit(127);
    }
    int st;
    waitpid(p, &st, 0);
    void *r;
    pthread_join(t, &r);
    printf("parent %lu %d\n", (unsigned long)r, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
