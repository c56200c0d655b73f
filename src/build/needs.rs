//! What needs building and why, decided without an engine (pure): each
//! variant's definition against its published image's `dev.sunaba.definition`,
//! the upstream's digest against the image's `org.opencontainers.image.base.digest`,
//! a variant nobody pinned yet, a parent that is rebuilt and a member of a
//! composed variant that is. `plan` prints it as a GitHub Actions matrix.

use crate::labels;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Why a variant needs building.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(crate) enum Reason {
    /// No alias of the variant is pinned.
    NewVariant,
    /// Its definition is not the one of the pinned image.
    InputsChanged { pinned: String },
    /// The pinned image records no definition (built before they were).
    Unrecorded { pinned: String },
    /// The upstream image moved since the pinned image was built on it.
    BaseChanged {
        pinned: String,
        was: String,
        now: String,
    },
    /// Its parent is rebuilt, so it is built again on top.
    ParentRebuilt { parent: String },
    /// It is composed from its members' layers, and this member is rebuilt.
    MemberRebuilt { member: String },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NewVariant => f.write_str("new variant (no alias pinned)"),
            Reason::InputsChanged { pinned } => write!(f, "inputs changed since {pinned}"),
            Reason::Unrecorded { pinned } => {
                write!(f, "{pinned} records no {} label", labels::DEFINITION)
            }
            Reason::BaseChanged { was, now, .. } => write!(f, "base changed ({was} -> {now})"),
            Reason::ParentRebuilt { parent } => write!(f, "its parent {parent} is rebuilt"),
            Reason::MemberRebuilt { member } => write!(f, "its member {member} is rebuilt"),
        }
    }
}

/// A variant's published image, as `plan` compares with it.
#[derive(Debug, Clone)]
pub struct Published {
    /// The pinned tag (`<variant>-X.Y.Z`).
    pub tag: String,
    /// The labels of its config.
    pub labels: BTreeMap<String, String>,
}

/// One variant of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Need {
    pub variant: String,
    pub build: bool,
    pub reasons: Vec<Reason>,
    pub definition: String,
    /// The tag it is compared with, when one is pinned.
    pub pinned: Option<String>,
    /// Its ancestors (and a composed variant's members) and itself,
    /// parents first: what its build builds.
    pub chain: Vec<String>,
}

/// A variant of the family, for [`needs`].
pub(crate) struct Variant<'a> {
    pub name: &'a str,
    pub parent: Option<&'a str>,
    pub definition: &'a str,
    pub published: Option<&'a Published>,
    /// The variants it is composed from (`build` assembles it from their
    /// layers), none when it is built from its Dockerfile alone.
    pub members: Vec<&'a str>,
}

/// The needs of every variant, parents first (`variants` is in build
/// order). `base_now` is the upstream's digest now, when it was resolved.
pub(crate) fn needs(variants: &[Variant], base_now: Option<&str>) -> Vec<Need> {
    let mut out: Vec<Need> = Vec::new();
    // A composed variant waits for its members (which come after it in
    // the family's order, being its parent's other children), and every
    // variant for its parent.
    let mut pending: Vec<&Variant> = variants.iter().collect();
    while !pending.is_empty() {
        let done = |name: &str| out.iter().any(|n: &Need| n.variant == name);
        let Some(at) = pending.iter().position(|v| {
            v.parent
                .is_none_or(|p| done(p) || !variants.iter().any(|w| w.name == p))
                && v.members
                    .iter()
                    .all(|m| done(m) || !variants.iter().any(|w| w.name == *m))
        }) else {
            // A cycle, which validation refuses: take the rest as they come.
            let v = pending.remove(0);
            out.push(need(v, &out, base_now));
            continue;
        };
        let v = pending.remove(at);
        out.push(need(v, &out, base_now));
    }
    out
}

/// The need of `v`, given those of its parent and members (in `out`).
fn need(v: &Variant, out: &[Need], base_now: Option<&str>) -> Need {
    let mut reasons = Vec::new();
    match v.published {
        None => reasons.push(Reason::NewVariant),
        Some(p) => {
            let pinned = p.tag.clone();
            match p.labels.get(labels::DEFINITION) {
                None => reasons.push(Reason::Unrecorded { pinned }),
                Some(d) if d != v.definition => reasons.push(Reason::InputsChanged { pinned }),
                Some(_) => {}
            }
            let was = p.labels.get(labels::OCI_BASE_DIGEST);
            if let (None, Some(was), Some(now)) = (v.parent, was, base_now)
                && was != now
            {
                reasons.push(Reason::BaseChanged {
                    pinned: p.tag.clone(),
                    was: was.clone(),
                    now: now.to_string(),
                });
            }
        }
    }
    let find = |name: &str| out.iter().find(|n| n.variant == name);
    if let Some(parent) = v.parent
        && find(parent).is_some_and(|n| n.build)
    {
        reasons.push(Reason::ParentRebuilt {
            parent: parent.to_string(),
        });
    }
    // A composed image is made of its members' layers: a member built
    // again makes it again (its parent's rebuild says so already).
    if !reasons
        .iter()
        .any(|r| matches!(r, Reason::ParentRebuilt { .. }))
    {
        for m in &v.members {
            if find(m).is_some_and(|n| n.build) {
                reasons.push(Reason::MemberRebuilt {
                    member: m.to_string(),
                });
            }
        }
    }
    let mut chain: Vec<String> = Vec::new();
    let below = v.parent.into_iter().chain(v.members.iter().copied());
    for n in below.filter_map(find) {
        for c in &n.chain {
            if !chain.contains(c) {
                chain.push(c.clone());
            }
        }
    }
    chain.push(v.name.to_string());
    Need {
        variant: v.name.to_string(),
        build: !reasons.is_empty(),
        reasons,
        definition: v.definition.to_string(),
        pinned: v.published.map(|p| p.tag.clone()),
        chain,
    }
}

/// One job of the matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Job {
    pub variant: String,
    /// The reasons, in one line.
    pub why: String,
    /// What the job builds and checks, space-separated: its ancestors and
    /// itself (a fresh runner has none of them).
    pub chain: String,
}

/// A GitHub Actions matrix (`strategy.matrix: ${{ fromJSON(…).matrix }}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Matrix {
    pub include: Vec<Job>,
}

/// One leg of a multi-platform build (`build --platform P
/// --push-by-digest`): the platform, a tag-safe name of it, and the runner
/// that builds it natively (GitHub's arm64 runners for linux/arm64; any
/// other platform runs emulated on an amd64 one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Leg {
    pub platform: crate::name::Platform,
    pub slug: String,
    pub runner: String,
}

/// A GitHub Actions matrix of legs, one per platform of the family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Legs {
    pub include: Vec<Leg>,
}

impl Legs {
    pub(crate) fn new(platforms: &[crate::name::Platform]) -> Legs {
        Legs {
            include: platforms
                .iter()
                .map(|p| {
                    let slug = p.slug();
                    Leg {
                        platform: p.clone(),
                        runner: match slug.as_str() {
                            "arm64" => "ubuntu-24.04-arm",
                            _ => "ubuntu-24.04",
                        }
                        .into(),
                        slug,
                    }
                })
                .collect(),
        }
    }
}

/// What `plan --json` prints: `has_work` first, so a workflow can skip the
/// build job instead of handing `strategy` an empty matrix (an error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct BuildPlan {
    pub has_work: bool,
    pub matrix: Matrix,
    /// The platforms' legs (`strategy.matrix: ${{ fromJSON(…).legs }}`).
    pub legs: Legs,
    pub variants: Vec<Need>,
}

impl BuildPlan {
    pub(crate) fn new(variants: Vec<Need>, platforms: &[crate::name::Platform]) -> BuildPlan {
        let include: Vec<Job> = variants
            .iter()
            .filter(|n| n.build)
            .map(|n| Job {
                variant: n.variant.clone(),
                why: n
                    .reasons
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
                chain: n.chain.join(" "),
            })
            .collect();
        BuildPlan {
            has_work: !include.is_empty(),
            matrix: Matrix { include },
            legs: Legs::new(platforms),
            variants,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(tag: &str, definition: Option<&str>, base: Option<&str>) -> Published {
        let mut labels = BTreeMap::new();
        if let Some(d) = definition {
            labels.insert(labels::DEFINITION.to_string(), d.to_string());
        }
        if let Some(b) = base {
            labels.insert(labels::OCI_BASE_DIGEST.to_string(), b.to_string());
        }
        Published {
            tag: tag.into(),
            labels,
        }
    }

    fn plan(
        published: &[Option<Published>],
        definitions: [&str; 4],
        base: &str,
    ) -> Vec<(String, String)> {
        let shape = [
            ("base", None),
            ("kid", Some("base")),
            ("solo", None),
            ("new", None),
        ];
        let variants: Vec<Variant> = shape
            .iter()
            .zip(definitions)
            .zip(published)
            .map(|(((name, parent), definition), p)| Variant {
                name,
                parent: *parent,
                definition,
                published: p.as_ref(),
                members: Vec::new(),
            })
            .collect();
        BuildPlan::new(needs(&variants, Some(base)), &[])
            .matrix
            .include
            .into_iter()
            .map(|j| (j.variant, j.why))
            .collect()
    }

    #[test]
    fn a_composed_variant_comes_after_its_members_builds_their_chains_and_follows_them() {
        // In the family's order `ab` comes before its members (the parent's
        // children, by name).
        let pin = |v: &str| {
            Some(published(
                &format!("{v}-1.0.0"),
                Some(&format!("d-{v}")),
                Some("b1"),
            ))
        };
        let pins = [pin("root"), pin("ab"), pin("a"), pin("b")];
        let run = |defs: [&str; 4]| {
            let shape = [
                ("root", None, vec![]),
                ("ab", Some("root"), vec!["a", "b"]),
                ("a", Some("root"), vec![]),
                ("b", Some("root"), vec![]),
            ];
            let variants: Vec<Variant> = shape
                .iter()
                .zip(defs)
                .zip(&pins)
                .map(|(((name, parent, members), definition), p)| Variant {
                    name,
                    parent: *parent,
                    definition,
                    published: p.as_ref(),
                    members: members.clone(),
                })
                .collect();
            needs(&variants, Some("b1"))
        };
        let all = run(["d-root", "d-ab", "d-a", "d-b"]);
        let order: Vec<&str> = all.iter().map(|n| n.variant.as_str()).collect();
        assert_eq!(order, ["root", "a", "b", "ab"]);
        assert_eq!(all[3].chain, ["root", "a", "b", "ab"]);
        assert!(all.iter().all(|n| !n.build), "{all:?}");
        // Only b's own inputs changed: ab is made of b's layers, so it is
        // made again.
        let b = run(["d-root", "d-ab", "d-a", "d-b2"]);
        let ab = b.iter().find(|n| n.variant == "ab").unwrap();
        assert!(ab.build);
        assert_eq!(ab.reasons, [Reason::MemberRebuilt { member: "b".into() }]);
        assert_eq!(ab.reasons[0].to_string(), "its member b is rebuilt");
        // The parent rebuilt says it all: no member reasons on top.
        let root = run(["d-root2", "d-ab", "d-a", "d-b"]);
        let ab = root.iter().find(|n| n.variant == "ab").unwrap();
        assert_eq!(
            ab.reasons,
            [Reason::ParentRebuilt {
                parent: "root".into()
            }]
        );
    }

    #[test]
    fn a_change_builds_its_variant_and_children_and_a_base_change_everything() {
        let pins = [
            Some(published("base-1.0.0", Some("d-base"), Some("b1"))),
            Some(published("kid-1.0.0", Some("d-kid"), Some("b1"))),
            Some(published("solo-1.0.0", Some("d-solo"), Some("b1"))),
            None,
        ];
        let defs = ["d-base", "d-kid", "d-solo", "d-new"];
        assert_eq!(
            plan(&pins, defs, "b1"),
            [("new".into(), "new variant (no alias pinned)".into())]
        );
        assert_eq!(
            plan(&pins, ["d-base2", "d-kid2", "d-solo", "d-new"], "b1"),
            [
                ("base".into(), "inputs changed since base-1.0.0".into()),
                (
                    "kid".into(),
                    "inputs changed since kid-1.0.0; its parent base is rebuilt".into()
                ),
                ("new".into(), "new variant (no alias pinned)".into()),
            ]
        );
        let rebased = plan(&pins, defs, "b2");
        let names: Vec<&str> = rebased.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(names, ["base", "kid", "solo", "new"]);
        assert_eq!(rebased[0].1, "base changed (b1 -> b2)");
        assert_eq!(
            rebased[1].1, "its parent base is rebuilt",
            "a child's base is its parent"
        );
    }

    #[test]
    fn unrecorded_images_are_rebuilt_and_an_empty_matrix_says_so() {
        let pins = [Some(published("base-1.0.0", None, None)), None, None, None];
        let jobs = plan(&pins, ["a", "b", "c", "d"], "b1");
        assert_eq!(
            jobs[0].1,
            "base-1.0.0 records no dev.sunaba.definition label"
        );
        let empty = BuildPlan::new(Vec::new(), &["linux/amd64".parse().unwrap()]);
        assert!(!empty.has_work);
        assert_eq!(
            serde_json::to_string(&empty).unwrap(),
            r#"{"has_work":false,"matrix":{"include":[]},"legs":{"include":[{"platform":"linux/amd64","slug":"amd64","runner":"ubuntu-24.04"}]},"variants":[]}"#
        );
        let two = Legs::new(&[
            "linux/amd64".parse().unwrap(),
            "linux/arm64".parse().unwrap(),
        ]);
        let runners: Vec<(&str, &str)> = two
            .include
            .iter()
            .map(|l| (l.slug.as_str(), l.runner.as_str()))
            .collect();
        assert_eq!(
            runners,
            [("amd64", "ubuntu-24.04"), ("arm64", "ubuntu-24.04-arm")]
        );
    }
}
