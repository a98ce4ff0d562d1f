// A timer signal whose handler leaves with siglongjmp, landing while the
// program makes traced calls back to back: most signals interrupt the
// recorder itself (its `busy` flag set), and the jump abandons it. The
// thread must record on afterwards, with the tree intact:
//   main -> sigjump_loop -> busy (20) -> busy_inner -> leaf ...
//        -> after
// (the handler's own calls are dropped, and counted, when the signal
// landed inside the recorder).
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define NI __attribute__((noinline, noclone))

volatile long sink;
static sigjmp_buf jb;

NI long leaf(long x) {
    sink += x;
    return x + 1;
}
NI void handler(int s) {
    (void)s;
    leaf(1);
    siglongjmp(jb, 1);
}
NI void busy_inner(void) {
    for (;;) leaf(2);
}
NI void busy(void) { busy_inner(); }
NI int sigjump_loop(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGALRM, &sa, 0);
    int n = 0;
    while (n < 20) {
        if (sigsetjmp(jb, 1) == 0) {
            struct itimerval it = {{0, 0}, {0, 300}};
            setitimer(ITIMER_REAL, &it, 0);
            busy();
        } else {
            n++;
        }
    }
    return n;
}
NI int after(void) { return (int)leaf(3) > 0; }

int main(void) {
    int n = sigjump_loop();
    printf("jumps=%d after=%d\n", n, after());
    return 0;
}
