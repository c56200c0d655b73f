//! `check`: run an image's own HEALTHCHECK in a locked-down container, verify
//! that it asserts exactly the tools images.toml says the variant owes, enforce
//! the size budget, and record the result on the image as a label.
//!
//! Healthcheck output and the check record are fixed in docs/contracts.md.

use crate::engine::{BuildRequest, Engine, EngineError, ImageInfo, LockedRun};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

pub use crate::labels::{CHECK as LABEL_CHECK, INPUTS as LABEL_INPUTS, VARIANT as LABEL_VARIANT};
use crate::labels::{CHECK_SCHEMA, CheckRecord, CheckStatus};

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(
        "image {reference} not found locally; build it first (`sunaba-images build {variant}`)"
    )]
    NoImage { reference: String, variant: String },
    #[error(
        "image {reference} has no HEALTHCHECK in its config; it was not built from a rendered \
         Dockerfile (rebuild it with `sunaba-images build`)"
    )]
    NoHealthcheck { reference: String },
    #[error("image {reference} has an unusable HEALTHCHECK {test:?}: {why}")]
    BadHealthcheck {
        reference: String,
        test: Vec<String>,
        why: String,
    },
    #[error("running the healthcheck of {reference}: {source}")]
    Run {
        reference: String,
        source: EngineError,
    },
    #[error("recording the check result on {reference}: {source}")]
    Record {
        reference: String,
        source: EngineError,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What a variant owes, from images.toml.
#[derive(Debug, Clone)]
pub struct Expectation {
    pub variant: String,
    /// In manifest order (parent's tools first).
    pub owed_tools: Vec<String>,
    pub size_budget: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolStatus {
    Ok,
    Missing,
    Failed,
    Mismatch,
    TooOld,
    /// Owed by images.toml but not asserted by the image's healthcheck.
    NotChecked,
    /// Asserted by the healthcheck but no longer owed by images.toml.
    NotOwed,
}

impl ToolStatus {
    fn parse(s: &str) -> Option<ToolStatus> {
        Some(match s {
            "ok" => ToolStatus::Ok,
            "missing" => ToolStatus::Missing,
            "failed" => ToolStatus::Failed,
            "mismatch" => ToolStatus::Mismatch,
            "too-old" => ToolStatus::TooOld,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Ok => "ok",
            ToolStatus::Missing => "missing",
            ToolStatus::Failed => "failed",
            ToolStatus::Mismatch => "mismatch",
            ToolStatus::TooOld => "too-old",
            ToolStatus::NotChecked => "not-checked",
            ToolStatus::NotOwed => "not-owed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolResult {
    pub tool: String,
    pub status: ToolStatus,
    pub version: String,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub variant: String,
    pub image: String,
    pub image_id: String,
    pub inputs: Option<String>,
    pub size: u64,
    pub size_budget: u64,
    pub passed: bool,
    pub tools: Vec<ToolResult>,
    /// Reasons the check failed that are not one tool's (size, exit status, …).
    pub problems: Vec<String>,
    pub seconds: f64,
    /// The labelled image, when the result was recorded.
    pub recorded_id: Option<String>,
}

impl CheckReport {
    /// One line naming why the check failed (for build summaries).
    pub fn reason(&self) -> String {
        let mut reasons: Vec<String> = self
            .tools
            .iter()
            .filter(|t| t.status != ToolStatus::Ok)
            .map(|t| format!("{} {}", t.tool, t.status.as_str()))
            .collect();
        reasons.extend(self.problems.iter().cloned());
        reasons.join("; ")
    }
}

/// Splits healthcheck output into tool lines. Lines that do not follow the
/// contract are returned separately.
pub fn parse_output(stdout: &str) -> (Vec<ToolResult>, Vec<String>) {
    let mut tools = Vec::new();
    let mut bad = Vec::new();
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.splitn(4, '\t').collect();
        match (
            fields.as_slice(),
            fields.first().and_then(|s| ToolStatus::parse(s)),
        ) {
            ([_, tool, version, rest @ ..], Some(status)) if !tool.is_empty() => {
                tools.push(ToolResult {
                    tool: tool.to_string(),
                    status,
                    version: version.to_string(),
                    detail: rest.first().map(|d| d.to_string()).unwrap_or_default(),
                })
            }
            _ => bad.push(line.to_string()),
        }
    }
    (tools, bad)
}

/// Judges one healthcheck run against what the variant owes.
pub fn evaluate(
    expect: &Expectation,
    exit_code: Option<i32>,
    stdout: &str,
    stderr: &str,
    size: u64,
) -> (Vec<ToolResult>, Vec<String>) {
    let (reported, bad) = parse_output(stdout);
    let mut problems: Vec<String> = bad
        .iter()
        .map(|l| {
            format!(
                "healthcheck printed a line that is not `status\\ttool\\tversion\\tdetail`: {l:?}"
            )
        })
        .collect();
    let by_name: BTreeMap<&str, &ToolResult> =
        reported.iter().map(|t| (t.tool.as_str(), t)).collect();
    let owed: BTreeSet<&str> = expect.owed_tools.iter().map(String::as_str).collect();

    let mut tools: Vec<ToolResult> = expect
        .owed_tools
        .iter()
        .map(|tool| match by_name.get(tool.as_str()) {
            Some(r) => (*r).clone(),
            None => ToolResult {
                tool: tool.clone(),
                status: ToolStatus::NotChecked,
                version: "-".into(),
                detail: format!(
                    "the image's HEALTHCHECK does not check {tool}, which images.toml says \
                     {} owes: the image was built from an older render; rebuild it",
                    expect.variant
                ),
            },
        })
        .collect();
    tools.extend(
        reported
            .iter()
            .filter(|t| !owed.contains(t.tool.as_str()))
            .map(|t| ToolResult {
                tool: t.tool.clone(),
                status: ToolStatus::NotOwed,
                version: t.version.clone(),
                detail: format!(
                    "the image's HEALTHCHECK checks {}, which images.toml no longer lists for \
                     {}: the image was built from an older render; rebuild it",
                    t.tool, expect.variant
                ),
            }),
    );

    let all_ok = reported.iter().all(|t| t.status == ToolStatus::Ok) && bad.is_empty();
    match exit_code {
        Some(0) if !all_ok => problems.push(
            "healthcheck exited 0 although it reported failures (a broken healthcheck script)"
                .into(),
        ),
        Some(0) => {}
        code if all_ok => {
            let why = match code {
                Some(c) => format!("exit status {c}"),
                None => "killed by a signal".into(),
            };
            let tail = crate::process::tail_lines(stderr, 5);
            problems.push(format!(
                "healthcheck failed ({why}) although every reported tool passed{}",
                if tail.trim().is_empty() {
                    String::new()
                } else {
                    format!(": {}", tail.trim())
                }
            ));
        }
        _ => {}
    }
    if reported.is_empty() && bad.is_empty() {
        problems.push(format!(
            "healthcheck printed nothing{}",
            match crate::process::tail_lines(stderr, 5).trim() {
                "" => String::new(),
                t => format!("; stderr: {t}"),
            }
        ));
    }
    if size > expect.size_budget {
        problems.push(format!(
            "size {} exceeds the budget of {} (images.toml variants.{}.size_budget)",
            human_bytes(size),
            human_bytes(expect.size_budget),
            expect.variant
        ));
    }
    (tools, problems)
}

/// The argv to run for a `Config.Healthcheck.Test` value.
pub fn healthcheck_argv(reference: &str, test: &[String]) -> Result<Vec<String>, CheckError> {
    let bad = |why: &str| CheckError::BadHealthcheck {
        reference: reference.to_string(),
        test: test.to_vec(),
        why: why.to_string(),
    };
    match test.split_first() {
        Some((kind, rest)) if kind == "CMD" && !rest.is_empty() => Ok(rest.to_vec()),
        Some((kind, [line])) if kind == "CMD-SHELL" => {
            Ok(vec!["/bin/sh".into(), "-c".into(), line.clone()])
        }
        Some((kind, _)) if kind == "NONE" => Err(bad("the healthcheck is disabled (NONE)")),
        None => Err(CheckError::NoHealthcheck {
            reference: reference.to_string(),
        }),
        _ => Err(bad("not a CMD or CMD-SHELL healthcheck")),
    }
}

/// Runs the healthcheck of the local image `reference` and judges it.
pub fn check_image(
    engine: &dyn Engine,
    reference: &str,
    expect: &Expectation,
    timeout: Duration,
) -> Result<CheckReport, CheckError> {
    let started = Instant::now();
    let info = engine
        .inspect(reference)?
        .ok_or_else(|| CheckError::NoImage {
            reference: reference.to_string(),
            variant: expect.variant.clone(),
        })?;
    let test = info.healthcheck.clone().unwrap_or_default();
    let argv = healthcheck_argv(reference, &test)?;
    let run = LockedRun {
        // The ID, so a tag moved meanwhile cannot change what is checked.
        image: info.id.clone(),
        argv,
        name: format!(
            "sunaba-check-{}-{:08x}",
            expect.variant,
            rand::random::<u32>()
        ),
        timeout,
    };
    let out = engine.run_locked(&run).map_err(|source| CheckError::Run {
        reference: reference.to_string(),
        source,
    })?;
    let (tools, problems) = evaluate(
        expect,
        out.status.code(),
        &out.stdout,
        &out.stderr,
        info.size,
    );
    let passed = problems.is_empty() && tools.iter().all(|t| t.status == ToolStatus::Ok);
    Ok(CheckReport {
        variant: expect.variant.clone(),
        image: reference.to_string(),
        image_id: info.id.clone(),
        inputs: info.labels.get(LABEL_INPUTS).cloned(),
        size: info.size,
        size_budget: expect.size_budget,
        passed,
        tools,
        problems,
        seconds: started.elapsed().as_secs_f64(),
        recorded_id: None,
    })
}

/// The check record of a report.
pub fn check_record(report: &CheckReport, checked_at: &str) -> CheckRecord {
    CheckRecord {
        schema: CHECK_SCHEMA,
        status: if report.passed {
            CheckStatus::Pass
        } else {
            CheckStatus::Fail
        },
        variant: Some(report.variant.clone()),
        inputs: report.inputs.clone(),
        checked_at: Some(checked_at.to_string()),
        tools: report
            .tools
            .iter()
            .map(|t| (t.tool.clone(), t.version.clone()))
            .collect(),
    }
}

/// The `dev.sunaba.check` label value for a report.
pub fn record_json(report: &CheckReport, checked_at: &str) -> String {
    check_record(report, checked_at).to_label()
}

/// True when `info` already carries a passing record for these inputs and
/// this tool inventory (re-recording would only move the image ID, and with
/// it every child's inputs).
pub fn already_recorded(info: &ImageInfo, report: &CheckReport) -> bool {
    let Some(Ok(recorded)) = CheckRecord::from_labels(&info.labels) else {
        return false;
    };
    let wanted = check_record(report, "");
    recorded.passed()
        && recorded.variant == wanted.variant
        && recorded.inputs == wanted.inputs
        && recorded.tools == wanted.tools
}

/// A passing check record read from an image's labels, if any.
pub fn passing_record(info: &ImageInfo) -> Option<CheckRecord> {
    CheckRecord::passing_for(&info.labels)
}

/// Records a passing report on the image by a metadata-only build
/// (`FROM <from_ref>` plus a label: no new layer) and points `tags` at the
/// result. Returns the labelled image's ID.
pub fn record(
    engine: &dyn Engine,
    report: &CheckReport,
    from_ref: &str,
    tags: &[String],
    checked_at: &str,
) -> Result<String, CheckError> {
    let err = |source| CheckError::Record {
        reference: from_ref.to_string(),
        source,
    };
    let dir = tempfile::tempdir().map_err(|source| {
        err(EngineError::Io {
            context: "cannot create a temporary build context".into(),
            source,
        })
    })?;
    let dockerfile = dir.path().join("Dockerfile");
    std::fs::write(&dockerfile, format!("FROM {from_ref}\n")).map_err(|source| {
        err(EngineError::Io {
            context: format!("cannot write {}", dockerfile.display()),
            source,
        })
    })?;
    let req = BuildRequest {
        context: dir.path().to_path_buf(),
        dockerfile,
        tags: tags.to_vec(),
        labels: BTreeMap::from([(LABEL_CHECK.to_string(), record_json(report, checked_at))]),
        iidfile: dir.path().join("iid"),
        ..Default::default()
    };
    let mut log = String::new();
    engine
        .build(&req, &mut |l| {
            log.push_str(l);
            log.push('\n');
        })
        .map_err(|e| match e {
            EngineError::BuildFailed { command, status } => {
                err(EngineError::Process(crate::process::ProcessError::Failed {
                    command,
                    status,
                    stderr: log.clone(),
                }))
            }
            other => err(other),
        })
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A table for people: one block per image, one row per tool.
pub fn table(reports: &[CheckReport]) -> String {
    let mut out = String::new();
    for r in reports {
        out.push_str(&format!(
            "{} {}  {}  size {} / budget {}  ({:.1}s)\n",
            if r.passed { "PASS" } else { "FAIL" },
            r.variant,
            r.image,
            human_bytes(r.size),
            human_bytes(r.size_budget),
            r.seconds
        ));
        let width = r.tools.iter().map(|t| t.tool.len()).max().unwrap_or(4);
        for t in &r.tools {
            out.push_str(&format!(
                "  {:<11} {:<width$}  {:<12} {}\n",
                t.status.as_str(),
                t.tool,
                t.version,
                t.detail,
            ));
        }
        for p in &r.problems {
            out.push_str(&format!("  problem: {p}\n"));
        }
    }
    out
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 cannot carry most control characters at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one testsuite per image, one testcase per tool, plus one for
/// the size budget and one for problems that are not a tool's.
pub fn junit(reports: &[CheckReport]) -> String {
    let mut suites = String::new();
    let (mut total, mut failed) = (0, 0);
    for r in reports {
        let mut cases = String::new();
        let (mut n, mut f) = (0, 0);
        let mut case = |name: &str, failure: Option<String>| {
            n += 1;
            cases.push_str(&format!(
                "    <testcase classname=\"sunaba.{}\" name=\"{}\"",
                xml_escape(&r.variant),
                xml_escape(name)
            ));
            match failure {
                Some(msg) => {
                    f += 1;
                    cases.push_str(&format!(
                        ">\n      <failure message=\"{0}\">{0}</failure>\n    </testcase>\n",
                        xml_escape(&msg)
                    ));
                }
                None => cases.push_str("/>\n"),
            }
        };
        for t in &r.tools {
            let failure = (t.status != ToolStatus::Ok).then(|| {
                format!(
                    "{}: {} (version {})",
                    t.status.as_str(),
                    t.detail,
                    t.version
                )
            });
            case(&t.tool, failure);
        }
        let (size_problems, other): (Vec<&String>, Vec<&String>) =
            r.problems.iter().partition(|p| p.starts_with("size "));
        case("size budget", size_problems.first().map(|p| p.to_string()));
        if !other.is_empty() {
            case(
                "healthcheck",
                Some(
                    other
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
            );
        }
        total += n;
        failed += f;
        suites.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{n}\" failures=\"{f}\" time=\"{:.3}\">\n{cases}  </testsuite>\n",
            xml_escape(&format!("{} ({})", r.variant, r.image)),
            r.seconds
        ));
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"sunaba-images check\" \
         tests=\"{total}\" failures=\"{failed}\">\n{suites}</testsuites>\n"
    )
}

/// Writes the JUnit report for CI test reporters.
pub fn write_junit(path: &Path, reports: &[CheckReport]) -> Result<(), crate::fsutil::FsError> {
    crate::fsutil::atomic_write(path, junit(reports).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(tools: &[&str]) -> Expectation {
        Expectation {
            variant: "python".into(),
            owed_tools: tools.iter().map(|s| s.to_string()).collect(),
            size_budget: 1000,
        }
    }

    #[test]
    fn all_ok_passes() {
        let out = "ok\trg\t14.1.1\t\nok\tgofmt\tpresent\t\n";
        let (tools, problems) = evaluate(&expect(&["rg", "gofmt"]), Some(0), out, "", 10);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(tools.len(), 2);
        assert!(tools.iter().all(|t| t.status == ToolStatus::Ok));
        assert_eq!(tools[0].version, "14.1.1");
        assert_eq!(tools[1].version, "present");
    }

    #[test]
    fn each_failure_status_keeps_its_reason() {
        let out = "missing\tbeta\t-\tbeta not on PATH\n\
                   mismatch\tgamma\t-\toutput did not match 'gamma ([0-9.]+)'\n\
                   too-old\tdelta\t0.1.0\tbelow 1.0.0\n";
        let (tools, problems) =
            evaluate(&expect(&["beta", "gamma", "delta"]), Some(1), out, "", 10);
        assert!(problems.is_empty(), "{problems:?}");
        let status: Vec<_> = tools.iter().map(|t| t.status).collect();
        assert_eq!(
            status,
            [
                ToolStatus::Missing,
                ToolStatus::Mismatch,
                ToolStatus::TooOld
            ]
        );
        assert_eq!(tools[2].detail, "below 1.0.0");
    }

    #[test]
    fn an_older_render_fails_both_ways() {
        // The image checks rg and sd; the manifest now owes rg and jq.
        let out = "ok\trg\t14.1.1\t\nok\tsd\t1.0.0\t\n";
        let (tools, _) = evaluate(&expect(&["rg", "jq"]), Some(0), out, "", 10);
        let by: BTreeMap<_, _> = tools.iter().map(|t| (t.tool.as_str(), t.status)).collect();
        assert_eq!(by["rg"], ToolStatus::Ok);
        assert_eq!(by["jq"], ToolStatus::NotChecked);
        assert_eq!(by["sd"], ToolStatus::NotOwed);
    }

    #[test]
    fn size_over_budget_is_a_problem() {
        let (_, problems) = evaluate(&expect(&["rg"]), Some(0), "ok\trg\t1.0.0\t\n", "", 2048);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("exceeds the budget"), "{problems:?}");
        assert!(problems[0].contains("2.0 KiB"), "{problems:?}");
    }

    #[test]
    fn inconsistent_exit_status_and_garbage_are_problems() {
        let (_, p) = evaluate(&expect(&["rg"]), Some(0), "missing\trg\t-\tx\n", "", 1);
        assert!(p[0].contains("exited 0"), "{p:?}");
        let (_, p) = evaluate(&expect(&["rg"]), Some(3), "ok\trg\t1.0.0\t\n", "boom", 1);
        assert!(
            p[0].contains("exit status 3") && p[0].contains("boom"),
            "{p:?}"
        );
        let (tools, p) = evaluate(&expect(&["rg"]), Some(1), "sh: rg: not found\n", "", 1);
        assert!(p[0].contains("not `status"), "{p:?}");
        assert_eq!(tools[0].status, ToolStatus::NotChecked);
        let (_, p) = evaluate(&expect(&["rg"]), Some(127), "", "exec failed", 1);
        assert!(
            p.iter()
                .any(|p| p.contains("printed nothing") && p.contains("exec failed")),
            "{p:?}"
        );
    }

    #[test]
    fn healthcheck_forms() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            healthcheck_argv("i", &v(&["CMD", "/bin/sh", "/hc"])).unwrap(),
            ["/bin/sh", "/hc"]
        );
        assert_eq!(
            healthcheck_argv("i", &v(&["CMD-SHELL", "hc --all"])).unwrap(),
            ["/bin/sh", "-c", "hc --all"]
        );
        assert!(matches!(
            healthcheck_argv("i", &v(&["NONE"])),
            Err(CheckError::BadHealthcheck { .. })
        ));
        assert!(matches!(
            healthcheck_argv("i", &[]),
            Err(CheckError::NoHealthcheck { .. })
        ));
    }

    fn report(passed: bool) -> CheckReport {
        CheckReport {
            variant: "go".into(),
            image: "r:go".into(),
            image_id: "sha256:1".into(),
            inputs: Some("sha256:abc".into()),
            size: 5,
            size_budget: 10,
            passed,
            tools: vec![
                ToolResult {
                    tool: "go".into(),
                    status: ToolStatus::Ok,
                    version: "1.24.4".into(),
                    detail: String::new(),
                },
                ToolResult {
                    tool: "gofmt".into(),
                    status: if passed {
                        ToolStatus::Ok
                    } else {
                        ToolStatus::Missing
                    },
                    version: "present".into(),
                    detail: if passed {
                        String::new()
                    } else {
                        "not on PATH <&>".into()
                    },
                },
            ],
            problems: vec![],
            seconds: 1.5,
            recorded_id: None,
        }
    }

    #[test]
    fn record_json_follows_the_contract_and_round_trips() {
        let r = report(true);
        let json = record_json(&r, "2026-11-30T07:00:00Z");
        assert_eq!(
            json,
            r#"{"schema":1,"status":"pass","variant":"go","inputs":"sha256:abc","checked_at":"2026-11-30T07:00:00Z","tools":{"go":"1.24.4","gofmt":"present"}}"#
        );
        let mut info = ImageInfo {
            id: "sha256:2".into(),
            size: 5,
            labels: BTreeMap::from([
                (LABEL_CHECK.to_string(), json),
                (LABEL_INPUTS.to_string(), "sha256:abc".to_string()),
            ]),
            healthcheck: None,
            layers: vec![],
            repo_tags: vec![],
            repo_digests: vec![],
        };
        assert!(already_recorded(&info, &r));
        assert!(passing_record(&info).is_some());
        info.labels
            .insert(LABEL_INPUTS.to_string(), "sha256:other".to_string());
        assert!(passing_record(&info).is_none());
        let mut newer = r.clone();
        newer.tools[0].version = "1.25.0".into();
        assert!(!already_recorded(&info, &newer));
    }

    #[test]
    fn junit_has_a_testcase_per_tool_and_escapes() {
        let xml = junit(&[report(false)]);
        assert!(xml.contains(r#"tests="3" failures="1""#), "{xml}");
        assert!(
            xml.contains(r#"<testcase classname="sunaba.go" name="go"/>"#),
            "{xml}"
        );
        assert!(xml.contains("not on PATH &lt;&amp;&gt;"), "{xml}");
        assert!(xml.contains(r#"name="size budget"/>"#), "{xml}");
    }
}
