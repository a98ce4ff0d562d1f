//! Typed and by-name probes on markers of the designs that need no code
//! patching (the static key is tested with the runtime, in `fntrace`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fntrace_markers::{Error, PatchError, Probe, declare_marker, fire};

declare_marker! {
    /// Flag design.
    static NET_RX: net_rx(len: u32, dev: &str) as Flag;
}
declare_marker! { static FN_PTR: basic_fnptr(x: u64) as FnPtr; }
declare_marker! { static EMPTY: basic_empty(x: u64) as EmptyFn; }
declare_marker! { static KEYED: basic_keyed(x: u64); }

static EVALS: AtomicU64 = AtomicU64::new(0);

fn counted(v: u64) -> u64 {
    EVALS.fetch_add(1, Ordering::Relaxed);
    v
}

#[test]
fn typed_probes_run_in_order_and_args_are_lazy() {
    static LAZY: AtomicU64 = AtomicU64::new(0);
    let lazy = |v: u32| {
        LAZY.fetch_add(1, Ordering::Relaxed);
        v
    };
    fire!(NET_RX, lazy(5), "x");
    assert_eq!(
        LAZY.load(Ordering::Relaxed),
        0,
        "a disabled marker evaluated its arguments"
    );
    let log = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let l1 = log.clone();
    let h1 = NET_RX
        .attach(move |len, dev| l1.lock().unwrap().push(format!("a {dev} {len}")))
        .unwrap();
    let l2 = log.clone();
    let h2 = NET_RX
        .attach(move |len, dev| l2.lock().unwrap().push(format!("b {dev} {len}")))
        .unwrap();
    assert!(NET_RX.core().is_enabled());
    let dev = String::from("eth0");
    fire!(NET_RX, lazy(1500), &dev);
    assert_eq!(LAZY.load(Ordering::Relaxed), 1);
    assert_eq!(*log.lock().unwrap(), ["a eth0 1500", "b eth0 1500"]);
    h1.remove().map_err(|e| e.0).unwrap();
    fire!(NET_RX, 7, "lo");
    assert_eq!(log.lock().unwrap().last().unwrap(), "b lo 7");
    assert_eq!(log.lock().unwrap().len(), 3);
    h2.remove().map_err(|e| e.0).unwrap();
    assert!(!NET_RX.core().is_enabled());
    fire!(NET_RX, 9, "lo");
    assert_eq!(log.lock().unwrap().len(), 3);
    // The closures (and their Arc clones) were dropped by remove.
    assert_eq!(Arc::strong_count(&log), 1);
}

#[test]
fn by_name_checks_the_signature() {
    let e = fntrace_markers::set_probe("net_rx", Probe::<(u64, &str)>::new(|_, _| {}))
        .err()
        .unwrap();
    assert_eq!(
        e,
        Error::Mismatch {
            marker: "net_rx(len: u32, dev: &str)".into(),
            probe: "(u64, &str)".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "probe signature (u64, &str) does not match marker `net_rx(len: u32, dev: &str)`"
    );
    let e = fntrace_markers::set_probe("no_such_marker", Probe::<()>::new(|| {}))
        .err()
        .unwrap();
    assert_eq!(e.to_string(), "no marker named `no_such_marker`");
    let hits = Arc::new(AtomicU64::new(0));
    let h2 = hits.clone();
    let h = fntrace_markers::set_probe(
        "basic_fnptr",
        Probe::<(u64,)>::new(move |x| {
            h2.fetch_add(x, Ordering::Relaxed);
        }),
    )
    .unwrap();
    fire!(FN_PTR, 40);
    fire!(FN_PTR, 2);
    h.remove().map_err(|e| e.0).unwrap();
    fire!(FN_PTR, 100);
    assert_eq!(hits.load(Ordering::Relaxed), 42);
}

#[test]
fn empty_function_design_and_untyped_probes() {
    let text = Arc::new(std::sync::Mutex::new(String::new()));
    let t2 = text.clone();
    let h = EMPTY
        .attach_any(Probe::any(move |ev| {
            let mut s = t2.lock().unwrap();
            s.push_str(ev.marker().name());
            s.push(' ');
            ev.write_args(&mut *s).unwrap();
        }))
        .unwrap();
    let before = EVALS.load(Ordering::Relaxed);
    fire!(EMPTY, counted(77));
    h.remove().map_err(|e| e.0).unwrap();
    fire!(EMPTY, counted(78));
    // This design evaluates its arguments even when disabled.
    assert!(EVALS.load(Ordering::Relaxed) >= before + 2);
    assert_eq!(*text.lock().unwrap(), "basic_empty x=77");
}

#[test]
fn static_key_without_patcher_is_an_error() {
    // This test binary links no runtime, so nothing can patch the sites.
    fire!(KEYED, counted(1));
    let e = KEYED.attach(|_| {}).err().unwrap();
    assert!(
        matches!(&e, Error::Patch { marker, reason: PatchError::NoPatcher } if marker == "basic_keyed"),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "marker `basic_keyed`: cannot switch its static key: no code patcher is installed \
         (link the fntrace runtime, or declare the marker `as Flag`)"
    );
    assert!(!KEYED.core().is_enabled());
}

#[test]
fn patch_errors_carry_the_patcher_reason() {
    // What a patcher returns with `.into()` or `?`.
    let owned: PatchError = format!("mprotect: error {}", 13).into();
    let borrowed: PatchError = "jump target out of reach".into();
    assert_eq!(owned.to_string(), "mprotect: error 13");
    assert_eq!(
        borrowed,
        PatchError::Failed("jump target out of reach".into())
    );
    let e = Error::Patch {
        marker: "m".into(),
        reason: borrowed,
    };
    assert_eq!(
        e.to_string(),
        "marker `m`: cannot switch its static key: jump target out of reach"
    );
    let _: &dyn std::error::Error = &owned;
}

#[test]
fn markers_are_listed() {
    let names: Vec<_> = fntrace_markers::all().iter().map(|m| m.name()).collect();
    for n in [
        "net_rx",
        "basic_fnptr",
        "basic_empty",
        "basic_keyed",
        "inline_one",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let m = fntrace_markers::find("net_rx")[0];
    assert_eq!(m.arg_types(), ["u32", "&str"]);
    assert_eq!(m.arg_names(), ["len", "dev"]);
    assert!(m.file().ends_with("basic.rs"));
    assert_eq!(m.design(), fntrace_markers::DesignKind::Flag);
}

#[test]
fn inline_marker_fires() {
    let hits = Arc::new(AtomicU64::new(0));
    let run = |v: u64| fntrace_markers::marker!(inline_one as Flag, v: u64 = v, s: &str = "x");
    run(1);
    let h2 = hits.clone();
    let h = fntrace_markers::set_probe(
        "inline_one",
        Probe::<(u64, &str)>::new(move |v, s| {
            assert_eq!(s, "x");
            h2.fetch_add(v, Ordering::Relaxed);
        }),
    )
    .unwrap();
    run(5);
    run(6);
    h.remove().map_err(|e| e.0).unwrap();
    run(7);
    assert_eq!(hits.load(Ordering::Relaxed), 11);
}

declare_marker! { static EXITING: basic_exiting(x: u64) as Flag; }

/// Threads that fire markers, also from their thread-local destructors
/// (after their reader slot may have been given back), then exit: later
/// grace periods do not wait for them, and slots are reused.
#[test]
fn threads_exit_while_markers_are_attached() {
    struct FireOnDrop;
    impl Drop for FireOnDrop {
        fn drop(&mut self) {
            fire!(EXITING, 2);
        }
    }
    std::thread_local! { static LATE: FireOnDrop = const { FireOnDrop }; }
    let hits = Arc::new(AtomicU64::new(0));
    let h2 = hits.clone();
    let h = EXITING
        .attach(move |x| {
            h2.fetch_add(x, Ordering::Relaxed);
        })
        .unwrap();
    for _ in 0..4 {
        let ts: Vec<_> = (0..16)
            .map(|_| {
                std::thread::spawn(|| {
                    LATE.with(|_| {});
                    fire!(EXITING, 1);
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
    }
    h.remove().map_err(|e| e.0).unwrap();
    // Every thread's own firing ran; the destructor's ran or was skipped.
    let n = hits.load(Ordering::Relaxed);
    assert!((64..=64 * 3).contains(&n), "{n}");
}

declare_marker! { static NESTED: basic_nested(x: u64) as Flag; }

/// Attaching or removing from inside a probe is refused (it could wait for
/// itself), and the refused handle stays usable.
#[test]
fn no_probe_management_inside_a_probe() {
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let e2 = errors.clone();
    let inner = Arc::new(std::sync::Mutex::new(None::<fntrace_markers::ProbeHandle>));
    let i2 = inner.clone();
    let h = NESTED
        .attach(move |x| {
            if x == 1 {
                if let Err(e) = NESTED.attach(|_| {}) {
                    e2.lock().unwrap().push(e.to_string());
                }
            } else {
                let Some(h) = i2.lock().unwrap().take() else {
                    return;
                };
                match h.remove() {
                    Ok(()) => e2.lock().unwrap().push("removed".into()),
                    Err((e, h)) => {
                        e2.lock().unwrap().push(e.to_string());
                        *i2.lock().unwrap() = Some(h);
                    }
                }
            }
        })
        .unwrap();
    *inner.lock().unwrap() = Some(NESTED.attach(|_| {}).unwrap());
    fire!(NESTED, 1);
    fire!(NESTED, 2);
    let msg = "probes cannot be attached or removed from inside a probe (the grace period would wait for itself)";
    assert_eq!(*errors.lock().unwrap(), [msg, msg]);
    inner
        .lock()
        .unwrap()
        .take()
        .unwrap()
        .remove()
        .map_err(|e| e.0)
        .unwrap();
    h.remove().map_err(|e| e.0).unwrap();
    assert!(!NESTED.core().is_enabled());
}
