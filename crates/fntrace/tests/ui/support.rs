//! Shared by the pass cases (`#[path = "../support.rs"] mod support;`):
//! observing whether code is instrumented with `fntrace` alone, and a
//! minimal executor for async cases.
#![allow(dead_code)]

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};

/// Runs `f` while recording into a scratch file; returns its result and
/// whether anything was recorded (a thread attaches to the recording at its
/// first instrumented call, so `threads > 0` iff an instrumented function
/// ran).
pub fn recorded<T>(f: impl FnOnce() -> T) -> (T, bool) {
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "fntrace-ui-{}-{}.data",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    fntrace::start(&path).expect("start recording");
    let v = f();
    let summary = fntrace::stop().expect("was recording");
    let _ = std::fs::remove_file(&summary.path);
    (v, summary.threads > 0)
}

/// Asserts that running `f` records, and returns its result.
pub fn traced<T>(f: impl FnOnce() -> T) -> T {
    let (v, rec) = recorded(f);
    assert!(rec, "expected an instrumented call");
    v
}

/// Asserts that running `f` records nothing, and returns its result.
pub fn untraced<T>(f: impl FnOnce() -> T) -> T {
    let (v, rec) = recorded(f);
    assert!(!rec, "expected no instrumented call");
    v
}

/// Polls `f` to completion on this thread.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A future that is pending once, then ready.
pub struct YieldOnce(pub bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}
