//! The `dev.sunaba.*` image labels and the check record: what `build` and
//! `check` write on an image and pinning reads back (docs/contracts.md).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The check record of a checked image (compact JSON, [`CheckRecord`]).
pub(crate) const CHECK: &str = "dev.sunaba.check";
/// `sha256:<hex>` of the build inputs.
pub(crate) const INPUTS: &str = "dev.sunaba.inputs";
/// The variant the image was built as.
pub(crate) const VARIANT: &str = "dev.sunaba.variant";

/// The OCI annotations docker/metadata-action sets, as image labels.
pub(crate) const OCI_TITLE: &str = "org.opencontainers.image.title";
pub(crate) const OCI_DESCRIPTION: &str = "org.opencontainers.image.description";
pub(crate) const OCI_SOURCE: &str = "org.opencontainers.image.source";
pub(crate) const OCI_URL: &str = "org.opencontainers.image.url";
pub(crate) const OCI_LICENSES: &str = "org.opencontainers.image.licenses";
pub(crate) const OCI_REVISION: &str = "org.opencontainers.image.revision";
pub(crate) const OCI_CREATED: &str = "org.opencontainers.image.created";
/// The upstream every variant is built on, with its tag.
pub(crate) const OCI_BASE_NAME: &str = "org.opencontainers.image.base.name";
/// The digest that upstream is pinned to (written by the build, read by `plan`).
pub(crate) const OCI_BASE_DIGEST: &str = "org.opencontainers.image.base.digest";
/// What images.toml and the render say the image is (see `build::definition`).
pub(crate) const DEFINITION: &str = "dev.sunaba.definition";

/// The release version (`X.Y.Z`), stamped on the image's config at release
/// time: it depends on image_pins.json then, so no build can know it.
pub(crate) const VERSION: &str = "org.opencontainers.image.version";

/// The schema of the check record this build writes.
pub(crate) const CHECK_SCHEMA: u32 = 1;

/// Tool → version, as a check record lists it.
pub(crate) type Inventory = BTreeMap<String, String>;

/// The verdict of a check record. Any other word a record carries is kept
/// as it was, so a refusal can quote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckStatus {
    Pass,
    Fail,
    Other(String),
}

impl CheckStatus {
    pub fn as_str(&self) -> &str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Fail => "fail",
            CheckStatus::Other(s) => s,
        }
    }
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for CheckStatus {
    fn from(s: String) -> CheckStatus {
        match s.as_str() {
            "pass" => CheckStatus::Pass,
            "fail" => CheckStatus::Fail,
            _ => CheckStatus::Other(s),
        }
    }
}

impl From<CheckStatus> for String {
    fn from(s: CheckStatus) -> String {
        s.as_str().to_string()
    }
}

impl Serialize for CheckStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CheckStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(CheckStatus::from)
    }
}

/// The `dev.sunaba.check` label. Readers ignore fields they do not know, so
/// a newer writer may add some (the smoke results, say) without breaking an
/// older reader; `variant`, `inputs` and `checked_at` are optional on read
/// because early records lacked them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRecord {
    #[serde(default = "default_schema")]
    pub schema: u32,
    pub status: CheckStatus,
    #[serde(default)]
    pub variant: Option<String>,
    #[serde(default)]
    pub inputs: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<String>,
    #[serde(default)]
    pub tools: Inventory,
    /// The smoke the image passed; absent in records written before there
    /// was a smoke suite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoke: Option<SmokeRecord>,
}

/// What a check record says about the smoke suite: which one ran (its
/// digest: every case and every byte of the projects) and how many cases
/// of each suite passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmokeRecord {
    pub digest: String,
    #[serde(default)]
    pub suites: BTreeMap<String, usize>,
}

fn default_schema() -> u32 {
    CHECK_SCHEMA
}

impl CheckRecord {
    /// The record on an image, if its labels carry one; an unreadable label
    /// is an error with serde's reason.
    pub fn from_labels(
        labels: &BTreeMap<String, String>,
    ) -> Option<Result<CheckRecord, serde_json::Error>> {
        labels.get(CHECK).map(|raw| serde_json::from_str(raw))
    }

    /// The label value: compact JSON in the field order of docs/contracts.md.
    pub fn to_label(&self) -> String {
        serde_json::to_string(self).expect("a check record always serialises")
    }

    pub fn passed(&self) -> bool {
        self.status == CheckStatus::Pass
    }

    /// A pass that belongs to the image carrying `labels`: recorded for the
    /// inputs the image was built from.
    pub fn passing_for(labels: &BTreeMap<String, String>) -> Option<CheckRecord> {
        let record = CheckRecord::from_labels(labels)?.ok()?;
        (record.passed() && record.inputs.as_deref() == labels.get(INPUTS).map(String::as_str))
            .then_some(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keeps_the_documented_shape_and_round_trips() {
        let record = CheckRecord {
            schema: 1,
            status: CheckStatus::Pass,
            variant: Some("go".into()),
            inputs: Some("sha256:abc".into()),
            checked_at: Some("2026-11-30T07:00:00Z".into()),
            tools: [("gofmt".to_string(), "present".to_string())].into(),
            smoke: None,
        };
        let label = record.to_label();
        assert_eq!(
            label,
            r#"{"schema":1,"status":"pass","variant":"go","inputs":"sha256:abc","checked_at":"2026-11-30T07:00:00Z","tools":{"gofmt":"present"}}"#
        );
        let labels = BTreeMap::from([(CHECK.to_string(), label)]);
        assert_eq!(CheckRecord::from_labels(&labels).unwrap().unwrap(), record);
    }

    #[test]
    fn old_and_newer_records_are_read_and_odd_statuses_kept() {
        // An early record (no variant/inputs/schema) and a newer one with a
        // field this build does not know.
        let early: CheckRecord = serde_json::from_str(r#"{"status":"pass","tools":{}}"#).unwrap();
        assert!(early.passed() && early.variant.is_none());
        let newer: CheckRecord =
            serde_json::from_str(r#"{"schema":2,"status":"fail","tools":{},"provenance":[1]}"#)
                .unwrap();
        assert_eq!(newer.status, CheckStatus::Fail);
        let odd: CheckRecord = serde_json::from_str(r#"{"status":"skipped"}"#).unwrap();
        assert_eq!(odd.status, CheckStatus::Other("skipped".into()));
        assert_eq!(odd.status.to_string(), "skipped");
        assert!(serde_json::from_str::<CheckRecord>(r#"{"tools":{}}"#).is_err());
    }

    #[test]
    fn a_pass_counts_only_for_the_inputs_it_was_recorded_for() {
        let record = CheckRecord {
            schema: 1,
            status: CheckStatus::Pass,
            variant: Some("go".into()),
            inputs: Some("sha256:abc".into()),
            checked_at: None,
            tools: Inventory::new(),
            smoke: None,
        };
        let mut labels = BTreeMap::from([
            (CHECK.to_string(), record.to_label()),
            (INPUTS.to_string(), "sha256:abc".to_string()),
        ]);
        assert!(CheckRecord::passing_for(&labels).is_some());
        labels.insert(INPUTS.to_string(), "sha256:other".to_string());
        assert!(CheckRecord::passing_for(&labels).is_none());
    }
}
