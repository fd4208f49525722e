//! The one error type of the library.
//!
//! Every failure is classified as a usage error (bad flags, files or JSON, detected before any
//! simulation work starts; exit code 2) or a runtime error (the simulation itself cannot go on,
//! e.g. a dead end; exit code 1). The message is always a complete sentence naming the flag,
//! file, line or field at fault.

use std::fmt;

/// Whether an error is the caller's input (usage) or the run itself (runtime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Invalid input: flags, files, JSON, API arguments. Exit code 2.
    Usage,
    /// The simulation could not complete, or an output could not be written. Exit code 1.
    Runtime,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Usage,
            message: message.into(),
        }
    }

    pub fn runtime(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Runtime,
            message: message.into(),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The process exit code a CLI should use for this error.
    pub fn exit_code(&self) -> i32 {
        match self.kind {
            ErrorKind::Usage => 2,
            ErrorKind::Runtime => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
