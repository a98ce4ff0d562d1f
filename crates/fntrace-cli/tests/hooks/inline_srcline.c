#include <stdio.h>
#include <stdlib.h>
#define NI __attribute__((noinline, noipa))
static inline __attribute__((always_inline)) int helper(int x) { return x * 3 + (x >> 2); }
NI int outer(int x) { return helper(x) + 1; }
int main(int argc, char **argv) { printf("%d\n", outer(atoi(argv[1]))); return 0; }
