//! Switching traced functions on and off from inside the program
//! (`fntrace::enable` / `fntrace::disable`).
//!
//! The code that patches lives in the compiler-hooks runtime
//! ([`crate::dynamic`]): either linked into this program (feature
//! `compiler-hooks`) or injected as `libfntrace_preload.so`, in which case
//! it is reached through its C entry points `fntrace_enable` and
//! `fntrace_disable`, found with `dlsym`.
//!
//! Also where the control socket of a process is (shared by the runtime,
//! which listens, and `fntrace live`, which connects).

use std::path::PathBuf;

/// Switches on (`on`) or off every function whose demangled name matches
/// `pattern` (a regular expression), in patchable entry sites and XRay
/// sleds, in every loaded object and in objects loaded later. Returns how
/// many functions changed.
pub fn switch_functions(pattern: &str, on: bool) -> Result<usize, String> {
    regex_lite::Regex::new(pattern)
        .map_err(|e| format!("bad function pattern {pattern:?}: {e}"))?;
    #[cfg(feature = "compiler-hooks")]
    {
        crate::dynamic::switch_functions(pattern, on)
    }
    #[cfg(not(feature = "compiler-hooks"))]
    {
        let name: &[u8] = if on {
            b"fntrace_enable\0"
        } else {
            b"fntrace_disable\0"
        };
        // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the
        // global scope, where the preload library's exports are.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
        if f.is_null() {
            return Err("no fntrace patching runtime in this process: run it under \
                        `fntrace record`, or enable the `compiler-hooks` feature"
                .into());
        }
        let c = std::ffi::CString::new(pattern)
            .map_err(|_| format!("bad function pattern {pattern:?}: contains NUL"))?;
        // SAFETY: the symbol is `fntrace_enable`/`fntrace_disable` of the
        // preload runtime, `extern "C" fn(*const c_char) -> c_long`.
        let f: extern "C" fn(*const libc::c_char) -> libc::c_long =
            unsafe { core::mem::transmute(f) };
        match f(c.as_ptr()) {
            n if n >= 0 => Ok(n as usize),
            -1 => Err(format!("bad function pattern {pattern:?}")),
            _ => Err("patching failed (see the message on standard error)".into()),
        }
    }
}

/// Environment variable: `1` starts the control socket (what
/// `fntrace record` sets unless `--no-control`).
pub const ENV_CONTROL: &str = "FNTRACE_CONTROL";

/// The directory holding control sockets of this user's processes.
pub fn socket_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        if d.is_dir() {
            return d.join("fntrace");
        }
    }
    // SAFETY: geteuid cannot fail.
    PathBuf::from(format!("/tmp/fntrace-{}", unsafe { libc::geteuid() }))
}

/// The control socket of process `pid`.
pub fn socket_path(pid: u32) -> PathBuf {
    socket_dir().join(format!("{pid}.sock"))
}
