//! The progress line of `fntrace record` on a terminal: events, bytes and
//! rate, read twice a second from the live counters the runtime's helper
//! thread keeps in the trace file's header page (no decoding, no
//! connection to the traced process).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fntrace_format::reader::read_live;

/// A running progress line; dropping it stops and clears the line.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Shows the progress of the recording into `path` on standard error.
    pub fn start(path: PathBuf) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fntrace-progress".into())
            .spawn(move || show(&path, &s))
            .ok();
        Progress { stop, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `n` with a K/M/G suffix.
pub fn human(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.2} G", n / 1e9),
        n if n >= 1e6 => format!("{:.1} M", n / 1e6),
        n if n >= 1e3 => format!("{:.1} K", n / 1e3),
        n => format!("{n:.0} "),
    }
}

fn show(path: &std::path::Path, stop: &AtomicBool) {
    let start = Instant::now();
    let mut shown = false;
    let mut prev: Option<(u64, u64)> = None;
    let mut rate = 0.0;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        let tick = start.elapsed().as_millis() / 100;
        if tick % 5 != 0 || start.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let Some(l) = read_live(path) else {
            continue;
        };
        if let Some((e, t)) = prev {
            if l.mono_ns > t {
                rate = (l.events.saturating_sub(e)) as f64 * 1e9 / (l.mono_ns - t) as f64;
            }
        }
        prev = Some((l.events, l.mono_ns));
        let bytes = 4096 + l.chunks * u64::from(fntrace_format::layout::DEFAULT_CHUNK_SIZE);
        let mut line = format!(
            "fntrace: {}events, {}B written, {}events/s, {}B trace memory resident",
            human(l.events as f64),
            human(bytes as f64),
            human(rate),
            human(l.resident as f64)
        );
        if l.lost_events > 0 {
            line.push_str(&format!(", {} lost", l.lost_events));
        }
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[K{line}");
        let _ = e.flush();
        shown = true;
    }
    if shown {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
}
