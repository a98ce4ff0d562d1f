//! `fntrace tui` in a real terminal: tmux starts it in a pane, keys are
//! sent to the pane and what the pane shows is read back (capture-pane)
//! and compared with what `fntrace report` and `fntrace replay` print for
//! the same trace. tmux is required (scripts/test installs it).
//!
//! Waits poll the pane until the expected text appears (generous
//! deadlines, no timing is measured).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{FIB_C, fntrace_bin, record_cmd, tool};
use fntrace_format::event::Framed;
use fntrace_format::layout::{ChunkHeader, FINAL_FLAG_CLEAN, Final, Header, META_TID};
use fntrace_format::writer::TraceBuilder;

/// A tmux server of its own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

const DEADLINE: Duration = Duration::from_secs(60);

impl Tmux {
    /// A server with one `w`×`h` window running `cmd` (through `sh -c`)
    /// with `env` set.
    fn start(w: u16, h: u16, env: &[(&str, &str)], cmd: &str) -> Tmux {
        static N: AtomicU32 = AtomicU32::new(0);
        let t = Tmux {
            socket: format!(
                "fntrace-tui-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
        };
        let mut c = Command::new("tmux");
        c.args(["-L", &t.socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", &w.to_string(), "-y", &h.to_string()]);
        for (k, v) in env {
            c.args(["-e", &format!("{k}={v}")]);
        }
        c.arg(cmd).env_remove("TMUX");
        let st = c
            .status()
            .unwrap_or_else(|e| panic!("tmux is required for this test: {e}"));
        assert!(st.success(), "tmux new-session failed");
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sends keys (tmux key names: `Enter`, `Down`, `q`, ...).
    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "0"];
        a.extend_from_slice(keys);
        self.tmux(&a);
    }

    /// Sends literal text.
    fn text(&self, s: &str) {
        self.tmux(&["send-keys", "-t", "0", "-l", s]);
    }

    /// The visible text of the pane.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "0"])
    }

    /// The pane with escape sequences for attributes and colours.
    fn screen_escaped(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-e", "-t", "0"])
    }

    /// Waits until the screen satisfies `ok`; returns it.
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "waited {DEADLINE:?} for {what}; the screen is:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the screen contains `text`.
    fn wait_for(&self, text: &str) -> String {
        self.wait(&format!("{text:?}"), |s| s.contains(text))
    }

    /// The row shown in reverse video (the selection, with `NO_COLOR`),
    /// between the title bar and the status line (also reversed).
    fn selected_row(&self) -> String {
        let s = self.screen_escaped();
        let lines: Vec<(bool, String)> = reverse_lines(&s);
        let n = lines.len();
        let rows: Vec<&String> = lines[1..n - 1]
            .iter()
            .filter(|l| l.0)
            .map(|l| &l.1)
            .collect();
        assert_eq!(rows.len(), 1, "one selected row:\n{s:?}");
        rows[0].trim().to_string()
    }
}

/// Each line's text and whether its first character is in reverse video
/// (`capture-pane -e` writes attribute changes only, so the state carries
/// over from line to line).
fn reverse_lines(s: &str) -> Vec<(bool, String)> {
    let mut rev = false;
    let mut out = vec![];
    for line in s.lines() {
        let mut text = String::new();
        let mut first: Option<bool> = None;
        let mut it = line.chars().peekable();
        while let Some(c) = it.next() {
            if c == '\x1b' {
                let mut seq = String::new();
                for d in it.by_ref() {
                    if d.is_ascii_alphabetic() {
                        if d == 'm' {
                            let p = seq.trim_start_matches('[');
                            for code in p.split(';') {
                                match code {
                                    "" | "0" => rev = false,
                                    "7" => rev = true,
                                    "27" => rev = false,
                                    _ => {}
                                }
                            }
                        }
                        break;
                    }
                    seq.push(d);
                }
            } else {
                if first.is_none() {
                    first = Some(rev);
                }
                text.push(c);
            }
        }
        out.push((first.unwrap_or(rev), text));
    }
    out
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// `fib.c` built with `-pg -g`, run as `fib 10` under `fntrace record`.
fn fib_trace(dir: &Path) -> PathBuf {
    let bin = dir.join("fib");
    tool(
        "gcc",
        &["-O1", "-g", "-pg", "-o", bin.to_str().unwrap(), FIB_C],
    );
    let data = dir.join("fib.data");
    let out = record_cmd(&data, &[], &bin, &["10"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "55");
    data
}

fn tui_cmd(data: &Path) -> String {
    format!("{} tui {}", fntrace_bin().display(), data.display())
}

fn run(args: &[&str]) -> String {
    let out = Command::new(fntrace_bin()).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The report view's first rows are `fntrace report`'s, in order, and
/// `s` sorts them by self time, calls and name.
#[test]
fn report_first_rows() {
    let dir = tempfile::tempdir().unwrap();
    let data = fib_trace(dir.path());
    let want = run(&["report", data.to_str().unwrap()]);
    let want: Vec<&str> = want.lines().skip(2).map(str::trim).collect();
    assert_eq!(want.len(), 2, "main and fib: {want:?}");
    let t = Tmux::start(80, 24, &[("NO_COLOR", "1")], &tui_cmd(&data));
    t.wait_for("main");
    t.keys(&["2"]);
    let s = t.wait_for("Total time");
    let rows: Vec<String> = s
        .lines()
        .skip_while(|l| !l.contains("Total time"))
        .skip(1)
        .take(2)
        .map(|l| l.trim().to_string())
        .collect();
    assert_eq!(rows, want, "{s}");
    assert!(
        rows[1].ends_with("177  fib"),
        "fib(10) makes 177 calls: {s}"
    );
    // Enter shows the callers and callees of the selected row's function.
    t.keys(&["Enter"]);
    let s = t.wait_for("CALL GRAPH");
    assert!(s.contains("Callers and callees of main"), "{s}");
    t.keys(&["2"]);
    t.wait_for("Total time");
    for (key, first) in [("self", "main"), ("calls", "fib"), ("name", "fib")] {
        t.keys(&["s"]);
        let s = t.wait_for(&format!("sorted by {key}"));
        let row = s
            .lines()
            .skip_while(|l| !l.contains("Total time"))
            .nth(1)
            .unwrap();
        assert!(row.trim().ends_with(first), "by {key}: {s}");
    }
    // `/` filters the report's rows.
    t.keys(&["/"]);
    t.text("^ma");
    t.keys(&["Enter"]);
    let s = t.wait_for("sorted by name, /^ma/");
    let rows: Vec<&str> = s
        .lines()
        .skip_while(|l| !l.contains("Total time"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    assert_eq!(rows, [want[0]], "{s}");
    // Info: `fntrace info`'s text.
    t.keys(&["4"]);
    let s = t.wait_for("# threads       1");
    assert!(s.contains("# events        356"), "{s}");
    t.keys(&["q"]);
}

/// One call of a replay: depth, name, duration as replay prints it.
#[derive(Debug, Clone, PartialEq)]
struct ReplayCall {
    depth: usize,
    name: String,
    dur: String,
    children: Vec<usize>,
}

/// Parses `fntrace replay` into calls (pre-order) with their children.
fn parse_replay(text: &str) -> Vec<ReplayCall> {
    let mut calls: Vec<ReplayCall> = vec![];
    let mut open: Vec<usize> = vec![];
    for line in text.lines().skip(1) {
        let (dur, rest) = line.split_once('[').unwrap();
        let body = rest.split_once("| ").unwrap().1;
        let depth = (body.len() - body.trim_start().len()) / 2;
        let body = body.trim();
        let new = |name: &str, dur: &str| ReplayCall {
            depth,
            name: name.to_string(),
            dur: dur.trim().to_string(),
            children: vec![],
        };
        if let Some(name) = body.strip_suffix("() {") {
            if let Some(&p) = open.last() {
                let n = calls.len();
                calls[p].children.push(n);
            }
            open.push(calls.len());
            calls.push(new(name, ""));
        } else if let Some(name) = body.strip_suffix("();") {
            if let Some(&p) = open.last() {
                let n = calls.len();
                calls[p].children.push(n);
            }
            calls.push(new(name, dur));
        } else if body.starts_with('}') {
            let i = open.pop().unwrap();
            calls[i].dur = dur.trim().to_string();
        }
    }
    calls
}

/// Rows of the tree view: (indentation level, duration, name).
fn tree_rows(screen: &str) -> Vec<(usize, String, String)> {
    let lines: Vec<&str> = screen.lines().collect();
    lines[1..lines.len().saturating_sub(1).max(1)]
        .iter()
        .filter(|l| l.len() > 12 && l.is_char_boundary(12) && l[..12].trim().ends_with('s'))
        .map(|l| {
            let (dur, rest) = l.split_at(12);
            let spaces = rest.len() - rest.trim_start().len();
            let t = rest.trim_start();
            // A fold mark (`>`, `v`) or two spaces in its place.
            let marked = t.starts_with("> ") || t.starts_with("v ");
            let level = if marked {
                spaces / 2
            } else {
                spaces.saturating_sub(2) / 2
            };
            let name = if marked { &t[2..] } else { t }.trim().to_string();
            (level, dur.trim().to_string(), name)
        })
        .filter(|r| !r.1.is_empty())
        .collect()
}

/// Expanding fib three levels shows the calls `fntrace replay` shows
/// there, at the same depths, with the same durations; `u` goes to the
/// parent, `L` to the slowest child, Left collapses.
#[test]
fn expand_fib_three_levels() {
    let dir = tempfile::tempdir().unwrap();
    let data = fib_trace(dir.path());
    let calls = parse_replay(&run(&["replay", data.to_str().unwrap()]));
    assert_eq!(calls[0].name, "main");
    // The expected rows: main, its fib, and the first child three times.
    let mut want = vec![];
    let mut expanded = vec![0];
    let mut c = calls[0].children[0];
    for _ in 0..3 {
        expanded.push(c);
        c = calls[c].children[0];
    }
    fn walk(
        calls: &[ReplayCall],
        i: usize,
        open: &[usize],
        out: &mut Vec<(usize, String, String)>,
    ) {
        out.push((calls[i].depth, calls[i].dur.clone(), calls[i].name.clone()));
        if open.contains(&i) {
            for &k in &calls[i].children {
                walk(calls, k, open, out);
            }
        }
    }
    walk(&calls, 0, &expanded, &mut want);
    let t = Tmux::start(80, 24, &[("NO_COLOR", "1")], &tui_cmd(&data));
    // main is opened at start: its fib is the second row.
    t.wait("main and fib", |s| tree_rows(s).len() == 2);
    for level in 1..=3 {
        t.keys(&["j", "Enter"]);
        t.wait(&format!("level {level}"), |s| {
            tree_rows(s).iter().any(|r| r.0 == level + 1)
        });
    }
    let s = t.screen();
    assert_eq!(tree_rows(&s), want, "{s}");
    assert!(s.contains("fib.c:8"), "the source line of fib: {s}");
    // The cursor is on the third expanded fib; u selects its parent, L
    // the parent's slowest child.
    let words = |r: String| r.split_whitespace().map(String::from).collect::<Vec<_>>();
    let row = |i: usize| words(format!("{} v {}", want[i].1, want[i].2));
    assert_eq!(words(t.selected_row()), row(3));
    t.keys(&["u"]);
    t.wait("the parent selected", |_| words(t.selected_row()) == row(2));
    let kids = &calls[expanded[2]].children;
    let slowest = kids
        .iter()
        .max_by(|&&a, &&b| {
            let ns = |i: usize| {
                let (v, u) = calls[i].dur.split_once(' ').unwrap();
                let v: f64 = v.parse().unwrap();
                v * match u {
                    "ns" => 1.0,
                    "us" => 1e3,
                    "ms" => 1e6,
                    _ => 1e9,
                }
            };
            ns(a).total_cmp(&ns(b))
        })
        .unwrap();
    t.keys(&["L"]);
    t.wait("the slowest child selected", |_| {
        let r = words(t.selected_row());
        r.starts_with(&words(calls[*slowest].dur.clone())) && r.ends_with(&["fib".to_string()])
    });
    // Left on an expanded call collapses it.
    t.keys(&["u", "Left"]);
    t.wait("collapsed", |s| tree_rows(s).len() == 4);
    t.keys(&["q"]);
}

const ALPHA_MAIN: u64 = 0x10;
const WORK: u64 = 0x20;
const NEEDLE: u64 = 0x30;
const LEAF: u64 = 0x40;
const FIB: u64 = 0x50;
const BETA_MAIN: u64 = 0x60;
/// `work` calls under `alpha_main`; the needle is inside the one at
/// [`NEEDLE_AT`] (beyond the first page of 1000 loaded children).
const WORKS: usize = 2500;
const NEEDLE_AT: usize = 1700;

/// Writes a stream of `(delta ns, event)` into small chunks.
struct Stream<'b> {
    b: &'b mut TraceBuilder,
    tid: u32,
    seq: u32,
    depth: u32,
    tsc: u64,
    c: fntrace_format::writer::ChunkBuf,
}

enum Ev<'a> {
    Enter(u64),
    Exit,
    Framed(Framed<'a>),
}

impl<'b> Stream<'b> {
    fn new(b: &'b mut TraceBuilder, tid: u32) -> Stream<'b> {
        let c = b.new_chunk(&ChunkHeader::at(tid, 0, 0, 1000));
        Stream {
            b,
            tid,
            seq: 0,
            depth: 0,
            tsc: 1000,
            c,
        }
    }

    fn put(&mut self, d: u64, ev: Ev) {
        loop {
            let ok = match &ev {
                Ev::Enter(f) => self.c.entry(d, *f),
                Ev::Exit => self.c.exit(d),
                Ev::Framed(f) => self.c.framed(f),
            };
            if ok {
                break;
            }
            self.c.seal();
            self.b.push_chunk(&self.c);
            self.seq += 1;
            self.c = self
                .b
                .new_chunk(&ChunkHeader::at(self.tid, self.seq, self.depth, self.tsc));
        }
        match ev {
            Ev::Enter(_) => self.depth += 1,
            Ev::Exit => self.depth -= 1,
            Ev::Framed(_) => {}
        }
        self.tsc += d;
    }

    fn call(&mut self, f: u64, d: u64, inner: impl FnOnce(&mut Self)) {
        self.put(d, Ev::Enter(f));
        inner(self);
        self.put(d, Ev::Exit);
    }

    fn finish(mut self) {
        self.c.seal();
        self.b.push_chunk(&self.c);
    }
}

/// Two threads: `alpha` (alpha_main: fib(3) = 2 with a leaf inside, a
/// marker, then 2500 `work` calls, one of which holds the `needle`) and
/// `beta` (beta_main with three leaves), in 256-byte chunks, 1 GHz clock.
fn synthetic(path: &Path) {
    let mut b = TraceBuilder::new(Header {
        start_tsc: 1000,
        pid: 7,
        ..Header::current(256, 1_000_000_000)
    });
    let mut meta = b.new_chunk(&ChunkHeader::at(META_TID, 0, 0, 1000));
    for (key, name, line) in [
        (ALPHA_MAIN, "alpha_main", 10),
        (WORK, "work", 20),
        (NEEDLE, "needle", 30),
        (LEAF, "leaf", 40),
        (FIB, "fib", 50),
        (BETA_MAIN, "beta_main", 60),
    ] {
        assert!(meta.framed(&Framed::Site {
            key,
            prefix: b"",
            name: name.as_bytes(),
            file: b"synthetic.rs",
            line,
        }));
    }
    meta.seal();
    b.push_chunk(&meta);
    let mut s = Stream::new(&mut b, 101);
    s.put(
        1,
        Ev::Framed(Framed::ThreadStart {
            d: 1,
            name: b"alpha",
        }),
    );
    s.call(ALPHA_MAIN, 10, |s| {
        s.put(10, Ev::Enter(FIB));
        s.put(0, Ev::Framed(Framed::Args { values: &[3] }));
        s.call(LEAF, 100, |_| {});
        s.put(0, Ev::Framed(Framed::RetVal { value: 2 }));
        s.put(10, Ev::Exit);
        s.put(
            5,
            Ev::Framed(Framed::Marker {
                d: 5,
                name: b"net_rx",
                text: b"len=1500",
            }),
        );
        for i in 0..WORKS {
            s.call(WORK, 10, |s| {
                s.call(LEAF, 20, |_| {});
                if i == NEEDLE_AT {
                    // 1,500 ns: a 500 ns leaf, then 1000 ns to the exit.
                    s.call(NEEDLE, 1000, |s| s.call(LEAF, 250, |_| {}));
                }
            });
        }
    });
    s.finish();
    let mut s = Stream::new(&mut b, 202);
    s.put(
        1,
        Ev::Framed(Framed::ThreadStart {
            d: 1,
            name: b"beta",
        }),
    );
    s.call(BETA_MAIN, 10, |s| {
        for _ in 0..3 {
            s.call(LEAF, 30, |_| {});
        }
    });
    s.finish();
    let chunks = b.chunks();
    let bytes = b.finish(&Final {
        flags: FINAL_FLAG_CLEAN,
        chunks,
        tsc_hz: 1_000_000_000,
        ..Final::default()
    });
    std::fs::write(path, bytes).unwrap();
}

/// Argument and return values and markers are shown inline; `/` finds a
/// call deep inside the 1701st of 2500 calls (past the first page of
/// loaded children), opening its parents and selecting it; `n` finds
/// the next call of the same function.
#[test]
fn search_values_and_markers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("s.data");
    synthetic(&data);
    let t = Tmux::start(80, 24, &[("NO_COLOR", "1")], &tui_cmd(&data));
    let s = t.wait_for("alpha_main");
    assert!(s.contains("thread 101 alpha (1/2)"), "{s}");
    let rows = tree_rows(&s);
    assert_eq!(rows[0].2, "alpha_main", "{s}");
    assert_eq!((rows[1].0, rows[1].2.as_str()), (1, "fib(3) = 2"), "{s}");
    assert!(
        s.lines().nth(3).unwrap().trim() == "/* marker net_rx len=1500 */",
        "{s}"
    );
    assert_eq!(
        t.selected_row().split_whitespace().last(),
        Some("alpha_main")
    );
    t.keys(&["/"]);
    t.text("^need");
    t.wait_for("/^need");
    t.keys(&["Enter"]);
    t.wait_for("found /^need/");
    assert_eq!(
        t.selected_row().split_whitespace().collect::<Vec<_>>(),
        ["1.500", "us", ">", "needle"]
    );
    let s = t.screen();
    let rows = tree_rows(&s);
    let i = rows.iter().position(|r| r.2 == "needle").unwrap();
    assert_eq!(rows[i].0, 2, "needle is inside work: {s}");
    assert_eq!(rows[i - 2].2, "work", "{s}");
    assert_eq!(rows[i - 1].2, "leaf", "{s}");
    assert_eq!(rows[i - 1].0, 2, "{s}");
    t.keys(&["k", "j"]);
    t.wait_for("needle  synthetic.rs:30");
    // The next `work` after the one holding the needle.
    t.keys(&["u", "n"]);
    t.wait("the next work", |_| t.selected_row().ends_with("> work"));
    t.keys(&["/"]);
    t.text("(");
    t.keys(&["Enter"]);
    let s = t.wait_for("bad regular expression");
    assert!(
        s.lines()
            .last()
            .unwrap()
            .contains("bad regular expression: unclosed group"),
        "{s}"
    );
    t.keys(&["q"]);
}

/// `t` and `T` switch threads (the title says which), each thread keeps
/// its selection.
#[test]
fn switch_threads() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("s.data");
    synthetic(&data);
    let t = Tmux::start(80, 24, &[("NO_COLOR", "1")], &tui_cmd(&data));
    t.wait_for("thread 101 alpha (1/2)");
    t.keys(&["j", "j"]);
    t.wait("the marker selected", |_| {
        t.selected_row().contains("net_rx")
    });
    t.keys(&["t"]);
    let s = t.wait_for("thread 202 beta (2/2)");
    let rows = tree_rows(&s);
    assert_eq!(rows[0].2, "beta_main", "{s}");
    assert!(
        rows[1..]
            .iter()
            .all(|r| r.2 == "leaf" && r.0 == 1 && r.1 == "30 ns"),
        "{rows:?}\n{s}"
    );
    assert!(!s.contains("alpha_main"), "{s}");
    t.keys(&["T"]);
    t.wait_for("thread 101 alpha (1/2)");
    t.wait("alpha's selection kept", |_| {
        t.selected_row().contains("net_rx")
    });
    t.keys(&["t", "t"]);
    t.wait_for("thread 101 alpha (1/2)");
    t.keys(&["q"]);
}

/// `q` leaves the alternate screen and restores the terminal: the shell's
/// earlier output and its prompt are back, and it reads a line again.
#[test]
fn quit_restores_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("s.data");
    synthetic(&data);
    let t = Tmux::start(80, 24, &[], "env PS1='PROMPT$ ' sh");
    t.wait_for("PROMPT$");
    t.text("echo BEFORE-$((20+22))");
    t.keys(&["Enter"]);
    t.wait_for("BEFORE-42");
    t.text(&tui_cmd(&data));
    t.keys(&["Enter"]);
    t.wait_for("1Tree");
    let alt = || t.tmux(&["display-message", "-p", "-t", "0", "#{alternate_on}"]);
    assert_eq!(alt().trim(), "1", "runs in the alternate screen");
    assert!(!t.screen().contains("BEFORE-42"));
    t.keys(&["?"]);
    t.wait_for("Keys");
    t.keys(&["q"]);
    let s = t.wait("the shell back", |s| {
        s.contains("BEFORE-42") && !s.contains("1Tree")
    });
    assert_eq!(alt().trim(), "0", "alternate screen left: {s}");
    // Echo and line editing work again (raw mode is off).
    t.text("echo AFTER-$((1+2))");
    t.keys(&["Enter"]);
    let s = t.wait_for("AFTER-3");
    assert!(s.matches("PROMPT$").count() >= 3, "{s}");
}

/// Colours by default, none with `NO_COLOR` (the selection is then in
/// reverse video); the screen is redrawn to a new size on resize.
#[test]
fn no_color_and_resize() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("s.data");
    synthetic(&data);
    let colour = |s: &str| {
        s.split('\x1b').skip(1).any(|e| {
            let p = e.trim_start_matches('[');
            let code = p.split(['m', ';']).next().unwrap_or("");
            matches!(code.len(), 2)
                && (code.starts_with('3') || code.starts_with('4'))
                && code != "39"
                && code != "49"
        })
    };
    let t = Tmux::start(80, 24, &[], &tui_cmd(&data));
    t.wait_for("alpha_main");
    assert!(colour(&t.screen_escaped()), "colours by default");
    t.keys(&["q"]);
    let t = Tmux::start(80, 24, &[("NO_COLOR", "1")], &tui_cmd(&data));
    t.wait_for("alpha_main");
    let e = t.screen_escaped();
    assert!(!colour(&e), "no colour with NO_COLOR: {e:?}");
    assert!(e.contains("\x1b[7m"), "reverse video: {e:?}");
    let s = t.screen();
    assert_eq!(s.lines().count(), 24, "{s:?}");
    assert!(
        s.lines()
            .nth(23)
            .unwrap()
            .contains("alpha_main  synthetic.rs:10"),
        "{s}"
    );
    t.tmux(&["resize-window", "-t", "0", "-x", "100", "-y", "40"]);
    let s = t.wait("40 lines", |s| {
        s.lines().count() == 40 && s.lines().nth(39).unwrap().contains("synthetic.rs:10")
    });
    // More rows of the 2500 `work` calls fill the taller screen.
    // (All rows but the marker's have a duration.)
    assert_eq!(tree_rows(&s).len(), 37, "{s}");
    t.tmux(&["resize-window", "-t", "0", "-x", "80", "-y", "24"]);
    t.wait("24 lines", |s| tree_rows(s).len() == 21);
    t.keys(&["q"]);
}

/// Without a terminal, and on a file that is not a trace, one line says
/// what is wrong and the exit status is not zero; the terminal is left
/// as it was.
#[test]
fn errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("s.data");
    synthetic(&data);
    let out = Command::new(fntrace_bin())
        .args(["tui", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("needs a terminal"), "{err}");
    let bad = dir.path().join("not-a-trace");
    std::fs::write(&bad, b"hello, world").unwrap();
    let t = Tmux::start(
        80,
        24,
        &[],
        &format!("{}; echo EXIT=$?; sleep 600", tui_cmd(&bad)),
    );
    let s = t.wait_for("EXIT=");
    assert!(s.contains("EXIT=2"), "{s}");
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{s}");
    assert!(
        lines[0].starts_with(&format!("fntrace: {}: ", bad.display()))
            && lines[0].contains("bad magic"),
        "{s}"
    );
}

/// Names, thread names and marker text are untrusted bytes from the trace:
/// control characters in them (a screen clear, a title change, a bell,
/// a newline) are drawn as visible escapes, never sent to the terminal.
#[test]
fn hostile_names_are_drawn_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("h.data");
    let mut b = TraceBuilder::new(Header {
        start_tsc: 1000,
        pid: 7,
        ..Header::current(256, 1_000_000_000)
    });
    let mut meta = b.new_chunk(&ChunkHeader::at(META_TID, 0, 0, 1000));
    for (key, name) in [
        (ALPHA_MAIN, &b"top\x1b[2Jclear"[..]),
        (LEAF, b"leaf\x07bell"),
    ] {
        assert!(meta.framed(&Framed::Site {
            key,
            prefix: b"",
            name,
            file: b"h.rs",
            line: 1,
        }));
    }
    meta.seal();
    b.push_chunk(&meta);
    let mut s = Stream::new(&mut b, 101);
    s.put(
        1,
        Ev::Framed(Framed::ThreadStart {
            d: 1,
            name: b"th\x1b]0;pwned\x07",
        }),
    );
    s.call(ALPHA_MAIN, 10, |s| {
        s.put(
            5,
            Ev::Framed(Framed::Marker {
                d: 5,
                name: b"m",
                text: b"a\nb\rc",
            }),
        );
        s.call(LEAF, 100, |_| {});
    });
    s.finish();
    let chunks = b.chunks();
    let bytes = b.finish(&Final {
        flags: FINAL_FLAG_CLEAN,
        chunks,
        tsc_hz: 1_000_000_000,
        ..Final::default()
    });
    std::fs::write(&data, bytes).unwrap();
    let t = Tmux::start(80, 24, &[("NO_COLOR", "1")], &tui_cmd(&data));
    let s = t.wait_for("leaf");
    assert!(s.contains(r"thread 101 th\x1b]0;pwned\x07"), "{s}");
    assert!(s.contains(r"top\x1b[2Jclear"), "{s}");
    assert!(s.contains(r"leaf\x07bell"), "{s}");
    assert!(s.contains(r"/* marker m a\x0ab\x0dc */"), "{s}");
    // Nothing reached the terminal: the window's title is not the one in
    // the thread name, and the screen was not cleared under the tree.
    assert!(
        !t.tmux(&["display-message", "-p", "#{pane_title}"])
            .contains("pwned")
    );
    t.keys(&["q"]);
}
