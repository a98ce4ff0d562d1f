/* ucontext coroutines (tests/hooks.rs): a generator resumed 50 times from
 * a loop; a coroutine that suspends 40 calls deep; one that ends with
 * setcontext instead of returning; one suspended on the main thread and
 * resumed on another thread; one suspended and never resumed; and a
 * retry loop that goes back to a getcontext further up its own stack with
 * setcontext from two calls deep (as longjmp would). Every
 * function counts its calls; the program prints the counts and a checksum
 * of what the coroutines produced. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#define N_GEN 50
#define DEPTH 40
#define STACK (256 * 1024)

enum { C_MAIN, C_RUN_GEN, C_NEXT_VALUE, C_GEN_BODY, C_PRODUCE, C_YIELD_VALUE,
       C_RUN_DEEP, C_DEEP_BODY, C_DIVE, C_RUN_FIN, C_FIN_BODY, C_FINISH,
       C_RUN_ROAM, C_ROAM_BODY, C_HOP, C_CARRIER, C_RUN_STUCK, C_STUCK_BODY,
       C_STUCK, C_RUN_RETRY, C_FAIL_DEEP, C_FAIL_DEEPER, C_N };
static const char *names[C_N] = {
    "main", "run_gen", "next_value", "gen_body", "produce", "yield_value",
    "run_deep", "deep_body", "dive", "run_fin", "fin_body", "finish",
    "run_roam", "roam_body", "hop", "carrier", "run_stuck", "stuck_body",
    "stuck", "run_retry", "fail_deep", "fail_deeper"};
static unsigned long counts[C_N];
#define COUNT(c) __atomic_fetch_add(&counts[c], 1, __ATOMIC_RELAXED)

static ucontext_t caller_ctx, co_ctx, thread_ctx;
static long value, checksum;
static volatile long sink;

static char *new_stack(void) {
    char *s = malloc(STACK);
    if (!s) abort();
    return s;
}

static void start(ucontext_t *c, void (*fn)(void), ucontext_t *link) {
    getcontext(c);
    c->uc_stack.ss_sp = new_stack();
    c->uc_stack.ss_size = STACK;
    c->uc_link = link;
    makecontext(c, fn, 0);
}

/* The generator. */
__attribute__((noinline)) void yield_value(long v) {
    COUNT(C_YIELD_VALUE);
    value = v;
    swapcontext(&co_ctx, &caller_ctx);
}
__attribute__((noinline)) void produce(long i) {
    COUNT(C_PRODUCE);
    yield_value(i * i);
    checksum += i;
}
__attribute__((noinline)) void gen_body(void) {
    COUNT(C_GEN_BODY);
    for (long i = 0; i < N_GEN; i++) produce(i);
}
__attribute__((noinline)) long next_value(void) {
    COUNT(C_NEXT_VALUE);
    swapcontext(&caller_ctx, &co_ctx);
    return value;
}
__attribute__((noinline)) void run_gen(void) {
    COUNT(C_RUN_GEN);
    start(&co_ctx, gen_body, &caller_ctx);
    for (int i = 0; i < N_GEN; i++) checksum += next_value();
    /* The last resume runs gen_body to its end; uc_link comes back. */
    swapcontext(&caller_ctx, &co_ctx);
}

/* Suspended DEPTH calls deep, twice. */
__attribute__((noinline)) long dive(int n) {
    COUNT(C_DIVE);
    if (n == 0) {
        swapcontext(&co_ctx, &caller_ctx);
        swapcontext(&co_ctx, &caller_ctx);
        return 1;
    }
    long r = dive(n - 1);
    sink = r; /* no recursion turned into a loop */
    return r + 1;
}
__attribute__((noinline)) void deep_body(void) {
    COUNT(C_DEEP_BODY);
    checksum += dive(DEPTH);
}
__attribute__((noinline)) void run_deep(void) {
    COUNT(C_RUN_DEEP);
    start(&co_ctx, deep_body, &caller_ctx);
    for (int i = 0; i < 3; i++) swapcontext(&caller_ctx, &co_ctx);
}

/* Ends with setcontext. */
__attribute__((noinline)) void finish(void) {
    COUNT(C_FINISH);
    setcontext(&caller_ctx);
}
__attribute__((noinline)) void fin_body(void) {
    COUNT(C_FIN_BODY);
    checksum += 7;
    finish();
}
__attribute__((noinline)) void run_fin(void) {
    COUNT(C_RUN_FIN);
    start(&co_ctx, fin_body, NULL);
    swapcontext(&caller_ctx, &co_ctx);
}

/* Suspended on the main thread, resumed on another one. */
__attribute__((noinline)) void hop(void) {
    COUNT(C_HOP);
    swapcontext(&co_ctx, &thread_ctx);
}
__attribute__((noinline)) void roam_body(void) {
    COUNT(C_ROAM_BODY);
    for (int i = 0; i < 3; i++) {
        hop();
        checksum += 100;
    }
}
__attribute__((noinline)) void *carrier(void *arg) {
    (void)arg;
    COUNT(C_CARRIER);
    for (int i = 0; i < 3; i++) swapcontext(&thread_ctx, &co_ctx);
    return NULL;
}
__attribute__((noinline)) void run_roam(void) {
    COUNT(C_RUN_ROAM);
    /* The first hop switches back here (thread_ctx is saved by it). */
    start(&co_ctx, roam_body, &thread_ctx);
    swapcontext(&thread_ctx, &co_ctx);
    pthread_t t;
    pthread_create(&t, NULL, carrier, NULL);
    pthread_join(t, NULL);
}

/* Suspended for good. */
static ucontext_t stuck_ctx;
__attribute__((noinline)) void stuck(void) {
    COUNT(C_STUCK);
    swapcontext(&stuck_ctx, &caller_ctx);
    abort();
}
__attribute__((noinline)) void stuck_body(void) {
    COUNT(C_STUCK_BODY);
    stuck();
}
__attribute__((noinline)) void run_stuck(void) {
    COUNT(C_RUN_STUCK);
    start(&stuck_ctx, stuck_body, NULL);
    swapcontext(&caller_ctx, &stuck_ctx);
}

/* Back to a getcontext further up the same stack. */
static ucontext_t retry_ctx;
static volatile int tries;
__attribute__((noinline)) void fail_deeper(void) {
    COUNT(C_FAIL_DEEPER);
    setcontext(&retry_ctx);
}
__attribute__((noinline)) void fail_deep(void) {
    COUNT(C_FAIL_DEEP);
    fail_deeper();
}
__attribute__((noinline)) void run_retry(void) {
    COUNT(C_RUN_RETRY);
    tries = 0;
    getcontext(&retry_ctx);
    checksum += 1000;
    if (++tries < 4) fail_deep();
}

int main(void) {
    COUNT(C_MAIN);
    run_gen();
    run_deep();
    run_fin();
    run_roam();
    run_stuck();
    run_retry();
    printf("checksum %ld\n", checksum);
    for (int i = 0; i < C_N; i++) printf("%s %lu\n", names[i], counts[i]);
    return 0;
}
