//! Exit statuses, and the one error type commands return: every failure
//! carries its status and whether it has already been reported.
//!
//! | status | meaning |
//! |---|---|
//! | 0 | success (also: stdout was closed by the reader, as with `| head`) |
//! | 1 | operational failure: bad input, engine or registry error, I/O |
//! | 2 | the gate ran and found problems (drift, failed check, pins problems) |
//! | 64 | usage error (EX_USAGE): unknown command or flag, bad argument combination |
//! | any | `run` only: the sandboxed command's own status (128 + signal when killed) |
//!
//! `main` maps an [`Error`] to its status exactly once ([`report`]); commands
//! never print `error:` themselves.

use std::fmt;
use std::process::ExitCode;

/// How a run ended, as the process exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Success,
    /// An operational failure: the work could not be done.
    Failure,
    /// A gate ran and found problems; its report says which.
    Gate,
    /// The command line itself was wrong (sysexits' EX_USAGE).
    Usage,
    /// `run`: the status the sandboxed command exited with, passed through.
    Sandboxed(u8),
}

impl Status {
    pub fn code(self) -> u8 {
        match self {
            Status::Success => 0,
            Status::Failure => 1,
            Status::Gate => 2,
            Status::Usage => 64,
            Status::Sandboxed(code) => code,
        }
    }
}

impl From<Status> for ExitCode {
    fn from(status: Status) -> ExitCode {
        ExitCode::from(status.code())
    }
}

/// A failed command: its exit status and, unless the command reported it
/// already (a gate's findings), the error to print.
pub struct Error {
    status: Status,
    error: Option<anyhow::Error>,
}

pub type Result<T = ()> = std::result::Result<T, Error>;

impl Error {
    /// The gate found problems and the command has printed them.
    pub fn gate() -> Error {
        Error {
            status: Status::Gate,
            error: None,
        }
    }

    /// A failure the command has already reported in full.
    pub fn reported(status: Status) -> Error {
        Error {
            status,
            error: None,
        }
    }

    /// The command line asks for something that cannot be done as asked.
    pub fn usage(message: impl fmt::Display) -> Error {
        Error {
            status: Status::Usage,
            error: Some(anyhow::anyhow!("{message}")),
        }
    }

    pub fn status(&self) -> Status {
        self.status
    }

    /// The error still to be printed, if any.
    pub fn unreported(&self) -> Option<&anyhow::Error> {
        self.error.as_ref()
    }

    /// Adds context to an unreported error (as `anyhow::Context` would).
    pub fn context(self, context: impl fmt::Display + Send + Sync + 'static) -> Error {
        Error {
            status: self.status,
            error: self.error.map(|e| e.context(context)),
        }
    }

    /// True when the error is stdout having been closed by its reader.
    fn is_broken_pipe(&self) -> bool {
        self.error.as_ref().is_some_and(|e| {
            e.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            })
        })
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            Some(e) => write!(f, "{:?}: {e:#}", self.status),
            None => write!(f, "{:?} (reported)", self.status),
        }
    }
}

/// Any error the command layer meets is an operational failure unless it
/// says otherwise; `?` converts it.
impl<E: Into<anyhow::Error>> From<E> for Error {
    fn from(error: E) -> Error {
        Error {
            status: Status::Failure,
            error: Some(error.into()),
        }
    }
}

/// Sets a status on the errors of a `Result` (`.status(Status::Usage)?`).
pub trait WithStatus<T> {
    fn status(self, status: Status) -> Result<T>;
}

impl<T, E: Into<Error>> WithStatus<T> for std::result::Result<T, E> {
    fn status(self, status: Status) -> Result<T> {
        self.map_err(|e| {
            let mut e = e.into();
            e.status = status;
            e
        })
    }
}

/// Prints what is left to print of a command's outcome and returns the exit
/// status. A closed stdout (`sunaba-images resolve … | head -1`) ends the
/// program quietly with status 0, as ripgrep does.
pub fn report(outcome: Result) -> ExitCode {
    match outcome {
        Ok(()) => Status::Success.into(),
        Err(e) if e.is_broken_pipe() => Status::Success.into(),
        Err(e) => {
            if let Some(error) = &e.error {
                eprintln!("error: {error:#}");
            }
            e.status.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_distinct_and_documented_values() {
        let codes = [
            Status::Success,
            Status::Failure,
            Status::Gate,
            Status::Usage,
        ]
        .map(Status::code);
        assert_eq!(codes, [0, 1, 2, 64]);
    }

    #[test]
    fn question_mark_makes_an_operational_failure_and_keeps_the_chain() {
        fn fails() -> Result {
            let e: std::result::Result<(), std::io::Error> =
                Err(std::io::Error::other("disk on fire"));
            anyhow::Context::context(e, "writing the pins")?;
            Ok(())
        }
        let e = fails().unwrap_err();
        assert_eq!(e.status(), Status::Failure);
        assert_eq!(
            format!("{:#}", e.unreported().unwrap()),
            "writing the pins: disk on fire"
        );
    }

    #[test]
    fn a_broken_pipe_anywhere_in_the_chain_is_quiet_success() {
        let e: Error = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("printing the table")
            .into();
        assert!(e.is_broken_pipe());
        let other: Error = anyhow::anyhow!("nope").into();
        assert!(!other.is_broken_pipe());
        assert!(!Error::gate().is_broken_pipe());
    }

    #[test]
    fn with_status_retags_and_gate_is_silent() {
        let r: std::result::Result<(), anyhow::Error> = Err(anyhow::anyhow!("two aliases"));
        let e = r.status(Status::Usage).unwrap_err();
        assert_eq!(e.status(), Status::Usage);
        assert!(Error::gate().unreported().is_none());
        assert_eq!(Error::gate().status(), Status::Gate);
    }
}
