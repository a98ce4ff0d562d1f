//! `fntrace functions BINARY`: what `#[instrument_fn]` decided for each
//! function of an executable or shared library, per framework (source,
//! mcount, fentry, XRay) and its per-function options (`args`, `retval`,
//! `threshold`), read from the `fntrace_policy` and `fntrace_off` tables
//! in the file (layout in `fntrace_rt::procinfo::policy`) without running
//! it. `cargo fntrace` uses [`read`] to summarise a build.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use fntrace_rt::procinfo::policy::{
    self as layout, CAPTURE_RETVAL, ENTRY_IS_XRAY, FENTRY_OFF, MCOUNT_OFF, SOURCE_OFF, XRAY_OFF,
};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};

use crate::report::{Format, csv_field};
use crate::{Error, Result};

/// The policy of one function.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FunctionPolicy {
    /// Its path (from the table, or its demangled symbol).
    pub function: String,
    /// Link-time address of its start.
    pub address: u64,
    /// Source instrumentation (the `#[instrument_fn]` guard): `on`/`off`
    /// (`-`: no guard, in a `--all` listing).
    pub source: &'static str,
    /// mcount: `on`/`off`.
    pub mcount: &'static str,
    /// fentry (and patchable entries): `on`/`off`.
    pub fentry: &'static str,
    /// XRay: `always` (the attribute's on), `off` (`on`: not excluded, in a
    /// `--all` listing).
    pub xray: &'static str,
    /// Arguments recorded without `-A` (1–6).
    pub args: Vec<u8>,
    /// Return value recorded without `-R`.
    pub retval: bool,
    /// Calls shorter than this are not kept (ns; 0: all). Parsed and
    /// recorded in the binary; the runtime does not apply it yet.
    pub threshold_ns: u64,
    /// Its patchable entry is XRay's always-instrument.
    pub entry_is_xray: bool,
}

impl FunctionPolicy {
    /// Whether framework `name` (`source`, `mcount`, `fentry`, `xray`) is
    /// off for this function.
    pub fn is_off(&self, framework: &str) -> bool {
        match framework {
            "source" => self.source == "off",
            "mcount" => self.mcount == "off",
            "fentry" | "patchable" => self.fentry == "off",
            "xray" => self.xray == "off",
            _ => false,
        }
    }
}

/// Reads the policy tables of an ELF file, sorted by function name.
pub fn read(path: &Path) -> Result<Vec<FunctionPolicy>> {
    let data = fntrace_format::regular::read_regular(path, fntrace_format::regular::MAX_READ_BYTES)
        .map_err(Error::io_at(path.display().to_string()))?;
    let obj = object::File::parse(&*data).map_err(|source| Error::Object {
        context: format!("{}: not an executable or shared library", path.display()),
        source,
    })?;
    let relocated = relocations(&obj);
    let value_at = |addr: u64, raw: u64| relocated.get(&addr).copied().unwrap_or(raw);
    let mut out: Vec<FunctionPolicy> = vec![];
    if let Some(sec) = obj.section_by_name("fntrace_policy") {
        let bytes = section_bytes(&obj, &sec, path)?;
        if bytes.len() % layout::ENTRY_SIZE != 0 {
            return Err(Error::Invalid(format!(
                "{}: section fntrace_policy is {} bytes, not a multiple of {}",
                path.display(),
                bytes.len(),
                layout::ENTRY_SIZE
            )));
        }
        let base = sec.address();
        for d in layout::decode(&bytes, |off, raw| value_at(base + off as u64, raw)) {
            let name =
                string_at(&obj, d.name, d.name_len).unwrap_or_else(|| symbol_name(&obj, d.func));
            out.push(policy(name, d.func, d.flags, d.capture, d.threshold_ns));
        }
    }
    if let Some(sec) = obj.section_by_name("fntrace_off") {
        let bytes = section_bytes(&obj, &sec, path)?;
        let base = sec.address();
        for (i, c) in bytes.chunks_exact(8).enumerate() {
            let raw = u64::from_le_bytes(c.try_into().unwrap());
            let func = value_at(base + 8 * i as u64, raw);
            if out.iter().any(|p| p.address == func) {
                continue;
            }
            let all = SOURCE_OFF | MCOUNT_OFF | FENTRY_OFF | XRAY_OFF;
            out.push(policy(symbol_name(&obj, func), func, all, 0, 0));
        }
    }
    out.sort_by(|a, b| (&a.function, a.address).cmp(&(&b.function, b.address)));
    out.dedup();
    Ok(out)
}

fn policy(
    function: String,
    address: u64,
    flags: u32,
    capture: u32,
    threshold_ns: u64,
) -> FunctionPolicy {
    let sw = |bit: u32| if flags & bit != 0 { "off" } else { "on" };
    FunctionPolicy {
        function,
        address,
        source: sw(SOURCE_OFF),
        mcount: sw(MCOUNT_OFF),
        fentry: sw(FENTRY_OFF),
        xray: if flags & XRAY_OFF != 0 {
            "off"
        } else {
            "always"
        },
        args: (0..6u8)
            .filter(|i| capture & (1 << i) != 0)
            .map(|i| i + 1)
            .collect(),
        retval: capture & CAPTURE_RETVAL != 0,
        threshold_ns,
        entry_is_xray: flags & ENTRY_IS_XRAY != 0,
    }
}

fn section_bytes<'d>(
    obj: &object::File<'d>,
    sec: &object::Section<'d, '_>,
    path: &Path,
) -> Result<std::borrow::Cow<'d, [u8]>> {
    let _ = obj;
    sec.uncompressed_data().map_err(|source| Error::Object {
        context: format!(
            "{}: cannot read section {}",
            path.display(),
            sec.name().unwrap_or("?")
        ),
        source,
    })
}

/// Link-time values of the pointers the dynamic loader fills in (a
/// position-independent file stores them as relocations, not in the
/// section): address → value.
fn relocations(obj: &object::File<'_>) -> HashMap<u64, u64> {
    const R_X86_64_64: u32 = 1;
    const R_X86_64_RELATIVE: u32 = 8;
    let mut m = HashMap::new();
    let Some(relocs) = obj.dynamic_relocations() else {
        return m;
    };
    let dynsym = obj.dynamic_symbol_table();
    for (offset, r) in relocs {
        let object::RelocationFlags::Elf { r_type } = r.flags() else {
            continue;
        };
        let value = match (r_type, r.target()) {
            (R_X86_64_RELATIVE, _) => r.addend() as u64,
            (R_X86_64_64, object::RelocationTarget::Symbol(i)) => {
                match dynsym.as_ref().and_then(|t| t.symbol_by_index(i).ok()) {
                    Some(s) if s.is_definition() => s.address().wrapping_add(r.addend() as u64),
                    _ => continue,
                }
            }
            _ => continue,
        };
        m.insert(offset, value);
    }
    m
}

/// The UTF-8 text of `len` bytes at link-time address `addr`, if a section
/// holds them.
fn string_at(obj: &object::File<'_>, addr: u64, len: u64) -> Option<String> {
    if len == 0 || len > 4096 {
        return None;
    }
    let end = addr.checked_add(len)?;
    let sec = obj
        .sections()
        .find(|s| addr >= s.address() && end <= s.address() + s.size())?;
    let data = sec.data().ok()?;
    let off = (addr - sec.address()) as usize;
    let bytes = data.get(off..off + len as usize)?;
    std::str::from_utf8(bytes).ok().map(str::to_string)
}

/// The demangled name of the function symbol at `addr`, or the address.
fn symbol_name(obj: &object::File<'_>, addr: u64) -> String {
    obj.symbols()
        .chain(obj.dynamic_symbols())
        .find(|s| s.address() == addr && s.kind() == object::SymbolKind::Text)
        .and_then(|s| s.name().ok().map(fntrace_rt::procinfo::demangle))
        .unwrap_or_else(|| format!("{addr:#x}"))
}

/// [`read`], plus every other function symbol of the file with the
/// defaults: source `on` when the function has a `#[instrument_fn]` site
/// (a `FUNCTION::__FNTRACE_SITE` symbol), `-` otherwise; the compiler
/// frameworks `on` (not excluded).
pub fn read_all(path: &Path) -> Result<Vec<FunctionPolicy>> {
    let mut list = read(path)?;
    let data = fntrace_format::regular::read_regular(path, fntrace_format::regular::MAX_READ_BYTES)
        .map_err(Error::io_at(path.display().to_string()))?;
    let obj = object::File::parse(&*data).map_err(|source| Error::Object {
        context: format!("{}: not an executable or shared library", path.display()),
        source,
    })?;
    let mut sited = std::collections::HashSet::new();
    let mut funcs: Vec<(u64, String)> = vec![];
    for s in obj.symbols().chain(obj.dynamic_symbols()) {
        let Ok(raw) = s.name() else { continue };
        let name = fntrace_rt::procinfo::demangle(raw);
        if let Some(f) = name.strip_suffix("::__FNTRACE_SITE") {
            sited.insert(f.to_string());
        } else if s.kind() == object::SymbolKind::Text && s.address() != 0 {
            funcs.push((s.address(), name));
        }
    }
    funcs.sort();
    funcs.dedup_by_key(|f| f.0);
    let known: std::collections::HashSet<u64> = list.iter().map(|p| p.address).collect();
    for (addr, name) in funcs {
        if known.contains(&addr) {
            continue;
        }
        let mut p = policy(name, addr, 0, 0, 0);
        p.xray = "on";
        if !sited.contains(&p.function) {
            p.source = "-";
        }
        list.push(p);
    }
    list.sort_by(|a, b| (&a.function, a.address).cmp(&(&b.function, b.address)));
    Ok(list)
}

/// `fntrace functions BINARY`: lists the per-function policies `binary`
/// carries (`all`: every function of it, see [`read_all`]).
pub fn run(out: &mut dyn Write, binary: &Path, format: Format, all: bool) -> Result<()> {
    let list = if all {
        read_all(binary)?
    } else {
        read(binary)?
    };
    write(out, &list, format)?;
    Ok(())
}

fn args_text(p: &FunctionPolicy) -> String {
    if p.args.is_empty() {
        "-".to_string()
    } else {
        p.args
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn threshold_text(p: &FunctionPolicy) -> String {
    if p.threshold_ns == 0 {
        "-".to_string()
    } else {
        crate::analysis::fmt_ns(p.threshold_ns)
    }
}

/// Writes the list.
pub fn write(out: &mut dyn Write, list: &[FunctionPolicy], format: Format) -> io::Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, list)?;
            writeln!(out)
        }
        Format::Csv => {
            writeln!(
                out,
                "function,address,source,mcount,fentry,xray,args,retval,threshold_ns"
            )?;
            for p in list {
                writeln!(
                    out,
                    "{},{:#x},{},{},{},{},{},{},{}",
                    csv_field(&p.function),
                    p.address,
                    p.source,
                    p.mcount,
                    p.fentry,
                    p.xray,
                    csv_field(&args_text(p)),
                    p.retval,
                    p.threshold_ns
                )?;
            }
            Ok(())
        }
        Format::Table => {
            if list.is_empty() {
                return writeln!(
                    out,
                    "no #[instrument_fn] policy in this file (every function keeps the defaults)"
                );
            }
            // The name last, as in `fntrace report` (names of any length).
            writeln!(
                out,
                "  source  mcount  fentry  xray    args    retval  threshold   Function"
            )?;
            writeln!(out, "  {}", "=".repeat(78))?;
            for p in list {
                writeln!(
                    out,
                    "  {:<6}  {:<6}  {:<6}  {:<6}  {:<6}  {:<6}  {:<10}  {}",
                    p.source,
                    p.mcount,
                    p.fentry,
                    p.xray,
                    args_text(p),
                    if p.retval { "yes" } else { "-" },
                    threshold_text(p),
                    p.function
                )?;
            }
            Ok(())
        }
    }
}
