//! `cargo fntrace build|run|test --instrument=MODE [options] [cargo args]`:
//! the RFC's unified instrumentation option for Cargo, mapped onto the
//! flags rustc has.
//!
//! The flags go to the workspace's own crates only (through
//! `RUSTC_WORKSPACE_WRAPPER`, this binary acting as the wrapper) unless
//! `--all-crates` is given; builds go to their own target directory
//! (`<target>/fntrace/<mode>`) so normal builds are not invalidated; `run`
//! and `test` run the binaries under `fntrace record` (a Cargo runner).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Set when this binary runs as rustc's wrapper: the flags to add.
const ENV_WRAP_FLAGS: &str = "FNTRACE_CARGO_RUSTFLAGS";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Ok(flags) = std::env::var(ENV_WRAP_FLAGS) {
        if args.len() > 1 && looks_like_rustc(&args[1]) {
            return wrap_rustc(&args[1..], &flags);
        }
    }
    match run(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cargo-fntrace: {e}");
            ExitCode::from(2)
        }
    }
}

fn looks_like_rustc(a: &OsString) -> bool {
    PathBuf::from(a)
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("rustc"))
}

/// Environment variable listing the workspace members to instrument
/// (`\x1f`-separated package names).
const ENV_WRAP_MEMBERS: &str = "FNTRACE_CARGO_MEMBERS";

/// fntrace's own crates are never instrumented (the runtime would trace
/// itself).
const NEVER: [&str; 5] = [
    "fntrace",
    "fntrace-rt",
    "fntrace-format",
    "fntrace-macros",
    "fntrace-preload",
];

/// Runs rustc with our flags appended: only for the packages listed in
/// `FNTRACE_CARGO_MEMBERS` (Cargo also wraps path dependencies), never for
/// fntrace's own crates, and not for cargo's `-vV` and `--print` probes.
fn wrap_rustc(args: &[OsString], flags: &str) -> ExitCode {
    let mut c = Command::new(&args[0]);
    c.args(&args[1..]);
    let probe = args
        .iter()
        .any(|a| a == "-vV" || a == "-V" || a.to_string_lossy().starts_with("--print"));
    let pkg = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    let member = std::env::var(ENV_WRAP_MEMBERS)
        .map(|m| m.split('\x1f').any(|x| x == pkg))
        .unwrap_or(true);
    if !probe && member && !NEVER.contains(&pkg.as_str()) {
        c.args(flags.split('\x1f').filter(|f| !f.is_empty()));
        if flags.split('\x1f').any(|f| f == CFG_ALWAYS) {
            c.env(ENV_ALWAYS, "1");
        }
    }
    match c.status() {
        Ok(s) => ExitCode::from(s.code().unwrap_or(1) as u8),
        Err(e) => {
            eprintln!("cargo-fntrace: cannot run {:?}: {e}", args[0]);
            ExitCode::from(2)
        }
    }
}

const USAGE: &str = "usage: cargo fntrace build|run|test --instrument=MODE [--all-crates] [--gprof] [-o TRACE] [cargo args...]
MODE: never | mcount | fentry | xray[:ignore-loops,instruction-threshold=N,no-entry,no-exit] | patchable | source
  xray with a threshold (or ignore-loops): #[instrument_fn] functions whose sleds LLVM drops
  are recorded through a patchable entry instead (XRay's always-instrument)";

/// The cfg that gives `#[instrument_fn]` functions a patchable entry
/// (XRay's always-instrument when a threshold drops their sleds).
const CFG_ALWAYS: &str = "fntrace_always_instrument";

/// Set in rustc's environment together with `--cfg fntrace_always_instrument`:
/// tells `#[instrument_fn]` that the cfg is declared (so it can emit its
/// `cfg_attr` without an `unexpected_cfgs` warning).
const ENV_ALWAYS: &str = "FNTRACE_ALWAYS_INSTRUMENT";

/// Flags added to an XRay mode that is not `always`: the feature gate of
/// `#[patchable_function_entry]`, the cfg `#[instrument_fn]` keys it on,
/// and the cfg's declaration for rustc's `unexpected_cfgs` lint.
const ALWAYS_INSTRUMENT: [&str; 4] = [
    "-Zcrate-attr=feature(patchable_function_entry)",
    "--cfg",
    CFG_ALWAYS,
    "--check-cfg=cfg(fntrace_always_instrument)",
];

/// The rustc flags for a mode, and whether they need `RUSTC_BOOTSTRAP`.
pub fn mode_flags(mode: &str) -> Result<(Vec<String>, bool), String> {
    let (name, opts) = mode.split_once(':').unwrap_or((mode, ""));
    let opts: Vec<&str> = opts.split(',').filter(|o| !o.is_empty()).collect();
    if name != "xray" && !opts.is_empty() {
        return Err(format!("--instrument={name} takes no options"));
    }
    Ok(match name {
        "never" | "source" => (vec![], false),
        "mcount" => (
            vec![
                "-Zinstrument-mcount".into(),
                "-Cforce-frame-pointers=yes".into(),
            ],
            true,
        ),
        // rustc 1.95 has no `__fentry__` calls (`-Zinstrument-mcount=fentry`
        // is newer): patchable entries give the same semantics (the hook
        // runs before the prologue, arguments intact) once fntrace switches
        // them on, which `fntrace record` does at start.
        "fentry" | "patchable" => (vec!["-Zpatchable-function-entry=10,8".into()], true),
        "xray" => {
            let mut v = vec![];
            for o in opts {
                v.push(match o {
                    "ignore-loops" => "ignore-loops".to_string(),
                    "no-entry" => "skip-entry".to_string(),
                    "no-exit" => "skip-exit".to_string(),
                    "always" | "never" => o.to_string(),
                    _ if o.starts_with("instruction-threshold=") => {
                        let n = &o["instruction-threshold=".len()..];
                        n.parse::<u32>()
                            .map_err(|_| format!("bad instruction-threshold {n:?}"))?;
                        o.to_string()
                    }
                    _ => return Err(format!("unknown xray option {o:?}")),
                });
            }
            if v.is_empty() {
                v.push("always".into());
            }
            let mut flags = vec![format!("-Zinstrument-xray={}", v.join(","))];
            if !v.iter().any(|o| o == "always") {
                // Not every function gets sleds: `#[instrument_fn]`
                // functions get a patchable entry instead (XRay's
                // always-instrument; see `fntrace-macros`).
                flags.extend(ALWAYS_INSTRUMENT.iter().map(|f| f.to_string()));
            }
            (flags, true)
        }
        _ => return Err(format!("unknown --instrument mode {name:?}\n{USAGE}")),
    })
}

fn run(args: Vec<OsString>) -> Result<ExitCode, String> {
    let mut it = args.into_iter().skip(1).peekable();
    // `cargo fntrace ...` passes "fntrace" first.
    if it.peek().is_some_and(|a| a == "fntrace") {
        it.next();
    }
    let sub = it
        .next()
        .map(|s| s.to_string_lossy().into_owned())
        .ok_or(USAGE)?;
    if !matches!(sub.as_str(), "build" | "run" | "test") {
        return Err(format!("unknown command {sub:?}\n{USAGE}"));
    }
    let mut mode = None;
    let mut all = false;
    let mut gprof = false;
    let mut trace: Option<PathBuf> = None;
    let mut rest: Vec<OsString> = vec![];
    let mut passthrough = false;
    while let Some(a) = it.next() {
        let s = a.to_string_lossy().into_owned();
        if passthrough {
            rest.push(a);
            continue;
        }
        if let Some(m) = s.strip_prefix("--instrument=") {
            mode = Some(m.to_string());
        } else if s == "--instrument" {
            mode = Some(
                it.next()
                    .ok_or("--instrument needs a value")?
                    .to_string_lossy()
                    .into(),
            );
        } else if s == "--all-crates" {
            all = true;
        } else if s == "--gprof" {
            gprof = true;
        } else if s == "-o" || s == "--trace" {
            trace = Some(it.next().ok_or("-o needs a path")?.into());
        } else {
            if s == "--" {
                passthrough = true;
            }
            rest.push(a);
        }
    }
    let mode = mode.ok_or_else(|| format!("--instrument=MODE is required\n{USAGE}"))?;
    let (mut flags, bootstrap) = mode_flags(&mode)?;
    if gprof {
        flags.push("-Clink-arg=-pg".into());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let meta = metadata(&cargo)?;
    let target = meta.target.clone();
    let mode_dir = mode.replace([':', ',', '='], "-");
    let target_dir = target.join("fntrace").join(&mode_dir);
    let mut c = Command::new(&cargo);
    c.arg(&sub).args(&rest).env("CARGO_TARGET_DIR", &target_dir);
    if bootstrap {
        eprintln!(
            "cargo-fntrace: warning: --instrument={mode} uses unstable rustc flags ({}); \
             setting RUSTC_BOOTSTRAP=1 for this build",
            flags.join(" ")
        );
        c.env("RUSTC_BOOTSTRAP", "1");
    }
    if !flags.is_empty() {
        if all {
            let mut rf = std::env::var("RUSTFLAGS").unwrap_or_default();
            for f in &flags {
                rf.push(' ');
                rf.push_str(f);
            }
            c.env("RUSTFLAGS", rf.trim());
            if flags.iter().any(|f| f == CFG_ALWAYS) {
                c.env(ENV_ALWAYS, "1");
            }
        } else {
            let me = std::env::current_exe().map_err(|e| e.to_string())?;
            c.env("RUSTC_WORKSPACE_WRAPPER", me)
                .env(ENV_WRAP_FLAGS, flags.join("\x1f"))
                .env(ENV_WRAP_MEMBERS, meta.members.join("\x1f"));
        }
    }
    // `test` runs several binaries: each gets its own trace.
    let default_name = if sub == "test" {
        "{name}.data"
    } else {
        "fntrace.data"
    };
    let trace = trace.unwrap_or_else(|| target_dir.join(default_name));
    if sub != "build" {
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let fntrace = me.with_file_name("fntrace");
        if !fntrace.is_file() {
            return Err(format!(
                "{} not found next to cargo-fntrace",
                fntrace.display()
            ));
        }
        let runner = format!("{} record -o {} --", fntrace.display(), trace.display());
        c.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", runner);
    }
    let st = c.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if sub != "build" && trace.exists() {
        eprintln!(
            "cargo-fntrace: trace in {} (fntrace report {})",
            trace.display(),
            trace.display()
        );
    } else if sub == "test" {
        eprintln!(
            "cargo-fntrace: one trace per test binary in {} (NAME.data)",
            target_dir.display()
        );
    }
    Ok(ExitCode::from(st.code().unwrap_or(1) as u8))
}

/// What `cargo metadata` says about the workspace.
struct Meta {
    target: PathBuf,
    members: Vec<String>,
}

fn metadata(cargo: &OsString) -> Result<Meta, String> {
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata: {e}"))?;
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t),
        None => v["target_directory"]
            .as_str()
            .map(PathBuf::from)
            .ok_or("cargo metadata gave no target_directory")?,
    };
    let members = v["packages"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|p| p["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(Meta { target, members })
}

#[cfg(test)]
mod tests {
    use super::mode_flags;

    #[test]
    fn modes_map_to_rustc_flags() {
        assert_eq!(mode_flags("never").unwrap().0, Vec::<String>::new());
        assert!(mode_flags("mcount").unwrap().0[0] == "-Zinstrument-mcount");
        assert_eq!(
            mode_flags("xray:ignore-loops,instruction-threshold=3,no-entry,no-exit")
                .unwrap()
                .0,
            vec![
                "-Zinstrument-xray=ignore-loops,instruction-threshold=3,skip-entry,skip-exit",
                "-Zcrate-attr=feature(patchable_function_entry)",
                "--cfg",
                "fntrace_always_instrument",
                "--check-cfg=cfg(fntrace_always_instrument)",
            ]
        );
        assert_eq!(
            mode_flags("xray").unwrap().0,
            vec!["-Zinstrument-xray=always"]
        );
        assert_eq!(
            mode_flags("xray:always,instruction-threshold=5").unwrap().0,
            vec!["-Zinstrument-xray=always,instruction-threshold=5"]
        );
        assert!(mode_flags("never").unwrap().0.is_empty());
        for m in ["mcount", "fentry", "patchable", "source"] {
            assert!(
                !mode_flags(m)
                    .unwrap()
                    .0
                    .iter()
                    .any(|f| f.contains("always")),
                "{m}"
            );
        }
        assert!(mode_flags("xray:bogus").is_err());
        assert!(mode_flags("mcount:x").is_err());
        assert_eq!(
            mode_flags("fentry").unwrap().0,
            vec!["-Zpatchable-function-entry=10,8"]
        );
        assert_eq!(
            mode_flags("fentry").unwrap(),
            mode_flags("patchable").unwrap()
        );
        assert!(mode_flags("maybe").is_err());
    }

    #[test]
    fn xray_without_always_gives_instrumented_functions_a_patchable_entry() {
        let extra = [
            "-Zcrate-attr=feature(patchable_function_entry)",
            "--cfg",
            "fntrace_always_instrument",
            "--check-cfg=cfg(fntrace_always_instrument)",
        ];
        for (mode, xray) in [
            (
                "xray:instruction-threshold=200",
                "-Zinstrument-xray=instruction-threshold=200",
            ),
            ("xray:ignore-loops", "-Zinstrument-xray=ignore-loops"),
            ("xray:no-exit", "-Zinstrument-xray=skip-exit"),
        ] {
            let (flags, bootstrap) = mode_flags(mode).unwrap();
            assert!(bootstrap, "{mode}");
            let mut want = vec![xray];
            want.extend(extra);
            assert_eq!(flags, want, "{mode}");
        }
        // Every function has sleds: nothing to add.
        for mode in ["xray", "xray:always", "xray:no-entry,always"] {
            let flags = mode_flags(mode).unwrap().0;
            assert_eq!(flags.len(), 1, "{mode}: {flags:?}");
        }
    }
}
