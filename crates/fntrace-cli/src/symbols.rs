//! Symbolisation: turns function keys into names using the trace's site
//! table (source instrumentation), its library functions (`memcpy@libc.so.6`,
//! `record --libcalls`) or the module map plus the ELF symbol
//! tables (read and demangled by `fntrace_rt::procinfo`, Rust legacy and
//! v0 and C++ names).
//! Unknown addresses print as `module+0xoffset`. Results are cached.
//!
//! Module paths come from the trace and are untrusted: a module file is
//! read only if it is a regular file (else one warning, and addresses),
//! each distinct file once per process however many module records name
//! it, and at most [`MAX_MODULE_FILES`] of them. A module file whose GNU
//! build id differs from the one the trace recorded (the program was
//! rebuilt since) is not used either: one warning, and its functions are
//! shown as `prog+0xoffset` — wrong names would be worse than none, and
//! the offsets still tell calls apart. Names are returned without control
//! characters ([`fntrace_format::text::sanitize`]), so every view and
//! export is safe to print.

/// Name of a frame whose entry is not in the trace (a call already open
/// where the readable part of its thread starts: a flight recorder's
/// window, or the chunk after damage).
pub const BEFORE_WINDOW: &str = "(entered before the window)";

use rustc_hash::FxHashMap as HashMap;

use std::path::Path;
use std::sync::{Arc, Mutex};

use fntrace_format::regular::check_regular;
use fntrace_format::text::sanitize;
use fntrace_format::{Metadata, ModuleInfo};
use fntrace_rt::procinfo;

/// Demangling is the runtime's (one copy for filters, argument capture,
/// patching and names in the views).
pub use fntrace_rt::procinfo::demangle;

/// Most distinct module files whose symbol tables a process loads: a trace
/// naming more (a hostile one; real processes map a few hundred objects
/// at most) gets addresses for the functions of the rest, with a warning.
pub const MAX_MODULE_FILES: usize = 512;

/// The function symbols of one module file: (link-time start, end,
/// demangled name), sorted by start ([`procinfo::module_functions`] at bias 0).
type Table = Arc<Vec<(u64, u64, String)>>;

/// What a process knows of the module files traces name, shared by every
/// symbolizer (a trace may have thousands of module records naming one
/// file; `graph` and the exports make several symbolizers).
#[derive(Default)]
struct Files {
    /// By path and the build id the trace recorded: the symbols to use,
    /// `None` for a file that cannot be used (not a regular file, changed
    /// since the recording, over [`MAX_MODULE_FILES`]), each warned about
    /// once.
    by_record: HashMap<(String, Vec<u8>), Option<Table>>,
    /// By file identity (device, inode, size, modification time): the
    /// file's build id and symbols, read once however it is named.
    by_file: HashMap<FileId, (Option<Vec<u8>>, Table)>,
    /// [`MAX_MODULE_FILES`] was reached (warned once).
    full: bool,
}

/// A file's identity: device, inode, size, modification time (s, ns).
type FileId = (u64, u64, u64, i64, i64);

static FILES: Mutex<Option<Files>> = Mutex::new(None);

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// The GNU build id of the ELF file at `path`, `None` if it has none or
/// cannot be read.
fn file_build_id(path: &Path) -> Option<Vec<u8>> {
    use object::Object;
    let (file, _) = fntrace_format::regular::open_regular(path).ok()?;
    // SAFETY: a read-only private mapping of a regular file, parsed and
    // dropped at once (the build id is copied out).
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let obj = object::File::parse(&*map).ok()?;
    obj.build_id().ok()?.map(<[u8]>::to_vec)
}

impl Files {
    /// The symbols of module `m`, loading its file on first use; `None`
    /// (functions shown as addresses) for a module file that is not a
    /// regular file or whose build id differs from the recorded one.
    fn table(&mut self, m: &ModuleInfo) -> Option<Table> {
        let key = (m.path.clone(), m.build_id.clone());
        if let Some(t) = self.by_record.get(&key) {
            return t.clone();
        }
        let t = self.load(m);
        self.by_record.insert(key, t.clone());
        t
    }

    fn load(&mut self, m: &ModuleInfo) -> Option<Table> {
        use std::os::unix::fs::MetadataExt;
        let path = Path::new(&m.path);
        let shown = sanitize(&m.path);
        let meta = match check_regular(path) {
            Ok(meta) => meta,
            // A missing file is the usual case of a trace read elsewhere:
            // addresses, as before, without a warning per module.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                eprintln!(
                    "fntrace: warning: module {shown}: {e}: its functions are shown as addresses"
                );
                return None;
            }
        };
        let id = (
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
        );
        if !self.by_file.contains_key(&id) {
            if self.by_file.len() >= MAX_MODULE_FILES {
                if !self.full {
                    self.full = true;
                    eprintln!(
                        "fntrace: warning: the trace names more than {MAX_MODULE_FILES} module \
                         files; the functions of the others (such as {shown}) are shown as addresses"
                    );
                }
                return None;
            }
            let syms = procinfo::module_functions(path, 0);
            self.by_file
                .insert(id, (file_build_id(path), Arc::new(syms)));
        }
        let (file_id, table) = &self.by_file[&id];
        // No build id recorded: nothing to check against.
        if !m.build_id.is_empty() && file_id.as_deref() != Some(&m.build_id[..]) {
            let now = file_id.as_deref().map_or_else(|| "none".into(), hex);
            eprintln!(
                "fntrace: warning: {shown} has changed since the trace was recorded \
                 (build id {now}, trace says {}): its functions are shown as addresses",
                hex(&m.build_id)
            );
            return None;
        }
        Some(table.clone())
    }
}

/// The symbols of the module file `m` names (see [`Files::table`]).
fn module_table(m: &ModuleInfo) -> Option<Table> {
    let mut g = FILES.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(Files::default).table(m)
}

/// The symbols of one module record, shared with every record naming the
/// same file.
struct ModuleSyms {
    /// `None`: the file is not usable, functions are shown as addresses.
    syms: Option<Table>,
}

impl ModuleSyms {
    fn load(info: &ModuleInfo) -> ModuleSyms {
        ModuleSyms {
            syms: module_table(info),
        }
    }

    fn lookup(&self, info: &ModuleInfo, addr: u64) -> Option<&str> {
        let syms = self.syms.as_ref()?;
        let link = addr.wrapping_sub(info.bias);
        let i = syms.partition_point(|s| s.0 <= link);
        let (_, end, name) = syms.get(i.checked_sub(1)?)?;
        (link < *end).then_some(name.as_str())
    }
}

/// Resolves function keys of one trace.
pub struct Symbolizer<'m> {
    meta: &'m Metadata,
    modules: Vec<Option<ModuleSyms>>,
    /// DWARF line tables by module path and recorded build id, loaded on
    /// first use (`None` inside: none found, or the file is not usable).
    dwarf: HashMap<(&'m str, &'m [u8]), Option<addr2line::Loader>>,
    cache: HashMap<u64, String>,
    lines: HashMap<u64, Option<String>>,
}

impl<'m> Symbolizer<'m> {
    /// A symbolizer for a trace's metadata.
    pub fn new(meta: &'m Metadata) -> Symbolizer<'m> {
        Symbolizer {
            meta,
            modules: meta.modules.iter().map(|_| None).collect(),
            dwarf: HashMap::default(),
            cache: HashMap::default(),
            lines: HashMap::default(),
        }
    }

    /// The name of function `key`, without control characters (names
    /// come from the trace and from object files: see
    /// [`fntrace_format::text::sanitize`]).
    pub fn name(&mut self, key: u64) -> &str {
        if !self.cache.contains_key(&key) {
            let n = self.resolve(key);
            let n = match sanitize(&n) {
                std::borrow::Cow::Borrowed(_) => n,
                std::borrow::Cow::Owned(clean) => clean,
            };
            self.cache.insert(key, n);
        }
        &self.cache[&key]
    }

    /// `file:line` of a function when known: from the site table for
    /// source instrumentation, else from the module's DWARF (with the
    /// functions an inlined address was inlined into).
    pub fn srcline(&mut self, key: u64) -> Option<String> {
        if let Some(l) = self.lines.get(&key) {
            return l.clone();
        }
        let l = self
            .srcline_uncached(key)
            .map(|l| sanitize(&l).into_owned());
        self.lines.insert(key, l.clone());
        l
    }

    fn srcline_uncached(&mut self, key: u64) -> Option<String> {
        if let Some(s) = self.meta.sites.get(&key) {
            return Some(format!("{}:{}", s.file, s.line));
        }
        if let Some(f) = self.meta.libfuncs.get(&key) {
            return Some(f.library.clone());
        }
        let i = self.meta.modules.iter().position(|m| m.contains(key))?;
        let info: &'m ModuleInfo = &self.meta.modules[i];
        let m = self.modules[i].get_or_insert_with(|| ModuleSyms::load(info));
        // Not a regular file, or changed since the recording: no DWARF.
        let usable = m.syms.is_some();
        let link = key.wrapping_sub(info.bias);
        let loader = self
            .dwarf
            .entry((info.path.as_str(), info.build_id.as_slice()))
            .or_insert_with(|| {
                usable
                    .then(|| addr2line::Loader::new(&info.path).ok())
                    .flatten()
            })
            .as_ref()?;
        // Innermost frame first; an address inside inlined code also names
        // the functions it was inlined into.
        let mut parts: Vec<String> = vec![];
        if let Ok(mut frames) = loader.find_frames(link) {
            while let Ok(Some(f)) = frames.next() {
                let Some(loc) = f.location else { continue };
                let Some(file) = loc.file else { continue };
                let at = match loc.line {
                    Some(l) => format!("{file}:{l}"),
                    None => file.to_string(),
                };
                if parts.is_empty() {
                    parts.push(at);
                } else {
                    let func = f
                        .function
                        .as_ref()
                        .and_then(|n| n.raw_name().ok().map(|r| demangle(&r)))
                        .unwrap_or_else(|| "?".into());
                    parts.push(format!("inlined into {func} at {at}"));
                }
            }
        }
        if parts.is_empty() {
            let loc = loader.find_location(link).ok()??;
            let file = loc.file?;
            parts.push(match loc.line {
                Some(l) => format!("{file}:{l}"),
                None => file.to_string(),
            });
        }
        Some(parts.join(", "))
    }

    fn resolve(&mut self, key: u64) -> String {
        if key == 0 {
            // The frames readers put in for calls that were open where a
            // stream's readable part starts (a flight recorder's window, a
            // gap): their entries are not in the trace.
            return BEFORE_WINDOW.into();
        }
        if let Some(s) = self.meta.sites.get(&key) {
            return s.name.clone();
        }
        if let Some(f) = self.meta.libfuncs.get(&key) {
            // `std::thread::join()@libstdc++.so.6`
            let lib = f.library.rsplit('/').next().unwrap_or(&f.library);
            return format!("{}@{lib}", demangle(&f.symbol));
        }
        let Some(i) = self.meta.modules.iter().position(|m| m.contains(key)) else {
            return format!("0x{key:x}");
        };
        let info = &self.meta.modules[i];
        if let Some(other) = self.meta.modules[i + 1..]
            .iter()
            .find(|m| m.contains(key) && (m.path != info.path || m.build_id != info.build_id))
        {
            warn_reused_range(info, other);
        }
        let m = self.modules[i].get_or_insert_with(|| ModuleSyms::load(info));
        if let Some(n) = m.lookup(info, key) {
            return n.to_string();
        }
        let base = info.path.rsplit('/').next().unwrap_or(&info.path);
        format!("{}+0x{:x}", base, key - info.start)
    }
}

/// Warns once per pair of modules that the process loaded at the same
/// addresses one after the other (`dlclose`, then `dlopen` of another
/// library): the trace's module map has no times, so the calls in that
/// range are named after the first.
fn warn_reused_range(first: &ModuleInfo, other: &ModuleInfo) {
    static WARNED: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    let pair = (first.path.clone(), other.path.clone());
    let mut w = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if w.contains(&pair) {
        return;
    }
    w.push(pair);
    eprintln!(
        "fntrace: warning: {} and {} were loaded at the same addresses (one after the \
         other): calls there are named after {}, and may be wrong",
        sanitize(&first.path),
        sanitize(&other.path),
        sanitize(&first.path)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(demangle("_ZN3foo3bar17h0123456789abcdefE"), "foo::bar");
        assert_eq!(demangle("_RNvCs1234_7example3fib"), "example::fib");
        assert_eq!(demangle("_ZN1A1fEv"), "A::f()");
        assert_eq!(demangle("main"), "main");
    }
}
