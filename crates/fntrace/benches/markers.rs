//! The four disabled-path designs of markers (static key, flag, function
//! pointer, empty function), disabled and enabled with one empty probe, in
//! a tight loop and in two macro benchmarks (a word-frequency count with a
//! marker per word; a JSON parser with a marker per value), measured in
//! one run, rounds interleaved. Prints ns per marker, % slowdown against
//! the same code without a marker, and each design's time as a ratio of
//! the flag design's in the same run; asserts nothing about time.
//!
//! Code placement alone moves the macro benchmarks by up to ±1 ns per
//! marker (branch prediction and instruction fetch depend on where the
//! loop's branches sit): the same source, built twice with a different
//! function in front of it, measures differently. So every benchmarked
//! function is compiled in [`COPIES`] copies (identical loops, one salt
//! constant apart so that they are not merged; their loops at each of the
//! four 16-byte offsets within a 64-byte line, two copies each, [`pad!`]),
//! each copy is timed in every round, and the tables give the median over
//! the copies of each copy's best round (best: the least disturbed by other
//! processes; median over copies: the typical placement, not the luckiest),
//! the range over the copies, and the same from each copy's median round.
//!
//! Run: `cargo bench -p fntrace --bench markers`
//! (`MARKER_BENCH_ROUNDS=N` for another number of rounds, default 61;
//! `MARKER_BENCH_COPIES=N` to time only the first N copies;
//! `MARKER_BENCH_VERBOSE=1` to print each copy's best time as well).
//! For a comparison with still less placement luck, build with every
//! function and branch target aligned, in a separate target directory:
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
        pub fn $name(n: u64) -> u64 {
            pad!();
            let mut acc = 0u64;
            for i in 0..n {
                acc = acc.wrapping_add(black_box(i));
                $(fire!($m, i);)?
            }
            black_box(SALT);
            acc
        }
    };
}

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
        pub fn $name(t: &[u8]) -> (u64, u64) {
            pad!();
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
            black_box(SALT);
            (c.vals.iter().filter(|&&v| v > 0).count() as u64, words)
        }
    };
}

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
        pub fn $name(t: &[u8]) -> (u64, u64) {
            pad!();
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
            black_box(SALT);
            (sum ^ depth as u64, values)
        }
    };
}

/// In a copy's function, before its loop: a jump to 16 × (`SALT` mod 4)
/// bytes past the next 64-byte boundary (taken once per call). What
/// follows, the loop included, then sits at the same offset within its
/// 64-byte lines in every build, and that offset takes each of its four
/// values (loop heads are aligned to 16 bytes) in two of the eight copies,
/// which differ in their higher address bits.
macro_rules! pad {
    () => {
        // SAFETY: a jump over padding bytes (int3) to the next instruction;
        // no register, memory or flag is touched.
        unsafe {
            core::arch::asm!(
                "jmp 2f",
                ".p2align 6, 0xcc",
                ".skip {n}, 0xcc",
                "2:",
                n = const 16 * (SALT % 4),
                options(nomem, nostack, preserves_flags)
            )
        }
    };
}

/// Copies of every benchmarked function (see the module documentation).
const COPIES: usize = 8;

/// One copy of every benchmarked function, in module `$copy`; `SALT`
/// (different per copy) places its loops differently ([`pad!`]) and keeps
/// the copies from being merged.
macro_rules! copy {
    ($copy:ident, $salt:expr) => {
        mod $copy {
            use super::*;
            const SALT: u32 = $salt;
            tight!(tight_base);
            tight!(tight_key, T_KEY);
            tight!(tight_flag, T_FLAG);
            tight!(tight_fnptr, T_FNPTR);
            tight!(tight_empty, T_EMPTY);
            words!(words_base);
            words!(words_key, W_KEY);
            words!(words_flag, W_FLAG);
            words!(words_fnptr, W_FNPTR);
            words!(words_empty, W_EMPTY);
            json_parse!(json_base);
            json_parse!(json_key, J_KEY);
            json_parse!(json_flag, J_FLAG);
            json_parse!(json_fnptr, J_FNPTR);
            json_parse!(json_empty, J_EMPTY);
        }
    };
}
copy!(c0, 0);
copy!(c1, 1);
copy!(c2, 2);
copy!(c3, 3);
copy!(c4, 4);
copy!(c5, 5);
copy!(c6, 6);
copy!(c7, 7);

/// Function `$f` of every copy.
macro_rules! all {
    ($f:ident) => {
        [
            c0::$f,
            c1::$f,
            c2::$f,
            c3::$f,
            c4::$f,
            c5::$f,
            c6::$f,
            c7::$f,
        ]
    };
}

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

/// A macro benchmark: (result checksum, count) of its input.
type TextFn = fn(&[u8]) -> (u64, u64);

/// A benchmarked function and what it is fed.
type Run = Box<dyn Fn() -> (u64, u64)>;

/// One workload: the code without a marker and with each design's marker,
/// each in every copy.
struct Workload {
    name: String,
    /// What one marker is fired per, and how many are fired per run.
    unit: &'static str,
    markers: u64,
    base: Vec<Run>,
    with: [Vec<Run>; 4],
    attach: [fn() -> fntrace::ProbeHandle; 4],
}

const DESIGNS: [&str; 4] = [
    "static key (5-byte NOP / jmp)",
    "flag (load + branch)",
    "function pointer (NULL check)",
    "empty function (indirect call)",
];

/// The times of one configuration: per copy, one per round.
#[derive(Clone, Default)]
struct Times(Vec<Vec<f64>>);

impl Times {
    fn new(copies: usize) -> Self {
        Times(vec![vec![]; copies])
    }
    /// Per copy: its best round, or its median round.
    fn per_copy(&self, median: bool) -> Vec<f64> {
        self.0
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.sort_by(f64::total_cmp);
                if median { r[r.len() / 2] } else { r[0] }
            })
            .collect()
    }
}

/// The median of `v`.
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Times of one workload: without a marker, then per design disabled and
/// enabled.
struct Measured {
    base: Times,
    off: [Times; 4],
    on: [Times; 4],
}

/// One configuration summarised over the copies: (median over copies,
/// smallest, largest) of each copy's best or median round.
fn summary(t: &Times, median_round: bool) -> (f64, f64, f64) {
    let v = t.per_copy(median_round);
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(&v), lo, hi)
}

fn main() {
    let rounds: usize = std::env::var("MARKER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(61)
        .max(1);
    let copies: usize = std::env::var("MARKER_BENCH_COPIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(COPIES)
        .clamp(1, COPIES);
    let verbose = std::env::var_os("MARKER_BENCH_VERBOSE").is_some();
    let t: &'static [u8] = Vec::leak(text(1 << 20));
    let j: &'static [u8] = Vec::leak(json(1 << 20));
    let (distinct, nwords) = c0::words_base(t);
    let (jsum, nvalues) = c0::json_base(j);
    let tight_fns = [
        all!(tight_base),
        all!(tight_key),
        all!(tight_flag),
        all!(tight_fnptr),
        all!(tight_empty),
    ];
    let word_fns = [
        all!(words_base),
        all!(words_key),
        all!(words_flag),
        all!(words_fnptr),
        all!(words_empty),
    ];
    let json_fns = [
        all!(json_base),
        all!(json_key),
        all!(json_flag),
        all!(json_fnptr),
        all!(json_empty),
    ];
    for f in word_fns.iter().flatten() {
        assert_eq!(f(t), (distinct, nwords));
    }
    for f in json_fns.iter().flatten() {
        assert_eq!(f(j), (jsum, nvalues));
    }
    let tight = |f: fn(u64) -> u64| -> Run { Box::new(move || (f(black_box(TIGHT_N)), 0)) };
    let words = |f: TextFn| -> Run { Box::new(move || f(black_box(t))) };
    let parse = |f: TextFn| -> Run { Box::new(move || f(black_box(j))) };
    let runs = |fs: &[fn(u64) -> u64; COPIES]| fs[..copies].iter().map(|&f| tight(f)).collect();
    let wruns = |fs: &[TextFn; COPIES]| fs[..copies].iter().map(|&f| words(f)).collect();
    let jruns = |fs: &[TextFn; COPIES]| fs[..copies].iter().map(|&f| parse(f)).collect();
    let workloads = [
        Workload {
            name: format!("tight loop ({TIGHT_N} iterations of acc += black_box(i))"),
            unit: "iteration",
            markers: TIGHT_N,
            base: runs(&tight_fns[0]),
            with: [
                runs(&tight_fns[1]),
                runs(&tight_fns[2]),
                runs(&tight_fns[3]),
                runs(&tight_fns[4]),
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
            base: wruns(&word_fns[0]),
            with: [
                wruns(&word_fns[1]),
                wruns(&word_fns[2]),
                wruns(&word_fns[3]),
                wruns(&word_fns[4]),
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
            base: jruns(&json_fns[0]),
            with: [
                jruns(&json_fns[1]),
                jruns(&json_fns[2]),
                jruns(&json_fns[3]),
                jruns(&json_fns[4]),
            ],
            attach: [
                || J_KEY.attach(|_, _, _| {}).unwrap(),
                || J_FLAG.attach(|_, _, _| {}).unwrap(),
                || J_FNPTR.attach(|_, _, _| {}).unwrap(),
                || J_EMPTY.attach(|_, _, _| {}).unwrap(),
            ],
        },
    ];

    // Every configuration (every copy) is measured once per round, rounds
    // interleaved: load from other processes hits all alike.
    let mut tc = f64::INFINITY;
    let mut m: Vec<Measured> = workloads
        .iter()
        .map(|_| Measured {
            base: Times::new(copies),
            off: std::array::from_fn(|_| Times::new(copies)),
            on: std::array::from_fn(|_| Times::new(copies)),
        })
        .collect();
    for _ in 0..rounds {
        tc = tc.min(once(|| tight_call_ref(black_box(TIGHT_N))));
        for (w, b) in workloads.iter().zip(m.iter_mut()) {
            for (c, f) in w.base.iter().enumerate() {
                b.base.0[c].push(once(f));
            }
            for d in 0..4 {
                for (c, f) in w.with[d].iter().enumerate() {
                    b.off[d].0[c].push(once(f));
                }
                let h = (w.attach[d])();
                for (c, f) in w.with[d].iter().enumerate() {
                    b.on[d].0[c].push(once(f));
                }
                h.remove().map_err(|e| e.0).unwrap();
            }
        }
    }
    let per = |t: f64, base: f64, n: u64| (t - base) / n as f64 * 1e9;
    let pct = |t: f64, base: f64| (t / base - 1.0) * 100.0;
    println!(
        "{copies} copies of each function, {rounds} interleaved rounds; ns per marker = (time - time \
         without marker) / markers fired, from the median over the copies of each copy's best round, \
         [range over the copies]; \"median round\": the same from each copy's median round; \
         \"vs flag\" = time / time of the flag design"
    );
    let base_tight = summary(&m[0].base, false).0;
    println!(
        "a plain non-inlined call in the tight loop adds {:.2} ns",
        per(tc, base_tight, TIGHT_N)
    );
    for (w, b) in workloads.iter().zip(m.iter()) {
        let (base, blo, bhi) = summary(&b.base, false);
        let base_med = summary(&b.base, true).0;
        let unit = |x: f64| x / w.markers as f64 * 1e9;
        println!();
        println!(
            "{}: {:.2} ns per {} without a marker (copies {:.2}–{:.2}; median round {:.2})",
            w.name,
            unit(base),
            w.unit,
            unit(blo),
            unit(bhi),
            unit(base_med)
        );
        println!();
        if verbose {
            let row = |what: &str, t: &Times| {
                let v: Vec<String> = t
                    .per_copy(false)
                    .iter()
                    .map(|&x| format!("{:.3}", unit(x)))
                    .collect();
                println!("{what}: ns per {} by copy: {}", w.unit, v.join(" "));
            };
            row("without a marker", &b.base);
            for (d, name) in DESIGNS.iter().enumerate() {
                row(&format!("{name}, disabled"), &b.off[d]);
                row(&format!("{name}, enabled"), &b.on[d]);
            }
            println!();
        }
        println!(
            "| design | disabled: ns/marker [copies] | median round | slowdown | vs flag | \
             enabled (1 empty probe): ns/marker [copies] | median round | slowdown | vs flag |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let flag_off = summary(&b.off[1], false).0;
        let flag_on = summary(&b.on[1], false).0;
        for (d, name) in DESIGNS.iter().enumerate() {
            let (off, olo, ohi) = summary(&b.off[d], false);
            let (on, nlo, nhi) = summary(&b.on[d], false);
            let off_med = summary(&b.off[d], true).0;
            let on_med = summary(&b.on[d], true).0;
            println!(
                "| {} | {:.3} [{:.3} – {:.3}] | {:.3} | {:+.1} % | {:.3} | {:.2} [{:.2} – {:.2}] | {:.2} | {:+.1} % | {:.3} |",
                name,
                per(off, base, w.markers),
                per(olo, base, w.markers),
                per(ohi, base, w.markers),
                per(off_med, base_med, w.markers),
                pct(off, base),
                off / flag_off,
                per(on, base, w.markers),
                per(nlo, base, w.markers),
                per(nhi, base, w.markers),
                per(on_med, base_med, w.markers),
                pct(on, base),
                on / flag_on,
            );
        }
    }
}
