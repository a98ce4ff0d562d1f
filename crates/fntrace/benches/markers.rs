//! The four disabled-path designs of markers (static key, flag, function
//! pointer, empty function), disabled and enabled with one empty probe, in
//! a tight loop and in two macro benchmarks (a word-frequency count with a
//! marker per word; a JSON parser with a marker per value), measured in
//! one run, rounds interleaved. Prints ns per marker, % slowdown against
//! the same code without a marker, and each design's time as a ratio of
//! the flag design's in the same run; asserts nothing about time.
//!
//! Run: `cargo bench -p fntrace --bench markers`
//! (`MARKER_BENCH_ROUNDS=N` for another number of rounds, default 61).
//! The macro benchmarks move by up to ±1 ns per marker with code placement
//! alone; for a comparison with less of that, build with every function
//! and branch target aligned, in a separate target directory:
//! `CARGO_TARGET_DIR=target/aligned RUSTFLAGS="-C llvm-args=-align-all-functions=6
//! -C llvm-args=-align-all-nofallthru-blocks=5" cargo bench -p fntrace --bench markers`.

use std::hint::black_box;
use std::time::Instant;

use fntrace::{declare_marker, fire};

declare_marker! { static T_KEY: bench_tight_key(i: u64); }
declare_marker! { static T_FLAG: bench_tight_flag(i: u64) as Flag; }
declare_marker! { static T_FNPTR: bench_tight_fnptr(i: u64) as FnPtr; }
declare_marker! { static T_EMPTY: bench_tight_empty(i: u64) as EmptyFn; }
declare_marker! { static W_KEY: bench_word_key(len: u32, hash: u64); }
declare_marker! { static W_FLAG: bench_word_flag(len: u32, hash: u64) as Flag; }
declare_marker! { static W_FNPTR: bench_word_fnptr(len: u32, hash: u64) as FnPtr; }
declare_marker! { static W_EMPTY: bench_word_empty(len: u32, hash: u64) as EmptyFn; }
declare_marker! { static J_KEY: bench_json_key(kind: u32, depth: u32, at: u64); }
declare_marker! { static J_FLAG: bench_json_flag(kind: u32, depth: u32, at: u64) as Flag; }
declare_marker! { static J_FNPTR: bench_json_fnptr(kind: u32, depth: u32, at: u64) as FnPtr; }
declare_marker! { static J_EMPTY: bench_json_empty(kind: u32, depth: u32, at: u64) as EmptyFn; }

const TIGHT_N: u64 = 5_000_000;

macro_rules! tight {
    (@call $name:ident) => {
        #[inline(never)]
        fn $name(n: u64) -> u64 {
            let mut acc = 0u64;
            for i in 0..n {
                acc = acc.wrapping_add(black_box(i));
                empty_call(i);
            }
            acc
        }
    };
    ($name:ident $(, $m:ident)?) => {
        #[inline(never)]
        fn $name(n: u64) -> u64 {
            let mut acc = 0u64;
            for i in 0..n {
                acc = acc.wrapping_add(black_box(i));
                $(fire!($m, i);)?
            }
            acc
        }
    };
}
tight!(tight_base);
tight!(tight_key, T_KEY);
tight!(tight_flag, T_FLAG);
tight!(tight_fnptr, T_FNPTR);
tight!(tight_empty, T_EMPTY);

/// Words separated by spaces, from a fixed pseudo-random generator.
fn text(bytes: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut out = Vec::with_capacity(bytes + 16);
    while out.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // 2000 distinct words of 2..=9 letters.
        let w = x % 2000;
        let len = 2 + (w % 8) as usize;
        let mut y = w.wrapping_mul(0x2545_f491_4f6c_dd1d);
        for _ in 0..len {
            out.push(b'a' + (y % 26) as u8);
            y /= 26;
        }
        out.push(b' ');
    }
    out
}

/// An open-addressing count table keyed by word hash.
struct Counts {
    keys: Vec<u64>,
    vals: Vec<u32>,
}

impl Counts {
    fn new() -> Self {
        Counts {
            keys: vec![0; 8192],
            vals: vec![0; 8192],
        }
    }
    #[inline(always)]
    fn add(&mut self, h: u64) {
        let mask = self.keys.len() - 1;
        let mut i = (h as usize) & mask;
        loop {
            if self.keys[i] == h {
                self.vals[i] += 1;
                return;
            }
            if self.keys[i] == 0 {
                self.keys[i] = h;
                self.vals[i] = 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }
}

macro_rules! words {
    ($name:ident $(, $m:ident)?) => {
        /// Counts the words of `t`; returns (distinct words, words).
        #[inline(never)]
        fn $name(t: &[u8]) -> (u64, u64) {
            let mut c = Counts::new();
            let mut words = 0u64;
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            let mut len = 0u32;
            for &b in t {
                if b == b' ' {
                    if len > 0 {
                        $(fire!($m, len, h);)?
                        c.add(h | 1);
                        words += 1;
                    }
                    h = 0xcbf2_9ce4_8422_2325;
                    len = 0;
                } else {
                    h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
                    len += 1;
                }
            }
            (c.vals.iter().filter(|&&v| v > 0).count() as u64, words)
        }
    };
}
words!(words_base);
words!(words_key, W_KEY);
words!(words_flag, W_FLAG);
words!(words_fnptr, W_FNPTR);
words!(words_empty, W_EMPTY);

/// A JSON document of about `bytes` bytes: an array of records with
/// strings, integers, nested arrays and literals, from a fixed generator.
fn json(bytes: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::with_capacity(bytes + 256);
    out.push(b'[');
    let mut first = true;
    while out.len() < bytes {
        if !first {
            out.extend_from_slice(b",\n");
        }
        first = false;
        let r = next();
        out.extend_from_slice(
            format!(
                "{{\"id\": {}, \"name\": \"user{}\", \"score\": -{}, \"tags\": [\"t{}\", \"x\\\"y\", {}], \
                 \"ok\": {}, \"ref\": null, \"pos\": {{\"x\": {}, \"y\": {}}}}}",
                r % 100_000,
                r % 977,
                (r >> 20) % 5000,
                (r >> 8) % 13,
                (r >> 30) % 100,
                if r & 1 == 1 { "true" } else { "false" },
                (r >> 12) % 1000,
                (r >> 40) % 1000,
            )
            .as_bytes(),
        );
    }
    out.push(b']');
    out
}

/// Value kinds the parser reports (the marker's `kind`).
const K_OBJ: u32 = 1;
const K_ARR: u32 = 2;
const K_STR: u32 = 3;
const K_NUM: u32 = 4;
const K_LIT: u32 = 5;

macro_rules! json_parse {
    ($name:ident $(, $m:ident)?) => {
        /// Parses `t` (a byte-level JSON scanner with a depth counter);
        /// returns (a checksum of every value, values).
        #[inline(never)]
        #[allow(unused_variables)] // the marker's arguments, without a marker
        fn $name(t: &[u8]) -> (u64, u64) {
            let mut i = 0usize;
            let mut depth = 0u32;
            let mut sum = 0u64;
            let mut values = 0u64;
            while i < t.len() {
                let b = t[i];
                match b {
                    b'{' | b'[' => {
                        let kind = if b == b'{' { K_OBJ } else { K_ARR };
                        $(fire!($m, kind, depth, i as u64);)?
                        depth += 1;
                        values += 1;
                        i += 1;
                    }
                    b'}' | b']' => {
                        depth -= 1;
                        i += 1;
                    }
                    b'"' => {
                        let start = i;
                        let mut h = 0xcbf2_9ce4_8422_2325u64;
                        i += 1;
                        while i < t.len() && t[i] != b'"' {
                            if t[i] == b'\\' {
                                i += 1;
                            }
                            h = (h ^ t[i] as u64).wrapping_mul(0x100_0000_01b3);
                            i += 1;
                        }
                        i += 1;
                        $(fire!($m, K_STR, depth, start as u64);)?
                        sum = sum.wrapping_add(h);
                        values += 1;
                    }
                    b'-' | b'0'..=b'9' => {
                        let start = i;
                        let neg = b == b'-';
                        if neg {
                            i += 1;
                        }
                        let mut n = 0i64;
                        while i < t.len() && t[i].is_ascii_digit() {
                            n = n * 10 + (t[i] - b'0') as i64;
                            i += 1;
                        }
                        $(fire!($m, K_NUM, depth, start as u64);)?
                        sum = sum.wrapping_add(if neg { n.wrapping_neg() } else { n } as u64);
                        values += 1;
                    }
                    b't' | b'f' | b'n' => {
                        $(fire!($m, K_LIT, depth, i as u64);)?
                        sum = sum.wrapping_add(b as u64);
                        values += 1;
                        i += if b == b'f' { 5 } else { 4 };
                    }
                    _ => i += 1,
                }
            }
            (sum ^ depth as u64, values)
        }
    };
}
json_parse!(json_base);
json_parse!(json_key, J_KEY);
json_parse!(json_flag, J_FLAG);
json_parse!(json_fnptr, J_FNPTR);
json_parse!(json_empty, J_EMPTY);

/// One measurement of `f`, in seconds.
fn once<R>(f: impl FnOnce() -> R) -> f64 {
    let t = Instant::now();
    black_box(f());
    t.elapsed().as_secs_f64()
}

/// A plain call, for scale: what one non-inlined call costs here.
#[inline(never)]
fn empty_call(i: u64) {
    black_box(i);
}
tight!(@call tight_call_ref);

/// A benchmarked function and what it is fed.
type Run = Box<dyn Fn() -> (u64, u64)>;

/// One workload: the code without a marker and with each design's marker.
struct Workload {
    name: String,
    /// What one marker is fired per, and how many are fired per run.
    unit: &'static str,
    markers: u64,
    base: Run,
    with: [Run; 4],
    attach: [fn() -> fntrace::ProbeHandle; 4],
}

const DESIGNS: [&str; 4] = [
    "static key (5-byte NOP / jmp)",
    "flag (load + branch)",
    "function pointer (NULL check)",
    "empty function (indirect call)",
];

/// Best times of one workload: without a marker, then per design
/// disabled and enabled.
struct Best {
    base: f64,
    off: [f64; 4],
    on: [f64; 4],
}

fn main() {
    let rounds: usize = std::env::var("MARKER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(61);
    let t: &'static [u8] = Vec::leak(text(1 << 20));
    let j: &'static [u8] = Vec::leak(json(1 << 20));
    let (distinct, nwords) = words_base(t);
    let (jsum, nvalues) = json_base(j);
    for f in [words_key, words_flag, words_fnptr, words_empty] {
        assert_eq!(f(t), (distinct, nwords));
    }
    for f in [json_key, json_flag, json_fnptr, json_empty] {
        assert_eq!(f(j), (jsum, nvalues));
    }
    let tight = |f: fn(u64) -> u64| -> Run { Box::new(move || (f(black_box(TIGHT_N)), 0)) };
    let words = |f: fn(&[u8]) -> (u64, u64)| -> Run { Box::new(move || f(black_box(t))) };
    let parse = |f: fn(&[u8]) -> (u64, u64)| -> Run { Box::new(move || f(black_box(j))) };
    let workloads = [
        Workload {
            name: format!("tight loop ({TIGHT_N} iterations of acc += black_box(i))"),
            unit: "iteration",
            markers: TIGHT_N,
            base: tight(tight_base),
            with: [
                tight(tight_key),
                tight(tight_flag),
                tight(tight_fnptr),
                tight(tight_empty),
            ],
            attach: [
                || T_KEY.attach(|_| {}).unwrap(),
                || T_FLAG.attach(|_| {}).unwrap(),
                || T_FNPTR.attach(|_| {}).unwrap(),
                || T_EMPTY.attach(|_| {}).unwrap(),
            ],
        },
        Workload {
            name: format!(
                "word count ({} MiB of text, {nwords} words, {distinct} distinct; FNV hash per byte, open-addressing table)",
                t.len() >> 20
            ),
            unit: "word",
            markers: nwords,
            base: words(words_base),
            with: [
                words(words_key),
                words(words_flag),
                words(words_fnptr),
                words(words_empty),
            ],
            attach: [
                || W_KEY.attach(|_, _| {}).unwrap(),
                || W_FLAG.attach(|_, _| {}).unwrap(),
                || W_FNPTR.attach(|_, _| {}).unwrap(),
                || W_EMPTY.attach(|_, _| {}).unwrap(),
            ],
        },
        Workload {
            name: format!(
                "JSON parse ({} MiB, {nvalues} values; byte scanner, strings hashed, integers parsed)",
                j.len() >> 20
            ),
            unit: "value",
            markers: nvalues,
            base: parse(json_base),
            with: [
                parse(json_key),
                parse(json_flag),
                parse(json_fnptr),
                parse(json_empty),
            ],
            attach: [
                || J_KEY.attach(|_, _, _| {}).unwrap(),
                || J_FLAG.attach(|_, _, _| {}).unwrap(),
                || J_FNPTR.attach(|_, _, _| {}).unwrap(),
                || J_EMPTY.attach(|_, _, _| {}).unwrap(),
            ],
        },
    ];

    // Every configuration is measured once per round, rounds interleaved,
    // and the best time kept: load from other processes hits all alike.
    let mut tc = f64::INFINITY;
    let mut best: Vec<Best> = workloads
        .iter()
        .map(|_| Best {
            base: f64::INFINITY,
            off: [f64::INFINITY; 4],
            on: [f64::INFINITY; 4],
        })
        .collect();
    for _ in 0..rounds {
        tc = tc.min(once(|| tight_call_ref(black_box(TIGHT_N))));
        for (w, b) in workloads.iter().zip(best.iter_mut()) {
            b.base = b.base.min(once(&w.base));
            for d in 0..4 {
                b.off[d] = b.off[d].min(once(&w.with[d]));
                let h = (w.attach[d])();
                b.on[d] = b.on[d].min(once(&w.with[d]));
                h.remove().map_err(|e| e.0).unwrap();
            }
        }
    }
    let per = |t: f64, base: f64, n: u64| (t - base) / n as f64 * 1e9;
    let pct = |t: f64, base: f64| (t / base - 1.0) * 100.0;
    println!(
        "best of {rounds} interleaved rounds; ns per marker = (time - time without marker) / markers fired; \
         \"vs flag\" = time / time of the flag design, same run"
    );
    println!(
        "a plain non-inlined call in the tight loop adds {:.2} ns",
        per(tc, best[0].base, TIGHT_N)
    );
    for (w, b) in workloads.iter().zip(best.iter()) {
        println!();
        println!(
            "{}: {:.2} ns per {} without a marker",
            w.name,
            b.base / w.markers as f64 * 1e9,
            w.unit
        );
        println!();
        println!(
            "| design | disabled: ns/marker | disabled: slowdown | disabled: vs flag | \
             enabled (1 empty probe): ns/marker | enabled: slowdown | enabled: vs flag |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for (d, name) in DESIGNS.iter().enumerate() {
            println!(
                "| {} | {:.3} | {:+.1} % | {:.3} | {:.2} | {:+.1} % | {:.3} |",
                name,
                per(b.off[d], b.base, w.markers),
                pct(b.off[d], b.base),
                b.off[d] / b.off[1],
                per(b.on[d], b.base, w.markers),
                pct(b.on[d], b.base),
                b.on[d] / b.on[1],
            );
        }
    }
}
