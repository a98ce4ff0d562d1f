//! `fntrace markers BINARY`: the markers an executable or shared library
//! declares, read from its `fntrace_marker_info` section (records written
//! by `declare_marker!`, format in `fntrace_markers::info`) without
//! running it.

use std::io::{self, Write};
use std::path::Path;

use crate::{Error, Result};
use object::{Object, ObjectSection};

use crate::report::Format;

/// Section holding the marker records.
pub const SECTION: &str = "fntrace_marker_info";
const MAGIC: &[u8; 4] = b"FNTM";

/// One declared marker.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MarkerInfo {
    /// Marker name.
    pub name: String,
    /// Arguments: (name, type).
    pub args: Vec<(String, String)>,
    /// Disabled-path design (`StaticKey`, `Flag`, `FnPtr`, `EmptyFn`).
    pub design: String,
    /// Declaring module.
    pub module: String,
    /// Source file.
    pub file: String,
    /// Source line.
    pub line: u32,
}

impl MarkerInfo {
    /// `net_rx(len: u32, dev: &str)`.
    pub fn signature(&self) -> String {
        let args: Vec<String> = self.args.iter().map(|(n, t)| format!("{n}: {t}")).collect();
        format!("{}({})", self.name, args.join(", "))
    }
}

/// Reads the marker table of an ELF file.
pub fn read(path: &Path) -> Result<Vec<MarkerInfo>> {
    let data = fntrace_format::regular::read_regular(path, fntrace_format::regular::MAX_READ_BYTES)
        .map_err(Error::io_at(path.display().to_string()))?;
    let obj = object::File::parse(&*data).map_err(|source| Error::Object {
        context: format!("{}: not an executable or shared library", path.display()),
        source,
    })?;
    let Some(sec) = obj.section_by_name(SECTION) else {
        return Ok(vec![]);
    };
    let bytes = sec.data().map_err(|source| Error::Object {
        context: format!("{}: cannot read section {SECTION}", path.display()),
        source,
    })?;
    parse(bytes).map_err(|e| Error::In {
        context: format!("{}: section {SECTION}", path.display()),
        source: Box::new(e),
    })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses the records of a `fntrace_marker_info` section (zero padding
/// between records is skipped).
pub fn parse(b: &[u8]) -> Result<Vec<MarkerInfo>> {
    let mut out = vec![];
    let mut pos = 0;
    while pos < b.len() {
        if b[pos] == 0 {
            pos += 1;
            continue;
        }
        if b.len() - pos < 16 || &b[pos..pos + 4] != MAGIC {
            return Err(Error::Invalid(format!("byte {pos}: not a marker record")));
        }
        let len = u32_at(b, pos + 4) as usize;
        let line = u32_at(b, pos + 8);
        let count = u32_at(b, pos + 12) as usize;
        if len < 16 || len > b.len() - pos {
            return Err(Error::Invalid(format!(
                "byte {pos}: record length {len} out of bounds"
            )));
        }
        let body = &b[pos + 16..pos + len];
        let parts: Vec<&[u8]> = body.split(|&c| c == 0).collect();
        // `split` yields one more piece after the last NUL.
        if count < 4 || count % 2 != 0 || parts.len() != count + 1 || !parts[count].is_empty() {
            return Err(Error::Invalid(format!("byte {pos}: damaged marker record")));
        }
        let s = |i: usize| String::from_utf8_lossy(parts[i]).into_owned();
        out.push(MarkerInfo {
            name: s(0),
            module: s(1),
            file: s(2),
            design: s(3),
            line,
            args: (4..count).step_by(2).map(|i| (s(i), s(i + 1))).collect(),
        });
        pos += len;
    }
    out.sort_by(|a, b| (&a.name, &a.file, a.line).cmp(&(&b.name, &b.file, b.line)));
    out.dedup();
    Ok(out)
}

/// `fntrace markers BINARY`: lists the markers `binary` declares.
pub fn run(out: &mut dyn Write, binary: &Path, format: Format) -> Result<()> {
    let list = read(binary)?;
    write(out, &list, format)?;
    Ok(())
}

/// Writes the marker list.
pub fn write(out: &mut dyn Write, list: &[MarkerInfo], format: Format) -> io::Result<()> {
    match format {
        Format::Json => {
            #[derive(serde::Serialize)]
            struct Arg<'a> {
                name: &'a str,
                r#type: &'a str,
            }
            #[derive(serde::Serialize)]
            struct J<'a> {
                name: &'a str,
                args: Vec<Arg<'a>>,
                design: &'a str,
                module: &'a str,
                file: &'a str,
                line: u32,
            }
            let v: Vec<J<'_>> = list
                .iter()
                .map(|m| J {
                    name: &m.name,
                    args: m
                        .args
                        .iter()
                        .map(|(n, t)| Arg { name: n, r#type: t })
                        .collect(),
                    design: &m.design,
                    module: &m.module,
                    file: &m.file,
                    line: m.line,
                })
                .collect();
            serde_json::to_writer_pretty(&mut *out, &v)?;
            writeln!(out)
        }
        Format::Csv => {
            writeln!(out, "name,signature,design,module,file,line")?;
            for m in list {
                let q = |s: &str| {
                    if s.contains([',', '"']) {
                        format!("\"{}\"", s.replace('"', "\"\""))
                    } else {
                        s.to_string()
                    }
                };
                writeln!(
                    out,
                    "{},{},{},{},{},{}",
                    q(&m.name),
                    q(&m.signature()),
                    m.design,
                    q(&m.module),
                    q(&m.file),
                    m.line
                )?;
            }
            Ok(())
        }
        Format::Table => {
            let w = list
                .iter()
                .map(|m| m.signature().len())
                .max()
                .unwrap_or(6)
                .max(6);
            writeln!(out, "  {:<w$}  {:<9}  Declared at", "Marker", "Design")?;
            writeln!(out, "  {}", "=".repeat(w + 24))?;
            for m in list {
                writeln!(
                    out,
                    "  {:<w$}  {:<9}  {}:{} ({})",
                    m.signature(),
                    m.design,
                    m.file,
                    m.line,
                    m.module
                )?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(line: u32, parts: &[&str]) -> Vec<u8> {
        let mut body = vec![];
        for p in parts {
            body.extend_from_slice(p.as_bytes());
            body.push(0);
        }
        let mut r = MAGIC.to_vec();
        r.extend_from_slice(&((16 + body.len()) as u32).to_le_bytes());
        r.extend_from_slice(&line.to_le_bytes());
        r.extend_from_slice(&(parts.len() as u32).to_le_bytes());
        r.extend_from_slice(&body);
        r
    }

    #[test]
    fn parses_records_and_padding() {
        let mut b = record(
            7,
            &[
                "net_rx",
                "app::net",
                "src/net.rs",
                "StaticKey",
                "len",
                "u32",
                "dev",
                "&str",
            ],
        );
        b.extend_from_slice(&[0, 0, 0]);
        b.extend_from_slice(&record(9, &["tick", "app", "src/main.rs", "Flag"]));
        let l = parse(&b).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].signature(), "net_rx(len: u32, dev: &str)");
        assert_eq!(l[0].line, 7);
        assert_eq!(l[1].signature(), "tick()");
        assert_eq!(l[1].design, "Flag");
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let good = record(7, &["a", "m", "f", "Flag", "x", "u8"]);
        for cut in 1..good.len() {
            let _ = parse(&good[..cut]);
        }
        let mut bad = good.clone();
        bad[4] = 0xff;
        assert!(parse(&bad).is_err());
        let mut bad = good.clone();
        bad[12] = 3;
        assert!(parse(&bad).is_err());
        assert!(parse(b"XXXX").is_err());
    }
}
