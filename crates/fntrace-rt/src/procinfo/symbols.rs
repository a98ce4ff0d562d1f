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

/// The functions of a loaded object without their names or ends: their
/// run-time starts, sorted, each once. What a scan of a large program
/// needs first (a string per symbol costs milliseconds there); names are
/// read when something asks for them.
pub fn module_function_starts(path: &std::path::Path, bias: u64) -> Vec<u64> {
    use object::{Object, ObjectSymbol};
    let Some(map) = super::FileMap::open(path) else {
        return vec![];
    };
    if let Some(v) = elf64_function_starts(map.as_slice(), bias) {
        return v;
    }
    let Ok(obj) = object::File::parse(map.as_slice()) else {
        return vec![];
    };
    let mut out: Vec<u64> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|sym| sym.kind() == object::SymbolKind::Text && sym.address() != 0)
        .map(|sym| sym.address().wrapping_add(bias))
        .collect();
    radix_sort(&mut out);
    out.dedup();
    out
}

/// [`module_function_starts`] for a 64-bit ELF file, straight from its
/// symbol tables (`None` for any other file): the same symbols as the
/// generic reader's text symbols with an address (`STT_FUNC`,
/// `STT_GNU_IFUNC`), without building a symbol object per entry. A
/// program with 100,000 functions: about 1 ms to read them; sorting them
/// (a linker writes global symbols in hash order) took 2 ms more with a
/// comparison sort of (start, end) pairs, 0.5 ms with [`radix_sort`].
fn elf64_function_starts(data: &[u8], bias: u64) -> Option<Vec<u64>> {
    use object::elf;
    use object::read::elf::{FileHeader, Sym};
    let hdr = elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = hdr.endian().ok()?;
    let sections = hdr.sections(endian, data).ok()?;
    let mut out: Vec<u64> = vec![];
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
                .map(|s| s.st_value(endian).wrapping_add(bias)),
        );
    }
    radix_sort(&mut out);
    out.dedup();
    Some(out)
}

/// Sorts addresses: a least-significant-digit radix sort on their offsets
/// from the lowest one (11-bit digits, as many passes as their span
/// needs: 3 for a program with 6 MB of code). Linear; small or sorted
/// inputs use the standard sort.
pub fn radix_sort(v: &mut Vec<u64>) {
    const BITS: u32 = 11;
    if v.len() < 4096 || v.is_sorted() {
        v.sort_unstable();
        return;
    }
    let lo = v.iter().copied().min().unwrap_or(0);
    let span = v.iter().map(|&e| e - lo).max().unwrap_or(0);
    let passes = (u64::BITS - span.leading_zeros()).div_ceil(BITS);
    let mut tmp = vec![0u64; v.len()];
    for pass in 0..passes {
        let shift = pass * BITS;
        let digit = |e: u64| (((e - lo) >> shift) & ((1 << BITS) - 1)) as usize;
        let mut count = [0usize; 1 << BITS];
        for &e in v.iter() {
            count[digit(e)] += 1;
        }
        let mut sum = 0;
        for c in count.iter_mut() {
            let n = *c;
            *c = sum;
            sum += n;
        }
        for &e in v.iter() {
            let d = digit(e);
            tmp[count[d]] = e;
            count[d] += 1;
        }
        core::mem::swap(v, &mut tmp);
    }
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

    #[test]
    fn radix_sort_matches_a_comparison_sort() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (n, span) in [
            (5000, 1u64 << 20),
            (20_000, 1 << 40),
            (9000, 300),
            (100, 50),
        ] {
            let mut v: Vec<u64> = (0..n).map(|_| 0x5555_0000_0000 + rnd() % span).collect();
            let mut want = v.clone();
            want.sort_unstable();
            radix_sort(&mut v);
            assert_eq!(v, want, "{n} addresses over {span} bytes");
        }
    }

    /// The ELF64 fast path lists exactly the generic reader's text symbols
    /// (this test binary and the C library: a symbol table with local,
    /// weak, IFUNC and dynamic symbols).
    #[test]
    fn elf64_starts_match_the_generic_reader() {
        use object::{Object, ObjectSymbol};
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let libc = crate::procinfo::loaded_objects()
            .into_iter()
            .map(|o| o.3)
            .find(|p| p.to_string_lossy().contains("libc.so"))
            .unwrap();
        for path in [exe, libc] {
            let data = std::fs::read(&path).unwrap();
            let fast = elf64_function_starts(&data, 0x1000).unwrap();
            let obj = object::File::parse(&*data).unwrap();
            let mut slow: Vec<u64> = obj
                .symbols()
                .chain(obj.dynamic_symbols())
                .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
                .map(|s| s.address() + 0x1000)
                .collect();
            slow.sort_unstable();
            slow.dedup();
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
