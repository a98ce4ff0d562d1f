//! What instrumentation a program carries, found by reading its ELF file
//! before `fntrace record` runs it, and where the preload runtime is.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSymbol};

/// Instrumentation found in an executable.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Instrumentation {
    /// The fntrace runtime is linked in (`#[instrument_fn]`).
    pub runtime: bool,
    /// The compiler-hooks runtime is linked in (feature `compiler-hooks`).
    pub hooks_runtime: bool,
    /// Calls `mcount`/`_mcount` (`-pg`, `-Zinstrument-mcount`).
    pub mcount: bool,
    /// Calls `__fentry__` (`-pg -mfentry`).
    pub fentry: bool,
    /// Calls `__cyg_profile_func_enter` (`-finstrument-functions`).
    pub cyg_profile: bool,
    /// Has XRay sleds (`xray_instr_map`).
    pub xray: bool,
    /// Has patchable entries (`__patchable_function_entries`).
    pub patchable: bool,
    /// Has recorded NOP fentry sites (`__mcount_loc` from `gcc -pg -mfentry
    /// -mnop-mcount -mrecord-mcount`).
    pub mcount_loc: bool,
}

impl Instrumentation {
    /// Whether a compiler hook needs the preload runtime.
    pub fn needs_preload(&self) -> bool {
        (self.mcount
            || self.fentry
            || self.cyg_profile
            || self.xray
            || self.patchable
            || self.mcount_loc)
            && !self.hooks_runtime
    }

    /// Whether it has code fntrace patches at run time (XRay sleds,
    /// patchable entries, NOP fentry sites): what `fntrace live` changes.
    pub fn patchable_code(&self) -> bool {
        self.xray || self.patchable || self.mcount_loc
    }

    /// Whether anything fntrace can record was found.
    pub fn any(&self) -> bool {
        self.runtime
            || self.mcount
            || self.fentry
            || self.cyg_profile
            || self.xray
            || self.patchable
            || self.mcount_loc
    }
}

/// Reads the instrumentation of the ELF file at `path`; `None` if it is
/// not an ELF file (a script, say).
pub fn inspect(path: &Path) -> Option<Instrumentation> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: a read-only private mapping of an executable or library,
    // which is not rewritten in place while it is inspected.
    let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let obj = object::File::parse(&*data).ok()?;
    let mut ins = Instrumentation::default();
    // The hooks a dynamically linked program calls are imports, listed in
    // its dynamic symbol table (small); a linked-in runtime's names are
    // looked for in the string tables first (one fast substring search),
    // and only when one is there are the full symbol tables read: a large
    // program has hundreds of thousands of symbols (about 4 ms).
    let strings_name_runtime = [".strtab", ".dynstr"].iter().any(|n| {
        obj.section_by_name(n)
            .and_then(|s| s.data().ok())
            .is_some_and(|d| {
                memchr::memmem::find(d, b"fntrace_exit_trampoline").is_some()
                    || memchr::memmem::find(d, b"10fntrace_rt").is_some()
            })
    });
    // A static program has no dynamic symbols: its symbol table is read
    // whole then too.
    let read_symtab = strings_name_runtime || obj.dynamic_symbols().next().is_none();
    let symtab = obj.symbols().filter(|_| read_symtab);
    for s in symtab.chain(obj.dynamic_symbols()) {
        let Ok(name) = s.name() else { continue };
        match name {
            "mcount" | "_mcount" if s.is_undefined() => ins.mcount = true,
            "__fentry__" if s.is_undefined() => ins.fentry = true,
            "__cyg_profile_func_enter" if s.is_undefined() => ins.cyg_profile = true,
            "fntrace_exit_trampoline" if s.is_definition() => {
                ins.runtime = true;
                ins.hooks_runtime = true;
            }
            // A Rust symbol of the runtime crate (legacy or v0 mangling):
            // the prefix is checked first, a large C++ or C program has
            // hundreds of thousands of other symbols.
            _ if (name.starts_with("_ZN10fntrace_rt")
                || (name.starts_with("_R") && name.contains("10fntrace_rt")))
                && s.is_definition() =>
            {
                ins.runtime = true
            }
            _ => {}
        }
    }
    for sec in obj.sections() {
        match sec.name() {
            Ok("xray_instr_map") => ins.xray = true,
            Ok("__patchable_function_entries") => ins.patchable = true,
            Ok("__mcount_loc") => ins.mcount_loc = true,
            _ => {}
        }
    }
    Some(ins)
}

/// Finds `name` on `PATH` the way `execvp` would.
pub fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// File name of the preload runtime.
pub const PRELOAD_NAME: &str = "libfntrace_preload.so";

/// Locates the preload runtime: `$FNTRACE_PRELOAD` (`config::ENV_PRELOAD`), then next to the
/// `fntrace` executable, then in `../lib` and `../lib/fntrace` from it.
pub fn preload_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(fntrace_rt::config::ENV_PRELOAD) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    // Test binaries live in target/<profile>/deps.
    let cands = [
        dir.join(PRELOAD_NAME),
        dir.join("../lib").join(PRELOAD_NAME),
        dir.join("../lib/fntrace").join(PRELOAD_NAME),
        dir.join("..").join(PRELOAD_NAME),
    ];
    cands.into_iter().find(|p| p.is_file())
}

/// The advice printed for a program without usable instrumentation.
pub fn build_advice(prog: &str) -> String {
    format!(
        "{prog} has no instrumentation fntrace can record (shared libraries it loads \
         may have some). Rebuild it with one of:\n\
         \x20 C/C++:  gcc -pg | gcc -pg -mfentry | gcc -finstrument-functions\n\
         \x20         gcc -fpatchable-function-entry=5 | clang -fxray-instrument -fxray-instruction-threshold=1\n\
         \x20 Rust:   cargo fntrace build --instrument=mcount   (rustc -Zinstrument-mcount)\n\
         \x20         cargo fntrace build --instrument=xray     (rustc -Zinstrument-xray)\n\
         \x20         cargo fntrace build --instrument=fentry   (rustc -Zpatchable-function-entry=10,8)\n\
         \x20         or #[fntrace::instrument_fn] on the functions to trace"
    )
}
