//! Function address ranges resolved from names, per loaded object: what
//! `-F`/`-N` filters and `-A`/`-R` captures look up on the hot path.
//!
//! A [`RangeTable`] classifies the functions of every object loaded since
//! its last scan (their demangled names, from the ELF symbol tables) and
//! publishes a sorted `(start, end, value)` table by pointer. Published
//! tables are immutable and leaked (a thread may be reading an old one), so
//! readers never lock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A published table: `(start, end, value)`, sorted by start.
type Table<T> = Vec<(u64, u64, T)>;

/// Address ranges of the functions a classifier selected, with its value.
pub(crate) struct RangeTable<T: 'static> {
    table: AtomicPtr<Table<T>>,
    /// Objects already scanned (their start address).
    scanned: Mutex<Vec<u64>>,
}

impl<T: Copy + 'static> RangeTable<T> {
    /// An empty table.
    pub(crate) const fn new() -> Self {
        RangeTable {
            table: AtomicPtr::new(core::ptr::null_mut()),
            scanned: Mutex::new(Vec::new()),
        }
    }

    /// Forgets every range and scanned object (the next scan classifies
    /// every object again).
    pub(crate) fn reset(&self) {
        self.scanned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // The old table is leaked: a thread may still be reading it.
        self.table.store(core::ptr::null_mut(), Ordering::Release);
    }

    /// Adds the ranges of every object loaded since the last scan (`ranges`
    /// of its path and load bias: start, end, value; e.g. its functions
    /// whose demangled names a filter selects) and publishes the grown
    /// table. Returns whether ranges were added.
    pub(crate) fn scan_new_objects(
        &self,
        mut ranges: impl FnMut(&std::path::Path, u64) -> Vec<(u64, u64, T)>,
    ) -> bool {
        let mut scanned = self.scanned.lock().unwrap_or_else(|e| e.into_inner());
        let mut new = vec![];
        let own = crate::procinfo::own_preload_start();
        for (start, _, bias, path) in crate::procinfo::loaded_objects() {
            if scanned.contains(&start) || path.as_os_str().is_empty() || own == Some(start) {
                continue;
            }
            scanned.push(start);
            new.extend(ranges(&path, bias));
        }
        if new.is_empty() {
            return false;
        }
        let old = self.table.load(Ordering::Acquire);
        let mut v = if old.is_null() {
            vec![]
        } else {
            // SAFETY: published tables are leaked, never freed or changed.
            unsafe { (*old).clone() }
        };
        v.extend(new);
        v.sort_unstable_by_key(|e| e.0);
        v.dedup_by_key(|e| e.0);
        self.table
            .store(Box::into_raw(Box::new(v)), Ordering::Release);
        true
    }

    /// Every range of the published table (start, end, value).
    pub(crate) fn entries(&self) -> Vec<(u64, u64, T)> {
        let p = self.table.load(Ordering::Acquire);
        if p.is_null() {
            return vec![];
        }
        // SAFETY: published tables are leaked, never freed or changed.
        unsafe { (*p).clone() }
    }

    /// The value of the function containing `addr`, if it is in the table.
    #[inline]
    pub(crate) fn lookup(&self, addr: u64) -> Option<T> {
        let p = self.table.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: published tables are leaked, never freed or changed.
        let r = unsafe { &*p };
        let k = r.partition_point(|e| e.0 <= addr);
        match k.checked_sub(1).map(|k| r[k]) {
            Some((s, e, v)) if addr >= s && addr < e => Some(v),
            _ => None,
        }
    }
}
