//! `fntrace export`: writes a trace in another tool's format, one module
//! per format, and reports on stderr what went into the file.

pub mod chrome;
pub mod flamegraph;
pub mod folded;
pub mod gmon;
pub mod html;
pub mod perfetto;
pub mod xray;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub use chrome::write_chrome;
pub use flamegraph::{write_flamegraph, write_flamegraph_of};
pub use folded::{
    MAX_FOLDED_DEPTH, Weight, folded_stacks, folded_stacks_of, write_folded, write_folded_of,
};
pub use gmon::{GmonSummary, write_gmon};
pub use html::write_html;
pub use perfetto::{PerfettoSummary, write_perfetto};
pub use xray::{XraySummary, write_xray};

use fntrace_format::{Metadata, ModuleInfo};

use crate::select::{SelectArgs, Selection};
use crate::tracefile::open_checked;
use crate::{Error, Result};

/// Formats of `fntrace export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// glibc's gmon.out, for `gprof BINARY gmon.out`.
    Gmon,
    /// An llvm-xray basic-mode log, for `llvm-xray account -instr_map=BINARY`.
    Xray,
    /// Chrome Trace Event JSON, for Perfetto UI and chrome://tracing.
    Chrome,
    /// A native Perfetto protobuf trace (track events, interned names), for
    /// Perfetto UI and trace processor: far smaller and faster to load
    /// than `chrome`.
    Perfetto,
    /// Collapsed stacks (self time in ns), for flame-graph tools; stacks
    /// deeper than 1,024 frames are cut there (their time is kept).
    Folded,
    /// A flame graph (SVG), of the same stacks.
    Flamegraph,
    /// One self-contained offline HTML page: summary, per-thread timeline,
    /// flame graph per thread, top functions, call tree.
    Html,
}

/// `fntrace export`: writes the trace at `path` to `output` in `format`,
/// with the calls `select` selects (every format; a `--count` trace has
/// no calls to select).
///
/// The file is written under a temporary name in the same directory and
/// renamed into place when complete, so that a failed export leaves no
/// file (and does not destroy an earlier one); a symbolic link is written
/// through (the file it leads to is replaced, the link stays). A
/// character device or a FIFO (`/dev/stdout`, `/dev/null`, a named pipe)
/// is written directly. A directory, a block device, a socket and the
/// input trace itself are refused before anything is read.
pub fn run(path: &Path, format: ExportFormat, output: &Path, select: &SelectArgs) -> Result<()> {
    run_weighted(path, format, output, select, Weight::Wall)
}

/// [`run`] with the folded stacks' and flame graph's values measured as
/// `weight` says (`--weight on-cpu|off-cpu`: a trace recorded with
/// `--sched`; other formats refuse it).
pub fn run_weighted(
    path: &Path,
    format: ExportFormat,
    output: &Path,
    select: &SelectArgs,
    weight: Weight,
) -> Result<()> {
    let sel = select.parse()?;
    if weight != Weight::Wall && !matches!(format, ExportFormat::Folded | ExportFormat::Flamegraph)
    {
        return Err(Error::Invalid(
            "--weight applies to the folded and flamegraph exports".into(),
        ));
    }
    let target = Target::of(output, path)?;
    let t = open_checked(path)?;
    if !sel.is_all() && format == ExportFormat::Gmon && !t.metadata().arcs.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: a --count trace holds call-graph arcs, not calls: --tid, --time-range, \
             --filter, --depth and --threshold do not apply to it",
            path.display()
        )));
    }
    if matches!(format, ExportFormat::Flamegraph | ExportFormat::Html) && counted_only(&t) {
        return Err(Error::Invalid(format!(
            "{}: a --count trace holds call-graph arcs, not timed stacks: no flame graph \
             (use `fntrace report` or `fntrace export --format gmon`)",
            path.display()
        )));
    }
    // After the --count refusals, which say more about such a trace.
    sel.check_tid(&t, path)?;
    if weight != Weight::Wall && t.metadata().offcpu.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no off-CPU intervals (record with --sched): no on-CPU or off-CPU flame graph",
            path.display()
        )));
    }
    let (file, tmp) = match target {
        Target::Replace(file) => {
            let (tmp, f) = TempOutput::create(output, &file)?;
            (f, Some(tmp))
        }
        Target::Direct => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(output)
                .map_err(Error::io_at(format!(
                    "cannot export to {}",
                    output.display()
                )))?;
            (f, None)
        }
        Target::Stdout => {
            use std::os::fd::AsFd;
            let fd = io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .map_err(Error::io_at("cannot export to standard output".to_string()))?;
            (std::fs::File::from(fd), None)
        }
    };
    let mut buf = io::BufWriter::with_capacity(
        1 << 20,
        Watched {
            inner: file,
            failed: false,
        },
    );
    let said = match write(&t, format, output, &mut buf, &sel, weight).and_then(|s| {
        buf.flush()?;
        Ok(s)
    }) {
        Ok(s) => s,
        // A failure to write the output names the output; any other (the
        // executable a gmon or XRay export reads, a module map missing)
        // names the trace.
        Err(e) if buf.get_ref().failed => {
            return Err(Error::io_at(format!("{}: cannot write", output.display()))(
                e,
            ));
        }
        Err(e) => {
            return Err(Error::io_at(format!("{}: cannot export", path.display()))(
                e,
            ));
        }
    };
    drop(buf);
    if let Some(tmp) = tmp {
        tmp.persist()?;
    }
    // Only now is the export in place: what it holds, and its warnings.
    for line in said {
        eprintln!("fntrace: {line}");
    }
    Ok(())
}

/// A writer that remembers whether writing to it failed (to tell a
/// failure of the output from the other errors of an export).
struct Watched<W> {
    inner: W,
    failed: bool,
}

impl<W: Write> Write for Watched<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let r = self.inner.write(b);
        self.failed |= r.is_err();
        r
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = self.inner.flush();
        self.failed |= r.is_err();
        r
    }
}

/// Writes the export into `buf` and returns what to say about it once it
/// is in place at `output` (the summary line, after any warnings).
fn write(
    t: &fntrace_format::Trace,
    format: ExportFormat,
    output: &Path,
    buf: &mut dyn Write,
    sel: &Selection,
    weight: Weight,
) -> io::Result<Vec<String>> {
    let mut said = vec![];
    match format {
        ExportFormat::Gmon => {
            let s = write_gmon(buf, t, sel)?;
            if let Some(first) = s.capped.first() {
                said.push(format!(
                    "warning: the arc {} -> {} claims {} calls, more than gmon.out holds: \
                     written as {}{} (the trace may be damaged)",
                    first.caller,
                    first.callee,
                    first.count,
                    gmon::MAX_ARC_CALLS,
                    match s.capped.len() - 1 {
                        0 => String::new(),
                        n => format!(", and so are {n} more arcs"),
                    }
                ));
            }
            if let Some((f, ns)) = s.capped_time.first() {
                said.push(format!(
                    "warning: the self time of {f} ({}) is more than its histogram bins in \
                     gmon.out hold: written as much as fits{}",
                    crate::analysis::fmt_ns(*ns).trim(),
                    match s.capped_time.len() - 1 {
                        0 => String::new(),
                        n => format!(", and so is that of {n} more functions"),
                    }
                ));
            }
            said.push(format!(
                "wrote {} arcs ({} calls, from {}) to {}",
                s.arcs,
                s.calls,
                if s.counted {
                    "counted arcs"
                } else {
                    "timed calls"
                },
                output.display()
            ));
        }
        ExportFormat::Perfetto => {
            let s = write_perfetto(buf, t, sel)?;
            said.push(format!(
                "wrote {} track events of {} threads ({} bytes) to {}",
                s.events,
                s.threads,
                s.bytes,
                output.display()
            ));
        }
        ExportFormat::Chrome => {
            let n = write_chrome(buf, t, sel)?;
            said.push(format!("wrote {n} events to {}", output.display()));
        }
        ExportFormat::Folded => {
            let n = write_folded_of(buf, t, sel, weight)?;
            said.push(format!("wrote {n} stacks to {}", output.display()));
        }
        ExportFormat::Flamegraph => {
            let title = t
                .metadata()
                .process
                .as_ref()
                .map(|p| p.args.join(" "))
                .unwrap_or_else(|| t.path().display().to_string());
            let title = match weight {
                Weight::Wall => title,
                Weight::OnCpu => format!("{title} (on CPU)"),
                Weight::OffCpu => format!("{title} (off CPU)"),
            };
            let n = write_flamegraph_of(buf, t, &title, sel, weight)?;
            said.push(format!(
                "wrote a flame graph of {n} stacks to {}",
                output.display()
            ));
        }
        ExportFormat::Html => {
            write_html(buf, t, sel)?;
            said.push(format!("wrote {}", output.display()));
        }
        ExportFormat::Xray => {
            let s = write_xray(buf, t, sel)?;
            said.push(format!(
                "wrote {} XRay records to {}{}",
                s.records,
                output.display(),
                if s.skipped > 0 {
                    format!(
                        " ({} calls of functions without an XRay id left out)",
                        s.skipped
                    )
                } else {
                    String::new()
                }
            ));
        }
    }
    Ok(said)
}

/// Whether a trace holds counted arcs and no timed call.
fn counted_only(t: &fntrace_format::Trace) -> bool {
    !t.metadata().arcs.is_empty()
        && t.thread_ids().into_iter().all(|tid| {
            t.stream(tid)
                .all(|r| !matches!(r, fntrace_format::Record::Entry { .. }))
        })
}

/// Where an export goes, decided before the trace is read.
enum Target {
    /// A regular file (or none yet) at this path (the output, or where its
    /// symbolic links lead): written under a temporary name next to it
    /// and renamed onto it.
    Replace(PathBuf),
    /// A character device or a FIFO (`/dev/null`, `/dev/stdout` on a
    /// pipe or a terminal): opened and written in place.
    Direct,
    /// `-o -`: standard output.
    Stdout,
}

impl Target {
    /// Where `output` leads, refusing a directory, a block device, a
    /// socket and the trace `input` itself with one line that says so.
    fn of(output: &Path, input: &Path) -> Result<Target> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        if output.as_os_str() == "-" {
            return Ok(Target::Stdout);
        }
        let refuse =
            |why: &str| Error::Invalid(format!("cannot export to {}: {why}", output.display()));
        // Following symbolic links: what would be written.
        let m = match std::fs::metadata(output) {
            Ok(m) => m,
            // Nothing there (or a dangling link): the file is created.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Target::Replace(resolve_links(output)?));
            }
            Err(e) => {
                return Err(Error::io_at(format!(
                    "cannot export to {}",
                    output.display()
                ))(e));
            }
        };
        if let Ok(i) = std::fs::metadata(input)
            && (i.dev(), i.ino()) == (m.dev(), m.ino())
        {
            return Err(refuse(&format!(
                "it is the trace being exported, {} (give another file path)",
                input.display()
            )));
        }
        let ft = m.file_type();
        if ft.is_file() {
            return Ok(Target::Replace(resolve_links(output)?));
        }
        if ft.is_char_device() || ft.is_fifo() {
            return Ok(Target::Direct);
        }
        let link = std::fs::symlink_metadata(output).is_ok_and(|l| l.file_type().is_symlink());
        Err(refuse(&format!(
            "it is {}{} (give a file path)",
            if link { "a symbolic link to " } else { "" },
            fntrace_format::regular::file_kind(ft)
        )))
    }
}

/// `p` with the symbolic links of its last component followed (the file
/// they lead to, which need not exist), so that an export replaces that
/// file and not the link.
fn resolve_links(p: &Path) -> Result<PathBuf> {
    let mut p = p.to_path_buf();
    // As many as the kernel follows (MAXSYMLINKS).
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p).map_err(Error::io_at(format!(
                    "{}: cannot read the link",
                    p.display()
                )))?;
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(Error::Invalid(format!(
        "cannot export to {}: too many levels of symbolic links",
        p.display()
    )))
}

/// An output file written under a temporary name next to its final path
/// and renamed there by [`TempOutput::persist`]; removed if dropped before.
struct TempOutput {
    tmp: PathBuf,
    /// The file to replace.
    file: PathBuf,
    /// The path given (for messages).
    output: PathBuf,
    done: bool,
}

/// The temporary name of an export to `name` by process `pid`.
fn temp_name(name: &std::ffi::OsStr, pid: u32) -> std::ffi::OsString {
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".fntrace-{pid}.tmp"));
    tmp
}

impl TempOutput {
    /// Creates the temporary file of an export to `output`, which replaces
    /// `file` (`output` itself, or where its links lead), and opens it.
    fn create(output: &Path, file: &Path) -> Result<(TempOutput, std::fs::File)> {
        let name = file
            .file_name()
            .ok_or_else(|| Error::Invalid(format!("{}: not a file name", output.display())))?;
        remove_stale_temps(file, name);
        let tmp = file.with_file_name(temp_name(name, std::process::id()));
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(Error::io_at(format!(
                "cannot export to {}: cannot create the temporary file {} next to it",
                output.display(),
                tmp.display()
            )))?;
        Ok((
            TempOutput {
                tmp,
                file: file.to_path_buf(),
                output: output.to_path_buf(),
                done: false,
            },
            f,
        ))
    }

    fn persist(mut self) -> Result<()> {
        std::fs::rename(&self.tmp, &self.file).map_err(Error::io_at(format!(
            "{}: cannot write",
            self.output.display()
        )))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for TempOutput {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Removes the temporary files earlier exports to `file` left when they
/// were killed (`.NAME.fntrace-PID.tmp` of a process that no longer
/// exists; a process of that id alive, or one this process cannot see,
/// keeps its file).
fn remove_stale_temps(file: &Path, name: &std::ffi::OsStr) {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    // `temp_name` up to the process id.
    let prefix = format!(".{}.fntrace-", name.to_string_lossy());
    for e in entries.flatten() {
        let n = e.file_name();
        let Some(pid) = n
            .to_str()
            .and_then(|n| n.strip_prefix(prefix.as_str()))
            .and_then(|r| r.strip_suffix(".tmp"))
            .and_then(|p| p.parse::<i32>().ok())
            .filter(|&p| p > 0 && p as u32 != std::process::id())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone && e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The module of the traced process's executable (the first module when
/// the trace names no executable): what gmon.out and XRay logs describe.
fn main_module(meta: &Metadata) -> io::Result<&ModuleInfo> {
    meta.process
        .as_ref()
        .and_then(|p| meta.modules.iter().find(|m| m.path == p.exe))
        .or_else(|| meta.modules.first())
        .ok_or_else(|| io::Error::other("the trace has no module map"))
}
