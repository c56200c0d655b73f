//! The one place that starts other programs. Commands are argv vectors, never
//! a shell line with interpolated strings; failures carry the command line and
//! the captured stderr so an error says what ran and what it said.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Mutex, mpsc};
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
    /// The program ended (with success) before it had read all of its input:
    /// what it did, it did with part of what it was given.
    #[error("`{command}` exited before reading all of its input ({written} bytes taken)")]
    InputNotRead { command: String, written: u64 },
    /// The input to feed the program could not be read; the program was
    /// stopped so that it cannot act on part of it.
    #[error("cannot read the input for `{command}`: {source}")]
    Input {
        command: String,
        source: std::io::Error,
    },
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
pub fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
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
        self.execute(None, None)
    }

    /// Runs to completion; a non-zero exit is an error carrying stderr.
    pub fn run(&self) -> Result<Output, ProcessError> {
        let out = self.execute(None, None)?;
        if out.success() {
            Ok(out)
        } else {
            Err(self.failed(&out))
        }
    }

    /// Runs to completion, handing every line of stdout and stderr (merged,
    /// in arrival order) to `on_line` as it arrives.
    pub fn stream(&self, on_line: &mut dyn FnMut(&str)) -> Result<Output, ProcessError> {
        self.execute(None, Some(on_line))
    }

    /// Runs to completion with `input` streamed to the program's stdin (a
    /// `docker load` of an archive made on the fly); a non-zero exit is an
    /// error carrying stderr. A program that ends before taking all of its
    /// input fails, naming the program: never a bare broken pipe.
    pub fn run_feeding(&self, input: &mut (dyn Read + Send)) -> Result<Output, ProcessError> {
        let out = self.execute(Some(input), None)?;
        if out.success() {
            Ok(out)
        } else {
            Err(self.failed(&out))
        }
    }

    /// Runs with the caller's stdin, stdout and stderr (an interactive
    /// program, e.g. a sandbox started by `run`); returns its exit status.
    pub fn interactive(&self) -> Result<ExitStatus, ProcessError> {
        self.command()
            .status()
            .map_err(|source| self.spawn_error(source))
    }

    /// The std command: program, argv, extra environment, directory.
    fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.program);
        command.args(&self.args);
        for (k, v) in &self.env {
            command.env(k, v);
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

    /// Runs the program: `input` (else the `stdin_bytes`, else nothing) is
    /// fed to its stdin from a writer thread, so a program that writes a lot
    /// before reading cannot deadlock us, while stdout and stderr are read.
    fn execute(
        &self,
        input: Option<&mut (dyn Read + Send)>,
        on_line: Option<&mut dyn FnMut(&str)>,
    ) -> Result<Output, ProcessError> {
        let mut bytes = self.stdin.as_deref();
        let input: Option<&mut (dyn Read + Send)> = match input {
            Some(input) => Some(input),
            None => bytes.as_mut().map(|b| b as &mut (dyn Read + Send)),
        };
        let mut command = self.command();
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = command.spawn().map_err(|source| self.spawn_error(source))?;
        let stdin = child.stdin.take();
        let held_stdin = Mutex::new(None);
        std::thread::scope(|scope| {
            let writer = input
                .zip(stdin)
                .map(|(input, stdin)| scope.spawn(|| feed(input, stdin, &held_stdin)));
            let out = self.collect(&mut child, on_line, &held_stdin);
            let fed = writer.map(|w| w.join().expect("the stdin writer does not panic"));
            self.judge_feeding(out?, fed)
        })
    }

    /// What the feeding adds to a finished program's outcome: an input that
    /// could not be read fails the run; a program that exited 0 without
    /// taking all of its input fails it, naming the program. A program that
    /// failed reports its own failure (its stderr says more than a pipe).
    fn judge_feeding(
        &self,
        out: Output,
        fed: Option<Result<u64, FeedError>>,
    ) -> Result<Output, ProcessError> {
        match fed {
            None | Some(Ok(_)) => Ok(out),
            Some(Err(FeedError::Input(source))) => Err(ProcessError::Input {
                command: self.display(),
                source,
            }),
            Some(Err(FeedError::Pipe { .. })) if !out.success() => Ok(out),
            Some(Err(FeedError::Pipe { written, source })) => {
                if source.kind() == std::io::ErrorKind::BrokenPipe {
                    Err(ProcessError::InputNotRead {
                        command: self.display(),
                        written,
                    })
                } else {
                    Err(ProcessError::Io {
                        command: self.display(),
                        source,
                    })
                }
            }
        }
    }

    /// Reads stdout and stderr to their end and waits for the exit status,
    /// within the timeout. A stdin the writer hands over in `held_stdin`
    /// means its input failed: the program is killed (it must not act on
    /// part of its input), then its stdin closed, so that what it started
    /// (a `cat` under `sh`) ends too and the pipes reach their end.
    fn collect(
        &self,
        child: &mut Child,
        mut on_line: Option<&mut dyn FnMut(&str)>,
        held_stdin: &Mutex<Option<std::process::ChildStdin>>,
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
            kill_if_input_failed(child, held_stdin);
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
                None => {
                    kill_if_input_failed(child, held_stdin);
                    std::thread::sleep(Duration::from_millis(20))
                }
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

/// Kills the program when its writer handed its stdin over (the input
/// failed), then closes that stdin.
fn kill_if_input_failed(child: &mut Child, held_stdin: &Mutex<Option<std::process::ChildStdin>>) {
    let held = held_stdin
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    if let Some(stdin) = held {
        let _ = child.kill();
        drop(stdin);
    }
}

/// Why feeding a program's stdin stopped early.
enum FeedError {
    /// Reading the input failed.
    Input(std::io::Error),
    /// Writing to the program failed (it closed its stdin, or ended).
    Pipe {
        written: u64,
        source: std::io::Error,
    },
}

/// Copies `input` to the program's stdin, then closes it (end of input).
/// When the input fails, stdin is handed over still open in `held_stdin`
/// (closing it would read as a complete, shorter input), for the reading
/// side to kill the program first.
fn feed(
    input: &mut (dyn Read + Send),
    mut stdin: std::process::ChildStdin,
    held_stdin: &Mutex<Option<std::process::ChildStdin>>,
) -> Result<u64, FeedError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return Ok(written),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                *held_stdin
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(stdin);
                return Err(FeedError::Input(e));
            }
        };
        stdin
            .write_all(&buf[..n])
            .map_err(|source| FeedError::Pipe { written, source })?;
        written += n as u64;
    }
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

pub fn describe_status(status: &ExitStatus) -> String {
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
pub fn sh_quote(word: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_program_that_exits_0_before_reading_its_input_fails_naming_it() {
        let err = Cmd::new("true")
            .run_feeding(&mut more_than_a_pipe_holds().as_slice())
            .unwrap_err();
        assert!(
            matches!(&err, ProcessError::InputNotRead { command, .. } if command == "true"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("`true` exited before reading all of its input"),
            "{err}"
        );
        // The same through stdin_bytes: `output` does not judge the status,
        // but input left unread is not success either.
        let err = Cmd::new("true")
            .stdin_bytes(more_than_a_pipe_holds())
            .output()
            .unwrap_err();
        assert!(matches!(err, ProcessError::InputNotRead { .. }), "{err:?}");
    }

    #[test]
    fn a_program_that_fails_while_fed_reports_its_own_failure() {
        let err = Cmd::new("sh")
            .args(["-c", "echo refused >&2; exit 3"])
            .run_feeding(&mut more_than_a_pipe_holds().as_slice())
            .unwrap_err();
        assert!(
            matches!(&err, ProcessError::Failed { status, stderr, .. }
                if status == "exit status 3" && stderr.contains("refused")),
            "{err:?}"
        );
    }

    #[test]
    fn a_fed_program_sees_every_byte() {
        let input = more_than_a_pipe_holds();
        let out = Cmd::new("wc")
            .arg("-c")
            .run_feeding(&mut input.as_slice())
            .unwrap();
        assert_eq!(out.stdout.trim(), input.len().to_string());
    }

    #[test]
    fn an_input_that_fails_stops_the_program_before_it_acts_on_part_of_it() {
        /// One chunk, then an error, as a normaliser that meets a corrupt
        /// layer would.
        struct Breaks(bool);
        impl Read for Breaks {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if std::mem::replace(&mut self.0, true) {
                    Err(std::io::Error::other("layer 3 is corrupt"))
                } else {
                    buf[..3].copy_from_slice(b"abc");
                    Ok(3)
                }
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("acted");
        // `cat` would end at EOF and the marker would be written: a closed
        // stdin must not stand for the end of the input.
        let err = Cmd::new("sh")
            .args(["-c", "cat >/dev/null && touch \"$0\""])
            .arg(&marker)
            .run_feeding(&mut Breaks(false))
            .unwrap_err();
        assert!(
            matches!(&err, ProcessError::Input { source, .. } if source.to_string() == "layer 3 is corrupt"),
            "{err:?}"
        );
        assert!(!marker.exists(), "the program acted on part of its input");
    }

    #[test]
    fn display_quotes_what_a_shell_would_split() {
        let cmd = Cmd::new("docker").args(["run", "--label", "a=b c", "it's"]);
        assert_eq!(cmd.display(), r"docker run --label 'a=b c' 'it'\''s'");
    }
}
