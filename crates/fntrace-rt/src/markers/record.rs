//! Recording markers: a probe that formats a marker's arguments into a
//! stack buffer and writes a marker record (name, text) into the calling
//! thread's stream of the trace, attached to the markers whose names match
//! `-M` (the configuration's `markers`) or the patterns given
//! to [`record_markers`].

use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

use fntrace_markers::{Event, FmtBuf, MarkerCore, Probe, ProbeHandle};

/// Why markers could not be selected or probed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// A marker pattern is not a valid regular expression.
    #[error("marker pattern `{pattern}`: {problem}")]
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// What the regular-expression parser said.
        problem: String,
    },
    /// The probe could not be attached (what `fntrace-markers` said).
    #[error("{0}")]
    Probe(String),
}

/// Longest argument text recorded per event (longer text is cut with `…`).
const TEXT_MAX: usize = 512;

/// The recording probe: no allocation, lock or system call (the recorder's
/// hot path, plus formatting into a stack buffer).
fn record_event(ev: &Event<'_>) {
    let mut buf = FmtBuf::<TEXT_MAX>::new();
    let _ = ev.write_args(&mut buf);
    let (name, text) = (ev.marker().name(), buf.as_str());
    let fwd = FORWARD.load(Ordering::Acquire);
    if fwd.is_null() {
        crate::recorder::record_marker(name, text);
    } else {
        // SAFETY: only ever set to the preload library's
        // `fntrace_record_marker`, which stays loaded (it is preloaded).
        let f: ForwardFn = unsafe { core::mem::transmute(fwd) };
        f(name.as_ptr(), name.len(), text.as_ptr(), text.len());
    }
}

type ForwardFn = extern "C" fn(*const u8, usize, *const u8, usize) -> bool;

/// The preload runtime's recorder, when this runtime copy is the idle one
/// linked into a program that `libfntrace_preload.so` traces.
static FORWARD: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Records a marker event into the trace of this runtime; exported by
/// `libfntrace_preload.so` for the idle runtime copy of a program that
/// declares markers.
///
/// # Safety
/// `name` and `text` point to `name_len` and `text_len` readable bytes.
#[cfg(feature = "compiler-hooks")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fntrace_record_marker(
    name: *const u8,
    name_len: usize,
    text: *const u8,
    text_len: usize,
) -> bool {
    // SAFETY: the caller's contract.
    let (n, t) = unsafe {
        (
            core::slice::from_raw_parts(name, name_len),
            core::slice::from_raw_parts(text, text_len),
        )
    };
    crate::recorder::record_marker(
        core::str::from_utf8(n).unwrap_or("?"),
        core::str::from_utf8(t).unwrap_or(""),
    )
}

/// In a program traced by the preload runtime: send the events of the
/// markers `patterns` select to it (instead of recording here; see
/// `session`).
pub(crate) fn forward_to_preload(patterns: &[String]) {
    // SAFETY: dlsym with a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"fntrace_record_marker".as_ptr()) };
    if f.is_null() {
        return;
    }
    FORWARD.store(f.cast(), Ordering::Release);
    start_recording(patterns);
}

/// The markers whose names match one of `patterns`.
pub fn matching(patterns: &[&str]) -> Result<Vec<&'static MarkerCore>, MarkerError> {
    let mut res = Vec::new();
    for p in patterns {
        res.push(regex_lite::Regex::new(p).map_err(|e| MarkerError::Pattern {
            pattern: p.to_string(),
            problem: e.to_string(),
        })?);
    }
    Ok(fntrace_markers::all()
        .iter()
        .copied()
        .filter(|m| res.iter().any(|r| r.is_match(m.name())))
        .collect())
}

/// Records the events of every marker whose name matches one of `patterns`
/// (regular expressions) into the active trace, from now on. Returns the
/// probe's handle (remove it to stop), or `None` when no marker matches.
pub fn record_markers(patterns: &[&str]) -> Result<Option<ProbeHandle>, MarkerError> {
    super::init();
    let ms = matching(patterns)?;
    if ms.is_empty() {
        return Ok(None);
    }
    fntrace_markers::set_probe_on(&ms, Probe::any(record_event))
        .map(Some)
        .map_err(|e| MarkerError::Probe(e.to_string()))
}

/// The probe attached at start-up (kept for the process's life).
static FROM_START: Mutex<Option<ProbeHandle>> = Mutex::new(None);

/// Attaches the recording probe to the markers `patterns` (`-M`) select
/// (called when a session starts).
pub(crate) fn start_recording(patterns: &[String]) {
    let pats: Vec<&str> = patterns.iter().map(String::as_str).collect();
    if pats.is_empty() {
        return;
    }
    match record_markers(&pats) {
        Ok(Some(h)) => *FROM_START.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
        Ok(None) => {}
        Err(e) => crate::diag::diag!("fntrace: {e}"),
    }
}
