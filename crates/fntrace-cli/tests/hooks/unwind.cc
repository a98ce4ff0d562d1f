// Frames left by exceptions, longjmp and signal handlers, on several
// threads. Each worker thread runs ROUNDS rounds of:
//   process -> measure -> validate, which throws every third round, caught
//     in worker (the issue #19 program);
//   rethrow_top -> rethrow_mid -> rethrow_it: std::rethrow_exception,
//     caught in worker;
//   fut_wait: std::async(fut_a -> fut_b -> fut_c, which throws) on another
//     thread, future::get rethrows in fut_wait, which catches (every
//     fifth round);
//   quick_catch -> quick_throw, twice from one call site: caught in
//     quick_catch, which returns at once (a 100 ms sleep follows in the
//     first round, untraced);
//   lj_top (setjmp) -> lj_a -> lj_b -> lj_c: longjmp back to lj_top,
//     which calls lj_after;
//   sig_top (catches) -> sig_poke -> raise: the handler on_throw runs on
//     the thread's sigaltstack, calls sig_a -> sig_b, which throws; then
//     sig_top calls sig_after;
//   quiet_top -> quiet_poke -> raise: on_quiet -> quiet_leaf, returns;
//   sj_top (sigsetjmp) -> sj_poke -> raise: on_jump -> sj_a -> sj_b,
//     siglongjmp back to sj_top, which calls sj_after.
// Half of the workers run on a stack in .bss with their alternate signal
// stack from mmap (above the thread's stack), the other half the other way
// round (a stack from mmap, the alternate stack in .bss, below it). Workers
// 2 and 3 set their alternate stack with SS_AUTODISARM (the kernel reports
// it disabled while a handler runs on it; a handler left by an exception
// or siglongjmp leaves it disarmed, so they set it again every round).
#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <pthread.h>
#include <stdexcept>
#include <sys/mman.h>
#include <unistd.h>

#ifndef SS_AUTODISARM
#define SS_AUTODISARM (1U << 31)
#endif

#define NI __attribute__((noinline, used)) __attribute__((NOIPA))
#ifdef __clang__
#define NOIPA optnone
#else
#define NOIPA noipa
#endif

// glibc declares raise noexcept in C++: a handler that throws must be
// raised through a pointer of a type that may throw.
static int (*volatile raise_may_throw)(int) = raise;

static const int ROUNDS = 30;
static const int WORKERS = 4;
static const size_t STACK = 1 << 20;

struct Bad : std::runtime_error {
    Bad() : std::runtime_error("bad") {}
};

NI int validate(int i) {
    if (i % 3 == 0) throw Bad();
    return i;
}
NI int measure(int i) { return validate(i) + 1; }
NI int process(int i) { return measure(i) + 1; }

NI int rethrow_it(std::exception_ptr p) {
    std::rethrow_exception(p);
    return 0;
}
NI int rethrow_mid(std::exception_ptr p) { return rethrow_it(p) + 1; }
NI int rethrow_top(std::exception_ptr p) { return rethrow_mid(p) + 1; }

NI int fut_c(int i) {
    if (i >= 0) throw Bad();
    return i;
}
NI int fut_b(int i) { return fut_c(i) + 1; }
NI int fut_a(int i) { return fut_b(i) + 1; }
NI int fut_wait(int i) {
    auto f = std::async(std::launch::async, fut_a, i);
    try {
        return f.get();
    } catch (const Bad &) {
        return -1;
    }
}

NI int quick_throw(int i) {
    if (i >= 0) throw i;
    return i;
}
// Catches and returns without another traced call (an int has no
// destructor to call).
NI int quick_catch(int i) {
    try {
        return quick_throw(i);
    } catch (int) {
        return 2;
    }
}

static thread_local jmp_buf lj_buf;
NI void lj_c(int i) { longjmp(lj_buf, i + 1); }
NI void lj_b(int i) { lj_c(i); }
NI void lj_a(int i) { lj_b(i); }
NI int lj_after(int i) { return i & 1; }
NI int lj_top(int i) {
    if (setjmp(lj_buf) == 0) {
        lj_a(i);
        return 0;
    }
    return lj_after(i) + 1;
}

NI int sig_b(int i) {
    if (i >= 0) throw Bad();
    return i;
}
NI int sig_a(int i) { return sig_b(i) + 1; }
NI void on_throw(int sig) { sig_a(sig); }
NI void sig_poke() { raise_may_throw(SIGUSR1); }
NI int sig_after(int i) { return i & 1; }
NI int sig_top() {
    try {
        sig_poke();
        return 0;
    } catch (const Bad &) {
    }
    return sig_after(3);
}

static thread_local volatile int quiet_calls;
NI void quiet_leaf(int sig) { quiet_calls = quiet_calls + sig; }
NI void on_quiet(int sig) { quiet_leaf(sig); }
NI void quiet_poke() { raise(SIGUSR2); }
NI int quiet_top() {
    quiet_poke();
    return 1;
}

static thread_local sigjmp_buf sj_buf;
NI void sj_b(int sig) { siglongjmp(sj_buf, sig); }
NI void sj_a(int sig) { sj_b(sig); }
NI void on_jump(int sig) { sj_a(sig); }
NI void sj_poke() { raise_may_throw(SIGALRM); }
NI int sj_after(int i) { return i & 1; }
NI int sj_top() {
    if (sigsetjmp(sj_buf, 1) == 0) {
        sj_poke();
        return 0;
    }
    return sj_after(3);
}

static char bss_stacks[WORKERS][STACK] __attribute__((aligned(4096)));

struct Job {
    int index;
    long result;
};

NI long worker(Job *job) {
    // The alternate stack: in .bss when the thread's stack is from mmap,
    // from mmap when it is in .bss.
    stack_t ss;
    std::memset(&ss, 0, sizeof ss);
    ss.ss_size = STACK;
    if (job->index % 2 == 0)
        ss.ss_sp = bss_stacks[job->index];
    else
        ss.ss_sp = mmap(nullptr, STACK, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (job->index >= 2) ss.ss_flags = SS_AUTODISARM;
    if (ss.ss_sp == MAP_FAILED || sigaltstack(&ss, nullptr) != 0) {
        std::perror("sigaltstack");
        return -1000000;
    }
    long s = 0;
    std::exception_ptr p = std::make_exception_ptr(Bad());
    for (int i = 0; i < ROUNDS; i++) {
        if (job->index >= 2 && sigaltstack(&ss, nullptr) != 0) {
            std::perror("sigaltstack");
            return -1000000;
        }
        try {
            s += process(i);
        } catch (const Bad &) {
            s -= 1;
        }
        try {
            s += rethrow_top(p);
        } catch (const Bad &) {
            s -= 2;
        }
        if (i % 5 == 0) s += fut_wait(i);
        for (int k = 0; k < 2; k++) s += quick_catch(i);
        if (i == 0) usleep(100000);
        s += lj_top(i);
        s += sig_top();
        s += quiet_top();
        s += sj_top();
    }
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
    return s;
}

static void *start(void *arg) {
    Job *job = static_cast<Job *>(arg);
    job->result = worker(job);
    return nullptr;
}

int main() {
    struct {
        int sig;
        void (*handler)(int);
    } handlers[] = {{SIGUSR1, on_throw}, {SIGUSR2, on_quiet}, {SIGALRM, on_jump}};
    for (auto &h : handlers) {
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_handler = h.handler;
        sa.sa_flags = SA_ONSTACK | SA_NODEFER;
        sigaction(h.sig, &sa, nullptr);
    }
    pthread_t t[WORKERS];
    Job jobs[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        jobs[w] = {w, 0};
        pthread_attr_t a;
        pthread_attr_init(&a);
        // Odd workers run on a stack in .bss (below the mmap area).
        if (w % 2 == 1) pthread_attr_setstack(&a, bss_stacks[w], STACK);
        pthread_create(&t[w], &a, start, &jobs[w]);
        pthread_attr_destroy(&a);
    }
    long total = 0;
    for (int w = 0; w < WORKERS; w++) {
        pthread_join(t[w], nullptr);
        total += jobs[w].result;
    }
    std::printf("%ld\n", total);
    return 0;
}
