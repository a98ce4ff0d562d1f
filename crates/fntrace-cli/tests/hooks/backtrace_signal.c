#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unwind.h>
#define NI __attribute__((noinline, noipa))
static volatile int handled = 0;
NI int in_handler(int n) { return n < 2 ? n : in_handler(n - 1) + in_handler(n - 2); }
static void on_signal(int sig) { (void)sig; handled = in_handler(10); }
NI void show(void) {
    void *buf[64];
    int n = backtrace(buf, 64);
    char **names = backtrace_symbols(buf, n);
    for (int i = 0; i < n && i < 6; i++) {
        const char *s = strchr(names[i], '(');
        const char *e = s ? strchr(s, '+') : 0;
        if (s && e) printf("%.*s\n", (int)(e - s - 1), s + 1); else printf("?\n");
    }
}
static int walked;
NI _Unwind_Reason_Code count_frame(struct _Unwind_Context *c, void *a) {
    (void)a;
    if (_Unwind_GetIP(c) != 0) walked++;
    return _URC_NO_REASON;
}
NI int level(int n) { if (n == 0) { show(); raise(SIGUSR1); return handled; } return level(n - 1) + 1; }
int main(void) {
    signal(SIGUSR1, on_signal);
    printf("%d\n", level(3));
    return 0;
}
