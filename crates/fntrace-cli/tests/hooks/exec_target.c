/* The image fork_exec.c's child execs: other() 500 times. */
#include <stdio.h>
#define NI __attribute__((noinline, noipa))
NI int other(int i) { return i ^ 5; }
int main(void) {
    volatile int s = 0;
    for (int i = 0; i < 500; i++) s += other(i);
    printf("exec'd %d\n", s);
    return 0;
}
