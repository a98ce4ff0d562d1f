// Two hot functions driven from standard input: each line "run" calls
// both 1,000 times and prints "ran SUM". Prints its pid first, so a test
// can point `fntrace live` at it.
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#define NI __attribute__((noinline, noipa))
NI unsigned long hot_a(unsigned long x) { return x * 3 + 1; }
NI unsigned long hot_b(unsigned long x) { return x ^ 0x55; }
int main(void) {
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "run", 3) != 0) continue;
        unsigned long s = 0;
        for (unsigned long i = 0; i < 1000; i++) s += hot_a(i) + hot_b(i);
        printf("ran %lu\n", s);
        fflush(stdout);
    }
    return 0;
}
