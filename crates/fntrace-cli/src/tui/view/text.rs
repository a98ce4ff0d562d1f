//! The text views: callers and callees of a function (`fntrace graph`'s
//! text) and information about the trace (`fntrace info`'s text plus the
//! index), scrolled with the usual keys.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::Paragraph;

use super::Theme;
use crate::tui::app::{App, TextPane};

fn pane(f: &mut Frame, area: Rect, p: &TextPane, head: String, extra: Vec<String>, theme: Theme) {
    let mut lines = vec![Line::styled(head, theme.header())];
    match &p.lines {
        None => lines.push(Line::raw("  computing...")),
        Some(l) => lines.extend(
            extra
                .into_iter()
                .chain(l.iter().cloned())
                .skip(p.top)
                .take(area.height as usize)
                .map(Line::raw),
        ),
    }
    f.render_widget(Paragraph::new(lines), area);
}

/// Draws the callers and callees of the selected function.
pub fn draw_graph(f: &mut Frame, area: Rect, app: &mut App, theme: Theme) {
    let head = format!("Callers and callees of {}", app.graph.subject);
    pane(f, area, &app.graph, head, vec![], theme);
}

/// Draws the information about the trace.
pub fn draw_info(f: &mut Frame, area: Rect, app: &mut App, theme: Theme) {
    let chunks: usize = app.index.threads.iter().map(|t| t.chunks.len()).sum();
    let events: u64 = app.index.threads.iter().map(|t| t.events()).sum();
    let extra = vec![format!(
        "# index         {chunks} chunks, {events} events in {} threads",
        app.index.threads.len()
    )];
    pane(f, area, &app.info, "Trace information".into(), extra, theme);
}
