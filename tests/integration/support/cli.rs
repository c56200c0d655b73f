//! The strict CLI builder: runs the real `sunaba-images` binary and checks
//! everything it did. The exit status is asserted exactly (0 unless the test
//! says `.status(n)`), and stdout and stderr are each checked against what the
//! test declares: the exact text, or lines that must appear and patterns that
//! lines may match. Any line nobody declared fails the test, with a report of
//! the command, the status and both streams, unexpected lines marked.
//!
//! ```ignore
//! Cli::new(dir)
//!     .args(["render", "--check"])
//!     .status(2)
//!     .stdout_line("--- a/docker/Dockerfile.python (committed)")
//!     .stdout_may(r"[ +-@].*")
//!     .stderr("render: 1 drifted …\n")
//!     .run();
//! ```
//!
//! `SUNABA_TEST_SHOW=1` prints every run's streams (to write expectations);
//! `SUNABA_TEST_BIN=PATH` runs another build of the binary.
//!
//! Output that is legitimately free-form (a build's progress on stderr) is
//! accepted only with `.stdout_free(why)` / `.stderr_free(why)`, so the
//! decision is visible where the command is run.

use regex::Regex;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

/// What one output stream must hold. Empty by default.
#[derive(Default)]
struct Expect {
    /// The whole text.
    exact: Option<String>,
    /// Line rules: every line must satisfy one, and each required rule must
    /// be satisfied by at least one line.
    rules: Vec<Rule>,
    /// The stream is one JSON document (the test then reads its fields).
    json: bool,
    /// Not checked, and why.
    free: Option<&'static str>,
}

struct Rule {
    regex: Regex,
    /// As the test wrote it (an exact line, or `/pattern/`).
    shown: String,
    required: bool,
}

impl Expect {
    fn declared(&self) -> bool {
        self.exact.is_some() || !self.rules.is_empty() || self.json || self.free.is_some()
    }

    fn rule(&mut self, regex: &str, shown: String, required: bool) {
        let regex = Regex::new(&format!("^(?:{regex})$"))
            .unwrap_or_else(|e| panic!("bad line pattern {shown}: {e}"));
        self.rules.push(Rule {
            regex,
            shown,
            required,
        });
    }

    /// `None` when `text` is as expected; otherwise what is wrong and the
    /// text with unexpected lines marked.
    fn judge(&self, text: &str) -> Option<String> {
        if self.free.is_some() {
            return None;
        }
        if let Some(want) = &self.exact {
            if want == text {
                return None;
            }
            let diff = similar::TextDiff::from_lines(want.as_str(), text);
            let mut out = String::from("differs from the expected text (- expected, + actual):\n");
            for change in diff.iter_all_changes() {
                let sign = match change.tag() {
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                    similar::ChangeTag::Equal => ' ',
                };
                let line = change.value();
                let _ = write!(out, "{sign} {line}");
                if !line.ends_with('\n') {
                    out.push_str("⏎ (no newline at end)\n");
                }
            }
            return Some(out);
        }
        let mut problems = String::new();
        if self.json
            && let Err(e) = serde_json::from_str::<serde_json::Value>(text)
        {
            let _ = writeln!(problems, "is not one JSON document: {e}");
        }
        if self.json {
            return problems_with_text(problems, text, &[]);
        }
        let lines: Vec<&str> = text.lines().collect();
        let mut seen = vec![false; self.rules.len()];
        let mut unexpected = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let mut matched = false;
            for (r, rule) in self.rules.iter().enumerate() {
                if rule.regex.is_match(line) {
                    seen[r] = true;
                    matched = true;
                }
            }
            if !matched {
                unexpected.push(i);
            }
        }
        if !unexpected.is_empty() {
            let _ = writeln!(
                problems,
                "{} unexpected line(s) (marked `+`)",
                unexpected.len()
            );
        }
        for (rule, seen) in self.rules.iter().zip(seen) {
            if rule.required && !seen {
                let _ = writeln!(problems, "missing line: {}", rule.shown);
            }
        }
        if !text.is_empty() && !text.ends_with('\n') {
            let _ = writeln!(problems, "does not end with a newline");
        }
        problems_with_text(problems, text, &unexpected)
    }
}

fn problems_with_text(problems: String, text: &str, unexpected: &[usize]) -> Option<String> {
    if problems.is_empty() {
        return None;
    }
    let mut out = problems;
    for (i, line) in text.lines().enumerate() {
        let mark = if unexpected.contains(&i) { '+' } else { ' ' };
        let _ = writeln!(out, "{mark} {line}");
    }
    Some(out)
}

fn escape(line: &str) -> String {
    regex::escape(line)
}

/// Runs the real `sunaba-images` binary; see the module docs.
#[must_use = "a Cli does nothing until .run()"]
pub struct Cli {
    cmd: Command,
    /// Fed to the command's stdin through a pipe (default: no stdin).
    stdin: Option<Vec<u8>>,
    status: i32,
    stdout: Expect,
    stderr: Expect,
}

macro_rules! stream_methods {
    ($field:ident, $exact:ident, $line:ident, $like:ident, $may:ident, $json:ident, $free:ident) => {
        /// The stream is exactly `text`.
        pub fn $exact(mut self, text: impl Into<String>) -> Self {
            self.$field.exact = Some(text.into());
            self
        }
        /// This exact line must appear (and may appear more than once).
        pub fn $line(mut self, line: impl AsRef<str>) -> Self {
            let line = line.as_ref();
            assert!(!line.contains('\n'), "one line at a time: {line:?}");
            self.$field.rule(&escape(line), format!("{line:?}"), true);
            self
        }
        /// A line matching `pattern` (a regex for the whole line) must appear.
        pub fn $like(mut self, pattern: impl AsRef<str>) -> Self {
            let p = pattern.as_ref();
            self.$field.rule(p, format!("/{p}/"), true);
            self
        }
        /// Lines matching `pattern` (a regex for the whole line) may appear.
        pub fn $may(mut self, pattern: impl AsRef<str>) -> Self {
            let p = pattern.as_ref();
            self.$field.rule(p, format!("/{p}/ (optional)"), false);
            self
        }
        /// The stream is one JSON document; the test reads its fields.
        pub fn $json(mut self) -> Self {
            self.$field.json = true;
            self
        }
        /// The stream is not checked at all, for the reason given.
        pub fn $free(mut self, why: &'static str) -> Self {
            self.$field.free = Some(why);
            self
        }
    };
}

impl Cli {
    pub fn new(dir: &Path) -> Self {
        // SUNABA_TEST_BIN runs the suite against another build (e.g. an
        // older commit's, to see which tests it fails).
        let bin = std::env::var_os("SUNABA_TEST_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_sunaba-images").into());
        let mut cmd = Command::new(bin);
        cmd.current_dir(dir);
        // Tests choose their own profile and manifest explicitly.
        // Nor does a test run inside a GitHub workflow get `--format github`
        // chosen for it (tests that want it set these themselves).
        cmd.env_remove("SUNABA_PROFILE")
            .env_remove("SUNABA_MANIFEST")
            .env_remove("GITHUB_ACTIONS")
            .env_remove("GITHUB_OUTPUT")
            .env_remove("GITHUB_STEP_SUMMARY")
            .stdin(Stdio::null());
        Cli {
            cmd,
            stdin: None,
            status: 0,
            stdout: Expect::default(),
            stderr: Expect::default(),
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.cmd.arg(arg);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Self {
        self.cmd.env_remove(key);
        self
    }

    /// Runs the command as this user and group (for tests running as root).
    pub fn uid_gid(mut self, uid: u32, gid: u32) -> Self {
        use std::os::unix::process::CommandExt as _;
        self.cmd.uid(uid).gid(gid);
        self
    }

    /// Feeds `bytes` to the command's stdin through a pipe (as `… |
    /// sunaba-images` does), then closes it.
    pub fn stdin_bytes(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// The exit status expected (0 unless set); a death by signal S is
    /// 128 + S, as a shell shows it (134: aborted at a failpoint).
    pub fn status(mut self, status: i32) -> Self {
        self.status = status;
        self
    }

    stream_methods!(
        stdout,
        stdout,
        stdout_line,
        stdout_like,
        stdout_may,
        stdout_json,
        stdout_free
    );
    stream_methods!(
        stderr,
        stderr,
        stderr_line,
        stderr_like,
        stderr_may,
        stderr_json,
        stderr_free
    );

    /// The configured command, to spawn and kill it yourself; nothing is
    /// checked then, so say why.
    pub fn into_command(self, why: &'static str) -> Command {
        let _ = why;
        self.cmd
    }

    /// Runs to completion and checks status, stdout and stderr.
    #[track_caller]
    pub fn run(mut self) -> Run {
        self.cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let output = match self.stdin.take() {
            None => self.cmd.output().expect("spawn sunaba-images"),
            Some(bytes) => {
                use std::io::Write as _;
                let mut child = self
                    .cmd
                    .stdin(Stdio::piped())
                    .spawn()
                    .expect("spawn sunaba-images");
                let mut stdin = child.stdin.take().unwrap();
                // A command that does not read its stdin closes the pipe:
                // not the test's failure.
                let feeder = std::thread::spawn(move || drop(stdin.write_all(&bytes)));
                let output = child.wait_with_output().expect("wait for sunaba-images");
                feeder.join().unwrap();
                output
            }
        };
        self.judge(
            output.status,
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Reads the first line of stdout, then closes it (as `| head -1` does)
    /// and checks the run as usual; the stdout checked is that first line.
    /// The pipe is shrunk to one page before the command starts (shrinking it
    /// later fails with EBUSY once more than a page is in it), so a command
    /// with more than a page left to print meets the closed pipe for certain.
    #[track_caller]
    pub fn run_closing_stdout_after_first_line(mut self) -> Run {
        let (mut stdout, writer) = std::io::pipe().expect("pipe for stdout");
        {
            use std::os::fd::AsRawFd as _;
            // SAFETY: fcntl on a pipe descriptor this process owns.
            let rc = unsafe { libc::fcntl(writer.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
            assert!(rc >= 0, "F_SETPIPE_SZ: {}", std::io::Error::last_os_error());
        }
        let mut child = self
            .cmd
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sunaba-images");
        // The command keeps its copy of the write end until replaced; without
        // this a command that ends before a newline would leave the read
        // below waiting for an end of file that never comes.
        self.cmd.stdout(Stdio::null());
        let mut stderr = child.stderr.take().unwrap();
        let errors = std::thread::spawn(move || {
            let mut text = Vec::new();
            stderr.read_to_end(&mut text).unwrap();
            text
        });
        // Byte by byte, so nothing past the first line is taken off the pipe.
        let mut first = Vec::new();
        let mut byte = [0u8];
        while stdout.read(&mut byte).unwrap() == 1 {
            first.push(byte[0]);
            if byte[0] == b'\n' {
                break;
            }
        }
        drop(stdout);
        let status = child.wait().unwrap();
        let stderr = errors.join().unwrap();
        self.judge(
            status,
            String::from_utf8_lossy(&first).into_owned(),
            String::from_utf8_lossy(&stderr).into_owned(),
        )
    }

    fn shown(&self) -> String {
        let mut shown = self.cmd.get_program().to_string_lossy().into_owned();
        for a in self.cmd.get_args() {
            let _ = write!(shown, " {}", a.to_string_lossy());
        }
        let dir = self
            .cmd
            .get_current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        format!("$ {shown}\n  (in {dir})\n")
    }

    #[track_caller]
    fn judge(self, status: ExitStatus, stdout: String, stderr: String) -> Run {
        if std::env::var_os("SUNABA_TEST_SHOW").is_some() {
            // For writing a test: every run's streams, whatever is declared.
            eprintln!(
                "{}--- status {status}\n--- stdout:\n{stdout}--- stderr:\n{stderr}--- end",
                self.shown()
            );
        }
        let mut report = String::new();
        // A death by signal counts as a shell shows it: 128 + the signal.
        let code = status
            .code()
            .or_else(|| std::os::unix::process::ExitStatusExt::signal(&status).map(|s| 128 + s));
        if code != Some(self.status) {
            let _ = writeln!(
                report,
                "status: expected {}, got {}",
                self.status,
                code.map_or_else(|| status.to_string(), |c| c.to_string())
            );
        }
        for (name, expect, text) in [
            ("stdout", &self.stdout, &stdout),
            ("stderr", &self.stderr, &stderr),
        ] {
            let verdict = if expect.declared() {
                expect.judge(text)
            } else {
                // Nothing declared: the stream must be empty.
                Expect {
                    exact: Some(String::new()),
                    ..Expect::default()
                }
                .judge(text)
            };
            if let Some(v) = verdict {
                let _ = write!(report, "--- {name} {v}");
            }
        }
        if !report.is_empty() {
            let mut full = format!("\n{}{report}", self.shown());
            for (name, text) in [("stdout", &stdout), ("stderr", &stderr)] {
                let _ = write!(full, "--- full {name}:\n{text}");
                if !text.is_empty() && !text.ends_with('\n') {
                    full.push('\n');
                }
            }
            panic!("{full}");
        }
        Run { stdout, stderr }
    }
}

/// A checked run: its output, for further assertions on its content.
#[derive(Debug)]
pub struct Run {
    stdout: String,
    stderr: String,
}

impl Run {
    pub fn stdout(&self) -> &str {
        &self.stdout
    }
    pub fn stderr(&self) -> &str {
        &self.stderr
    }
    /// Stdout as JSON (declare `.stdout_json()` on the run).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON: {e}\n{}", self.stdout))
    }
    /// The lines of stdout.
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
}

#[test]
fn an_undeclared_line_a_missing_line_and_a_wrong_text_are_reported() {
    let mut e = Expect::default();
    e.rule(&escape("ok: 6 alias(es)"), "\"ok\"".into(), true);
    e.rule("warning: .*", "/warning: .*/".into(), false);
    assert_eq!(e.judge("warning: x\nok: 6 alias(es)\n"), None);
    assert_eq!(
        e.judge("ok: 6 alias(es)\n"),
        None,
        "optional lines may be absent"
    );
    let v = e.judge("ok: 6 alias(es)\nsurprise\n").unwrap();
    assert!(
        v.contains("1 unexpected line(s)") && v.contains("+ surprise"),
        "{v}"
    );
    let v = e.judge("warning: x\n").unwrap();
    assert!(v.contains("missing line: \"ok\""), "{v}");
    let exact = Expect {
        exact: Some("a\nb\n".into()),
        ..Expect::default()
    };
    assert_eq!(exact.judge("a\nb\n"), None);
    let v = exact.judge("a\nc\n").unwrap();
    assert!(v.contains("- b") && v.contains("+ c"), "{v}");
    let json = Expect {
        json: true,
        ..Expect::default()
    };
    assert_eq!(json.judge("{\"a\": 1}\n"), None);
    assert!(json.judge("{\"a\": 1}\nextra\n").is_some());
}
