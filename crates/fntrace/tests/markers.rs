//! Markers with the runtime linked: static keys patched live, the grace
//! period under load (add/remove stress, a probe in a `dlclose`d library),
//! and marker events recorded into a trace.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fntrace::{declare_marker, fire};
use fntrace_format::{Record, Trace};
use fntrace_markers::sites::sites_of;

declare_marker! { static KEY: test_key(x: u64); }
declare_marker! { static STRESS_KEY: stress_key(x: u64); }
declare_marker! { static STRESS_FLAG: stress_flag(x: u64) as Flag; }
declare_marker! { static STRESS_FNPTR: stress_fnptr(x: u64) as FnPtr; }
declare_marker! { static STRESS_EMPTY: stress_empty(x: u64) as EmptyFn; }
declare_marker! { static DL: dl_marker(x: u64); }
declare_marker! { static REC: rec_marker(n: u32, what: &str); }

/// Tests that patch code or count grace periods run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn site_bytes(m: &'static fntrace::MarkerCore) -> Vec<[u8; 5]> {
    sites_of(m)
        // SAFETY: the sites are in this executable's mapped text.
        .map(|s| unsafe { std::ptr::read_volatile(s.site as *const [u8; 5]) })
        .collect()
}

#[inline(never)]
fn fire_key(x: u64, evals: &AtomicU64) {
    fire!(KEY, {
        evals.fetch_add(1, Ordering::Relaxed);
        x
    });
}

#[test]
fn static_key_is_patched_on_first_probe_and_back_on_last() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
    let evals = AtomicU64::new(0);
    fire_key(1, &evals);
    let before = site_bytes(KEY.core());
    assert!(!before.is_empty(), "no static-key site recorded");
    assert!(before.iter().all(|b| *b == NOP5), "{before:x?}");
    assert_eq!(
        evals.load(Ordering::Relaxed),
        0,
        "disabled marker evaluated its argument"
    );

    let sum = Arc::new(AtomicU64::new(0));
    let s1 = sum.clone();
    let h1 = KEY.attach(move |x| {
        s1.fetch_add(x, Ordering::Relaxed);
    });
    let h1 = h1.unwrap();
    let s2 = sum.clone();
    let h2 = KEY
        .attach(move |x| {
            s2.fetch_add(10 * x, Ordering::Relaxed);
        })
        .unwrap();
    let on = site_bytes(KEY.core());
    assert!(on.iter().all(|b| b[0] == 0xe9), "{on:x?}");
    fire_key(2, &evals);
    assert_eq!(sum.load(Ordering::Relaxed), 22);
    assert_eq!(evals.load(Ordering::Relaxed), 1);
    h1.remove().map_err(|e| e.0).unwrap();
    assert!(site_bytes(KEY.core()).iter().all(|b| b[0] == 0xe9));
    fire_key(3, &evals);
    assert_eq!(sum.load(Ordering::Relaxed), 52);
    h2.remove().map_err(|e| e.0).unwrap();
    assert!(site_bytes(KEY.core()).iter().all(|b| *b == NOP5));
    fire_key(4, &evals);
    assert_eq!(sum.load(Ordering::Relaxed), 52);
    assert_eq!(evals.load(Ordering::Relaxed), 2);
    assert_eq!(Arc::strong_count(&sum), 1, "probe closures not dropped");
}

/// Probe data that notices being used after it was freed.
struct Canary {
    alive: AtomicU64,
    hits: AtomicU64,
}
const ALIVE: u64 = 0x600d_600d_600d_600d;
static DROPPED: AtomicU64 = AtomicU64::new(0);
static VIOLATIONS: AtomicU64 = AtomicU64::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);

impl Drop for Canary {
    fn drop(&mut self) {
        self.alive.store(0xdead, Ordering::SeqCst);
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

fn canary_probe() -> impl Fn(u64) + Send + Sync + 'static {
    let c = Box::new(Canary {
        alive: AtomicU64::new(ALIVE),
        hits: AtomicU64::new(0),
    });
    move |x| {
        if c.alive.load(Ordering::SeqCst) != ALIVE {
            VIOLATIONS.fetch_add(1, Ordering::Relaxed);
        }
        c.hits.fetch_add(x & 1, Ordering::Relaxed);
        HITS.fetch_add(1, Ordering::Relaxed);
        // Stay in the probe a little, so removals overlap with it; under
        // valgrind (which runs one thread at a time) give the CPU away
        // here, so that a removal runs while this probe is half done.
        if yield_in_probe() {
            std::thread::yield_now();
        } else {
            for _ in 0..5 {
                std::hint::spin_loop();
            }
        }
        if c.alive.load(Ordering::SeqCst) != ALIVE {
            VIOLATIONS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether probes yield halfway (`FNTRACE_STRESS_YIELD=1`, for valgrind).
fn yield_in_probe() -> bool {
    static Y: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *Y.get_or_init(|| std::env::var_os("FNTRACE_STRESS_YIELD").is_some_and(|v| v == "1"))
}

/// Iterations of the stress test (`FNTRACE_STRESS_ITERS` lowers it for
/// runs under valgrind).
fn iterations() -> u64 {
    std::env::var("FNTRACE_STRESS_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn stress<S, D>(m: &'static fntrace::Marker<S, D>, fire_it: fn(u64))
where
    S: fntrace::Signature,
    D: fntrace_markers::Design,
    fntrace::Marker<S, D>: Attach,
{
    let stop = Arc::new(AtomicBool::new(false));
    let fired = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(std::sync::Barrier::new(9));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let stop = stop.clone();
            let fired = fired.clone();
            let ready = ready.clone();
            std::thread::spawn(move || {
                ready.wait();
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    fire_it(i);
                    i += 1;
                    // Other work between firings, as in a real program.
                    for _ in 0..100 {
                        std::hint::spin_loop();
                    }
                }
                fired.fetch_add(i - t, Ordering::Relaxed);
            })
        })
        .collect();
    ready.wait();
    let dropped0 = DROPPED.load(Ordering::Relaxed);
    let hits0 = HITS.load(Ordering::Relaxed);
    let n = iterations();
    let mut prev: Option<fntrace::ProbeHandle> = None;
    for i in 0..n {
        let h = m.attach_canary();
        if i % 256 == 1 {
            // Leave a probe attached until the firing threads ran it.
            let h0 = HITS.load(Ordering::Relaxed);
            let t0 = std::time::Instant::now();
            while HITS.load(Ordering::Relaxed) == h0 && t0.elapsed().as_millis() < 100 {
                std::thread::yield_now();
            }
        }
        // Every 8th round the marker goes through zero probes (for the
        // static key: unpatched, then patched again).
        if i % 8 == 0 {
            if let Some(p) = prev.take() {
                p.remove().map_err(|e| e.0).unwrap();
            }
            h.remove().map_err(|e| e.0).unwrap();
        } else {
            if let Some(p) = prev.take() {
                p.remove().map_err(|e| e.0).unwrap();
            }
            prev = Some(h);
        }
    }
    if let Some(p) = prev.take() {
        p.remove().map_err(|e| e.0).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        VIOLATIONS.load(Ordering::Relaxed),
        0,
        "a probe ran after its data was freed"
    );
    assert!(
        DROPPED.load(Ordering::Relaxed) - dropped0 >= n,
        "probe data not freed"
    );
    assert!(!m.core().is_enabled());
    assert!(fired.load(Ordering::Relaxed) > 0);
    assert!(HITS.load(Ordering::Relaxed) > hits0, "no probe ever ran");
}

/// Attaching a canary probe to markers of one `u64` argument.
trait Attach {
    fn attach_canary(&'static self) -> fntrace::ProbeHandle;
}
impl<D: fntrace_markers::Design> Attach for fntrace::Marker<(u64,), D> {
    fn attach_canary(&'static self) -> fntrace::ProbeHandle {
        self.attach(canary_probe()).unwrap()
    }
}

#[test]
fn stress_static_key() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    stress(&STRESS_KEY, |i| fire!(STRESS_KEY, i));
}

#[test]
fn stress_flag_fnptr_empty() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    stress(&STRESS_FLAG, |i| fire!(STRESS_FLAG, i));
    stress(&STRESS_FNPTR, |i| fire!(STRESS_FNPTR, i));
    stress(&STRESS_EMPTY, |i| fire!(STRESS_EMPTY, i));
}

/// A probe whose code is in a shared library: removed, then the library
/// is unloaded, while 8 threads keep firing the marker.
#[test]
fn probe_in_dlclosed_library() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("fntrace-dl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        "#include <stdint.h>\n\
         void fntrace_test_probe(volatile uint64_t *acc, uint64_t x) {\n\
           for (int i = 0; i < 64; i++) __asm__ volatile(\"\");\n\
           *acc += x & 1;\n\
         }\n",
    )
    .unwrap();
    let so = dir.join("libprobe.so");
    let st = std::process::Command::new("gcc")
        .args(["-O1", "-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    let cso = std::ffi::CString::new(so.to_str().unwrap()).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    fire!(DL, i);
                    i += 1;
                }
            })
        })
        .collect();
    let rounds = (iterations() / 50).max(20);
    let total = Arc::new(AtomicU64::new(0));
    for _ in 0..rounds {
        // SAFETY: loading a library we just built, which has no
        // constructors.
        let lib = unsafe { libc::dlopen(cso.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!lib.is_null());
        // SAFETY: a NUL-terminated symbol name of the library.
        let sym = unsafe { libc::dlsym(lib, c"fntrace_test_probe".as_ptr()) };
        assert!(!sym.is_null());
        // SAFETY: the symbol is the C function defined above.
        let f: extern "C" fn(*mut u64, u64) = unsafe { std::mem::transmute(sym) };
        let acc = Box::new(std::cell::UnsafeCell::new(0u64));
        let tot = total.clone();
        struct Acc(Box<std::cell::UnsafeCell<u64>>, Arc<AtomicU64>);
        // SAFETY: only read at drop, after the grace period.
        unsafe impl Sync for Acc {}
        impl Drop for Acc {
            fn drop(&mut self) {
                self.1.fetch_add(*self.0.get_mut(), Ordering::Relaxed);
            }
        }
        let acc = Acc(acc, tot);
        let h = DL
            .attach(move |x| {
                // Racy increments from several threads are fine: the
                // count is only a sign of life.
                f(acc.0.get(), x)
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_micros(300));
        h.remove().map_err(|e| e.0).unwrap();
        // SAFETY: no probe refers to the library any more (remove
        // waited for every thread to leave it).
        assert_eq!(unsafe { libc::dlclose(lib) }, 0);
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert!(total.load(Ordering::Relaxed) > 0, "the probe never ran");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn marker_events_are_recorded_with_their_arguments() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("fntrace-mrec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.data");
    fntrace::start(&path).unwrap();
    fire!(REC, 1, "not recorded");
    let h = fntrace::record_markers(&["^rec_mark"])
        .unwrap()
        .expect("a marker matches");
    for n in 0..3u32 {
        fire!(REC, n, "pkt \"x\"");
    }
    h.remove().map_err(|e| e.0).unwrap();
    fire!(REC, 9, "not recorded either");
    let sum = fntrace::stop().unwrap();
    let t = Trace::open(&sum.path).unwrap();
    let mut got = vec![];
    for tid in t.thread_ids() {
        for r in t.stream(tid) {
            if let Record::Marker { name, text, .. } = r {
                got.push(format!("{name}: {text}"));
            }
        }
    }
    assert_eq!(
        got,
        [
            r#"rec_marker: n=0 what="pkt \"x\"""#,
            r#"rec_marker: n=1 what="pkt \"x\"""#,
            r#"rec_marker: n=2 what="pkt \"x\"""#
        ]
    );
    assert!(fntrace::record_markers(&["("]).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

declare_marker! { static FORK: fork_marker(x: u64) as Flag; }

/// A fork while another thread is inside a probe: the child's first
/// grace period must not wait for a thread that does not exist there.
#[test]
fn grace_period_in_a_fork_child() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let inside = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let (i2, r2) = (inside.clone(), release.clone());
    let h = FORK
        .attach(move |x| {
            if x == 1 {
                i2.store(true, Ordering::SeqCst);
                while !r2.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
            }
        })
        .unwrap();
    let t = std::thread::spawn(|| fire!(FORK, 1));
    while !inside.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // SAFETY: the child only attaches/removes a probe and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok = FORK.attach(|_| {}).is_ok_and(|h| h.remove().is_ok());
        // SAFETY: leaving the child without running the parent's atexit.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    let t0 = std::time::Instant::now();
    let mut done = false;
    while t0.elapsed() < std::time::Duration::from_secs(20) {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            done = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if !done {
        // SAFETY: killing our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    release.store(true, Ordering::SeqCst);
    t.join().unwrap();
    h.remove().map_err(|e| e.0).unwrap();
    assert!(
        done,
        "the child's grace period waited for a thread of the parent"
    );
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
}
