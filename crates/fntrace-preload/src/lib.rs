//! `libfntrace_preload.so`: the fntrace runtime for programs built with
//! compiler instrumentation (`gcc -pg`, `-pg -mfentry`,
//! `-finstrument-functions`, `rustc -Zinstrument-mcount`), injected with
//! `LD_PRELOAD` (what `fntrace record` does).
//!
//! Its definitions of `mcount`, `__fentry__` and `__cyg_profile_func_*`
//! take precedence over glibc's; recording starts from the environment
//! (`FNTRACE_OUTPUT` and friends) in the runtime's constructor; `dlopen`
//! is wrapped so modules loaded later are added to the trace's module map.

pub use fntrace_rt::calls::unwind::{
    _Unwind_Backtrace, _Unwind_ForcedUnwind, _Unwind_RaiseException, _Unwind_Resume,
    _Unwind_Resume_or_Rethrow, _Unwind_SetIP, backtrace,
};
pub use fntrace_rt::control::{fntrace_disable, fntrace_enable};
pub use fntrace_rt::hooks::tramp::{
    __cyg_profile_func_enter, __cyg_profile_func_exit, __fentry__, _mcount, mcount,
};
pub use fntrace_rt::markers::record::fntrace_record_marker;
pub use fntrace_rt::session::attach::fntrace_attach;
pub use fntrace_rt::session::dl::{dlclose, dlopen};
pub use fntrace_rt::session::exec::{
    _Exit, _exit, execl, execle, execlp, execv, execve, execvp, execvpe, fexecve,
};
pub use fntrace_rt::xray::api::{
    __xray_function_address, __xray_init, __xray_max_function_id, __xray_patch,
    __xray_patch_function, __xray_remove_handler, __xray_remove_handler_arg1, __xray_set_handler,
    __xray_set_handler_arg1, __xray_unpatch, __xray_unpatch_function,
};

/// Marks the process as having the preload runtime: a runtime linked into
/// the program without `compiler-hooks` leaves recording to it.
#[unsafe(no_mangle)]
#[used]
pub static fntrace_preload_marker: u8 = 1;
