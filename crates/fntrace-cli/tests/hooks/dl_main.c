#include <dlfcn.h>
#include <stdio.h>
#define NI __attribute__((noinline, noipa))
NI int local_fn(int x) { return x + 1; }
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
    int (*f)(int) = (int (*)(int))dlsym(h, "plugin_work");
    int s = 0;
    for (int i = 0; i < 10; i++) s += f(i) + local_fn(i);
    printf("%d\n", s);
    return 0;
}
