//! Judging an image's own HEALTHCHECK: its output against what images.toml
//! says the variant owes (and the size budget). The output format is fixed
//! in docs/contracts.md; `container` runs it.

use super::report::{ToolResult, ToolStatus, human_bytes};
use super::{CheckError, Expectation};
use std::collections::{BTreeMap, BTreeSet};

/// Splits healthcheck output into tool lines. Lines that do not follow the
/// contract are returned separately.
pub(crate) fn parse_output(stdout: &str) -> (Vec<ToolResult>, Vec<String>) {
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

/// Judges one healthcheck run against what the variant owes, and `size`
/// against the budget (`None`: an image not held to it, a custom one).
pub(crate) fn evaluate(
    expect: &Expectation,
    exit_code: Option<i32>,
    stdout: &str,
    stderr: &str,
    size: Option<u64>,
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
    if let Some(size) = size.filter(|s| *s > expect.size_budget) {
        problems.push(over_budget(&expect.variant, size, expect.size_budget));
    }
    (tools, problems)
}

/// An image over its size budget: by how much, where the budget is, and a
/// value that fits with headroom.
pub(super) fn over_budget(variant: &str, size: u64, budget: u64) -> String {
    format!(
        "size {} exceeds the budget of {} by {}: raise images.toml \
         variants.{variant}.size_budget (size_budget = \"{}\" leaves about 10% headroom), \
         or make the image smaller",
        human_bytes(size),
        human_bytes(budget),
        human_bytes(size - budget),
        suggested_budget(size)
    )
}

/// `size` plus 10%, rounded up to whole MiB (to 10 MiB from 100 MiB on), as
/// images.toml writes sizes.
fn suggested_budget(size: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    let mib = (size + size / 10).div_ceil(MIB).max(1);
    let mib = if mib >= 100 {
        mib.div_ceil(10) * 10
    } else {
        mib
    };
    format!("{mib}MiB")
}

/// The argv to run for a `Config.Healthcheck.Test` value.
pub(crate) fn healthcheck_argv(
    reference: &str,
    test: &[String],
) -> Result<Vec<String>, CheckError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(tools: &[&str]) -> Expectation {
        Expectation {
            variant: "python".into(),
            owed_tools: tools.iter().map(|s| s.to_string()).collect(),
            size_budget: 1000,
            smoke: Default::default(),
        }
    }

    #[test]
    fn all_ok_passes() {
        let out = "ok\trg\t14.1.1\t\nok\tgofmt\tpresent\t\n";
        let (tools, problems) = evaluate(&expect(&["rg", "gofmt"]), Some(0), out, "", Some(10));
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
        let (tools, problems) = evaluate(
            &expect(&["beta", "gamma", "delta"]),
            Some(1),
            out,
            "",
            Some(10),
        );
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
        let (tools, _) = evaluate(&expect(&["rg", "jq"]), Some(0), out, "", Some(10));
        let by: BTreeMap<_, _> = tools.iter().map(|t| (t.tool.as_str(), t.status)).collect();
        assert_eq!(by["rg"], ToolStatus::Ok);
        assert_eq!(by["jq"], ToolStatus::NotChecked);
        assert_eq!(by["sd"], ToolStatus::NotOwed);
    }

    #[test]
    fn size_over_budget_is_a_problem() {
        let (_, problems) = evaluate(
            &expect(&["rg"]),
            Some(0),
            "ok\trg\t1.0.0\t\n",
            "",
            Some(2048),
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(
            problems[0],
            "size 2.0 KiB exceeds the budget of 1000 B by 1.0 KiB: raise images.toml \
             variants.python.size_budget (size_budget = \"1MiB\" leaves about 10% headroom), \
             or make the image smaller"
        );
        let (_, custom) = evaluate(&expect(&["rg"]), Some(0), "ok\trg\t1.0.0\t\n", "", None);
        assert!(custom.is_empty(), "not held to the budget: {custom:?}");
        assert_eq!(suggested_budget(700 * 1024 * 1024), "770MiB");
        assert_eq!(suggested_budget(1_250_000_000), "1320MiB");
        assert_eq!(suggested_budget(50 * 1024 * 1024), "55MiB");
    }

    #[test]
    fn inconsistent_exit_status_and_garbage_are_problems() {
        let (_, p) = evaluate(
            &expect(&["rg"]),
            Some(0),
            "missing\trg\t-\tx\n",
            "",
            Some(1),
        );
        assert!(p[0].contains("exited 0"), "{p:?}");
        let (_, p) = evaluate(
            &expect(&["rg"]),
            Some(3),
            "ok\trg\t1.0.0\t\n",
            "boom",
            Some(1),
        );
        assert!(
            p[0].contains("exit status 3") && p[0].contains("boom"),
            "{p:?}"
        );
        let (tools, p) = evaluate(
            &expect(&["rg"]),
            Some(1),
            "sh: rg: not found\n",
            "",
            Some(1),
        );
        assert!(p[0].contains("not `status"), "{p:?}");
        assert_eq!(tools[0].status, ToolStatus::NotChecked);
        let (_, p) = evaluate(&expect(&["rg"]), Some(127), "", "exec failed", Some(1));
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
}
