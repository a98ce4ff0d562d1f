//! Library calls (`fntrace record --libcalls[=REGEX]`): calls from the
//! executable and from instrumented libraries into shared libraries,
//! recorded through the callers' GOT slots, with no change to the
//! libraries themselves.
//!
//! Every call an object makes to a function of another object goes through
//! an 8-byte GOT slot: the PLT entry jumps through its `R_X86_64_JUMP_SLOT`
//! slot (bound lazily, or at start-up with `-z now`), and `-fno-plt` code
//! calls through an `R_X86_64_GLOB_DAT` slot directly. For each selected
//! slot this module writes a 48-byte stub (one per library function,
//! shared by every slot bound to it) and stores the stub's address into the
//! slot with [`crate::patch::got::store`] (one aligned 8-byte store; RELRO
//! pages get a short `mprotect` window). The stub jumps to
//! [`tramp::fntrace_libcall_entry`], which records the entry with the
//! stub's address as the function key, takes over the return address like
//! `__fentry__` does (so the exit is recorded when the function returns,
//! through the shared exit trampoline), and jumps to the real function.
//!
//! The real function is the slot's current value when it is already bound;
//! a lazily bound slot that still points into the object's own PLT is
//! resolved with `dlsym(RTLD_DEFAULT, name)` (which also runs IFUNC
//! resolvers), so the dynamic linker's resolver never runs for it and
//! never overwrites the stub.
//!
//! Which objects: the main executable and every object that is itself
//! instrumented (calls `mcount`/`__fentry__`/`__cyg_profile_func_*`, or has
//! XRay sleds, patchable entries or an `__mcount_loc` table), at start and
//! after each `dlopen`. Which slots: those bound to a function symbol
//! matching the pattern, defined in another object than the caller, not
//! in this runtime or the dynamic linker, and not in `DENY`: functions
//! that never return (their frames would stay open), that read or reuse
//! their return address or stack (`setjmp`, `vfork`, `dlsym(RTLD_NEXT)`,
//! which finds the next object after its *caller*), or that run before
//! anything can be recorded.
//!
//! Each stub's key is described once per session in the metadata stream
//! (a library-function record: key, symbol, library path), so readers name
//! its calls `memcpy@libc.so.6`.
//!
//! Known limits: taking the address of an imported function through a
//! `GLOB_DAT` slot in a hooked object gives the stub's address (calls
//! through it are recorded too; comparing it with the same function's
//! address taken in another object gives "different"). Calls that do not
//! go through the caller's GOT (inlined, or through a function pointer
//! obtained elsewhere) are not seen.

pub mod tramp;

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::patch::got;

/// Bytes per stub.
const STUB: usize = 48;

/// Functions whose calls are never hooked (see the module documentation).
const DENY: &[&str] = &[
    "__libc_start_main",
    "__libc_start_call_main",
    "exit",
    "_exit",
    "_Exit",
    "quick_exit",
    "abort",
    "pthread_exit",
    "thrd_exit",
    "__assert_fail",
    "__stack_chk_fail",
    "__chk_fail",
    "__fortify_fail",
    "err",
    "errx",
    "verr",
    "verrx",
    "longjmp",
    "_longjmp",
    "siglongjmp",
    "__longjmp_chk",
    "setjmp",
    "_setjmp",
    "__setjmp",
    "sigsetjmp",
    "__sigsetjmp",
    "getcontext",
    "setcontext",
    "swapcontext",
    "makecontext",
    "vfork",
    "__vfork",
    "clone",
    "clone3",
    "__clone",
    "__tls_get_addr",
    "__cxa_throw",
    "__cxa_rethrow",
    "__cxa_finalize",
    "_Unwind_Resume",
    "mcount",
    "_mcount",
    "__fentry__",
    "__cyg_profile_func_enter",
    "__cyg_profile_func_exit",
    "dlopen",
    "dlmopen",
    "dlsym",
    "dlvsym",
    "dlclose",
    "dladdr",
    "dladdr1",
    "dlinfo",
    "dlerror",
    "__gmon_start__",
];

/// One library function with a stub.
struct Func {
    key: u64,
    symbol: String,
    library: PathBuf,
}

#[derive(Default)]
struct State {
    /// The pattern of the running selection (`None`: not started).
    pattern: Option<regex_lite::Regex>,
    /// Stub address (the key) by real target.
    by_target: HashMap<u64, u64>,
    funcs: Vec<Func>,
    /// Stub pages (start, length): a slot holding an address inside one is
    /// already hooked.
    pages: Vec<(u64, u64)>,
    /// Objects already scanned, as (start, bias, path).
    scanned: HashSet<(u64, u64, PathBuf)>,
    /// Slots changed, to put back at [`stop`].
    redirected: Vec<got::Redirected>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Starts hooking library calls whose symbol matches `pattern` in every
/// selected object loaded now, and (through [`scan`]) later. Returns the
/// number of slots hooked; an invalid pattern is an error.
pub fn start(pattern: &str) -> Result<usize, String> {
    let re = regex_lite::Regex::new(pattern).map_err(|e| format!("--libcalls {pattern:?}: {e}"))?;
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let st = g.get_or_insert_with(State::default);
    st.pattern = Some(re);
    Ok(scan_locked(st))
}

/// Hooks the selected objects loaded since the last scan (after
/// `dlopen`); nothing when [`start`] was not called.
pub fn scan() -> usize {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    match g.as_mut() {
        Some(st) if st.pattern.is_some() => scan_locked(st),
        _ => 0,
    }
}

/// Puts every hooked slot back (detaching); stubs stay mapped (a thread
/// may still be inside one) and are reused by a later [`start`].
pub fn stop() {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(st) = g.as_mut() {
        got::restore(&st.redirected);
        st.redirected.clear();
        st.scanned.clear();
        st.pattern = None;
    }
}

/// Writes a library-function record for every stub into the active
/// session (at its start).
pub fn describe_all() {
    let g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(st) = g.as_ref() {
        for f in &st.funcs {
            describe(f);
        }
    }
}

/// [`describe_all`] in a forked child's new session: the lock may have
/// been held by a thread of the parent that does not exist here (a scan
/// after `dlopen`); then the child's trace names its library calls by
/// address only, rather than waiting forever.
pub fn describe_all_after_fork() {
    let g = match STATE.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    if let Some(st) = g.as_ref() {
        for f in &st.funcs {
            describe(f);
        }
    }
}

fn describe(f: &Func) {
    use std::os::unix::ffi::OsStrExt;
    crate::recorder::note_libfunc(f.key, f.symbol.as_bytes(), f.library.as_os_str().as_bytes());
}

/// The object (path) that defines `addr`, from the dynamic linker.
fn object_of(addr: u64) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: all-zero is a valid `Dl_info`; dladdr only reads `addr`.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(addr as *const _, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated name owned by the linker.
    let name = unsafe { core::ffi::CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

/// Whether an object's file is the dynamic linker.
fn is_ld_so(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n.starts_with("ld-linux") || n.starts_with("ld64.so") || n.starts_with("ld.so")
    })
}

/// One slot that may be hooked: its address and symbol.
struct Candidate {
    slot: u64,
    symbol: String,
}

/// The function-symbol GOT slots of an object's file, and whether the
/// object is instrumented.
fn read_object(path: &Path, bias: u64) -> Option<(Vec<Candidate>, bool)> {
    use object::elf;
    use object::{Object as _, ObjectSection as _, ObjectSymbol, ObjectSymbolTable, SymbolKind};
    let map = crate::procinfo::FileMap::open(path)?;
    let obj = object::File::parse(map.as_slice()).ok()?;
    let relocs = obj.dynamic_relocations()?;
    let dynsym = obj.dynamic_symbol_table()?;
    let mut instrumented = obj.sections().any(|s| {
        matches!(
            s.name(),
            Ok("xray_instr_map" | "__patchable_function_entries" | "__mcount_loc")
        )
    });
    let mut v = vec![];
    for (offset, r) in relocs {
        let object::RelocationTarget::Symbol(i) = r.target() else {
            continue;
        };
        let object::RelocationFlags::Elf { r_type } = r.flags() else {
            continue;
        };
        if r_type != elf::R_X86_64_JUMP_SLOT && r_type != elf::R_X86_64_GLOB_DAT {
            continue;
        }
        let Ok(sym) = dynsym.symbol_by_index(i) else {
            continue;
        };
        let Ok(name) = sym.name() else { continue };
        if matches!(
            name,
            "mcount"
                | "_mcount"
                | "__fentry__"
                | "__cyg_profile_func_enter"
                | "__cyg_profile_func_exit"
        ) {
            instrumented = true;
        }
        // Only functions (a JUMP_SLOT is always one; a GLOB_DAT may hold
        // data); defined symbols are the object's own (copy relocations,
        // canonical PLT entries of a non-PIE executable are still calls
        // into the library and are undefined here).
        let func = r_type == elf::R_X86_64_JUMP_SLOT || matches!(sym.kind(), SymbolKind::Text);
        if !func || !sym.is_undefined() && r_type == elf::R_X86_64_GLOB_DAT {
            continue;
        }
        v.push(Candidate {
            slot: offset.wrapping_add(bias),
            symbol: name.to_string(),
        });
    }
    v.sort_unstable_by_key(|c| c.slot);
    v.dedup_by_key(|c| c.slot);
    Some((v, instrumented))
}

fn scan_locked(st: &mut State) -> usize {
    let own = object_of(start as *const () as u64);
    let objects = crate::procinfo::loaded_objects();
    st.scanned.retain(|k| {
        objects
            .iter()
            .any(|o| o.0 == k.0 && o.2 == k.1 && o.3 == k.2)
    });
    let mut hooked = 0;
    let mut new_funcs: Vec<(u64, String, PathBuf)> = vec![];
    let mut pending: Vec<(u64, u64)> = vec![];
    for (i, (ostart, osize, bias, path)) in objects.iter().enumerate() {
        let key = (*ostart, *bias, path.clone());
        if path.as_os_str().is_empty() || st.scanned.contains(&key) {
            continue;
        }
        st.scanned.insert(key);
        if own.as_deref() == Some(path.as_path()) || is_ld_so(path) {
            continue;
        }
        let Some((cands, instrumented)) = read_object(path, *bias) else {
            continue;
        };
        if i != 0 && !instrumented {
            continue;
        }
        let inside = |a: u64| a >= *ostart && a - *ostart < *osize;
        for c in cands {
            let Some(re) = st.pattern.as_ref() else { break };
            if DENY.contains(&c.symbol.as_str())
                || c.symbol.starts_with("_dl_")
                || !re.is_match(&c.symbol)
            {
                continue;
            }
            // SAFETY: a GOT slot of a loaded object, found from its
            // relocations: mapped, aligned, 8 bytes.
            let cur = unsafe { (c.slot as *const u64).read_volatile() };
            if cur == 0 || st.pages.iter().any(|&(a, l)| cur >= a && cur < a + l) {
                continue;
            }
            let target = if inside(cur) {
                // Not bound yet (lazy binding): resolve it as the linker
                // would, from the global scope.
                let Ok(n) = CString::new(c.symbol.as_str()) else {
                    continue;
                };
                // SAFETY: a NUL-terminated name; dlsym is thread-safe.
                let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, n.as_ptr()) } as u64;
                if p == 0 || inside(p) {
                    continue;
                }
                p
            } else {
                cur
            };
            let Some(lib) = object_of(target) else {
                continue;
            };
            if own.as_deref() == Some(lib.as_path()) || is_ld_so(&lib) || lib == *path {
                continue;
            }
            if !st.by_target.contains_key(&target) && !new_funcs.iter().any(|f| f.0 == target) {
                new_funcs.push((target, c.symbol, lib));
            }
            pending.push((c.slot, target));
        }
    }
    // Stubs for the new functions, written into fresh pages that are then
    // made read-only and executable (never written again).
    if !new_funcs.is_empty() {
        let len = (new_funcs.len() * STUB).div_ceil(4096) * 4096;
        // SAFETY: a fresh anonymous mapping, private to us.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            crate::diag::diag!(
                "fntrace: --libcalls: cannot map stubs: {}",
                std::io::Error::last_os_error()
            );
            return 0;
        }
        let base = p as u64;
        let first_new = st.funcs.len();
        let entry = tramp::fntrace_libcall_entry as *const () as u64;
        for (k, (target, symbol, lib)) in new_funcs.drain(..).enumerate() {
            let at = base + (k * STUB) as u64;
            let code = stub_code(at, entry, target);
            // SAFETY: inside the fresh writable mapping (len covers every stub).
            unsafe { core::ptr::copy_nonoverlapping(code.as_ptr(), at as *mut u8, STUB) };
            st.by_target.insert(target, at);
            st.funcs.push(Func {
                key: at,
                symbol,
                library: lib,
            });
        }
        // SAFETY: our own mapping; from now on it is only executed.
        if unsafe { libc::mprotect(p, len, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
            crate::diag::diag!(
                "fntrace: --libcalls: cannot make stubs executable (W^X policy?): {}",
                std::io::Error::last_os_error()
            );
            return 0;
        }
        st.pages.push((base, len as u64));
        // Describe them now, so that a crash still names them.
        for f in &st.funcs[first_new..] {
            describe(f);
        }
    }
    for (slot, target) in pending {
        let Some(&stub) = st.by_target.get(&target) else {
            continue;
        };
        if let Some(original) = got::store(slot, stub) {
            st.redirected.push(got::Redirected {
                object: PathBuf::new(),
                symbol: "",
                slot,
                original,
                target: stub,
            });
            hooked += 1;
        }
    }
    hooked
}

/// The stub at `at` for the function at `target`, entering through `entry`:
///
/// ```text
/// +0   f3 0f 1e fa            endbr64
/// +4   4c 8d 1d 15 00 00 00   lea r11, [rip + 0x15]     ; r11 = +32, the descriptor
/// +11  ff 25 07 00 00 00      jmp [rip + 7]             ; to the entry trampoline
/// +17  cc × 7
/// +24  <u64>                  address of the entry trampoline
/// +32  <u64>                  key (the stub's own address)
/// +40  <u64>                  the real function
/// ```
pub fn stub_code(at: u64, entry: u64, target: u64) -> [u8; STUB] {
    let mut b = [0xccu8; STUB];
    b[0..4].copy_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa]);
    b[4..11].copy_from_slice(&[0x4c, 0x8d, 0x1d, 0x15, 0, 0, 0]);
    b[11..17].copy_from_slice(&[0xff, 0x25, 0x07, 0, 0, 0]);
    b[24..32].copy_from_slice(&entry.to_le_bytes());
    b[32..40].copy_from_slice(&at.to_le_bytes());
    b[40..48].copy_from_slice(&target.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_layout() {
        let b = stub_code(0x1000, 0x2000, 0x3000);
        // lea r11, [rip + d]: rip is the end of the lea (+11).
        let d = i32::from_le_bytes(b[7..11].try_into().unwrap()) as usize;
        assert_eq!(11 + d, 32);
        // jmp [rip + d]: rip is +17.
        let d = i32::from_le_bytes(b[13..17].try_into().unwrap()) as usize;
        assert_eq!(17 + d, 24);
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 0x2000);
        assert_eq!(u64::from_le_bytes(b[32..40].try_into().unwrap()), 0x1000);
        assert_eq!(u64::from_le_bytes(b[40..48].try_into().unwrap()), 0x3000);
    }
}
