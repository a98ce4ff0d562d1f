/* How a process can end without an exit handler (tests/forkexec.rs):
 *   ends exec N  - calls work() N times, then (inside `outer`) execs
 *                  itself with "exit"
 *   ends exit N  - calls work() N times inside `outer`, returns normally
 *   ends _exit N - calls work() N times inside `outer`, then _exit(0) there
 *   ends child N - forks; the child calls work() N times and _exits, the
 *                  parent waits for it and returns
 * Prints how many work() calls this image made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) long work(long i) { return i * 3 + 1; }

__attribute__((noinline)) long loop(long n) {
    long s = 0;
    for (long i = 0; i < n; i++)
        s += work(i);
    return s;
}

__attribute__((noinline)) int outer(const char *how, long n, char *self) {
    if (!strcmp(how, "child")) {
        pid_t p = fork();
        if (p == 0) {
            sink = loop(n);
            printf("child %ld\n", n);
            fflush(stdout);
            _exit(0);
        }
        int st;
        waitpid(p, &st, 0);
        return 0;
    }
    sink = loop(n);
    printf("%s %ld\n", how, n);
    fflush(stdout);
    if (!strcmp(how, "exec"))
        execl(self, self, "exit", "7", (char *)0);
    if (!strcmp(how, "_exit"))
        _exit(0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    return outer(argv[1], atol(argv[2]), argv[0]);
}
