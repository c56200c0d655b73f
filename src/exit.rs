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
//! | 130, 143 | stopped by SIGINT / SIGTERM (`scratch`: its temporary files removed first) |
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
pub(crate) struct Error {
    status: Status,
    error: Option<anyhow::Error>,
}

pub(crate) type Result<T = ()> = std::result::Result<T, Error>;

impl Error {
    /// The gate found problems and the command has printed them.
    pub(crate) fn gate() -> Error {
        Error {
            status: Status::Gate,
            error: None,
        }
    }

    /// A failure the command has already reported in full.
    pub(crate) fn reported(status: Status) -> Error {
        Error {
            status,
            error: None,
        }
    }

    /// The command line asks for something that cannot be done as asked.
    pub(crate) fn usage(message: impl fmt::Display) -> Error {
        Error {
            status: Status::Usage,
            error: Some(anyhow::anyhow!("{message}")),
        }
    }

    #[cfg(test)]
    pub(crate) fn status(&self) -> Status {
        self.status
    }

    /// The error still to be printed, if any.
    #[cfg(test)]
    pub(crate) fn unreported(&self) -> Option<&anyhow::Error> {
        self.error.as_ref()
    }

    /// True when the error is our stdout having been closed by its reader.
    /// Only [`StdoutError::Closed`] says so: a broken pipe to a child (a
    /// program we feed), a socket or a file is a failure like any other.
    fn is_stdout_closed(&self) -> bool {
        self.error.as_ref().is_some_and(|e| {
            e.chain()
                .any(|cause| matches!(cause.downcast_ref(), Some(StdoutError::Closed)))
        })
    }
}

/// Writing to our own stdout failed. Raised only where stdout is written
/// (`commands::write_stdout`), so a closed stdout cannot be confused with a
/// broken pipe anywhere else.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StdoutError {
    /// The reader went away (`sunaba-images resolve … | head -1`).
    #[error("stdout was closed by its reader")]
    Closed,
    #[error("cannot write to stdout: {0}")]
    Io(#[source] std::io::Error),
}

impl From<std::io::Error> for StdoutError {
    fn from(e: std::io::Error) -> StdoutError {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            StdoutError::Closed
        } else {
            StdoutError::Io(e)
        }
    }
}

/// The status a command's outcome exits with (what [`report`] returns).
pub(crate) fn status_of(outcome: &Result) -> Status {
    match outcome {
        Ok(()) => Status::Success,
        Err(e) if e.is_stdout_closed() => Status::Success,
        Err(e) => e.status,
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
        let error = error.into();
        Error {
            status: status_for(&error),
            error: Some(error),
        }
    }
}

/// `run`'s outcome from the sandboxed command's exit status: its own code
/// passed through (1 when it does not fit), 128 + the signal that killed it.
pub(crate) fn sandboxed(status: std::process::ExitStatus) -> Result {
    use std::os::unix::process::ExitStatusExt;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(Error::reported(Status::Sandboxed(
            u8::try_from(code).unwrap_or(1),
        ))),
        None => {
            let signal = status.signal().unwrap_or(0);
            Err(Error::reported(Status::Sandboxed(
                128u8.saturating_add(u8::try_from(signal).unwrap_or(0)),
            )))
        }
    }
}

/// The one mapping from kinds of failure to exit statuses: a name the
/// project does not declare ([`crate::name::Unknown`]) or text that is no
/// name at all ([`crate::name::Invalid`]: a reference or platform that does
/// not parse, on the command line or in a file such as image_pins.json),
/// anywhere in the chain, is a usage error; anything else is an operational
/// failure. Gates set their own status ([`Error::gate`]).
fn status_for(error: &anyhow::Error) -> Status {
    if error.chain().any(|cause| {
        cause.downcast_ref::<crate::name::Unknown>().is_some()
            || cause.downcast_ref::<crate::name::Invalid>().is_some()
    }) {
        Status::Usage
    } else {
        Status::Failure
    }
}

/// Sets a status on the errors of a `Result` (`.status(Status::Usage)?`).
pub(crate) trait WithStatus<T> {
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
pub(crate) fn report(outcome: Result) -> ExitCode {
    let status = status_of(&outcome);
    if let Err(e) = &outcome
        && status != Status::Success
        && let Some(error) = &e.error
    {
        eprintln!("error: {error:#}");
    }
    status.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandboxed_status_is_passed_through_and_a_signal_is_128_plus() {
        use std::os::unix::process::ExitStatusExt;
        let of = |raw| status_of(&sandboxed(std::process::ExitStatus::from_raw(raw)));
        assert_eq!(of(0), Status::Success);
        assert_eq!(of(3 << 8), Status::Sandboxed(3));
        assert_eq!(of(9), Status::Sandboxed(137));
    }

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

    fn broken_pipe() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::BrokenPipe)
    }

    #[test]
    fn a_closed_stdout_is_quiet_success() {
        let e: Error = anyhow::Error::new(StdoutError::from(broken_pipe()))
            .context("printing the table")
            .into();
        assert_eq!(status_of(&Err(e)), Status::Success);
        let other: Error = anyhow::Error::new(StdoutError::from(std::io::Error::other("EIO")))
            .context("printing the table")
            .into();
        assert_eq!(status_of(&Err(other)), Status::Failure);
        assert_eq!(status_of(&Err(Error::gate())), Status::Gate);
    }

    #[test]
    fn a_broken_pipe_to_a_child_is_a_failure() {
        // What `docker load` dying while we stream an image to it used to
        // end as: an io::Error of kind BrokenPipe somewhere in the chain.
        let feeding: Error = anyhow::Error::new(broken_pipe())
            .context("feeding `docker load`")
            .into();
        assert_eq!(status_of(&Err(feeding)), Status::Failure);
        let child: Error = crate::process::ProcessError::Io {
            command: "docker load".into(),
            source: broken_pipe(),
        }
        .into();
        assert_eq!(status_of(&Err(child)), Status::Failure);
    }

    #[test]
    fn an_unknown_name_is_a_usage_error_whatever_the_context() {
        let e: Error = anyhow::Error::new(crate::name::Unknown::new(
            "variant",
            "rust",
            "images.toml",
            ["base"],
        ))
        .context("building the image family")
        .into();
        assert_eq!(e.status(), Status::Usage);
        assert_eq!(
            format!("{:#}", e.unreported().unwrap()),
            "building the image family: unknown variant `rust` (images.toml declares: base)"
        );
    }

    #[test]
    fn text_that_is_no_name_is_a_usage_error_whatever_the_context() {
        let invalid = "-v=/:/host".parse::<crate::name::Repository>().unwrap_err();
        let e: Error = anyhow::Error::new(invalid)
            .context("reading image_pins.json")
            .into();
        assert_eq!(e.status(), Status::Usage);
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
