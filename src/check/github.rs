//! `check --format github`: an `::error` annotation per failing tool, at its
//! `[tools.NAME]` in images.toml, per failing smoke case, at its
//! `[smoke.SUITE]`, and per broken budget, at the variant's `size_budget`;
//! the most important first (a missing tool before a wrong version before a
//! size; the default variant, which serves every language,
//! before the others). And the step summary: each variant's result, size
//! against budget, and what failed.

use super::report::{CheckReport, ToolStatus, human_bytes};
use crate::github::Annotation;
use std::path::Path;

/// How bad a tool's status is: lower is worse.
fn severity(status: ToolStatus) -> u32 {
    match status {
        ToolStatus::Missing => 0,
        ToolStatus::Failed => 1,
        ToolStatus::Mismatch => 2,
        ToolStatus::TooOld | ToolStatus::OffSeries => 3,
        ToolStatus::NotChecked => 4,
        ToolStatus::NotOwed => 5,
        ToolStatus::Ok => 6,
    }
}

/// What `check --format github` writes: the annotations of `reports`, at
/// their lines of images.toml, and the step summary.
pub(crate) fn output(
    reports: &[CheckReport],
    manifest: &crate::manifest::Manifest,
) -> (Vec<Annotation>, String) {
    let text = std::fs::read_to_string(&manifest.path).unwrap_or_default();
    (
        annotations(reports, (&manifest.path, &text), &manifest.default),
        summary(reports),
    )
}

/// The annotations of `reports`; `manifest` is images.toml's path and text,
/// `default` the variant every language depends on.
pub(crate) fn annotations(
    reports: &[CheckReport],
    manifest: (&Path, &str),
    default: &str,
) -> Vec<Annotation> {
    let (path, text) = manifest;
    let mut out = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let others = if r.variant == default {
            0
        } else {
            100 + i as u32
        };
        for t in r.tools.iter().filter(|t| t.status != ToolStatus::Ok) {
            let line = crate::github::toml_line(text, &format!("tools.{}", t.tool), None);
            let detail = if t.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", t.detail)
            };
            out.push(
                Annotation::error(
                    severity(t.status) * 1000 + others,
                    format!(
                        "{} ({}): {} {} (version {}){detail}",
                        r.variant,
                        r.image,
                        t.tool,
                        t.status.as_str(),
                        t.version
                    ),
                )
                .at(path, line)
                .title(format!("{}: {} {}", r.variant, t.tool, t.status.as_str())),
            );
        }
        // A failing smoke case is a tool failing on code: as bad as a
        // failed probe, at its suite's table.
        for case in r.smoke.iter().filter(|c| !c.passed()) {
            let line = crate::github::toml_line(text, &format!("smoke.{}", case.suite), None);
            out.push(
                Annotation::error(
                    severity(ToolStatus::Failed) * 1000 + 500 + others,
                    format!(
                        "{} ({}): smoke {}: {}",
                        r.variant,
                        r.image,
                        case.label(),
                        case.problems.join("; ")
                    ),
                )
                .at(path, line)
                .title(format!("{}: smoke {} failed", r.variant, case.label())),
            );
        }
        let table = format!("variants.{}", r.variant);
        if r.size > r.size_budget && !r.custom {
            out.push(
                Annotation::error(
                    7000 + others,
                    format!(
                        "{}: {}",
                        r.variant,
                        super::healthcheck::over_budget(&r.variant, r.size, r.size_budget)
                    ),
                )
                .at(
                    path,
                    crate::github::toml_line(text, &table, Some("size_budget")),
                )
                .title(format!("{}: over its size budget", r.variant)),
            );
        }
        for p in r
            .problems
            .iter()
            .filter(|p| !p.contains("exceeds the budget"))
        {
            out.push(
                Annotation::error(8000 + others, format!("{}: {p}", r.variant))
                    .at(path, crate::github::toml_line(text, &table, None))
                    .title(format!("{}: check failed", r.variant)),
            );
        }
    }
    crate::github::ordered(out)
}

/// The step summary: a row per image, then what failed.
pub(crate) fn summary(reports: &[CheckReport]) -> String {
    let mut out = String::from(
        "### Image checks\n\n| variant | result | size / budget | tools | failing |\n| --- | --- | --- | --- | --- |\n",
    );
    for r in reports {
        let failing: Vec<String> = r
            .tools
            .iter()
            .filter(|t| t.status != ToolStatus::Ok)
            .map(|t| format!("{} {}", t.tool, t.status.as_str()))
            .chain(
                r.smoke
                    .iter()
                    .filter(|c| !c.passed())
                    .map(|c| format!("smoke {}", c.label())),
            )
            .chain(r.problems.iter().cloned())
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} / {}{} | {} | {} |\n",
            r.variant,
            if r.passed { "pass" } else { "**FAIL**" },
            r.size_shown(),
            human_bytes(r.size_budget),
            if r.custom { " (information)" } else { "" },
            r.tools.len(),
            failing.join("; ").replace('|', "\\|")
        ));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::super::report::ToolResult;
    use super::*;

    fn report(variant: &str, tools: &[(&str, ToolStatus)], size: u64) -> CheckReport {
        CheckReport {
            variant: variant.into(),
            image: format!("r/s:{variant}"),
            image_id: "sha256:1".into(),
            inputs: None,
            size,
            size_budget: 1 << 20,
            passed: false,
            tools: tools
                .iter()
                .map(|(t, s)| ToolResult {
                    tool: t.to_string(),
                    status: *s,
                    version: "-".into(),
                    detail: String::new(),
                })
                .collect(),
            problems: Vec::new(),
            smoke: Vec::new(),
            smoke_skipped: Vec::new(),
            smoke_digest: None,
            notes: Vec::new(),
            seconds: 0.0,
            recorded_id: None,
            platform: Some("linux/amd64".parse().unwrap()),
            emulated: false,
            custom: false,
        }
    }

    #[test]
    fn the_worst_first_the_default_first_and_each_at_its_line() {
        let text = "[tools.ruff]\nprobe = []\n[tools.go]\nprobe = []\n[variants.go]\nsize_budget = \"1MiB\"\n";
        let reports = [
            report("go", &[("go", ToolStatus::Mismatch)], 2 << 20),
            report(
                "full",
                &[("ruff", ToolStatus::Mismatch), ("go", ToolStatus::Ok)],
                1,
            ),
            report("python", &[("ruff", ToolStatus::Missing)], 1),
        ];
        let got: Vec<String> = annotations(&reports, (Path::new("images.toml"), text), "full")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "::error file=images.toml,line=1,title=python%3A ruff missing::python (r/s:python): ruff missing (version -)",
                "::error file=images.toml,line=1,title=full%3A ruff mismatch::full (r/s:full): ruff mismatch (version -)",
                "::error file=images.toml,line=3,title=go%3A go mismatch::go (r/s:go): go mismatch (version -)",
                "::error file=images.toml,line=6,title=go%3A over its size budget::go: size 2.0 MiB exceeds the budget of 1.0 MiB by 1.0 MiB: raise images.toml variants.go.size_budget (size_budget = \"3MiB\" leaves about 10%25 headroom), or make the image smaller",
            ]
        );
        let s = summary(&reports);
        assert!(
            s.contains("| go | **FAIL** | 2.0 MiB / 1.0 MiB | 1 | go mismatch |"),
            "{s}"
        );
    }

    #[test]
    fn a_failing_smoke_case_is_an_error_at_its_suite_after_a_missing_tool() {
        use crate::smoke::{SmokeResult, SmokeStatus};
        let text = "[tools.go]\nprobe = []\n[smoke.go]\ndir = \"x\"\n";
        let case = |status| SmokeResult {
            suite: "go".into(),
            command: "go vet ./...".into(),
            project: "pass".into(),
            argv: vec!["go".into(), "vet".into(), "./...".into()],
            resolution: None,
            writes: false,
            status,
            exit: Some(1),
            expected_exit: 0,
            problems: vec!["exit 1, expected 0".into()],
            changed: Vec::new(),
            output_tail: String::new(),
            seconds: None,
            cpu_seconds: None,
        };
        let mut go = report("go", &[("go", ToolStatus::Missing)], 1);
        go.smoke = vec![case(SmokeStatus::Fail), case(SmokeStatus::Pass)];
        let got: Vec<String> = annotations(
            std::slice::from_ref(&go),
            (Path::new("images.toml"), text),
            "full",
        )
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            got,
            [
                "::error file=images.toml,line=1,title=go%3A go missing::go (r/s:go): go missing (version -)",
                "::error file=images.toml,line=3,title=go%3A smoke go/go vet ./... [pass] failed::go (r/s:go): smoke go/go vet ./... [pass]: exit 1, expected 0",
            ]
        );
        assert!(summary(&[go]).contains("go missing; smoke go/go vet ./... [pass] |"));
    }
}
