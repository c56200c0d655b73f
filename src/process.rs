//! The one place that starts other programs. Commands are argv vectors, never
//! a shell line with interpolated strings; failures carry the command line and
//! the captured stderr so an error says what ran and what it said.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{RwLock, mpsc};
use std::time::{Duration, Instant};

/// How many trailing stderr lines an error message keeps.
const STDERR_TAIL_LINES: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("program `{program}` not found")]
    NotFound { program: String },
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}){}", stderr_suffix(.stderr))]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("`{command}` did not finish within {}", humantime::format_duration(*.after))]
    TimedOut { command: String, after: Duration },
    #[error("I/O error while running `{command}`: {source}")]
    Io {
        command: String,
        source: std::io::Error,
    },
    /// The program closed its stdin (exited, or stopped reading) while we
    /// were still writing to it. Deliberately no `io::Error` inside: a
    /// broken pipe in an error chain means *our* stdout was closed
    /// (`exit::report` ends quietly on that), and this is a failure.
    #[error("`{command}` stopped reading its input before the end ({status}){}", stderr_suffix(.stderr))]
    StoppedReading {
        command: String,
        status: String,
        stderr: String,
    },
}

/// A streamed run's failure: the program's own (it failed, or stopped
/// reading what we fed it), or the caller's code that read or wrote the
/// stream.
#[derive(Debug, thiserror::Error)]
pub enum PipeError<E> {
    #[error(transparent)]
    Process(ProcessError),
    #[error(transparent)]
    Stream(E),
}

impl<E: From<ProcessError>> PipeError<E> {
    /// Either failure as the stream code's own error type, which carries
    /// the program's: one error for a caller that keeps no other.
    pub(crate) fn into_error(self) -> E {
        match self {
            PipeError::Process(p) => E::from(p),
            PipeError::Stream(e) => e,
        }
    }
}

/// A program that could not be run, or failed, is an operational failure.
impl crate::exit::HasStatus for ProcessError {
    fn exit_status(&self) -> crate::exit::Status {
        match self {
            ProcessError::NotFound { .. }
            | ProcessError::Spawn { .. }
            | ProcessError::Failed { .. }
            | ProcessError::TimedOut { .. }
            | ProcessError::Io { .. }
            | ProcessError::StoppedReading { .. } => crate::exit::Status::Failure,
        }
    }
}

fn stderr_suffix(stderr: &str) -> String {
    let tail = tail_lines(stderr, STDERR_TAIL_LINES);
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", tail.trim_end())
    }
}

/// The last `n` lines of `text`.
pub(crate) fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

/// The environment variables no program started from here inherits: secrets
/// this process was told to read from its own environment (the signing key
/// of `--signing-key-env`). They are removed at each spawn rather than from
/// our own environment, which edition 2024 makes `unsafe` for a reason: other
/// threads may be reading it.
static WITHHELD: RwLock<BTreeSet<OsString>> = RwLock::new(BTreeSet::new());

/// Keeps the variable `name` out of the environment of every program started
/// from now on (docker, git, credential helpers), even one given it with
/// [`Cmd::env`]. Called before the secret is read, so a value that turns out
/// not to be a key is withheld too.
pub(crate) fn withhold_from_children(name: impl AsRef<OsStr>) {
    WITHHELD
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(name.as_ref().to_os_string());
}

/// The captured result of a finished program.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

/// A program invocation: argv, extra environment, working directory, stdin
/// bytes and an optional timeout. The environment is inherited otherwise
/// (DOCKER_HOST, DOCKER_CONTEXT and friends are the user's to choose).
#[derive(Debug, Clone)]
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
}

impl Cmd {
    pub fn new(program: impl AsRef<OsStr>) -> Cmd {
        Cmd {
            program: program.as_ref().to_os_string(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            stdin: None,
            timeout: None,
        }
    }
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Cmd {
        self.args.push(arg.as_ref().to_os_string());
        self
    }
    pub fn args<I, S>(mut self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Cmd {
        self.env
            .push((key.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Cmd {
        self.cwd = Some(dir.as_ref().to_path_buf());
        self
    }
    pub fn stdin_bytes(mut self, bytes: impl Into<Vec<u8>>) -> Cmd {
        self.stdin = Some(bytes.into());
        self
    }
    pub fn timeout(mut self, timeout: Duration) -> Cmd {
        self.timeout = Some(timeout);
        self
    }

    pub fn program(&self) -> &OsStr {
        &self.program
    }
    pub fn get_args(&self) -> &[OsString] {
        &self.args
    }
    pub fn get_env(&self) -> &[(OsString, OsString)] {
        &self.env
    }

    /// The command line as a person would type it (for messages and logs).
    /// Environment values are not shown: they may be private.
    pub fn display(&self) -> String {
        std::iter::once(&self.program)
            .chain(self.args.iter())
            .map(|a| sh_quote(&a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs to completion and captures stdout and stderr, whatever the exit
    /// status. Fails only when the program cannot run or times out.
    pub fn output(&self) -> Result<Output, ProcessError> {
        self.execute(None)
    }

    /// Runs to completion; a non-zero exit is an error carrying stderr.
    pub fn run(&self) -> Result<Output, ProcessError> {
        let out = self.execute(None)?;
        if out.success() {
            Ok(out)
        } else {
            Err(self.failed(&out))
        }
    }

    /// Runs to completion, handing every line of stdout and stderr (merged,
    /// in arrival order) to `on_line` as it arrives.
    pub fn stream(&self, on_line: &mut dyn FnMut(&str)) -> Result<Output, ProcessError> {
        self.execute(Some(on_line))
    }

    /// Runs with the caller's stdin, stdout and stderr (an interactive
    /// program, e.g. a sandbox started by `run`); returns its exit status.
    pub fn interactive(&self) -> Result<ExitStatus, ProcessError> {
        self.command()
            .status()
            .map_err(|source| self.spawn_error(source))
    }

    /// Runs with stdout handed to `consume` as a stream (a `docker save` of
    /// a gigabyte is never held in memory); stderr is captured for the
    /// error. No timeout: the consumer decides how long a stream may take.
    ///
    /// When `consume` fails and the program had already failed, the
    /// program's failure is the error (a truncated stream is then its
    /// symptom, not its cause); otherwise the program is killed and the
    /// consumer's error returned. A non-zero exit after a successful
    /// `consume` is still a failure.
    pub fn read_stdout<T, E>(
        &self,
        consume: impl FnOnce(&mut dyn Read) -> Result<T, E>,
    ) -> Result<T, PipeError<E>> {
        let mut command = self.command();
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|source| PipeError::Process(self.spawn_error(source)))?;
        let stderr = collect(child.stderr.take().expect("stderr is piped"));
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let result = consume(&mut stdout);
        let (status, drained) = match &result {
            Ok(_) => {
                // What the consumer left (padding after an archive's end)
                // is read, so the program can finish writing and exit.
                let drained = std::io::copy(&mut stdout, &mut std::io::sink()).map(drop);
                drop(stdout);
                (child.wait().map(|s| (s, false)), drained)
            }
            // Still holding stdout: a program that is writing is not
            // killed by a broken pipe of ours before we look.
            Err(_) => (self.exited_or_killed(&mut child), Ok(())),
        };
        let (status, killed) =
            status.map_err(|source| PipeError::Process(self.io_error(source)))?;
        let out = Output {
            status,
            stdout: String::new(),
            stderr: joined(stderr),
        };
        match result {
            _ if !killed && !status.success() => Err(PipeError::Process(self.failed(&out))),
            Err(e) => Err(PipeError::Stream(e)),
            Ok(v) => {
                drained.map_err(|source| PipeError::Process(self.io_error(source)))?;
                Ok(v)
            }
        }
    }

    /// Runs with stdin fed by `produce` as a stream (a `docker load` of an
    /// archive written as it is made); stdout and stderr are captured.
    ///
    /// A program that exits or closes its stdin before `produce` is done is
    /// a [`ProcessError`] naming it (its own failure with its stderr, or
    /// [`ProcessError::StoppedReading`]), never the bare broken pipe the
    /// write saw. When `produce` fails for another reason the program is
    /// killed (so a half-written archive is never taken for a whole one)
    /// and its error returned.
    pub fn write_stdin<T, E>(
        &self,
        produce: impl FnOnce(&mut dyn Write) -> Result<T, E>,
    ) -> Result<(T, Output), PipeError<E>> {
        let mut command = self.command();
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|source| PipeError::Process(self.spawn_error(source)))?;
        let stdout = collect(child.stdout.take().expect("stdout is piped"));
        let stderr = collect(child.stderr.take().expect("stderr is piped"));
        let mut stdin = WatchedStdin {
            inner: child.stdin.take().expect("stdin is piped"),
            closed: false,
        };
        let result = produce(&mut stdin);
        // ChildStdin is unbuffered; a flush can still see the pipe close.
        let _ = stdin.flush();
        let closed = stdin.closed;
        let status = if result.is_err() && !closed {
            // Killed before it sees EOF: half an archive must not look
            // like a whole one to it.
            let status = self.exited_or_killed(&mut child);
            drop(stdin);
            status.map(|(s, _)| s)
        } else {
            drop(stdin);
            child.wait()
        }
        .map_err(|source| PipeError::Process(self.io_error(source)))?;
        let out = Output {
            status,
            stdout: joined(stdout),
            stderr: joined(stderr),
        };
        if closed {
            return Err(PipeError::Process(if status.success() {
                ProcessError::StoppedReading {
                    command: self.display(),
                    status: describe_status(&status),
                    stderr: out.stderr.clone(),
                }
            } else {
                self.failed(&out)
            }));
        }
        match result {
            Err(e) => Err(PipeError::Stream(e)),
            Ok(_) if !status.success() => Err(PipeError::Process(self.failed(&out))),
            Ok(v) => Ok((v, out)),
        }
    }

    /// After the stream side gave up: a program that is exiting on its own
    /// gets 200 ms to do so (its status then tells whether it failed
    /// first), else it is killed. True when we killed it.
    fn exited_or_killed(&self, child: &mut Child) -> std::io::Result<(ExitStatus, bool)> {
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            if let Some(status) = child.try_wait()? {
                return Ok((status, false));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        child.wait().map(|s| (s, true))
    }

    fn io_error(&self, source: std::io::Error) -> ProcessError {
        ProcessError::Io {
            command: self.display(),
            source,
        }
    }

    /// The std command: program, argv, extra environment less what is
    /// withheld from children, directory.
    fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.program);
        command.args(&self.args);
        for (k, v) in &self.env {
            command.env(k, v);
        }
        let withheld = WITHHELD
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for name in withheld.iter() {
            command.env_remove(name);
        }
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        command
    }

    fn spawn_error(&self, source: std::io::Error) -> ProcessError {
        if source.kind() == std::io::ErrorKind::NotFound {
            ProcessError::NotFound {
                program: self.program.to_string_lossy().into_owned(),
            }
        } else {
            ProcessError::Spawn {
                command: self.display(),
                source,
            }
        }
    }

    /// The error for a finished command that exited non-zero.
    pub fn failed(&self, out: &Output) -> ProcessError {
        ProcessError::Failed {
            command: self.display(),
            status: describe_status(&out.status),
            stderr: if out.stderr.trim().is_empty() {
                out.stdout.clone()
            } else {
                out.stderr.clone()
            },
        }
    }

    /// Runs the program, its `stdin_bytes` (if any) fed from a writer
    /// thread, so a program that writes a lot before reading cannot
    /// deadlock us, while stdout and stderr are read.
    fn execute(&self, on_line: Option<&mut dyn FnMut(&str)>) -> Result<Output, ProcessError> {
        let mut command = self.command();
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = command.spawn().map_err(|source| self.spawn_error(source))?;
        let stdin = child.stdin.take();
        std::thread::scope(|scope| {
            let writer = (self.stdin.as_deref())
                .zip(stdin)
                .map(|(bytes, mut stdin)| scope.spawn(move || stdin.write_all(bytes)));
            let out = self.collect(&mut child, on_line)?;
            match writer.map(|w| w.join().expect("the stdin writer does not panic")) {
                // A program that failed says more in its stderr than a pipe.
                None | Some(Ok(())) => Ok(out),
                Some(Err(_)) if !out.success() => Ok(out),
                Some(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    // It exited 0 without taking all of its input.
                    Err(ProcessError::StoppedReading {
                        command: self.display(),
                        status: describe_status(&out.status),
                        stderr: out.stderr,
                    })
                }
                Some(Err(source)) => Err(self.io_error(source)),
            }
        })
    }

    /// Reads stdout and stderr to their end and waits for the exit status,
    /// within the timeout.
    fn collect(
        &self,
        child: &mut Child,
        mut on_line: Option<&mut dyn FnMut(&str)>,
    ) -> Result<Output, ProcessError> {
        let io_err = |source| ProcessError::Io {
            command: self.display(),
            source,
        };
        let (tx, rx) = mpsc::channel::<(bool, Vec<u8>)>();
        let readers = [
            spawn_reader(
                child.stdout.take().expect("stdout is piped"),
                true,
                tx.clone(),
            ),
            spawn_reader(child.stderr.take().expect("stderr is piped"), false, tx),
        ];

        let deadline = self.timeout.map(|t| Instant::now() + t);
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        loop {
            let wait = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            match rx.recv_timeout(wait.min(Duration::from_millis(200))) {
                Ok((is_stdout, line)) => {
                    if let Some(cb) = on_line.as_deref_mut() {
                        cb(String::from_utf8_lossy(&line).trim_end_matches(['\n', '\r']));
                    }
                    if is_stdout {
                        stdout.extend_from_slice(&line);
                    } else {
                        stderr.extend_from_slice(&line);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(self.kill_timed_out(child));
                    }
                }
            }
        }
        for r in readers {
            let _ = r.join();
        }
        let status = loop {
            match child.try_wait().map_err(io_err)? {
                Some(status) => break status,
                None if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Err(self.kill_timed_out(child));
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        Ok(Output {
            status,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    fn kill_timed_out(&self, child: &mut Child) -> ProcessError {
        let _ = child.kill();
        let _ = child.wait();
        ProcessError::TimedOut {
            command: self.display(),
            after: self.timeout.unwrap_or_default(),
        }
    }
}

/// A child's stdin that remembers whether the child closed it under us.
struct WatchedStdin {
    inner: std::process::ChildStdin,
    closed: bool,
}

impl WatchedStdin {
    fn note<T>(&mut self, r: std::io::Result<T>) -> std::io::Result<T> {
        if r.as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
        {
            self.closed = true;
        }
        r
    }
}

impl Write for WatchedStdin {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = self.inner.write(buf);
        self.note(r)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.note(r)
    }
}

/// Reads a pipe to its end on a thread of its own.
fn collect(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

fn joined(reader: std::thread::JoinHandle<Vec<u8>>) -> String {
    String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned()
}

fn spawn_reader(
    pipe: impl Read + Send + 'static,
    is_stdout: bool,
    tx: mpsc::Sender<(bool, Vec<u8>)>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send((is_stdout, line)).is_err() {
                        break;
                    }
                }
            }
        }
    })
}

pub(crate) fn describe_status(status: &ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exit status {code}"),
        None => {
            use std::os::unix::process::ExitStatusExt;
            match status.signal() {
                Some(sig) => format!("killed by signal {sig}"),
                None => status.to_string(),
            }
        }
    }
}

/// Quotes a word for POSIX sh: words of only safe characters stay as they
/// are, anything else is single-quoted. The one quoter of the crate: command
/// lines shown to people ([`Cmd::display`], `run --print`) and the words the
/// rendered healthcheck passes to its `check` function.
pub(crate) fn sh_quote(word: &str) -> String {
    // An allowlist, not a list of specials: a character a shell might treat
    // specially (`!`, `{`, `~`, non-ASCII) gets quoted rather than missed.
    let safe = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Writes `script` to `path` as a program (mode 0755) for a test to run,
/// from a child process. Had this process opened it for writing, a child
/// forked meanwhile on another test thread would hold that descriptor
/// until its own exec, and running the program then fails with ETXTBSY
/// ("Text file busy"): 5 of 30 lib test runs at 8 threads failed so.
#[cfg(test)]
pub(crate) fn write_program(path: &Path, script: &str) {
    Cmd::new("/bin/sh")
        .args(["-c", r#"cat > "$0" && chmod 755 "$0""#])
        .arg(path)
        .stdin_bytes(script)
        .run()
        .expect("writing a test program");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_that_cannot_run_or_fails_is_an_operational_failure() {
        use crate::exit::{HasStatus, Status};
        let missing = Cmd::new("/nonexistent/sunaba-test-program")
            .run()
            .unwrap_err();
        assert!(
            matches!(missing, ProcessError::NotFound { .. }),
            "{missing}"
        );
        let failed = Cmd::new("false").run().unwrap_err();
        assert!(matches!(failed, ProcessError::Failed { .. }), "{failed}");
        let io = || std::io::Error::other("x");
        for e in [
            missing,
            failed,
            ProcessError::Spawn {
                command: "x".into(),
                source: io(),
            },
            ProcessError::TimedOut {
                command: "x".into(),
                after: Duration::from_secs(1),
            },
            ProcessError::Io {
                command: "x".into(),
                source: io(),
            },
            ProcessError::StoppedReading {
                command: "x".into(),
                status: "exit status: 1".into(),
                stderr: String::new(),
            },
        ] {
            assert_eq!(e.exit_status(), Status::Failure, "{e}");
        }
    }

    #[test]
    fn a_pipe_error_is_the_stream_codes_own_error_carrying_the_programs() {
        #[derive(Debug, thiserror::Error)]
        enum Stream {
            #[error("not a tar archive")]
            NotTar,
            #[error(transparent)]
            Program(#[from] ProcessError),
        }
        let stream: PipeError<Stream> = PipeError::Stream(Stream::NotTar);
        assert!(matches!(stream.into_error(), Stream::NotTar));
        let failed = Cmd::new("false")
            .read_stdout(|_| Ok::<_, Stream>(()))
            .unwrap_err();
        assert!(
            matches!(
                failed.into_error(),
                Stream::Program(ProcessError::Failed { .. })
            ),
            "the program's failure, in the stream's type"
        );
    }

    #[test]
    fn sh_quote_words() {
        assert_eq!(sh_quote("rg"), "rg");
        assert_eq!(sh_quote("--version"), "--version");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote("ripgrep ([0-9]+)"), "'ripgrep ([0-9]+)'");
    }

    #[test]
    fn captures_stdout_and_stderr_separately() {
        let out = Cmd::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .output()
            .unwrap();
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn run_fails_with_command_and_stderr() {
        let err = Cmd::new("sh")
            .args(["-c", "echo 'it broke' >&2; exit 4"])
            .run()
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("exit status 4"), "{msg}");
        assert!(msg.contains("it broke"), "{msg}");
        assert!(msg.contains("sh -c"), "{msg}");
    }

    #[test]
    fn missing_program_is_not_found() {
        let err = Cmd::new("/nonexistent/sunaba-nope").output().unwrap_err();
        assert!(
            matches!(err, ProcessError::NotFound { ref program } if program == "/nonexistent/sunaba-nope"),
            "{err:?}"
        );
    }

    #[test]
    fn arguments_are_not_interpreted_by_a_shell() {
        let out = Cmd::new("printf")
            .args(["%s|", "$(echo no)", "a b", "*"])
            .run()
            .unwrap();
        assert_eq!(out.stdout, "$(echo no)|a b|*|");
    }

    #[test]
    fn timeout_kills_the_program() {
        let started = Instant::now();
        let err = Cmd::new("sleep")
            .arg("30")
            .timeout(Duration::from_millis(300))
            .output()
            .unwrap_err();
        assert!(matches!(err, ProcessError::TimedOut { .. }), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn stream_sees_every_line_and_stdin_is_fed() {
        let mut seen = Vec::new();
        let out = Cmd::new("sh")
            .args(["-c", "cat; echo done >&2"])
            .stdin_bytes("one\ntwo\n")
            .stream(&mut |l| seen.push(l.to_string()))
            .unwrap();
        assert!(out.success());
        assert_eq!(out.stdout, "one\ntwo\n");
        seen.sort();
        assert_eq!(seen, ["done", "one", "two"]);
    }

    /// More than a pipe holds, so a program that does not read it cannot
    /// have taken it all by the time it exits.
    fn more_than_a_pipe_holds() -> Vec<u8> {
        vec![b'x'; 4 << 20]
    }

    #[test]
    fn a_program_that_exits_0_before_reading_its_stdin_bytes_fails_naming_it() {
        // `output` does not judge the exit status, but input left unread
        // is not success either; before, the writer's broken pipe was
        // dropped and the run looked fine.
        let err = Cmd::new("true")
            .stdin_bytes(more_than_a_pipe_holds())
            .output()
            .unwrap_err();
        assert!(
            matches!(&err, ProcessError::StoppedReading { command, .. } if command == "true"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("`true` stopped reading its input before the end"),
            "{err}"
        );
    }

    #[test]
    fn a_program_that_fails_while_fed_bytes_reports_its_own_failure() {
        let err = Cmd::new("sh")
            .args(["-c", "echo refused >&2; exit 3"])
            .stdin_bytes(more_than_a_pipe_holds())
            .run()
            .unwrap_err();
        assert!(
            matches!(&err, ProcessError::Failed { status, stderr, .. }
                if status == "exit status 3" && stderr.contains("refused")),
            "{err:?}"
        );
    }

    #[test]
    fn a_withheld_variable_reaches_no_program_even_one_given_it() {
        let name = "SUNABA_TEST_WITHHELD_FROM_CHILDREN";
        let env = || {
            Cmd::new("env")
                .env(name, "secret")
                .env("SUNABA_TEST_KEPT", "kept")
                .run()
                .unwrap()
                .stdout
        };
        assert!(env().contains(&format!("{name}=secret\n")), "{}", env());
        withhold_from_children(name);
        let seen = env();
        assert!(!seen.contains(name), "{seen}");
        assert!(seen.contains("SUNABA_TEST_KEPT=kept\n"), "{seen}");
        // Every way of starting a program goes through one command builder.
        let streamed = Cmd::new("env")
            .env(name, "secret")
            .read_stdout(|r| {
                let mut s = String::new();
                r.read_to_string(&mut s).map(|_| s)
            })
            .unwrap();
        assert!(!streamed.contains(name), "{streamed}");
    }

    #[test]
    fn display_quotes_what_a_shell_would_split() {
        let cmd = Cmd::new("docker").args(["run", "--label", "a=b c", "it's"]);
        assert_eq!(cmd.display(), r"docker run --label 'a=b c' 'it'\''s'");
    }
}
