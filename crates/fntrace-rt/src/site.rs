//! Entry points for source-level instrumentation (`#[instrument_fn]`): the
//! per-function [`Site`] descriptor, the [`enter`] call that records an entry
//! and returns a [`Guard`] whose drop records the exit, and the per-poll
//! wrapper for `async fn`. A mechanism: it records through the event sink
//! (`recorder`) under the filter policy (`filter`), and imports no other
//! mechanism.

use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::AtomicU32;
use core::task::{Context, Poll};

use core::sync::atomic::{Ordering, compiler_fence};

use fntrace_format::event::Framed;

use crate::features::{self, FEAT_DEPTH, FEAT_FILTERS};
use crate::filter;
use crate::recorder::{self, SESSION, ThreadState, state};

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
            site_exit(self.mode);
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
        mode: record_site_entry(site, None),
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
        mode: record_site_entry(site, Some(self_type)),
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

/// An entry of the `fntrace_policy` table: what `#[instrument_fn(...)]`
/// decided for one function, per framework, and its per-function options.
/// The macro writes one for every function it can name from inside the
/// function's body (free functions, methods of non-generic impls; not
/// generic or `async` functions, nor trait default methods) whose policy
/// is not the default, and for every such function inside an instrumented
/// container. Runtimes and `fntrace functions` read the table; its layout
/// is described in [`crate::procinfo::policy`].
#[repr(C)]
#[derive(Debug)]
pub struct PolicyEntry {
    func: *const (),
    name: *const u8,
    name_len: usize,
    magic: u32,
    flags: u32,
    threshold_ns: u64,
    capture: u32,
    reserved: u32,
}

// SAFETY: the pointers are a function address and a static string, only
// ever read.
unsafe impl Sync for PolicyEntry {}

impl PolicyEntry {
    /// The entry of function `func` named `name` (its path): `flags` (see
    /// [`crate::procinfo::policy`]), `capture` (bits 0–5: arguments 1–6, `0x80`: the return
    /// value), `threshold_ns` (0: none).
    pub const fn new(
        func: *const (),
        name: &'static str,
        flags: u32,
        capture: u32,
        threshold_ns: u64,
    ) -> PolicyEntry {
        PolicyEntry {
            func,
            name: name.as_ptr(),
            name_len: name.len(),
            magic: crate::procinfo::policy::MAGIC,
            flags,
            threshold_ns,
            capture,
            reserved: 0,
        }
    }
}

/// What a source-instrumented call must undo at its exit (a bit set).
pub(crate) const G_RECORDED: u8 = 1;
/// The call opened a `-F` region.
pub(crate) const G_TRACE: u8 = 2;
/// The call opened a `-N` region.
pub(crate) const G_NOTRACE: u8 = 4;

/// Records the entry of a source-instrumented function; returns what its
/// exit must undo (`G_*` bits; 0: nothing was recorded).
#[inline]
pub(crate) fn record_site_entry(
    site: &'static Site,
    self_type: Option<fn() -> &'static str>,
) -> u8 {
    let t = state();
    let sid = SESSION.load(Ordering::Relaxed);
    // A thread that never attached has session 0, like "no session".
    if t.session != sid || sid == 0 || t.busy {
        return entry_slow(t, site, self_type);
    }
    let feat = features::features();
    t.busy = true;
    compiler_fence(Ordering::SeqCst);
    if site.registered.load(Ordering::Relaxed) != sid {
        register_site(t, site, self_type, sid);
    }
    let mode = if feat == 0 {
        recorder::record_entry_inner(t, site.key());
        G_RECORDED
    } else {
        site_entry_filtered(t, site, feat)
    };
    compiler_fence(Ordering::SeqCst);
    t.busy = false;
    mode
}

/// A site entry while `-F`/`-N`/`--depth` are in force: the same region
/// rules as for compiler hooks, the site classified by its name once.
#[cold]
#[inline(never)]
fn site_entry_filtered(t: &mut ThreadState, site: &'static Site, feat: u32) -> u8 {
    let class = if feat & FEAT_FILTERS != 0 {
        filter::site_class(site.name, &site.class)
    } else {
        filter::NORMAL
    };
    let inside = !filter::has_trace_filters() || t.trace_regions > 0 || class == filter::TRACE;
    let record = inside
        && t.notrace_regions == 0
        && class != filter::NOTRACE
        && (feat & FEAT_DEPTH == 0 || filter::depth_ok(recorder::open_depth(t)));
    let mut mode = 0;
    if record {
        recorder::record_entry_inner(t, site.key());
        mode |= G_RECORDED;
    }
    if class == filter::TRACE {
        t.trace_regions += 1;
        mode |= G_TRACE;
    }
    if class == filter::NOTRACE {
        t.notrace_regions += 1;
        mode |= G_NOTRACE;
    }
    mode
}

/// The exit of a source-instrumented call whose entry returned `mode`.
#[inline]
pub(crate) fn site_exit(mode: u8) {
    if mode & (G_TRACE | G_NOTRACE) != 0 {
        let t = state();
        if mode & G_TRACE != 0 {
            t.trace_regions = t.trace_regions.saturating_sub(1);
        }
        if mode & G_NOTRACE != 0 {
            t.notrace_regions = t.notrace_regions.saturating_sub(1);
        }
    }
    if mode & G_RECORDED != 0 {
        recorder::record_exit();
    }
}

// ---------------------------------------------------------------------------
// Slow paths.

#[cold]
#[inline(never)]
fn entry_slow(
    t: &mut ThreadState,
    site: &'static Site,
    self_type: Option<fn() -> &'static str>,
) -> u8 {
    if !recorder::attach_slow(t) {
        return 0;
    }
    record_site_entry(site, self_type)
}

/// Writes the description of a site to the metadata stream, once per
/// session.
#[cold]
#[inline(never)]
fn register_site(
    t: &ThreadState,
    site: &'static Site,
    self_type: Option<fn() -> &'static str>,
    sid: u32,
) {
    recorder::note_source_site();
    let old = site.registered.load(Ordering::Relaxed);
    if site
        .registered
        .compare_exchange(old, sid, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let prefix = self_type.map(|f| f()).unwrap_or("");
    recorder::write_thread_meta(
        t,
        &Framed::Site {
            key: site.key(),
            prefix: prefix.as_bytes(),
            name: site.name.as_bytes(),
            file: site.file.as_bytes(),
            line: u64::from(site.line),
        },
    );
}
