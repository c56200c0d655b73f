//! The semver rules of the image family: what kind of release a change of
//! tool inventory is, which version a new image gets, which tag `pin` may
//! move to, and which images are allowed to be pinned at all.
//!
//! Everything here is pure (no I/O) so each rule is tested by a table.

use crate::versions::lenient_version;
use semver::Version;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

/// Tool name -> version string as the check record reports it
/// (`"14.1.1"`, `"1.24"`, `"present"`).
pub(crate) use crate::labels::Inventory;
use crate::labels::{CHECK as CHECK_LABEL, CheckRecord};

/// The kind of release a change is. Ordered: a larger bump subsumes a smaller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bump {
    None,
    Patch,
    Minor,
    Major,
}

impl fmt::Display for Bump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Bump::None => "none",
            Bump::Patch => "patch",
            Bump::Minor => "minor",
            Bump::Major => "major",
        })
    }
}

/// A tool version as reported by a check record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToolVersion {
    /// A presence-only tool: only whether it is there matters.
    Present,
    /// A version, padded to three components (`1.24` -> `1.24.0`).
    Semver(Version),
    /// Anything else; only equality can be judged.
    Opaque(String),
}

impl ToolVersion {
    pub(crate) fn parse(text: &str) -> ToolVersion {
        let text = text.trim();
        if text == "present" {
            return ToolVersion::Present;
        }
        match lenient_version(text) {
            Some(v) => ToolVersion::Semver(v),
            None => ToolVersion::Opaque(text.to_string()),
        }
    }
}

/// The compatibility components of a version: a change of the first is
/// breaking, a raise of the second adds features. For 0.x the components
/// shift one place to the right, as semver and cargo read them.
fn compat_key(v: &Version) -> ((u64, u64), u64) {
    if v.major > 0 {
        ((v.major, 0), v.minor)
    } else {
        ((0, v.minor), v.patch)
    }
}

/// How one tool changed between two inventories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolChange {
    pub tool: String,
    pub old: Option<String>,
    pub new: Option<String>,
    pub bump: Bump,
    pub reason: String,
}

/// One row of a "what changed" table: `tool  old -> new  bump  reason`.
impl fmt::Display for ToolChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<16} {:>10} -> {:<10} {:<6} {}",
            self.tool,
            self.old.as_deref().unwrap_or("(absent)"),
            self.new.as_deref().unwrap_or("(absent)"),
            self.bump.to_string(),
            self.reason
        )
    }
}

/// Classifies a tool's change. `None` on either side means absent.
pub(crate) fn classify(old: Option<&str>, new: Option<&str>) -> (Bump, String) {
    let (old, new) = match (old, new) {
        (None, None) => return (Bump::None, "absent".into()),
        (Some(_), None) => return (Bump::Major, "removed".into()),
        (None, Some(_)) => return (Bump::Minor, "added".into()),
        (Some(o), Some(n)) => (o, n),
    };
    match (ToolVersion::parse(old), ToolVersion::parse(new)) {
        (ToolVersion::Present, _) | (_, ToolVersion::Present) => {
            (Bump::None, "presence-only, still present".into())
        }
        (ToolVersion::Semver(a), ToolVersion::Semver(b)) => {
            if a == b {
                return (Bump::None, "unchanged".into());
            }
            let ((ba, fa), (bb, fb)) = (compat_key(&a), compat_key(&b));
            if ba != bb {
                let what = if a.major > 0 || b.major > 0 {
                    "major"
                } else {
                    "0.x minor"
                };
                let dir = if b > a { "raised" } else { "lowered" };
                (Bump::Major, format!("{what} version {dir}"))
            } else if fb > fa {
                let what = if a.major > 0 { "minor" } else { "0.x patch" };
                (Bump::Minor, format!("{what} version raised"))
            } else if fb < fa {
                // Going back a feature level can take away what callers use.
                let what = if a.major > 0 { "minor" } else { "0.x patch" };
                (Bump::Major, format!("{what} version lowered"))
            } else {
                (Bump::Patch, "patch-level change".into())
            }
        }
        (a, b) if a == b => (Bump::None, "unchanged".into()),
        // Versions we cannot order: assume the worst rather than under-version.
        _ => (Bump::Major, "versions cannot be compared".into()),
    }
}

/// The changes between two inventories, tool by tool (unchanged tools left out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delta {
    pub changes: Vec<ToolChange>,
    pub bump: Bump,
}

impl Delta {
    /// The first change of the delta's own kind: the tool that proves it.
    pub fn proving_tool(&self) -> Option<&ToolChange> {
        self.changes.iter().find(|c| c.bump == self.bump)
    }
}

pub(crate) fn inventory_delta(old: &Inventory, new: &Inventory) -> Delta {
    let mut tools: Vec<&String> = old.keys().chain(new.keys()).collect();
    tools.sort();
    tools.dedup();
    let mut changes = Vec::new();
    for tool in tools {
        let (o, n) = (old.get(tool), new.get(tool));
        let (bump, reason) = classify(o.map(String::as_str), n.map(String::as_str));
        if bump != Bump::None {
            changes.push(ToolChange {
                tool: tool.clone(),
                old: o.cloned(),
                new: n.cloned(),
                bump,
                reason,
            });
        }
    }
    let bump = changes.iter().map(|c| c.bump).max().unwrap_or(Bump::None);
    Delta { changes, bump }
}

/// Applies a bump to an image version (0.x: a major bump raises the minor,
/// minor and patch bumps raise the patch). A pre-release loses its suffix.
pub(crate) fn bump_version(current: &Version, bump: Bump) -> Option<Version> {
    let (ma, mi, pa) = (current.major, current.minor, current.patch);
    let next = match (bump, ma) {
        (Bump::None, _) => return None,
        (Bump::Major, 0) => Version::new(0, mi + 1, 0),
        (Bump::Minor | Bump::Patch, 0) => Version::new(0, mi, pa + 1),
        (Bump::Major, _) => Version::new(ma + 1, 0, 0),
        (Bump::Minor, _) => Version::new(ma, mi + 1, 0),
        (Bump::Patch, _) => Version::new(ma, mi, pa + 1),
    };
    Some(next)
}

/// The version the first image of a variant gets.
pub(crate) const FIRST_VERSION: Version = Version::new(1, 0, 0);

/// The next version of a variant, or `None` when nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NextVersion {
    pub current: Option<Version>,
    pub next: Option<Version>,
    pub bump: Bump,
    pub delta: Delta,
}

/// Rule 1: the version of a newly built image from its inventory compared
/// with the pinned one. `inputs_changed` says whether anything at all differs
/// (a base refresh changes no tool but still deserves a patch release).
pub(crate) fn next_version(
    current: Option<(&Version, &Inventory)>,
    new: &Inventory,
    inputs_changed: bool,
) -> NextVersion {
    let Some((version, old)) = current else {
        return NextVersion {
            current: None,
            next: Some(FIRST_VERSION),
            bump: Bump::Major,
            delta: inventory_delta(&Inventory::new(), new),
        };
    };
    let delta = inventory_delta(old, new);
    let floor = if inputs_changed {
        Bump::Patch
    } else {
        Bump::None
    };
    let bump = delta.bump.max(floor);
    NextVersion {
        current: Some(version.clone()),
        next: bump_version(version, bump),
        bump,
        delta,
    }
}

/// The kind of release a step between two versions announces, read the same
/// way as `bump_version` writes it (so for 0.x a patch step admits a minor).
pub(crate) fn version_step(a: &Version, b: &Version) -> Bump {
    let (lo, hi) = if a.cmp_precedence(b) == Ordering::Greater {
        (b, a)
    } else {
        (a, b)
    };
    let ((blo, flo), (bhi, fhi)) = (compat_key(lo), compat_key(hi));
    if blo != bhi {
        Bump::Major
    } else if flo != fhi {
        Bump::Minor
    } else if lo.cmp_precedence(hi) != Ordering::Equal {
        Bump::Patch
    } else {
        Bump::None
    }
}

/// An inventory that changed more than the version step admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MisVersioned {
    pub from: Version,
    pub to: Version,
    pub claimed: Bump,
    pub actual: Bump,
    pub tool: ToolChange,
}

impl fmt::Display for MisVersioned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.tool;
        write!(
            f,
            "mis-versioned: {} -> {} is a {} step but the inventory changed by {}: {} {} -> {} ({})",
            self.from,
            self.to,
            self.claimed,
            self.actual,
            t.tool,
            t.old.as_deref().unwrap_or("(absent)"),
            t.new.as_deref().unwrap_or("(absent)"),
            t.reason
        )
    }
}

/// Rule 3b: the inventory delta between two pinned versions must not be
/// larger than their version step. Compared from the lower version to the
/// higher, so a downgrade is judged like the upgrade it undoes.
pub(crate) fn check_versioning(
    old: (&Version, &Inventory),
    new: (&Version, &Inventory),
) -> Result<Delta, Box<MisVersioned>> {
    let forward = old.0.cmp_precedence(new.0) != Ordering::Greater;
    let (lo, hi) = if forward { (old, new) } else { (new, old) };
    let delta = inventory_delta(lo.1, hi.1);
    let claimed = version_step(lo.0, hi.0);
    if delta.bump > claimed {
        let tool = delta.proving_tool().cloned().expect("non-empty delta");
        return Err(Box::new(MisVersioned {
            from: old.0.clone(),
            to: new.0.clone(),
            claimed,
            actual: delta.bump,
            tool,
        }));
    }
    // Report the change in the direction the pin moves.
    Ok(if forward {
        delta
    } else {
        inventory_delta(old.1, new.1)
    })
}

/// Why an image may not be pinned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("no {CHECK_LABEL} label: the image was never checked (run `sunaba-images check`)")]
    NoCheckRecord,
    #[error("unreadable {CHECK_LABEL} label: {0}")]
    BadCheckRecord(String),
    #[error("check record status is {0:?}, not \"pass\"")]
    NotPassing(String),
    #[error("check record is for variant {found:?}, expected {expected:?}")]
    WrongVariant { expected: String, found: String },
    #[error("inventory lacks owed tool(s): {}", .0.join(", "))]
    MissingTools(Vec<String>),
    #[error(
        "the check record has no smoke results: the image was checked before the smoke suite \
         existed (check it again: `sunaba-images check`)"
    )]
    NoSmoke,
    #[error("the check record lacks the smoke suite(s) the variant runs: {}", .0.join(", "))]
    MissingSmoke(Vec<String>),
    #[error("{0}")]
    MisVersioned(Box<MisVersioned>),
}

/// Rule 3a: reads the check label of an image's config and returns its
/// inventory when the image passed, covers every owed tool and passed every
/// smoke suite in `smoke` (the suites the variant runs today).
pub(crate) fn gate(
    labels: &BTreeMap<String, String>,
    variant: &str,
    owed: &[String],
    smoke: &[String],
) -> Result<Inventory, Refusal> {
    let record = CheckRecord::from_labels(labels)
        .ok_or(Refusal::NoCheckRecord)?
        .map_err(|e| Refusal::BadCheckRecord(e.to_string()))?;
    if !record.passed() {
        return Err(Refusal::NotPassing(record.status.into()));
    }
    if let Some(found) = record.variant.filter(|v| v != variant) {
        return Err(Refusal::WrongVariant {
            expected: variant.to_string(),
            found,
        });
    }
    let missing = missing_tools(&record.tools, owed);
    if !missing.is_empty() {
        return Err(Refusal::MissingTools(missing));
    }
    if !smoke.is_empty() {
        let passed = record.smoke.as_ref().ok_or(Refusal::NoSmoke)?;
        let lacking: Vec<String> = smoke
            .iter()
            .filter(|s| passed.suites.get(*s).is_none_or(|n| *n == 0))
            .cloned()
            .collect();
        if !lacking.is_empty() {
            return Err(Refusal::MissingSmoke(lacking));
        }
    }
    Ok(record.tools)
}

/// Owed tools absent from an inventory, in owed order.
pub(crate) fn missing_tools(inventory: &Inventory, owed: &[String]) -> Vec<String> {
    owed.iter()
        .filter(|t| !inventory.contains_key(*t))
        .cloned()
        .collect()
}

/// How `pin` may move an alias (rule 2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectOptions {
    pub pre: bool,
    pub allow_major: bool,
    pub allow_downgrade: bool,
    pub to: Option<Version>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub tag: String,
    pub version: Version,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("no tag {tag} in the repository")]
    NoSuchVersion { tag: String },
    #[error("{to} leaves the pinned {current}'s compatibility line; pass --allow-major")]
    NeedsAllowMajor { current: Version, to: Version },
    #[error("{to} is lower than the pinned {current}; pass --allow-downgrade")]
    NeedsAllowDowngrade { current: Version, to: Version },
}

/// The version of a `<variant>-X.Y.Z` tag; `None` for anything else.
pub(crate) fn parse_tag(variant: &str, tag: &str) -> Option<Version> {
    let rest = tag.strip_prefix(variant)?.strip_prefix('-')?;
    // The semver crate is strict (no `v`, no leading zeros, three parts),
    // which is exactly what a release tag must be.
    Version::parse(rest).ok()
}

fn same_line(current: &Version, v: &Version) -> bool {
    compat_key(current).0 == compat_key(v).0
}

/// Rule 2: the tags `pin` may move to, best first. The planner walks the list
/// so a candidate refused by the gate falls through to the next. The current
/// version is included (reaching it means "stay").
pub(crate) fn candidates(
    variant: &str,
    tags: &[String],
    current: Option<&Version>,
    opts: &SelectOptions,
) -> Result<Vec<Candidate>, SelectError> {
    let mut all: Vec<Candidate> = tags
        .iter()
        .filter_map(|t| {
            parse_tag(variant, t).map(|version| Candidate {
                tag: t.clone(),
                version,
            })
        })
        .collect();
    // Highest precedence first; build metadata does not count for precedence
    // (semver §10), so among equals the tag without it wins, then by name.
    all.sort_by(|a, b| {
        b.version
            .cmp_precedence(&a.version)
            .then_with(|| {
                a.version
                    .build
                    .is_empty()
                    .cmp(&b.version.build.is_empty())
                    .reverse()
            })
            .then_with(|| b.tag.cmp(&a.tag))
    });

    if let Some(to) = &opts.to {
        let tag = format!("{variant}-{to}");
        let found = all
            .into_iter()
            .find(|c| c.version == *to)
            .ok_or(SelectError::NoSuchVersion { tag })?;
        if let Some(cur) = current {
            if !opts.allow_major && !same_line(cur, to) {
                return Err(SelectError::NeedsAllowMajor {
                    current: cur.clone(),
                    to: to.clone(),
                });
            }
            if !opts.allow_downgrade && to.cmp_precedence(cur) == Ordering::Less {
                return Err(SelectError::NeedsAllowDowngrade {
                    current: cur.clone(),
                    to: to.clone(),
                });
            }
        }
        return Ok(vec![found]);
    }

    Ok(all
        .into_iter()
        .filter(|c| opts.pre || c.version.pre.is_empty() || Some(&c.version) == current)
        .filter(|c| match current {
            None => true,
            Some(cur) => {
                (opts.allow_major || same_line(cur, &c.version))
                    && (opts.allow_downgrade || c.version.cmp_precedence(cur) != Ordering::Less)
            }
        })
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    /// An inventory from (tool, version) pairs.
    pub(crate) fn inv(pairs: &[(&str, &str)]) -> Inventory {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn tool_versions_parse_padded_presence_and_opaque() {
        let cases: &[(&str, ToolVersion)] = &[
            ("14.1.1", ToolVersion::Semver(v("14.1.1"))),
            ("1.24", ToolVersion::Semver(v("1.24.0"))),
            ("1.7", ToolVersion::Semver(v("1.7.0"))),
            ("3", ToolVersion::Semver(v("3.0.0"))),
            ("v20.11.0", ToolVersion::Semver(v("20.11.0"))),
            ("1.02.3", ToolVersion::Semver(v("1.2.3"))),
            ("2.0.0-rc.1", ToolVersion::Semver(v("2.0.0-rc.1"))),
            ("present", ToolVersion::Present),
            ("1.2.3.4", ToolVersion::Opaque("1.2.3.4".into())),
            ("6.1.0rc1", ToolVersion::Opaque("6.1.0rc1".into())),
            ("-", ToolVersion::Opaque("-".into())),
            ("", ToolVersion::Opaque("".into())),
        ];
        for (text, want) in cases {
            assert_eq!(&ToolVersion::parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn tool_changes_classify_by_semver_with_0x_shift() {
        use Bump::{Major, Minor, Patch};
        let cases: &[(Option<&str>, Option<&str>, Bump)] = &[
            (Some("14.1.1"), None, Major),
            (None, Some("14.1.1"), Minor),
            (Some("14.1.1"), Some("14.1.1"), Bump::None),
            (Some("14.1.1"), Some("15.0.0"), Major),
            (Some("15.0.0"), Some("14.1.1"), Major),
            (Some("14.1.1"), Some("14.2.0"), Minor),
            (Some("14.2.0"), Some("14.1.9"), Major),
            (Some("14.1.1"), Some("14.1.2"), Patch),
            (Some("14.1.2"), Some("14.1.1"), Patch),
            (Some("14.1.1-rc.1"), Some("14.1.1"), Patch),
            (Some("1.24"), Some("1.24.0"), Bump::None),
            (Some("1.24"), Some("1.25"), Minor),
            (Some("1.24.3"), Some("1.25"), Minor),
            // 0.x: the minor is the breaking component, the patch adds features.
            (Some("0.12.0"), Some("0.13.2"), Major),
            (Some("0.13.2"), Some("0.12.0"), Major),
            (Some("0.13.1"), Some("0.13.2"), Minor),
            (Some("0.13.2"), Some("0.13.1"), Major),
            (Some("0.13.2"), Some("1.0.0"), Major),
            (Some("0.0.1"), Some("0.0.2"), Minor),
            // Presence-only: only presence matters.
            (Some("present"), Some("present"), Bump::None),
            (Some("present"), Some("1.2.3"), Bump::None),
            (Some("present"), None, Major),
            (None, Some("present"), Minor),
            (Some("weird"), Some("weird"), Bump::None),
            (Some("weird"), Some("other"), Major),
        ];
        for (old, new, want) in cases {
            let (got, reason) = classify(*old, *new);
            assert_eq!(got, *want, "{old:?} -> {new:?}: {reason}");
        }
    }

    #[test]
    fn inventory_delta_is_the_largest_tool_change_and_names_tools() {
        use Bump::{Major, Minor, Patch};
        let base = inv(&[("rg", "14.1.1"), ("ruff", "0.12.0"), ("gofmt", "present")]);
        let cases: Vec<(Inventory, Bump, Vec<&str>)> = vec![
            (base.clone(), Bump::None, vec![]),
            (
                inv(&[("rg", "14.1.2"), ("ruff", "0.12.0"), ("gofmt", "present")]),
                Patch,
                vec!["rg"],
            ),
            (
                inv(&[
                    ("rg", "14.1.1"),
                    ("ruff", "0.12.0"),
                    ("gofmt", "present"),
                    ("jq", "1.7"),
                ]),
                Minor,
                vec!["jq"],
            ),
            (
                inv(&[("rg", "14.2.0"), ("ruff", "0.13.0"), ("gofmt", "present")]),
                Major,
                vec!["rg", "ruff"],
            ),
            (
                inv(&[("rg", "14.1.1"), ("ruff", "0.12.0")]),
                Major,
                vec!["gofmt"],
            ),
        ];
        for (new, want, tools) in cases {
            let d = inventory_delta(&base, &new);
            assert_eq!(d.bump, want, "{new:?}");
            let names: Vec<&str> = d.changes.iter().map(|c| c.tool.as_str()).collect();
            assert_eq!(names, tools);
        }
        let d = inventory_delta(&base, &inv(&[("rg", "14.2.0"), ("ruff", "0.13.0")]));
        assert_eq!(d.proving_tool().unwrap().tool, "gofmt");
    }

    #[test]
    fn bump_version_shifts_for_0x() {
        use Bump::{Major, Minor, Patch};
        let cases = [
            ("1.2.3", Major, Some("2.0.0")),
            ("1.2.3", Minor, Some("1.3.0")),
            ("1.2.3", Patch, Some("1.2.4")),
            ("1.2.3", Bump::None, None),
            ("0.4.1", Major, Some("0.5.0")),
            ("0.4.1", Minor, Some("0.4.2")),
            ("0.4.1", Patch, Some("0.4.2")),
            ("1.3.0-rc.1", Patch, Some("1.3.1")),
        ];
        for (cur, bump, want) in cases {
            assert_eq!(bump_version(&v(cur), bump), want.map(v), "{cur} + {bump}");
        }
    }

    #[test]
    fn next_version_from_inventory_and_inputs() {
        let old = inv(&[("rg", "14.1.1"), ("ruff", "0.12.0")]);
        let cases: Vec<(Inventory, bool, Option<&str>, Bump)> = vec![
            (old.clone(), false, None, Bump::None),
            (old.clone(), true, Some("1.4.3"), Bump::Patch),
            (
                inv(&[("rg", "14.1.2"), ("ruff", "0.12.0")]),
                true,
                Some("1.4.3"),
                Bump::Patch,
            ),
            (
                inv(&[("rg", "14.2.0"), ("ruff", "0.12.0")]),
                true,
                Some("1.5.0"),
                Bump::Minor,
            ),
            (
                inv(&[("rg", "14.1.1"), ("ruff", "0.12.1")]),
                true,
                Some("1.5.0"),
                Bump::Minor,
            ),
            (
                inv(&[("rg", "14.1.1"), ("ruff", "0.13.0")]),
                true,
                Some("2.0.0"),
                Bump::Major,
            ),
            (inv(&[("rg", "14.1.1")]), true, Some("2.0.0"), Bump::Major),
        ];
        for (new, changed, want, bump) in cases {
            let n = next_version(Some((&v("1.4.2"), &old)), &new, changed);
            assert_eq!(n.next, want.map(v), "{new:?}");
            assert_eq!(n.bump, bump);
        }
        let first = next_version(None, &old, true);
        assert_eq!(first.next, Some(v("1.0.0")));
        assert_eq!(first.delta.changes.len(), 2);
    }

    #[test]
    fn version_steps() {
        use Bump::{Major, Minor, Patch};
        let cases = [
            ("1.0.0", "1.0.0", Bump::None),
            ("1.0.0", "1.0.1", Patch),
            ("1.0.0", "1.1.0", Minor),
            ("1.0.0", "2.0.0", Major),
            ("2.0.0", "1.0.0", Major),
            ("1.1.0", "1.2.0-rc.1", Minor),
            ("1.2.0-rc.1", "1.2.0", Patch),
            ("0.3.1", "0.3.2", Minor),
            ("0.3.1", "0.4.0", Major),
            ("1.0.0", "1.0.0+b.2", Bump::None),
        ];
        for (a, b, want) in cases {
            assert_eq!(version_step(&v(a), &v(b)), want, "{a} -> {b}");
        }
    }

    #[test]
    fn versioning_check_refuses_inventory_larger_than_step() {
        let old = inv(&[("rg", "14.1.1"), ("ruff", "0.12.0")]);
        let minor_inv = inv(&[("rg", "14.2.0"), ("ruff", "0.12.0")]);
        let major_inv = inv(&[("rg", "14.1.1"), ("ruff", "0.13.0")]);
        let patch_inv = inv(&[("rg", "14.1.2"), ("ruff", "0.12.0")]);
        // (from, to, new inventory, refused by tool)
        let cases: Vec<(&str, &str, &Inventory, Option<&str>)> = vec![
            ("1.0.0", "1.1.0", &minor_inv, None),
            ("1.0.0", "2.0.0", &minor_inv, None),
            ("1.0.0", "1.0.1", &patch_inv, None),
            ("1.0.0", "1.0.1", &minor_inv, Some("rg")),
            ("1.0.0", "1.1.0", &major_inv, Some("ruff")),
            ("1.0.0", "2.0.0", &major_inv, None),
            ("1.0.0", "1.0.1", &old, None),
            // Downgrades: judged like the upgrade they undo.
            ("1.1.0", "1.0.0", &patch_inv, None),
            ("1.1.0", "1.0.0", &major_inv, Some("ruff")),
            // 0.x image versions: a patch step admits features.
            ("0.3.0", "0.3.1", &minor_inv, None),
            ("0.3.0", "0.3.1", &major_inv, Some("ruff")),
        ];
        for (from, to, new, refused) in cases {
            let got = check_versioning((&v(from), &old), (&v(to), new));
            match (refused, got) {
                (None, Ok(_)) => {}
                (Some(tool), Err(e)) => {
                    assert_eq!(e.tool.tool, tool, "{from}->{to}");
                    assert!(e.to_string().contains(tool), "{e}");
                }
                (want, got) => panic!("{from}->{to} {new:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    /// Image labels carrying `record` as the check record.
    pub(crate) fn labels(record: &str) -> BTreeMap<String, String> {
        [(CHECK_LABEL.to_string(), record.to_string())].into()
    }

    #[test]
    fn gate_needs_passing_record_covering_owed_tools() {
        let owed: Vec<String> = vec!["rg".into(), "ruff".into()];
        let pass = r#"{"schema":1,"status":"pass","variant":"python","tools":{"rg":"14.1.1","ruff":"0.12.0","extra":"1"}}"#;
        assert_eq!(
            gate(&labels(pass), "python", &owed, &[]).unwrap().len(),
            3,
            "extra tools are fine"
        );
        let cases: Vec<(BTreeMap<String, String>, Refusal)> = vec![
            (BTreeMap::new(), Refusal::NoCheckRecord),
            (
                labels(r#"{"status":"fail","tools":{"rg":"1","ruff":"1"}}"#),
                Refusal::NotPassing("fail".into()),
            ),
            (
                labels(r#"{"status":"pass","variant":"go","tools":{"rg":"1","ruff":"1"}}"#),
                Refusal::WrongVariant {
                    expected: "python".into(),
                    found: "go".into(),
                },
            ),
            (
                labels(r#"{"status":"pass","tools":{"rg":"1"}}"#),
                Refusal::MissingTools(vec!["ruff".into()]),
            ),
        ];
        for (l, want) in cases {
            assert_eq!(gate(&l, "python", &owed, &[]).unwrap_err(), want);
        }
        assert!(matches!(
            gate(&labels("{not json"), "python", &owed, &[]),
            Err(Refusal::BadCheckRecord(_))
        ));
    }

    #[test]
    fn gate_needs_every_smoke_suite_the_variant_runs() {
        let smoke = vec!["neutral".to_string(), "python".to_string()];
        let record = |smoke: &str| {
            labels(&format!(
                r#"{{"status":"pass","variant":"python","tools":{{}}{smoke}}}"#
            ))
        };
        let both = r#","smoke":{"digest":"sha256:1","suites":{"neutral":9,"python":7}}"#;
        assert!(gate(&record(both), "python", &[], &smoke).is_ok());
        assert_eq!(
            gate(&record(""), "python", &[], &smoke).unwrap_err(),
            Refusal::NoSmoke
        );
        let one = r#","smoke":{"digest":"sha256:1","suites":{"neutral":9,"python":0}}"#;
        assert_eq!(
            gate(&record(one), "python", &[], &smoke).unwrap_err(),
            Refusal::MissingSmoke(vec!["python".into()])
        );
        assert!(
            gate(&record(""), "python", &[], &[]).is_ok(),
            "nothing to run"
        );
    }

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tag_parsing_ignores_noise() {
        let cases = [
            ("python-1.2.3", Some("1.2.3")),
            ("python-1.2.0-rc.1", Some("1.2.0-rc.1")),
            ("python-1.2.3+b.1", Some("1.2.3+b.1")),
            ("python-latest", None),
            ("python-1.2", None),
            ("python-v1.2.3", None),
            ("python-01.2.3", None),
            ("pythonx-1.2.3", None),
            ("go-1.2.3", None),
            ("python", None),
            ("1.2.3", None),
        ];
        for (tag, want) in cases {
            assert_eq!(parse_tag("python", tag), want.map(v), "{tag}");
        }
    }

    #[test]
    fn candidate_selection_table() {
        let registry = tags(&[
            "python-1.0.0",
            "python-1.1.0",
            "python-1.2.0-rc.1",
            "python-2.0.0",
            "python-2.1.0-rc.1",
            "python-latest",
            "python-1.1",
            "go-9.0.0",
            "sha256-abc",
        ]);
        let zero = tags(&[
            "python-0.3.0",
            "python-0.3.1",
            "python-0.3.2-rc.1",
            "python-0.4.0",
        ]);
        let build = tags(&["python-1.1.0+b.1", "python-1.1.0", "python-1.0.5"]);
        let opts = |pre, allow_major, allow_downgrade, to: Option<&str>| SelectOptions {
            pre,
            allow_major,
            allow_downgrade,
            to: to.map(v),
        };
        // (tags, current, options, best pick or None for empty)
        type Case<'a> = (
            &'a Vec<String>,
            Option<&'a str>,
            SelectOptions,
            Option<&'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                &registry,
                Some("1.0.0"),
                opts(false, false, false, None),
                Some("python-1.1.0"),
            ),
            (
                &registry,
                Some("1.0.0"),
                opts(true, false, false, None),
                Some("python-1.2.0-rc.1"),
            ),
            (
                &registry,
                Some("1.0.0"),
                opts(false, true, false, None),
                Some("python-2.0.0"),
            ),
            (
                &registry,
                Some("1.0.0"),
                opts(true, true, false, None),
                Some("python-2.1.0-rc.1"),
            ),
            (
                &registry,
                None,
                opts(false, false, false, None),
                Some("python-2.0.0"),
            ),
            (
                &registry,
                Some("1.1.0"),
                opts(false, false, false, None),
                Some("python-1.1.0"),
            ),
            // Pinned above everything that is left: no downgrade.
            (
                &registry,
                Some("1.5.0"),
                opts(false, false, false, None),
                None,
            ),
            (
                &registry,
                Some("1.5.0"),
                opts(false, false, true, None),
                Some("python-1.1.0"),
            ),
            // A pinned pre-release stays eligible without --pre.
            (
                &registry,
                Some("1.2.0-rc.1"),
                opts(false, false, false, None),
                Some("python-1.2.0-rc.1"),
            ),
            // 0.x: the minor is the compatibility line.
            (
                &zero,
                Some("0.3.0"),
                opts(false, false, false, None),
                Some("python-0.3.1"),
            ),
            (
                &zero,
                Some("0.3.0"),
                opts(true, false, false, None),
                Some("python-0.3.2-rc.1"),
            ),
            (
                &zero,
                Some("0.3.0"),
                opts(false, true, false, None),
                Some("python-0.4.0"),
            ),
            // Build metadata does not raise precedence; the plain tag wins.
            (
                &build,
                Some("1.0.0"),
                opts(false, false, false, None),
                Some("python-1.1.0"),
            ),
            (
                &registry,
                Some("1.0.0"),
                opts(false, false, false, Some("1.0.0")),
                Some("python-1.0.0"),
            ),
            (
                &registry,
                Some("1.0.0"),
                opts(false, false, false, Some("1.2.0-rc.1")),
                Some("python-1.2.0-rc.1"),
            ),
            (
                &registry,
                Some("1.0.0"),
                opts(false, true, false, Some("2.0.0")),
                Some("python-2.0.0"),
            ),
            (
                &registry,
                Some("1.1.0"),
                opts(false, false, true, Some("1.0.0")),
                Some("python-1.0.0"),
            ),
        ];
        for (t, cur, o, want) in cases {
            let cur = cur.map(v);
            let got = candidates("python", t, cur.as_ref(), &o).unwrap();
            assert_eq!(
                got.first().map(|c| c.tag.as_str()),
                want,
                "current {cur:?} {o:?}"
            );
            // Best first, never below the pin without --allow-downgrade.
            for w in got.windows(2) {
                assert_ne!(w[0].version.cmp_precedence(&w[1].version), Ordering::Less);
            }
            if let (Some(c), false) = (&cur, o.allow_downgrade) {
                assert!(
                    got.iter()
                        .all(|x| x.version.cmp_precedence(c) != Ordering::Less)
                );
            }
        }
    }

    #[test]
    fn candidate_selection_errors_for_explicit_targets() {
        let registry = tags(&["python-1.0.0", "python-1.1.0", "python-2.0.0"]);
        let to = |s: &str, allow_major, allow_downgrade| SelectOptions {
            to: Some(v(s)),
            allow_major,
            allow_downgrade,
            pre: false,
        };
        let cur = v("1.1.0");
        let cases = [
            (
                to("1.5.0", false, false),
                SelectError::NoSuchVersion {
                    tag: "python-1.5.0".into(),
                },
            ),
            (
                to("2.0.0", false, false),
                SelectError::NeedsAllowMajor {
                    current: cur.clone(),
                    to: v("2.0.0"),
                },
            ),
            (
                to("1.0.0", false, false),
                SelectError::NeedsAllowDowngrade {
                    current: cur.clone(),
                    to: v("1.0.0"),
                },
            ),
        ];
        for (o, want) in cases {
            assert_eq!(
                candidates("python", &registry, Some(&cur), &o).unwrap_err(),
                want
            );
        }
    }
}
