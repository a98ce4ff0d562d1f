//! Probe management: attaching probes to markers (typed, or by name with
//! a run-time signature check), removing them after a grace period, the
//! copy-on-write probe arrays, and switching a marker's disabled path when
//! its first probe arrives or its last one leaves.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use crate::arg::{AnyArgs, Arg, Signature, write_types};
use crate::marker::{
    Design, DesignKind, Event, Marker, MarkerCore, ProbeArray, ProbeCall, ProbeEntry,
};
use crate::rcu;

/// Why a probe could not be attached or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No marker has this name.
    NotFound {
        /// The name asked for.
        name: String,
    },
    /// The probe's argument types differ from the marker's.
    Mismatch {
        /// The marker's declaration, `net_rx(len: u32, dev: &str)`.
        marker: String,
        /// The probe's signature, `(u64, &str)`.
        probe: String,
    },
    /// A probe was attached or removed from inside a probe: a grace
    /// period there would wait for itself (and another writer may be
    /// waiting for this probe to return).
    InsideProbe,
    /// The marker's static key could not be switched.
    Patch {
        /// The marker's name.
        marker: String,
        /// What failed.
        reason: PatchError,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::NotFound { name } => write!(f, "no marker named `{name}`"),
            Error::Mismatch { marker, probe } => write!(
                f,
                "probe signature {probe} does not match marker `{marker}`"
            ),
            Error::InsideProbe => f.write_str(
                "probes cannot be attached or removed from inside a probe (the grace period would wait for itself)",
            ),
            Error::Patch { marker, reason } => {
                write!(f, "marker `{marker}`: cannot switch its static key: {reason}")
            }
        }
    }
}

impl core::error::Error for Error {}

/// Why a marker's static-key sites could not be switched: the `reason` of
/// [`Error::Patch`], and what a [`KeyPatcher`] returns.
///
/// The patcher's own failures (text that cannot be made writable, a site
/// out of reach of a `jmp`, ...) belong to the crate that patches code, so
/// they travel as its message: a patcher can return `Err("...".into())`
/// and use `?` on a `Result<_, &'static str>` or `Result<_, String>`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PatchError {
    /// No code patcher is installed (this crate patches nothing itself).
    NoPatcher,
    /// The installed patcher failed, with its reason.
    Failed(Cow<'static, str>),
}

impl core::fmt::Display for PatchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PatchError::NoPatcher => f.write_str(
                "no code patcher is installed (link the fntrace runtime, or declare the marker `as Flag`)",
            ),
            PatchError::Failed(reason) => f.write_str(reason),
        }
    }
}

impl core::error::Error for PatchError {}

impl From<&'static str> for PatchError {
    fn from(reason: &'static str) -> PatchError {
        PatchError::Failed(Cow::Borrowed(reason))
    }
}

impl From<String> for PatchError {
    fn from(reason: String) -> PatchError {
        PatchError::Failed(Cow::Owned(reason))
    }
}

/// Switches a static-key marker's sites (installed by the runtime that
/// owns code patching, `fntrace-rt`).
pub type KeyPatcher = fn(&'static MarkerCore, bool) -> Result<(), PatchError>;

static PATCHER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Installs the function that patches static-key sites.
pub fn set_key_patcher(f: KeyPatcher) {
    PATCHER.store(f as *mut (), Ordering::Release);
}

fn patcher() -> Option<KeyPatcher> {
    let p = PATCHER.load(Ordering::Acquire);
    if p.is_null() {
        None
    } else {
        // SAFETY: only ever set from a `KeyPatcher`.
        Some(unsafe { core::mem::transmute::<*mut (), KeyPatcher>(p) })
    }
}

/// Serialises writers (attach, remove): a spin lock, as this crate may
/// run without `std`.
static WRITER: AtomicBool = AtomicBool::new(false);

struct WriterGuard;

fn writer_lock() -> WriterGuard {
    #[cfg(feature = "std")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // A thread that held the lock when another forked does not
            // exist in the child: release it there (publication is one
            // atomic store, so the arrays are consistent).
            extern "C" fn child() {
                WRITER.store(false, Ordering::Relaxed);
            }
            // SAFETY: registers a handler that stores one atomic.
            unsafe { libc::pthread_atfork(None, None, Some(child)) };
        });
    }
    let mut spins = 0u32;
    while WRITER
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins = spins.wrapping_add(1);
        #[cfg(feature = "std")]
        if spins > 64 {
            std::thread::yield_now();
            continue;
        }
        core::hint::spin_loop();
    }
    WriterGuard
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        WRITER.store(false, Ordering::Release);
    }
}

/// A grace period.
fn synchronize() {
    rcu::synchronize();
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A probe not yet attached: a closure of the marker's argument types
/// (or [`AnyArgs`]), boxed, with the function that calls it.
pub struct Probe<S: Signature> {
    call: ProbeCall,
    data: *const (),
    drop: unsafe fn(*const ()),
    _s: PhantomData<fn(S)>,
}

// SAFETY: the closure behind `data` is `Send + Sync` (every constructor
// requires it).
unsafe impl<S: Signature> Send for Probe<S> {}
// SAFETY: as above.
unsafe impl<S: Signature> Sync for Probe<S> {}

/// Drops the boxed closure `F` at `p`.
///
/// # Safety
/// `p` came from `Box::<F>::into_raw` and is dropped once.
unsafe fn drop_box<F>(p: *const ()) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(p as *mut F) });
}

impl<S: Signature> Probe<S> {
    fn from_box<F>(f: F, call: ProbeCall) -> Self {
        Probe {
            call,
            data: Box::into_raw(Box::new(f)) as *const (),
            drop: drop_box::<F>,
            _s: PhantomData,
        }
    }

    /// This probe's signature, `(u32, &str)` (`(..)` for [`AnyArgs`]).
    pub fn signature() -> String {
        let mut s = String::new();
        if S::ANY {
            s.push_str("(..)");
        } else {
            let _ = write_types(S::TYPES, &mut s);
        }
        s
    }
}

impl<S: Signature> Drop for Probe<S> {
    fn drop(&mut self) {
        if !self.data.is_null() {
            // SAFETY: the probe was never attached (attaching takes the
            // data out), so the closure is still ours.
            unsafe { (self.drop)(self.data) };
        }
    }
}

impl Probe<AnyArgs> {
    /// A probe that accepts every marker: it gets an [`Event`] (the
    /// marker, and its arguments to format).
    pub fn any<F>(f: F) -> Self
    where
        F: for<'a> Fn(&Event<'a>) + Send + Sync + 'static,
    {
        /// # Safety
        /// `data` is a live `F`, `args` the marker's tuple.
        unsafe fn call<F: for<'a> Fn(&Event<'a>)>(
            data: *const (),
            m: &'static MarkerCore,
            args: *const (),
        ) {
            // SAFETY: the caller's contract.
            let f = unsafe { &*(data as *const F) };
            // SAFETY: the caller's contract.
            f(&unsafe { Event::new(m, args) })
        }
        Probe::from_box(f, call::<F>)
    }
}

macro_rules! typed_probes {
    ($( ( $($t:ident $v:ident),* ) )*) => {$(
        impl<$($t: Arg),*> Probe<($($t,)*)> {
            /// A probe from a closure taking the marker's arguments.
            pub fn new<Func>(f: Func) -> Self
            where
                Func: for<'a> Fn($($t::Val<'a>),*) + Send + Sync + 'static,
            {
                /// # Safety
                /// `data` is a live `Func`, `args` points to the tuple.
                #[allow(unused_variables)]
                unsafe fn call<Func, $($t: Arg),*>(data: *const (), _m: &'static MarkerCore, args: *const ())
                where
                    Func: for<'a> Fn($($t::Val<'a>),*),
                {
                    // SAFETY: the caller's contract.
                    let f = unsafe { &*(data as *const Func) };
                    // SAFETY: the caller's contract; the tuple is `Copy`.
                    let ($($v,)*) = unsafe { *(args as *const ($($t::Val<'_>,)*)) };
                    f($($v),*)
                }
                Probe::from_box(f, call::<Func, $($t),*>)
            }
        }

        impl<Dz: Design, $($t: Arg),*> Marker<($($t,)*), Dz> {
            /// Attaches a closure taking the marker's arguments (checked
            /// at compile time). Probes run in attachment order.
            pub fn attach<Func>(&'static self, f: Func) -> Result<ProbeHandle, Error>
            where
                Func: for<'a> Fn($($t::Val<'a>),*) + Send + Sync + 'static,
            {
                attach_to(&[&self.__core], Probe::<($($t,)*)>::new(f))
            }
        }
    )*};
}
typed_probes! {
    ()
    (A a)
    (A a, B b)
    (A a, B b, C c)
    (A a, B b, C c, D d)
    (A a, B b, C c, D d, E e)
    (A a, B b, C c, D d, E e, F f)
    (A a, B b, C c, D d, E e, F f, G g)
    (A a, B b, C c, D d, E e, F f, G g, H h)
}

impl<S: Signature, D: Design> Marker<S, D> {
    /// Attaches an untyped probe (see [`Probe::any`]).
    pub fn attach_any(&'static self, probe: Probe<AnyArgs>) -> Result<ProbeHandle, Error> {
        attach_to(&[&self.__core], probe)
    }
}

/// A probe attached to one or more markers. [`ProbeHandle::remove`]
/// detaches it and returns after a grace period; dropping the handle
/// without removing leaves the probe attached for good.
#[must_use = "dropping the handle leaves the probe attached forever; call remove()"]
pub struct ProbeHandle {
    markers: Vec<&'static MarkerCore>,
    id: u64,
    data: *const (),
    drop: unsafe fn(*const ()),
}

// SAFETY: the probe data is `Send + Sync` (see `Probe`).
unsafe impl Send for ProbeHandle {}
// SAFETY: as above.
unsafe impl Sync for ProbeHandle {}

impl ProbeHandle {
    /// The markers this probe is attached to.
    pub fn markers(&self) -> &[&'static MarkerCore] {
        &self.markers
    }

    /// Detaches the probe from its markers and waits until no thread can
    /// still be running it; then drops its closure (so the closure's data
    /// is freed and its code may be unloaded). The last probe of a marker
    /// switches the marker back to its disabled path. Refused inside a
    /// probe ([`Error::InsideProbe`]; the handle is left as it was).
    pub fn remove(mut self) -> Result<(), (Error, ProbeHandle)> {
        if rcu::in_read_section() {
            return Err((Error::InsideProbe, self));
        }
        {
            let _w = writer_lock();
            let mut old = Vec::new();
            for m in core::mem::take(&mut self.markers) {
                let cur = m.probes.load(Ordering::Acquire);
                let entries: Vec<ProbeEntry> = if cur.is_null() {
                    Vec::new()
                } else {
                    // SAFETY: writers hold the lock; the array is alive.
                    unsafe { (*cur).entries() }.to_vec()
                };
                let rest: Vec<ProbeEntry> = entries
                    .iter()
                    .copied()
                    .filter(|e| e.id != self.id)
                    .collect();
                if rest.len() == entries.len() {
                    continue;
                }
                if rest.is_empty() {
                    // A site left patched only costs a call that finds no
                    // probe; the removal itself must go on.
                    let _ = disable(m);
                }
                m.probes.store(new_array(m, rest), Ordering::Release);
                old.push(cur);
            }
            synchronize();
            for a in old {
                free_array(a);
            }
            free_pending();
        }
        // SAFETY: no array references the data any more and a grace period
        // has passed: no thread runs the probe.
        unsafe { (self.drop)(self.data) };
        self.data = core::ptr::null();
        Ok(())
    }
}

/// A new array of `marker`'s probes, to publish (null for none).
fn new_array(marker: &'static MarkerCore, entries: Vec<ProbeEntry>) -> *mut ProbeArray {
    let Some(&first) = entries.first() else {
        return core::ptr::null_mut();
    };
    let b: Box<[ProbeEntry]> = entries.into_boxed_slice();
    let len = b.len();
    let ptr = Box::into_raw(b) as *const ProbeEntry;
    Box::into_raw(Box::new(ProbeArray {
        marker,
        first,
        ptr,
        len,
    }))
}

/// Arrays replaced by an attach, waiting for the next grace period
/// (accessed under the writer lock only).
struct Pending(core::cell::UnsafeCell<Vec<*mut ProbeArray>>);
// SAFETY: only touched with the writer lock held.
unsafe impl Sync for Pending {}
static PENDING: Pending = Pending(core::cell::UnsafeCell::new(Vec::new()));

/// Most arrays left pending before an attach waits for a grace period.
const MAX_PENDING: usize = 64;

/// Queues replaced arrays (writer lock held).
fn defer_free(arrays: Vec<*mut ProbeArray>) {
    // SAFETY: the writer lock is held.
    let p = unsafe { &mut *PENDING.0.get() };
    p.extend(arrays.into_iter().filter(|a| !a.is_null()));
    if p.len() > MAX_PENDING {
        synchronize();
        free_pending();
    }
}

/// Frees the queued arrays; a grace period has passed since they were
/// replaced (writer lock held).
fn free_pending() {
    // SAFETY: the writer lock is held.
    let p = unsafe { &mut *PENDING.0.get() };
    for a in p.drain(..) {
        free_array(a);
    }
}

/// Frees an array no reader can hold any more.
fn free_array(a: *mut ProbeArray) {
    if a.is_null() {
        return;
    }
    // SAFETY: made by `new_array`; unpublished and a grace period passed.
    let arr = unsafe { Box::from_raw(a) };
    if arr.len > 0 {
        // SAFETY: the slice `new_array` leaked.
        drop(unsafe {
            Box::from_raw(core::ptr::slice_from_raw_parts_mut(
                arr.ptr as *mut ProbeEntry,
                arr.len,
            ))
        });
    }
}

fn enable(m: &'static MarkerCore) -> Result<(), Error> {
    if m.design() == DesignKind::StaticKey && cfg!(target_arch = "x86_64") {
        let p = patcher().ok_or_else(|| Error::Patch {
            marker: m.name().to_string(),
            reason: PatchError::NoPatcher,
        })?;
        p(m, true).map_err(|reason| Error::Patch {
            marker: m.name().to_string(),
            reason,
        })?;
    }
    m.set_dynamic(true);
    Ok(())
}

fn disable(m: &'static MarkerCore) -> Result<(), Error> {
    m.set_dynamic(false);
    if m.design() == DesignKind::StaticKey
        && cfg!(target_arch = "x86_64")
        && let Some(p) = patcher()
    {
        p(m, false).map_err(|reason| Error::Patch {
            marker: m.name().to_string(),
            reason,
        })?;
    }
    Ok(())
}

/// The marker's declaration as a string, `net_rx(len: u32, dev: &str)`.
pub fn signature_of(m: &MarkerCore) -> String {
    let mut s = String::new();
    let _ = m.write_signature(&mut s);
    s
}

/// Checks that `S` fits marker `m`.
fn check<S: Signature>(m: &MarkerCore) -> Result<(), Error> {
    if S::ANY || S::TYPES == m.arg_types() {
        return Ok(());
    }
    Err(Error::Mismatch {
        marker: signature_of(m),
        probe: Probe::<S>::signature(),
    })
}

/// Attaches `probe` to every marker of `markers` (all or none).
pub(crate) fn attach_to<S: Signature>(
    markers: &[&'static MarkerCore],
    mut probe: Probe<S>,
) -> Result<ProbeHandle, Error> {
    for m in markers {
        check::<S>(m)?;
    }
    if rcu::in_read_section() {
        return Err(Error::InsideProbe);
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let entry = ProbeEntry {
        call: probe.call,
        data: probe.data,
        id,
    };
    let _w = writer_lock();
    let mut old = Vec::new();
    let mut done: Vec<&'static MarkerCore> = Vec::new();
    let mut failure = None;
    for &m in markers {
        let cur = m.probes.load(Ordering::Acquire);
        let mut entries: Vec<ProbeEntry> = if cur.is_null() {
            Vec::new()
        } else {
            // SAFETY: writers hold the lock; the array is alive.
            unsafe { (*cur).entries() }.to_vec()
        };
        let first = entries.is_empty();
        entries.push(entry);
        m.probes.store(new_array(m, entries), Ordering::Release);
        if first && let Err(e) = enable(m) {
            // Unpublish again; the new array is freed after the grace
            // period below.
            let new = m.probes.swap(cur, Ordering::AcqRel);
            old.push(new);
            failure = Some(e);
            break;
        }
        old.push(cur);
        done.push(m);
    }
    if let Some(e) = failure {
        // Roll back the markers already done.
        for &m in &done {
            let cur = m.probes.load(Ordering::Acquire);
            // SAFETY: writers hold the lock; the array is alive.
            let rest: Vec<ProbeEntry> = unsafe { (*cur).entries() }
                .iter()
                .copied()
                .filter(|x| x.id != id)
                .collect();
            if rest.is_empty() {
                let _ = disable(m);
            }
            m.probes.store(new_array(m, rest), Ordering::Release);
            old.push(cur);
        }
        synchronize();
        for a in old {
            free_array(a);
        }
        return Err(e);
    }
    // The replaced arrays are freed at the next grace period: attaching
    // does not wait (unless many are pending).
    defer_free(old);
    let h = ProbeHandle {
        markers: done,
        id,
        data: probe.data,
        drop: probe.drop,
    };
    probe.data = core::ptr::null();
    Ok(h)
}

/// Every marker linked into this object (executable or shared library).
pub fn markers() -> &'static [&'static MarkerCore] {
    &crate::MARKERS
}

/// The markers named `name`.
pub fn find(name: &str) -> Vec<&'static MarkerCore> {
    markers()
        .iter()
        .copied()
        .filter(|m| m.name() == name)
        .collect()
}

/// Attaches `probe` to every marker named `name`, after checking its
/// signature against each ([`Error::Mismatch`] names both). Probes of a
/// marker run in attachment order.
pub fn set_probe<S: Signature>(name: &str, probe: Probe<S>) -> Result<ProbeHandle, Error> {
    let ms = find(name);
    if ms.is_empty() {
        return Err(Error::NotFound {
            name: name.to_string(),
        });
    }
    attach_to(&ms, probe)
}

/// Attaches `probe` to the given markers (for instance the ones whose
/// names match a pattern).
pub fn set_probe_on<S: Signature>(
    markers: &[&'static MarkerCore],
    probe: Probe<S>,
) -> Result<ProbeHandle, Error> {
    attach_to(markers, probe)
}
