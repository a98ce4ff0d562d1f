//! The report view: `fntrace report`'s table (total, self, calls,
//! function), sorted by the key chosen with `s`, filtered by `/`.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::{Theme, follow};
use crate::analysis::fmt_ns;
use crate::report::SortKey;
use crate::tui::app::App;

/// Draws the report.
pub fn draw(f: &mut Frame, area: Rect, app: &mut App, theme: Theme) {
    let sort = match app.sort {
        SortKey::Total => "total",
        SortKey::SelfTime => "self",
        SortKey::Calls => "calls",
        SortKey::Name => "name",
    };
    let mut lines = vec![Line::styled(
        format!(
            "  {:>12}  {:>12}  {:>10}  Function   (sorted by {sort}{})",
            "Total time",
            "Self time",
            "Calls",
            match &app.filter {
                Some(r) => format!(", /{}/", r.as_str()),
                None => String::new(),
            }
        ),
        theme.header(),
    )];
    if app.report.is_none() {
        lines.push(Line::raw("  computing the report..."));
        f.render_widget(Paragraph::new(lines), area);
        return;
    }
    let height = (area.height as usize).saturating_sub(1);
    let (mut top, cursor) = (app.report_top, app.report_cursor);
    let rows = app.report_rows();
    let cursor = cursor.min(rows.len().saturating_sub(1));
    follow(&mut top, cursor, height);
    for (i, r) in rows.iter().enumerate().skip(top).take(height) {
        let line = Line::from(vec![
            Span::styled(
                format!(
                    "  {:>12}  {:>12}  {:>10}  ",
                    fmt_ns(r.total_ns),
                    fmt_ns(r.self_ns),
                    r.calls
                ),
                theme.number(),
            ),
            Span::raw(r.function.clone()),
        ]);
        lines.push(if i == cursor {
            line.style(theme.selected())
        } else {
            line
        });
    }
    if rows.is_empty() {
        lines.push(Line::raw("  (no function matches)"));
    }
    app.report_top = top;
    app.report_cursor = cursor;
    f.render_widget(Paragraph::new(lines), area);
}
