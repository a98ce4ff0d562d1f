/* Thread ends (tests/hooks.rs): N (argument, default 2000) short-lived
 * threads one after
 * another, each calling leaf() and leaving a pthread key value whose
 * destructor calls cleanup_item() 3 times. Prints the calls it made and
 * how much the process's address space grew (kB) from the 100th thread to
 * the last. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_key_t key;
static volatile long sink;
static long counts[4];
#define COUNT(i) __atomic_fetch_add(&counts[i], 1, __ATOMIC_RELAXED)

__attribute__((noinline)) void cleanup_item(int i) { COUNT(0); sink += i; }
__attribute__((noinline)) void dtor(void *p) {
    (void)p;
    COUNT(1);
    for (int i = 0; i < 3; i++) cleanup_item(i);
}
__attribute__((noinline)) void leaf(void) { COUNT(2); sink++; }
__attribute__((noinline)) void *worker(void *a) {
    (void)a;
    COUNT(3);
    pthread_setspecific(key, (void *)1);
    leaf();
    return NULL;
}

static long vm_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmSize:", 7)) sscanf(line + 7, "%ld", &kb);
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    pthread_key_create(&key, dtor);
    long at100 = 0;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, NULL);
        pthread_join(t, NULL);
        if (i == 99) at100 = vm_kb();
    }
    printf("cleanup_item %ld\ndtor %ld\nleaf %ld\nworker %ld\n", counts[0], counts[1], counts[2],
           counts[3]);
    fprintf(stderr, "grew %ld\n", vm_kb() - at100);
    return 0;
}
