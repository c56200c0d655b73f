//! The check record on an image: the `dev.sunaba.check` label a passing
//! check sets on the image, and reading it back.
//!
//! The record is a function of the image and the report's verdicts — no
//! time, duration, host or map order (docs/contracts.md, "The check
//! record") — and it is set by rewriting the config alone
//! ([`crate::normalize::relabel`]), so checking one image twice gives one
//! labelled image ID, and the pinned digest does not depend on when the
//! check ran or how long a smoke case took.

use super::report::CheckReport;
use super::{CheckError, LABEL_CHECK};
use crate::engine::{Engine, ImageInfo};
use crate::family::Family;
use crate::labels::{CHECK_SCHEMA, CheckRecord, CheckStatus, SmokeRecord};
use std::collections::{BTreeMap, BTreeSet};

/// The check record of a report.
pub(crate) fn check_record(report: &CheckReport) -> CheckRecord {
    CheckRecord {
        schema: CHECK_SCHEMA,
        status: if report.passed {
            CheckStatus::Pass
        } else {
            CheckStatus::Fail
        },
        variant: Some(report.variant.clone()),
        inputs: report.inputs.clone(),
        checked_at: None,
        tools: report
            .tools
            .iter()
            .map(|t| (t.tool.clone(), t.version.clone()))
            .collect(),
        smoke: report.smoke_digest.as_ref().map(|digest| {
            let mut suites: BTreeMap<String, usize> = BTreeMap::new();
            for r in report.smoke.iter().filter(|r| r.passed()) {
                *suites.entry(r.suite.clone()).or_default() += 1;
            }
            SmokeRecord {
                digest: digest.clone(),
                suites,
            }
        }),
    }
}

/// Whether a record's smoke is the one `expect` runs today (same digest):
/// a pass recorded before the smoke suite or its projects changed does not
/// count, so an unchanged image is checked again.
pub(crate) fn smoke_is_current(record: &CheckRecord, expect: &super::Expectation) -> bool {
    match (&record.smoke, expect.smoke.digest()) {
        (Some(smoke), Ok(digest)) => smoke.digest == digest,
        _ => false,
    }
}

/// The `dev.sunaba.check` label value for a report.
pub(crate) fn record_json(report: &CheckReport) -> String {
    check_record(report).to_label()
}

/// True when `info` already carries a passing record for these inputs and
/// this tool inventory (re-recording would only move the image ID, and with
/// it every child's inputs).
pub(crate) fn already_recorded(info: &ImageInfo, report: &CheckReport) -> bool {
    let Some(Ok(recorded)) = CheckRecord::from_labels(&info.labels) else {
        return false;
    };
    let wanted = check_record(report);
    recorded.passed()
        && recorded.variant == wanted.variant
        && recorded.inputs == wanted.inputs
        && recorded.tools == wanted.tools
        && recorded.smoke == wanted.smoke
}

/// A passing check record read from an image's labels, if any.
pub(crate) fn passing_record(info: &ImageInfo) -> Option<CheckRecord> {
    CheckRecord::passing_for(&info.labels)
}

/// Records a passing report on the image `from_ref` (its config gets the
/// label; layers, `created` and history stay) and points `tags` at the
/// result; `id` is `from_ref`'s image ID. Returns the labelled image's ID.
pub(crate) fn record(
    engine: &dyn Engine,
    report: &CheckReport,
    from_ref: &str,
    id: &str,
    tags: &[String],
) -> Result<String, CheckError> {
    let labels = BTreeMap::from([(LABEL_CHECK.to_string(), record_json(report))]);
    crate::normalize::relabel(engine, from_ref, Some(id), &labels, tags).map_err(|source| {
        CheckError::Record {
            reference: from_ref.to_string(),
            source: Box::new(source),
        }
    })
}

/// Records a passing check on the image (unless it already carries the
/// same record) and moves this variant's tags in `family` — the reference
/// checked, the variant tag and the inputs tag, where they point at the
/// checked image — to the labelled image. Tags of other repositories that
/// share the image stay put. Returns the labelled image's ID, or `None`
/// when `reference` is not a local tag of this family: BuildKit cannot
/// build FROM a bare image ID, so there is nothing to record on. When
/// another build recorded this same pass first, its labelled image's ID.
pub(crate) fn record_pass(
    family: &Family,
    engine: &dyn Engine,
    reference: &str,
    report: &CheckReport,
) -> Result<Option<String>, CheckError> {
    let info = engine
        .inspect(&report.image_id)?
        .ok_or_else(|| CheckError::NoImage {
            reference: report.image.clone(),
            variant: report.variant.clone(),
        })?;
    if already_recorded(&info, report) {
        return Ok(Some(info.id));
    }
    let foreign = report.platform.as_ref().filter(|_| report.emulated);
    let mut tags = vec![
        reference.to_string(),
        family.platform_tag(&report.variant, foreign),
    ];
    if let Some(inputs) = &report.inputs {
        tags.push(family.inputs_tag(&report.variant, inputs));
    }
    let mut seen = BTreeSet::new();
    tags.retain(|t| seen.insert(t.clone()) && info.repo_tags.contains(t));
    let Some(from) = tags.first() else {
        return labelled_twin(engine, reference, &info, report);
    };
    // `from` is one of the inspected image's tags: its ID is known.
    record(engine, report, from, &info.id, &tags).map(Some)
}

/// The image `reference` points at now, when it is `checked` with this very
/// pass already recorded: another build of the family in the same engine
/// (a second CI job, two test runs) checked the same inputs, recorded first
/// and moved the tags to its labelled image. Same layers and the same record
/// (its inputs included) make it the image this pass would have labelled.
fn labelled_twin(
    engine: &dyn Engine,
    reference: &str,
    checked: &ImageInfo,
    report: &CheckReport,
) -> Result<Option<String>, CheckError> {
    Ok(engine.inspect(reference)?.and_then(|now| {
        (now.id != checked.id && now.layers == checked.layers && already_recorded(&now, report))
            .then_some(now.id)
    }))
}

#[cfg(test)]
mod tests {
    use super::super::report::tests::report;
    use super::super::report::{ToolResult, ToolStatus};
    use super::*;
    use crate::check::LABEL_INPUTS;
    use crate::semver_rules::tests::{inv, labels};
    use crate::semver_rules::{Refusal, gate};

    #[test]
    fn record_json_follows_the_contract_and_round_trips() {
        // Nothing of when or how long: the same verdicts on the same image
        // give the same label, so the labelled image ID does not move.
        let r = report(true);
        let json = record_json(&r);
        assert_eq!(
            json,
            r#"{"schema":1,"status":"pass","variant":"go","inputs":"sha256:abc","tools":{"go":"1.24.4","gofmt":"present"},"smoke":{"digest":"sha256:5m0ke","suites":{}}}"#
        );
        let mut info = ImageInfo {
            id: "sha256:2".into(),
            size: 5,
            labels: BTreeMap::from([
                (LABEL_CHECK.to_string(), json),
                (LABEL_INPUTS.to_string(), "sha256:abc".to_string()),
            ]),
            healthcheck: None,
            user: String::new(),
            env: Vec::new(),
            layers: vec![],
            repo_tags: vec![],
            repo_digests: vec![],
            platform: Some("linux/amd64".parse().unwrap()),
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

    /// Two builds of one family in one engine: the other recorded the same
    /// pass first and moved the tags, so the checked image has none left.
    #[test]
    fn a_pass_another_build_recorded_first_is_taken_not_refused() {
        use crate::engine::fake::FakeEngine;
        let family = Family {
            repository: "r".into(),
            ..Default::default()
        };
        let r = report(true);
        let checked = ImageInfo {
            id: r.image_id.clone(),
            size: 5,
            labels: BTreeMap::new(),
            healthcheck: None,
            user: String::new(),
            env: Vec::new(),
            layers: vec!["sha256:l1".into(), "sha256:l2".into()],
            repo_tags: vec![],
            repo_digests: vec![],
            platform: None,
        };
        let twin = ImageInfo {
            id: "sha256:labelled".into(),
            labels: BTreeMap::from([
                (LABEL_CHECK.to_string(), record_json(&r)),
                (LABEL_INPUTS.to_string(), "sha256:abc".to_string()),
            ]),
            repo_tags: vec![r.image.clone(), "r:go".into()],
            ..checked.clone()
        };
        let engine = FakeEngine::default();
        let images = |reference: ImageInfo| {
            let mut images = engine.images.lock().unwrap();
            images.insert(checked.id.clone(), checked.clone());
            images.insert(r.image.clone(), reference);
        };
        images(twin.clone());
        assert_eq!(
            record_pass(&family, &engine, &r.image, &r)
                .unwrap()
                .as_deref(),
            Some("sha256:labelled")
        );
        // Other layers, or another record, are not this pass: still refused.
        images(ImageInfo {
            layers: vec!["sha256:l1".into()],
            ..twin.clone()
        });
        assert_eq!(record_pass(&family, &engine, &r.image, &r).unwrap(), None);
        let mut newer = r.clone();
        newer.tools[0].version = "1.25.0".into();
        images(twin);
        assert_eq!(
            record_pass(&family, &engine, &r.image, &newer).unwrap(),
            None
        );
    }

    #[test]
    fn gate_reads_the_record_check_writes() {
        let tool = |t: &str, v: &str| ToolResult {
            tool: t.into(),
            status: ToolStatus::Ok,
            version: v.into(),
            detail: String::new(),
        };
        let mut report = CheckReport {
            variant: "go".into(),
            image: "img".into(),
            image_id: "sha256:0".into(),
            inputs: Some("sha256:1".into()),
            size: 1,
            size_budget: 2,
            passed: true,
            tools: vec![tool("go", "1.24"), tool("gofmt", "present")],
            ..report(true)
        };
        let owed = vec!["go".to_string(), "gofmt".to_string()];
        let label = |r: &CheckReport| labels(&record_json(r));
        assert_eq!(
            gate(&label(&report), "go", &owed, &[]).unwrap(),
            inv(&[("go", "1.24"), ("gofmt", "present")])
        );
        assert_eq!(
            gate(&label(&report), "python", &owed, &[]).unwrap_err(),
            Refusal::WrongVariant {
                expected: "python".into(),
                found: "go".into()
            }
        );
        // The suites the variant runs must each have passed.
        let suites = ["python".to_string()];
        assert_eq!(
            gate(&label(&report), "go", &owed, &suites).unwrap_err(),
            Refusal::MissingSmoke(vec!["python".into()])
        );
        let case = crate::smoke::tests::case();
        let ran = crate::smoke::driver::Ran {
            exit: Some(0),
            output: "All checks passed!".into(),
            seconds: None,
            cpu: None,
            truncated: false,
        };
        report.smoke = vec![crate::smoke::judge(&case, Some(&ran), vec![])];
        assert!(gate(&label(&report), "go", &owed, &suites).is_ok());
        report.passed = false;
        assert_eq!(
            gate(&label(&report), "go", &owed, &[]).unwrap_err(),
            Refusal::NotPassing("fail".into())
        );
    }
}
