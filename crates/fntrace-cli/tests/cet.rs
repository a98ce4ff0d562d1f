//! CET readiness: every trampoline of the runtime that is reached by an
//! indirect jump or call (through a PLT, or the `jmp [rip]` stubs of XRay
//! sleds and patched sites' wrappers) starts with `endbr64`, the landing
//! pad of indirect branch tracking. Read from the preload library's symbol
//! table, as built.

mod common;

use object::{Object, ObjectSection, ObjectSymbol};

const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// (demangled name, what reaches it).
const TRAMPOLINES: &[&str] = &[
    "mcount",
    "_mcount",
    "__fentry__",
    "__cyg_profile_func_enter",
    "__cyg_profile_func_exit",
    "fntrace_rt::calls::tramp::fntrace_site_entry",
    "fntrace_rt::calls::tramp::fntrace_site_exit",
    "fntrace_rt::calls::fast::fntrace_fast_switch",
    "fntrace_rt::xray::tramp::fntrace_xray_entry",
    "fntrace_rt::xray::tramp::fntrace_xray_exit",
    "fntrace_rt::xray::tramp::fntrace_xray_tail",
    "fntrace_rt::xray::tramp::fntrace_xray_log_args",
];

#[test]
fn trampolines_start_with_endbr64() {
    let lib = common::preload();
    let data = std::fs::read(&lib).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let mut missing: Vec<&str> = TRAMPOLINES.to_vec();
    let mut bad = vec![];
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        let Ok(name) = sym.name() else { continue };
        let name = fntrace_rt::procinfo::demangle(name);
        let Some(i) = missing.iter().position(|&t| t == name) else {
            continue;
        };
        missing.remove(i);
        let sec = obj.section_by_index(sym.section_index().unwrap()).unwrap();
        let bytes = sec.data().unwrap();
        let at = (sym.address() - sec.address()) as usize;
        let head = &bytes[at..at + 4];
        if head != ENDBR64 {
            bad.push(format!("{name}: starts with {head:02x?}"));
        }
    }
    assert!(
        missing.is_empty(),
        "not found in {}: {missing:?}",
        lib.display()
    );
    assert!(bad.is_empty(), "no endbr64:\n{}", bad.join("\n"));
}
