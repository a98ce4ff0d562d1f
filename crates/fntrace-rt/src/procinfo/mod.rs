//! What the trace needs to know about the process: its loaded ELF objects
//! (path, build id, load bias, extent) from `dl_iterate_phdr`, its command
//! line, and thread ids and names. Used at session start and thread attach,
//! never on the event hot path. Also the symbols of loaded objects
//! ([`module_functions`], [`demangle`]).

use std::ffi::CStr;

pub mod policy;
mod symbols;
pub use symbols::{demangle, module_function_starts, module_functions, module_symbols};

/// One loaded object, as [`for_each_module`] reports it.
pub struct LoadedModule<'a> {
    /// Load bias.
    pub bias: u64,
    /// Lowest mapped address of its PT_LOAD segments.
    pub start: u64,
    /// Bytes up to the end of the highest PT_LOAD segment.
    pub size: u64,
    /// GNU build id, possibly empty.
    pub build_id: &'a [u8],
    /// Path (the main executable's is read from `/proc/self/exe`).
    pub path: &'a [u8],
}

const NT_GNU_BUILD_ID: u32 = 3;

/// Finds the GNU build id in a PT_NOTE segment of `len` bytes at `addr`.
///
/// # Safety
/// `addr..addr+len` must be a mapped, readable note segment of a loaded
/// object.
unsafe fn build_id_in_note(addr: usize, len: usize) -> Option<&'static [u8]> {
    let mut off = 0usize;
    while off + 12 <= len {
        // SAFETY: `off + 12 <= len`, so the 12-byte note header is inside the
        // segment the caller vouched for; reads are unaligned-safe.
        let (namesz, descsz, ntype) = unsafe {
            let p = (addr + off) as *const u32;
            (
                p.read_unaligned() as usize,
                p.add(1).read_unaligned() as usize,
                p.add(2).read_unaligned(),
            )
        };
        let name_off = off + 12;
        let desc_off = name_off + namesz.div_ceil(4) * 4;
        let next = desc_off + descsz.div_ceil(4) * 4;
        if next > len {
            return None;
        }
        if ntype == NT_GNU_BUILD_ID && namesz == 4 {
            // SAFETY: name and descriptor lie inside the segment (checked
            // against `len` above); loaded segments stay mapped while the
            // object is loaded, which outlives this call.
            let (name, desc) = unsafe {
                (
                    core::slice::from_raw_parts((addr + name_off) as *const u8, 4),
                    core::slice::from_raw_parts((addr + desc_off) as *const u8, descsz),
                )
            };
            if name == b"GNU\0" {
                return Some(desc);
            }
        }
        off = next;
    }
    None
}

/// Every object loaded in the process, the main executable first, as
/// owned `(start, size, bias, path)` (see [`LoadedModule`]).
pub fn loaded_objects() -> Vec<(u64, u64, u64, std::path::PathBuf)> {
    use std::os::unix::ffi::OsStrExt;
    let mut v = vec![];
    for_each_module(|m| {
        v.push((
            m.start,
            m.size,
            m.bias,
            std::ffi::OsStr::from_bytes(m.path).into(),
        ))
    });
    v
}

/// Start address of the object that is the preload runtime itself
/// (`libfntrace_preload.so`, found by the `fntrace_preload_marker` symbol
/// it exports, in the object that holds this code), if this runtime is
/// that library: it is never instrumented, so the scans that read every
/// object's symbols, sites and sections skip it (its symbol table is the
/// largest in most processes). `None` when the runtime is linked into the
/// program.
pub fn own_preload_start() -> Option<u64> {
    static OWN: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| {
        let here = own_preload_start as *const () as u64;
        // SAFETY: a NUL-terminated symbol name; dlsym only looks it up.
        let marker =
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"fntrace_preload_marker".as_ptr()) } as u64;
        let objects = loaded_objects();
        let (i, o) = objects
            .iter()
            .enumerate()
            .find(|(_, o)| here >= o.0 && here < o.0 + o.1)?;
        (i > 0 && marker >= o.0 && marker < o.0 + o.1).then_some(o.0)
    })
}

/// Calls `f` for every object loaded in the process, the main executable
/// first.
pub fn for_each_module(mut f: impl FnMut(&LoadedModule<'_>)) {
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.into_os_string().into_encoded_bytes())
        .unwrap_or_default();
    struct Ctx<'a> {
        exe: &'a [u8],
        f: &'a mut dyn FnMut(&LoadedModule<'_>),
    }
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `Ctx` passed to dl_iterate_phdr below, alive
        // for the whole iteration; `info` is valid for this callback.
        let (ctx, info) = unsafe { (&mut *(data as *mut Ctx<'_>), &*info) };
        let bias = info.dlpi_addr;
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        let mut build_id: &[u8] = &[];
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: the loader guarantees `dlpi_phdr` points at
            // `dlpi_phnum` program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            match ph.p_type {
                libc::PT_LOAD => {
                    lo = lo.min(bias + ph.p_vaddr);
                    hi = hi.max(bias + ph.p_vaddr + ph.p_memsz);
                }
                libc::PT_NOTE if build_id.is_empty() => {
                    // SAFETY: PT_NOTE segments of a loaded object are mapped
                    // readable at bias + p_vaddr for p_memsz bytes.
                    if let Some(id) = unsafe {
                        build_id_in_note((bias + ph.p_vaddr) as usize, ph.p_memsz as usize)
                    } {
                        build_id = id;
                    }
                }
                _ => {}
            }
        }
        if lo >= hi {
            return 0;
        }
        let name: &[u8] = if info.dlpi_name.is_null() {
            b""
        } else {
            // SAFETY: a non-null `dlpi_name` is a NUL-terminated string.
            unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
        };
        // The main program has an empty name; the vDSO is named
        // "linux-vdso.so.1" and has no file.
        let path = if name.is_empty() { ctx.exe } else { name };
        if path.is_empty() {
            return 0;
        }
        (ctx.f)(&LoadedModule {
            bias,
            start: lo,
            size: hi - lo,
            build_id,
            path,
        });
        0
    }
    let mut ctx = Ctx {
        exe: &exe,
        f: &mut f,
    };
    // SAFETY: `cb` matches the callback type and only dereferences `ctx`,
    // which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(cb), &mut ctx as *mut Ctx<'_> as *mut libc::c_void) };
}

/// Runs `f` with every asynchronous signal blocked in the calling thread,
/// then restores its mask. `SIGTRAP` and the signals of faults stay
/// unblocked: code patching and crash handling need them. Two uses:
/// - around starting one of the runtime's own threads, so that it starts
///   with them blocked and keeps them so: a process-directed signal (the
///   `SIGPROF` of a `-pg` program's profiling timer, a `SIGINT`, a
///   `SIGCHLD`) then goes to one of the program's threads, as without the
///   runtime. (A `SIGPROF` taken by a runtime thread once killed a `-pg`
///   program whose threads all blocked it: it arrived after glibc's exit
///   code had restored the default action.)
/// - around code written in place without the `int3` protocol (no other
///   thread exists), so that no signal handler of the program runs on
///   this thread while an instruction is half written.
pub fn with_async_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset_t is plain data, filled in by sigfillset/
    // pthread_sigmask before use; the mask is the calling thread's own and
    // restored before returning.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        for s in [
            libc::SIGTRAP,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGABRT,
        ] {
            libc::sigdelset(&mut all, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        r
    }
}

/// Starts one of the runtime's own threads that must count as such for
/// code rewriting ([`other_threads`]): announced first, registered as the
/// first thing it does and forgotten when `f` returns, started with the
/// program's signals blocked ([`with_async_signals_blocked`]). The caller
/// does not wait for it to run.
pub fn spawn_runtime_thread(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    expect_runtime_thread();
    let r = with_async_signals_blocked(|| {
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(256 << 10)
            .spawn(move || {
                register_runtime_thread();
                f();
                unregister_runtime_thread();
            })
    });
    if r.is_err() {
        runtime_thread_failed();
    }
    r.map(drop)
}

/// Threads the runtime itself started (the recorder's helper thread),
/// which never run the program's code: rewriting the program's code is as
/// safe with them running as without.
static RUNTIME_TIDS: [std::sync::atomic::AtomicU32; 8] =
    [const { std::sync::atomic::AtomicU32::new(0) }; 8];

/// Runtime threads being started that have not registered yet (see
/// [`expect_runtime_thread`]).
static PENDING_RUNTIME: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Announces a runtime thread about to be started, which will call
/// [`register_runtime_thread`] first thing (or [`runtime_thread_failed`]
/// if it could not be started): the starter need not wait for it, and
/// [`other_threads`] waits for it instead, only when asked.
pub fn expect_runtime_thread() {
    PENDING_RUNTIME.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
}

/// A thread announced by [`expect_runtime_thread`] could not be started.
pub fn runtime_thread_failed() {
    let _ = PENDING_RUNTIME.fetch_update(
        std::sync::atomic::Ordering::AcqRel,
        std::sync::atomic::Ordering::Acquire,
        |n| n.checked_sub(1),
    );
}

/// Registers the calling thread as one of the runtime's own (see
/// [`other_threads`]); false when the table is full.
pub fn register_runtime_thread() -> bool {
    use std::sync::atomic::Ordering;
    let me = gettid();
    let ok = RUNTIME_TIDS.iter().any(|s| {
        s.compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    runtime_thread_failed();
    ok
}

/// Forgets the calling thread as one of the runtime's own (it is ending).
pub fn unregister_runtime_thread() {
    use std::sync::atomic::Ordering;
    let me = gettid();
    for s in &RUNTIME_TIDS {
        let _ = s.compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// The process's threads other than the calling one and the runtime's own
/// ([`register_runtime_thread`]); `None` if `/proc/self/task` cannot be
/// read.
pub fn other_threads() -> Option<usize> {
    use std::sync::atomic::Ordering;
    // A runtime thread just started shows in `/proc/self/task` before it
    // registers: wait for it (it registers first thing; 1 s at most).
    let mut waited = 0;
    while PENDING_RUNTIME.load(Ordering::Acquire) > 0 && waited < 10_000 {
        std::thread::sleep(std::time::Duration::from_micros(100));
        waited += 1;
    }
    let me = gettid();
    let d = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        d.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&t| t != me && !RUNTIME_TIDS.iter().any(|s| s.load(Ordering::Acquire) == t))
            .count(),
    )
}

/// The kernel thread id of the calling thread.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// The calling thread's name (at most 15 bytes, from `prctl(PR_GET_NAME)`).
pub fn thread_name(buf: &mut [u8; 16]) -> &[u8] {
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into `buf`.
    let r = unsafe {
        libc::prctl(
            libc::PR_GET_NAME,
            buf.as_mut_ptr() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if r != 0 {
        return &[];
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    &buf[..n]
}

/// The raw `/proc/self/cmdline` (NUL-separated arguments), capped at `max`
/// bytes.
pub fn cmdline(max: usize) -> Vec<u8> {
    let mut v = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    v.truncate(max);
    v
}

/// The executable's path.
pub fn exe_path() -> Vec<u8> {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.into_os_string().into_encoded_bytes())
        .unwrap_or_default()
}

/// A read-only private mapping of a whole file (ELF files are parsed in
/// place instead of being read into memory).
pub(crate) struct FileMap {
    p: *mut libc::c_void,
    len: usize,
}

impl FileMap {
    /// Maps `path`; `None` if it cannot be opened or is empty.
    pub(crate) fn open(path: &std::path::Path) -> Option<FileMap> {
        use std::os::unix::io::AsRawFd;
        let file = std::fs::File::open(path).ok()?;
        let len = file.metadata().ok()?.len() as usize;
        if len == 0 {
            return None;
        }
        // SAFETY: a fresh read-only private mapping of an open file. If the
        // file is truncated while mapped, reads past its end fault; the
        // objects mapped are loaded code, which is not rewritten in place.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(FileMap { p, len })
    }

    /// The file's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `p` maps `len` readable bytes for the life of `self`.
        unsafe { core::slice::from_raw_parts(self.p.cast(), self.len) }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.p, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_module_first_with_build_id_and_extent() {
        let mut mods = vec![];
        for_each_module(|m| mods.push((m.path.to_vec(), m.start, m.size, m.build_id.to_vec())));
        assert!(!mods.is_empty());
        assert_eq!(mods[0].0, exe_path());
        let here = main_module_first_with_build_id_and_extent as *const () as usize as u64;
        assert!(mods.iter().any(|m| here >= m.1 && here < m.1 + m.2));
        // Rust binaries are linked with a GNU build id by default here.
        assert!(mods.iter().any(|m| !m.3.is_empty()));
    }

    #[test]
    fn thread_names() {
        let mut b = [0u8; 16];
        let t = std::thread::Builder::new()
            .name("fntrace-test-th".into())
            .spawn(move || thread_name(&mut b).to_vec())
            .unwrap();
        assert_eq!(t.join().unwrap(), b"fntrace-test-th");
        assert!(gettid() > 0);
    }
}
