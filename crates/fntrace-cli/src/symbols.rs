//! Symbolisation: turns function keys into names using the trace's site
//! table (source instrumentation) or the module map plus the ELF symbol
//! tables (`object`), demangling Rust (legacy and v0) and C++ names.
//! Unknown addresses print as `module+0xoffset`. Results are cached.

use rustc_hash::FxHashMap as HashMap;

use fntrace_format::{Metadata, ModuleInfo};
use object::{Object, ObjectSymbol};

/// Demangles a Rust (legacy or v0) or C++ symbol; other names are returned
/// unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return s;
            }
        }
    }
    name.to_string()
}

struct ModuleSyms {
    info: ModuleInfo,
    /// DWARF line tables, loaded on first use (`None` inside: none found).
    dwarf: Option<Option<addr2line::Loader>>,
    /// (link-time address, size, demangled name), sorted by address.
    syms: Vec<(u64, u64, String)>,
}

impl ModuleSyms {
    fn load(info: &ModuleInfo) -> ModuleSyms {
        let mut syms = vec![];
        if let Ok(data) = std::fs::read(&info.path) {
            if let Ok(obj) = object::File::parse(&*data) {
                for s in obj.symbols().chain(obj.dynamic_symbols()) {
                    if s.kind() == object::SymbolKind::Text && s.address() != 0 {
                        if let Ok(n) = s.name() {
                            syms.push((s.address(), s.size(), demangle(n)));
                        }
                    }
                }
            }
        }
        syms.sort_by_key(|s| s.0);
        syms.dedup_by_key(|s| s.0);
        ModuleSyms {
            info: info.clone(),
            dwarf: None,
            syms,
        }
    }

    fn lookup(&self, addr: u64) -> Option<&str> {
        let link = addr.wrapping_sub(self.info.bias);
        let i = self.syms.partition_point(|s| s.0 <= link);
        let (start, size, name) = self.syms.get(i.checked_sub(1)?)?;
        (link - start < (*size).max(1)).then_some(name.as_str())
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
        if let Some(s) = self.meta.sites.get(&key) {
            return s.name.clone();
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
