//! The call tree view: one row per visible call (duration, fold mark,
//! indentation, name with arguments and return value) or marker.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::{Theme, follow};
use crate::analysis::{fmt_ns, indent};
use crate::tui::app::App;
use crate::tui::model::tree::{Kind, Row};

/// Draws the tree of the thread shown.
pub fn draw(f: &mut Frame, area: Rect, app: &mut App, theme: Theme) {
    let height = area.height as usize;
    {
        let t = app.tree();
        let (mut top, cursor) = (t.top, t.cursor);
        follow(&mut top, cursor, height);
        t.top = top;
    }
    app.load_visible(height);
    let t = app.tree();
    if t.rows.is_empty() {
        f.render_widget(Paragraph::new("  (no calls recorded in this thread)"), area);
        return;
    }
    let (top, cursor) = (t.top, t.cursor);
    let end = (top + height).min(t.rows.len());
    let rows: Vec<Row> = t.rows[top..end].to_vec();
    let mut lines = vec![];
    for (i, r) in rows.into_iter().enumerate() {
        let (kind, depth, expanded, expandable) = {
            let t = app.tree();
            match r {
                Row::Node(id) => {
                    let n = t.node(id);
                    (Some(n.kind.clone()), n.depth, n.expanded, n.expandable())
                }
                Row::More(p) => (None, t.node(p).depth + 1, false, false),
            }
        };
        let line = match kind {
            Some(k @ Kind::Call(_)) => {
                let Kind::Call(c) = &k else { unreachable!() };
                let dur = fmt_ns(app.clock.ns(c.end - c.start));
                let mark = if expanded {
                    "v "
                } else if expandable {
                    "> "
                } else {
                    "  "
                };
                let label = app.label(&k);
                Line::from(vec![
                    Span::styled(format!("{dur:>11} "), theme.number()),
                    Span::raw(format!("{}{mark}{label}", indent(depth as usize))),
                ])
            }
            Some(k @ Kind::Marker { .. }) => {
                let label = app.label(&k);
                Line::from(vec![
                    Span::raw(format!("{:>11} ", "")),
                    Span::styled(format!("{}  {label}", indent(depth as usize)), theme.dim()),
                ])
            }
            _ => Line::from(vec![
                Span::raw(format!("{:>11} ", "")),
                Span::styled(
                    format!("{}  ... more calls (loading)", indent(depth as usize)),
                    theme.dim(),
                ),
            ]),
        };
        lines.push(if top + i == cursor {
            line.style(theme.selected())
        } else {
            line
        });
    }
    f.render_widget(Paragraph::new(lines), area);
}
