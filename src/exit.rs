//! Exit statuses, and how a command's error becomes one: the error decides.
//!
//! Each module's error type says which [`Status`] each of its kinds ends a
//! run with ([`HasStatus`], as just's `Error::code()`); a command returns
//! its error ([`Result`]) and never chooses a status. [`report`] maps it
//! once: it walks the error's chain from the outside in and the first
//! cause it recognises decides; a chain it recognises nothing in is an
//! operational failure. The statuses and what each means are in
//! docs/contracts.md ("Exit statuses").
//!
//! `exit` is below every module that owns an error, so it cannot name
//! their types: the top of the crate hands [`report`] the table of kinds
//! it recognises (`commands::ERROR_KINDS`, a [`recognise`] per type).
//! Two kinds are `exit`'s own: a command that printed its own report of
//! what went wrong ends with [`Reported`], and our stdout closed by its
//! reader is [`StdoutError::Closed`] (quiet success).

use std::error::Error as StdError;
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

/// An error that says which status it ends a run with, kind by kind. A
/// kind that wraps another error whose kind decides (a name that does not
/// parse, inside a file error) returns that error's status.
pub(crate) trait HasStatus {
    fn exit_status(&self) -> Status;
}

/// A command's failure: any error, with its chain of causes.
pub(crate) type Error = anyhow::Error;

pub(crate) type Result<T = ()> = std::result::Result<T, Error>;

/// Recognises one kind of error: its status when `cause` is of that kind.
pub(crate) type Recognise = fn(&(dyn StdError + 'static)) -> Option<Status>;

/// The [`Recognise`] of the error type `E`.
pub(crate) fn recognise<E: HasStatus + StdError + 'static>(
    cause: &(dyn StdError + 'static),
) -> Option<Status> {
    cause.downcast_ref::<E>().map(HasStatus::exit_status)
}

/// How a command ends that has printed its own report of what went wrong
/// (a gate's findings, a build's summary): nothing is left to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Reported {
    /// A gate ran, made every check it was asked to, and found problems.
    #[error("the gate found problems (reported above)")]
    Findings,
    /// Some of the work could not be done, or some check could not be
    /// made: could not check is not the same as found wrong.
    #[error("some of the work failed (reported above)")]
    Failures,
    /// `run`: the sandboxed command ended with this status; its output was
    /// its report.
    #[error("the sandboxed command exited with status {0}")]
    Sandboxed(u8),
}

impl Reported {
    /// A gate's end once its report is printed: found `problems`, and
    /// could not make `unchecked` of its checks.
    pub(crate) fn verdict(problems: usize, unchecked: usize) -> std::result::Result<(), Reported> {
        match (problems, unchecked) {
            (0, 0) => Ok(()),
            (_, 0) => Err(Reported::Findings),
            _ => Err(Reported::Failures),
        }
    }
}

impl HasStatus for Reported {
    fn exit_status(&self) -> Status {
        match self {
            Reported::Findings => Status::Gate,
            Reported::Failures => Status::Failure,
            Reported::Sandboxed(code) => Status::Sandboxed(*code),
        }
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

/// Only [`StdoutError::Closed`] ends quietly: a broken pipe to a child (a
/// program we feed), a socket or a file is a failure like any other.
impl HasStatus for StdoutError {
    fn exit_status(&self) -> Status {
        match self {
            StdoutError::Closed => Status::Success,
            StdoutError::Io(_) => Status::Failure,
        }
    }
}

/// `exit`'s own kinds, recognised before the caller's.
const OWN_KINDS: [Recognise; 2] = [recognise::<Reported>, recognise::<StdoutError>];

/// The status `error` ends a run with: the first cause in its chain, from
/// the outside in, that `kinds` (or `exit`'s own) recognise decides; an
/// operational failure when none is recognised.
pub(crate) fn status_of(error: &Error, kinds: &[Recognise]) -> Status {
    error
        .chain()
        .find_map(|cause| OWN_KINDS.iter().chain(kinds).find_map(|kind| kind(cause)))
        .unwrap_or(Status::Failure)
}

/// `run`'s outcome from the sandboxed command's exit status: its own code
/// passed through (1 when it does not fit), 128 + the signal that killed it.
pub(crate) fn sandboxed(status: std::process::ExitStatus) -> Result {
    use std::os::unix::process::ExitStatusExt;
    let code = match status.code() {
        Some(0) => return Ok(()),
        Some(code) => u8::try_from(code).unwrap_or(1),
        None => {
            let signal = status.signal().unwrap_or(0);
            128u8.saturating_add(u8::try_from(signal).unwrap_or(0))
        }
    };
    Err(Reported::Sandboxed(code).into())
}

/// Prints what is left to print of a command's outcome (`error: …`, unless
/// the command [`Reported`] it, or the run ends quietly) and returns its
/// exit status, the one mapping from errors to statuses. A closed stdout
/// (`sunaba-images resolve … | head -1`) ends the program quietly with
/// status 0, as ripgrep does.
pub(crate) fn report(outcome: Result, kinds: &[Recognise]) -> ExitCode {
    let Err(error) = outcome else {
        return Status::Success.into();
    };
    let status = status_of(&error, kinds);
    if status != Status::Success && error.downcast_ref::<Reported>().is_none() {
        eprintln!("error: {}", message(&error));
    }
    status.into()
}

/// `error`'s context and causes on one line, each cause once: many errors
/// quote their source in their own message ("cannot read x: No such file"),
/// and anyhow's `{:#}` would print it again after them.
fn message(error: &Error) -> String {
    crate::error_chain::error_chain(error.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_quoted_in_its_errors_message_is_printed_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read images.toml: {source}")]
        struct Unreadable {
            source: std::io::Error,
        }
        let e = anyhow::Error::new(Unreadable {
            source: std::io::Error::other("No such file or directory"),
        })
        .context("loading the image family manifest");
        assert_eq!(
            message(&e),
            "loading the image family manifest: cannot read images.toml: No such file or directory"
        );
        let plain = anyhow::Error::new(std::io::Error::other("disk on fire")).context("writing");
        assert_eq!(message(&plain), "writing: disk on fire");
    }

    /// A kind of the caller's, for the walk.
    #[derive(Debug, thiserror::Error)]
    #[error("no such variant")]
    struct Undeclared;

    impl HasStatus for Undeclared {
        fn exit_status(&self) -> Status {
            Status::Usage
        }
    }

    /// A kind of the caller's that wraps another and says its own status.
    #[derive(Debug, thiserror::Error)]
    #[error("the journal is unreadable")]
    struct Unreadable(#[source] Undeclared);

    impl HasStatus for Unreadable {
        fn exit_status(&self) -> Status {
            Status::Failure
        }
    }

    const KINDS: &[Recognise] = &[recognise::<Undeclared>, recognise::<Unreadable>];

    fn status(e: impl Into<Error>) -> Status {
        status_of(&e.into(), KINDS)
    }

    #[test]
    fn a_sandboxed_status_is_passed_through_and_a_signal_is_128_plus() {
        use std::os::unix::process::ExitStatusExt;
        let of = |raw| match sandboxed(std::process::ExitStatus::from_raw(raw)) {
            Ok(()) => Status::Success,
            Err(e) => status_of(&e, &[]),
        };
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
    fn each_reported_kind_has_its_status() {
        assert_eq!(Reported::Findings.exit_status(), Status::Gate);
        assert_eq!(Reported::Failures.exit_status(), Status::Failure);
        assert_eq!(Reported::Sandboxed(3).exit_status(), Status::Sandboxed(3));
        assert_eq!(status(Reported::Findings), Status::Gate);
    }

    #[test]
    fn a_verdict_tells_could_not_check_from_found_wrong() {
        assert_eq!(Reported::verdict(0, 0), Ok(()));
        assert_eq!(Reported::verdict(3, 0), Err(Reported::Findings));
        assert_eq!(Reported::verdict(3, 1), Err(Reported::Failures));
        assert_eq!(Reported::verdict(0, 1), Err(Reported::Failures));
    }

    #[test]
    fn an_error_nothing_recognises_is_an_operational_failure_and_keeps_its_chain() {
        let e =
            anyhow::Error::new(std::io::Error::other("disk on fire")).context("writing the pins");
        assert_eq!(format!("{e:#}"), "writing the pins: disk on fire");
        assert_eq!(status(e), Status::Failure);
    }

    #[test]
    fn a_recognised_kind_decides_whatever_the_context() {
        let e = anyhow::Error::new(Undeclared).context("building the image family");
        assert_eq!(status(e), Status::Usage);
        assert_eq!(
            status_of(&Undeclared.into(), &[]),
            Status::Failure,
            "not in the table"
        );
    }

    /// A kind nobody recognises, wrapping one that is recognised.
    #[derive(Debug, thiserror::Error)]
    #[error("reading the pins")]
    struct Unrecognised(#[source] Undeclared);

    #[test]
    fn the_outermost_kind_recognised_decides() {
        assert_eq!(status(Unreadable(Undeclared)), Status::Failure);
        assert_eq!(status(Unrecognised(Undeclared)), Status::Usage);
    }

    fn broken_pipe() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::BrokenPipe)
    }

    #[test]
    fn a_closed_stdout_is_quiet_success() {
        let closed =
            anyhow::Error::new(StdoutError::from(broken_pipe())).context("printing the table");
        assert_eq!(status(closed), Status::Success);
        let other = anyhow::Error::new(StdoutError::from(std::io::Error::other("EIO")))
            .context("printing the table");
        assert_eq!(status(other), Status::Failure);
    }

    #[test]
    fn a_broken_pipe_to_a_child_is_a_failure() {
        // What `docker load` dying while we stream an image to it used to
        // end as: an io::Error of kind BrokenPipe somewhere in the chain.
        let feeding = anyhow::Error::new(broken_pipe()).context("feeding `docker load`");
        assert_eq!(status(feeding), Status::Failure);
        let child = crate::process::ProcessError::Io {
            command: "docker load".into(),
            source: broken_pipe(),
        };
        assert_eq!(status(child), Status::Failure);
    }
}
