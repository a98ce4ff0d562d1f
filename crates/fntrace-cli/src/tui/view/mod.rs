//! Drawing `fntrace tui`: the title bar (trace, thread, views), the body
//! of the view shown, the status line (source line of the selected
//! function, messages, the search being typed) and the help. Colours
//! come from a [`Theme`], plain when `NO_COLOR` is set.

mod report;
mod text;
mod tree;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use super::app::{App, View};
use super::keys::HELP;

/// Styles of the screen.
#[derive(Debug, Clone, Copy)]
pub struct Theme {
    /// Whether to use colours.
    pub color: bool,
}

impl Theme {
    /// Colours unless `NO_COLOR` is set to a non-empty value
    /// (<https://no-color.org>).
    pub fn from_env() -> Theme {
        Theme {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    /// Title and status bars.
    pub fn bar(&self) -> Style {
        if self.color {
            Style::new().fg(Color::Black).bg(Color::Cyan)
        } else {
            Style::new().add_modifier(Modifier::REVERSED)
        }
    }

    /// The selected row.
    pub fn selected(&self) -> Style {
        if self.color {
            Style::new().fg(Color::Black).bg(Color::Yellow)
        } else {
            Style::new().add_modifier(Modifier::REVERSED)
        }
    }

    /// Durations and numbers.
    pub fn number(&self) -> Style {
        if self.color {
            Style::new().fg(Color::Green)
        } else {
            Style::new()
        }
    }

    /// Markers and hints.
    pub fn dim(&self) -> Style {
        if self.color {
            Style::new().fg(Color::Magenta)
        } else {
            Style::new()
        }
    }

    /// Column headers.
    pub fn header(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
}

/// Draws the whole screen.
pub fn draw(f: &mut Frame, app: &mut App, theme: Theme) {
    let [title, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    app.page = body.height as usize;
    title_bar(f, title, app, theme);
    match app.view {
        View::Tree => tree::draw(f, body, app, theme),
        View::Report => report::draw(f, body, app, theme),
        View::Graph => text::draw_graph(f, body, app, theme),
        View::Info => text::draw_info(f, body, app, theme),
    }
    status_line(f, status, app, theme);
    if app.help {
        help(f, f.area(), theme);
    }
}

fn title_bar(f: &mut Frame, area: Rect, app: &mut App, theme: Theme) {
    let th = &app.index.threads.get(app.thread);
    let thread = match th {
        Some(t) if t.tid == 0 && t.chunks.is_empty() => "no threads recorded".into(),
        Some(t) if !t.name.is_empty() => format!(
            "thread {} {} ({}/{})",
            t.tid,
            t.name,
            app.thread + 1,
            app.index.threads.len()
        ),
        Some(t) => format!(
            "thread {} ({}/{})",
            t.tid,
            app.thread + 1,
            app.index.threads.len()
        ),
        None => "no threads".into(),
    };
    let file = app
        .trace
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut spans = vec![Span::raw(format!(" {file} | {thread} | "))];
    for (i, v) in View::ALL.iter().enumerate() {
        let s = format!("{}{} ", i + 1, v.name());
        if *v == app.view {
            spans.push(Span::styled(
                s,
                Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            ));
        } else {
            spans.push(Span::raw(s));
        }
    }
    spans.push(Span::raw("| ? help"));
    f.render_widget(Paragraph::new(Line::from(spans)).style(theme.bar()), area);
}

fn status_line(f: &mut Frame, area: Rect, app: &mut App, theme: Theme) {
    let text = if let Some(s) = &app.input {
        format!("/{s}")
    } else if let Some(m) = &app.message {
        m.clone()
    } else {
        match app.selected_function() {
            Some((Some(func), name)) => match app.sym.srcline(func) {
                Some(l) => format!("{name}  {l}"),
                None => format!("{name}  (no source line)"),
            },
            Some((None, name)) => name,
            None if app.view == View::Tree => {
                "more calls follow (loaded as they come on screen)".into()
            }
            None => String::new(),
        }
    };
    f.render_widget(Paragraph::new(text).style(theme.bar()), area);
}

fn help(f: &mut Frame, area: Rect, theme: Theme) {
    let w = area.width.min(74);
    let h = (HELP.len() as u16 + 2).min(area.height);
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, d)| {
            Line::from(vec![
                Span::styled(format!(" {k:<18}"), theme.header()),
                Span::raw(*d),
            ])
        })
        .collect();
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" Keys ")),
        r,
    );
}

/// Keeps `cursor` inside `top..top + height`.
pub fn follow(top: &mut usize, cursor: usize, height: usize) {
    let height = height.max(1);
    if cursor < *top {
        *top = cursor;
    } else if cursor >= *top + height {
        *top = cursor + 1 - height;
    }
}
