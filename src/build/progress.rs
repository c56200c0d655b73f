//! Progress: an indicatif multi-line view on a terminal, timestamped plain
//! lines otherwise; and reading build logs for the current and failing step.

use crate::engine::LogFormat;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use regex::Regex;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// A step of a build as the engine's log announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub index: u32,
    pub total: u32,
    pub text: String,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}/{}] {}", self.index, self.total, self.text)
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Event {
    Queued,
    Skipped(String),
    Building(Option<Step>),
    Checking,
    Done(String),
    Failed(String),
    NotAttempted(String),
}

pub(crate) trait Reporter: Sync {
    fn event(&self, variant: &str, event: Event);
    /// Stops live rendering so a summary can be printed below it.
    fn finish(&self) {}
}

/// Plain timestamped lines on stderr (CI logs).
pub(crate) struct PlainReporter {
    out: Mutex<Box<dyn Write + Send>>,
}

impl PlainReporter {
    pub(crate) fn stderr() -> PlainReporter {
        PlainReporter {
            out: Mutex::new(Box::new(std::io::stderr())),
        }
    }
}

impl Reporter for PlainReporter {
    fn event(&self, variant: &str, event: Event) {
        let text = match event {
            Event::Queued => "queued".to_string(),
            Event::Skipped(why) => format!("skipped: {why}"),
            Event::Building(None) => "building".to_string(),
            Event::Building(Some(step)) => format!("building step {step}"),
            Event::Checking => "checking".to_string(),
            Event::Done(what) => format!("done: {what}"),
            Event::Failed(why) => format!("FAILED: {why}"),
            Event::NotAttempted(why) => format!("not attempted: {why}"),
        };
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "{now} {variant}: {}", one_line(&text, 160));
    }
}

/// One live line per variant on a terminal.
pub(crate) struct TtyReporter {
    _multi: MultiProgress,
    bars: BTreeMap<String, ProgressBar>,
}

impl TtyReporter {
    pub(crate) fn new(variants: &[String]) -> TtyReporter {
        let multi = MultiProgress::new();
        let width = variants.iter().map(|v| v.len()).max().unwrap_or(4);
        let style = ProgressStyle::with_template(&format!(
            "{{spinner}} {{prefix:<{width}}} {{elapsed:>4}} {{wide_msg}}"
        ))
        .expect("a valid template");
        let bars = variants
            .iter()
            .map(|v| {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar.set_prefix(v.clone());
                (v.clone(), bar)
            })
            .collect();
        TtyReporter {
            _multi: multi,
            bars,
        }
    }
}

impl Reporter for TtyReporter {
    fn event(&self, variant: &str, event: Event) {
        let Some(bar) = self.bars.get(variant) else {
            return;
        };
        match event {
            Event::Queued => bar.set_message("queued"),
            Event::Building(step) => {
                if bar.is_finished() {
                    return;
                }
                bar.enable_steady_tick(Duration::from_millis(120));
                bar.set_message(match step {
                    Some(s) => format!("building step {}/{} {}", s.index, s.total, s.text),
                    None => "building".into(),
                });
            }
            Event::Checking => bar.set_message("checking"),
            Event::Skipped(why) => bar.finish_with_message(format!("skipped: {why}")),
            Event::Done(what) => bar.finish_with_message(format!("done: {what}")),
            Event::Failed(why) => {
                bar.finish_with_message(format!("FAILED: {}", one_line(&why, 200)))
            }
            Event::NotAttempted(why) => bar.finish_with_message(format!("not attempted: {why}")),
        }
    }
    fn finish(&self) {
        for bar in self.bars.values() {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

fn one_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max).collect::<String>())
    } else {
        line.to_string()
    }
}

static BUILDKIT_STEP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^#(\d+) \[(?:[^\]]*\s)?(\d+)/(\d+)\] (.*)$").expect("valid regex")
});
static BUILDKIT_ERROR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^#(\d+) ERROR:? (.*)$").expect("valid regex"));
static BUILDAH_STEP: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^STEP (\d+)/(\d+): (.*)$").expect("valid regex"));

/// A step's instruction without its `--mount=…` options and repeated
/// blanks: `RUN sh /run/sunaba/install-go.sh` says more on one line.
fn step_text(raw: &str) -> String {
    raw.split_whitespace()
        .filter(|w| !w.starts_with("--mount="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Follows a build log: the step in progress, and the step that failed.
#[derive(Debug)]
pub(crate) struct StepTracker {
    format: LogFormat,
    steps: BTreeMap<String, Step>,
    pub current: Option<Step>,
    pub failed: Option<(Option<Step>, String)>,
    /// The engine's closing error line (`failed to solve: …`), for failures
    /// that no step reported itself (e.g. a step shared with another build).
    last_error: Option<String>,
}

impl StepTracker {
    pub(crate) fn new(format: LogFormat) -> StepTracker {
        StepTracker {
            format,
            steps: BTreeMap::new(),
            current: None,
            failed: None,
            last_error: None,
        }
    }

    /// Feeds one log line; returns the step when a new one starts.
    pub(crate) fn line(&mut self, line: &str) -> Option<Step> {
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("error") || lower.starts_with("failed to solve") {
            self.last_error = Some(line.trim().to_string());
        }
        match self.format {
            LogFormat::BuildKit => {
                if let Some(c) = BUILDKIT_STEP.captures(line) {
                    let step = Step {
                        index: c[2].parse().ok()?,
                        total: c[3].parse().ok()?,
                        text: step_text(&c[4]),
                    };
                    let id = c[1].to_string();
                    if self.steps.get(&id) == Some(&step) {
                        return None;
                    }
                    self.steps.insert(id, step.clone());
                    self.current = Some(step.clone());
                    return Some(step);
                }
                if let Some(c) = BUILDKIT_ERROR.captures(line)
                    && self.failed.is_none()
                {
                    self.failed = Some((self.steps.get(&c[1]).cloned(), c[2].to_string()));
                }
                None
            }
            LogFormat::Buildah => {
                let c = BUILDAH_STEP.captures(line)?;
                let step = Step {
                    index: c[1].parse().ok()?,
                    total: c[2].parse().ok()?,
                    text: c[3].trim().to_string(),
                };
                self.current = Some(step.clone());
                Some(step)
            }
        }
    }

    /// The failing step, for the failure report.
    pub(crate) fn failure(&self) -> String {
        match &self.failed {
            Some((Some(step), err)) => format!("step {step} failed: {err}"),
            Some((None, err)) => err.clone(),
            None => {
                let at = match &self.current {
                    Some(step) => format!("failed at step {step}"),
                    None => "failed before any build step started".to_string(),
                };
                match &self.last_error {
                    Some(err) => format!("{at}: {err}"),
                    None => at,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buildkit_plain_log_names_the_failing_step() {
        let mut t = StepTracker::new(LogFormat::BuildKit);
        let log = [
            "#1 [internal] load build definition from Dockerfile.go",
            "#5 [1/3] FROM 127.0.0.1:5000/sunaba/sandbox:base-inputs-0123abcd",
            "#6 [2/3] RUN --mount=type=bind,source=docker/install-go.sh,target=/tmp/f sh /tmp/f",
            "#6 0.312 installing go",
            "#7 [base 3/3] COPY docker/healthcheck/go.sh /usr/local/libexec/sunaba/healthcheck",
            "#6 ERROR: process \"/bin/sh -c sh /tmp/f\" did not complete successfully: exit code: 3",
        ];
        let started: Vec<u32> = log
            .iter()
            .filter_map(|l| t.line(l))
            .map(|s| s.index)
            .collect();
        assert_eq!(started, [1, 2, 3]);
        assert_eq!(t.current.as_ref().unwrap().total, 3);
        let f = t.failure();
        assert!(
            f.starts_with("step [2/3] RUN sh /tmp/f failed: process"),
            "{f}"
        );
        assert!(f.ends_with("exit code: 3"), "{f}");
    }

    #[test]
    fn a_failure_no_step_reported_keeps_the_engine_error() {
        let mut t = StepTracker::new(LogFormat::BuildKit);
        t.line("#5 [1/3] FROM r:base-inputs-0123");
        t.line("failed to solve with frontend dockerfile.v0: failed to build LLB: exit code: 1");
        assert_eq!(
            t.failure(),
            "failed at step [1/3] FROM r:base-inputs-0123: failed to solve with frontend \
             dockerfile.v0: failed to build LLB: exit code: 1"
        );
    }

    #[test]
    fn buildah_steps() {
        let mut t = StepTracker::new(LogFormat::Buildah);
        assert_eq!(t.line("STEP 2/4: RUN true").unwrap().text, "RUN true");
        assert_eq!(t.failure(), "failed at step [2/4] RUN true");
    }

    #[test]
    fn plain_lines_are_timestamped() {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let r = PlainReporter {
            out: Mutex::new(Box::new(buf.clone())),
        };
        r.event(
            "go",
            Event::Building(Some(Step {
                index: 2,
                total: 3,
                text: "RUN x".into(),
            })),
        );
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let re = Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ go: building step \[2/3\] RUN x\n$")
            .unwrap();
        assert!(re.is_match(&text), "{text:?}");
    }
}
