/* Linked into the suite's XRay builds (C and Rust) with -Wl,--wrap=main.
 * compiler-rt's FDR mode records nothing when it is only selected from
 * the environment (XRAY_OPTIONS="patch_premain=true xray_mode=xray-fdr"):
 * the handler runs, takes its timestamps, and returns because the mode was
 * never initialised; and nothing is flushed at exit. A program that uses
 * FDR initialises and flushes it itself, as done here when BENCH_XRAY_FDR
 * is set (before main, after compiler-rt's own initialisers, which is why
 * this wraps main rather than being a constructor). Otherwise main runs
 * untouched. */
#include <stdio.h>
#include <stdlib.h>

extern int __xray_log_init_mode(const char *mode, const char *config);
extern int __xray_log_finalize(void);
extern int __xray_log_flushLog(void);
extern int __xray_patch(void);
extern int __real_main(int, char **, char **);

__attribute__((xray_never_instrument)) static void bench_fdr_flush(void) {
    __xray_log_finalize();
    __xray_log_flushLog();
}

__attribute__((xray_never_instrument)) int __wrap_main(int argc, char **argv, char **envp) {
    if (getenv("BENCH_XRAY_FDR")) {
        /* 2 = XRAY_LOG_INITIALIZED, 1 = SUCCESS */
        if (__xray_log_init_mode("xray-fdr", "func_duration_threshold_us=0") != 2 ||
            __xray_patch() != 1) {
            fprintf(stderr, "xray_fdr_main: FDR initialisation failed\n");
            return 99;
        }
        atexit(bench_fdr_flush);
    }
    return __real_main(argc, argv, envp);
}
