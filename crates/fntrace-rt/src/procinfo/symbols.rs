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
    if let Some(v) = elf64_function_ranges(map.as_slice(), bias) {
        return v;
    }
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

/// [`module_function_ranges`] for a 64-bit ELF file, straight from its
/// symbol tables (`None` for any other file): the same symbols as the
/// generic reader's text symbols with an address (`STT_FUNC`,
/// `STT_GNU_IFUNC`), without building a symbol object per entry. Symbol
/// A program with 100,000 functions: about 3 ms instead of 5 (most of
/// what is left is sorting: a linker writes global symbols in hash
/// order).
fn elf64_function_ranges(data: &[u8], bias: u64) -> Option<Vec<(u64, u64)>> {
    use object::elf;
    use object::read::elf::{FileHeader, Sym};
    let hdr = elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = hdr.endian().ok()?;
    let sections = hdr.sections(endian, data).ok()?;
    let mut out: Vec<(u64, u64)> = vec![];
    for ty in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
        let t = sections.symbols(endian, data, ty).ok()?;
        out.reserve(t.len());
        out.extend(
            t.symbols()
                .iter()
                .skip(1)
                .filter(|s| {
                    matches!(s.st_type(), elf::STT_FUNC | elf::STT_GNU_IFUNC)
                        && s.st_value(endian) != 0
                })
                .map(|s| {
                    let a = s.st_value(endian).wrapping_add(bias);
                    (a, a + s.st_size(endian).max(1))
                }),
        );
    }
    out.sort_unstable();
    out.dedup_by_key(|e| e.0);
    Some(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The ELF64 fast path lists exactly the generic reader's text symbols
    /// (this test binary and the C library: a symbol table with local,
    /// weak, IFUNC and dynamic symbols).
    #[test]
    fn elf64_ranges_match_the_generic_reader() {
        use object::{Object, ObjectSymbol};
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let libc = crate::procinfo::loaded_objects()
            .into_iter()
            .map(|o| o.3)
            .find(|p| p.to_string_lossy().contains("libc.so"))
            .unwrap();
        for path in [exe, libc] {
            let data = std::fs::read(&path).unwrap();
            let fast = elf64_function_ranges(&data, 0x1000).unwrap();
            let obj = object::File::parse(&*data).unwrap();
            let mut slow: Vec<(u64, u64)> = obj
                .symbols()
                .chain(obj.dynamic_symbols())
                .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
                .map(|s| (s.address() + 0x1000, s.address() + 0x1000 + s.size().max(1)))
                .collect();
            slow.sort_unstable();
            slow.dedup_by_key(|e| e.0);
            assert!(
                fast.len() > 100,
                "{}: {} functions",
                path.display(),
                fast.len()
            );
            assert_eq!(fast, slow, "{}", path.display());
        }
    }
}
