//! Changing a 5-byte instruction while other threads may execute it: the
//! breakpoint protocol (as Linux's `text_poke_bp`).
//!
//! 1. write `int3` (`cc`) over the first byte, serialise every core;
//! 2. write bytes 1–4, serialise;
//! 3. write the new first byte, serialise.
//!
//! Many sites go through it in pipelined batches ([`poke5`]).
//!
//! A thread that reaches the site during the change either runs the old
//! instruction, the new one, or traps on the `int3`. The `SIGTRAP` handler
//! recognises sites by their address (every patchable site is registered
//! here first, with [`register`]) and steers the thread: while the site
//! still holds `cc` it continues after the 5 bytes, which is what a 5-byte
//! NOP does; once the site is complete (the trap was delivered after the
//! last write) it re-executes the site. This is correct because every user
//! of this module toggles a site between a 5-byte NOP and something else
//! (`call`, `jmp`): skipping the site is one of the two states. The
//! exceptions, sites registered with [`register_resume`], change between
//! two states that are not NOPs (two jumps; a `call __fentry__` and the
//! jump to its call wrapper; a 6-byte call and a NOP); a trap there
//! continues at the registered address, which does what one of the two
//! states does. Traps at other addresses go to the handler the program
//! had installed before.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use super::text::{self, Writable};

/// The canonical 5-byte NOP (`nopl 0(%rax,%rax,1)`).
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// Registered site tables: leaked sorted address arrays, never freed.
const TABLES: usize = 512;
static SITES: [AtomicPtr<Vec<u64>>; TABLES] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; TABLES];
static NSITES: AtomicUsize = AtomicUsize::new(0);
static REGISTER: Mutex<()> = Mutex::new(());

/// Registers addresses of 5-byte sites that [`poke5`] may change (the
/// `SIGTRAP` handler recognises only these). Returns false when the
/// registry is full (then the sites must not be patched live).
pub fn register(mut addrs: Vec<u64>) -> bool {
    if addrs.is_empty() {
        return true;
    }
    addrs.sort_unstable();
    addrs.dedup();
    let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
    let n = NSITES.load(Ordering::Acquire);
    if n >= TABLES {
        return false;
    }
    SITES[n].store(Box::into_raw(Box::new(addrs)), Ordering::Release);
    NSITES.store(n + 1, Ordering::Release);
    true
}

/// Registered tables of sites that toggle between two jumps (an mcount
/// function's moved prologue and its wrapper): leaked arrays of (site,
/// where a thread that traps there resumes), sorted by site.
static RESUME: [AtomicPtr<Vec<(u64, u64)>>; TABLES] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; TABLES];
static NRESUME: AtomicUsize = AtomicUsize::new(0);

/// Registers sites whose two states are not both covered by skipping 5
/// bytes (two jumps, a hook call and a jump, a 6-byte call): a thread
/// that traps on one while it changes resumes at its `resume` address
/// (where one of the two states goes) instead of skipping 5 bytes. Returns false
/// when the registry is full (then the sites must not be patched live).
pub fn register_resume(mut items: Vec<(u64, u64)>) -> bool {
    if items.is_empty() {
        return true;
    }
    items.sort_unstable();
    items.dedup_by_key(|i| i.0);
    let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
    let n = NRESUME.load(Ordering::Acquire);
    if n >= TABLES {
        return false;
    }
    RESUME[n].store(Box::into_raw(Box::new(items)), Ordering::Release);
    NRESUME.store(n + 1, Ordering::Release);
    true
}

/// Where a thread trapping on resume site `addr` continues, if it is one.
/// Async-signal-safe, like [`is_site`].
fn resume_of(addr: u64) -> Option<u64> {
    let n = NRESUME.load(Ordering::Acquire);
    RESUME[..n].iter().find_map(|t| {
        let p = t.load(Ordering::Acquire);
        // SAFETY: published tables are leaked and never changed.
        let v = (!p.is_null()).then(|| unsafe { &*p })?;
        v.binary_search_by_key(&addr, |i| i.0).ok().map(|k| v[k].1)
    })
}

/// Whether `addr` is a registered site. Async-signal-safe: reads only
/// published, immutable tables.
pub fn is_site(addr: u64) -> bool {
    let n = NSITES.load(Ordering::Acquire);
    SITES[..n].iter().any(|t| {
        let p = t.load(Ordering::Acquire);
        // SAFETY: published tables are leaked and never changed.
        !p.is_null() && unsafe { (*p).binary_search(&addr).is_ok() }
    })
}

/// Traps on registered sites handled so far (threads that reached a site
/// while it changed), for the attach benchmark.
static TRAPS: AtomicUsize = AtomicUsize::new(0);

/// How many traps on registered sites were handled so far.
pub fn traps() -> usize {
    TRAPS.load(Ordering::Relaxed)
}

/// Advanced by [`poke5`] after each serialisation (a futex word: threads
/// that trapped wait for it to move).
static PROGRESS: AtomicU32 = AtomicU32::new(0);
/// Threads waiting on [`PROGRESS`] (the patcher wakes them only if any).
static WAITERS: AtomicU32 = AtomicU32::new(0);
/// The thread running [`poke5`] (0: none); it never waits for itself.
static PATCHER: AtomicI32 = AtomicI32::new(0);
/// How long a thread that trapped waits for the patcher at most.
const WAIT_NS: i64 = 1_000_000;

/// In a forked child: the patcher is a thread of the parent (a child
/// forked in the middle of a change keeps its `int3`s, which then behave
/// as the NOP, without waiting).
extern "C" fn forget_patcher() {
    PATCHER.store(0, Ordering::Release);
}

/// Called by a thread that trapped on a site still holding its `int3`:
/// sleeps until the patcher moves on (or 1 ms) instead of running on and
/// trapping again at once. A patching thread preempted with sites armed
/// otherwise has every thread of the program trapping in a loop on them,
/// busy, while it waits for a processor (10–25 ms and thousands of traps
/// with 10,000 sites and 8 threads on 2 cores); sleeping, they leave it
/// the processor. Async-signal-safe (atomics and `futex`); keeps `errno`.
fn wait_for_patcher(site: u64) {
    let me = PATCHER.load(Ordering::Acquire);
    // SAFETY: gettid cannot fail.
    if me == 0 || me == unsafe { libc::gettid() } {
        return;
    }
    // SAFETY: the calling thread's errno, restored before returning.
    let errno = unsafe { *libc::__errno_location() };
    let seen = PROGRESS.load(Ordering::SeqCst);
    WAITERS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: a registered site is inside mapped code.
    if unsafe { core::ptr::read_volatile(site as *const u8) } == 0xcc {
        let t = libc::timespec {
            tv_sec: 0,
            tv_nsec: WAIT_NS,
        };
        // SAFETY: FUTEX_WAIT on a static word with a relative timeout; it
        // returns at once if the word moved since `seen` was read.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                PROGRESS.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                seen,
                &t as *const libc::timespec,
            )
        };
    }
    WAITERS.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// The patcher moved on: wakes the threads waiting for it.
fn progress() {
    PROGRESS.fetch_add(1, Ordering::SeqCst);
    if WAITERS.load(Ordering::SeqCst) > 0 {
        // SAFETY: FUTEX_WAKE on a static word.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                PROGRESS.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            )
        };
    }
}

/// The program's own `SIGTRAP` action (chained to for traps that are not
/// ours): the one installed before ours, then whatever the program asks
/// for through [`program_action`]. A leaked, immutable value published
/// atomically, so that the handler never reads one half-written.
static OLD: AtomicPtr<libc::sigaction> = AtomicPtr::new(core::ptr::null_mut());
static INSTALL: std::sync::Once = std::sync::Once::new();
/// Set once our handler is installed.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs the `SIGTRAP` handler once.
pub fn install() {
    INSTALL.call_once(|| {
        // SAFETY: zeroed sigactions are valid values to fill in; the old
        // action is published (leaked) before the flag that routes the
        // program's later changes to [`program_action`].
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_sigtrap as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART | libc::SA_NODEFER;
            libc::sigemptyset(&mut sa.sa_mask);
            let old = Box::into_raw(Box::new(core::mem::zeroed::<libc::sigaction>()));
            OLD.store(old, Ordering::Release);
            libc::sigaction(libc::SIGTRAP, &sa, old);
        }
        INSTALLED.store(true, Ordering::Release);
        // SAFETY: registers a child handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(forget_patcher)) };
    });
}

/// The program's `sigaction(SIGTRAP, new, old)` once our handler is
/// installed (an interposed `sigaction` calls this): the program's action
/// is kept as the one traps that are not ours are passed to, and our
/// handler stays. Returns false when our handler is not installed (the
/// call should go to the system).
pub fn program_action(new: Option<&libc::sigaction>, old: Option<&mut libc::sigaction>) -> bool {
    if !INSTALLED.load(Ordering::Acquire) {
        return false;
    }
    // No lock (`sigaction` may be called from a signal handler): one swap.
    // The previous value is leaked: the handler may be reading it.
    let prev = match new {
        Some(n) => OLD.swap(Box::into_raw(Box::new(*n)), Ordering::AcqRel),
        None => OLD.load(Ordering::Acquire),
    };
    if let Some(o) = old {
        // SAFETY: published actions are leaked and never changed.
        *o = unsafe { *prev };
    }
    true
}

extern "C" fn on_sigtrap(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let uc = ctx as *mut libc::ucontext_t;
    // SAFETY: the kernel passes a valid ucontext to SA_SIGINFO handlers;
    // RIP is right after the `int3` that trapped.
    let rip = unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] } as u64;
    let site = rip.wrapping_sub(1);
    let resume = resume_of(site);
    if resume.is_some() || is_site(site) {
        TRAPS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: a registered site is inside mapped code.
        let mut b = unsafe { core::ptr::read_volatile(site as *const u8) };
        if b == 0xcc {
            wait_for_patcher(site);
            // SAFETY: as above.
            b = unsafe { core::ptr::read_volatile(site as *const u8) };
        }
        let next = match (b == 0xcc, resume) {
            (true, Some(r)) => r,
            (true, None) => site + 5,
            (false, _) => site,
        };
        // SAFETY: changing where the interrupted thread resumes, in the
        // ucontext the kernel passed.
        unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] = next as i64 };
        return;
    }
    // Not ours: behave as if we were not installed.
    let p = OLD.load(Ordering::Acquire);
    // SAFETY: published before our handler was installed; leaked and
    // never changed.
    let old = unsafe { *p };
    match old.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // SAFETY: restore the default action and re-raise: the process
            // dies of SIGTRAP as it would have without us. The system call
            // directly: the preload interposes `signal` and `sigaction`.
            // The kernel's action is handler, flags, restorer, mask.
            unsafe {
                let dfl: [u64; 4] = [libc::SIG_DFL as u64, 0, 0, 0];
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    libc::SIGTRAP,
                    dfl.as_ptr(),
                    core::ptr::null_mut::<u64>(),
                    8usize,
                );
                libc::raise(libc::SIGTRAP);
            }
        }
        h if old.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the program's own three-argument handler.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { core::mem::transmute(h) };
            f(sig, info, ctx)
        }
        h => {
            // SAFETY: the program's own one-argument handler.
            let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(h) };
            f(sig)
        }
    }
}

/// Sites whose change is in progress at once (see [`poke5`]).
pub const BATCH: usize = 128;

/// Changes 5-byte sites, all in pages of `w`, to new contents while other
/// threads may run them. Every address must have been [`register`]ed (and
/// for each site either the old or the new bytes must be a 5-byte NOP such as [`NOP5`]) or
/// [`register_resume`]d (both states jumps, one of them to its resume
/// address). The caller holds [`super::LOCK`].
///
/// The sites go through the three steps of the protocol in batches of
/// [`BATCH`], pipelined: between two serialisations the heads of one
/// batch, the tails of the next and the `int3`s of the one after are
/// written, so that each site still sees a serialisation after each of its
/// steps, the whole change costs one serialisation per batch (plus two),
/// and at most two batches hold an `int3` at any moment. A thread that
/// reaches a site holding an `int3` traps (a few µs in the handler); with
/// every site armed at once, a patching thread preempted in the middle of
/// its pass (for a time slice of the program's busy threads) left every
/// call of every thread trapping for that long.
pub fn poke5(w: &Writable, items: &[(u64, [u8; 5])]) {
    let mut v = Vec::with_capacity(items.len());
    v.extend(items.iter().map(|&(a, b)| {
        let mut n = [0u8; 6];
        n[..5].copy_from_slice(&b);
        (a, n, 5)
    }));
    poke(w, &v);
}

/// [`poke5`] for sites of 5 or 6 bytes (`(address, new bytes, length)`):
/// a 6-byte `call *disp(%rip)` becomes a 5-byte jump or NOP and a
/// one-byte NOP, its last byte written with the others while the site
/// holds its `int3`. A thread that traps on a 6-byte site must resume at
/// a registered [`register_resume`] address (skipping 5 bytes would land
/// inside the old call).
pub fn poke(w: &Writable, items: &[(u64, [u8; 6], usize)]) {
    // One change per site (the last one asked for): a site in two batches
    // would lose its `int3` while its tail changes.
    let mut todo: Vec<(u64, [u8; 6], usize)> = items.iter().rev().copied().collect();
    todo.sort_by_key(|i| i.0);
    todo.dedup_by_key(|i| i.0);
    todo.retain(|&(a, new, n)| {
        // SAFETY: registered sites are inside mapped code (`n` bytes each).
        (0..n).any(|i| unsafe { core::ptr::read_volatile((a + i as u64) as *const u8) } != new[i])
    });
    if todo.is_empty() {
        return;
    }
    debug_assert!(
        todo.iter()
            .all(|&(a, _, n)| (n == 5 && is_site(a)) || resume_of(a).is_some())
    );
    install();
    // Registering for the membarrier (the first use, unless done early)
    // can take an RCU grace period: done before any site holds an `int3`,
    // so that no thread traps meanwhile.
    super::sync::available();
    crate::diag::step("int3-ready");
    let page = w.runs().first().map_or(0, |r| r.0);
    // SAFETY: gettid cannot fail.
    PATCHER.store(unsafe { libc::gettid() }, Ordering::Release);
    let batches: Vec<&[(u64, [u8; 6], usize)]> = todo.chunks(BATCH).collect();
    let n = batches.len();
    // The sites are registered and inside pages `w` made writable; a
    // thread reaching a site sees the old instruction, the new one, or the
    // `int3`, whose trap the handler resolves.
    for k in 0..n + 2 {
        if let Some(b) = k.checked_sub(2).and_then(|i| batches.get(i)) {
            for &(a, new, _) in b.iter() {
                // SAFETY: bytes 1–4 (1–5) are final on every core (a
                // serialisation followed their write); one byte replaces
                // the `cc`.
                unsafe { text::write_bytes(a, &new[..1]) };
            }
        }
        if let Some(b) = k.checked_sub(1).and_then(|i| batches.get(i)) {
            for &(a, new, n) in b.iter() {
                // SAFETY: every core has seen the `cc` (a serialisation
                // followed its write), so no thread decodes the rest of
                // the site while it changes.
                unsafe { text::write_bytes(a + 1, &new[1..n]) };
            }
        }
        if let Some(b) = batches.get(k) {
            for &(a, _, _) in b.iter() {
                // SAFETY: one byte, the `int3`, over the first byte of the
                // site.
                unsafe { text::write_bytes(a, &[0xcc]) };
            }
        }
        super::sync::serialize_all(page);
        progress();
    }
    PATCHER.store(0, Ordering::Release);
    progress();
    crate::diag::step("int3");
}
