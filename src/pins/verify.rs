//! `pins verify`, the CI gate: the pins file still describes images that
//! exist, are what they claim, and keep the manifest's contract.

use super::plan::AliasSpec;
use super::source::{DigestCheck, ImageSource, Inspected, SourceError};
use super::{Digest, Pin, PinsFile, locate_alias};
use crate::semver_rules::{self, parse_tag};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    /// The pins are wrong: the gate fails (exit 2).
    Problem,
    /// Something could not be checked (registry unreachable, refused, …):
    /// an operational failure (exit 1), so CI tells it from broken pins.
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub alias: String,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.severity {
            Severity::Warning => "warning",
            Severity::Problem => "problem",
            Severity::Error => "error",
        };
        write!(f, "{s}: {}: {}", self.alias, self.message)
    }
}

/// Checks every rule; returns one finding per problem (empty: all good).
/// The aliases are checked at once (the client bounds requests per
/// registry); the findings come in the order of `specs` all the same.
pub async fn verify(
    file: &PinsFile,
    text: &str,
    path: &Path,
    specs: &[AliasSpec],
    source: &impl ImageSource,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let problem = |out: &mut Vec<Finding>, alias: &str, message: String| {
        out.push(Finding {
            severity: Severity::Problem,
            alias: alias.to_string(),
            message,
        })
    };
    let declared: BTreeSet<&str> = specs.iter().map(|s| s.alias.as_str()).collect();
    for alias in file.images.keys() {
        if !declared.contains(alias.as_str()) {
            let (line, column) = locate_alias(text, alias).unwrap_or((1, 1));
            problem(
                &mut out,
                alias,
                format!(
                    "{}:{line}:{column}: pinned but not declared in images.toml (orphaned pin)",
                    path.display()
                ),
            );
        }
    }
    let checks = specs.iter().map(|spec| async move {
        match file.images.get(&spec.alias) {
            None => {
                let mut out = Vec::new();
                problem(
                    &mut out,
                    &spec.alias,
                    format!(
                        "not pinned (variant {}); run `sunaba-images pin {} --write`",
                        spec.variant, spec.alias
                    ),
                );
                out
            }
            Some(pin) => check_pin(spec, pin, source).await,
        }
    });
    out.extend(
        futures::future::join_all(checks)
            .await
            .into_iter()
            .flatten(),
    );
    out
}

/// The findings of one pin: its tag and inventory, each of its digests and
/// its tag in the registry (asked at once), then what the digest names.
async fn check_pin(spec: &AliasSpec, pin: &Pin, source: &impl ImageSource) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut findings = Findings {
        alias: &spec.alias,
        out: &mut out,
    };
    check_entry(spec, pin, &mut findings);
    let mut digests: Vec<(Option<&crate::name::Platform>, &Digest)> = vec![(None, &pin.digest)];
    digests.extend(pin.platforms.iter().map(|(p, d)| (Some(p), d)));
    digests.dedup_by(|a, b| a.1 == b.1);
    let repository = pin.repository.as_str();
    let (checks, tag) = futures::join!(
        futures::future::join_all(
            digests
                .iter()
                .map(|(_, digest)| source.check_digest(repository, digest))
        ),
        source.tag_digest(repository, &pin.tag)
    );
    let intact = check_digests(pin, digests.into_iter().zip(checks), &mut findings);
    check_tag(pin, tag, &mut findings);
    // Both levels agree: what `digest` names (an index, or one image) is
    // exactly the pinned platform images. And the inventory in the file is
    // each platform image's own, not a hand edit.
    if intact {
        let inspected = source.inspect(repository, &pin.digest.to_string()).await;
        check_image(spec, pin, inspected, &mut findings);
    }
    out
}

/// The findings of one alias.
struct Findings<'a> {
    alias: &'a str,
    out: &'a mut Vec<Finding>,
}

impl Findings<'_> {
    /// Adds a finding; its message quotes what the registry said (tool
    /// names from a check label, its error text), so it is escaped as the
    /// attestations' findings are.
    fn push(&mut self, severity: Severity, message: String) {
        self.out.push(Finding {
            severity,
            alias: self.alias.to_string(),
            message: super::attestations::escaped(&message),
        })
    }
}

/// What the pin's entry says, against the manifest: its tag names the
/// variant at its version, and its tools include what the variant owes.
fn check_entry(spec: &AliasSpec, pin: &Pin, findings: &mut Findings) {
    if parse_tag(&spec.variant, &pin.tag).as_ref() != Some(&pin.version) {
        findings.push(
            Severity::Problem,
            format!(
                "tag {} does not name variant {} at version {}",
                pin.tag, spec.variant, pin.version
            ),
        );
    }
    let missing = semver_rules::missing_tools(&pin.tools, &spec.owed);
    if !missing.is_empty() {
        findings.push(
            Severity::Problem,
            format!(
                "pinned inventory lacks owed tool(s): {} (pin a newer image)",
                missing.join(", ")
            ),
        );
    }
}

/// The registry still serves the pinned digest and each pinned platform
/// image, byte for byte (`checks`: each digest with what the registry
/// answered). Returns whether all are intact.
fn check_digests<'a>(
    pin: &Pin,
    checks: impl IntoIterator<
        Item = (
            (Option<&'a crate::name::Platform>, &'a Digest),
            Result<DigestCheck, SourceError>,
        ),
    >,
    findings: &mut Findings,
) -> bool {
    let mut intact = true;
    for ((platform, digest), check) in checks {
        let what = match platform {
            None => format!("{}@{digest}", pin.repository),
            Some(platform) => format!("{}@{digest} ({platform})", pin.repository),
        };
        match check {
            Ok(DigestCheck::Intact) => {}
            Ok(DigestCheck::Missing) => {
                intact = false;
                findings.push(
                    Severity::Problem,
                    format!("{what} no longer exists in the registry"),
                );
            }
            Ok(DigestCheck::Mismatch { actual }) => {
                intact = false;
                findings.push(
                    Severity::Problem,
                    format!("{what}: the registry serves bytes hashing to {actual}"),
                );
            }
            Err(e) => {
                intact = false;
                findings.push(
                    Severity::Error,
                    format!("cannot check {what}: {}", e.message),
                );
            }
        }
    }
    intact
}
/// Whether the pin's tag still points at the pinned digest (`now`: what the
/// registry answered; a moved or deleted tag is a warning: the pin uses the
/// digest).
fn check_tag(pin: &Pin, now: Result<Option<Digest>, SourceError>, findings: &mut Findings) {
    match now {
        Ok(Some(now)) if now != pin.digest => findings.push(
            Severity::Warning,
            format!(
                "tag {} moved: it now points at {now}, the pin is {}",
                pin.tag, pin.digest
            ),
        ),
        Ok(Some(_)) => {}
        Ok(None) => findings.push(
            Severity::Warning,
            format!(
                "tag {} no longer exists (the pinned digest is used)",
                pin.tag
            ),
        ),
        Err(e) => findings.push(
            Severity::Error,
            format!("cannot resolve tag {}: {}", pin.tag, e.message),
        ),
    }
}

/// The pinned image, read (`inspected`): its platform images are the
/// pinned ones, and each one's check record gives the pinned tools.
fn check_image(
    spec: &AliasSpec,
    pin: &Pin,
    inspected: Result<Inspected, SourceError>,
    findings: &mut Findings,
) {
    let inspected = match inspected {
        Ok(inspected) => inspected,
        Err(e) => {
            findings.push(
                Severity::Error,
                format!("cannot read the pinned image: {e}"),
            );
            return;
        }
    };
    for message in platform_differences(&pin.digest, &inspected.platforms(), &pin.platforms) {
        findings.push(Severity::Problem, message);
    }
    let several = inspected.images.len() > 1;
    for image in &inspected.images {
        let of = if several {
            format!(" ({})", image.platform)
        } else {
            String::new()
        };
        match semver_rules::gate(&image.labels, &spec.variant, &[], &[]) {
            Ok(inv) if inv != pin.tools => findings.push(
                Severity::Problem,
                format!("pinned tools differ from the image's check record{of}"),
            ),
            Ok(_) => {}
            Err(r) => findings.push(Severity::Problem, format!("pinned image{of}: {r}")),
        }
    }
    if inspected.images.is_empty() {
        findings.push(
            Severity::Problem,
            format!("{} lists no platform images", pin.digest),
        );
    }
}

/// Where the platform images `digest` names (`listed`) and the pin's
/// `platforms` differ, one message each.
fn platform_differences(
    digest: &Digest,
    listed: &BTreeMap<crate::name::Platform, Digest>,
    pinned: &BTreeMap<crate::name::Platform, Digest>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (platform, want) in pinned {
        match listed.get(platform) {
            None => out.push(format!(
                "platforms: {platform} is pinned as {want}, but {digest} has no {platform} image"
            )),
            Some(got) if got != want => out.push(format!(
                "platforms: {platform} is pinned as {want}, but {digest} names {got} for it"
            )),
            Some(_) => {}
        }
    }
    for (platform, got) in listed {
        if !pinned.contains_key(platform) {
            out.push(format!(
                "platforms: {digest} has a {platform} image ({got}) the pin does not list"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::plan::tests::{REPO, acceptance_registry, pin_of, spec};
    use super::*;
    use futures::executor::block_on;

    fn check(file: &PinsFile, specs: &[AliasSpec], reg: &impl ImageSource) -> Vec<String> {
        block_on(verify(
            file,
            &file.to_text(),
            Path::new("image_pins.json"),
            specs,
            reg,
        ))
        .iter()
        .map(|f| f.to_string())
        .collect()
    }

    /// Three aliases, one of them broken: their digests are checked at
    /// once (the fake counts checks in flight across a yield), and the
    /// findings still come in the order of the specs.
    #[test]
    fn the_aliases_are_checked_at_once_and_reported_in_order() {
        let reg = acceptance_registry();
        let specs: Vec<AliasSpec> = ["py", "python", "snake"]
            .iter()
            .map(|a| spec(a, "python", &["ruff", "pytest"]))
            .collect();
        let mut file = PinsFile {
            images: (specs.iter())
                .map(|s| (s.alias.clone(), pin_of(&reg, "python-1.1.0")))
                .collect(),
            extra: Default::default(),
        };
        assert_eq!(check(&file, &specs, &reg), Vec::<String>::new());
        let checks: usize = (file.images.values())
            .map(|p| {
                let mut digests = vec![&p.digest];
                digests.extend(p.platforms.values());
                digests.dedup();
                digests.len()
            })
            .sum();
        assert!(checks >= 3);
        assert_eq!(reg.max_in_flight.get(), checks, "every digest at once");
        for alias in ["snake", "py"] {
            file.images.get_mut(alias).unwrap().version = semver::Version::new(1, 0, 0);
        }
        let found = check(&file, &specs, &reg);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("problem: py: "), "{found:?}");
        assert!(found[1].starts_with("problem: snake: "), "{found:?}");
    }

    #[test]
    fn verify_finds_each_kind_of_problem() {
        let reg = acceptance_registry();
        let specs = vec![spec("python", "python", &["ruff", "pytest"])];
        let good = PinsFile {
            images: [("python".to_string(), pin_of(&reg, "python-1.1.0"))].into(),
            extra: Default::default(),
        };
        assert_eq!(check(&good, &specs, &reg), Vec::<String>::new());

        type Mutate = Box<dyn Fn(&mut PinsFile, &mut Vec<AliasSpec>)>;
        let other = super::super::plan::tests::digest_of("other");
        let cases: Vec<(&str, Mutate, &str)> = vec![
            (
                "missing alias",
                Box::new(|_, s| s.push(spec("go", "go", &[]))),
                "problem: go: not pinned",
            ),
            (
                "orphan",
                Box::new(|f, _| {
                    let p = f.images["python"].clone();
                    f.images.insert("py".into(), p);
                }),
                "problem: py: image_pins.json:4:5: pinned but not declared",
            ),
            (
                "tampered digest",
                Box::new(move |f, _| {
                    f.images.get_mut("python").unwrap().digest = other.clone();
                }),
                "no longer exists in the registry",
            ),
            (
                "owed tool gone",
                Box::new(|_, s| s[0].owed.push("pyright".into())),
                "lacks owed tool(s): pyright",
            ),
            (
                "hand-edited tools",
                Box::new(|f, _| {
                    f.images
                        .get_mut("python")
                        .unwrap()
                        .tools
                        .insert("ruff".into(), "9.9.9".into());
                }),
                "differ from the image's check record",
            ),
            (
                "tag and version disagree",
                Box::new(|f, _| {
                    f.images.get_mut("python").unwrap().version = semver::Version::new(1, 0, 0);
                }),
                "does not name variant python at version 1.0.0",
            ),
        ];
        for (name, mutate, want) in cases {
            let mut file = good.clone();
            let mut s = specs.clone();
            mutate(&mut file, &mut s);
            let found = check(&file, &s, &reg);
            assert!(found.iter().any(|l| l.contains(want)), "{name}: {found:?}");
            assert!(
                found
                    .iter()
                    .all(|l| l.starts_with("problem: ") || l.starts_with("warning: ")),
                "{found:?}"
            );
        }
    }

    #[test]
    fn a_finding_shows_what_the_registry_said_escaped() {
        let mut out = Vec::new();
        let mut findings = Findings {
            alias: "python",
            out: &mut out,
        };
        findings.push(
            Severity::Error,
            "cannot resolve tag t: registry said \u{1b}]0;pwned\u{7}".into(),
        );
        assert_eq!(
            out[0].message,
            r"cannot resolve tag t: registry said \u{1b}]0;pwned\u{7}"
        );
    }

    #[test]
    fn verify_registry_side_problems() {
        let reg = acceptance_registry();
        let specs = vec![spec("python", "python", &[])];
        let pin = pin_of(&reg, "python-1.1.0");
        let file = PinsFile {
            images: [("python".to_string(), pin.clone())].into(),
            extra: Default::default(),
        };
        // Tampered bytes.
        let fake = super::super::plan::tests::digest_of("fake");
        reg.tampered
            .borrow_mut()
            .insert(pin.digest.clone(), fake.clone());
        let found = check(&file, &specs, &reg);
        assert!(
            found[0].contains(&format!("hashing to {fake}")),
            "{found:?}"
        );
        reg.tampered.borrow_mut().clear();

        // Deleted platform manifest.
        let amd = pin.platforms[&"linux/amd64".parse().unwrap()].clone();
        reg.deleted.borrow_mut().push(amd.clone());
        let found = check(&file, &specs, &reg);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains(&format!("@{amd} (linux/amd64) no longer exists")));
        reg.deleted.borrow_mut().clear();

        // Moved tag: a warning naming both digests.
        let moved = block_on(reg.inspect(REPO, "python-2.0.0")).unwrap();
        reg.push(REPO, "python-1.1.0", moved.clone());
        let found = block_on(verify(&file, &file.to_text(), Path::new("p"), &specs, &reg));
        let warnings: Vec<_> = found
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .collect();
        assert_eq!(warnings.len(), 1, "{found:?}");
        assert!(warnings[0].message.contains(&moved.digest.to_string()));
        assert!(warnings[0].message.contains(&pin.digest.to_string()));
    }

    /// A two-platform python image (an index of amd64 and arm64 images,
    /// each with its check record) at `python-3.0.0`, and its pin.
    fn two_platform(arm_tools: &[(&str, &str)]) -> (super::super::source::fake::FakeRegistry, Pin) {
        use super::super::plan::tests::{digest_of, record};
        use super::super::source::{Inspected, PlatformImage};
        let reg = acceptance_registry();
        let tools = [("ruff", "0.13.0"), ("pytest", "8.4.1")];
        let labels = |tools: &[(&str, &str)]| {
            [(
                crate::labels::CHECK.to_string(),
                record("pass", "python", tools),
            )]
            .into()
        };
        let image = Inspected {
            digest: digest_of("index 3.0.0"),
            images: vec![
                PlatformImage {
                    platform: "linux/amd64".parse().unwrap(),
                    digest: digest_of("amd64 3.0.0"),
                    labels: labels(&tools),
                },
                PlatformImage {
                    platform: "linux/arm64".parse().unwrap(),
                    digest: digest_of("arm64 3.0.0"),
                    labels: labels(arm_tools),
                },
            ],
        };
        reg.push(REPO, "python-3.0.0", image);
        let pin = pin_of(&reg, "python-3.0.0");
        assert_eq!(pin.platforms.len(), 2);
        (reg, pin)
    }

    #[test]
    fn verify_checks_both_levels_of_a_two_platform_pin() {
        let specs = vec![spec("python", "python", &[])];
        let file = |pin: &Pin| PinsFile {
            images: [("python".to_string(), pin.clone())].into(),
            extra: Default::default(),
        };
        let (reg, pin) = two_platform(&[("ruff", "0.13.0"), ("pytest", "8.4.1")]);
        assert_eq!(check(&file(&pin), &specs, &reg), Vec::<String>::new());
        let (amd, arm) = (
            pin.platforms[&"linux/amd64".parse().unwrap()].clone(),
            pin.platforms[&"linux/arm64".parse().unwrap()].clone(),
        );

        // The children swapped in the file: both exist, neither is where
        // the index has it.
        let mut swapped = pin.clone();
        swapped
            .platforms
            .insert("linux/amd64".parse().unwrap(), arm.clone());
        swapped
            .platforms
            .insert("linux/arm64".parse().unwrap(), amd.clone());
        let found = check(&file(&swapped), &specs, &reg);
        assert_eq!(
            found,
            [
                format!(
                    "problem: python: platforms: linux/amd64 is pinned as {arm}, but {} names {amd} for it",
                    pin.digest
                ),
                format!(
                    "problem: python: platforms: linux/arm64 is pinned as {amd}, but {} names {arm} for it",
                    pin.digest
                ),
            ]
        );

        // A platform left out, and one the index does not have (its digest
        // exists: another image's).
        let mut partial = pin.clone();
        partial.platforms.remove(&"linux/arm64".parse().unwrap());
        let other = block_on(reg.inspect(REPO, "python-2.0.0")).unwrap().images[0]
            .digest
            .clone();
        partial
            .platforms
            .insert("linux/riscv64".parse().unwrap(), other.clone());
        let found = check(&file(&partial), &specs, &reg);
        assert_eq!(
            found,
            [
                format!(
                    "problem: python: platforms: linux/riscv64 is pinned as {other}, but {} has no linux/riscv64 image",
                    pin.digest
                ),
                format!(
                    "problem: python: platforms: {} has a linux/arm64 image ({arm}) the pin does not list",
                    pin.digest
                ),
            ]
        );

        // Each platform's check record is held to the pinned tools.
        let (reg, pin) = two_platform(&[("ruff", "0.12.0"), ("pytest", "8.4.1")]);
        let found = check(&file(&pin), &specs, &reg);
        assert_eq!(
            found,
            ["problem: python: pinned tools differ from the image's check record (linux/arm64)"]
        );

        // A deleted arm64 image is named with its platform.
        let (reg, pin) = two_platform(&[("ruff", "0.13.0"), ("pytest", "8.4.1")]);
        reg.deleted.borrow_mut().push(arm.clone());
        let found = check(&file(&pin), &specs, &reg);
        assert_eq!(
            found,
            [format!(
                "problem: python: {REPO}@{arm} (linux/arm64) no longer exists in the registry"
            )]
        );
    }
}
