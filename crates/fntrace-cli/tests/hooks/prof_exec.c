/* Arms a 1 ms profiling timer (a -pg image has glibc's SIGPROF handler),
   then execs the program named by argv[1]: a -pg image survives (its
   start-up installs the handler again), any other image dies of SIGPROF
   once it has used a millisecond of CPU. */
#include <stdio.h>
#include <sys/time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        volatile unsigned long x = 0;
        for (unsigned long i = 0; i < 100000000UL; i++)
            x += i;
        printf("spun\n");
        return 0;
    }
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_PROF, &it, 0);
    execl(argv[1], argv[1], (char *)0);
    perror("execl");
    return 1;
}
