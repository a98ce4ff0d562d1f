/* Library functions taking every kind of argument register (tests/libcalls.rs,
 * built with -mavx): 6 integers, 8 doubles, a variadic call's vector count
 * (rax), and two 256-bit vectors. Not instrumented. */
#include <immintrin.h>
#include <stdarg.h>

double mix(long a, long b, long c, long d, long e, long f, double x0, double x1,
           double x2, double x3, double x4, double x5, double x6, double x7) {
    return a + 2 * b + 3 * c + 5 * d + 7 * e + 11 * f + x0 + 2 * x1 + 3 * x2 + 5 * x3 +
           7 * x4 + 11 * x5 + 13 * x6 + 17 * x7;
}

__m256d add4(__m256d a, __m256d b) { return _mm256_add_pd(a, _mm256_mul_pd(b, b)); }

double vsum(int n, ...) {
    va_list ap;
    va_start(ap, n);
    double s = 0;
    for (int i = 0; i < n; i++)
        s += va_arg(ap, double) * (i + 1);
    va_end(ap);
    return s;
}
