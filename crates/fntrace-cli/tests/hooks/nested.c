// GNU C nested functions: they take a static chain in r10, which gcc
// saves around the profiling hook (`push %r10; call __fentry__; pop
// %r10`, or around the NOP of -mnop-mcount; with -fcf-protection the push
// comes before the endbr64). A hook that took the pushed r10 for the
// return address corrupted the static chain and the result.
//   main -> use_nested (5) -> add.0 (3 direct calls) -> leaf
//                          -> apply -> add.0 (4 calls through a pointer)
#include <stdio.h>

#define NI __attribute__((noinline, noclone))

volatile long sink;

NI long leaf(long x) {
    sink += x;
    return x + 1;
}

NI long apply(long (*f)(long), int n) {
    long s = 0;
    for (int i = 0; i < n; i++) s += f(i);
    return s;
}

NI long use_nested(long base) {
    NI long add(long v) { return leaf(v) + base; }
    long direct = 0;
    for (int i = 0; i < 3; i++) direct += add(i);
    return direct + apply(add, 4);
}

int main(void) {
    long r = 0;
    for (int k = 0; k < 5; k++) r += use_nested(10 * k);
    printf("%ld\n", r);
    return 0;
}
