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
use std::path::Path;

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
/// file (and does not destroy an earlier one).
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
    if weight != Weight::Wall && t.metadata().offcpu.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no off-CPU intervals (record with --sched): no on-CPU or off-CPU flame graph",
            path.display()
        )));
    }
    let tmp = TempOutput::create(output)?;
    write(&t, path, format, output, tmp.file()?, &sel, weight)?;
    tmp.persist()
}

/// Writes the export into `file` (the temporary file of `output`).
fn write(
    t: &fntrace_format::Trace,
    path: &Path,
    format: ExportFormat,
    output: &Path,
    file: std::fs::File,
    sel: &Selection,
    weight: Weight,
) -> Result<()> {
    let mut buf = io::BufWriter::with_capacity(1 << 20, file);
    match format {
        ExportFormat::Gmon => {
            let s = write_gmon(&mut buf, t, sel)
                .map_err(Error::io_at(format!("{}: cannot export", path.display())))?;
            eprintln!(
                "fntrace: wrote {} arcs ({} calls, from {}) to {}",
                s.arcs,
                s.calls,
                if s.counted {
                    "counted arcs"
                } else {
                    "timed calls"
                },
                output.display()
            );
        }
        ExportFormat::Perfetto => {
            let s = write_perfetto(&mut buf, t, sel)
                .map_err(Error::io_at(format!("{}: cannot write", output.display())))?;
            eprintln!(
                "fntrace: wrote {} track events of {} threads ({} bytes) to {}",
                s.events,
                s.threads,
                s.bytes,
                output.display()
            );
        }
        ExportFormat::Chrome => {
            let n = write_chrome(&mut buf, t, sel)?;
            eprintln!("fntrace: wrote {n} events to {}", output.display());
        }
        ExportFormat::Folded => {
            let n = write_folded_of(&mut buf, t, sel, weight)?;
            eprintln!("fntrace: wrote {n} stacks to {}", output.display());
        }
        ExportFormat::Flamegraph => {
            let title = t
                .metadata()
                .process
                .as_ref()
                .map(|p| p.args.join(" "))
                .unwrap_or_else(|| path.display().to_string());
            let title = match weight {
                Weight::Wall => title,
                Weight::OnCpu => format!("{title} (on CPU)"),
                Weight::OffCpu => format!("{title} (off CPU)"),
            };
            let n = write_flamegraph_of(&mut buf, t, &title, sel, weight)?;
            eprintln!(
                "fntrace: wrote a flame graph of {n} stacks to {}",
                output.display()
            );
        }
        ExportFormat::Html => {
            write_html(&mut buf, t, sel)?;
            eprintln!("fntrace: wrote {}", output.display());
        }
        ExportFormat::Xray => {
            let s = write_xray(&mut buf, t, sel)
                .map_err(Error::io_at(format!("{}: cannot export", path.display())))?;
            eprintln!(
                "fntrace: wrote {} XRay records to {}{}",
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
            );
        }
    }
    buf.flush()
        .map_err(Error::io_at(format!("{}: cannot write", output.display())))?;
    Ok(())
}

/// Whether a trace holds counted arcs and no timed call.
fn counted_only(t: &fntrace_format::Trace) -> bool {
    !t.metadata().arcs.is_empty()
        && t.thread_ids().into_iter().all(|tid| {
            t.stream(tid)
                .all(|r| !matches!(r, fntrace_format::Record::Entry { .. }))
        })
}

/// An output file written under a temporary name next to its final path
/// and renamed there by [`TempOutput::persist`]; removed if dropped before.
struct TempOutput {
    tmp: std::path::PathBuf,
    output: std::path::PathBuf,
    done: bool,
}

impl TempOutput {
    fn create(output: &Path) -> Result<TempOutput> {
        let name = output
            .file_name()
            .ok_or_else(|| Error::Invalid(format!("{}: not a file name", output.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".fntrace-{}.tmp", std::process::id()));
        let tmp = output.with_file_name(tmp_name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(Error::io_at(format!("{}: cannot create", output.display())))?;
        Ok(TempOutput {
            tmp,
            output: output.to_path_buf(),
            done: false,
        })
    }

    fn file(&self) -> Result<std::fs::File> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&self.tmp)
            .map_err(Error::io_at(format!(
                "{}: cannot create",
                self.output.display()
            )))
    }

    fn persist(mut self) -> Result<()> {
        std::fs::rename(&self.tmp, &self.output).map_err(Error::io_at(format!(
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

/// The module of the traced process's executable (the first module when
/// the trace names no executable): what gmon.out and XRay logs describe.
fn main_module(meta: &Metadata) -> io::Result<&ModuleInfo> {
    meta.process
        .as_ref()
        .and_then(|p| meta.modules.iter().find(|m| m.path == p.exe))
        .or_else(|| meta.modules.first())
        .ok_or_else(|| io::Error::other("the trace has no module map"))
}
