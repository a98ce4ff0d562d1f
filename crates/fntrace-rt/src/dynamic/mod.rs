//! Dynamic tracing: patchable entry sites switched on and off while the
//! program runs.
//!
//! - [`crate::patch::sites`]: classifying the NOP layout of sites
//!   (`__patchable_function_entries`, `__mcount_loc`) — a leaf, shared with
//!   `fntrace record -p`, which fixes up one-byte NOP runs while every
//!   thread is stopped;
//! - `calls::wrapper`: the per-function call wrappers switched-on sites
//!   jump to (shared with the call protocol);
//! - this module: the registry of loaded objects and their sites, the
//!   scan that finds and classifies them, and the selection rules (`-F`/`-N`
//!   at start, [`switch_functions`] later);
//! - `write`: the code it writes for them with the shared [`crate::patch`]
//!   module — fix-ups at start, stubs, call wrappers, switching;
//! - [`convert_pending`]: the `call __fentry__`s and `call mcount`s of
//!   objects the start-up scan left to a runtime thread, rewritten while
//!   the program runs;
//!
//! A mechanism: switching across mechanisms and the control socket are in
//! `control`.
//!
//! A site that is on jumps to its function's call wrapper
//! (`calls::wrapper`), which runs an fentry-style entry trampoline before the function's
//! prologue, calls the body, and records the exit when it returns — no
//! return-address hijack, no mispredicted return.
//! Functions whose `#[instrument_fn]` turns the site's framework off
//! (`fentry = "off"` for patchable entries and `call __fentry__`,
//! `mcount = "off"` for rewritten `call mcount`s, `xray = "off"` for the
//! patchable entry of XRay's always-instrument; `= "off"` for all; the
//! `fntrace_policy` and `fntrace_off` tables) are never switched on.
//!
//! Selection: rules are applied in order to each function's demangled
//! name; the last matching rule decides, and a function no rule matches
//! keeps the default (on when recording starts without `-F`, off with
//! `-F`). Objects loaded later (`dlopen`) follow the same rules.

pub use crate::patch::sites;

mod convert;
mod write;

use convert::{CONVERT_LATER, Pending, deferrable};
pub use convert::{convert_pending, has_pending, set_convert_later, settle};
use write::{fix_up, switch};

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use sites::{Layout, Site, Skip};

use crate::config::PatternError;
use crate::patch::PatchError;
use crate::patch::{self, int3};

/// A loaded object with patchable sites.
struct Object {
    path: PathBuf,
    start: u64,
    size: u64,
    /// Its sites, by function.
    sites: Vec<Site>,
    /// Site is on, by index.
    on: Vec<bool>,
    /// Prefix bytes written, by index.
    prefixed: Vec<bool>,
    /// The off state of a [`Layout::Nop5`] site, by index: its 5-byte NOP
    /// as the compiler wrote it (clang's has displacement 8) or as a fix-up
    /// made it, written back when the site is switched off.
    nop: Vec<[u8; 5]>,
    /// The moved prologue of a [`Layout::Moved`] site (0 for others), by
    /// index: where its off state jumps, and the body its wrapper calls.
    moved: Vec<u64>,
    /// Address of the call wrappers (one per site, in site order), 0 until
    /// the first site is switched on.
    wrappers: u64,
    /// The object's load bias (its symbols' addresses plus this).
    bias: u64,
    /// Function symbols, sorted by start (start, end, symbol name), read
    /// when a rule or a listing first needs them (not at start-up: a
    /// program's constructors and, after `exec`, its profiling timer are
    /// waiting; a large program's names take milliseconds).
    names: std::sync::OnceLock<Vec<(u64, u64, String)>>,
    /// Their demangled names, made with them.
    demangled: std::sync::OnceLock<Vec<String>>,
    /// `#[instrument_fn]` policies (`fntrace_policy`, `fntrace_off`).
    policy: crate::procinfo::policy::Policies,
    alive: bool,
}

impl Object {
    /// A live object (`path`, start, size, load bias) with its classified
    /// sites, every one off: `nop` and `moved` by site, as in the fields.
    fn new(
        (path, start, size, bias): (PathBuf, u64, u64, u64),
        sites: Vec<Site>,
        nop: Vec<[u8; 5]>,
        moved: Vec<u64>,
        policy: crate::procinfo::policy::Policies,
    ) -> Object {
        let n = sites.len();
        Object {
            path,
            start,
            size,
            sites,
            on: vec![false; n],
            prefixed: vec![false; n],
            nop,
            moved,
            wrappers: 0,
            bias,
            names: std::sync::OnceLock::new(),
            demangled: std::sync::OnceLock::new(),
            policy,
            alive: true,
        }
    }
}

struct Registry {
    objects: Vec<Object>,
    /// Objects seen without sites (start, path).
    none: Vec<(u64, PathBuf)>,
    /// Selection rules (pattern, on), in order.
    rules: Vec<(regex_lite::Regex, bool)>,
    /// Whether a function no rule matches is on.
    default_on: bool,
    /// Sites that could not be used, reported once per object.
    skipped: usize,
    /// Objects found at start-up whose hook calls [`convert_pending`]
    /// rewrites on a runtime thread (the hooks record them meanwhile).
    pending: Vec<Pending>,
    /// Pending objects that kept some of their hook calls (not converted,
    /// or with `mcount` prologues that cannot be undone).
    convert_failed: usize,
    /// Functions of converted objects left to the hooks (`mcount`
    /// prologues that cannot be undone).
    left_to_hooks: usize,
}

static REG: Mutex<Registry> = Mutex::new(Registry {
    objects: vec![],
    none: vec![],
    rules: vec![],
    default_on: false,
    skipped: 0,
    pending: vec![],
    convert_failed: 0,
    left_to_hooks: 0,
});

/// Set once the first scan ran (later objects are fresh from `dlopen`).
static SCANNED_ONCE: AtomicBool = AtomicBool::new(false);

/// What a scan or a selection change did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Changed {
    /// Functions switched on.
    pub on: usize,
    /// Functions switched off.
    pub off: usize,
}

/// Whether this process has one thread that runs the program's code (no
/// other thread can be inside a run of NOPs we rewrite): the runtime's
/// own threads (the recorder's helper) never do.
fn single_threaded() -> bool {
    crate::procinfo::other_threads() == Some(0)
}

/// Reads an array of 8-byte addresses at run-time address `addr`.
fn read_addrs(addr: u64, size: u64) -> Vec<u64> {
    (0..size / 8)
        // SAFETY: the section is allocated (SHF_ALLOC) and mapped with its
        // object; relocations are applied in memory.
        .map(|i| unsafe { ((addr + 8 * i) as *const u64).read_unaligned() })
        .filter(|&a| a != 0)
        .collect()
}

/// Whether `call __fentry__` sites are rewritten into patchable sites
/// (see [`set_convert_calls`]).
static CONVERT_CALLS: AtomicBool = AtomicBool::new(false);

/// Asks scans to rewrite compiler hook calls into patchable sites that
/// jump to call wrappers when on, so that recorded exits need no hijacked
/// return address and the functions can be switched with `fntrace live`:
/// `call __fentry__` at a function's start (`gcc -pg -mfentry`) becomes a
/// 5-byte NOP site ([`sites::fentry_call`]); a prologue followed by `call
/// mcount` (`gcc -pg`, `rustc -Zinstrument-mcount`) is moved into a stub
/// and replaced by a jump ([`sites::mcount_call`]). Only done where
/// one-byte NOP runs may be rewritten (before a second thread exists, or
/// in an object just loaded); elsewhere the calls stay and the hooks
/// handle them. The recorder turns it on when recording starts without
/// `-F`/`-N` (whose region semantics need the native calls) and outside
/// counting mode, unless `FNTRACE_KEEP_CALLS=1`.
pub fn set_convert_calls(on: bool) {
    CONVERT_CALLS.store(on, Ordering::Release);
}

/// What [`discover`] finds in one object.
struct Found {
    /// Listed entries (`__patchable_function_entries`, `__mcount_loc`).
    entries: Vec<u64>,
    /// `#[instrument_fn]` policies.
    policy: crate::procinfo::policy::Policies,
    /// GOT slots bound to `__fentry__` (sorted), when converting.
    fentry_slots: Vec<u64>,
    /// GOT slots bound to `mcount`/`_mcount` (sorted), when converting.
    mcount_slots: Vec<u64>,
    /// Entries of its symbol table (`.symtab`), a measure of its size.
    symbols: u64,
}

/// Finds the sites of one object (by its ELF sections, read from memory,
/// and the GOT slots of `__fentry__` from its dynamic relocations).
fn discover(path: &std::path::Path, bias: u64) -> Option<Found> {
    use object::{Object as _, ObjectSection, ObjectSymbol, ObjectSymbolTable};
    let map = crate::procinfo::FileMap::open(path)?;
    let obj = object::File::parse(map.as_slice()).ok()?;
    let mut entries = vec![];
    for name in ["__patchable_function_entries", "__mcount_loc"] {
        for sec in obj.sections().filter(|s| s.name() == Ok(name)) {
            entries.extend(read_addrs(sec.address().wrapping_add(bias), sec.size()));
        }
    }
    let mut fentry_slots = vec![];
    let mut mcount_slots = vec![];
    if CONVERT_CALLS.load(Ordering::Acquire) {
        if let (Some(relocs), Some(dynsym)) =
            (obj.dynamic_relocations(), obj.dynamic_symbol_table())
        {
            for (offset, r) in relocs {
                if let object::RelocationTarget::Symbol(i) = r.target() {
                    match dynsym.symbol_by_index(i).and_then(|s| s.name()) {
                        Ok("__fentry__") => fentry_slots.push(offset.wrapping_add(bias)),
                        Ok("mcount" | "_mcount") => mcount_slots.push(offset.wrapping_add(bias)),
                        _ => {}
                    }
                }
            }
        }
        fentry_slots.sort_unstable();
        mcount_slots.sort_unstable();
    }
    if entries.is_empty() && fentry_slots.is_empty() && mcount_slots.is_empty() {
        return None;
    }
    let policy = crate::procinfo::policy::Policies::read(&obj, bias);
    entries.sort_unstable();
    entries.dedup();
    let symbols = obj.section_by_name(".symtab").map_or(0, |s| s.size() / 24);
    Some(Found {
        entries,
        policy,
        fentry_slots,
        mcount_slots,
        symbols,
    })
}

/// Reads code for classification (borrowed: no copy per read).
fn read_code(a: u64, n: usize) -> std::borrow::Cow<'static, [u8]> {
    // SAFETY: listed sites and the bytes around them are inside the
    // object's mapped text (the classifier reads at most 24 bytes after a
    // site and 4 before it, all within its function or its padding; the
    // hook-call scan reads at most 52 bytes from a function start, checked
    // against the object's end). Nothing writes code while the patch lock
    // is held, which the scan holds.
    std::borrow::Cow::Borrowed(unsafe { core::slice::from_raw_parts(a as *const u8, n) })
}

/// Finds objects loaded since the last scan (and forgets unloaded ones),
/// classifies their sites and applies the selection rules to them.
pub fn scan() -> Changed {
    let _code = patch::lock();
    let mut reg = REG.lock().unwrap_or_else(|e| e.into_inner());
    scan_locked(&mut reg)
}

fn scan_locked(reg: &mut Registry) -> Changed {
    let loaded = crate::procinfo::loaded_objects();
    for o in reg.objects.iter_mut() {
        if o.alive && !loaded.iter().any(|l| l.0 == o.start && l.3 == o.path) {
            o.alive = false;
        }
    }
    reg.none
        .retain(|n| loaded.iter().any(|l| l.0 == n.0 && l.3 == n.1));
    let later = SCANNED_ONCE.swap(true, Ordering::AcqRel);
    // Rewriting one-byte NOP runs is safe before other threads exist, and
    // in objects just loaded (no other thread has run their code yet).
    let mut may_fix = later.then_some(true);
    let mut total = Changed::default();
    let own = crate::procinfo::own_preload_start();
    for (start, size, bias, path) in loaded {
        if path.as_os_str().is_empty()
            || own == Some(start)
            || reg
                .objects
                .iter()
                .any(|o| o.alive && o.start == start && o.path == path)
            || reg.none.iter().any(|n| n.0 == start && n.1 == path)
            || reg
                .pending
                .iter()
                .any(|p| p.start == start && p.path == path)
        {
            continue;
        }
        let Some(found) = discover(&path, bias) else {
            reg.none.push((start, path));
            continue;
        };
        let policy = found.policy.clone();
        crate::diag::step("discover");
        if !later
            && CONVERT_LATER.load(Ordering::Acquire)
            && deferrable(&found)
            && *may_fix.get_or_insert_with(single_threaded)
        {
            reg.pending.push(Pending {
                start,
                size,
                bias,
                path,
                found,
            });
            continue;
        }
        let mut skipped: Vec<String> = vec![];
        let found = find_sites(start, size, bias, &path, found, &mut may_fix, &mut skipped);
        if !skipped.is_empty() {
            crate::diag::diag!(
                "fntrace: {}: {} patchable sites not used ({})",
                path.display(),
                skipped.len(),
                skipped[0]
            );
            reg.skipped += skipped.len();
        }
        crate::diag::step("classify");
        if found.is_empty() {
            reg.none.push((start, path));
            continue;
        }
        let moved = match fix_up(&found, &path, start, size) {
            Ok(m) => m,
            Err(e) => {
                crate::diag::diag!("fntrace: {e}");
                reg.none.push((start, path));
                continue;
            }
        };
        let nop5 = |s: &Site| matches!(s.layout, Layout::Nop5 { .. });
        // The SIGTRAP handler must know every 5-byte site before one is
        // changed; if its tables are full, the object's sites are not used
        // (NOPs and moved prologues stay in their off state: untraced).
        let resume: Vec<(u64, u64)> = found
            .iter()
            .zip(&moved)
            .filter(|(_, m)| **m != 0)
            .map(|(s, m)| (s.addr, *m))
            .collect();
        if !int3::register(found.iter().filter(|s| nop5(s)).map(|s| s.addr).collect())
            || !int3::register_resume(resume)
        {
            crate::diag::diag!(
                "fntrace: {}: {} patchable sites not used (too many objects with 5-byte \
                 sites for the breakpoint handler's table)",
                path.display(),
                found.len()
            );
            reg.skipped += found.len();
            reg.none.push((start, path));
            continue;
        }
        let nop = found
            .iter()
            .map(|s| match s.layout {
                Layout::Nop5 { .. } => (*read_code(s.addr, 5)).try_into().unwrap_or(int3::NOP5),
                _ => int3::NOP5,
            })
            .collect();
        reg.objects.push(Object::new(
            (path, start, size, bias),
            found,
            nop,
            moved,
            policy,
        ));
        crate::diag::step("register");
        let i = reg.objects.len() - 1;
        let c = apply(reg, i);
        total.on += c.on;
        total.off += c.off;
    }
    total
}

/// Classifies the sites of one object: its listed entries and, where
/// `may_fix` allows rewriting (one thread, or an object just loaded; the
/// first caller that needs to know decides), its `call __fentry__` and
/// `call mcount` prologues. Reasons for sites not used go to `skipped`.
fn find_sites(
    start: u64,
    size: u64,
    bias: u64,
    path: &std::path::Path,
    found: Found,
    may_fix: &mut Option<bool>,
    skipped: &mut Vec<String>,
) -> Vec<Site> {
    let Found {
        entries,
        fentry_slots,
        mcount_slots,
        ..
    } = found;
    let names = crate::procinfo::module_function_starts(path, bias);
    crate::diag::step("symbols");
    // Sized up front: a large program has 100,000 entries, and growing
    // a vector by doubling copies it and faults in fresh pages each
    // time (page faults were half of a large program's start-up).
    let mut found = Vec::with_capacity(entries.len());
    let mut calls = Vec::with_capacity(entries.len());
    for e in entries {
        let k = names.partition_point(|&n| n < e);
        let next = names.get(k).copied();
        match sites::classify(e, &read_code, next) {
            Ok(s) if s.fixup.is_some() && !*may_fix.get_or_insert_with(single_threaded) => skipped
                .push("one-byte NOPs cannot be rewritten while other threads run".to_string()),
            Ok(s) => found.push(s),
            // A real call (`-mrecord-mcount` without `-mnop-mcount`).
            Err(Skip::Native) => calls.push(e),
            Err(Skip::Unsupported(why)) => skipped.push(why),
        }
    }
    // `call __fentry__` at function starts (the listed calls and every
    // named function) and `call mcount` after a prologue (every named
    // function); the code read stays inside the object.
    if !(fentry_slots.is_empty() && mcount_slots.is_empty())
        && *may_fix.get_or_insert_with(single_threaded)
    {
        let end = start + size;
        // Each start once: the listed calls of a `-mrecord-mcount`
        // build are usually every named function again (two sorted
        // runs: the stable sort merges them in one pass).
        let mut starts: Vec<u64> = Vec::with_capacity(calls.len() + names.len());
        starts.extend(
            calls
                .iter()
                .map(|&e| {
                    if e >= start + 4 && *read_code(e - 4, 4) == sites::ENDBR64 {
                        e - 4
                    } else {
                        e
                    }
                })
                .chain(names.iter().copied())
                .filter(|&f| f >= start && f + 32 <= end),
        );
        starts.sort();
        starts.dedup();
        let code = |a: u64, n: usize| {
            if a >= start && a + n as u64 <= end {
                read_code(a, n)
            } else {
                std::borrow::Cow::Borrowed(&[][..])
            }
        };
        let mut have: Vec<u64> = found.iter().map(|s| s.addr).collect();
        have.sort_unstable();
        let mut extra: Vec<Site> = Vec::with_capacity(starts.len());
        extra.extend(
            starts
                .into_iter()
                .filter_map(|f| {
                    sites::fentry_call(f, &code, &fentry_slots)
                        .or_else(|| sites::mcount_call(f, &code, &mcount_slots))
                })
                .filter(|s| have.binary_search(&s.addr).is_err()),
        );
        extra.sort_unstable_by_key(|s| s.addr);
        extra.dedup_by_key(|s| s.addr);
        if found.is_empty() {
            found = extra;
        } else {
            found.extend(extra);
        }
    }
    found
}

/// The name of the function starting at `func` in `o`.
fn name_of(o: &Object, func: u64) -> Option<&str> {
    let names = o
        .names
        .get_or_init(|| crate::procinfo::module_symbols(&o.path, o.bias));
    let k = names.partition_point(|n| n.0 <= func);
    let i = k.checked_sub(1)?;
    let n = &names[i];
    if func < n.0 || func >= n.1 {
        return None;
    }
    let d = o.demangled.get_or_init(|| {
        names
            .iter()
            .map(|n| crate::procinfo::demangle(&n.2))
            .collect()
    });
    Some(d[i].as_str())
}

/// The `#[instrument_fn]` framework a site belongs to: a moved `call
/// mcount` is mcount; a patchable entry is fentry, or XRay when the macro
/// gave it for XRay's always-instrument; a rewritten `call __fentry__` or
/// a 5-byte NOP is fentry.
fn framework_off(o: &Object, s: &Site) -> bool {
    use crate::procinfo::policy::{ENTRY_IS_XRAY, FENTRY_OFF, MCOUNT_OFF, XRAY_OFF};
    let Some(p) = o.policy.get(s.func) else {
        return false;
    };
    let bit = match s.layout {
        Layout::Moved { .. } | Layout::McountCall { .. } => MCOUNT_OFF,
        _ if p.flags & ENTRY_IS_XRAY != 0 => XRAY_OFF,
        _ => FENTRY_OFF,
    };
    p.flags & bit != 0
}

/// Whether the rules select site `s` of `o`.
fn wanted(reg: &Registry, o: &Object, s: &Site) -> bool {
    if framework_off(o, s) {
        return false;
    }
    let func = s.func;
    if reg.rules.is_empty() {
        return reg.default_on;
    }
    let name = name_of(o, func).unwrap_or("");
    let mut on = reg.default_on;
    for (re, v) in &reg.rules {
        if re.is_match(name) {
            on = *v;
        }
    }
    on
}

/// Brings the sites of object `i` to what the rules select.
fn apply(reg: &mut Registry, i: usize) -> Changed {
    let want: Vec<bool> = {
        let o = &reg.objects[i];
        if !o.alive {
            return Changed::default();
        }
        o.sites.iter().map(|s| wanted(reg, o, s)).collect()
    };
    let o = &mut reg.objects[i];
    match switch(o, &want) {
        Ok(c) => c,
        Err(e) => {
            crate::diag::diag!("fntrace: {e}");
            Changed::default()
        }
    }
}

/// Starts dynamic tracing for a recording session: finds the sites and
/// switches on the selected ones. `trace`: patterns to switch on (none:
/// everything); `notrace`: patterns never switched on. Returns what
/// changed.
pub fn start(trace: &[String], notrace: &[String]) -> Result<Changed, PatchError> {
    let compile = |p: &String| regex_lite::Regex::new(p).map_err(|e| PatternError::new(p, &e));
    let mut rules = vec![];
    for p in trace {
        rules.push((compile(p)?, true));
    }
    for p in notrace {
        rules.push((compile(p)?, false));
    }
    let _code = patch::lock();
    let mut reg = REG.lock().unwrap_or_else(|e| e.into_inner());
    reg.default_on = trace.is_empty();
    reg.rules = rules;
    Ok(rescan_and_apply(&mut reg))
}

/// Picks up objects loaded since the last scan, then brings every object's
/// sites to what the rules select.
fn rescan_and_apply(reg: &mut Registry) -> Changed {
    let mut c = scan_locked(reg);
    for i in 0..reg.objects.len() {
        let d = apply(reg, i);
        c.on += d.on;
        c.off += d.off;
    }
    c
}

/// Adds a rule and applies it everywhere.
fn add_rule(pattern: &str, on: bool) -> Result<Changed, PatchError> {
    let re = regex_lite::Regex::new(pattern).map_err(|e| PatternError::new(pattern, &e))?;
    let _code = patch::lock();
    let mut reg = REG.lock().unwrap_or_else(|e| e.into_inner());
    // The last matching rule decides, so an earlier rule with the same
    // pattern can never decide again: drop it (a program that toggles the
    // same pattern keeps one rule).
    reg.rules.retain(|(r, _)| r.as_str() != pattern);
    reg.rules.push((re, on));
    Ok(rescan_and_apply(&mut reg))
}

/// The functions whose patchable sites are switched on (name, or the
/// address if unnamed).
pub fn enabled_functions() -> Vec<String> {
    settle();
    let mut v = Vec::new();
    let reg = REG.lock().unwrap_or_else(|e| e.into_inner());
    for o in reg.objects.iter().filter(|o| o.alive) {
        for (k, s) in o.sites.iter().enumerate() {
            if o.on[k] {
                v.push(name_of(o, s.func).map_or_else(|| format!("{:#x}", s.func), str::to_string));
            }
        }
    }
    v
}

/// Counts of sites: (total, on, unusable).
pub fn site_counts() -> (usize, usize, usize) {
    let reg = REG.lock().unwrap_or_else(|e| e.into_inner());
    let live = reg.objects.iter().filter(|o| o.alive);
    let total = live.clone().map(|o| o.sites.len()).sum();
    let on = live.map(|o| o.on.iter().filter(|&&b| b).count()).sum();
    (total, on, reg.skipped)
}

/// Switches the patchable sites of functions matching `pattern` on or
/// off (a rule applied now and to objects loaded later). Returns how many
/// functions changed.
pub fn switch_functions(pattern: &str, on: bool) -> Result<usize, PatchError> {
    // The functions whose calls start-up left to the runtime thread are
    // switched too.
    settle();
    let c = add_rule(pattern, on)?;
    Ok(if on { c.on } else { c.off })
}

/// Switches every patchable site off and forgets the selection rules (a
/// detached recording: the sites go back to their NOPs). Returns what
/// changed.
pub fn stop() -> Changed {
    let _code = patch::lock();
    let mut reg = REG.lock().unwrap_or_else(|e| e.into_inner());
    reg.rules.clear();
    reg.default_on = false;
    let mut c = Changed::default();
    for i in 0..reg.objects.len() {
        let d = apply(&mut reg, i);
        c.on += d.on;
        c.off += d.off;
    }
    c
}
