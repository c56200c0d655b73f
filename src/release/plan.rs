//! The release plan, pure: from each variant's checked image and its
//! current pin, the next version (the inventory rule of `version`), the
//! tags to write and the pins to leave — or every reason the family cannot
//! be released as it is. Nothing here reads a registry or an engine.

use super::tags;
use crate::labels;
use crate::name::Platform;
use crate::pins::next::inputs_changed;
use crate::pins::{Pin, PinsFile};
use crate::semver_rules::{self, Bump, Inventory, Refusal, ToolChange};
use semver::Version;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Where a variant's checked image is before it is staged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(crate) enum Source {
    /// A local image of the engine (its ID is the config digest); the
    /// client pushes it by digest, compressing its layers itself.
    Engine { reference: String, image_id: String },
    /// A manifest in a registry (`repo@digest`); the client copies it,
    /// mounting blobs where the registry allows.
    Registry { reference: String },
}

/// One variant's checked image, as gathered for the plan.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub variant: String,
    pub aliases: Vec<String>,
    /// The tools images.toml says the variant owes today.
    pub owed: Vec<String>,
    /// The smoke suites it runs today.
    pub smoke: Vec<String>,
    /// The labels of its config (for an index: of the image for this
    /// machine's platform).
    pub labels: BTreeMap<String, String>,
    /// Its platform; for an index, its platforms in the index's order.
    /// Normalised where they were read.
    pub platforms: Vec<Platform>,
    pub source: Source,
}

/// A variant's current release: the pinned image's `dev.sunaba.inputs`.
#[derive(Debug, Clone)]
pub(crate) struct Current {
    pub pin: Pin,
    pub inputs: Option<String>,
}

/// Everything the plan is computed from.
pub(crate) struct Input<'a> {
    pub id: &'a str,
    /// Where the release publishes (`host/path`).
    pub repository: &'a str,
    /// In build order, with each variant's current release.
    pub candidates: Vec<(Candidate, Option<Current>)>,
    /// Every tag of the repository now.
    pub tags: &'a [String],
    /// Every variant of the family (for tag namespaces).
    pub variants: &'a [String],
    pub pins: &'a PinsFile,
}

/// A variant the release publishes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Planned {
    pub variant: String,
    pub aliases: Vec<String>,
    pub version: Version,
    pub previous: Option<Version>,
    pub bump: Bump,
    /// One line: why this bump.
    pub why: String,
    pub changes: Vec<ToolChange>,
    pub tools: Inventory,
    /// Written as one string, the platforms comma-separated
    /// (`linux/amd64,linux/arm64`), as plans and journals always were.
    #[serde(rename = "platform", with = "platform_list")]
    pub platforms: Vec<Platform>,
    pub source: Source,
    pub immutable: String,
    /// Most specific first.
    pub moving: Vec<String>,
    /// Alias -> its pin when the plan was made (`None`: not pinned).
    pub previous_pins: BTreeMap<String, Option<Pin>>,
}

/// A variant the release leaves as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Unchanged {
    pub variant: String,
    pub version: Option<Version>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Plan {
    pub id: String,
    pub repository: String,
    pub variants: Vec<Planned>,
    pub unchanged: Vec<Unchanged>,
}

impl Plan {
    pub(crate) fn is_noop(&self) -> bool {
        self.variants.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlanError {
    #[error("{variant}: cannot be released: {reason}")]
    Refused { variant: String, reason: Refusal },
    #[error(
        "{variant}: its tag {tag} would also be a tag of variant {other}; rename one of the variants"
    )]
    Collision {
        variant: String,
        tag: String,
        other: String,
    },
}

/// Every problem of a plan (all are reported at once).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) struct PlanErrors(pub Vec<PlanError>);

/// A plan the candidates do not allow is an operational failure: the
/// images, not the command line, are what is wrong.
impl crate::exit::HasStatus for PlanError {
    fn exit_status(&self) -> crate::exit::Status {
        match self {
            PlanError::Refused { .. } | PlanError::Collision { .. } => crate::exit::Status::Failure,
        }
    }
}

impl crate::exit::HasStatus for PlanErrors {
    fn exit_status(&self) -> crate::exit::Status {
        crate::exit::Status::Failure
    }
}

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "{}; nothing was written", lines.join("; "))
    }
}

/// Computes the plan. A variant whose image is not a passing check of what
/// it owes refuses the whole release (nothing may be published partially).
pub(crate) fn plan(input: Input) -> Result<Plan, PlanErrors> {
    let mut errors = Vec::new();
    let mut variants = Vec::new();
    let mut unchanged = Vec::new();
    for (candidate, current) in input.candidates {
        let variant = candidate.variant.clone();
        let tools = match semver_rules::gate(
            &candidate.labels,
            &variant,
            &candidate.owed,
            &candidate.smoke,
        ) {
            Ok(tools) => tools,
            Err(reason) => {
                errors.push(PlanError::Refused { variant, reason });
                continue;
            }
        };
        let changed = match &current {
            None => true,
            Some(c) => inputs_changed(c.inputs.as_ref(), candidate.labels.get(labels::INPUTS)),
        };
        let mut next = semver_rules::next_version(
            current.as_ref().map(|c| (&c.pin.version, &c.pin.tools)),
            &tools,
            changed,
        );
        // The platforms are part of what a pin promises: one added is a
        // new capability (minor), one dropped breaks its users (major).
        let platform_change = current
            .as_ref()
            .and_then(|c| platform_bump(&c.pin.platforms, &candidate.platforms));
        if let (Some((bump, _)), Some(now)) = (&platform_change, &next.current)
            && *bump > next.bump
        {
            next.bump = *bump;
            next.next = semver_rules::bump_version(now, *bump);
        }
        let Some(version) = next.next.clone() else {
            unchanged.push(Unchanged {
                variant,
                version: next.current.clone(),
                reason: "same inputs as the pinned image".into(),
            });
            continue;
        };
        let present = tags::present(&variant, input.tags);
        let planned = Planned {
            why: match &platform_change {
                Some((bump, said)) if *bump == next.bump => said.clone(),
                _ => why(&next),
            },
            immutable: tags::immutable(&variant, &version),
            moving: tags::moving(&variant, &version, &present),
            previous_pins: candidate
                .aliases
                .iter()
                .map(|a| (a.clone(), input.pins.images.get(a).cloned()))
                .collect(),
            previous: next.current,
            bump: next.bump,
            changes: next.delta.changes,
            version,
            tools,
            aliases: candidate.aliases,
            platforms: candidate.platforms,
            source: candidate.source,
            variant,
        };
        for tag in std::iter::once(&planned.immutable).chain(&planned.moving) {
            if let Some(other) = tags::claimed_by_other(&planned.variant, tag, input.variants) {
                errors.push(PlanError::Collision {
                    variant: planned.variant.clone(),
                    tag: tag.clone(),
                    other: other.to_string(),
                });
            }
        }
        variants.push(planned);
    }
    if !errors.is_empty() {
        return Err(PlanErrors(errors));
    }
    Ok(Plan {
        id: input.id.to_string(),
        repository: input.repository.to_string(),
        variants,
        unchanged,
    })
}

/// How the candidate's platforms (`linux/amd64,linux/arm64`) differ from the
/// pinned ones: the bump that announces it and the words; `None` when the
/// same (or the pin predates platforms).
fn platform_bump(
    pinned: &BTreeMap<Platform, crate::registry::Digest>,
    candidate: &[Platform],
) -> Option<(semver_rules::Bump, String)> {
    let now: std::collections::BTreeSet<&Platform> = candidate.iter().collect();
    let was: std::collections::BTreeSet<&Platform> = pinned.keys().collect();
    if was.is_empty() || now.is_empty() || was == now {
        return None;
    }
    let list = |s: &std::collections::BTreeSet<&Platform>| {
        s.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let bump = if was.is_subset(&now) {
        semver_rules::Bump::Minor
    } else {
        semver_rules::Bump::Major
    };
    Some((bump, format!("platforms {} -> {}", list(&was), list(&now))))
}

/// [`Planned::platforms`] as the one string plans have always held.
mod platform_list {
    use crate::name::Platform;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(ps: &[Platform], s: S) -> Result<S::Ok, S::Error> {
        let text: Vec<String> = ps.iter().map(ToString::to_string).collect();
        s.serialize_str(&text.join(","))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Platform>, D::Error> {
        String::deserialize(d)?
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| Platform::parse_normalized(p).map_err(serde::de::Error::custom))
            .collect()
    }
}

/// The bump in one line: the tool that proves it, or what else changed.
fn why(next: &semver_rules::NextVersion) -> String {
    if next.current.is_none() {
        return "first release".into();
    }
    match next.delta.proving_tool().filter(|t| t.bump == next.bump) {
        Some(t) => format!(
            "{} {} -> {}: {}",
            t.tool,
            t.old.as_deref().unwrap_or("(absent)"),
            t.new.as_deref().unwrap_or("(absent)"),
            t.reason
        ),
        None => "inputs changed, no tool did".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::CheckRecord;

    #[test]
    fn a_plan_the_images_do_not_allow_is_an_operational_failure() {
        use crate::exit::{HasStatus, Status};
        let refused = PlanError::Refused {
            variant: "go".into(),
            reason: Refusal::NoCheckRecord,
        };
        let collision = PlanError::Collision {
            variant: "go".into(),
            tag: "go-1".into(),
            other: "go-1".into(),
        };
        for e in [&refused, &collision] {
            assert_eq!(e.exit_status(), Status::Failure, "{e}");
        }
        assert_eq!(PlanErrors(vec![refused]).exit_status(), Status::Failure);
    }

    #[test]
    fn a_platform_added_is_a_minor_release_and_one_dropped_a_major() {
        let d = crate::registry::Digest::sha256(b"x");
        let list = |ps: &str| -> Vec<Platform> {
            ps.split(',')
                .map(|p| Platform::parse_normalized(p).unwrap())
                .collect()
        };
        let pinned = |ps: &[&str]| -> BTreeMap<Platform, crate::registry::Digest> {
            ps.iter().map(|p| (p.parse().unwrap(), d.clone())).collect()
        };
        assert_eq!(
            platform_bump(
                &pinned(&["linux/amd64"]),
                &list("linux/amd64,linux/arm64/v8")
            ),
            Some((
                semver_rules::Bump::Minor,
                "platforms linux/amd64 -> linux/amd64, linux/arm64".to_string()
            ))
        );
        assert_eq!(
            platform_bump(
                &pinned(&["linux/amd64", "linux/arm64"]),
                &list("linux/amd64")
            ),
            Some((
                semver_rules::Bump::Major,
                "platforms linux/amd64, linux/arm64 -> linux/amd64".to_string()
            ))
        );
        assert_eq!(
            platform_bump(&pinned(&["linux/amd64"]), &list("linux/amd64")),
            None
        );
        assert_eq!(
            platform_bump(&BTreeMap::new(), &list("linux/amd64,linux/arm64")),
            None
        );
    }

    #[test]
    fn planned_platforms_are_one_comma_separated_string_as_before() {
        #[derive(Serialize, Deserialize)]
        struct W {
            #[serde(with = "platform_list")]
            platform: Vec<Platform>,
        }
        let w: W = serde_json::from_str(r#"{"platform":"linux/arm64/v8,linux/amd64"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&w).unwrap(),
            r#"{"platform":"linux/arm64,linux/amd64"}"#,
            "normalised where read, in the order given"
        );
        let none: W = serde_json::from_str(r#"{"platform":""}"#).unwrap();
        assert!(none.platform.is_empty());
        assert_eq!(serde_json::to_string(&none).unwrap(), r#"{"platform":""}"#);
        assert!(serde_json::from_str::<W>(r#"{"platform":"linux"}"#).is_err());
    }

    fn record(status: &str, variant: &str, tools: &[(&str, &str)]) -> String {
        CheckRecord {
            schema: 1,
            status: status.to_string().into(),
            variant: Some(variant.into()),
            inputs: Some(format!("sha256:{variant}")),
            checked_at: None,
            tools: tools
                .iter()
                .map(|(t, v)| (t.to_string(), v.to_string()))
                .collect(),
            smoke: None,
        }
        .to_label()
    }

    fn candidate(variant: &str, inputs: &str, status: &str, tools: &[(&str, &str)]) -> Candidate {
        Candidate {
            variant: variant.into(),
            aliases: vec![format!("{variant}-alias")],
            owed: tools.iter().map(|(t, _)| t.to_string()).collect(),
            smoke: Vec::new(),
            labels: BTreeMap::from([
                (labels::CHECK.to_string(), record(status, variant, tools)),
                (labels::INPUTS.to_string(), inputs.to_string()),
            ]),
            platforms: vec!["linux/amd64".parse().unwrap()],
            source: Source::Engine {
                reference: format!("r/s:{variant}"),
                image_id: "sha256:id".into(),
            },
        }
    }

    fn current(variant: &str, version: &str, inputs: &str, tools: &[(&str, &str)]) -> Current {
        Current {
            pin: Pin {
                repository: "r/s".parse().unwrap(),
                tag: format!("{variant}-{version}"),
                version: Version::parse(version).unwrap(),
                digest: format!("sha256:{}", "a".repeat(64)).parse().unwrap(),
                platforms: BTreeMap::new(),
                tools: tools
                    .iter()
                    .map(|(t, v)| (t.to_string(), v.to_string()))
                    .collect(),
                referrers: BTreeMap::new(),
            },
            inputs: Some(inputs.into()),
        }
    }

    fn run(
        candidates: Vec<(Candidate, Option<Current>)>,
        tags: &[&str],
    ) -> Result<Plan, PlanErrors> {
        let tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        let variants: Vec<String> = candidates.iter().map(|(c, _)| c.variant.clone()).collect();
        plan(Input {
            id: "id1",
            repository: "r/s",
            candidates,
            tags: &tags,
            variants: &variants,
            pins: &PinsFile::default(),
        })
    }

    #[test]
    fn versions_tags_and_why_per_variant() {
        let tools = [("ruff", "0.14.0"), ("git", "2.47.0")];
        let plan = run(
            vec![
                (candidate("new", "sha256:n", "pass", &tools), None),
                (
                    candidate("same", "sha256:s", "pass", &tools),
                    Some(current("same", "1.2.0", "sha256:s", &tools)),
                ),
                (
                    candidate(
                        "bumped",
                        "sha256:b2",
                        "pass",
                        &[("ruff", "0.14.0"), ("git", "2.47.1")],
                    ),
                    Some(current("bumped", "1.3.4", "sha256:b1", &tools)),
                ),
                (
                    candidate("rebased", "sha256:r2", "pass", &tools),
                    Some(current("rebased", "2.0.0", "sha256:r1", &tools)),
                ),
            ],
            &["bumped-1.3.4", "bumped-1.4.0", "rebased-2.0.0"],
        )
        .unwrap();
        let rows: Vec<(&str, String, &str, Vec<&str>)> = plan
            .variants
            .iter()
            .map(|p| {
                (
                    p.variant.as_str(),
                    p.version.to_string(),
                    p.why.as_str(),
                    p.moving.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "new",
                    "1.0.0".into(),
                    "first release",
                    vec!["new-1.0", "new-1", "new"]
                ),
                (
                    "bumped",
                    "1.3.5".into(),
                    "git 2.47.0 -> 2.47.1: patch-level change",
                    vec!["bumped-1.3"],
                ),
                (
                    "rebased",
                    "2.0.1".into(),
                    "inputs changed, no tool did",
                    vec!["rebased-2.0", "rebased-2", "rebased"],
                ),
            ]
        );
        assert_eq!(plan.unchanged.len(), 1);
        assert_eq!(plan.unchanged[0].variant, "same");
        let bumped = &plan.variants[1];
        assert_eq!(bumped.immutable, "bumped-1.3.5");
        assert_eq!(bumped.previous_pins["bumped-alias"], None);
        assert!(!plan.is_noop());
    }

    #[test]
    fn a_failed_or_incomplete_check_refuses_the_whole_release() {
        let tools = [("ruff", "0.14.0")];
        let mut short = candidate("short", "sha256:x", "pass", &tools);
        short.owed.push("pyright".into());
        let err = run(
            vec![
                (candidate("ok", "sha256:o", "pass", &tools), None),
                (candidate("bad", "sha256:b", "fail", &tools), None),
                (short, None),
            ],
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad: cannot be released: check record status is \"fail\", not \"pass\"; \
             short: cannot be released: inventory lacks owed tool(s): pyright; nothing was written"
        );
    }

    #[test]
    fn a_tag_in_another_variants_namespace_is_refused() {
        let tools = [("go", "1.24.0")];
        let err = run(
            vec![
                (candidate("go", "sha256:a", "pass", &tools), None),
                (candidate("go-1", "sha256:b", "pass", &tools), None),
            ],
            &[],
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("go-1: its tag go-1 would also be a tag of variant go"),
            "{err}"
        );
    }

    #[test]
    fn a_plan_of_an_older_release_with_a_staging_tag_still_reads() {
        let planned = crate::release::journal::tests::planned("a", &["a"]);
        let mut doc = serde_json::to_value(&planned).unwrap();
        assert!(doc.get("staging").is_none(), "no staging tag is planned");
        doc["staging"] = "_staging-a-1.0.0".into();
        let read: Planned = serde_json::from_value(doc).unwrap();
        assert_eq!(read, planned);
    }
}
