/* A dlopen'd instrumented library making library calls (tests/libcalls.rs). */
#include <string.h>

__attribute__((noinline)) size_t plugin_fill(char *buf, size_t n) {
    memset(buf, 'x', n);
    buf[n] = 0;
    return strlen(buf);
}
