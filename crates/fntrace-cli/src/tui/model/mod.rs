//! What `fntrace tui` knows about a trace: the chunk index built when it
//! opens ([`index`]) and the lazily loaded call tree of each thread
//! ([`tree`]).

pub mod index;
pub mod tree;
