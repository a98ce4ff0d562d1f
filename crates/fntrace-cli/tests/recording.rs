//! End-to-end recording tests: each scenario runs in a child process (this
//! test binary re-executed with `FNTRACE_OUTPUT` set, as `fntrace record`
//! does), and the trace is checked through the real reader and analysis.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use fntrace_cli::analysis::{Call, Visitor, walk_thread};
use fntrace_cli::report::{SortKey, report_rows};
use fntrace_format::Trace;

#[fntrace::instrument_fn]
mod scen {
    pub fn fib(n: u64) -> u64 {
        if n < 2 { n } else { fib(n - 1) + fib(n - 2) }
    }

    pub fn boom(n: u64) -> u64 {
        if n == 0 {
            panic!("boom");
        }
        boom(n - 1) + 1
    }

    pub fn after_panic() -> u64 {
        7
    }

    pub fn try_parse(s: &str) -> Result<u64, std::num::ParseIntError> {
        let v: u64 = s.parse()?;
        Ok(v)
    }

    pub fn early(n: u64) -> u64 {
        if n > 1 {
            return 1;
        }
        0
    }

    pub async fn pending_once() -> u64 {
        Yield(false).await;
        5
    }

    pub struct Yield(pub bool);
    impl std::future::Future for Yield {
        type Output = ();
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<()> {
            if self.0 {
                std::task::Poll::Ready(())
            } else {
                self.0 = true;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        }
    }
}

fn run_child(scenario: &str) -> (tempfile::TempDir, PathBuf) {
    run_child_env(scenario, &[])
}

fn run_child_env(scenario: &str, env: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.data");
    let st = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("SCENARIO", scenario)
        .env("FNTRACE_OUTPUT", &out)
        .envs(env.iter().copied())
        .status()
        .unwrap();
    assert!(st.success(), "scenario {scenario} failed");
    (dir, out)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
    fn raw() -> RawWaker {
        RawWaker::new(std::ptr::null(), &VT)
    }
    static VT: RawWakerVTable = RawWakerVTable::new(|_| raw(), |_| {}, |_| {}, |_| {});
    // SAFETY: the vtable's functions do nothing and never touch the data pointer.
    let waker = unsafe { Waker::from_raw(raw()) };
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

#[test]
fn child() {
    let Ok(s) = std::env::var("SCENARIO") else {
        return;
    };
    match s.as_str() {
        "fib" => assert_eq!(scen::fib(20), 6765),
        "panic" => {
            let r = std::panic::catch_unwind(|| scen::boom(3));
            assert!(r.is_err());
            assert_eq!(scen::after_panic(), 7);
            assert!(scen::try_parse("x").is_err());
            assert_eq!(scen::try_parse("12").unwrap(), 12);
            assert_eq!(scen::early(5), 1);
        }
        "threads" => {
            let hs: Vec<_> = (0..8)
                .map(|i| {
                    std::thread::Builder::new()
                        .name(format!("worker-{i}"))
                        .spawn(|| scen::fib(15))
                        .unwrap()
                })
                .collect();
            for h in hs {
                assert_eq!(h.join().unwrap(), 610);
            }
        }
        "async" => assert_eq!(block_on(scen::pending_once()), 5),
        "filter" => {
            assert_eq!(scen::early(5), 1);
            assert_eq!(scen::fib(10), 55);
        }
        _ => panic!("unknown scenario"),
    }
}

#[derive(Default)]
struct Calls {
    by_name: HashMap<String, u64>,
    incomplete: u64,
    list: Vec<Call>,
}

fn calls(t: &Trace, tid: u32) -> Calls {
    struct V(Vec<Call>);
    impl Visitor for V {
        fn call(&mut self, c: &Call) {
            self.0.push(*c);
        }
    }
    let mut v = V(vec![]);
    let s = walk_thread(t, tid, &mut v);
    let mut sym = fntrace_cli::symbols::Symbolizer::new(t.metadata());
    let mut c = Calls {
        incomplete: s.incomplete,
        ..Default::default()
    };
    for call in &v.0 {
        *c.by_name
            .entry(sym.name(call.func).to_string())
            .or_default() += 1;
    }
    c.list = v.0;
    c
}

#[test]
fn fib_call_count_is_exact_and_times_add_up() {
    let (_d, p) = run_child("fib");
    let t = Trace::open(&p).unwrap();
    assert!(t.damage().is_empty());
    let tids = t.thread_ids();
    assert_eq!(tids.len(), 1, "one thread");
    let c = calls(&t, tids[0]);
    assert_eq!(c.by_name["recording::scen::fib"], 2 * 10946 - 1);
    assert_eq!(c.incomplete, 0);
    // Children's time never exceeds the parent's, and self times over all
    // functions add up to the time of the outermost calls.
    for call in &c.list {
        assert!(call.children <= call.end - call.start);
    }
    let outer: u64 = c
        .list
        .iter()
        .filter(|x| x.depth == 0)
        .map(|x| x.end - x.start)
        .sum();
    let selfsum: u64 = c.list.iter().map(|x| x.end - x.start - x.children).sum();
    assert_eq!(outer, selfsum);
    let rows = report_rows(&t, false, SortKey::Calls);
    let fib = rows
        .iter()
        .find(|r| r.function == "recording::scen::fib")
        .unwrap();
    assert_eq!(fib.calls, 21891);
    assert!(
        fib.self_ns <= fib.total_ns + 1 && fib.min_ns <= fib.avg_ns && fib.avg_ns <= fib.max_ns
    );
}

#[test]
fn exit_is_recorded_through_panic_question_mark_and_early_return() {
    let (_d, p) = run_child("panic");
    let t = Trace::open(&p).unwrap();
    let tid = t.thread_ids()[0];
    let c = calls(&t, tid);
    assert_eq!(c.incomplete, 0, "every entry has its exit");
    assert_eq!(c.by_name["recording::scen::boom"], 4);
    assert_eq!(c.by_name["recording::scen::try_parse"], 2);
    assert_eq!(c.by_name["recording::scen::early"], 1);
    // After the unwinding, later calls are at the outermost level again.
    let after = c
        .list
        .iter()
        .find(|x| x.depth == 0 && x.end - x.start < u64::MAX)
        .unwrap();
    assert_eq!(after.depth, 0);
    assert!(c.list.iter().all(|x| x.depth < 4));
}

#[test]
fn eight_threads_each_have_a_complete_nested_stream() {
    let (_d, p) = run_child("threads");
    let t = Trace::open(&p).unwrap();
    let mut workers = 0;
    for tid in t.thread_ids() {
        let mut names = vec![];
        for r in t.stream(tid) {
            if let fntrace_format::Record::ThreadStart { name, .. } = r {
                names.push(name)
            }
        }
        let c = calls(&t, tid);
        if names.iter().any(|n| n.starts_with("worker-")) {
            workers += 1;
            assert_eq!(c.by_name["recording::scen::fib"], 2 * 987 - 1);
            assert_eq!(c.incomplete, 0);
            // Correct nesting: depth of every call is below its parent's end.
            let max_depth = c.list.iter().map(|x| x.depth).max().unwrap();
            assert_eq!(max_depth, 14);
        }
    }
    assert_eq!(workers, 8);
}

#[test]
fn async_fn_records_one_call_per_poll() {
    let (_d, p) = run_child("async");
    let t = Trace::open(&p).unwrap();
    let c = calls(&t, t.thread_ids()[0]);
    assert_eq!(c.by_name["recording::scen::pending_once"], 2);
    assert_eq!(c.incomplete, 0);
}

/// One parsed line of `fntrace replay`.
#[derive(Debug)]
struct Line {
    dur: Option<String>,
    tid: u32,
    level: usize,
    text: String,
}

fn replay(t: &Trace, o: &fntrace_cli::replay::ReplayOptions) -> Vec<Line> {
    let mut out = vec![];
    fntrace_cli::replay::write_replay(&mut out, t, o).unwrap();
    let s = String::from_utf8(out).unwrap();
    let mut lines = s.lines();
    assert_eq!(lines.next().unwrap(), "# DURATION     TID     FUNCTION");
    lines
        .map(|l| {
            let (head, body) = l.split_once(" | ").expect(l);
            let (dur, tid) = head.split_once('[').expect(l);
            let body = body.to_string();
            let level = (body.len() - body.trim_start().len()) / 2;
            Line {
                dur: Some(dur.trim().to_string()).filter(|d| !d.is_empty()),
                tid: tid.trim_end_matches(']').trim().parse().unwrap(),
                level,
                text: body.trim_start().to_string(),
            }
        })
        .collect()
}

/// Checks that every thread's lines form a well-nested tree and returns
/// the number of calls shown per thread.
fn check_nesting(lines: &[Line]) -> HashMap<u32, u64> {
    let mut stacks: HashMap<u32, Vec<String>> = HashMap::new();
    let mut shown: HashMap<u32, u64> = HashMap::new();
    for l in lines {
        let st = stacks.entry(l.tid).or_default();
        let closing = l.text.starts_with('}');
        assert_eq!(
            l.level + closing as usize,
            st.len(),
            "bad indentation: {l:?}"
        );
        let open = l
            .text
            .split_once("() {")
            .filter(|(_, r)| r.is_empty() || r.starts_with(" /* "));
        if let Some((name, _)) = open {
            assert!(l.dur.is_none());
            st.push(name.to_string());
            *shown.entry(l.tid).or_default() += 1;
        } else if let Some(rest) = l.text.strip_prefix("} /* ") {
            let name = st.pop().expect("close without open");
            assert_eq!(rest, format!("{name} */"));
            assert!(l.dur.is_some());
        } else {
            assert!(l.text.contains("();"), "{l:?}");
            assert!(l.dur.is_some());
            *shown.entry(l.tid).or_default() += 1;
        }
    }
    for (tid, st) in stacks {
        assert!(st.is_empty(), "thread {tid} left open: {st:?}");
    }
    shown
}

#[test]
fn replay_interleaves_threads_and_keeps_each_nested() {
    let (_d, p) = run_child("threads");
    let t = Trace::open(&p).unwrap();
    let lines = replay(&t, &Default::default());
    let shown = check_nesting(&lines);
    let full: Vec<_> = shown.values().filter(|&&n| n == 2 * 987 - 1).collect();
    assert_eq!(full.len(), 8, "{shown:?}");
    // --tid keeps one thread only.
    let one = *shown.keys().next().unwrap();
    let lines = replay(
        &t,
        &fntrace_cli::replay::ReplayOptions {
            tid: Some(one),
            ..Default::default()
        },
    );
    assert!(lines.iter().all(|l| l.tid == one));
}

#[test]
fn replay_depth_threshold_filter_and_srcline() {
    use fntrace_cli::pattern::NamePattern;
    use fntrace_cli::replay::ReplayOptions;
    let (_d, p) = run_child("fib");
    let t = Trace::open(&p).unwrap();
    // --depth 3: levels 0..2 only, 1 + 2 + 4 calls of fib(20).
    let lines = replay(
        &t,
        &ReplayOptions {
            depth: Some(3),
            ..Default::default()
        },
    );
    let shown = check_nesting(&lines);
    assert_eq!(shown.values().sum::<u64>(), 7);
    assert!(lines.iter().all(|l| l.level < 3));
    // --filter: subtrees of fib only, levels relative to the match.
    let lines = replay(
        &t,
        &ReplayOptions {
            depth: Some(2),
            filter: Some(NamePattern::new("fib").unwrap()),
            srcline: true,
            ..Default::default()
        },
    );
    assert_eq!(check_nesting(&lines).values().sum::<u64>(), 3);
    assert!(lines[0].text.contains("recording::scen::fib() { /* "));
    assert!(
        lines[0].text.contains("recording.rs:15 */"),
        "{:?}",
        lines[0]
    );
    // A filter that matches nothing shows nothing.
    let lines = replay(
        &t,
        &ReplayOptions {
            filter: Some(NamePattern::new("nothing_here").unwrap()),
            ..Default::default()
        },
    );
    assert!(lines.is_empty());
    // --threshold: every shown call is at least that long, and the short
    // leaves are gone while the tree stays nested.
    let all = replay(&t, &Default::default()).len();
    let lines = replay(
        &t,
        &ReplayOptions {
            threshold_ns: 2_000,
            ..Default::default()
        },
    );
    check_nesting(&lines);
    assert!(
        !lines.is_empty() && lines.len() < all / 4,
        "{} of {all}",
        lines.len()
    );
    for l in &lines {
        let d = l.dur.as_deref().unwrap_or("2 us");
        let ns = fntrace_cli::analysis::parse_duration(&d.replace(' ', "")).unwrap();
        assert!(ns >= 2_000, "{l:?}");
    }
}

#[test]
fn record_time_filters_apply_to_instrument_fn_sites() {
    let count = |env: &[(&str, &str)]| {
        let (_d, p) = run_child_env("filter", env);
        let t = Trace::open(&p).unwrap();
        let rows = report_rows(&t, false, SortKey::Name);
        let c = |f: &str| rows.iter().find(|r| r.function == f).map_or(0, |r| r.calls);
        (c("recording::scen::fib"), c("recording::scen::early"))
    };
    assert_eq!(count(&[]), (177, 1));
    assert_eq!(count(&[("FNTRACE_FILTER", "::fib$")]), (177, 0));
    assert_eq!(count(&[("FNTRACE_NOTRACE", "::fib$")]), (0, 1));
    assert_eq!(count(&[("FNTRACE_DEPTH", "2")]), (3, 1));
    assert_eq!(
        count(&[("FNTRACE_FILTER", "::fib$"), ("FNTRACE_DEPTH", "2")]),
        (3, 0)
    );
}
