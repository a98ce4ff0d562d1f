//! Function symbols of loaded objects: the text symbols of an ELF file's
//! symbol tables (`object`), run-time addresses, and demangling of Rust
//! (legacy and v0) and C++ names. The one place that reads symbol tables:
//! filters, argument capture and patching resolve names here, and the CLI
//! names functions with the same code.

/// Demangles a Rust or C++ symbol for matching.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(s) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = s.demangle(&cpp_demangle::DemangleOptions::default()) {
                return d;
            }
        }
    }
    name.to_string()
}

/// The functions of a loaded object from its ELF symbol tables: run-time
/// (start, end, demangled name), sorted by start; empty if the file cannot
/// be read.
pub fn module_functions(path: &std::path::Path, bias: u64) -> Vec<(u64, u64, String)> {
    let mut v = module_symbols(path, bias);
    for e in &mut v {
        e.2 = demangle(&e.2);
    }
    v
}

/// The functions of a loaded object without their names: run-time
/// (start, end), sorted by start, one per start. What a scan of a large
/// program needs first (a string per symbol costs milliseconds there);
/// names are read when something asks for them.
pub fn module_function_ranges(path: &std::path::Path, bias: u64) -> Vec<(u64, u64)> {
    use object::{Object, ObjectSymbol};
    let Some(map) = super::FileMap::open(path) else {
        return vec![];
    };
    let Ok(obj) = object::File::parse(map.as_slice()) else {
        return vec![];
    };
    let mut out: Vec<(u64, u64)> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|sym| sym.kind() == object::SymbolKind::Text && sym.address() != 0)
        .map(|sym| {
            let s = sym.address().wrapping_add(bias);
            (s, s + sym.size().max(1))
        })
        .collect();
    out.sort_unstable();
    out.dedup_by_key(|e| e.0);
    out
}

/// [`module_functions`] with the names as the symbol tables spell them
/// (demangling every symbol of a large program takes milliseconds).
pub fn module_symbols(path: &std::path::Path, bias: u64) -> Vec<(u64, u64, String)> {
    use object::{Object, ObjectSymbol};
    let Some(map) = super::FileMap::open(path) else {
        return vec![];
    };
    let Ok(obj) = object::File::parse(map.as_slice()) else {
        return vec![];
    };
    let mut out = vec![];
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.kind() != object::SymbolKind::Text || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        let s = sym.address().wrapping_add(bias);
        out.push((s, s + sym.size().max(1), name.to_string()));
    }
    out.sort_by_key(|e| e.0);
    out.dedup_by_key(|e| e.0);
    out
}
