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
    /// The message as the command line words it (options spelled as flags).
    message: String,
    /// The option at fault, as a flag (`--num-workers`), when the message is about one.
    subject: Option<String>,
    /// The message without the subject (`message` is `"{subject}: {detail}"` when there is one).
    detail: Option<String>,
    /// The message for callers of the Python API, where its wording (not just the spelling of
    /// the subject) differs from the command line's.
    api_message: Option<String>,
}

impl Error {
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message.into())
    }

    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Runtime, message.into())
    }

    fn new(kind: ErrorKind, message: String) -> Self {
        Self {
            kind,
            message,
            subject: None,
            detail: None,
            api_message: None,
        }
    }

    /// A usage error about one option: `"{flag}: {detail}"` on the command line; other fronts
    /// name the option their own way (see `config::spelling`).
    pub fn usage_about(flag: &str, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        let mut error = Self::usage(format!("{flag}: {detail}"));
        error.subject = Some(flag.to_owned());
        error.detail = Some(detail);
        error
    }

    /// The same error worded for the Python API (`replay_concurrency` rather than
    /// `--replay-concurrency`, and the reference API's sentence where it has its own).
    pub fn with_api_message(mut self, message: impl Into<String>) -> Self {
        self.api_message = Some(message.into());
        self
    }

    /// The flag the error is about, if it is about one.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// The message without its subject (the whole message when there is no subject).
    pub fn detail(&self) -> &str {
        self.detail.as_deref().unwrap_or(&self.message)
    }

    /// The Python API's own wording, where it has one.
    pub fn api_message(&self) -> Option<&str> {
        self.api_message.as_deref()
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
