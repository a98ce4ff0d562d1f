//! The XRay object registry and sled patching.
//!
//! Patching a sled (11 bytes) while other threads may run
//! it: first bytes 2..11 are written (`<id32> e8|e9 <rel32>`: unreachable
//! while the head still jumps over them or is the `ret` of an exit sled),
//! then the 2-byte head (`41 ba`, the start of `mov r10d, id`) with one
//! atomic store. Unpatching stores the original head back (`eb 09`, or the
//! `ret` and the byte after it). Code pages are made writable with one
//! `mprotect` per run of contiguous pages and set back to read + execute.
//! The call targets are stubs (`jmp [rip]` + address) on a page mapped
//! within ±2 GiB of the object, since the trampolines may be farther.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

use super::sleds::{self, Sled, kind};

/// compiler-rt's `XRayPatchingStatus`.
pub mod status {
    /// The runtime found no sleds (or was not initialised).
    pub const NOT_INITIALIZED: i32 = 0;
    /// Done.
    pub const SUCCESS: i32 = 1;
    /// Another thread is patching.
    pub const ONGOING: i32 = 2;
    /// Something failed (bad id, `mprotect` refused).
    pub const FAILED: i32 = 3;
}

/// A loaded object with sleds.
pub struct XObject {
    /// Path of the object.
    pub path: PathBuf,
    /// Lowest mapped address.
    pub start: u64,
    /// Load bias.
    pub bias: u64,
    /// Mapped size.
    pub size: u64,
    /// Its sleds, in section order.
    pub sleds: Vec<Sled>,
    /// Original first two bytes of each sled.
    orig: Vec<[u8; 2]>,
    /// Function start by id - 1.
    pub funcs: Vec<u64>,
    /// Functions never to patch (`#[instrument_fn = "off"]`).
    off: Vec<u64>,
    /// Stub page (entry, exit, tail, log-args stubs at 0, 16, 32, 48).
    stubs: u64,
    /// Still loaded.
    pub alive: bool,
}

/// All objects seen; index = object id (0 = main executable, possibly
/// without sleds).
pub static OBJECTS: Mutex<Vec<XObject>> = Mutex::new(Vec::new());

/// Loaded objects known to have no sleds (start, path).
static NO_SLEDS: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());

/// Function tables for the hot path: object id → leaked `Vec<u64>`.
static FUNCS: [AtomicPtr<Vec<u64>>; 256] = [const { AtomicPtr::new(core::ptr::null_mut()) }; 256];

/// The start address of function `id`, or 0.
#[inline(always)]
pub fn function_address(id: i32) -> u64 {
    let id = id as u32;
    let (obj, fid) = ((id >> 24) as usize, id & 0x00ff_ffff);
    let p = FUNCS[obj].load(Ordering::Acquire);
    if p.is_null() || fid == 0 {
        return 0;
    }
    // SAFETY: published tables are leaked and never changed.
    unsafe { (&*p).get(fid as usize - 1).copied().unwrap_or(0) }
}

/// Finds objects loaded since the last scan and forgets unloaded ones.
/// Returns whether any object has sleds.
pub fn scan() -> bool {
    let mut objs = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    let mut loaded: Vec<(u64, u64, u64, PathBuf)> = vec![];
    crate::procinfo::for_each_module(|m| {
        loaded.push((
            m.start,
            m.size,
            m.bias,
            std::ffi::OsStr::from_bytes(m.path).into(),
        ));
    });
    for o in objs.iter_mut() {
        if o.alive && !loaded.iter().any(|l| l.0 == o.start && l.3 == o.path) {
            o.alive = false;
            // Its code is gone: no more patching, no more ids.
        }
    }
    let mut none = NO_SLEDS.lock().unwrap_or_else(|e| e.into_inner());
    none.retain(|n| loaded.iter().any(|l| l.0 == n.0 && l.3 == n.1));
    for (i, (start, size, bias, path)) in loaded.into_iter().enumerate() {
        if objs
            .iter()
            .any(|o| o.alive && o.start == start && o.path == path)
            || none.iter().any(|n| n.0 == start && n.1 == path)
        {
            continue;
        }
        let found = if path.as_os_str().is_empty() {
            None
        } else {
            sleds::read(&path, bias)
        };
        if found.is_none() && !(i == 0 && objs.is_empty()) {
            none.push((start, path));
            continue;
        }
        let (sl, off_table) = found.map_or((vec![], None), |f| (f.sleds, f.off_table));
        let mut funcs: Vec<u64> = vec![];
        for s in &sl {
            if funcs.len() < s.id as usize {
                funcs.push(s.func);
            }
        }
        let orig = sl
            .iter()
            // SAFETY: sleds are inside the object's mapped, readable text.
            .map(|s| unsafe { [*(s.addr as *const u8), *((s.addr + 1) as *const u8)] })
            .collect();
        let off = off_table.map_or(vec![], |(addr, size)| read_off_table(addr, size));
        let id = objs.len();
        if id >= FUNCS.len() {
            break;
        }
        FUNCS[id].store(Box::into_raw(Box::new(funcs.clone())), Ordering::Release);
        objs.push(XObject {
            path,
            start,
            bias,
            size,
            sleds: sl,
            orig,
            funcs,
            off,
            stubs: 0,
            alive: true,
        });
    }
    objs.iter().any(|o| o.alive && !o.sleds.is_empty())
}

/// Function addresses listed by `#[instrument_fn = "off"]` in the
/// `fntrace_off` table at run-time address `addr` (8-byte addresses,
/// relocated in memory).
fn read_off_table(addr: u64, size: u64) -> Vec<u64> {
    (0..size / 8)
        // SAFETY: the section is allocated (it holds statics) and mapped.
        .map(|i| unsafe { ((addr + 8 * i) as *const u64).read_unaligned() })
        .collect()
}

/// Demangled names of the sled functions of `o` (runtime start address,
/// name), from the object's symbol tables.
pub fn function_names(o: &XObject) -> Vec<(u64, String)> {
    use object::{Object, ObjectSymbol};
    let Some(map) = crate::procinfo::FileMap::open(&o.path) else {
        return vec![];
    };
    let Ok(obj) = object::File::parse(map.as_slice()) else {
        return vec![];
    };
    let mut out = vec![];
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.kind() != object::SymbolKind::Text || sym.address() == 0 {
            continue;
        }
        let Ok(n) = sym.name() else { continue };
        let a = sym.address().wrapping_add(o.bias);
        if o.funcs.contains(&a) {
            out.push((a, crate::filter::demangle(n)));
        }
    }
    out
}

/// Maps the stub page of `o` near it, once.
fn stubs(o: &mut XObject) -> Result<u64, String> {
    if o.stubs != 0 {
        return Ok(o.stubs);
    }
    let targets = super::tramp::targets();
    let near = |p: u64| {
        let lo = o.start.min(p);
        let hi = (o.start + o.size).max(p + 4096);
        hi - lo < (1 << 31) - 4096
    };
    let mut page = 0u64;
    for k in 1..64u64 {
        for hint in [
            o.start.saturating_sub(k << 24) & !0xfff,
            (o.start + o.size + (k << 24)) & !0xfff,
        ] {
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
            let p = unsafe {
                libc::mmap(
                    hint as *mut libc::c_void,
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                continue;
            }
            if near(p as u64) {
                page = p as u64;
                break;
            }
            // SAFETY: unmapping the page we just mapped.
            unsafe { libc::munmap(p, 4096) };
        }
        if page != 0 {
            break;
        }
    }
    if page == 0 {
        return Err(format!(
            "{}: no free page within 2 GiB of it for XRay trampolines",
            o.path.display()
        ));
    }
    for (i, t) in targets.iter().enumerate() {
        let mut stub = [0u8; 16];
        stub[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
        stub[6..14].copy_from_slice(&t.to_le_bytes());
        // SAFETY: the page is ours, writable, 4096 bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(stub.as_ptr(), (page + 16 * i as u64) as *mut u8, 16)
        };
    }
    // SAFETY: our page; from now on it is only executed.
    if unsafe {
        libc::mprotect(
            page as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
        )
    } != 0
    {
        return Err(format!(
            "cannot make the XRay trampoline page executable: {}",
            std::io::Error::last_os_error()
        ));
    }
    o.stubs = page;
    Ok(page)
}

/// Patches (`on`) or unpatches the sleds of `o` selected by `pick`.
fn patch_object(
    obj: usize,
    o: &mut XObject,
    on: bool,
    pick: &dyn Fn(&Sled) -> bool,
) -> Result<usize, String> {
    if !o.alive {
        return Ok(0);
    }
    let stub = if on { stubs(o)? } else { 0 };
    let mut todo: Vec<usize> = (0..o.sleds.len())
        .filter(|&i| {
            let s = &o.sleds[i];
            s.kind <= kind::LOG_ARGS && pick(s) && !(on && o.off.contains(&s.func))
        })
        .collect();
    todo.sort_by_key(|&i| o.sleds[i].addr);
    let page = |a: u64| a & !0xfff;
    let mut k = 0;
    let mut n = 0;
    while k < todo.len() {
        // One run of contiguous pages.
        let first = page(o.sleds[todo[k]].addr);
        let mut last = page(o.sleds[todo[k]].addr + 10);
        let mut end = k + 1;
        while end < todo.len() && page(o.sleds[todo[end]].addr) <= last + 4096 {
            last = last.max(page(o.sleds[todo[end]].addr + 10));
            end += 1;
        }
        let len = (last + 4096 - first) as usize;
        // SAFETY: changes protection of the object's own text pages; they
        // are restored right after.
        let r = unsafe {
            libc::mprotect(
                first as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            )
        };
        if r != 0 {
            return Err(format!(
                "{}: cannot make code writable at {first:#x} ({}); the system forbids \
                 writable code (W^X policy such as SELinux deny_execmem or PaX MPROTECT)",
                o.path.display(),
                std::io::Error::last_os_error()
            ));
        }
        for &i in &todo[k..end] {
            let s = o.sleds[i];
            if on {
                write_patched(&s, (obj as u32) << 24 | s.id, stub);
            } else {
                store_head(s.addr, o.orig[i]);
            }
            n += 1;
        }
        // SAFETY: as above; text is read + execute again.
        unsafe {
            libc::mprotect(
                first as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_EXEC,
            )
        };
        k = end;
    }
    Ok(n)
}

/// Writes the call (or jump) of a patched sled, head last.
fn write_patched(s: &Sled, id: u32, stub: u64) {
    let (target, op) = match s.kind {
        kind::ENTRY => (stub, 0xe8u8),
        kind::EXIT => (stub + 16, 0xe9),
        kind::TAIL => (stub + 32, 0xe8),
        _ => (stub + 48, 0xe8),
    };
    let rel = (target as i64 - (s.addr as i64 + 11)) as i32;
    let mut b = [0u8; 11];
    b[0] = 0x41;
    b[1] = 0xba;
    b[2..6].copy_from_slice(&id.to_le_bytes());
    b[6] = op;
    b[7..11].copy_from_slice(&rel.to_le_bytes());
    // SAFETY: the page is writable (caller); bytes 2..11 are not executed
    // while the head is unpatched (a jump over them, or a `ret` before
    // them); identical bytes are rewritten when already patched.
    unsafe {
        for (j, &x) in b.iter().enumerate().skip(2) {
            core::ptr::write_volatile((s.addr + j as u64) as *mut u8, x);
        }
    }
    store_head(s.addr, [b[0], b[1]]);
}

/// Stores a sled's first two bytes with one store. Exit sleds need not be
/// 2-byte aligned; x86 makes a 16-bit store atomic when it does not cross
/// a cache line, so one `mov word` is used; a head split across two lines
/// (never seen from LLVM) is written byte by byte, tail first.
fn store_head(addr: u64, head: [u8; 2]) {
    let v = u16::from_le_bytes(head);
    if addr % 64 != 63 {
        // SAFETY: inside a writable text page (the caller's mprotect);
        // other threads see the old or the new two bytes.
        unsafe {
            core::arch::asm!(
                "mov word ptr [{a}], {v:x}",
                a = in(reg) addr,
                v = in(reg) v,
                options(nostack, preserves_flags),
            );
        }
    } else {
        // SAFETY: as above.
        unsafe {
            core::ptr::write_volatile((addr + 1) as *mut u8, head[1]);
            core::ptr::write_volatile(addr as *mut u8, head[0]);
        }
    }
}

/// Serialises patching (`ONGOING` for a second patcher).
static PATCHING: Mutex<()> = Mutex::new(());

/// Patches or unpatches every function (`pick` selects sleds).
pub fn patch_where(on: bool, pick: &dyn Fn(&Sled) -> bool) -> Result<usize, i32> {
    let Ok(_g) = PATCHING.try_lock() else {
        return Err(status::ONGOING);
    };
    scan();
    let mut objs = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    if !objs.iter().any(|o| !o.sleds.is_empty()) {
        return Err(status::NOT_INITIALIZED);
    }
    let mut n = 0;
    for (i, o) in objs.iter_mut().enumerate() {
        match patch_object(i, o, on, pick) {
            Ok(k) => n += k,
            Err(e) => {
                eprintln!("fntrace: {e}");
                return Err(status::FAILED);
            }
        }
    }
    Ok(n)
}

/// Patches or unpatches one function by (packed) id.
pub fn patch_function(id: i32, on: bool) -> i32 {
    let func = function_address(id);
    if func == 0 {
        return status::FAILED;
    }
    let obj = (id as u32 >> 24) as usize;
    let Ok(_g) = PATCHING.try_lock() else {
        return status::ONGOING;
    };
    let mut objs = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(o) = objs.get_mut(obj) else {
        return status::FAILED;
    };
    match patch_object(obj, o, on, &|s| s.func == func) {
        Ok(_) => status::SUCCESS,
        Err(e) => {
            eprintln!("fntrace: {e}");
            status::FAILED
        }
    }
}

/// The highest function id of the main executable.
pub fn max_function_id() -> usize {
    scan();
    let objs = OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    objs.first().map(|o| o.funcs.len()).unwrap_or(0)
}
