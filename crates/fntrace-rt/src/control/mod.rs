//! Control: switching traced functions on and off across every mechanism
//! that patches code (patchable entry sites and XRay sleds), from inside
//! the program (`fntrace::enable`/`disable`, the C API `fntrace_enable`/
//! `fntrace_disable`) or from `fntrace live` through the control socket
//! ([`socket`]). Above the mechanisms, below `session`.
//!
//! Without the `compiler-hooks` feature the code that patches is not in
//! this copy of the runtime: it is reached in the `LD_PRELOAD` library
//! through its C entry points, found with `dlsym`.

#[cfg(feature = "compiler-hooks")]
pub mod socket;

use std::path::PathBuf;

use crate::config::PatternError;
use crate::patch::PatchError;

/// Switches on (`on`) or off every function whose demangled name matches
/// `pattern` (a regular expression), in patchable entry sites and XRay
/// sleds, in every loaded object and in objects loaded later. Returns how
/// many functions changed.
pub fn switch_functions(pattern: &str, on: bool) -> Result<usize, PatchError> {
    regex_lite::Regex::new(pattern).map_err(|e| PatternError::new(pattern, &e))?;
    #[cfg(feature = "compiler-hooks")]
    {
        let n = crate::dynamic::switch_functions(pattern, on)?;
        Ok(n + crate::xray::api::patch_matching(pattern, on)?)
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
            return Err(PatchError::NoRuntime);
        }
        let c = std::ffi::CString::new(pattern)
            .map_err(|_| PatternError::new(pattern, &"contains NUL"))?;
        // SAFETY: the symbol is `fntrace_enable`/`fntrace_disable` of the
        // preload runtime, `extern "C" fn(*const c_char) -> c_long`.
        let f: extern "C" fn(*const libc::c_char) -> libc::c_long =
            unsafe { core::mem::transmute(f) };
        match f(c.as_ptr()) {
            n if n >= 0 => Ok(n as usize),
            -1 => Err(PatternError::new(pattern, &"rejected by the runtime").into()),
            _ => Err(PatchError::Failed),
        }
    }
}

/// The functions switched on, XRay sleds and patchable sites (name, or
/// the address if unnamed).
#[cfg(feature = "compiler-hooks")]
pub fn enabled_functions() -> Vec<String> {
    let mut v = crate::xray::patch::patched_functions();
    v.extend(crate::dynamic::enabled_functions());
    v
}

/// Shared body of the C entry points.
///
/// # Safety
/// `pattern` must be a NUL-terminated string.
#[cfg(feature = "compiler-hooks")]
unsafe fn c_switch(pattern: *const libc::c_char, on: bool) -> libc::c_long {
    if pattern.is_null() {
        return -1;
    }
    // SAFETY: the caller's contract.
    let Ok(p) = unsafe { std::ffi::CStr::from_ptr(pattern) }.to_str() else {
        return -1;
    };
    if regex_lite::Regex::new(p).is_err() {
        return -1;
    }
    // The patcher's own calls are never recorded (when the caller is not
    // already inside the runtime).
    let mut r = None;
    if !crate::recorder::guarded(|| r = Some(switch_functions(p, on))) {
        r = Some(switch_functions(p, on));
    }
    match r.unwrap_or(Ok(0)) {
        Ok(n) => n as libc::c_long,
        Err(e) => {
            crate::diag::diag!("fntrace: {e}");
            -2
        }
    }
}

/// C API: switches on the functions whose demangled name matches the
/// regular expression `pattern` (patchable sites and XRay sleds). Returns
/// how many functions changed, -1 for a bad pattern, -2 if patching
/// failed (the reason is printed on standard error).
///
/// # Safety
/// `pattern` must be a NUL-terminated string.
#[cfg(feature = "compiler-hooks")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_enable(pattern: *const libc::c_char) -> libc::c_long {
    // SAFETY: the caller's contract.
    unsafe { c_switch(pattern, true) }
}

/// C API: switches off the functions whose name matches `pattern`; the
/// same results as [`fntrace_enable`].
///
/// # Safety
/// `pattern` must be a NUL-terminated string.
#[cfg(feature = "compiler-hooks")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_disable(pattern: *const libc::c_char) -> libc::c_long {
    // SAFETY: the caller's contract.
    unsafe { c_switch(pattern, false) }
}

/// The pid and effective uid of the process at the other end of `s`
/// (`SO_PEERCRED`), as the kernel recorded them when it connected: what
/// the control socket, `fntrace live` and `fntrace record -p` check.
pub fn peer(s: &std::os::unix::net::UnixStream) -> Option<(i32, u32)> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of the size passed.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some((cred.pid, cred.uid))
}

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

/// The name of process `pid`'s control socket in the abstract namespace
/// (no file), used when the socket directory cannot be used: another user
/// created it first (it is in a world-writable directory), or it is not
/// private. Anyone may bind an abstract name, so both sides check the
/// other with `SO_PEERCRED`: the runtime the client's uid, the client the
/// server's pid and uid.
pub fn abstract_socket_name(pid: u32) -> String {
    format!("fntrace-control/{pid}")
}
