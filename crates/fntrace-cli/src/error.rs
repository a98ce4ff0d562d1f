//! The error type of the library side of the `fntrace` command: every
//! failure a view, an export, `record` or `live` reports, with the context
//! its message starts with (the binaries print it with its sources,
//! `context: cause`).

use std::io;

/// What went wrong in a command of the `fntrace` CLI.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A trace that cannot be read at all.
    #[error(transparent)]
    Trace(#[from] fntrace_format::TraceError),
    /// An I/O error without more to say (writing the output).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// An I/O error while doing what `context` says.
    #[error("{context}")]
    IoAt {
        /// What was being done (usually starting with the file).
        context: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A regular expression that does not compile, with the option or
    /// argument it was given to.
    #[error("{context}")]
    Pattern {
        /// Which pattern (`bad --filter "("`).
        context: String,
        /// Why it does not compile.
        #[source]
        source: regex::Error,
    },
    /// A bad `-A`/`-R` spec.
    #[error(transparent)]
    Spec(#[from] fntrace_rt::config::SpecError),
    /// A file that is not the object file it should be.
    #[error("{context}")]
    Object {
        /// The file and what was read from it.
        context: String,
        /// What `object` found wrong.
        #[source]
        source: object::Error,
    },
    /// An error inside something `context` names (a file's section).
    #[error("{context}")]
    In {
        /// Where it happened.
        context: String,
        /// The error.
        #[source]
        source: Box<Error>,
    },
    /// A value that cannot be used; the message names it and says why.
    #[error("{0}")]
    Invalid(String),
}

/// The result of the CLI's library functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::IoAt`] (for `map_err`).
    pub fn io_at(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let context = context.into();
        move |source| Error::IoAt { context, source }
    }

    /// An [`Error::Pattern`] (for `map_err`).
    pub fn pattern(context: impl Into<String>) -> impl FnOnce(regex::Error) -> Error {
        let context = context.into();
        move |source| Error::Pattern { context, source }
    }
}
