//! The state of `fntrace tui` and what each action does to it: the views,
//! the per-thread trees, the search, and the results of the work done in
//! the background (report, info, callers/callees).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use fntrace_format::Trace;

use super::keys::Action;
use super::model::index::Index;
use super::model::tree::{Kind, Loaded, ROOT, Row, Tree};
use crate::analysis::Clock;
use crate::pattern::NamePattern;
use crate::report::{Row as ReportRow, SortKey};
use crate::symbols::Symbolizer;

/// The views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The call tree of a thread.
    Tree,
    /// Per-function totals.
    Report,
    /// Callers and callees of a function.
    Graph,
    /// About the trace.
    Info,
}

impl View {
    /// Its name in the title bar.
    pub fn name(self) -> &'static str {
        match self {
            View::Tree => "Tree",
            View::Report => "Report",
            View::Graph => "Callers",
            View::Info => "Info",
        }
    }

    /// All views, in `Tab` order.
    pub const ALL: [View; 4] = [View::Tree, View::Report, View::Graph, View::Info];
}

/// A result of background work.
pub enum Done {
    /// The report rows (sorted by total).
    Report(Vec<ReportRow>),
    /// `fntrace info`'s text.
    Info(Vec<String>),
    /// `fntrace graph`'s text for a function.
    Graph(String, Vec<String>),
}

/// A text shown in a scrolling pane, filled in by background work.
#[derive(Default)]
pub struct TextPane {
    /// What the text is about (the function of a graph).
    pub subject: String,
    /// Its lines; `None` while computing.
    pub lines: Option<Vec<String>>,
    /// First line shown.
    pub top: usize,
}

/// The whole state.
pub struct App<'t> {
    /// The trace.
    pub trace: &'t Trace,
    shared: Arc<Trace>,
    /// The index.
    pub index: &'t Index,
    /// Names and source lines.
    pub sym: Symbolizer<'t>,
    /// TSC to time.
    pub clock: Clock,
    trees: HashMap<usize, Tree<'t>>,
    /// Index of the thread shown (in `index.threads`).
    pub thread: usize,
    /// The view shown.
    pub view: View,
    /// Report rows once computed.
    pub report: Option<Vec<ReportRow>>,
    /// Report sort key.
    pub sort: SortKey,
    /// Report filter (`/` in the report).
    pub filter: Option<regex::Regex>,
    /// Report cursor and first row on screen.
    pub report_cursor: usize,
    /// See `report_cursor`.
    pub report_top: usize,
    /// Callers and callees.
    pub graph: TextPane,
    /// Information.
    pub info: TextPane,
    info_started: bool,
    /// The search being typed.
    pub input: Option<String>,
    last_search: Option<regex::Regex>,
    matches: HashMap<u64, bool>,
    /// A message for the status line.
    pub message: Option<String>,
    /// Whether the help is shown.
    pub help: bool,
    /// Whether to leave.
    pub quit: bool,
    /// Rows of the body on the last draw (for paging).
    pub page: usize,
    tx: Sender<Done>,
    rx: Receiver<Done>,
}

impl<'t> App<'t> {
    /// The state of a freshly opened trace; starts the report in the
    /// background.
    pub fn new(trace: &'t Arc<Trace>, index: &'t Index) -> App<'t> {
        let (tx, rx) = channel();
        let mut app = App {
            trace,
            shared: trace.clone(),
            index,
            sym: Symbolizer::new(trace.metadata()),
            clock: Clock::of(trace),
            trees: HashMap::new(),
            thread: 0,
            view: View::Tree,
            report: None,
            sort: SortKey::Total,
            filter: None,
            report_cursor: 0,
            report_top: 0,
            graph: TextPane::default(),
            info: TextPane::default(),
            info_started: false,
            input: None,
            last_search: None,
            matches: HashMap::new(),
            message: None,
            help: false,
            quit: false,
            page: 20,
            tx,
            rx,
        };
        app.tree();
        app
    }

    /// Starts the background work of the report.
    pub fn start_report(&self) {
        let t = self.shared.clone();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            let rows = crate::report::report_rows(&t, false, SortKey::Total);
            let _ = tx.send(Done::Report(rows));
        });
    }

    fn start_info(&mut self) {
        if self.info_started {
            return;
        }
        self.info_started = true;
        let t = self.shared.clone();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            let mut out = vec![];
            let _ = crate::info::write_info(&mut out, &t);
            let text = String::from_utf8_lossy(&out)
                .lines()
                .map(String::from)
                .collect();
            let _ = tx.send(Done::Info(text));
        });
    }

    fn start_graph(&mut self, name: String) {
        if self.graph.subject == name && self.graph.lines.is_some() {
            return;
        }
        self.graph = TextPane {
            subject: name.clone(),
            lines: None,
            top: 0,
        };
        let t = self.shared.clone();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            let lines = match NamePattern::new(&format!("^{}$", regex::escape(&name))) {
                Ok(p) => {
                    let g = crate::graph::CallGraph::build(
                        &t,
                        &p,
                        &crate::select::Selection::default(),
                    );
                    let mut out = vec![];
                    let _ = crate::graph::write_graph(
                        &mut out,
                        &t,
                        &g,
                        crate::graph::GraphFormat::Text,
                        None,
                    );
                    String::from_utf8_lossy(&out)
                        .lines()
                        .map(String::from)
                        .collect()
                }
                Err(e) => vec![format!("bad pattern: {e}")],
            };
            let _ = tx.send(Done::Graph(name, lines));
        });
    }

    /// Takes the results of background work; whether anything arrived.
    pub fn poll(&mut self) -> bool {
        let mut any = false;
        while let Ok(d) = self.rx.try_recv() {
            any = true;
            match d {
                Done::Report(mut rows) => {
                    crate::report::sort_rows(&mut rows, self.sort);
                    self.report = Some(rows);
                }
                Done::Info(lines) => self.info.lines = Some(lines),
                Done::Graph(name, lines) => {
                    if name == self.graph.subject {
                        self.graph.lines = Some(lines);
                    }
                }
            }
        }
        any
    }

    /// The tree of the thread shown.
    pub fn tree(&mut self) -> &mut Tree<'t> {
        let (trace, index, i) = (self.trace, self.index, self.thread);
        self.trees
            .entry(i)
            .or_insert_with(|| Tree::new(trace, &index.threads[i]))
    }

    /// Report rows that pass the filter.
    pub fn report_rows(&self) -> Vec<&ReportRow> {
        self.report
            .iter()
            .flatten()
            .filter(|r| self.filter.as_ref().is_none_or(|f| f.is_match(&r.function)))
            .collect()
    }

    /// The function the selection is on (tree or report).
    pub fn selected_function(&mut self) -> Option<(Option<u64>, String)> {
        match self.view {
            View::Report => {
                let rows = self.report_rows();
                let r = rows.get(self.report_cursor)?;
                Some((None, r.function.clone()))
            }
            _ => {
                let t = self.tree();
                let id = t.selected()?;
                let f = t.node(id).call()?.func;
                Some((Some(f), self.sym.name(f).to_string()))
            }
        }
    }

    /// Handles a typed key while a search is being typed.
    pub fn input_key(&mut self, k: ratatui::crossterm::event::KeyEvent) {
        use ratatui::crossterm::event::KeyCode;
        let Some(s) = self.input.as_mut() else { return };
        match k.code {
            KeyCode::Esc => self.input = None,
            KeyCode::Backspace if s.pop().is_none() => self.input = None,
            KeyCode::Char(c) => s.push(c),
            KeyCode::Enter => {
                let text = self.input.take().unwrap_or_default();
                self.search(&text);
            }
            _ => {}
        }
    }

    fn search(&mut self, text: &str) {
        if self.view == View::Report {
            if text.is_empty() {
                self.filter = None;
                return;
            }
            match regex::Regex::new(text) {
                Ok(r) => {
                    self.filter = Some(r);
                    self.report_cursor = 0;
                    self.report_top = 0;
                }
                Err(e) => self.message = Some(bad_regex(&e)),
            }
            return;
        }
        match regex::Regex::new(text) {
            Ok(r) => {
                self.last_search = Some(r);
                self.matches.clear();
                self.view = View::Tree;
                self.next_match();
            }
            Err(e) => self.message = Some(bad_regex(&e)),
        }
    }

    fn next_match(&mut self) {
        let Some(re) = self.last_search.clone() else {
            self.message = Some("no search yet: type / and a regular expression".into());
            return;
        };
        let (trace, index, i) = (self.trace, self.index, self.thread);
        let tree = self
            .trees
            .entry(i)
            .or_insert_with(|| Tree::new(trace, &index.threads[i]));
        let sym = &mut self.sym;
        let matches = &mut self.matches;
        let mut pred = |f: u64| *matches.entry(f).or_insert_with(|| re.is_match(sym.name(f)));
        // Forward from the selected call.
        let from = tree.selected();
        let r = match from {
            Some(id) if tree.node(id).call().is_some() => tree.find_next(id, &mut pred).map(|_| ()),
            _ => Err("select a call first".into()),
        };
        match r {
            Ok(()) => self.message = Some(format!("found /{}/", re.as_str())),
            Err(e) => self.message = Some(format!("/{}/: {e}", re.as_str())),
        }
    }

    /// Does what a key asks.
    pub fn act(&mut self, a: Action) {
        if self.help {
            self.help = false;
            if a != Action::Quit {
                return;
            }
        }
        self.message = None;
        let page = self.page.max(1);
        match a {
            Action::Quit => self.quit = true,
            Action::Help => self.help = true,
            Action::Search => self.input = Some(String::new()),
            Action::NextMatch => self.next_match(),
            Action::NextThread | Action::PrevThread => {
                let n = self.index.threads.len();
                if n > 0 {
                    self.thread = if a == Action::NextThread {
                        (self.thread + 1) % n
                    } else {
                        (self.thread + n - 1) % n
                    };
                    self.view = View::Tree;
                    self.tree();
                }
            }
            Action::NextView => {
                let i = View::ALL.iter().position(|&v| v == self.view).unwrap_or(0);
                self.show(View::ALL[(i + 1) % View::ALL.len()]);
            }
            Action::ViewTree => self.show(View::Tree),
            Action::ViewReport => self.show(View::Report),
            Action::ViewGraph => self.show(View::Graph),
            Action::ViewInfo => self.show(View::Info),
            _ => match self.view {
                View::Tree => self.tree_act(a, page),
                View::Report => self.report_act(a, page),
                View::Graph => scroll(&mut self.graph, a, page),
                View::Info => scroll(&mut self.info, a, page),
            },
        }
    }

    fn show(&mut self, v: View) {
        match v {
            View::Graph => match self.selected_function() {
                Some((_, name)) => self.start_graph(name),
                None if self.graph.subject.is_empty() => {
                    self.message = Some("select a function first".into());
                    return;
                }
                None => {}
            },
            View::Info => self.start_info(),
            _ => {}
        }
        self.view = v;
    }

    fn report_act(&mut self, a: Action, page: usize) {
        let n = self.report_rows().len();
        let c = &mut self.report_cursor;
        match a {
            Action::Up => *c = c.saturating_sub(1),
            Action::Down => *c = (*c + 1).min(n.saturating_sub(1)),
            Action::PageUp => *c = c.saturating_sub(page),
            Action::PageDown => *c = (*c + page).min(n.saturating_sub(1)),
            Action::Home => *c = 0,
            Action::End => *c = n.saturating_sub(1),
            Action::Sort => {
                self.sort = match self.sort {
                    SortKey::Total => SortKey::SelfTime,
                    SortKey::SelfTime => SortKey::Calls,
                    SortKey::Calls => SortKey::Name,
                    SortKey::Name => SortKey::Total,
                };
                if let Some(r) = self.report.as_mut() {
                    crate::report::sort_rows(r, self.sort);
                }
            }
            Action::Enter | Action::Expand => self.show(View::Graph),
            _ => {}
        }
    }

    fn tree_act(&mut self, a: Action, page: usize) {
        let mut msg = None;
        let mut search_same = None;
        {
            let t = self.tree();
            let n = t.rows.len();
            match a {
                Action::Up => t.cursor = t.cursor.saturating_sub(1),
                Action::Down => t.cursor = (t.cursor + 1).min(n.saturating_sub(1)),
                Action::PageUp => t.cursor = t.cursor.saturating_sub(page),
                Action::PageDown => t.cursor = (t.cursor + page).min(n.saturating_sub(1)),
                Action::Home => t.cursor = 0,
                Action::End => t.cursor = n.saturating_sub(1),
                Action::Enter | Action::Expand | Action::Collapse => match t.rows.get(t.cursor) {
                    Some(&Row::More(p)) => t.load_more(p),
                    Some(&Row::Node(id)) => {
                        let node = t.node(id);
                        let expanded = node.expanded;
                        match a {
                            Action::Enter if expanded => t.collapse(id),
                            Action::Enter | Action::Expand if !expanded => {
                                if node.expandable() {
                                    t.expand(id);
                                    if !t.node(id).expanded {
                                        msg = Some("no calls inside".to_string());
                                    }
                                } else {
                                    msg = Some("no calls inside".to_string());
                                }
                            }
                            Action::Expand => {
                                if let Some(&c) = t.node(id).children.first() {
                                    t.select(c);
                                }
                            }
                            Action::Collapse if expanded => t.collapse(id),
                            _ => {
                                let p = t.node(id).parent;
                                if p != ROOT {
                                    t.select(p);
                                }
                            }
                        }
                    }
                    None => {}
                },
                Action::Parent => {
                    if let Some(id) = t.selected() {
                        let p = t.node(id).parent;
                        if p == ROOT {
                            msg = Some("an outermost call has no parent".into());
                        } else {
                            t.select(p);
                        }
                    }
                }
                Action::Slowest => {
                    if let Some(id) = t.selected() {
                        if !t.node(id).expandable() || t.slowest_child(id).is_none() {
                            msg = Some("no calls inside".into());
                        }
                    }
                }
                Action::NextSame => match t.selected().and_then(|id| t.node(id).call()) {
                    Some(c) => search_same = Some(c.func),
                    None => msg = Some("select a call first".into()),
                },
                _ => {}
            }
        }
        if let Some(f) = search_same {
            let t = self.tree();
            if let Some(id) = t.selected() {
                match t.find_next(id, &mut |g| g == f) {
                    Ok(_) => {}
                    Err(e) => msg = Some(format!("{}: {e}", self.sym.name(f))),
                }
            }
        }
        self.message = msg;
    }

    /// Loads the pages whose "more" row is in rows `top..top + height`.
    pub fn load_visible(&mut self, height: usize) {
        let t = self.tree();
        let end = (t.top + height).min(t.rows.len());
        let more: Vec<_> = t.rows[t.top.min(end)..end]
            .iter()
            .filter_map(|r| match r {
                Row::More(p) => Some(*p),
                _ => None,
            })
            .collect();
        for p in more {
            if matches!(t.node(p).loaded, Loaded::Partial(_)) {
                t.load_more(p);
            }
        }
    }

    /// The label of a tree node: name, arguments and return value, or the
    /// marker.
    pub fn label(&mut self, kind: &Kind) -> String {
        match kind {
            Kind::Root => String::new(),
            Kind::Call(c) => {
                let mut s = if c.func == 0 {
                    "(entry lost)".to_string()
                } else {
                    self.sym.name(c.func).to_string()
                };
                if let Some(a) = &c.args {
                    let v: Vec<String> = a.iter().map(|x| x.to_string()).collect();
                    s.push_str(&format!("({})", v.join(", ")));
                }
                if let Some(r) = c.retval {
                    s.push_str(&format!(" = {r}"));
                }
                if c.incomplete {
                    s.push_str(" (no exit)");
                }
                s
            }
            Kind::Marker { name, text, .. } => format!("/* marker {name} {text} */"),
        }
    }
}

/// A regex error on one line (its message has several: the pattern, a
/// caret, then the problem).
fn bad_regex(e: &regex::Error) -> String {
    let text = e.to_string();
    let why = text.lines().last().unwrap_or_default().trim();
    format!(
        "bad regular expression: {}",
        why.trim_start_matches("error: ")
    )
}

fn scroll(p: &mut TextPane, a: Action, page: usize) {
    let n = p.lines.as_ref().map_or(0, |l| l.len());
    match a {
        Action::Up => p.top = p.top.saturating_sub(1),
        Action::Down => p.top = (p.top + 1).min(n.saturating_sub(1)),
        Action::PageUp => p.top = p.top.saturating_sub(page),
        Action::PageDown => p.top = (p.top + page).min(n.saturating_sub(1)),
        Action::Home => p.top = 0,
        Action::End => p.top = n.saturating_sub(page),
        _ => {}
    }
}
