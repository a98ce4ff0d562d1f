/* Calls vlib.so's functions many times (crossing many trace chunks) with
 * argument values that change every call, and prints a checksum: recorded
 * with --libcalls it must print what it prints untraced
 * (tests/libcalls.rs). Built with -mavx; with -DSSE_ONLY the 256-bit call is
 * left out (for the SSE save path, FNTRACE_VECTOR_WIDTH=sse). */
#include <immintrin.h>
#include <stdio.h>

double mix(long, long, long, long, long, long, double, double, double, double, double,
           double, double, double);
__m256d add4(__m256d, __m256d);
double vsum(int, ...);

__attribute__((noinline)) double round_trip(long i) {
    double d = (double)i;
    double s = mix(i, i + 1, i + 2, i + 3, i + 4, i + 5, d, d + .5, d + .25, d + .125,
                   d + 1, d + 2, d + 3, d + 4);
#ifndef SSE_ONLY
    __m256d v = add4(_mm256_set_pd(d, d + 1, d + 2, d + 3), _mm256_set_pd(1, 2, d, 4));
    double o[4];
    _mm256_storeu_pd(o, v);
    s += o[0] + 2 * o[1] + 3 * o[2] + 4 * o[3];
#endif
    s += vsum(3, d, d * 2, d * 3);
    return s;
}

int main(void) {
    double total = 0;
    for (long i = 0; i < 50000; i++)
        total += round_trip(i % 1000);
    printf("%.6f\n", total);
    return 0;
}
