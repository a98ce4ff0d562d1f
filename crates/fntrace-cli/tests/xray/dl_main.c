// Loads an XRay-instrumented plugin, unloads it, and loads it again.
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int s = 0;
    for (int round = 0; round < 2; round++) {
        void *h = dlopen(argv[1], RTLD_NOW);
        if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
        int (*f)(int) = (int (*)(int))dlsym(h, "plugin_work");
        for (int i = 0; i < 10; i++) s += f(i);
        dlclose(h);
    }
    printf("%d\n", s);
    return 0;
}
