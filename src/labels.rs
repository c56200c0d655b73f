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
/// The Debian packages each fragment installed ([`PackageRecord`]), written
/// by the normaliser from the layers' dpkg status.
pub(crate) const PACKAGES: &str = "dev.sunaba.packages";

/// The release version (`X.Y.Z`), stamped on the image's config at release
/// time: it depends on image_pins.json then, so no build can know it.
pub(crate) const VERSION: &str = "org.opencontainers.image.version";

/// The schema of the check record this build writes.
pub(crate) const CHECK_SCHEMA: u32 = 1;

/// The Debian package set of an image, by the fragment whose layer
/// installed (or changed) each package: `name:arch` → version. A child
/// image carries its parent's record (labels are inherited) with its own
/// layers' packages added. The upstream's own packages are not listed:
/// they are a function of the pinned base digest.
///
/// Compact JSON with sorted keys, so equal package sets give equal bytes:
/// `{"fragments":{"core":{"bash:amd64":"5.2.37-2"}},"schema":1}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PackageRecord {
    pub fragments: BTreeMap<String, BTreeMap<String, String>>,
    pub schema: u32,
}

impl PackageRecord {
    pub(crate) const SCHEMA: u32 = 1;

    /// The record of a label value; `None` when it is not one (an image
    /// built before the record existed, or a label someone else wrote).
    pub(crate) fn parse(label: &str) -> Option<PackageRecord> {
        serde_json::from_str::<PackageRecord>(label)
            .ok()
            .filter(|r| r.schema == Self::SCHEMA)
    }

    /// The label value: compact, keys sorted (serde writes the maps in
    /// order and the fields in this struct's order, which is sorted too).
    pub(crate) fn to_label(&self) -> String {
        serde_json::to_string(self).expect("a package record serialises")
    }

    /// What changed from `self` (the pinned image's) to `other` (a
    /// rebuild's), one line per package:
    /// `core: bash:amd64 5.2.37-2 → 5.2.37-2+deb13u1`, `… (new)`, `… (gone)`.
    pub(crate) fn changes(&self, other: &PackageRecord) -> Vec<String> {
        let flat = |r: &PackageRecord| -> BTreeMap<(String, String), String> {
            r.fragments
                .iter()
                .flat_map(|(f, pkgs)| {
                    pkgs.iter()
                        .map(move |(p, v)| ((f.clone(), p.clone()), v.clone()))
                })
                .collect()
        };
        let (before, after) = (flat(self), flat(other));
        let mut out = Vec::new();
        for (key, was) in &before {
            match after.get(key) {
                Some(now) if now != was => out.push(format!("{}: {} {was} → {now}", key.0, key.1)),
                Some(_) => {}
                None => out.push(format!("{}: {} {was} (gone)", key.0, key.1)),
            }
        }
        for (key, now) in &after {
            if !before.contains_key(key) {
                out.push(format!("{}: {} {now} (new)", key.0, key.1));
            }
        }
        out.sort();
        out
    }
}

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

    #[test]
    fn a_package_record_round_trips_and_says_what_moved() {
        let pkgs = |v: &[(&str, &str)]| -> BTreeMap<String, String> {
            v.iter()
                .map(|(p, v)| (p.to_string(), v.to_string()))
                .collect()
        };
        let pinned = PackageRecord {
            schema: PackageRecord::SCHEMA,
            fragments: BTreeMap::from([
                (
                    "core".into(),
                    pkgs(&[("bash:amd64", "5.2.37-2"), ("jq:amd64", "1.7.1-6")]),
                ),
                ("go".into(), pkgs(&[("gcc:amd64", "4:14.2.0-1")])),
            ]),
        };
        let label = pinned.to_label();
        assert_eq!(
            label,
            r#"{"fragments":{"core":{"bash:amd64":"5.2.37-2","jq:amd64":"1.7.1-6"},"go":{"gcc:amd64":"4:14.2.0-1"}},"schema":1}"#
        );
        assert_eq!(PackageRecord::parse(&label), Some(pinned.clone()));
        assert_eq!(PackageRecord::parse(r#"{"fragments":{},"schema":9}"#), None);
        assert_eq!(PackageRecord::parse("not json"), None);

        let mut rebuilt = pinned.clone();
        let core = rebuilt.fragments.get_mut("core").unwrap();
        core.insert("bash:amd64".into(), "5.2.37-2+deb13u1".into());
        core.remove("jq:amd64");
        core.insert("rg:amd64".into(), "14.1.1-1".into());
        assert_eq!(
            pinned.changes(&rebuilt),
            [
                "core: bash:amd64 5.2.37-2 → 5.2.37-2+deb13u1",
                "core: jq:amd64 1.7.1-6 (gone)",
                "core: rg:amd64 14.1.1-1 (new)",
            ]
        );
        assert!(pinned.changes(&pinned).is_empty());
    }
}
