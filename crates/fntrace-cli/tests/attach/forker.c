/* A program that forks as fast as it can, for `fntrace record -p`: glibc's
 * fork() holds every malloc arena lock around its clone system call, and
 * an attach that borrows a thread stopped in there deadlocks the process.
 * A second thread (which makes malloc take its locks) answers on standard
 * input:
 *   "quit" -> stops the loop, prints "ok forks=N errors=E", exits with
 *             status 0 if every child exited with status 0 and every
 *             result of `step` was right, 3 otherwise.
 * With the argument "timer", a 1 kHz ITIMER_REAL whose handler does
 * nothing keeps sending the process signals. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int stop;
static atomic_ulong errors;

__attribute__((noinline)) long step(long i) { return i * 3 + 1; }

static void on_alarm(int sig) { (void)sig; }

static void *reader(void *arg) {
    (void)arg;
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        /* Some malloc traffic on this thread too. */
        char *p = malloc(100 + strlen(line));
        if (!p) atomic_fetch_add(&errors, 1);
        free(p);
        if (!strncmp(line, "quit", 4)) break;
    }
    atomic_store(&stop, 1);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "timer")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, 0);
        struct itimerval it = {{0, 1000}, {0, 1000}};
        setitimer(ITIMER_REAL, &it, 0);
    }
    pthread_t th;
    pthread_create(&th, 0, reader, 0);
    setvbuf(stdout, 0, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    unsigned long forks = 0;
    while (!atomic_load(&stop)) {
        void *p = malloc(64 + forks % 512);
        if (!p || step((long)forks) != (long)forks * 3 + 1) atomic_fetch_add(&errors, 1);
        pid_t c = fork();
        if (c == 0) _exit(0);
        free(p);
        if (c < 0) {
            atomic_fetch_add(&errors, 1);
            continue;
        }
        int st;
        pid_t r;
        do r = waitpid(c, &st, 0);
        while (r < 0 && errno == EINTR);
        if (r != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) atomic_fetch_add(&errors, 1);
        forks++;
    }
    pthread_join(th, 0);
    unsigned long e = atomic_load(&errors);
    printf("ok forks=%lu errors=%lu\n", forks, e);
    return e ? 3 : 0;
}
