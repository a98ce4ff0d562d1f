//! `dlopen`/`dlclose` interposition: modules loaded at run time are added
//! to the trace's module map (and their XRay sleds patched when recording)
//! as soon as they are loaded, so their addresses symbolise even if the
//! process later crashes; unloaded modules are forgotten by the XRay
//! runtime. Part of `session`: a process event fanned out to every
//! mechanism.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_CLOSE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// Interposed `dlopen`: loads, then describes the new modules.
///
/// # Safety
/// As for `dlopen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    let mut f = REAL.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: the name is NUL-terminated; dlsym is thread-safe.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()) };
        REAL.store(f, Ordering::Release);
    }
    if f.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: `f` is the next `dlopen`, with this signature; the caller's
    // arguments are passed on unchanged.
    let h = unsafe {
        let f: unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void = core::mem::transmute(f);
        f(file, mode)
    };
    if !h.is_null() {
        super::note_modules_changed();
    }
    h
}

/// Interposed `dlclose`: unloads, then forgets the XRay sleds of objects
/// that are gone (their code must never be patched again).
///
/// # Safety
/// As for `dlclose`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let mut f = REAL_CLOSE.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: the name is NUL-terminated; dlsym is thread-safe.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) };
        REAL_CLOSE.store(f, Ordering::Release);
    }
    if f.is_null() {
        return -1;
    }
    // SAFETY: `f` is the next `dlclose`, with this signature.
    let r = unsafe {
        let f: unsafe extern "C" fn(*mut c_void) -> c_int = core::mem::transmute(f);
        f(handle)
    };
    crate::xray::patch::scan();
    r
}
