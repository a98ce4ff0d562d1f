//! The call tree view: one row per visible call (duration, fold mark,
//! indentation, name with arguments and return value) or marker.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::{Theme, follow};
use crate::analysis::fmt_ns;
use crate::tui::app::App;
use crate::tui::model::tree::{Kind, Row};

/// Indentation of a row at `depth` in a body `width` columns wide: two
/// spaces a level while a name keeps 24 columns, then the level in
/// brackets (deep recursions stay readable in 80 columns).
fn indent(depth: u32, width: u16) -> String {
    let room = (width as usize).saturating_sub(12 + 24) / 2;
    let depth = depth as usize;
    if depth <= room {
        "  ".repeat(depth)
    } else {
        format!("{}[{depth}] ", "  ".repeat(room.saturating_sub(7)))
    }
}

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
                    Span::raw(format!("{}{mark}{label}", indent(depth, area.width))),
                ])
            }
            Some(k @ Kind::Marker { .. }) => {
                let label = app.label(&k);
                Line::from(vec![
                    Span::raw(format!("{:>11} ", "")),
                    Span::styled(
                        format!("{}  {label}", indent(depth, area.width)),
                        theme.dim(),
                    ),
                ])
            }
            _ => Line::from(vec![
                Span::raw(format!("{:>11} ", "")),
                Span::styled(
                    format!("{}  ... more calls (loading)", indent(depth, area.width)),
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

#[cfg(test)]
mod tests {
    use super::indent;

    #[test]
    fn deep_rows_keep_room_for_the_name() {
        assert_eq!(indent(3, 80), "      ");
        assert_eq!(indent(22, 80).len(), 44);
        assert_eq!(indent(23, 80), format!("{}[23] ", "  ".repeat(15)));
        assert_eq!(indent(100_000, 80), format!("{}[100000] ", "  ".repeat(15)));
        assert!(12 + indent(u32::MAX, 80).len() + 24 <= 80);
        assert_eq!(indent(5, 10), "[5] ");
    }
}
