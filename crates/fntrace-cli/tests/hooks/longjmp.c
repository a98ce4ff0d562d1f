#include <setjmp.h>
#include <stdio.h>
#define NI __attribute__((noinline, noipa))
static jmp_buf jb;
NI void deep(int n) { if (n == 0) longjmp(jb, 1); deep(n - 1); }
NI int work(int i) { if (setjmp(jb) == 0) deep(5); return i; }
NI int leaf(int i) { return i * 2; }
int main(void) {
    long sum = 0;
    for (int i = 0; i < 100; i++) sum += work(i) + leaf(i);
    printf("%ld\n", sum);
    return 0;
}
