// Calls made after main returns: an atexit handler and an ELF destructor
// (the main thread's TLS destructors run before them, inside exit), plus
// a constructor before main. Each calls helper once; main calls it once.
#include <stdio.h>
#include <stdlib.h>

#define NI __attribute__((noinline, noclone))

volatile int sink;
NI void helper(void) { sink++; }
NI void at_exit_fn(void) {
    helper();
    printf("atexit ran\n");
}
__attribute__((destructor)) NI void dtor(void) {
    helper();
    printf("dtor ran\n");
}
__attribute__((constructor)) NI void ctor(void) { helper(); }

int main(void) {
    atexit(at_exit_fn);
    helper();
    printf("main ran\n");
    return 0;
}
