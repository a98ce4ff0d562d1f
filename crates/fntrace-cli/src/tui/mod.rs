//! `fntrace tui`: browse a trace in the terminal. This module owns the
//! terminal (raw mode and the alternate screen, restored on every way
//! out, panics included) and the event loop; the state and what keys do
//! are in [`app`], the index and call trees in [`model`], drawing in
//! [`view`], the key bindings in [`keys`].
//!
//! Opening decodes every chunk once, in parallel, to build the index
//! (call depths per chunk); the first screen follows at once, and the
//! report is computed in the background. Only what is on screen is
//! decoded after that.

pub mod app;
pub mod keys;
pub mod model;
pub mod view;

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{self, Event, KeyEventKind};

use crate::Result;
use crate::tracefile::{open_checked, with_progress};
use app::App;
use model::index::Index;
use view::Theme;

/// Options of `fntrace tui`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Options {
    /// Draw the first screen (80x24) as text on standard output and exit,
    /// without a terminal (for benchmarks and scripts).
    #[arg(long, hide = true)]
    pub first_screen: bool,
}

/// Restores the terminal when dropped (on return, error or unwinding).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

fn workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// `fntrace tui PATH`.
pub fn run(out: &mut dyn Write, path: &Path, o: &Options) -> Result<()> {
    if !(o.first_screen || io::stdout().is_terminal() && io::stdin().is_terminal()) {
        return Err(crate::Error::Invalid(
            "fntrace tui needs a terminal (standard input and output)".into(),
        ));
    }
    let trace = Arc::new(open_checked(path)?);
    // A progress bar on stderr when this takes over a second.
    let index = with_progress(&trace, 1, "indexing", || Index::build(&trace, workers()));
    let theme = Theme::from_env();
    let mut app = App::new(&trace, &index);
    if o.first_screen {
        let mut term = Terminal::new(TestBackend::new(80, 24))?;
        term.draw(|f| view::draw(f, &mut app, theme))?;
        let buf = term.backend().buffer();
        for y in 0..buf.area.height {
            let line: String = (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect();
            writeln!(out, "{}", line.trim_end())?;
        }
        return Ok(());
    }
    app.start_report();
    // Raw mode, the alternate screen and a panic hook that restores
    // them; the guard restores them on every return.
    let _restore = Restore;
    let mut term = ratatui::try_init()?;
    loop {
        term.draw(|f| view::draw(f, &mut app, theme))?;
        if app.quit {
            break;
        }
        if event::poll(Duration::from_millis(250))? {
            match event::read()? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    if app.input.is_some() {
                        app.input_key(k);
                    } else {
                        app.act(keys::action(k));
                    }
                }
                // A resize redraws on the next turn.
                _ => {}
            }
        }
        app.poll();
    }
    Ok(())
}
