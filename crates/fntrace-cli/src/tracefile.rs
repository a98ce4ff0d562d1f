//! Opening a trace for a view: the shared trace-file argument of the
//! views and exports, the warning about damaged parts, and the progress
//! bar of long reads.

use std::io;
use std::path::{Path, PathBuf};

use fntrace_format::Trace;

use crate::Result;

/// The trace-file argument of the views and exports.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceFile {
    /// Trace file.
    #[arg(default_value = "fntrace.data")]
    pub path: PathBuf,
}

/// The traces written next to `output` by the processes of one recording
/// besides the first: forked children (`OUTPUT.PID`) and images they
/// `exec`'d (`OUTPUT.PID` for an `exec` of the first process,
/// `OUTPUT.PID.N` after that), sorted by name.
pub fn child_traces(output: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (output.parent(), output.file_name()) else {
        return vec![];
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix(&prefix).is_some_and(|rest| {
                let parts: Vec<&str> = rest.split('.').collect();
                parts.len() <= 2
                    && parts
                        .iter()
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .map(|e| output.with_file_name(e.file_name()))
        .collect();
    v.sort();
    v
}

/// Makes room for a new recording at `output` without losing the previous
/// one: an existing `output` (and the traces of its child processes,
/// `output.PID[.N]`) are renamed to `output.old` (and `output.old.PID[.N]`),
/// replacing an older `.old` family, as uftrace keeps `uftrace.data.old`.
/// Returns the `.old` path when there was something to keep.
///
/// Only regular files (or symbolic links to regular files, which are
/// moved or removed as links) are moved aside or replaced: when `output`,
/// one of its child traces or an `.old` file to replace is anything else
/// (a directory, a device, a FIFO, a socket, a dangling link), nothing is
/// touched and the error says which and what it is.
pub fn keep_old(output: &Path) -> Result<Option<PathBuf>> {
    let children = child_traces(output);
    if let Some(what) = not_a_file(output) {
        return Err(crate::Error::Invalid(format!(
            "cannot record to {}: it is {what} (give a file path)",
            output.display()
        )));
    }
    if std::fs::symlink_metadata(output).is_err() && children.is_empty() {
        return Ok(None);
    }
    let mut old = output.as_os_str().to_os_string();
    old.push(".old");
    let old = PathBuf::from(old);
    let old_family: Vec<PathBuf> = std::iter::once(old.clone())
        .chain(child_traces(&old))
        .collect();
    // Everything is checked before anything moves.
    for (f, role) in children.iter().map(|c| (c, "not a trace")).chain(
        old_family
            .iter()
            .map(|f| (f, "not an earlier trace to replace")),
    ) {
        if let Some(what) = not_a_file(f) {
            return Err(crate::Error::Invalid(format!(
                "cannot record to {}: {} is {what}, {role} (move it away or give another file path)",
                output.display(),
                f.display()
            )));
        }
    }
    let fail = |p: &Path, what: &str| {
        crate::Error::io_at(format!(
            "{}: cannot {what} (to keep the previous trace as {})",
            p.display(),
            old.display()
        ))
    };
    for f in &old_family {
        match std::fs::remove_file(f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(f, "remove")(e)),
        }
    }
    if std::fs::symlink_metadata(output).is_ok() {
        std::fs::rename(output, &old).map_err(fail(output, "rename"))?;
    }
    let name = output.file_name().unwrap_or_default().to_string_lossy();
    for c in children {
        let suffix = c
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .strip_prefix(name.as_ref())
            .unwrap_or_default()
            .to_string();
        let mut to = old.as_os_str().to_os_string();
        to.push(&suffix);
        std::fs::rename(&c, &to).map_err(fail(&c, "rename"))?;
    }
    Ok(Some(old))
}

/// What the entry at `p` is when it is not a file a recording may move
/// aside, replace or write: "a directory", "a FIFO", "a symbolic link to a
/// character device", "a dangling symbolic link", ...; `None` for a
/// regular file, a symbolic link to one, and when nothing is at `p` (or
/// it cannot be looked at: the operation that follows says why).
pub(crate) fn not_a_file(p: &Path) -> Option<String> {
    let m = std::fs::symlink_metadata(p).ok()?;
    if !m.file_type().is_symlink() {
        return (!m.is_file())
            .then(|| fntrace_format::regular::file_kind(m.file_type()).to_string());
    }
    match std::fs::metadata(p) {
        Ok(t) if t.is_file() => None,
        Ok(t) => Some(format!(
            "a symbolic link to {}",
            fntrace_format::regular::file_kind(t.file_type())
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some("a dangling symbolic link".into()),
        Err(e) => Some(format!("a symbolic link that cannot be followed ({e})")),
    }
}

/// Opens a trace.
pub fn open(path: &Path) -> Result<Trace> {
    Ok(Trace::open(path)?)
}

/// Opens a trace and warns (on stderr) about damaged parts the views skip.
pub fn open_checked(path: &Path) -> Result<Trace> {
    let t = open(path)?;
    warn_damage(&t);
    Ok(t)
}

/// Warns on stderr when a trace has damaged parts.
pub fn warn_damage(t: &Trace) {
    if !t.damage().is_empty() {
        eprintln!(
            "fntrace: {}: {} damaged parts skipped (see `fntrace info`)",
            t.path().display(),
            t.damage().len()
        );
    }
}

/// Runs `f`, showing a progress bar on stderr (chunks read out of
/// `passes` passes over the trace) if it takes more than a second and
/// stderr is a terminal.
pub fn with_progress<R>(t: &Trace, passes: u64, label: &str, f: impl FnOnce() -> R) -> R {
    use std::io::IsTerminal;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !io::stderr().is_terminal() {
        return f();
    }
    let total = t.stream_chunks() * passes;
    let base = t.chunks_read();
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_secs(1) {
                if done.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} [{bar:40}] {percent}% ({elapsed}, {eta} left)",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_message(label.to_string());
            while !done.load(Ordering::Acquire) {
                bar.set_position(t.chunks_read().saturating_sub(base).min(total));
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        let r = f();
        done.store(true, Ordering::Release);
        r
    })
}
