/* -F/-N regions: `sel` (selected with -F) and `skip` (excluded with -N)
 * call the same functions (`mid`, `leaf`, the recursive `rec`) that
 * `main` calls outside them, so a filter that decides a call by its
 * function alone, or a region counter that goes wrong, shows in the call
 * graph. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int mid(int x) { return leaf(x) + leaf(x + 1); }
/* Not pure (a compiler would call a pure rec(3) once, out of the loop). */
static volatile int depth_seen;
__attribute__((noinline)) int rec(int n) {
    depth_seen = n;
    return n == 0 ? mid(n) : rec(n - 1) + 1;
}
__attribute__((noinline)) int skip(int x) { return mid(x) + rec(1); }
__attribute__((noinline)) int sel(int x) { return mid(x) + skip(x) + rec(2); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    long s = 0;
    for (int i = 0; i < n; i++) s += mid(i) + rec(3) + sel(i) + skip(i);
    printf("%ld\n", s);
    return 0;
}
