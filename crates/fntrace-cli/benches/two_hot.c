// Two hot functions: hot_a(NA) and hot_b(NB), each a fib-shaped
// recursion (fib(n) makes 2*fib(n+1)-1 calls). Prints both results.
#include <stdio.h>
#include <stdlib.h>
#define NI __attribute__((noinline, noipa))
NI unsigned long hot_a(unsigned long n) { return n < 2 ? n : hot_a(n - 1) + hot_a(n - 2); }
NI unsigned long hot_b(unsigned long n) { return n < 2 ? n : hot_b(n - 1) + hot_b(n - 2); }
int main(int argc, char **argv) {
    unsigned long na = argc > 1 ? strtoul(argv[1], 0, 10) : 20;
    unsigned long nb = argc > 2 ? strtoul(argv[2], 0, 10) : 32;
    printf("%lu %lu\n", hot_a(na), hot_b(nb));
    return 0;
}
