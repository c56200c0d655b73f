//! in-toto Statements v1 (github.com/in-toto/attestation, spec/v1) and the
//! two predicates this tool writes from facts it recorded: SLSA provenance
//! v1 (`https://slsa.dev/provenance/v1`) and the test result
//! (`https://in-toto.io/attestation/test-result/v0.1`) of a check and its
//! smoke suite. Every statement's bytes are a function of its facts (field
//! order fixed, lists sorted, no clock read here), so an attestation made
//! twice for one image is one blob.

use serde::Serialize;
use std::collections::BTreeMap;

pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const PROVENANCE: &str = "https://slsa.dev/provenance/v1";
pub const TEST_RESULT: &str = "https://in-toto.io/attestation/test-result/v0.1";
/// This tool's build type: what `externalParameters` mean.
pub const BUILD_TYPE: &str = "https://github.com/sunaba/sunaba-images/build/v1";

/// A ResourceDescriptor: a name and its digests (`sha256` -> hex).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Resource {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    pub digest: BTreeMap<String, String>,
}

impl Resource {
    /// `name` at `sha256:<hex>` (or bare hex).
    pub fn sha256(name: impl Into<String>, digest: &str) -> Resource {
        Resource {
            name: name.into(),
            uri: None,
            digest: BTreeMap::from([(
                "sha256".to_string(),
                digest.trim_start_matches("sha256:").to_string(),
            )]),
        }
    }
}

#[derive(Serialize)]
struct Statement<'a, P: Serialize> {
    #[serde(rename = "_type")]
    kind: &'static str,
    subject: &'a [Resource],
    #[serde(rename = "predicateType")]
    predicate_type: &'a str,
    predicate: &'a P,
}

/// The statement's bytes (compact JSON).
pub fn statement(
    subject: &[Resource],
    predicate_type: &str,
    predicate: &impl Serialize,
) -> Vec<u8> {
    serde_json::to_vec(&Statement {
        kind: STATEMENT_TYPE,
        subject,
        predicate_type,
        predicate,
    })
    .expect("a statement serialises")
}

/// What a test-result predicate says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TestResult {
    /// `PASSED`, `WARNED` or `FAILED`.
    pub result: &'static str,
    /// What was run: the smoke suite (its digest) and the run contract.
    pub configuration: Vec<Resource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub passed_tests: Vec<String>,
    pub warned_tests: Vec<String>,
    pub failed_tests: Vec<String>,
}

impl TestResult {
    /// The check of one image: each owed tool's probe is a test
    /// (`tool:<name>`), each smoke case one (`smoke:<suite>/<command>@<project>`),
    /// and the check's own problems (size, HEALTHCHECK) fail `check`.
    pub fn of_check(
        report: &crate::check::CheckReport,
        configuration: Vec<Resource>,
    ) -> TestResult {
        use crate::check::ToolStatus;
        let (mut passed, mut warned, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for t in &report.tools {
            let name = format!("tool:{}", t.tool);
            match t.status {
                ToolStatus::Ok => passed.push(name),
                // Asserted by the healthcheck, no longer owed: not a failure.
                ToolStatus::NotOwed => warned.push(name),
                _ => failed.push(name),
            }
        }
        for r in &report.smoke {
            let name = format!("smoke:{}/{}@{}", r.suite, r.command, r.project);
            if r.passed() {
                passed.push(name);
            } else {
                failed.push(name);
            }
        }
        if report.problems.is_empty() {
            passed.push("check".into());
        } else {
            failed.push("check".into());
        }
        passed.sort();
        warned.sort();
        failed.sort();
        let mut configuration = configuration;
        configuration.sort();
        TestResult {
            result: match (report.passed && failed.is_empty(), warned.is_empty()) {
                (false, _) => "FAILED",
                (true, true) => "PASSED",
                (true, false) => "WARNED",
            },
            configuration,
            url: None,
            passed_tests: passed,
            warned_tests: warned,
            failed_tests: failed,
        }
    }
}

impl TestResult {
    /// The test result a check record (the image's `dev.sunaba.check`
    /// label) states: each tool it inventoried is a passed `tool:<name>`
    /// test, each smoke suite a `smoke:<suite>` test (with its count of
    /// cases), and the record's verdict is the result. The configuration is
    /// the smoke suite's digest and the build inputs the check was for.
    pub(crate) fn of_record(record: &crate::labels::CheckRecord) -> TestResult {
        let mut passed: Vec<String> = record.tools.keys().map(|t| format!("tool:{t}")).collect();
        let mut configuration = Vec::new();
        if let Some(smoke) = &record.smoke {
            passed.extend(
                smoke
                    .suites
                    .iter()
                    .map(|(s, n)| format!("smoke:{s} ({n} cases)")),
            );
            configuration.push(Resource::sha256("smoke", &smoke.digest));
        }
        if let Some(inputs) = &record.inputs {
            configuration.push(Resource::sha256("inputs", inputs));
        }
        let ok = record.passed();
        let (mut passed, mut failed) = if ok {
            passed.push("check".into());
            (passed, Vec::new())
        } else {
            (Vec::new(), vec![format!("check: {}", record.status)])
        };
        passed.sort();
        failed.sort();
        configuration.sort();
        TestResult {
            result: if ok { "PASSED" } else { "FAILED" },
            configuration,
            url: None,
            passed_tests: passed,
            warned_tests: Vec::new(),
            failed_tests: failed,
        }
    }
}

/// The facts a provenance statement is made of, as the build recorded
/// them (nothing here is looked up or guessed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildFacts {
    /// The source repository (its URL, images.toml `source`).
    pub repository: String,
    pub git_ref: String,
    pub commit: String,
    pub variant: String,
    pub platform: String,
    /// The pinned upstream, every lock file and every direct download.
    pub dependencies: Vec<Resource>,
    pub builder_version: String,
    pub invocation_id: String,
}

/// The SLSA v1 provenance predicate of `facts`.
pub fn provenance(facts: &BuildFacts) -> serde_json::Value {
    let mut deps = facts.dependencies.clone();
    deps.sort();
    deps.dedup();
    serde_json::json!({
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "repository": facts.repository,
                "ref": facts.git_ref,
                "commit": facts.commit,
                "variant": facts.variant,
                "platform": facts.platform,
            },
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {
                "id": "https://github.com/sunaba/sunaba-images",
                "version": {"sunaba-images": facts.builder_version},
            },
            "metadata": {"invocationId": facts.invocation_id},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_has_the_v1_shape_and_is_a_function_of_its_facts() {
        let subject = [Resource::sha256(
            "127.0.0.1:5000/s/sandbox",
            &format!("sha256:{}", "a".repeat(64)),
        )];
        let facts = BuildFacts {
            repository: "https://example.invalid/sunaba-images".into(),
            git_ref: "refs/heads/main".into(),
            commit: "c0ffee".into(),
            variant: "go".into(),
            platform: "linux/amd64".into(),
            dependencies: vec![
                Resource::sha256("docker/locks/js/package-lock.json", "22"),
                Resource::sha256("debian:trixie-slim", "11"),
                Resource::sha256("debian:trixie-slim", "11"),
            ],
            builder_version: "0.1.0".into(),
            invocation_id: "20261201T000000Z-abcd".into(),
        };
        let bytes = statement(&subject, PROVENANCE, &provenance(&facts));
        let mut shuffled = facts.clone();
        shuffled.dependencies.reverse();
        assert_eq!(
            statement(&subject, PROVENANCE, &provenance(&shuffled)),
            bytes
        );
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc["_type"], STATEMENT_TYPE);
        assert_eq!(doc["subject"][0]["digest"]["sha256"], "a".repeat(64));
        assert_eq!(doc["predicateType"], PROVENANCE);
        let deps = doc["predicate"]["buildDefinition"]["resolvedDependencies"]
            .as_array()
            .unwrap();
        assert_eq!(deps.len(), 2, "sorted and deduplicated: {deps:?}");
        assert_eq!(deps[0]["name"], "debian:trixie-slim");
        assert!(
            String::from_utf8(bytes)
                .unwrap()
                .starts_with(r#"{"_type":"https://in-toto.io/Statement/v1","subject":["#)
        );
    }

    #[test]
    fn a_check_record_becomes_a_test_result() {
        let record: crate::labels::CheckRecord = serde_json::from_str(
            r#"{"status":"pass","inputs":"sha256:11","tools":{"go":"1.25","bash":"5"},"smoke":{"digest":"sha256:55","suites":{"go":3}}}"#,
        )
        .unwrap();
        let r = TestResult::of_record(&record);
        assert_eq!(r.result, "PASSED");
        assert_eq!(
            r.passed_tests,
            ["check", "smoke:go (3 cases)", "tool:bash", "tool:go"]
        );
        assert_eq!(r.configuration[1].name, "smoke");
        assert_eq!(r.configuration[1].digest["sha256"], "55");
        let failed: crate::labels::CheckRecord =
            serde_json::from_str(r#"{"status":"fail","tools":{"go":"1"}}"#).unwrap();
        let r = TestResult::of_record(&failed);
        assert_eq!(r.result, "FAILED");
        assert_eq!(r.failed_tests, ["check: fail"]);
        assert!(r.passed_tests.is_empty());
    }

    #[test]
    fn a_check_becomes_a_test_result_case_by_case() {
        let report = crate::check::report::tests::report(true);
        let r = TestResult::of_check(&report, vec![Resource::sha256("smoke", "5m0ke")]);
        assert_eq!(r.result, "PASSED");
        assert!(r.failed_tests.is_empty());
        assert!(r.passed_tests.contains(&"check".to_string()));
        assert!(
            r.passed_tests.iter().any(|t| t.starts_with("tool:")),
            "{r:?}"
        );
        let failed = crate::check::report::tests::report(false);
        let r = TestResult::of_check(&failed, vec![]);
        assert_eq!(r.result, "FAILED");
        assert!(!r.failed_tests.is_empty(), "{r:?}");
        let json = serde_json::to_string(&r).unwrap();
        assert!(
            json.contains(r#""passedTests":"#) && json.contains(r#""failedTests":"#),
            "{json}"
        );
    }
}
