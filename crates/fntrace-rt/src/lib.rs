//! fntrace in-process runtime.
pub mod site;
mod recorder;
