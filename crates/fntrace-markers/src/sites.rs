//! The static-key site table: every firing site of a static-key marker
//! records `(site, target, marker)` in the `fntrace_key_sites` section
//! (from the inline assembly of [`crate::fire!`]); the runtime patches
//! the sites of a marker through it.

use crate::marker::MarkerCore;

/// One firing site: a 5-byte NOP at `site`, to become `jmp target`.
#[repr(C)]
#[derive(Debug)]
pub struct KeySite {
    /// Address of the 5-byte NOP.
    pub site: usize,
    /// Address of the enabled path (the `jmp` target).
    pub target: usize,
    /// The marker fired there.
    pub marker: *const MarkerCore,
}

// SAFETY: plain addresses, written by the linker and never changed.
unsafe impl Sync for KeySite {}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::KeySite;

    // An empty entry, so that the section (and its bounds) exist in every
    // object that links this crate. Entries whose `site` is 0 are skipped.
    core::arch::global_asm!(
        ".pushsection fntrace_key_sites,\"awR\",@progbits",
        ".balign 8",
        ".quad 0, 0, 0",
        ".popsection",
    );

    unsafe extern "C" {
        #[link_name = "__start_fntrace_key_sites"]
        static START: u64;
        #[link_name = "__stop_fntrace_key_sites"]
        static STOP: u64;
    }

    /// Every site entry of the object this crate is linked into.
    pub fn key_sites() -> &'static [KeySite] {
        let start = (&raw const START).cast::<KeySite>();
        let stop = (&raw const STOP).cast::<KeySite>();
        let n = (stop as usize - start as usize) / core::mem::size_of::<KeySite>();
        // SAFETY: the linker defines the bounds of the section, which
        // holds only 24-byte `KeySite` entries (8-byte aligned).
        unsafe { core::slice::from_raw_parts(start, n) }
    }
}

#[cfg(target_arch = "x86_64")]
pub use imp::key_sites;

/// No static keys on this architecture: no sites.
#[cfg(not(target_arch = "x86_64"))]
pub fn key_sites() -> &'static [KeySite] {
    &[]
}

/// The sites of `m` (skipping empty entries).
pub fn sites_of(m: &'static MarkerCore) -> impl Iterator<Item = &'static KeySite> {
    key_sites()
        .iter()
        .filter(move |s| s.site != 0 && core::ptr::eq(s.marker, m))
}
