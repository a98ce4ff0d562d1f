//! Entry points for source-level instrumentation (`#[instrument_fn]`): the
//! per-function [`Site`] descriptor, the [`enter`] call that records an entry
//! and returns a [`Guard`] whose drop records the exit, and the per-poll
//! wrapper for `async fn`.

use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::AtomicU32;
use core::task::{Context, Poll};

use crate::recorder;

/// Describes one instrumented function. `#[instrument_fn]` puts one in a
/// `static` inside every instrumented function; its address is the key the
/// trace uses for the function.
#[derive(Debug)]
pub struct Site {
    pub(crate) name: &'static str,
    pub(crate) file: &'static str,
    pub(crate) line: u32,
    /// Session in which this site's description was written to the trace.
    pub(crate) registered: AtomicU32,
    /// `-F`/`-N` class of the site by its name (`u8::MAX`: not yet known).
    pub(crate) class: core::sync::atomic::AtomicU8,
}

impl Site {
    /// A site for the function `name` (its full path) defined at
    /// `file:line`.
    pub const fn new(name: &'static str, file: &'static str, line: u32) -> Site {
        Site {
            name,
            file,
            line,
            registered: AtomicU32::new(0),
            class: core::sync::atomic::AtomicU8::new(u8::MAX),
        }
    }

    /// The function's name as given to [`Site::new`].
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The key of this site in traces.
    #[inline(always)]
    pub fn key(&'static self) -> u64 {
        self as *const Site as u64
    }
}

/// Records the exit of an instrumented call when dropped (on return, `?`,
/// or unwinding).
#[must_use = "the guard records the exit when it is dropped"]
#[derive(Debug)]
pub struct Guard {
    /// What the exit must undo (the recorder's `G_*` bits).
    mode: u8,
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        if self.mode != 0 {
            recorder::site_exit(self.mode);
        }
    }
}

/// Records the entry of the function described by `site`.
///
/// When no recording is active this is one load and one well-predicted
/// branch, and the returned guard does nothing.
#[inline(always)]
pub fn enter(site: &'static Site) -> Guard {
    if !recorder::is_active() {
        return Guard { mode: 0 };
    }
    Guard {
        mode: recorder::record_site_entry(site, None),
    }
}

/// Like [`enter`], for a method whose `Self` type is only known at compile
/// time of the caller: `self_type` returns the type's name, used once, when
/// the site is first described in a trace.
#[inline(always)]
pub fn enter_method(site: &'static Site, self_type: fn() -> &'static str) -> Guard {
    if !recorder::is_active() {
        return Guard { mode: 0 };
    }
    Guard {
        mode: recorder::record_site_entry(site, Some(self_type)),
    }
}

/// A future that records one entry and one exit of its site around every
/// poll of the inner future (what `#[instrument_fn]` makes of an `async fn`).
#[derive(Debug)]
pub struct Instrumented<F> {
    site: &'static Site,
    inner: F,
}

/// Wraps the body of an `async fn`. `T` is the function's declared output
/// type, which lets the compiler infer the type of the `async` block.
pub fn instrument_future<T, F: Future<Output = T>>(
    site: &'static Site,
    inner: F,
) -> Instrumented<F> {
    Instrumented { site, inner }
}

impl<F: Future> Future for Instrumented<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: it is never moved out of
        // `self`, `Instrumented` has no `Drop` impl and does not implement
        // `Unpin` unless `F` does, so projecting the pin to it is sound.
        let (site, inner) = unsafe {
            let this = self.get_unchecked_mut();
            (this.site, Pin::new_unchecked(&mut this.inner))
        };
        let _guard = enter(site);
        inner.poll(cx)
    }
}

/// An entry of the `fntrace_off` table: the address of a function marked
/// `#[instrument_fn = "off"]`, which runtimes that patch code (XRay,
/// patchable entries) never patch.
#[repr(transparent)]
#[derive(Debug)]
pub struct OffEntry(pub *const ());

// SAFETY: the pointer is a function address, only ever read.
unsafe impl Sync for OffEntry {}
