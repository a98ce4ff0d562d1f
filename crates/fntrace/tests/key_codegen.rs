//! Static-key sites in optimised code: the `key_registers` example, built
//! in release (a debug build keeps every value in memory, so it shows
//! neither the register allocation nor a clobbered register). It checks
//! at run time that an enabled site keeps the firing loop's integer and
//! floating-point registers and that a probe's panic unwinds through the
//! firing code; here its disassembly (objdump, from binutils) is checked
//! for the structure that keeps the disabled path free: the site is the
//! 5-byte NOP, and its label block calls nothing but the dispatcher,
//! between saves and restores of the nine caller-saved registers, so the
//! register allocator has no call clobber to work around in the loop.
//! x86_64 only (static keys are a flag elsewhere).

#![cfg(target_arch = "x86_64")]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Builds the example in release and returns its path.
fn example() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let status = Command::new(env!("CARGO"))
            .args([
                "build",
                "-q",
                "--release",
                "-p",
                "fntrace",
                "--example",
                "key_registers",
            ])
            .status()
            .expect("cargo");
        assert!(
            status.success(),
            "building the key_registers example failed"
        );
        // target/<profile>/deps/<this test> -> target/release/examples/
        let exe = std::env::current_exe().unwrap();
        let target = exe.parent().unwrap().parent().unwrap().parent().unwrap();
        let p = target.join("release/examples/key_registers");
        assert!(p.is_file(), "{} missing", p.display());
        p
    })
    .clone()
}

/// Runs the example (at most two minutes: a read-side section left open
/// by a probe's panic would make its grace period wait forever).
fn run_example() -> String {
    let mut child = Command::new(example())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("key_registers did not finish in two minutes");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "key_registers failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn tool(name: &str, args: &[&str]) -> String {
    let out = Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name} (binutils) is needed: {e}"));
    assert!(out.status.success(), "{name} {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The disassembly of `len` bytes at `addr` of `bin`: (mnemonic,
/// operands, raw bytes) per instruction.
fn disassemble(bin: &str, addr: u64, len: u64) -> Vec<(String, String, String)> {
    let text = tool(
        "objdump",
        &[
            "-d",
            "-C",
            "-w",
            &format!("--start-address={addr:#x}"),
            &format!("--stop-address={:#x}", addr + len),
            bin,
        ],
    );
    text.lines()
        .filter_map(|l| {
            // "  4368f:\t48 89 da \tmov    %rbx,%rdx"
            let mut parts = l.split('\t');
            let a = parts.next()?.trim();
            if !a.ends_with(':') || u64::from_str_radix(a.trim_end_matches(':'), 16).is_err() {
                return None;
            }
            let bytes = parts.next()?.trim().to_string();
            let insn = parts.next()?.trim();
            let (m, ops) = insn.split_once(' ').unwrap_or((insn, ""));
            Some((m.to_string(), ops.trim().to_string(), bytes))
        })
        .collect()
}

const SAVED: [&str; 9] = [
    "%rax", "%rcx", "%rdx", "%rsi", "%rdi", "%r8", "%r9", "%r10", "%r11",
];

#[test]
fn enabled_static_key_keeps_registers_and_unwinds_a_probe_panic() {
    let out = run_example();
    assert!(out.contains("ok registers"), "{out}");
    assert!(out.contains("ok panic"), "{out}");
}

#[test]
fn static_key_site_is_a_nop_and_its_block_calls_only_the_dispatcher() {
    let out = run_example();
    let line = out
        .lines()
        .find(|l| l.starts_with("site "))
        .unwrap_or_else(|| panic!("no site line in:\n{out}"));
    let off: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap())
        .collect();
    let (site, target) = (off[0], off[1]);
    let bin = example();
    let bin = bin.to_str().unwrap();
    let syms = tool("nm", &["--defined-only", "-C", "-S", bin]);
    let (start, size) = syms
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[3] == "key_registers::int_loop").then(|| {
                (
                    u64::from_str_radix(f[0], 16).unwrap(),
                    u64::from_str_radix(f[1], 16).unwrap(),
                )
            })
        })
        .expect("key_registers::int_loop not in the symbol table");
    assert!(
        site < size && target < size,
        "site or label block outside int_loop"
    );

    // The disabled site: one 5-byte NOP.
    let nop = disassemble(bin, start + site, 5);
    assert_eq!(nop.len(), 1, "{nop:?}");
    assert_eq!(
        nop[0].2, "0f 1f 44 00 00",
        "the site is not the 5-byte NOP: {nop:?}"
    );

    // The whole function calls (directly) only the dispatcher.
    let all = disassemble(bin, start, size);
    for (m, ops, _) in &all {
        if m.starts_with("call") && !ops.starts_with('*') {
            assert!(
                ops.contains("fntrace_markers::keycall::key_dispatch"),
                "int_loop calls {ops}: a call that clobbers registers in the loop"
            );
        }
    }

    // The label block: nothing called before the dispatcher, which is
    // called between saves and restores of the caller-saved registers.
    let block = disassemble(bin, start + target, size - target);
    let call = block
        .iter()
        .position(|(m, _, _)| m.starts_with("call"))
        .expect("the label block makes no call");
    assert!(
        block[call]
            .1
            .contains("fntrace_markers::keycall::key_dispatch"),
        "the label block's first call is {:?}, not the dispatcher",
        block[call]
    );
    let before = &block[call.saturating_sub(14)..call];
    let after = &block[call + 1..(call + 12).min(block.len())];
    for r in SAVED {
        assert!(
            before.iter().any(|(m, ops, _)| m == "mov"
                && ops.starts_with(&format!("{r},"))
                && ops.contains('(')),
            "{r} is not saved before the dispatcher call: {before:?}"
        );
        assert!(
            after.iter().any(|(m, ops, _)| m == "mov"
                && ops.ends_with(&format!(",{r}"))
                && ops.contains('(')),
            "{r} is not restored after the dispatcher call: {after:?}"
        );
    }
}
