//! The call tree of one thread as `fntrace tui` shows it: nodes are made
//! only for the calls whose parent was expanded, a page of children at a
//! time, by decoding from the parent's entry with the [`ThreadIndex`]
//! skipping the chunks inside each child. The visible rows (a depth-first
//! walk of the expanded nodes) are kept as a list of node ids.

use fntrace_format::Trace;

use super::index::{Bloom, ThreadIndex};
use crate::analysis::{Event, Events, Resume};

/// Index of a node in the tree's arena; [`ROOT`] is the thread itself.
pub type NodeId = usize;

/// The invisible root: its children are the thread's outermost calls.
pub const ROOT: NodeId = 0;

/// Children loaded per page (more load when their row comes into view).
pub const PAGE: usize = 1000;

/// Children of one node loaded at most when the tree looks for a call
/// (the slowest child, a search): beyond this the search stops.
pub const MAX_CHILDREN: usize = 500_000;

/// A call.
#[derive(Debug, Clone)]
pub struct CallNode {
    /// Function key.
    pub func: u64,
    /// Entry TSC.
    pub start: u64,
    /// Exit TSC (the thread's last TSC when the exit was not recorded).
    pub end: u64,
    /// The exit was not recorded (lost in damage or the thread's end).
    pub incomplete: bool,
    /// Argument values (`record -A`).
    pub args: Option<Vec<i64>>,
    /// Return value (`record -R`).
    pub retval: Option<i64>,
    /// Where its children start (none for an entry lost in damage).
    pub after: Option<Resume>,
    /// `Some(true)` when it is known to have no children.
    pub leaf: Option<bool>,
}

/// What a node is.
#[derive(Debug, Clone)]
pub enum Kind {
    /// The thread.
    Root,
    /// A call.
    Call(CallNode),
    /// A marker event.
    Marker {
        /// TSC.
        tsc: u64,
        /// Marker name.
        name: String,
        /// Formatted arguments.
        text: String,
    },
}

/// How far a node's children are loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// Not yet.
    No,
    /// Up to here; more follow.
    Partial(Resume),
    /// All of them.
    All,
}

/// A node of the tree.
#[derive(Debug, Clone)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    /// Its parent (the root's is itself).
    pub parent: NodeId,
    /// Call depth (0 = outermost).
    pub depth: u32,
    /// Children loaded so far, in stream order.
    pub children: Vec<NodeId>,
    /// Whether more are to be loaded.
    pub loaded: Loaded,
    /// Whether its children are shown.
    pub expanded: bool,
}

impl Node {
    /// The call, if it is one.
    pub fn call(&self) -> Option<&CallNode> {
        match &self.kind {
            Kind::Call(c) => Some(c),
            _ => None,
        }
    }

    /// Whether it can be expanded (a call not known to be a leaf).
    pub fn expandable(&self) -> bool {
        match &self.kind {
            Kind::Call(c) => c.after.is_some() && c.leaf != Some(true),
            _ => false,
        }
    }
}

/// A visible row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    /// A node.
    Node(NodeId),
    /// "More calls" after the loaded children of this node.
    More(NodeId),
}

/// One thread's tree.
pub struct Tree<'t> {
    trace: &'t Trace,
    index: &'t ThreadIndex,
    nodes: Vec<Node>,
    /// The visible rows.
    pub rows: Vec<Row>,
    /// Selected row.
    pub cursor: usize,
    /// First row on screen.
    pub top: usize,
}

impl<'t> Tree<'t> {
    /// The tree of thread `index.tid`, its outermost calls loaded.
    pub fn new(trace: &'t Trace, index: &'t ThreadIndex) -> Tree<'t> {
        // The stream's start, at depth 0: a stream whose first chunks are
        // missing starts with a gap (calls whose entry was lost, entered
        // at the trace's start), as in a whole-stream walk.
        let start = index.chunk_start(trace, 0).map(|r| Resume {
            pos: fntrace_format::StreamPos {
                tsc: trace.header().start_tsc,
                ..r.pos
            },
            depth: 0,
        });
        let mut t = Tree {
            trace,
            index,
            nodes: vec![Node {
                kind: Kind::Root,
                parent: ROOT,
                depth: 0,
                children: vec![],
                loaded: match start {
                    Some(r) => Loaded::Partial(r),
                    None => Loaded::All,
                },
                expanded: true,
            }],
            rows: vec![],
            cursor: 0,
            top: 0,
        };
        t.load(ROOT, PAGE);
        // A single outermost call (main) is opened.
        if let [only] = t.nodes[ROOT].children[..]
            && t.nodes[ROOT].loaded == Loaded::All
        {
            t.expand(only);
        }
        t.rebuild();
        t
    }

    /// The thread id.
    pub fn tid(&self) -> u32 {
        self.index.tid
    }

    /// A node.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// The node of the selected row.
    pub fn selected(&self) -> Option<NodeId> {
        match self.rows.get(self.cursor)? {
            Row::Node(id) => Some(*id),
            Row::More(_) => None,
        }
    }

    /// Loads up to `limit` more children of `id`.
    pub fn load(&mut self, id: NodeId, limit: usize) {
        let from = match self.nodes[id].loaded {
            Loaded::All => return,
            Loaded::Partial(r) => r,
            Loaded::No => match self.nodes[id].call().and_then(|c| c.after) {
                Some(r) => r,
                None => {
                    self.nodes[id].loaded = Loaded::All;
                    return;
                }
            },
        };
        // Depth of the children (the level between two of them).
        let target = if id == ROOT {
            0
        } else {
            self.nodes[id].depth as usize + 1
        };
        let tid = self.index.tid;
        let mut ev = Events::resume(self.trace, tid, from);
        let mut depth = from.depth as usize;
        let mut loaded = ev.chunks_loaded();
        let mut cur: Option<NodeId> = None;
        let mut fresh = false;
        let mut n = 0;
        let done = loop {
            if cur.is_none()
                && n >= limit
                && let Some(r) = ev.resume_point()
            {
                break Loaded::Partial(r);
            }
            let Some(e) = ev.next() else {
                if let Some(c) = cur {
                    self.end_call(c, self.index.last_tsc(), true);
                }
                break Loaded::All;
            };
            // The depth after this event (`ev.depth()` is ahead of it
            // when several events were queued at once, around a gap or
            // at the end of the stream).
            match &e {
                Event::Enter { depth: d, .. } => depth = d + 1,
                Event::Exit { .. } => depth = depth.saturating_sub(1),
                _ => {}
            }
            match e {
                Event::Enter {
                    func,
                    tsc,
                    depth: d,
                } => {
                    if d == target {
                        let after = ev.resume_point();
                        cur = Some(self.push(
                            id,
                            target as u32,
                            Kind::Call(CallNode {
                                func,
                                start: tsc,
                                end: tsc,
                                incomplete: false,
                                args: None,
                                retval: None,
                                after,
                                leaf: None,
                            }),
                        ));
                        fresh = true;
                        n += 1;
                        continue;
                    }
                    if d < target {
                        break Loaded::All;
                    }
                    self.set_leaf(cur, false);
                }
                Event::Exit { tsc, incomplete } => {
                    if depth == target {
                        if let Some(c) = cur.take() {
                            self.end_call(c, tsc, incomplete);
                        }
                    } else if depth < target {
                        break Loaded::All;
                    }
                }
                Event::Args(v) => {
                    if fresh
                        && depth == target + 1
                        && let Some(Kind::Call(c)) = cur.map(|c| &mut self.nodes[c].kind)
                    {
                        c.args = Some(v);
                    }
                }
                Event::RetVal(v) => {
                    if depth == target + 1
                        && let Some(Kind::Call(c)) = cur.map(|c| &mut self.nodes[c].kind)
                    {
                        c.retval = Some(v);
                    }
                }
                Event::Marker { tsc, name, text } => {
                    if depth == target {
                        self.push(id, target as u32, Kind::Marker { tsc, name, text });
                        n += 1;
                    } else {
                        self.set_leaf(cur, false);
                    }
                }
                Event::Switch { .. } => {}
            }
            fresh = false;
            // Inside a child: skip the chunks that stay deeper than it.
            if depth > target && ev.chunks_loaded() != loaded {
                loaded = ev.chunks_loaded();
                let c = loaded - 1;
                let t = target as u32;
                let Some(j) = self.index.first_reaching(c, t) else {
                    // The child (and this node) run to the thread's end.
                    if let Some(c) = cur.take() {
                        self.end_call(c, self.index.last_tsc(), true);
                    }
                    break Loaded::All;
                };
                if j == c {
                    continue;
                }
                let Some(start) = self.index.chunk_start(self.trace, j) else {
                    break Loaded::All;
                };
                if start.depth <= t {
                    // Its exit was lost in a gap before chunk j.
                    if let Some(c) = cur.take() {
                        self.end_call(c, self.index.chunks[j - 1].last_tsc, true);
                    }
                    if start.depth < t {
                        break Loaded::All;
                    }
                }
                ev = Events::resume(self.trace, tid, start);
                depth = start.depth as usize;
                loaded = ev.chunks_loaded();
            }
        };
        self.nodes[id].loaded = done;
    }

    fn push(&mut self, parent: NodeId, depth: u32, kind: Kind) -> NodeId {
        let id = self.nodes.len();
        self.nodes.push(Node {
            kind,
            parent,
            depth,
            children: vec![],
            loaded: Loaded::No,
            expanded: false,
        });
        self.nodes[parent].children.push(id);
        id
    }

    fn set_leaf(&mut self, id: Option<NodeId>, leaf: bool) {
        if let Some(Kind::Call(c)) = id.map(|i| &mut self.nodes[i].kind) {
            c.leaf = Some(leaf);
        }
    }

    fn end_call(&mut self, id: NodeId, tsc: u64, incomplete: bool) {
        if let Kind::Call(c) = &mut self.nodes[id].kind {
            c.end = tsc.max(c.start);
            c.incomplete = incomplete;
            if c.leaf.is_none() {
                c.leaf = Some(true);
            }
        }
    }

    /// Recomputes the visible rows (after expanding or collapsing),
    /// keeping the selected node selected.
    pub fn rebuild(&mut self) {
        let sel = self.rows.get(self.cursor).copied();
        self.rows.clear();
        let mut todo: Vec<Row> = vec![];
        let push_children = |todo: &mut Vec<Row>, nodes: &[Node], id: NodeId| {
            if matches!(nodes[id].loaded, Loaded::Partial(_)) {
                todo.push(Row::More(id));
            }
            todo.extend(nodes[id].children.iter().rev().map(|&c| Row::Node(c)));
        };
        push_children(&mut todo, &self.nodes, ROOT);
        while let Some(r) = todo.pop() {
            self.rows.push(r);
            if let Row::Node(id) = r
                && self.nodes[id].expanded
            {
                push_children(&mut todo, &self.nodes, id);
            }
        }
        // On a "more" row the cursor stays where it is: on the first of
        // the calls just loaded (it must not chase the row and load on).
        if let Some(s @ Row::Node(_)) = sel
            && let Some(i) = self.rows.iter().position(|&r| r == s)
        {
            self.cursor = i;
        }
        self.cursor = self.cursor.min(self.rows.len().saturating_sub(1));
    }

    /// Selects node `id` (its row must be visible).
    pub fn select(&mut self, id: NodeId) {
        if let Some(i) = self.rows.iter().position(|&r| r == Row::Node(id)) {
            self.cursor = i;
        }
    }

    /// Expands a node (loading its first page of children).
    pub fn expand(&mut self, id: NodeId) {
        if !self.nodes[id].expandable() {
            return;
        }
        if self.nodes[id].loaded == Loaded::No {
            self.load(id, PAGE);
        }
        self.nodes[id].expanded = !self.nodes[id].children.is_empty();
        self.rebuild();
    }

    /// Collapses a node.
    pub fn collapse(&mut self, id: NodeId) {
        self.nodes[id].expanded = false;
        self.rebuild();
    }

    /// Loads the next page of the node whose "more" row is `Row::More(id)`.
    pub fn load_more(&mut self, id: NodeId) {
        self.load(id, PAGE);
        self.rebuild();
    }

    /// The child of `id` that took longest, after loading all its
    /// children (at most [`MAX_CHILDREN`]).
    pub fn slowest_child(&mut self, id: NodeId) -> Option<NodeId> {
        if self.nodes[id].loaded == Loaded::No {
            self.load(id, PAGE);
        }
        while matches!(self.nodes[id].loaded, Loaded::Partial(_))
            && self.nodes[id].children.len() < MAX_CHILDREN
        {
            self.load(id, 10 * PAGE);
        }
        let best = self.nodes[id]
            .children
            .iter()
            .filter_map(|&c| self.nodes[c].call().map(|k| (c, k.end - k.start)))
            .max_by_key(|&(c, d)| (d, std::cmp::Reverse(c)))?;
        self.nodes[id].expanded = true;
        self.rebuild();
        self.select(best.0);
        Some(best.0)
    }

    /// The next call after node `from` in the order of the stream (its
    /// descendants first) whose function `pred` accepts; expands its
    /// ancestors and selects it. Only the chunks whose functions may
    /// match are decoded. `Err` says why there is none.
    pub fn find_next(
        &mut self,
        from: NodeId,
        pred: &mut dyn FnMut(u64) -> bool,
    ) -> Result<NodeId, String> {
        let matching: rustc_hash::FxHashSet<u64> = self
            .index
            .funcs
            .iter()
            .copied()
            .filter(|&f| pred(f))
            .collect();
        let mut want = Bloom::default();
        for &f in &matching {
            want.add(f);
        }
        if want.is_empty() {
            return Err("no call on this thread matches".into());
        }
        let start = match self.nodes[from].call().and_then(|c| c.after) {
            Some(r) => r,
            None => return Err("the selected call has no position in the stream".into()),
        };
        let tid = self.index.tid;
        let mut ev = Events::resume(self.trace, tid, start);
        let mut loaded = ev.chunks_loaded();
        let target = loop {
            match ev.next() {
                None => return Err("no later call matches".into()),
                Some(Event::Enter { func, tsc, depth }) if matching.contains(&func) => {
                    break (ev.resume_point(), tsc, func, depth as u32);
                }
                Some(_) => {}
            }
            if ev.chunks_loaded() != loaded {
                loaded = ev.chunks_loaded();
                let c = loaded - 1;
                match self.index.first_entering(c, &want) {
                    Some(j) if j == c => {}
                    Some(j) => {
                        let Some(r) = self.index.chunk_start(self.trace, j) else {
                            return Err("no later call matches".into());
                        };
                        ev = Events::resume(self.trace, tid, r);
                        loaded = ev.chunks_loaded();
                    }
                    None => return Err("no later call matches".into()),
                }
            }
        };
        self.reveal(target)
    }

    /// Loads and expands the calls that hold the call entered at
    /// `(after, tsc, func, depth)`, from the outermost down, and selects
    /// it.
    fn reveal(&mut self, target: (Option<Resume>, u64, u64, u32)) -> Result<NodeId, String> {
        let (after, tsc, func, depth) = target;
        // Order of entries in the stream: position after the entry (the
        // depth tells apart calls entered in one gap), else the TSC.
        let key = |a: Option<Resume>, t: u64, d: u32| match a {
            Some(r) => (r.pos.chunk, r.pos.offset, d, t),
            None => (u32::MAX, u32::MAX, d, t),
        };
        let want = key(after, tsc, depth);
        let mut parent = ROOT;
        loop {
            if self.nodes[parent].loaded == Loaded::No {
                self.load(parent, PAGE);
            }
            // Load until a loaded child comes after the target (or all
            // are loaded).
            loop {
                let last = self.nodes[parent].children.iter().rev().find_map(|&c| {
                    self.nodes[c]
                        .call()
                        .map(|k| (k.after, k.start, self.nodes[c].depth))
                });
                let past = last.is_some_and(|(a, t, d)| key(a, t, d) > want);
                if past || !matches!(self.nodes[parent].loaded, Loaded::Partial(_)) {
                    break;
                }
                if self.nodes[parent].children.len() >= MAX_CHILDREN {
                    return Err(format!(
                        "the call comes after more than {MAX_CHILDREN} calls of its parent"
                    ));
                }
                self.load(parent, 10 * PAGE);
            }
            let holder = self.nodes[parent].children.iter().copied().rfind(|&c| {
                let n = &self.nodes[c];
                n.call()
                    .is_some_and(|k| key(k.after, k.start, n.depth) <= want)
            });
            let Some(c) = holder else {
                return Err("the call was not found in its parent".into());
            };
            let k = self.nodes[c].call().expect("a call");
            if key(k.after, k.start, self.nodes[c].depth) == want && k.func == func {
                let mut a = parent;
                while a != ROOT {
                    self.nodes[a].expanded = true;
                    a = self.nodes[a].parent;
                }
                self.rebuild();
                self.select(c);
                return Ok(c);
            }
            if self.nodes[c].depth >= depth {
                return Err("the call was not found in its parent".into());
            }
            parent = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{Call, Visitor, walk_thread};
    use crate::tui::model::index::Index;
    use fntrace_format::layout::{ChunkHeader, FINAL_FLAG_CLEAN, Final, HEADER_SIZE, Header};
    use fntrace_format::writer::TraceBuilder;

    /// A random call tree over many small chunks: depth wanders up to
    /// `max_depth`, with runs that stay deep for several chunks.
    fn random_trace(path: &std::path::Path, seed: u64, events: usize, max_depth: u32) {
        let mut b = TraceBuilder::new(Header {
            start_tsc: 1000,
            pid: 1,
            ..Header::current(256, 1_000_000_000)
        });
        let mut rng = seed | 1;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for tid in [5u32, 6] {
            let (mut seq, mut depth, mut tsc) = (0u32, 0u32, 1000u64);
            let hdr = |seq, depth, tsc| ChunkHeader {
                tid,
                seq,
                depth,
                base_tsc: tsc,
                ..ChunkHeader::default()
            };
            let mut c = b.new_chunk(&hdr(seq, depth, tsc));
            let (mut i, mut entries) = (0, 0);
            while i < events {
                let r = next();
                let d = 1 + (r & 7);
                // Long deep stretches: bias towards entering while below
                // a target that changes slowly.
                let goal = ((i / 300) as u32 * 7) % max_depth + 1;
                let enter = depth == 0 || (depth < max_depth && (depth < goal) == (r & 0x30 != 0));
                // A rare function (0x99) in a few chunks only.
                let func = if entries % 600 == 17 {
                    0x99
                } else {
                    0x10 + (r >> 8) % 4
                };
                let ok = if enter { c.entry(d, func) } else { c.exit(d) };
                if !ok {
                    c.seal();
                    b.push_chunk(&c);
                    seq += 1;
                    c = b.new_chunk(&hdr(seq, depth, tsc));
                    continue;
                }
                tsc += d;
                if enter {
                    depth += 1;
                    entries += 1;
                } else {
                    depth -= 1;
                }
                i += 1;
            }
            c.seal();
            b.push_chunk(&c);
        }
        let chunks = b.chunks();
        let bytes = b.finish(&Final {
            flags: FINAL_FLAG_CLEAN,
            chunks,
            tsc_hz: 1_000_000_000,
            ..Final::default()
        });
        std::fs::write(path, bytes).unwrap();
    }

    struct Collect(Vec<(u64, usize, u64, u64)>);
    impl Visitor for Collect {
        fn call(&mut self, c: &Call) {
            self.0.push((c.func, c.depth, c.start, c.end));
        }
    }

    /// Every node of a fully expanded lazy tree, depth first.
    fn expand_all(t: &mut Tree, page: usize) -> Vec<(u64, usize, u64, u64)> {
        let mut out = vec![];
        let mut todo = vec![ROOT];
        while let Some(id) = todo.pop() {
            while t.nodes[id].loaded != Loaded::All {
                t.load(id, page);
            }
            if let Some(c) = t.nodes[id].call() {
                out.push((c.func, t.nodes[id].depth as usize, c.start, c.end));
            }
            todo.extend(t.nodes[id].children.iter().rev());
        }
        out
    }

    /// The lazily built tree (chunks skipped with the index, children
    /// loaded a page at a time) has exactly the calls, depths, entries and
    /// exits of a whole-stream walk.
    #[test]
    fn lazy_tree_equals_a_full_walk() {
        let dir = tempfile::tempdir().unwrap();
        for (seed, depth) in [(1u64, 3u32), (7, 12), (99, 40)] {
            let p = dir.path().join(format!("t{seed}.data"));
            random_trace(&p, seed, 20_000, depth);
            let trace = fntrace_format::Trace::open(&p).unwrap();
            assert!(trace.thread_chunks(5).count() > 100, "many chunks");
            let index = Index::build(&trace, 2);
            for (ti, th) in index.threads.iter().enumerate() {
                let mut want = Collect(vec![]);
                walk_thread(&trace, th.tid, &mut want);
                let mut want = want.0;
                want.sort_by_key(|&(_, d, s, _)| (s, d));
                for page in [3, PAGE] {
                    let mut t = Tree::new(&trace, &index.threads[ti]);
                    let got = expand_all(&mut t, page);
                    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
                        panic!(
                            "seed {seed} tid {} page {page}: call {i}: got {:?}, want {:?}",
                            th.tid,
                            &got[i.saturating_sub(2)..(i + 3).min(got.len())],
                            &want[i.saturating_sub(2)..(i + 3).min(want.len())]
                        );
                    }
                    assert_eq!(got.len(), want.len(), "seed {seed} tid {}", th.tid);
                }
            }
        }
    }

    /// Damaged chunks (a bad header, a bad payload checksum, a cut file):
    /// the lazy tree still equals the whole-stream walk, which closes
    /// and reopens calls around the gaps.
    #[test]
    fn lazy_tree_on_damaged_traces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.data");
        for seed in 1..40u64 {
            random_trace(&p, seed, 8_000, 2 + (seed as u32 * 5) % 30);
            let mut bytes = std::fs::read(&p).unwrap();
            let n = (bytes.len() - HEADER_SIZE as usize) / 256;
            let mut r = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            for k in 0..3 {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                let c = 1 + (r as usize) % (n - 1);
                let off = HEADER_SIZE as usize + c * 256;
                match k {
                    0 => bytes[off] ^= 0xff,                                // header magic
                    1 => bytes[off + 64 + 7] ^= 0x5a, // payload (checksum fails)
                    _ => bytes[off + 12] = bytes[off + 12].wrapping_add(3), // depth (header CRC fails)
                }
            }
            if seed % 3 == 0 {
                let cut = bytes.len() - 100;
                bytes.truncate(cut);
            }
            std::fs::write(&p, &bytes).unwrap();
            let trace = fntrace_format::Trace::open(&p).unwrap();
            let index = Index::build(&trace, 2);
            for (ti, th) in index.threads.iter().enumerate() {
                let mut want = Collect(vec![]);
                walk_thread(&trace, th.tid, &mut want);
                let mut want = want.0;
                want.sort_by_key(|&(_, d, s, _)| (s, d));
                let mut t = Tree::new(&trace, &index.threads[ti]);
                let got = expand_all(&mut t, 50);
                if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
                    panic!(
                        "seed {seed} tid {}: call {i}: got {:?}, want {:?}",
                        th.tid,
                        &got[i.saturating_sub(2)..(i + 3).min(got.len())],
                        &want[i.saturating_sub(2)..(i + 3).min(want.len())]
                    );
                }
                assert_eq!(got.len(), want.len(), "seed {seed} tid {}", th.tid);
            }
        }
    }

    /// `find_next` reaches every call of a function in stream order,
    /// expanding its ancestors, and the slowest child is the longest.
    #[test]
    fn next_call_of_a_function_and_slowest_child() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.data");
        random_trace(&p, 5, 5_000, 9);
        let trace = fntrace_format::Trace::open(&p).unwrap();
        let index = Index::build(&trace, 2);
        let mut want = Collect(vec![]);
        walk_thread(&trace, 5, &mut want);
        let mut want = want.0;
        want.sort_by_key(|&(_, d, s, _)| (s, d));
        let mut t = Tree::new(&trace, &index.threads[0]);
        for f in [0x11, 0x99] {
            let calls: Vec<u64> = want.iter().filter(|c| c.0 == f).map(|c| c.2).collect();
            let mut cur = t.nodes[ROOT].children[0];
            let first = t.nodes[cur].call().unwrap().clone();
            let mut seen = vec![];
            if first.func == f {
                seen.push(first.start);
            }
            while let Ok(id) = t.find_next(cur, &mut |g| g == f) {
                let c = t.nodes[id].call().unwrap();
                assert_eq!(c.func, f);
                seen.push(c.start);
                assert_eq!(t.selected(), Some(id), "the match is selected");
                cur = id;
            }
            assert_eq!(seen, calls, "calls of {f:#x}");
            if f == 0x99 {
                assert!(calls.len() >= 3, "{}", calls.len());
                // Most chunks cannot hold it.
                let th = &index.threads[0];
                let mut b = Bloom::default();
                b.add(0x99);
                let with = th.chunks.iter().filter(|c| c.funcs.meets(&b)).count();
                assert!(with * 4 < th.chunks.len(), "{with} of {}", th.chunks.len());
            }
        }
        // Slowest child of the first outermost call.
        let root0 = t.nodes[ROOT].children[0];
        let s = t.slowest_child(root0).unwrap();
        let d = |id: NodeId| {
            let c = t.nodes[id].call().unwrap();
            c.end - c.start
        };
        let best = t.nodes[root0]
            .children
            .iter()
            .filter(|&&c| t.nodes[c].call().is_some())
            .map(|&c| d(c))
            .max()
            .unwrap();
        assert_eq!(d(s), best);
    }
}
