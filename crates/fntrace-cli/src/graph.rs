//! `fntrace graph`: the callers (backtraces) and callees of functions,
//! with totals and calls, as text or Graphviz `dot`; also the callee trees
//! of the HTML export.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};
use std::path::Path;

use fntrace_format::Trace;

use crate::analysis::{Clock, Event, fmt_ns};
use crate::pattern::NamePattern;
use crate::select::{SelectArgs, SelectedEvents, Selection};
use crate::symbols::Symbolizer;
use crate::tracefile::{open_checked, with_progress};
use crate::{Error, Result};

/// Output format of `fntrace graph`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    /// Backtraces and an indented callee tree.
    Text,
    /// Graphviz `dot`: caller → callee edges labelled with call counts.
    Dot,
}

struct GraphNode {
    func: u64,
    calls: u64,
    total: u64,
    children: HashMap<u64, usize>,
}

/// A caller context of matched calls: a node of the trie of call paths
/// (node 0 is its root, above every thread's outermost call).
struct Context {
    parent: u32,
    func: u64,
    /// Matched calls whose backtrace ends here, and their time.
    hits: u64,
    ticks: u64,
}

/// An open call while the graph is built.
struct GraphFrame {
    func: u64,
    start: u64,
    /// Node inside a matched subtree.
    node: Option<usize>,
    /// Whether this call is the root of a matched subtree.
    root: bool,
    /// Its caller context, once a matched call below needed it.
    ctx: Option<u32>,
    /// Continues a call a context switch suspended (counted at its first
    /// piece).
    continued: bool,
}

/// The callers and callees of the functions `pattern` selects, aggregated
/// over every outermost call of them on every thread.
pub struct CallGraph {
    nodes: Vec<GraphNode>,
    /// The backtraces of matched calls as a trie (a parent always comes
    /// before its children), so memory grows with the distinct paths, not
    /// with their depth.
    contexts: Vec<Context>,
    context_index: HashMap<(u32, u64), u32>,
}

impl CallGraph {
    /// Builds the graph from the calls `sel` selects (a selected call whose
    /// caller is not selected has no caller in its backtraces).
    pub fn build(trace: &Trace, pattern: &NamePattern, sel: &Selection) -> CallGraph {
        let mut sym = Symbolizer::new(trace.metadata());
        let mut matches: HashMap<u64, bool> = HashMap::default();
        let mut g = CallGraph {
            nodes: vec![],
            contexts: vec![Context {
                parent: 0,
                func: 0,
                hits: 0,
                ticks: 0,
            }],
            context_index: HashMap::default(),
        };
        // Root nodes per matched function.
        let mut roots: HashMap<u64, usize> = HashMap::default();
        for tid in sel.threads(trace) {
            let mut stack: Vec<GraphFrame> = vec![];
            // Entries still to come that continue suspended calls.
            let mut continuing = 0u64;
            for ev in SelectedEvents::new(trace, tid, sel) {
                match ev {
                    Event::Enter { func, tsc, .. } => {
                        let parent = stack.last().and_then(|f| f.node);
                        let (node, root) = match parent {
                            Some(p) => {
                                let n = match g.nodes[p].children.get(&func) {
                                    Some(&n) => n,
                                    None => {
                                        g.nodes.push(GraphNode {
                                            func,
                                            calls: 0,
                                            total: 0,
                                            children: HashMap::default(),
                                        });
                                        let n = g.nodes.len() - 1;
                                        g.nodes[p].children.insert(func, n);
                                        n
                                    }
                                };
                                (Some(n), false)
                            }
                            None => {
                                let m = *matches
                                    .entry(func)
                                    .or_insert_with(|| pattern.matches(sym.name(func)));
                                if m {
                                    let n = *roots.entry(func).or_insert_with(|| {
                                        g.nodes.push(GraphNode {
                                            func,
                                            calls: 0,
                                            total: 0,
                                            children: HashMap::default(),
                                        });
                                        g.nodes.len() - 1
                                    });
                                    (Some(n), true)
                                } else {
                                    (None, false)
                                }
                            }
                        };
                        stack.push(GraphFrame {
                            func,
                            start: tsc,
                            node,
                            root,
                            ctx: None,
                            continued: continuing > 0,
                        });
                        continuing = continuing.saturating_sub(1);
                    }
                    Event::Exit { tsc, .. } => {
                        let Some(f) = stack.pop() else {
                            continue;
                        };
                        let dur = tsc.saturating_sub(f.start);
                        let first = u64::from(!f.continued);
                        if let Some(n) = f.node {
                            g.nodes[n].calls += first;
                            g.nodes[n].total = g.nodes[n].total.saturating_add(dur);
                        }
                        if f.root {
                            let caller = g.context_of(&mut stack);
                            let c = g.child_context(caller, f.func) as usize;
                            g.contexts[c].hits += first;
                            g.contexts[c].ticks = g.contexts[c].ticks.saturating_add(dur);
                        }
                    }
                    Event::Switch {
                        resumed: true,
                        calls,
                    } => continuing = calls,
                    Event::Args(_)
                    | Event::RetVal(_)
                    | Event::Switch { .. }
                    | Event::Marker { .. } => {}
                }
            }
        }
        g
    }

    /// The context node of `func` called from context `parent`.
    fn child_context(&mut self, parent: u32, func: u64) -> u32 {
        let contexts = &mut self.contexts;
        *self.context_index.entry((parent, func)).or_insert_with(|| {
            contexts.push(Context {
                parent,
                func,
                hits: 0,
                ticks: 0,
            });
            (contexts.len() - 1) as u32
        })
    }

    /// The context of the innermost open call of `stack` (the root if
    /// none), computed from the innermost frame that knows its own and
    /// remembered in every frame above it: each frame is resolved once,
    /// however deep the stack.
    fn context_of(&mut self, stack: &mut [GraphFrame]) -> u32 {
        let known = stack.iter().rposition(|f| f.ctx.is_some());
        let (mut c, from) = match known {
            Some(i) => (stack[i].ctx.unwrap_or(0), i + 1),
            None => (0, 0),
        };
        for f in &mut stack[from..] {
            c = self.child_context(c, f.func);
            f.ctx = Some(c);
        }
        c
    }

    /// The functions of context `c`, outermost first.
    fn context_path(&self, mut c: u32) -> Vec<u64> {
        let mut path = vec![];
        while c != 0 {
            let x = &self.contexts[c as usize];
            path.push(x.func);
            c = x.parent;
        }
        path.reverse();
        path
    }

    /// Whether anything matched.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn roots(&self) -> Vec<usize> {
        let mut children = vec![false; self.nodes.len()];
        for n in &self.nodes {
            for &c in n.children.values() {
                children[c] = true;
            }
        }
        let mut r: Vec<usize> = (0..self.nodes.len()).filter(|&i| !children[i]).collect();
        r.sort_by_key(|&i| std::cmp::Reverse(self.nodes[i].total));
        r
    }
}

/// Writes `fntrace graph`, callees at most `levels` levels deep.
pub fn write_graph(
    out: &mut dyn Write,
    trace: &Trace,
    g: &CallGraph,
    format: GraphFormat,
    levels: Option<usize>,
) -> io::Result<()> {
    let clock = Clock::of(trace);
    let mut sym = Symbolizer::new(trace.metadata());
    match format {
        GraphFormat::Text => {
            // By time, then in the order first seen.
            let mut bts: Vec<u32> = (1..g.contexts.len() as u32)
                .filter(|&c| g.contexts[c as usize].hits > 0)
                .collect();
            bts.sort_by_key(|&c| std::cmp::Reverse(g.contexts[c as usize].ticks));
            writeln!(out, "========== BACKTRACE ==========")?;
            for (i, &c) in bts.iter().enumerate().take(20) {
                let x = &g.contexts[c as usize];
                writeln!(
                    out,
                    " backtrace #{i}: hit {}, time {}",
                    x.hits,
                    fmt_ns(clock.ns(x.ticks))
                )?;
                // A run of the same function (recursion) is one line.
                let path = g.context_path(c);
                let mut k = 0;
                while k < path.len() {
                    let run = path[k..].iter().take_while(|&&f| f == path[k]).count();
                    let name = sym.name(path[k]);
                    if run == 1 {
                        writeln!(out, "   [{k}] {name}")?;
                    } else {
                        writeln!(out, "   [{k}-{}] {name} (x{run})", k + run - 1)?;
                    }
                    k += run;
                }
            }
            if bts.len() > 20 {
                writeln!(out, " ... {} more backtraces", bts.len() - 20)?;
            }
            writeln!(out, "\n========== CALL GRAPH ==========")?;
            writeln!(out, "# {:>12}  {:>10}  FUNCTION", "TOTAL TIME", "CALLS")?;
            // Depth first, children by total time; iterative, since a
            // recursion can be as deep as the trace.
            let mut todo: Vec<(usize, usize)> =
                g.roots().into_iter().rev().map(|r| (r, 0)).collect();
            while let Some((n, level)) = todo.pop() {
                let node = &g.nodes[n];
                let prefix = if level == 0 {
                    String::new()
                } else {
                    format!("{}+-", crate::analysis::indent(level - 1))
                };
                writeln!(
                    out,
                    "  {:>12}  {:>10}  {prefix}{}",
                    fmt_ns(clock.ns(node.total)),
                    node.calls,
                    sym.name(node.func)
                )?;
                if levels.is_some_and(|d| level + 1 >= d) {
                    continue;
                }
                let mut kids: Vec<usize> = node.children.values().copied().collect();
                kids.sort_by_key(|&c| std::cmp::Reverse(g.nodes[c].total));
                todo.extend(kids.into_iter().rev().map(|c| (c, level + 1)));
            }
        }
        GraphFormat::Dot => {
            let mut edges: HashMap<(u64, u64), u64> = HashMap::default();
            for n in &g.nodes {
                for &c in n.children.values() {
                    *edges.entry((n.func, g.nodes[c].func)).or_default() += g.nodes[c].calls;
                }
            }
            // Caller edges: every backtrace through a context counts once
            // on the edge into it (children come after their parents, so
            // one backward pass sums them).
            let mut through: Vec<u64> = g.contexts.iter().map(|c| c.hits).collect();
            for c in (1..g.contexts.len()).rev() {
                let x = &g.contexts[c];
                let p = x.parent as usize;
                through[p] += through[c];
                if p != 0 {
                    *edges.entry((g.contexts[p].func, x.func)).or_default() += through[c];
                }
            }
            let mut edges: Vec<_> = edges.into_iter().collect();
            edges.sort();
            writeln!(out, "digraph calls {{")?;
            writeln!(out, "  node [shape=box];")?;
            for ((a, b), n) in edges {
                let (a, b) = (sym.name(a).to_string(), sym.name(b).to_string());
                writeln!(out, "  {:?} -> {:?} [label=\"{n}\"];", a, b)?;
            }
            writeln!(out, "}}")?;
        }
    }
    Ok(())
}

impl CallGraph {
    /// Writes the callee trees as nested `<details>` elements (children by
    /// total time, at most `depth` levels), names shortened with the full
    /// name on hover.
    pub fn write_html_tree(
        &self,
        out: &mut dyn Write,
        trace: &Trace,
        depth: usize,
    ) -> io::Result<()> {
        let clock = Clock::of(trace);
        let mut sym = Symbolizer::new(trace.metadata());
        fn node(
            g: &CallGraph,
            out: &mut dyn Write,
            sym: &mut Symbolizer,
            clock: &Clock,
            n: usize,
            left: usize,
        ) -> io::Result<()> {
            let x = &g.nodes[n];
            let esc = |s: &str| {
                s.replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;")
                    .replace('"', "&quot;")
            };
            let full = sym.name(x.func);
            let short = crate::export::html::short_name(full);
            let label = format!(
                "<span title=\"{}\">{}</span> <span class=\"dim n\">{} in {} calls</span>",
                esc(full),
                esc(&short),
                fmt_ns(clock.ns(x.total)),
                x.calls
            );
            if x.children.is_empty() || left == 0 {
                return writeln!(out, "<div style=\"margin-left:1.2em\">{label}</div>");
            }
            writeln!(out, "<details open><summary>{label}</summary>")?;
            let mut kids: Vec<usize> = x.children.values().copied().collect();
            kids.sort_by_key(|&c| std::cmp::Reverse(g.nodes[c].total));
            for c in kids.into_iter().take(50) {
                node(g, out, sym, clock, c, left - 1)?;
            }
            writeln!(out, "</details>")
        }
        for r in self.roots() {
            node(self, out, &mut sym, &clock, r, depth)?;
        }
        Ok(())
    }
}

/// `fntrace graph`: the callers and callees of the functions `function`
/// selects (see [`NamePattern`]) among the calls `select` selects in the
/// trace at `path`, callees at most `levels` levels deep.
pub fn run(
    out: &mut dyn Write,
    function: &str,
    path: &Path,
    format: GraphFormat,
    levels: Option<usize>,
    select: &SelectArgs,
) -> Result<()> {
    let sel = select.parse()?;
    let t = open_checked(path)?;
    sel.check_tid(&t, path)?;
    let p = NamePattern::new(function)
        .map_err(Error::pattern(format!("bad function pattern {function:?}")))?;
    let g = with_progress(&t, 1, "reading", || CallGraph::build(&t, &p, &sel));
    if g.is_empty() {
        let hint = if sel.is_all() {
            ""
        } else if select.depth.is_some() {
            " in the selection (-D/--depth selects levels of calls, as in replay; \
             the callee levels shown are --levels)"
        } else {
            " in the selection"
        };
        return Err(Error::Invalid(format!(
            "{}: no calls of {function:?}{hint}",
            path.display()
        )));
    }
    write_graph(out, &t, &g, format, levels)?;
    Ok(())
}
