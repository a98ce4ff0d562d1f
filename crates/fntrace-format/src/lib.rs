//! The fntrace trace file format.
//!
//! A trace is one file: a 4 KiB header followed by fixed-size chunks. Each
//! chunk belongs to one thread's stream (or to the metadata stream) and holds
//! compact events; see `docs/FORMAT.md` for the byte-by-byte specification.
//!
//! This crate owns the layout ([`layout`]), the event encoding and the
//! writer primitives the runtime uses on its hot path ([`event`],
//! [`varint`]), and a streaming reader ([`reader`]) whose memory is bounded
//! by one chunk per open stream; [`regular`] opens input files only when
//! they are regular files, [`text`] makes names safe to print. [`writer`] builds whole trace files in memory
//! for tests and offline tools.

pub mod event;
pub mod layout;
pub mod reader;
pub mod regular;
pub mod snapshot;
pub mod text;
pub mod varint;
pub mod writer;

pub use event::{DetachReason, LibFuncInfo, ModuleInfo, OffCpu, ProcessInfo, Record, SiteInfo};
pub use reader::{
    Damage, Ending, EventCount, FastItem, Metadata, StreamItem, StreamPos, ThreadReader, Trace,
    TraceError,
};
