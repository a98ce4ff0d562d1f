//! `#[instrument_fn]` must not change what instrumented code does: each
//! function here exists twice, instrumented (`on::`) and plain (`off::`),
//! from the same source (`twins!`), and both must agree on return values,
//! errors through `?`, panics, drop order and the types of function items.
//! The last test checks, through a real trace, which functions the
//! attribute selected and the names it gave them. (Call counts, exits on
//! panic/`?` and threads are covered by `fntrace-cli/tests/recording.rs`.)

use std::cell::RefCell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Defines the items once in `mod on` (instrumented) and once in `mod off`.
macro_rules! twins {
    ($($item:item)*) => {
        #[fntrace::instrument_fn]
        mod on {
            #![allow(dead_code)]
            use super::*;
            $($item)*
        }
        mod off {
            #![allow(dead_code)]
            use super::*;
            $($item)*
        }
    };
}

#[derive(Debug, PartialEq)]
enum AppError {
    Parse(std::num::ParseIntError),
    Negative(i64),
}

impl From<std::num::ParseIntError> for AppError {
    fn from(e: std::num::ParseIntError) -> Self {
        AppError::Parse(e)
    }
}

thread_local! {
    static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn log(s: impl Into<String>) {
    LOG.with(|l| l.borrow_mut().push(s.into()));
}

fn take_log() -> Vec<String> {
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// Logs its drop.
struct Noisy(pub &'static str);

impl Drop for Noisy {
    fn drop(&mut self) {
        log(format!("drop {}", self.0));
    }
}

trait Animal {
    fn name(&self) -> String;
    fn legs(&self) -> u32 {
        4
    }
    fn describe(&self) -> String {
        format!("{} with {} legs", self.name(), self.legs())
    }
}

twins! {
    pub fn collatz_steps(mut n: u64) -> u32 {
        let mut steps = 0;
        while n != 1 {
            n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
            steps += 1;
        }
        steps
    }

    pub fn ackermann(m: u64, n: u64) -> u64 {
        match (m, n) {
            (0, n) => n + 1,
            (m, 0) => ackermann(m - 1, 1),
            (m, n) => ackermann(m - 1, ackermann(m, n - 1)),
        }
    }

    pub fn parse_positive(s: &str) -> Result<i64, AppError> {
        let v: i64 = s.trim().parse()?;
        if v < 0 {
            return Err(AppError::Negative(v));
        }
        Ok(v)
    }

    pub fn sum_positive(items: &[&str]) -> Result<i64, AppError> {
        let mut total = 0;
        for s in items {
            total += parse_positive(s)?;
        }
        Ok(total)
    }

    pub fn first_even(xs: &[u32]) -> Option<u32> {
        let x = xs.iter().find(|x| *x % 2 == 0)?;
        Some(x * 10)
    }

    pub fn largest<T: PartialOrd + Copy>(xs: &[T]) -> Option<T> {
        let mut it = xs.iter().copied();
        let mut best = it.next()?;
        for x in it {
            if x > best {
                best = x;
            }
        }
        Some(best)
    }

    pub fn join_all<T: fmt::Display, const N: usize>(xs: [T; N], sep: &str) -> String {
        xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(sep)
    }

    pub fn split_first<'a>(s: &'a str, c: &str) -> (&'a str, &'a str) {
        s.split_once(c).unwrap_or((s, ""))
    }

    pub fn drops(fail: bool) -> u8 {
        let _a = Noisy("a");
        let _b = Noisy("b");
        if fail {
            panic!("failing");
        }
        log("body end");
        7
    }

    pub fn consume(arg: Noisy) -> &'static str {
        log("in consume");
        arg.0
    }

    /// # Safety
    /// `p` must be valid for `len` reads.
    pub unsafe fn sum_raw(p: *const u32, len: usize) -> u32 {
        // SAFETY: the caller promises `p` is valid for `len` reads.
        unsafe { std::slice::from_raw_parts(p, len) }.iter().sum()
    }

    pub extern "C" fn mul_c(a: i32, b: i32) -> i32 {
        a.wrapping_mul(b)
    }

    /// # Safety
    /// `out` must be valid for a write.
    pub unsafe extern "C" fn store_c(out: *mut i32, v: i32) -> bool {
        // SAFETY: the caller promises `out` is valid.
        unsafe { out.write(v) };
        true
    }

    pub struct Dog;
    pub struct Bird {
        pub wings: u32,
    }

    impl Animal for Dog {
        fn name(&self) -> String {
            "dog".into()
        }
    }

    impl Animal for Bird {
        fn name(&self) -> String {
            "bird".into()
        }
        fn legs(&self) -> u32 {
            self.wings
        }
    }

    pub fn zoo() -> Vec<Box<dyn Animal>> {
        vec![Box::new(Dog), Box::new(Bird { wings: 2 })]
    }

    pub struct Stack<T> {
        pub items: Vec<T>,
    }

    impl<T: Clone> Stack<T> {
        pub fn push(&mut self, x: T) -> &mut Self {
            self.items.push(x);
            self
        }
        pub fn pop(&mut self) -> Option<T> {
            self.items.pop()
        }
        #[allow(clippy::boxed_local)]
        pub fn into_vec(self: Box<Self>) -> Vec<T> {
            self.items
        }
    }

    pub async fn async_parse(s: &str) -> Result<i64, AppError> {
        let v = parse_positive(s)?;
        Ok(v * 2)
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

#[test]
fn return_values_are_unchanged() {
    for n in 1..200 {
        assert_eq!(on::collatz_steps(n), off::collatz_steps(n), "n={n}");
    }
    for m in 0..3 {
        for n in 0..5 {
            assert_eq!(on::ackermann(m, n), off::ackermann(m, n));
        }
    }
    assert_eq!(on::ackermann(2, 3), 9);
    assert_eq!(on::split_first("a=b=c", "="), ("a", "b=c"));
    assert_eq!(on::split_first("abc", "="), off::split_first("abc", "="));
}

#[test]
fn question_mark_propagates_the_same_errors() {
    let cases: &[&[&str]] = &[
        &["1", "2", " 3 "],
        &["1", "x"],
        &["4", "-5", "y"],
        &[],
        &[""],
    ];
    for items in cases {
        assert_eq!(
            on::sum_positive(items),
            off::sum_positive(items),
            "{items:?}"
        );
    }
    assert_eq!(on::sum_positive(&["1", "2"]), Ok(3));
    assert_eq!(on::sum_positive(&["1", "-2"]), Err(AppError::Negative(-2)));
    assert!(matches!(on::sum_positive(&["z"]), Err(AppError::Parse(_))));
    for xs in [&[1, 3, 4, 6][..], &[1, 3], &[]] {
        assert_eq!(on::first_even(xs), off::first_even(xs));
    }
    assert_eq!(on::first_even(&[1, 8]), Some(80));
    assert_eq!(block_on(on::async_parse("21")), Ok(42));
    assert_eq!(
        block_on(on::async_parse("-1")),
        block_on(off::async_parse("-1"))
    );
}

#[test]
fn generic_functions_work_for_each_instantiation() {
    assert_eq!(on::largest(&[3, 9, 2]), Some(9));
    assert_eq!(on::largest(&[1.5, -2.0]), Some(1.5));
    assert_eq!(on::largest(&['a', 'z', 'q']), Some('z'));
    assert_eq!(on::largest::<u8>(&[]), None);
    assert_eq!(on::largest(&["b", "a"]), off::largest(&["b", "a"]));
    assert_eq!(on::join_all([1, 2, 3], "-"), "1-2-3");
    assert_eq!(on::join_all(["x"], ", "), "x");
    assert_eq!(on::join_all::<u8, 0>([], ","), "");
    assert_eq!(
        on::join_all([1.5, 2.0], "/"),
        off::join_all([1.5, 2.0], "/")
    );

    let mut s = on::Stack { items: vec![] };
    s.push(1).push(2).push(3);
    assert_eq!(s.pop(), Some(3));
    assert_eq!(Box::new(s).into_vec(), [1, 2]);
    let mut t = on::Stack {
        items: vec!["a".to_string()],
    };
    assert_eq!(t.push("b".into()).pop().as_deref(), Some("b"));
}

#[test]
fn drop_order_and_panics_are_unchanged() {
    take_log();
    assert_eq!(on::drops(false), 7);
    let instrumented = take_log();
    assert_eq!(off::drops(false), 7);
    assert_eq!(instrumented, take_log());
    assert_eq!(instrumented, ["body end", "drop b", "drop a"]);

    let r = catch_unwind(AssertUnwindSafe(|| on::drops(true)));
    let msg = r.unwrap_err();
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"failing"));
    assert_eq!(take_log(), ["drop b", "drop a"]);

    // An argument is dropped when the body is done with it, as before.
    assert_eq!(on::consume(Noisy("arg")), "arg");
    let instrumented = take_log();
    off::consume(Noisy("arg"));
    assert_eq!(instrumented, take_log());
    assert_eq!(instrumented, ["in consume", "drop arg"]);
}

#[test]
fn unsafe_and_extern_c_functions_keep_their_types() {
    let v = [1u32, 2, 3, 4];
    // SAFETY: `v` is valid for 4 reads.
    assert_eq!(unsafe { on::sum_raw(v.as_ptr(), v.len()) }, 10);
    // The function items still coerce to the same pointer types.
    let fs: [unsafe fn(*const u32, usize) -> u32; 2] = [on::sum_raw, off::sum_raw];
    for f in fs {
        // SAFETY: `v` is valid for 3 reads.
        assert_eq!(unsafe { f(v.as_ptr(), 3) }, 6);
    }
    let fs: [extern "C" fn(i32, i32) -> i32; 2] = [on::mul_c, off::mul_c];
    for f in fs {
        assert_eq!(f(6, 7), 42);
        assert_eq!(f(i32::MAX, 2), -2);
    }
    let fs: [unsafe extern "C" fn(*mut i32, i32) -> bool; 2] = [on::store_c, off::store_c];
    for (i, f) in fs.into_iter().enumerate() {
        let mut out = 0;
        // SAFETY: `out` is valid for a write.
        assert!(unsafe { f(&mut out, i as i32 + 5) });
        assert_eq!(out, i as i32 + 5);
    }
}

#[test]
fn trait_objects_dispatch_through_instrumented_impls() {
    let zoo = on::zoo();
    let names: Vec<String> = zoo.iter().map(|a| a.describe()).collect();
    assert_eq!(names, ["dog with 4 legs", "bird with 2 legs"]);
    let plain: Vec<String> = off::zoo().iter().map(|a| a.describe()).collect();
    assert_eq!(names, plain);
    let a: &dyn Animal = &on::Bird { wings: 6 };
    assert_eq!(a.legs(), 6);
    assert_eq!(a.name(), "bird");
}

#[test]
fn async_futures_stay_send_and_unpin_as_before() {
    fn is_send<T: Send>(_: &T) {}
    let f = on::async_parse("1");
    is_send(&f);
    assert_eq!(block_on(f), Ok(2));
}

// Which functions are selected, and their names in traces.

#[fntrace::instrument_fn]
mod names {
    pub fn plain() {}

    #[instrument_fn = "off"]
    pub fn excluded() {}

    pub mod nested {
        pub fn deep() {}
    }

    pub struct Thing;

    impl Thing {
        pub fn method(&self) {}
    }

    impl Clone for Thing {
        fn clone(&self) -> Self {
            Thing
        }
    }

    pub trait Greet {
        fn hello(&self) {}
    }

    impl Greet for Thing {}

    pub async fn later() {}
}

struct Lone;

impl Lone {
    #[fntrace::instrument_fn]
    fn by_ref(&self) {}

    #[fntrace::instrument_fn]
    async fn by_ref_async(&self) {}
}

#[test]
fn trace_names_the_selected_functions() {
    use names::Greet;
    let path =
        std::env::temp_dir().join(format!("fntrace-macro-names-{}.data", std::process::id()));
    fntrace::start(&path).unwrap();
    names::plain();
    names::excluded();
    names::nested::deep();
    let t = names::Thing;
    t.method();
    let _ = t.clone();
    t.hello();
    block_on(names::later());
    Lone.by_ref();
    block_on(Lone.by_ref_async());
    let summary = fntrace::stop().unwrap();
    let trace = fntrace_format::Trace::open(&summary.path).unwrap();
    let mut got: Vec<String> = trace
        .metadata()
        .sites
        .values()
        .map(|s| s.name.clone())
        .filter(|n| n.contains("macro_behaviour::names::") || n.contains("Lone"))
        .collect();
    got.sort();
    std::fs::remove_file(&summary.path).unwrap();
    let mut want = [
        "macro_behaviour::names::plain",
        "macro_behaviour::names::nested::deep",
        "macro_behaviour::names::Thing::method",
        "<macro_behaviour::names::Thing as Clone>::clone",
        "macro_behaviour::names::Greet::hello",
        "macro_behaviour::names::later",
        "macro_behaviour::Lone::by_ref",
        "macro_behaviour::Lone::by_ref_async",
    ];
    want.sort();
    assert_eq!(got, want);
}
