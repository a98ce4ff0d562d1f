//! Records a hand-instrumented fib in-process and reads the trace back.
use fntrace::__private::{Site, enter};
use fntrace_format::{Record, Trace};

fn fib(n: u64) -> u64 {
    static SITE: Site = Site::new("smoke::fib", file!(), line!());
    let _g = enter(&SITE);
    if n < 2 { n } else { fib(n - 1) + fib(n - 2) }
}

#[test]
fn fib_count_roundtrip() {
    let dir = std::env::temp_dir().join(format!("fntrace-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.data");
    fntrace::start(&path).unwrap();
    assert_eq!(fib(20), 6765);
    let sum = fntrace::stop().unwrap();
    let t = Trace::open(&sum.path).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    let tids = t.thread_ids();
    assert_eq!(tids.len(), 1);
    let (mut ent, mut ex) = (0, 0);
    for r in t.stream(tids[0]) {
        match r {
            Record::Entry { .. } => ent += 1,
            Record::Exit { .. } => ex += 1,
            _ => {}
        }
    }
    assert_eq!(ent, 2 * 10946 - 1);
    assert_eq!(ex, ent);
    let site = t.metadata().sites.values().next().unwrap();
    assert_eq!(site.name, "smoke::fib");
    eprintln!(
        "bytes {} per call {:.2}",
        sum.bytes,
        sum.bytes as f64 / ent as f64
    );
}
