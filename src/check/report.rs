//! What a check found, for people and for CI: the per-tool results, the
//! report of one image, the table and the JUnit XML.

use crate::name::Platform;
use crate::smoke::{Skipped, SmokeResult};
use crate::table::{Column, Table};
use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesText, Event};
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolStatus {
    Ok,
    Missing,
    Failed,
    Mismatch,
    TooOld,
    /// Outside the tool contract's `series`.
    OffSeries,
    /// Owed by images.toml but not asserted by the image's healthcheck.
    NotChecked,
    /// Asserted by the healthcheck but no longer owed by images.toml.
    NotOwed,
}

impl ToolStatus {
    pub(super) fn parse(s: &str) -> Option<ToolStatus> {
        Some(match s {
            "ok" => ToolStatus::Ok,
            "missing" => ToolStatus::Missing,
            "failed" => ToolStatus::Failed,
            "mismatch" => ToolStatus::Mismatch,
            "too-old" => ToolStatus::TooOld,
            "off-series" => ToolStatus::OffSeries,
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
            ToolStatus::OffSeries => "off-series",
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
    /// One result per smoke case run.
    pub smoke: Vec<SmokeResult>,
    /// Smoke commands not run: the variant does not owe their tools.
    pub smoke_skipped: Vec<Skipped>,
    /// The smoke suite that ran (`crate::smoke::Plan::digest`).
    pub smoke_digest: Option<String>,
    /// Things said that do not fail the check.
    pub notes: Vec<String>,
    pub seconds: f64,
    /// The labelled image, when the result was recorded.
    pub recorded_id: Option<String>,
    /// The image's platform (`linux/arm64`), from its config; written `""`
    /// when the engine did not say or the image was never looked at.
    #[serde(serialize_with = "platform_or_empty")]
    pub platform: Option<Platform>,
    /// It ran under emulation (not the engine's own platform), with the
    /// time limit multiplied by [`EMULATION_TIMEOUT_FACTOR`].
    pub emulated: bool,
    /// Checked as a custom image (`check VARIANT --image REF` of an image
    /// that is not this family's VARIANT): with the project's rendered
    /// healthcheck, the size budget and the image's own HEALTHCHECK as
    /// information, and no pass recorded on it.
    pub custom: bool,
}

fn platform_or_empty<S: serde::Serializer>(p: &Option<Platform>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.collect_str(p),
        None => s.serialize_str(""),
    }
}

/// How much longer a check may take under emulation: qemu-user ran the
/// family's arm64 builds ~13x slower than amd64 on the 2-core development
/// machine (base: 676 s against 50 s), CPU-bound tools in the smoke (pyright,
/// tsc) about as much.
pub(crate) const EMULATION_TIMEOUT_FACTOR: u32 = 15;

impl CheckReport {
    /// The report of an image that could not be checked at all.
    pub fn unchecked(variant: &str, image: &str, size_budget: u64, problem: String) -> CheckReport {
        CheckReport {
            variant: variant.to_string(),
            image: image.to_string(),
            image_id: String::new(),
            inputs: None,
            size: 0,
            size_budget,
            passed: false,
            tools: Vec::new(),
            problems: vec![problem],
            smoke: Vec::new(),
            smoke_skipped: Vec::new(),
            smoke_digest: None,
            notes: Vec::new(),
            seconds: 0.0,
            recorded_id: None,
            // Never looked at: no platform to say.
            platform: None,
            emulated: false,
            custom: false,
        }
    }

    /// The same report with what the engine says of the image (it was
    /// found, but could not be checked): its ID, size and platform.
    pub(crate) fn of_image(mut self, info: &crate::engine::ImageInfo) -> CheckReport {
        self.image_id = info.id.clone();
        self.size = info.size;
        self.platform = info.platform.clone();
        self
    }

    /// The image's size for people; `-` for an image never looked at.
    pub(crate) fn size_shown(&self) -> String {
        if self.image_id.is_empty() {
            "-".to_string()
        } else {
            human_bytes(self.size)
        }
    }

    /// `78.0 MiB / budget 700.0 MiB`; a custom image's budget is said to
    /// be information.
    pub(crate) fn size_text(&self) -> String {
        let (size, budget) = (self.size_shown(), human_bytes(self.size_budget));
        if self.custom {
            format!("{size} ({}'s budget {budget}: information)", self.variant)
        } else {
            format!("{size} / budget {budget}")
        }
    }

    /// One line naming why the check failed (for build summaries).
    pub fn reason(&self) -> String {
        let mut reasons: Vec<String> = self
            .tools
            .iter()
            .filter(|t| t.status != ToolStatus::Ok)
            .map(|t| format!("{} {}", t.tool, t.status.as_str()))
            .collect();
        reasons.extend(self.problems.iter().cloned());
        reasons.extend(
            self.smoke
                .iter()
                .filter(|r| !r.passed())
                .map(|r| format!("smoke {}: {}", r.label(), r.problems.join("; "))),
        );
        reasons.join("; ")
    }
}

/// Output lines a failed smoke case shows in the table.
const TABLE_TAIL_LINES: usize = 8;

/// The smoke rows of one report: a line per case, the tail of a failed
/// case's output under it, one line for what was skipped.
fn smoke_rows(r: &CheckReport) -> String {
    let mut out = String::new();
    for s in &r.smoke {
        let detail = if s.passed() {
            let mut d = s.seconds.map(|t| format!("{t:.2}s")).unwrap_or_default();
            if let Some(res) = s.resolution {
                d.push_str(&format!(" ({res})"));
            }
            d
        } else {
            s.problems.join("; ")
        };
        out.push_str(&format!(
            "  smoke {} {}  {}\n",
            if s.passed() { "pass" } else { "FAIL" },
            s.label(),
            detail.trim()
        ));
        if !s.passed() {
            for line in crate::process::tail_lines(&s.output_tail, TABLE_TAIL_LINES).lines() {
                out.push_str(&format!("    | {line}\n"));
            }
        }
    }
    if !r.smoke_skipped.is_empty() {
        let names: Vec<String> = r
            .smoke_skipped
            .iter()
            .map(|s| format!("{}/{} ({})", s.suite, s.command, s.missing.join(", ")))
            .collect();
        out.push_str(&format!(
            "  smoke skip {} does not owe: {}\n",
            r.variant,
            names.join(", ")
        ));
    }
    out
}

/// Bytes for people with one decimal (`2.0 KiB`, `512 B`).
pub(crate) fn human_bytes(n: u64) -> String {
    bytesize::ByteSize(n).display().iec().to_string()
}

/// A table for people: one block per image, one row per tool.
pub(crate) fn table(reports: &[CheckReport]) -> String {
    let mut out = String::new();
    for r in reports {
        out.push_str(&format!(
            "{} {}  {}  size {}  ({:.1}s)\n",
            if r.passed { "PASS" } else { "FAIL" },
            r.variant,
            r.image,
            r.size_text(),
            r.seconds
        ));
        let mut tools = Table::new([
            Column::left().width(11).gap("  "),
            Column::left().gap(" "),
            Column::left().width(12),
            Column::left().gap(" "),
        ]);
        for t in &r.tools {
            tools.row([t.status.as_str(), &t.tool, &t.version, &t.detail]);
        }
        out.push_str(&tools.render());
        out.push_str(&smoke_rows(r));
        for n in &r.notes {
            out.push_str(&format!("  note: {n}\n"));
        }
        for p in &r.problems {
            out.push_str(&format!("  problem: {p}\n"));
        }
    }
    out
}

/// One JUnit testcase: a tool, the size budget, the healthcheck itself, or
/// a smoke case (with its own class and its output).
#[derive(Default)]
struct Case {
    classname: Option<String>,
    name: String,
    failure: Option<String>,
    skipped: Option<String>,
    output: Option<String>,
}

/// The cases of one image: one per tool, one for the size budget, and one
/// for the problems that are not a tool's (only when there are any).
fn cases(r: &CheckReport) -> Vec<Case> {
    let mut cases: Vec<Case> = r
        .tools
        .iter()
        .map(|t| Case {
            name: t.tool.clone(),
            failure: (t.status != ToolStatus::Ok).then(|| {
                format!(
                    "{}: {} (version {})",
                    t.status.as_str(),
                    t.detail,
                    t.version
                )
            }),
            ..Case::default()
        })
        .collect();
    let (size_problems, other): (Vec<&String>, Vec<&String>) =
        r.problems.iter().partition(|p| p.starts_with("size "));
    cases.push(Case {
        name: "size budget".into(),
        failure: size_problems.first().map(|p| p.to_string()),
        ..Case::default()
    });
    if !other.is_empty() {
        let joined: Vec<&str> = other.iter().map(|s| s.as_str()).collect();
        cases.push(Case {
            name: "healthcheck".into(),
            failure: Some(joined.join("; ")),
            ..Case::default()
        });
    }
    for s in &r.smoke {
        cases.push(Case {
            classname: Some(format!("sunaba.{}.smoke.{}", r.variant, s.suite)),
            name: format!("{} [{}]", s.command, s.project),
            failure: (!s.passed()).then(|| s.problems.join("; ")),
            output: Some(s.output_tail.clone()),
            ..Case::default()
        });
    }
    for s in &r.smoke_skipped {
        cases.push(Case {
            classname: Some(format!("sunaba.{}.smoke.{}", r.variant, s.suite)),
            name: s.command.clone(),
            skipped: Some(format!(
                "{} does not owe {}",
                r.variant,
                s.missing.join(", ")
            )),
            ..Case::default()
        });
    }
    cases
}

/// XML 1.0 cannot carry most control characters at all, escaped or not
/// (quick-xml escapes markup, not these).
fn xml_text(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => '?',
            c => c,
        })
        .collect()
}

/// JUnit XML: one testsuite per image, one testcase per tool, plus one for
/// the size budget and one for problems that are not a tool's. Written with
/// quick-xml (escaping); quick-junit is not used because its fixed attribute
/// order (`tests skipped failures errors`) breaks the `tests=".." failures=".."`
/// that CI readers and the tests look for.
pub(crate) fn junit(reports: &[CheckReport]) -> String {
    let suites: Vec<(&CheckReport, Vec<Case>)> = reports.iter().map(|r| (r, cases(r))).collect();
    let failures = |cases: &[Case]| cases.iter().filter(|c| c.failure.is_some()).count();
    let total: usize = suites.iter().map(|(_, c)| c.len()).sum();
    let failed: usize = suites.iter().map(|(_, c)| failures(c)).sum();
    let skips = |cases: &[Case]| cases.iter().filter(|c| c.skipped.is_some()).count();
    let skipped: usize = suites.iter().map(|(_, c)| skips(c)).sum();

    let mut xml = Writer::new_with_indent(Vec::new(), b' ', 2);
    let written: std::io::Result<()> = (|| {
        xml.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        xml.create_element("testsuites")
            .with_attributes([
                ("name", "sunaba-images check"),
                ("tests", &total.to_string()),
                ("failures", &failed.to_string()),
                ("skipped", &skipped.to_string()),
            ])
            .write_inner_content(|xml| {
                for (r, cases) in &suites {
                    let classname = xml_text(&format!("sunaba.{}", r.variant));
                    xml.create_element("testsuite")
                        .with_attributes([
                            (
                                "name",
                                xml_text(&format!("{} ({})", r.variant, r.image)).as_str(),
                            ),
                            ("tests", &cases.len().to_string()),
                            ("failures", &failures(cases).to_string()),
                            ("skipped", &skips(cases).to_string()),
                            ("time", &format!("{:.3}", r.seconds)),
                        ])
                        .write_inner_content(|xml| {
                            for case in cases {
                                let class = case
                                    .classname
                                    .as_deref()
                                    .map(xml_text)
                                    .unwrap_or_else(|| classname.clone());
                                let testcase = xml.create_element("testcase").with_attributes([
                                    ("classname", class.as_str()),
                                    ("name", &xml_text(&case.name)),
                                ]);
                                if case.failure.is_none()
                                    && case.skipped.is_none()
                                    && case.output.is_none()
                                {
                                    testcase.write_empty()?;
                                    continue;
                                }
                                testcase.write_inner_content(|xml| {
                                    if let Some(message) = &case.failure {
                                        let message = xml_text(message);
                                        let text = match &case.output {
                                            Some(out) => format!(
                                                "{message}\n--- last lines of its output:\n{}",
                                                xml_text(out)
                                            ),
                                            None => message.clone(),
                                        };
                                        xml.create_element("failure")
                                            .with_attribute(("message", message.as_str()))
                                            .write_text_content(BytesText::new(&text))?;
                                    }
                                    if let Some(message) = &case.skipped {
                                        xml.create_element("skipped")
                                            .with_attribute(("message", xml_text(message).as_str()))
                                            .write_empty()?;
                                    }
                                    if let Some(out) = &case.output {
                                        xml.create_element("system-out")
                                            .write_text_content(BytesText::new(&xml_text(out)))?;
                                    }
                                    Ok(())
                                })?;
                            }
                            Ok(())
                        })?;
                }
                Ok(())
            })?;
        Ok(())
    })();
    written.expect("writing XML to memory cannot fail");
    let mut text = String::from_utf8(xml.into_inner()).expect("quick-xml writes UTF-8");
    text.push('\n');
    text
}

/// Writes the JUnit report for CI test reporters.
pub(crate) fn write_junit(
    path: &Path,
    reports: &[CheckReport],
) -> Result<(), crate::fsutil::FsError> {
    crate::fsutil::atomic_write(path, junit(reports).as_bytes())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn report(passed: bool) -> CheckReport {
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
            smoke: vec![],
            smoke_skipped: vec![],
            smoke_digest: Some("sha256:5m0ke".into()),
            notes: vec![],
            seconds: 1.5,
            recorded_id: None,
            platform: Some("linux/amd64".parse().unwrap()),
            emulated: false,
            custom: false,
        }
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
