//! Symbolisation: turns function keys into names using the trace's site
//! table (source instrumentation), its library functions (`memcpy@libc.so.6`,
//! `record --libcalls`) or the module map plus the ELF symbol
//! tables (read and demangled by `fntrace_rt::procinfo`, Rust legacy and
//! v0 and C++ names).
//! Unknown addresses print as `module+0xoffset`. Results are cached.

/// Name of a frame whose entry is not in the trace (a call already open
/// where the readable part of its thread starts: a flight recorder's
/// window, or the chunk after damage).
pub const BEFORE_WINDOW: &str = "(entered before the window)";

use rustc_hash::FxHashMap as HashMap;

use std::path::Path;

use fntrace_format::{Metadata, ModuleInfo};
use fntrace_rt::procinfo;

/// Demangling is the runtime's (one copy for filters, argument capture,
/// patching and names in the views).
pub use fntrace_rt::procinfo::demangle;

struct ModuleSyms {
    info: ModuleInfo,
    /// DWARF line tables, loaded on first use (`None` inside: none found).
    dwarf: Option<Option<addr2line::Loader>>,
    /// (link-time start, end, demangled name), sorted by start
    /// ([`procinfo::module_functions`] at bias 0).
    syms: Vec<(u64, u64, String)>,
}

impl ModuleSyms {
    fn load(info: &ModuleInfo) -> ModuleSyms {
        ModuleSyms {
            info: info.clone(),
            dwarf: None,
            syms: procinfo::module_functions(Path::new(&info.path), 0),
        }
    }

    fn lookup(&self, addr: u64) -> Option<&str> {
        let link = addr.wrapping_sub(self.info.bias);
        let i = self.syms.partition_point(|s| s.0 <= link);
        let (_, end, name) = self.syms.get(i.checked_sub(1)?)?;
        (link < *end).then_some(name.as_str())
    }
}

/// Resolves function keys of one trace.
pub struct Symbolizer<'m> {
    meta: &'m Metadata,
    modules: Vec<Option<ModuleSyms>>,
    cache: HashMap<u64, String>,
    lines: HashMap<u64, Option<String>>,
}

impl<'m> Symbolizer<'m> {
    /// A symbolizer for a trace's metadata.
    pub fn new(meta: &'m Metadata) -> Symbolizer<'m> {
        Symbolizer {
            meta,
            modules: meta.modules.iter().map(|_| None).collect(),
            cache: HashMap::default(),
            lines: HashMap::default(),
        }
    }

    /// The name of function `key`.
    pub fn name(&mut self, key: u64) -> &str {
        if !self.cache.contains_key(&key) {
            let n = self.resolve(key);
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
        let l = self.srcline_uncached(key);
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
        let m = self.modules[i].get_or_insert_with(|| ModuleSyms::load(&self.meta.modules[i]));
        let link = key.wrapping_sub(m.info.bias);
        let path = m.info.path.clone();
        let loader = m
            .dwarf
            .get_or_insert_with(|| addr2line::Loader::new(&path).ok())
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
        let m = self.modules[i].get_or_insert_with(|| ModuleSyms::load(&self.meta.modules[i]));
        if let Some(n) = m.lookup(key) {
            return n.to_string();
        }
        let base = m.info.path.rsplit('/').next().unwrap_or(&m.info.path);
        format!("{}+0x{:x}", base, key - m.info.start)
    }
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
