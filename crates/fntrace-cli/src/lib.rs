//! The analysis side of fntrace: symbolisation, call reconstruction and the
//! `report`, `replay` and `info` views, used by the `fntrace` binary.

pub mod analysis;
pub mod commands;
pub mod export;
pub mod markers;
pub mod probe;
pub mod symbols;
