#include <cstdio>
#include <stdexcept>
#define NI __attribute__((noinline, noipa))
struct Guard { int *p; ~Guard() { ++*p; } };
static int dtors = 0;
NI int thrower(int n) {
    Guard g{&dtors};
    if (n == 0) throw std::runtime_error("boom");
    return thrower(n - 1) + 1;
}
NI int catcher(int i) {
    try { return thrower(3); } catch (const std::exception &) { return i; }
}
NI int after(int i) { return i + 1; }
int main() {
    long sum = 0;
    for (int i = 0; i < 100; i++) sum += catcher(i) + after(i);
    std::printf("%ld %d\n", sum, dtors);
    return 0;
}
