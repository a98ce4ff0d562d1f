//! Keys of `fntrace tui`: what each key does (as in `less`, `htop` and
//! uftrace's tui) and the help text listing them.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Leave.
    Quit,
    /// Show or hide the help.
    Help,
    /// One row up or down.
    Up,
    /// See `Up`.
    Down,
    /// One screen up or down.
    PageUp,
    /// See `PageUp`.
    PageDown,
    /// First row.
    Home,
    /// Last row.
    End,
    /// Expand or collapse the selected call; in the report, show the
    /// function's callers and callees.
    Enter,
    /// Expand.
    Expand,
    /// Collapse, or go to the parent when collapsed.
    Collapse,
    /// Go to the parent call.
    Parent,
    /// Go to the slowest child.
    Slowest,
    /// Next call of the same function.
    NextSame,
    /// Start typing a search (regular expression).
    Search,
    /// Next match of the last search.
    NextMatch,
    /// Next thread.
    NextThread,
    /// Previous thread.
    PrevThread,
    /// Next sort key of the report.
    Sort,
    /// Next view.
    NextView,
    /// The call tree.
    ViewTree,
    /// The report.
    ViewReport,
    /// Callers and callees of the selected function.
    ViewGraph,
    /// Information about the trace.
    ViewInfo,
    /// Nothing.
    None,
}

/// The action of a key.
pub fn action(k: KeyEvent) -> Action {
    use Action::*;
    if k.modifiers.contains(KeyModifiers::CONTROL) {
        return match k.code {
            KeyCode::Char('c') => Quit,
            KeyCode::Char('f') => PageDown,
            KeyCode::Char('b') => PageUp,
            KeyCode::Char('n') => Down,
            KeyCode::Char('p') => Up,
            _ => None,
        };
    }
    match k.code {
        KeyCode::Char('q') | KeyCode::Char('Q') => Quit,
        KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => Help,
        KeyCode::Up | KeyCode::Char('k') => Up,
        KeyCode::Down | KeyCode::Char('j') => Down,
        KeyCode::PageUp | KeyCode::Char('b') => PageUp,
        KeyCode::PageDown | KeyCode::Char(' ') => PageDown,
        KeyCode::Home | KeyCode::Char('g') => Home,
        KeyCode::End | KeyCode::Char('G') => End,
        KeyCode::Enter => Enter,
        KeyCode::Right | KeyCode::Char('l') | KeyCode::Char('+') => Expand,
        KeyCode::Left | KeyCode::Char('-') => Collapse,
        KeyCode::Char('u') | KeyCode::Char('p') => Parent,
        KeyCode::Char('L') => Slowest,
        KeyCode::Char('n') => NextSame,
        KeyCode::Char('/') => Search,
        KeyCode::Char('>') | KeyCode::Char('N') => NextMatch,
        KeyCode::Char('t') => NextThread,
        KeyCode::Char('T') => PrevThread,
        KeyCode::Char('s') => Sort,
        KeyCode::Tab => NextView,
        KeyCode::Char('1') => ViewTree,
        KeyCode::Char('2') | KeyCode::Char('R') => ViewReport,
        KeyCode::Char('3') | KeyCode::Char('c') => ViewGraph,
        KeyCode::Char('4') | KeyCode::Char('i') | KeyCode::Char('I') => ViewInfo,
        _ => None,
    }
}

/// The help screen, one line per key.
pub const HELP: &[(&str, &str)] = &[
    ("Up Down j k", "previous / next row"),
    ("PgUp PgDn b Space", "previous / next screen"),
    ("Home End g G", "first / last row"),
    (
        "Enter",
        "expand or collapse the call; report: callers/callees",
    ),
    ("Right l +", "expand the call"),
    ("Left -", "collapse, or go to the parent"),
    ("u p", "go to the parent call"),
    ("L", "go to the slowest (longest) child"),
    ("n", "next call of the same function"),
    (
        "/",
        "search a function (regular expression); report: filter",
    ),
    ("> N", "next match of the search"),
    ("t T", "next / previous thread"),
    ("s", "report: sort by total, self, calls, name"),
    ("Tab 1 2 3 4", "tree, report, callers/callees (c), info (i)"),
    ("? h F1", "this help (any key closes it)"),
    ("q Ctrl-C", "quit"),
];
