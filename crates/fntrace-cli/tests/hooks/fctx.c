/* Coroutines switched by hand-written assembly (as Boost.Context's
 * jump_fcontext does), not by swapcontext (tests/hooks.rs): a generator
 * resumed 20 times, driven by the main thread with its stack on the heap
 * (below the main thread's stack), then driven by a second thread with its
 * stack on the main thread's stack (above the driving thread's stack). The
 * program prints what the generator produced. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* ctx_switch(&save, to): saves the callee-saved registers and the stack
 * pointer into *save, then continues the context whose stack pointer is
 * `to`. */
__asm__(".text\n"
        ".globl ctx_switch\n"
        ".type ctx_switch,@function\n"
        "ctx_switch:\n"
        "  push %rbp\n  push %rbx\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
        "  mov %rsp, (%rdi)\n"
        "  mov %rsi, %rsp\n"
        "  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbx\n  pop %rbp\n"
        "  ret\n"
        ".size ctx_switch, .-ctx_switch\n");
void ctx_switch(void **save, void *to);

#define ROUNDS 20
static void *driver_sp, *co_sp;
static long value;

__attribute__((noinline)) void yield_value(long v) {
    value = v;
    ctx_switch(&co_sp, driver_sp);
}
__attribute__((noinline)) void produce(long i) { yield_value(i * 3 + 1); }
__attribute__((noinline)) void gen_body(void) {
    for (long i = 0;; i++) produce(i);
}
__attribute__((noinline)) void co_start(void) { gen_body(); }

/* A fresh context on the stack [lo, lo + size) that starts in co_start. */
static void make(char *lo, size_t size) {
    unsigned long top = ((unsigned long)lo + size) & ~15ul;
    void **sp = (void **)top;
    *--sp = 0;              /* co_start's return address (never used) */
    *--sp = (void *)co_start;
    for (int i = 0; i < 6; i++) *--sp = 0;
    co_sp = sp;
}

__attribute__((noinline)) long next_value(void) {
    ctx_switch(&driver_sp, co_sp);
    return value;
}
__attribute__((noinline)) long drive(void) {
    long sum = 0;
    for (int i = 0; i < ROUNDS; i++) sum += next_value();
    return sum;
}

static char *thread_stack;
static void *on_thread(void *arg) {
    (void)arg;
    make(thread_stack, 128 * 1024);
    printf("thread %ld\n", drive());
    return NULL;
}

int main(void) {
    char *heap = malloc(256 * 1024);
    make(heap, 256 * 1024);
    printf("main %ld\n", drive());
    char here[160 * 1024];
    thread_stack = here;
    pthread_t t;
    pthread_create(&t, NULL, on_thread, NULL);
    pthread_join(t, NULL);
    return 0;
}
