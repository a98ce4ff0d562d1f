//! The library side of the `fntrace` command: symbolisation, call
//! reconstruction, attaching to a running process, the views (`report`, `replay`, `info`, `graph`,
//! `report --diff`), function selectors (`pattern`), the exports, `record`, the `live` client, the
//! markers listing and the terminal browser (`tui`). The binary (`main.rs`) only parses arguments and calls
//! one function here per command.

pub mod analysis;
pub mod attach;
pub mod demo;
pub mod diff;
pub mod error;
pub mod export;
pub mod functions;
pub mod graph;
pub mod info;
pub mod limits;
pub mod live;
pub mod markers;
pub mod pattern;
pub mod probe;
pub mod progress;
pub mod record;
pub mod replay;
pub mod report;
pub mod select;
pub mod signals;
pub mod snapshot;
pub mod symbols;
pub mod tracefile;
pub mod tui;

pub use error::{Error, Result};
