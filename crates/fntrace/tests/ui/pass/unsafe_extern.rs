//! `unsafe fn`, `extern "C" fn` (also as function pointers and exported with
//! `#[unsafe(no_mangle)]`), `unsafe extern "C" fn`, and in an instrumented
//! module next to an `extern` block, which is left alone.
#![deny(warnings)]

#[path = "../support.rs"]
mod support;

/// # Safety
/// `p` must be valid for reads.
#[fntrace::instrument_fn]
unsafe fn read(p: *const u32) -> u32 {
    // SAFETY: the caller promises `p` is valid.
    unsafe { *p }
}

#[fntrace::instrument_fn]
extern "C" fn add(a: i32, b: i32) -> i32 {
    a + b
}

/// # Safety
/// `p` must be valid for writes.
#[fntrace::instrument_fn]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_ui_store(p: *mut u32, v: u32) {
    // SAFETY: the caller promises `p` is valid.
    unsafe { p.write(v) }
}

#[fntrace::instrument_fn]
mod ffi {
    unsafe extern "C" {
        pub safe fn abs(x: i32) -> i32;
        pub fn strlen(s: *const std::ffi::c_char) -> usize;
    }

    pub extern "C" fn twice(x: i32) -> i32 {
        abs(x) * 2
    }

    /// # Safety
    /// `s` must be a valid C string.
    pub unsafe fn len(s: &std::ffi::CStr) -> usize {
        // SAFETY: `CStr` is NUL-terminated.
        unsafe { strlen(s.as_ptr()) }
    }
}

fn main() {
    let x = 41u32;
    // SAFETY: `&x` is valid.
    assert_eq!(support::traced(|| unsafe { read(&x) }), 41);
    assert_eq!(support::traced(|| add(2, 3)), 5);
    let f: extern "C" fn(i32, i32) -> i32 = add;
    assert_eq!(f(-1, 1), 0);
    let mut y = 0u32;
    // SAFETY: `&mut y` is valid.
    support::traced(|| unsafe { fntrace_ui_store(&mut y, 9) });
    assert_eq!(y, 9);
    let g: unsafe extern "C" fn(*mut u32, u32) = fntrace_ui_store;
    // SAFETY: `&mut y` is valid.
    unsafe { g(&mut y, 10) };
    assert_eq!(y, 10);
    assert_eq!(support::traced(|| ffi::twice(-4)), 8);
    // The foreign function itself is not instrumented.
    assert_eq!(support::untraced(|| ffi::abs(-3)), 3);
    // SAFETY: a literal C string.
    assert_eq!(unsafe { ffi::len(c"four") }, 4);
}
