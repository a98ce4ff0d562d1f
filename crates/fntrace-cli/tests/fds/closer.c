/* A program that owns every descriptor number (tests/fds.rs): like a
 * daemon it closes every descriptor above stderr at start-up, then opens
 * files of its own (which get the lowest numbers) and dup2()s them onto
 * the high numbers a runtime would like to hide at (900 and up), makes
 * ~1.2 M function calls, and checks that its files hold exactly what it
 * wrote (tests/fds.rs checks them again after the exit). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define NFILES 4
#define NHIGH 16

static long calls;

__attribute__((noinline)) long fib(int n) {
    calls++;
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

int main(int argc, char **argv) {
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    long top = rl.rlim_cur > 65536 ? 65536 : (long)rl.rlim_cur;
    for (long fd = 3; fd < top; fd++)
        close((int)fd);
    int fds[NFILES];
    char name[64];
    for (int i = 0; i < NFILES; i++) {
        snprintf(name, sizeof name, "%s/own%d.txt", argv[1], i);
        fds[i] = open(name, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fds[i] < 0) {
            perror(name);
            return 2;
        }
        if (write(fds[i], "start\n", 6) != 6)
            return 3;
    }
    for (int i = 0; i < NHIGH; i++)
        dup2(fds[i % NFILES], 900 + i);
    long r = fib(argc > 2 ? atoi(argv[2]) : 27);
    for (int i = 0; i < NHIGH; i++)
        if (write(900 + i, "high\n", 5) != 5)
            return 4;
    int ok = 1;
    for (int i = 0; i < NFILES; i++) {
        struct stat st;
        fstat(fds[i], &st);
        /* "start\n" and NHIGH / NFILES times "high\n". */
        if (st.st_size != 6 + 5 * (NHIGH / NFILES))
            ok = 0;
    }
    printf("fib %ld calls %ld\nfiles %s\n", r, calls, ok ? "ok" : "CORRUPT");
    return 0;
}
