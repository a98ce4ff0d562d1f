//! Static markers for fntrace: typed trace points declared in code, whose
//! disabled path costs (almost) nothing, and probes attached to them at
//! run time by name or statically by type.
//!
//! ```
//! use fntrace_markers::{declare_marker, fire};
//!
//! declare_marker! {
//!     /// A packet arrived.
//!     pub static NET_RX: net_rx(len: u32, dev: &str) as Flag;
//! }
//!
//! fn receive(buf: &[u8], dev: &str) {
//!     // The arguments are evaluated only while a probe is attached.
//!     fire!(NET_RX, buf.len() as u32, dev);
//! }
//!
//! # fn main() -> Result<(), fntrace_markers::Error> {
//! let probe = NET_RX.attach(|len, dev| println!("{dev}: {len} bytes"))?;
//! receive(b"hello", "eth0");
//! probe.remove().map_err(|(e, _)| e)?; // returns after a grace period
//! # Ok(()) }
//! ```
//!
//! Or declare and fire in one place:
//! `fntrace_markers::marker!(net_rx, len: u32 = n, dev: &str = name);`.
//!
//! # Disabled-path designs
//!
//! Chosen per marker (`as DESIGN` after the declaration, default
//! `StaticKey`):
//!
//! - `StaticKey`: each firing site is a 5-byte NOP, recorded in the
//!   `fntrace_key_sites` section, that the runtime patches into a `jmp`
//!   to the firing code when the marker's first probe is attached and back
//!   when the last one leaves (needs the code patcher of `fntrace-rt`,
//!   which installs itself at start-up; x86_64 only, elsewhere a flag).
//!   The firing code is out of line and clobbers no general-purpose
//!   register (module `keycall`), so the NOP is all the site adds to the
//!   code around it; enabled, it costs nine register saves and restores
//!   more than the flag;
//! - `Flag`: a load of the marker's flag and a branch;
//! - `FnPtr`: a load of a function pointer, a NULL check, an indirect call;
//! - `EmptyFn`: an indirect call to a function that is empty while
//!   disabled. Its arguments are evaluated on every firing.
//!
//! # Type safety
//!
//! A marker's argument types are part of its type; [`Marker::attach`]
//! takes a closure of exactly those types:
//!
//! ```compile_fail
//! fntrace_markers::declare_marker! { static M: m(len: u32) as Flag; }
//! let _ = M.attach(|len: u64| drop(len)); // u64 is not u32: does not compile
//! ```
//!
//! By name ([`set_probe`]), the probe's types are compared with the
//! marker's at run time and a mismatch is an [`Error::Mismatch`] naming
//! both signatures.
//!
//! # Grace period
//!
//! Probe arrays are copy-on-write. [`ProbeHandle::remove`] publishes the
//! array without the probe and returns only when no thread can still be
//! running it (see [`rcu`]), then drops the closure.
//!
//! # `no_std`
//!
//! Without the default `std` feature, declaring and firing markers needs
//! nothing else; attaching probes needs `alloc` and `critical-section`
//! (probes then run inside a critical section, which is also the grace
//! period).

#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod arg;
pub mod info;
#[cfg(target_arch = "x86_64")]
pub mod keycall;
pub mod marker;
pub mod rcu;
#[cfg(all(feature = "alloc", any(feature = "std", feature = "critical-section")))]
pub mod registry;
pub mod sites;

pub use arg::{AnyArgs, Arg, FmtBuf, Signature};
pub use marker::{DefaultDesign, Design, DesignKind, Event, Marker, MarkerCore, design};
#[cfg(all(feature = "alloc", any(feature = "std", feature = "critical-section")))]
pub use registry::{
    Error, KeyPatcher, PatchError, Probe, ProbeHandle, find, set_key_patcher, set_probe,
    set_probe_on, signature_of,
};

#[doc(hidden)]
pub use linkme as __linkme;

/// Every marker of the object (executable or shared library) this crate is
/// linked into.
#[linkme::distributed_slice]
pub static MARKERS: [&'static MarkerCore];

/// All markers linked into this object.
pub fn all() -> &'static [&'static MarkerCore] {
    &MARKERS
}

/// Declares a marker: a `static` of type [`Marker`].
///
/// ```
/// fntrace_markers::declare_marker! {
///     /// Documentation of the marker.
///     pub static NET_RX: net_rx(len: u32, dev: &str);
/// }
/// fntrace_markers::declare_marker! { static TICK: tick() as Flag; }
/// ```
///
/// `NET_RX` is the Rust name, `net_rx` the marker's name (what probes are
/// attached by, what the trace shows). Argument types implement [`Arg`];
/// the design (`StaticKey` by default, `Flag`, `FnPtr`, `EmptyFn`) follows
/// `as`. The marker is listed in [`all`] and in the binary's
/// `fntrace_marker_info` section (`fntrace markers BINARY`).
#[macro_export]
macro_rules! declare_marker {
    (
        $(#[$attr:meta])*
        $vis:vis static $NAME:ident : $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(as $design:ident)? ;
    ) => {
        $(#[$attr])*
        $vis static $NAME: $crate::Marker<($($ty,)*), $crate::__design!($($design)?)> =
            $crate::Marker::__new(
                ::core::stringify!($name),
                ::core::module_path!(),
                ::core::file!(),
                ::core::line!(),
                &[$(::core::stringify!($arg)),*],
            );
        const _: () = {
            #[$crate::__linkme::distributed_slice($crate::MARKERS)]
            #[linkme(crate = $crate::__linkme)]
            static __FNTRACE_MARKER: &'static $crate::MarkerCore = &$NAME.__core;

            const __PARTS: &[&str] = &[
                ::core::stringify!($name),
                ::core::module_path!(),
                ::core::file!(),
                <$crate::__design!($($design)?) as $crate::Design>::KIND.name(),
                $(::core::stringify!($arg), <$ty as $crate::Arg>::NAME,)*
            ];
            const __LEN: usize = $crate::info::info_len(__PARTS);
            #[used]
            #[unsafe(link_section = "fntrace_marker_info")]
            static __FNTRACE_MARKER_INFO: [u8; __LEN] =
                $crate::info::info_record::<__LEN>(::core::line!(), __PARTS);
        };
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __design {
    () => {
        $crate::DefaultDesign
    };
    ($d:ident) => {
        $crate::design::$d
    };
}

/// Fires a marker declared with [`declare_marker!`]:
/// `fire!(NET_RX, len, dev)`. The arguments are evaluated only when a
/// probe is attached (except for `EmptyFn` markers); each is converted to
/// the declared type as in a `let` with that type.
#[macro_export]
macro_rules! fire {
    ($m:path $(, $a:expr)* $(,)?) => {{
        let __m = &$m;
        if __m.__is_static_key() {
            $crate::__key_site!($m, $crate::__key_call!($m, __m.__key_args(($($a,)*))));
        } else if let ::core::option::Option::Some(__f) = __m.__check() {
            __m.__call(__f, ($($a,)*));
        }
    }};
}

/// Declares a marker and fires it, in one statement:
/// `marker!(net_rx, len: u32 = buf.len() as u32, dev: &str = name)`, or
/// `marker!(net_rx as Flag, ...)` for another design.
#[macro_export]
macro_rules! marker {
    ($name:ident $(as $design:ident)? $(, $arg:ident : $ty:ty = $val:expr)* $(,)?) => {{
        $crate::declare_marker! {
            static __FNTRACE_M: $name($($arg: $ty),*) $(as $design)?;
        }
        $crate::fire!(__FNTRACE_M $(, $val)*);
    }};
}

/// The static-key site: a 5-byte NOP recorded in `fntrace_key_sites`,
/// patched into a `jmp` to the label block while the marker is enabled.
/// The block (`$body`) evaluates the arguments and calls the probes
/// through `keycall` (`__key_call!`), which clobbers no general-purpose
/// register, then falls through to the code after the site.
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
#[macro_export]
macro_rules! __key_site {
    ($m:path, $body:expr) => {
        // SAFETY: the template is a 5-byte NOP (it touches no register,
        // memory or flag: `nomem`, `preserves_flags`) plus data in another
        // section; the runtime only ever turns it into `jmp` to the label
        // block, which is ordinary Rust code, and back.
        unsafe {
            ::core::arch::asm!(
                "2: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
                ".pushsection fntrace_key_sites,\"awR\",@progbits",
                ".balign 8",
                ".quad 2b",
                ".quad {target}",
                ".quad {marker}",
                ".popsection",
                marker = sym $m,
                target = label { $body; },
                options(nomem, nostack, preserves_flags),
            )
        }
    };
}

/// No static keys on this architecture: a flag test.
#[cfg(not(target_arch = "x86_64"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __key_site {
    ($m:path, $body:expr) => {
        if $m.__core.is_enabled() {
            $body;
        }
    };
}

/// No static keys on this architecture: the enabled path is a cold call.
#[cfg(not(target_arch = "x86_64"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __key_call {
    ($m:path, $args:expr) => {
        $m.__dispatch($args)
    };
}
