//! The smoke suite at check time: which cases a variant runs ([`plan`]),
//! judging what each did ([`judge`]), and their results. By job: `workspace`
//! (the throw-away, foreign-owned copy the cases run in, and its tree
//! snapshots) and `driver` (the script that runs them all in one sandbox,
//! and reading its output back). The schema is `manifest::smoke`.

pub(crate) mod driver;
mod hints;
pub(crate) mod workspace;

use crate::manifest::smoke::{DIRTY_SUFFIX, NEUTRAL};
use crate::manifest::{Manifest, SmokeExpect};
use serde::Serialize;
use sha2::Digest as _;
use std::path::{Path, PathBuf};

/// How many output lines a result keeps for people (the tail).
pub(crate) const TAIL_LINES: usize = 20;
/// How many workspace changes a problem names (`changed` has them all).
const CHANGES_SHOWN: usize = 5;

/// One command on one project, as a variant runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Case {
    /// The case's directory in the workspace (`<suite>-<project>-<n>`).
    pub id: String,
    pub suite: String,
    pub command: String,
    pub project: String,
    /// The project's directory on this machine.
    pub source: PathBuf,
    /// The copy is a committed git repository (`<project>.dirty/` overlaid).
    pub git: bool,
    /// What runs, in the project's directory: the command's `run` with its
    /// program resolved as verify resolves it.
    pub argv: Vec<String>,
    /// `local` or `global` for the Node languages' tools, else `None`.
    pub resolution: Option<&'static str>,
    pub expect: SmokeExpect,
    pub writes: bool,
}

/// A command the variant does not run: it does not owe all of its tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub suite: String,
    pub command: String,
    pub missing: Vec<String>,
}

/// Every case one variant runs, and what it skips.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub cases: Vec<Case>,
    pub skipped: Vec<Skipped>,
}

/// The suites `variant` runs (each with a case, the neutral suite first):
/// the names of [`plan`]'s suites, without reading any project (what a
/// passing record must have covered, for pinning).
pub(crate) fn suites(manifest: &Manifest, variant: &str) -> Vec<String> {
    let owed = manifest.owed_tools(variant);
    let mut out: Vec<String> = Vec::new();
    for suite in manifest.smoke_suites(variant) {
        let runs = suite
            .commands
            .iter()
            .any(|c| !c.expect.is_empty() && c.tools.iter().all(|t| owed.contains(t)));
        if runs && !out.contains(&suite.name) {
            out.push(suite.name.clone());
        }
    }
    sort_suites(&mut out);
    out
}

/// The neutral suite first, then by name.
fn sort_suites(suites: &mut [String]) {
    suites.sort_by_key(|s| (s != NEUTRAL, s.clone()));
}

/// The cases of `variant`: the neutral suite and those of the languages it
/// serves; each command on each project it has an expectation for, where
/// the variant owes the command's tools.
pub(crate) fn plan(manifest: &Manifest, variant: &str) -> Plan {
    let owed = manifest.owed_tools(variant);
    let mut plan = Plan::default();
    for suite in manifest.smoke_suites(variant) {
        let node = suite
            .languages
            .iter()
            .any(|l| crate::detect::NODE_LANGUAGES.contains(&l.as_str()));
        for (n, command) in suite.commands.iter().enumerate() {
            let missing: Vec<String> = command
                .tools
                .iter()
                .filter(|t| !owed.contains(t))
                .cloned()
                .collect();
            if !missing.is_empty() {
                plan.skipped.push(Skipped {
                    suite: suite.name.clone(),
                    command: command.name.clone(),
                    missing,
                });
                continue;
            }
            for (project, expect) in &command.expect {
                let source = manifest.root.join(&suite.dir).join(project);
                let mut argv = command.run.clone();
                let resolution = node.then(|| match crate::detect::local_tool(&source, &argv[0]) {
                    Some(_) => {
                        argv[0] = format!("./node_modules/.bin/{}", argv[0]);
                        "local"
                    }
                    None => "global",
                });
                plan.cases.push(Case {
                    id: format!("{}-{project}-{:02}", suite.name, n + 1),
                    suite: suite.name.clone(),
                    command: command.name.clone(),
                    project: project.clone(),
                    source,
                    git: suite.git,
                    argv,
                    resolution,
                    expect: expect.clone(),
                    writes: command.writes,
                });
            }
        }
    }
    plan
}

impl Plan {
    /// The same plan with only the cases (and skips) of `suites`.
    pub(crate) fn only(&self, suites: &[String]) -> Plan {
        Plan {
            cases: self
                .cases
                .iter()
                .filter(|c| suites.contains(&c.suite))
                .cloned()
                .collect(),
            skipped: self
                .skipped
                .iter()
                .filter(|s| suites.contains(&s.suite))
                .cloned()
                .collect(),
        }
    }

    /// The suites with at least one case, neutral first (what
    /// [`suites`] must agree with; tests hold them to it).
    #[cfg(test)]
    pub(crate) fn suites(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in &self.cases {
            if !out.contains(&c.suite) {
                out.push(c.suite.clone());
            }
        }
        sort_suites(&mut out);
        out
    }

    /// `sha256:<hex>` over every case (what runs, what it must do) and every
    /// byte of the projects: a check record names the smoke it passed, so a
    /// changed smoke re-checks an unchanged image.
    pub(crate) fn digest(&self) -> std::io::Result<String> {
        let mut h = sha2::Sha256::new();
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        let mut projects: Vec<PathBuf> = Vec::new();
        for c in &self.cases {
            for part in [&c.id, &c.suite, &c.command, &c.project] {
                field(part.as_bytes());
            }
            field(c.argv.join("\0").as_bytes());
            let e = &c.expect;
            field(
                format!(
                    "{} {:?} {} {} {}",
                    e.exit, e.output, e.no_output, c.writes, c.git
                )
                .as_bytes(),
            );
            projects.push(c.source.clone());
            if c.git {
                projects.push(dirty_overlay(&c.source));
            }
        }
        projects.sort();
        projects.dedup();
        for dir in projects {
            for (rel, exec, bytes) in workspace::files(&dir)? {
                field(rel.to_string_lossy().as_bytes());
                field(&[u8::from(exec)]);
                field(&bytes);
            }
        }
        Ok(format!("sha256:{}", hex::encode(h.finalize())))
    }
}

/// `<project>.dirty/`, overlaid on a git project's copy after the commit.
pub(crate) fn dirty_overlay(source: &Path) -> PathBuf {
    let mut name = source.file_name().unwrap_or_default().to_os_string();
    name.push(DIRTY_SUFFIX);
    source.with_file_name(name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SmokeStatus {
    Pass,
    Fail,
}

/// What one case did, judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SmokeResult {
    pub suite: String,
    pub command: String,
    pub project: String,
    pub argv: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<&'static str>,
    /// The command may change the workspace.
    pub writes: bool,
    pub status: SmokeStatus,
    /// The exit status seen (`None`: it did not run to an exit).
    pub exit: Option<i32>,
    pub expected_exit: i32,
    /// Why it failed (empty on a pass).
    pub problems: Vec<String>,
    /// What it changed in the workspace (`writes = true` commands may).
    pub changed: Vec<String>,
    /// The last lines of its output (stdout and stderr together).
    pub output_tail: String,
    pub seconds: Option<f64>,
    /// CPU seconds (user + system) of everything the case ran.
    pub cpu_seconds: Option<f64>,
}

impl SmokeResult {
    pub fn passed(&self) -> bool {
        self.status == SmokeStatus::Pass
    }

    /// `suite/command [project]`, how reports name a case.
    pub fn label(&self) -> String {
        format!("{}/{} [{}]", self.suite, self.command, self.project)
    }
}

/// Judges one case: its exit status and output against the expectation,
/// and (unless it may write) the workspace before and after. `ran` is `None`
/// when the driver never reported the case.
pub(crate) fn judge(case: &Case, ran: Option<&driver::Ran>, changed: Vec<String>) -> SmokeResult {
    let mut problems = Vec::new();
    let (exit, output, seconds, cpu_seconds) = match ran {
        Some(r) => (r.exit, r.output.as_str(), r.seconds, r.cpu),
        None => {
            problems.push("the case did not run: the check container stopped first".to_string());
            (None, "", None, None)
        }
    };
    let e = &case.expect;
    if ran.is_some() {
        match exit {
            Some(code) if code == e.exit => {}
            Some(126) | Some(127) => problems.push(format!(
                "exit status {}, expected {}: `{}` could not be run",
                exit.unwrap_or_default(),
                e.exit,
                case.argv[0]
            )),
            Some(124) => problems.push(format!(
                "timed out after {}s (expected exit status {})",
                driver::CASE_TIMEOUT.as_secs(),
                e.exit
            )),
            Some(code) => problems.push(format!("exit status {code}, expected {}", e.exit)),
            None => problems.push(format!("no exit status reported (expected {})", e.exit)),
        }
        if let Some(pattern) = &e.output {
            let matched = regex::Regex::new(pattern).is_ok_and(|re| re.is_match(output));
            if !matched {
                problems.push(format!("output does not match /{pattern}/"));
            }
        }
        if e.no_output && !output.is_empty() {
            problems.push("printed output where nothing was expected".to_string());
        }
    }
    if !case.writes && !changed.is_empty() {
        let paths = hints::collapsed(&changed);
        let shown = paths.len().min(CHANGES_SHOWN);
        problems.push(format!(
            "changed the workspace, which this command must only read: {}{}; hint: {}",
            paths[..shown].join(", "),
            match paths.len() - shown {
                0 => String::new(),
                more => format!(" and {more} more"),
            },
            hints::workspace_hint(&changed)
        ));
    }
    SmokeResult {
        suite: case.suite.clone(),
        command: case.command.clone(),
        project: case.project.clone(),
        argv: case.argv.clone(),
        resolution: case.resolution,
        writes: case.writes,
        status: if problems.is_empty() {
            SmokeStatus::Pass
        } else {
            SmokeStatus::Fail
        },
        exit,
        expected_exit: e.exit,
        problems,
        changed,
        output_tail: crate::process::tail_lines(output, TAIL_LINES),
        seconds,
        cpu_seconds,
    }
}

#[cfg(test)]
pub(crate) mod tests;
