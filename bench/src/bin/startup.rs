//! `cargo build --release -p fntrace-cli -p fntrace-preload && cargo run
//! --release -p fntrace-bench --bin startup`: what starting a recording
//! adds to a program's run (issue #24, item 5), in the same run as the
//! bare program and uftrace.
//!
//! Two C programs, each built with `gcc -O1 -pg -mfentry` (`call
//! __fentry__`, converted on a runtime thread while the program runs) and
//! with `gcc -O1 -pg` (`call mcount` after the prologue, whose prologues
//! are moved before `main`): a hello world, and a generated one with
//! 100,000 functions (of which it calls two; built once, cached in the
//! temporary directory). Each is run, alternating, for
//! `ROUNDS` rounds: bare; with the preload runtime directly (`LD_PRELOAD`
//! and `FNTRACE_OUTPUT`, what `record` sets); under `fntrace record`; and
//! under `uftrace record` (the same binary: uftrace records both builds). Wall time of each run from spawn to exit; printed: the
//! median per variant and what each adds over the bare run (targets:
//! `record` adds at most 5 ms to the small program and 20 ms to the one
//! with 100,000 symbols).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const ROUNDS: usize = 21;
const BIG_FUNCS: usize = 100_000;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Wall seconds of one run (output discarded).
fn wall(mut c: Command) -> f64 {
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let t = Instant::now();
    let st = c.status().expect("run");
    let s = t.elapsed().as_secs_f64();
    assert!(st.success(), "{c:?} failed");
    s
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Builds `src` into `out` with `-O1 -pg`, plus `-mfentry` if `fentry`.
fn gcc(src: &Path, out: &Path, fentry: bool) {
    let st = Command::new("gcc")
        .args(["-O1", "-pg"])
        .args(fentry.then_some("-mfentry"))
        .arg("-o")
        .arg(out)
        .arg(src)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed");
}

fn main() {
    let root = root();
    let release = root.join("target/release");
    let preload = release.join("libfntrace_preload.so");
    let fntrace = release.join("fntrace");
    assert!(
        preload.is_file() && fntrace.is_file(),
        "build it first: cargo build --release -p fntrace-cli -p fntrace-preload"
    );
    let dir = std::env::temp_dir().join("fntrace-startup-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let hello_c = dir.join("hello.c");
    std::fs::write(
        &hello_c,
        "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
    )
    .unwrap();
    let hello = dir.join("hello");
    gcc(&hello_c, &hello, true);
    let hello_pg = dir.join("hello-pg");
    gcc(&hello_c, &hello_pg, false);
    let big = dir.join(format!("big{BIG_FUNCS}"));
    let big_pg = dir.join(format!("big{BIG_FUNCS}-pg"));
    let big_c = dir.join("big.c");
    if !big.is_file() || !big_pg.is_file() || !big_c.is_file() {
        let mut s = String::from("#include <stdio.h>\n");
        for i in 0..BIG_FUNCS {
            s.push_str(&format!(
                "__attribute__((noinline)) int f{i}(int x) {{ return x + {i}; }}\n"
            ));
        }
        s.push_str(&format!(
            "int main(void) {{ printf(\"%d\\n\", f0(1) + f{}(2)); return 0; }}\n",
            BIG_FUNCS - 1
        ));
        std::fs::write(&big_c, s).unwrap();
        eprintln!("building the programs with {BIG_FUNCS} functions (once)...");
        gcc(&big_c, &big, true);
        gcc(&big_c, &big_pg, false);
    }
    let data = dir.join("t.data");
    let uftrace_dir = dir.join("uftrace.data");
    println!("{ROUNDS} rounds, alternating, median wall time; added = variant - bare (same run)");
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "program", "bare ms", "preload", "record", "uftrace", "+record", "+uftrace"
    );
    for (name, bin, target) in [
        ("hello (-pg -mfentry)", &hello, 5.0),
        ("100,000 functions (-mfentry)", &big, 20.0),
        ("hello (-pg)", &hello_pg, 5.0),
        ("100,000 functions (-pg)", &big_pg, 20.0),
    ] {
        let (mut bare, mut pre, mut rec, mut uf) = (vec![], vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            bare.push(wall(Command::new(bin)));
            let mut c = Command::new(bin);
            c.env("LD_PRELOAD", &preload).env("FNTRACE_OUTPUT", &data);
            pre.push(wall(c));
            let mut c = Command::new(&fntrace);
            c.args(["record", "-o"]).arg(&data).arg("--").arg(bin);
            rec.push(wall(c));
            let mut c = Command::new("uftrace");
            c.args(["record", "-d"]).arg(&uftrace_dir).arg(bin);
            uf.push(wall(c));
        }
        let ms = |v: Vec<f64>| median(v) * 1e3;
        let (b, p, r, u) = (ms(bare), ms(pre), ms(rec), ms(uf));
        println!(
            "{name:<28} {b:>9.2} {p:>9.2} {r:>9.2} {u:>9.2} {:>9.2} {:>9.2}   target +record <= {target} ms: {}",
            r - b,
            u - b,
            if r - b <= target { "met" } else { "NOT met" }
        );
    }
}
