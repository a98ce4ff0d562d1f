//! Marker descriptors and the firing path: [`MarkerCore`] (what every
//! marker shares: name, argument names and types, location, probe array,
//! enabled state), the typed [`Marker`], the four disabled-path designs,
//! and the dispatch that calls the attached probes inside a read-side
//! section.

use core::fmt::{self, Write};
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use crate::arg::Signature;
use crate::rcu;

/// How a marker's disabled path is built (see the crate documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DesignKind {
    /// A 5-byte NOP at each firing site, patched into a `jmp` to the
    /// firing code while probes are attached (x86_64; elsewhere it
    /// behaves as [`DesignKind::Flag`]).
    StaticKey,
    /// A load of the marker's enabled flag and a conditional branch.
    Flag,
    /// A load of a function pointer, a NULL check and an indirect call.
    FnPtr,
    /// An unconditional indirect call to a function that is empty while
    /// no probe is attached. Arguments are evaluated even when disabled.
    EmptyFn,
}

impl DesignKind {
    /// The design's name as written in a declaration (`StaticKey`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DesignKind::StaticKey => "StaticKey",
            DesignKind::Flag => "Flag",
            DesignKind::FnPtr => "FnPtr",
            DesignKind::EmptyFn => "EmptyFn",
        }
    }
}

/// A disabled-path design, chosen per marker as a type parameter of
/// [`Marker`] (`as Flag` in [`declare_marker!`](crate::declare_marker)).
pub trait Design: 'static {
    /// Which one.
    const KIND: DesignKind;
}

/// The designs, as types.
pub mod design {
    use super::{Design, DesignKind};

    /// See [`DesignKind::StaticKey`].
    pub struct StaticKey;
    /// See [`DesignKind::Flag`].
    pub struct Flag;
    /// See [`DesignKind::FnPtr`].
    pub struct FnPtr;
    /// See [`DesignKind::EmptyFn`].
    pub struct EmptyFn;

    impl Design for StaticKey {
        const KIND: DesignKind = DesignKind::StaticKey;
    }
    impl Design for Flag {
        const KIND: DesignKind = DesignKind::Flag;
    }
    impl Design for FnPtr {
        const KIND: DesignKind = DesignKind::FnPtr;
    }
    impl Design for EmptyFn {
        const KIND: DesignKind = DesignKind::EmptyFn;
    }
}

/// The design of markers declared without `as DESIGN`: the static key.
pub type DefaultDesign = design::StaticKey;

/// What a probe entry calls: `(probe data, marker, pointer to the
/// argument tuple)`.
pub type ProbeCall = unsafe fn(*const (), &'static MarkerCore, *const ());

/// One attached probe.
#[derive(Clone, Copy)]
#[cfg_attr(
    not(all(feature = "alloc", any(feature = "std", feature = "critical-section"))),
    allow(dead_code)
)]
pub struct ProbeEntry {
    pub(crate) call: ProbeCall,
    pub(crate) data: *const (),
    pub(crate) id: u64,
}

/// An immutable array of probes; replaced (copy-on-write), never changed.
/// Never empty (a marker without probes has none). It names its marker and
/// holds a copy of its first entry, so that the one-probe path loads the
/// probe from the array itself and needs the marker's address only to find
/// the array (the static key's dispatcher then keeps one value fewer).
pub struct ProbeArray {
    pub(crate) marker: &'static MarkerCore,
    pub(crate) first: ProbeEntry,
    pub(crate) ptr: *const ProbeEntry,
    pub(crate) len: usize,
}

impl ProbeArray {
    pub(crate) fn entries(&self) -> &[ProbeEntry] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr..ptr + len` is the array's own allocation, alive
        // until a grace period after it was unpublished.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// What the function-pointer designs call: `(marker, argument tuple)`.
pub type DispatchFn = unsafe fn(&'static MarkerCore, *const ());

/// The empty function of [`DesignKind::EmptyFn`].
unsafe fn empty_dispatch(_: &'static MarkerCore, _: *const ()) {}

/// The dispatcher the function-pointer designs point at when enabled.
#[inline(never)]
unsafe fn probe_dispatch(m: &'static MarkerCore, args: *const ()) {
    m.dispatch_raw(args)
}

/// Formats an argument tuple of signature `S`.
///
/// # Safety
/// `args` points to an `S::Args`.
unsafe fn fmt_erased<S: Signature>(
    args: *const (),
    names: &[&str],
    out: &mut dyn Write,
) -> fmt::Result {
    // SAFETY: the caller's contract.
    let a = unsafe { &*(args as *const S::Args<'_>) };
    S::fmt(a, names, out)
}

type FmtFn = unsafe fn(*const (), &[&str], &mut dyn Write) -> fmt::Result;

/// The untyped part of a marker, shared by every signature and design.
pub struct MarkerCore {
    name: &'static str,
    module: &'static str,
    file: &'static str,
    line: u32,
    arg_names: &'static [&'static str],
    arg_types: &'static [&'static str],
    design: DesignKind,
    fmt: FmtFn,
    pub(crate) probes: AtomicPtr<ProbeArray>,
    pub(crate) enabled: AtomicBool,
    /// `FnPtr`: null or the dispatcher; `EmptyFn`: the empty function or
    /// the dispatcher.
    pub(crate) func: AtomicPtr<()>,
}

// SAFETY: the probe array behind `probes` is immutable once published and
// freed only after a grace period; everything else is immutable or atomic.
unsafe impl Sync for MarkerCore {}

impl MarkerCore {
    /// The marker's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// The module that declares it.
    pub fn module(&self) -> &'static str {
        self.module
    }
    /// Source file of the declaration.
    pub fn file(&self) -> &'static str {
        self.file
    }
    /// Source line of the declaration.
    pub fn line(&self) -> u32 {
        self.line
    }
    /// Argument names.
    pub fn arg_names(&self) -> &'static [&'static str] {
        self.arg_names
    }
    /// Argument type names (`"u32"`, `"&str"`).
    pub fn arg_types(&self) -> &'static [&'static str] {
        self.arg_types
    }
    /// The disabled-path design.
    pub fn design(&self) -> DesignKind {
        self.design
    }
    /// Whether at least one probe is attached.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }
    /// Number of attached probes.
    pub fn probe_count(&self) -> usize {
        let Some(_g) = rcu::read_lock() else {
            return 0;
        };
        let a = self.probes.load(Ordering::Acquire);
        if a.is_null() {
            0
        } else {
            // SAFETY: published arrays live until a grace period after
            // they are replaced; we are inside a read-side section.
            unsafe { (*a).len }
        }
    }

    /// Writes the declaration, `net_rx(len: u32, dev: &str)`.
    pub fn write_signature(&self, out: &mut dyn Write) -> fmt::Result {
        out.write_str(self.name)?;
        out.write_char('(')?;
        for (i, t) in self.arg_types.iter().enumerate() {
            if i > 0 {
                out.write_str(", ")?;
            }
            let n = self.arg_names.get(i).copied().unwrap_or("_");
            write!(out, "{n}: {t}")?;
        }
        out.write_char(')')
    }

    /// Calls every attached probe with the argument tuple at `args`
    /// (inlined into the dispatchers, so an enabled firing makes one
    /// direct call, then one indirect call per probe).
    #[inline(always)]
    pub(crate) fn dispatch_raw(&'static self, args: *const ()) {
        let Some(_g) = rcu::read_lock() else {
            return;
        };
        // SAFETY: inside the section `_g` holds.
        unsafe { self.dispatch_locked(args) };
    }

    /// [`MarkerCore::dispatch_raw`] without entering the read-side section.
    ///
    /// # Safety
    /// The caller is inside a read-side section (`rcu::read_lock`).
    #[inline(always)]
    pub(crate) unsafe fn dispatch_locked(&'static self, args: *const ()) {
        let a = self.probes.load(Ordering::Acquire);
        if a.is_null() {
            return;
        }
        // SAFETY: a published array lives until a grace period after it
        // is replaced, and we are inside a read-side section.
        let arr = unsafe { &*a };
        if arr.len == 1 {
            // One probe, the common case, without the loop: less to keep
            // across the call.
            let e = &arr.first;
            // SAFETY: `e.call` was built for this marker's signature (or
            // is untyped) and `e.data` lives as long as the entry is
            // reachable (freed after a grace period).
            unsafe { (e.call)(e.data, arr.marker, args) };
            return;
        }
        dispatch_many(arr, args);
    }

    /// Formats the argument tuple at `args` (`len=1500 dev="eth0"`).
    ///
    /// # Safety
    /// `args` points to this marker's argument tuple.
    pub(crate) unsafe fn fmt_args(&self, args: *const (), out: &mut dyn Write) -> fmt::Result {
        // SAFETY: the caller's contract; `fmt` was built for this
        // marker's signature.
        unsafe { (self.fmt)(args, self.arg_names, out) }
    }

    /// Switches the enabled state of the designs that need no patching.
    #[cfg_attr(
        not(all(feature = "alloc", any(feature = "std", feature = "critical-section"))),
        allow(dead_code)
    )]
    pub(crate) fn set_dynamic(&self, on: bool) {
        match self.design {
            DesignKind::FnPtr => self.func.store(
                if on {
                    probe_dispatch as DispatchFn as *mut ()
                } else {
                    core::ptr::null_mut()
                },
                Ordering::Release,
            ),
            DesignKind::EmptyFn => self.func.store(
                if on {
                    probe_dispatch as DispatchFn as *mut ()
                } else {
                    empty_dispatch as DispatchFn as *mut ()
                },
                Ordering::Release,
            ),
            _ => {}
        }
        self.enabled.store(on, Ordering::Release);
    }
}

/// The probes of an array of any length, in attachment order.
#[inline(never)]
fn dispatch_many(arr: &ProbeArray, args: *const ()) {
    for e in arr.entries() {
        // SAFETY: `e.call` was built for this marker's signature (or is
        // untyped) and `e.data` lives as long as the entry is reachable
        // (freed after a grace period).
        unsafe { (e.call)(e.data, arr.marker, args) };
    }
}

/// A marker with argument types `S` (a tuple of [`crate::Arg`] types) and
/// disabled-path design `D`. Declare it with
/// [`declare_marker!`](crate::declare_marker), fire it with
/// [`fire!`](crate::fire).
#[repr(C)]
pub struct Marker<S: Signature, D: Design = DefaultDesign> {
    #[doc(hidden)]
    pub __core: MarkerCore,
    _p: PhantomData<fn(S, D)>,
}

impl<S: Signature, D: Design> Marker<S, D> {
    #[doc(hidden)]
    pub const fn __new(
        name: &'static str,
        module: &'static str,
        file: &'static str,
        line: u32,
        arg_names: &'static [&'static str],
    ) -> Self {
        Marker {
            __core: MarkerCore {
                name,
                module,
                file,
                line,
                arg_names,
                arg_types: S::TYPES,
                design: D::KIND,
                fmt: fmt_erased::<S>,
                probes: AtomicPtr::new(core::ptr::null_mut()),
                enabled: AtomicBool::new(false),
                func: AtomicPtr::new(match D::KIND {
                    DesignKind::EmptyFn => empty_dispatch as DispatchFn as *mut (),
                    _ => core::ptr::null_mut(),
                }),
            },
            _p: PhantomData,
        }
    }

    /// The untyped descriptor.
    pub fn core(&'static self) -> &'static MarkerCore {
        &self.__core
    }

    #[doc(hidden)]
    #[inline(always)]
    pub const fn __is_static_key(&self) -> bool {
        cfg!(target_arch = "x86_64") && matches!(D::KIND, DesignKind::StaticKey)
    }

    /// The arguments of a firing, as this marker's tuple (converted as in
    /// a `let` with the declared types): what a static-key site hands to
    /// `__key_call!`.
    #[doc(hidden)]
    #[inline(always)]
    pub fn __key_args<'a>(&'static self, args: S::Args<'a>) -> S::Args<'a> {
        args
    }

    /// The enabled path of a flag-tested static key (architectures
    /// without static keys): calls the probes with `args`.
    #[cfg(not(target_arch = "x86_64"))]
    #[doc(hidden)]
    #[inline(never)]
    #[cold]
    pub fn __dispatch(&'static self, args: S::Args<'_>) {
        self.__core
            .dispatch_raw(&args as *const S::Args<'_> as *const ())
    }

    /// The check of every design but the static key: the function to
    /// call when enabled (`Flag`: the dispatcher, a constant; `FnPtr`: the
    /// loaded pointer unless NULL; `EmptyFn`: the loaded pointer, always).
    #[doc(hidden)]
    #[inline(always)]
    pub fn __check(&'static self) -> Option<DispatchFn> {
        match D::KIND {
            DesignKind::StaticKey | DesignKind::Flag => {
                if self.__core.enabled.load(Ordering::Relaxed) {
                    Some(probe_dispatch)
                } else {
                    None
                }
            }
            DesignKind::FnPtr => {
                let p = self.__core.func.load(Ordering::Relaxed);
                if p.is_null() {
                    None
                } else {
                    // SAFETY: `func` only ever holds null or a `DispatchFn`.
                    Some(unsafe { core::mem::transmute::<*mut (), DispatchFn>(p) })
                }
            }
            DesignKind::EmptyFn => {
                let p = self.__core.func.load(Ordering::Relaxed);
                // SAFETY: `func` always holds a `DispatchFn` for this design.
                Some(unsafe { core::mem::transmute::<*mut (), DispatchFn>(p) })
            }
        }
    }

    /// Calls what [`Marker::__check`] returned with the arguments.
    #[doc(hidden)]
    #[inline(always)]
    pub fn __call(&'static self, f: DispatchFn, args: S::Args<'_>) {
        // SAFETY: `f` is the dispatcher or the empty function, and `args`
        // is this marker's argument tuple.
        unsafe { f(&self.__core, &args as *const S::Args<'_> as *const ()) }
    }
}

/// What an untyped probe ([`crate::AnyArgs`]) receives: the marker and
/// its arguments, which it can format.
pub struct Event<'a> {
    marker: &'static MarkerCore,
    args: *const (),
    _p: PhantomData<&'a ()>,
}

impl<'a> Event<'a> {
    /// # Safety
    /// `args` points to `marker`'s argument tuple, alive for `'a`.
    #[cfg_attr(
        not(all(feature = "alloc", any(feature = "std", feature = "critical-section"))),
        allow(dead_code)
    )]
    pub(crate) unsafe fn new(marker: &'static MarkerCore, args: *const ()) -> Self {
        Event {
            marker,
            args,
            _p: PhantomData,
        }
    }
    /// The marker that fired.
    pub fn marker(&self) -> &'static MarkerCore {
        self.marker
    }
    /// Writes the arguments as `name=value` pairs (`len=1500 dev="eth0"`).
    pub fn write_args(&self, out: &mut dyn Write) -> fmt::Result {
        // SAFETY: `args` is the marker's tuple (constructor contract).
        unsafe { self.marker.fmt_args(self.args, out) }
    }
}
