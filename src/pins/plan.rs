//! `pin` as a plan: what each alias would move to and why, computed without
//! writing; `Plan::apply` then changes an in-memory file.

use super::source::{ImageSource, Inspected, SourceError};
use super::{Pin, PinsFile, locate_alias};
use crate::name::{AsWritten, Repository, Unknown};
use crate::semver_rules::{
    self, Bump, Candidate, Delta, Inventory, Refusal, SelectError, SelectOptions, ToolChange,
    candidates, parse_tag,
};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// An alias the manifest declares, with what its variant owes today.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasSpec {
    pub alias: String,
    pub variant: String,
    pub owed: Vec<String>,
    /// The smoke suites the variant runs: its record must have passed each.
    pub smoke: Vec<String>,
    /// The variant's platforms, first the one whose record stands for a
    /// multi-platform image ([`Inspected::primary`]).
    pub platforms: Vec<crate::name::Platform>,
}

impl AliasSpec {
    /// Each of `aliases` is one `specs` declares.
    pub fn check_declared(specs: &[AliasSpec], aliases: &[String]) -> Result<(), Unknown> {
        for alias in aliases {
            Unknown::check(
                "alias",
                alias,
                "images.toml",
                specs.iter().map(|s| s.alias.as_str()),
            )?;
        }
        Ok(())
    }

    /// Every alias the manifest declares, sorted by alias.
    pub fn all(manifest: &crate::manifest::Manifest) -> Vec<AliasSpec> {
        manifest
            .aliases()
            .into_iter()
            .map(|(alias, variant)| AliasSpec {
                owed: manifest.owed_tools(&variant),
                smoke: crate::smoke::suites(manifest, &variant),
                platforms: manifest.platforms_of(&variant).to_vec(),
                alias,
                variant,
            })
            .collect()
    }
}

pub struct Request<'a> {
    /// Repository to list and resolve tags in (`host/path`), as images.toml
    /// writes it (new pins keep its words).
    pub repository: &'a AsWritten<Repository>,
    /// Every alias the manifest declares.
    pub specs: &'a [AliasSpec],
    /// Aliases to move; empty means all.
    pub only: &'a [String],
    pub select: SelectOptions,
    pub allow_breaking: bool,
    /// The pins file's path and text, for pointing at entries.
    pub path: &'a Path,
    pub text: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Add,
    Update,
    Remove,
    Keep,
}

/// A tag the plan passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub tag: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub alias: String,
    pub variant: Option<String>,
    pub action: Action,
    pub old: Option<Pin>,
    pub new: Option<Pin>,
    /// The inventory delta's kind and its tools, old -> new.
    pub bump: Bump,
    pub tools: Vec<ToolChange>,
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "{path}:{line}:{column}: at `images.{alias}`: alias {alias:?} is not declared in \
         images.toml; removing or renaming an alias breaks servers that use it (pass \
         --allow-breaking to drop the pin)"
    )]
    Breaking {
        path: PathBuf,
        line: usize,
        column: usize,
        alias: String,
    },
    #[error(
        "{alias}: pinned to {tag}, but the alias now names variant {variant:?}; changing \
         what an alias runs is breaking (pass --allow-breaking)"
    )]
    VariantChanged {
        alias: String,
        tag: String,
        variant: String,
    },
    #[error("unknown alias {alias:?}: images.toml declares {known}")]
    UnknownAlias { alias: String, known: String },
    #[error("{alias}: {source}")]
    Select {
        alias: String,
        #[source]
        source: SelectError,
    },
    #[error("{alias}: no tag {variant}-X.Y.Z in {repository} (build and push one first)")]
    NoCandidate {
        alias: String,
        variant: String,
        repository: String,
    },
    #[error("{alias}: nothing can be pinned: {}", list(.skipped))]
    Refused {
        alias: String,
        skipped: Vec<Skipped>,
    },
    #[error("{alias}: {source}")]
    Source {
        alias: String,
        #[source]
        source: SourceError,
    },
}

fn list(skipped: &[Skipped]) -> String {
    skipped
        .iter()
        .map(|s| format!("{} refused: {}", s.tag, s.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every problem of a plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PlanErrors(pub Vec<PlanError>);

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            all => {
                write!(f, "{} problems:", all.len())?;
                for e in all {
                    write!(f, "\n  - {e}")?;
                }
                Ok(())
            }
        }
    }
}

impl Plan {
    pub fn is_noop(&self) -> bool {
        self.steps.iter().all(|s| s.action == Action::Keep)
    }

    /// Applies the plan to a copy of `file` and saves it at `path`, unless
    /// it changes nothing; stale temporary files of earlier writes are
    /// removed either way. Returns whether it wrote.
    pub fn write(&self, file: &PinsFile, path: &Path) -> Result<bool, super::PinsError> {
        crate::fsutil::remove_stale_temps(path);
        if self.is_noop() {
            return Ok(false);
        }
        let mut updated = file.clone();
        self.apply(&mut updated);
        updated.save(path)?;
        Ok(true)
    }

    pub fn apply(&self, file: &mut PinsFile) {
        for step in &self.steps {
            match (step.action, &step.new) {
                (Action::Add | Action::Update, Some(new)) => {
                    file.images.insert(step.alias.clone(), new.clone());
                }
                (Action::Remove, _) => {
                    file.images.remove(&step.alias);
                }
                _ => {}
            }
        }
    }
}

/// `pin --json`: the plan, whether it changes anything and was written.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    pub pins: &'a Path,
    pub changes: bool,
    pub written: bool,
    pub steps: &'a [Step],
}

impl<'a> Report<'a> {
    pub fn new(plan: &'a Plan, path: &'a Path, written: bool) -> Report<'a> {
        Report {
            pins: path,
            changes: !plan.is_noop(),
            written,
            steps: &plan.steps,
        }
    }
}

/// Computes the plan for `file` (rules 2-4). All problems are collected so a
/// run reports every broken alias at once. The repository's tags are read
/// once; then the aliases are planned at once, their steps and errors kept
/// in the order of `specs`.
pub async fn plan(
    req: &Request<'_>,
    file: &PinsFile,
    source: &impl ImageSource,
) -> Result<Plan, PlanErrors> {
    let mut errors = Vec::new();
    let mut steps = Vec::new();
    let declared: BTreeSet<&str> = req.specs.iter().map(|s| s.alias.as_str()).collect();

    for alias in req.only {
        if !declared.contains(alias.as_str()) {
            errors.push(PlanError::UnknownAlias {
                alias: alias.clone(),
                known: declared.iter().copied().collect::<Vec<_>>().join(", "),
            });
        }
    }

    // Rule 4: the alias set is a contract.
    for (alias, old) in &file.images {
        if declared.contains(alias.as_str()) {
            continue;
        }
        if req.allow_breaking {
            steps.push(Step {
                alias: alias.clone(),
                variant: None,
                action: Action::Remove,
                old: Some(old.clone()),
                new: None,
                bump: Bump::Major,
                tools: Vec::new(),
                skipped: Vec::new(),
            });
        } else {
            let (line, column) = locate_alias(req.text, alias).unwrap_or((1, 1));
            errors.push(PlanError::Breaking {
                path: req.path.to_path_buf(),
                line,
                column,
                alias: alias.clone(),
            });
        }
    }

    let selected: Vec<&AliasSpec> = (req.specs.iter())
        .filter(|spec| req.only.is_empty() || req.only.contains(&spec.alias))
        .collect();
    if let Some(first) = selected.first() {
        match source.tags(req.repository.as_str()).await {
            Ok(tags) => {
                let tags = &tags[..];
                let planned = selected
                    .iter()
                    .map(|spec| plan_alias(req, spec, file.images.get(&spec.alias), tags, source));
                for result in futures::future::join_all(planned).await {
                    match result {
                        Ok(step) => steps.push(step),
                        Err(e) => errors.push(e),
                    }
                }
            }
            Err(source) => errors.push(PlanError::Source {
                alias: first.alias.clone(),
                source,
            }),
        }
    }

    if errors.is_empty() {
        Ok(Plan { steps })
    } else {
        Err(PlanErrors(errors))
    }
}

async fn plan_alias(
    req: &Request<'_>,
    spec: &AliasSpec,
    old: Option<&Pin>,
    tags: &[String],
    source: &impl ImageSource,
) -> Result<Step, PlanError> {
    let alias = &spec.alias;
    let current = current_version(req, spec, old)?;
    let cands = candidates(&spec.variant, tags, current, &req.select).map_err(|source| {
        PlanError::Select {
            alias: alias.clone(),
            source,
        }
    })?;
    if cands.is_empty() {
        return match old {
            Some(_) => Ok(kept(spec, old, Vec::new())),
            None => Err(PlanError::NoCandidate {
                alias: alias.clone(),
                variant: spec.variant.clone(),
                repository: req.repository.to_string(),
            }),
        };
    }

    let mut skipped = Vec::new();
    for cand in cands {
        if let (Some(o), Some(cur)) = (old, current)
            && cand.version.cmp_precedence(cur) == Ordering::Equal
            && o.repository == *req.repository
        {
            return Ok(kept(spec, old, skipped));
        }
        match weigh(req, spec, old, current, cand, source).await? {
            Weighed::Eligible { new, delta } => return Ok(moved(spec, old, new, delta, skipped)),
            Weighed::Refused(skip) => skipped.push(skip),
        }
    }
    // Every candidate above the pin was refused: keeping the pin is the
    // safe outcome, unless the user named a version or there is no pin.
    if old.is_some() && req.select.to.is_none() {
        Ok(kept(spec, old, skipped))
    } else {
        Err(PlanError::Refused {
            alias: alias.clone(),
            skipped,
        })
    }
}

/// The version the alias is on now, to select from: the pin's, unless the
/// pin's tag is not of the alias's variant; then the alias was re-pointed,
/// which is breaking.
fn current_version<'a>(
    req: &Request,
    spec: &AliasSpec,
    old: Option<&'a Pin>,
) -> Result<Option<&'a semver::Version>, PlanError> {
    match old {
        Some(p) if parse_tag(&spec.variant, &p.tag).is_none() => {
            if !req.allow_breaking {
                return Err(PlanError::VariantChanged {
                    alias: spec.alias.clone(),
                    tag: p.tag.clone(),
                    variant: spec.variant.clone(),
                });
            }
            // Re-pointed on purpose: no line to stay on.
            Ok(None)
        }
        _ => Ok(old.map(|p| &p.version)),
    }
}

/// What one candidate tag comes to.
enum Weighed {
    /// It may be pinned: the pin it would be, and what changes.
    Eligible { new: Box<Pin>, delta: Delta },
    /// Its image fails the gate, or its version does not say its changes.
    Refused(Skipped),
}

/// Inspects the candidate's image and checks it: every platform passes the
/// gate, and (from a pin) its version bump covers its inventory's changes.
async fn weigh(
    req: &Request<'_>,
    spec: &AliasSpec,
    old: Option<&Pin>,
    current: Option<&semver::Version>,
    cand: Candidate,
    source: &impl ImageSource,
) -> Result<Weighed, PlanError> {
    let inspected = source
        .inspect(req.repository.as_str(), &cand.tag)
        .await
        .map_err(|source| PlanError::Source {
            alias: spec.alias.clone(),
            source,
        })?;
    let inventory = match gate_all(&inspected, spec) {
        Ok(inv) => inv,
        Err(refusal) => {
            return Ok(Weighed::Refused(Skipped {
                tag: cand.tag,
                reason: refusal.to_string(),
            }));
        }
    };
    let delta = match (old, current) {
        (Some(o), Some(cur)) => {
            match semver_rules::check_versioning((cur, &o.tools), (&cand.version, &inventory)) {
                Ok(delta) => delta,
                Err(mis) => {
                    return Ok(Weighed::Refused(Skipped {
                        tag: cand.tag,
                        reason: Refusal::MisVersioned(mis).to_string(),
                    }));
                }
            }
        }
        (Some(o), None) => semver_rules::inventory_delta(&o.tools, &inventory),
        (None, _) => semver_rules::inventory_delta(&Inventory::new(), &inventory),
    };
    let new = Box::new(Pin {
        repository: req.repository.clone(),
        tag: cand.tag,
        version: cand.version,
        digest: inspected.digest.clone(),
        platforms: inspected.platforms(),
        tools: inventory,
        // A re-pin of the same image keeps what was attached to it.
        referrers: old
            .filter(|o| o.digest == inspected.digest)
            .map(|o| o.referrers.clone())
            .unwrap_or_default(),
    });
    Ok(Weighed::Eligible { new, delta })
}

/// The alias stays where it is (on `old`, or unpinned).
fn kept(spec: &AliasSpec, old: Option<&Pin>, skipped: Vec<Skipped>) -> Step {
    Step {
        alias: spec.alias.clone(),
        variant: Some(spec.variant.clone()),
        action: Action::Keep,
        old: old.cloned(),
        new: None,
        bump: Bump::None,
        tools: Vec::new(),
        skipped,
    }
}

/// The alias is pinned to `new`: added, or updated from `old`.
fn moved(
    spec: &AliasSpec,
    old: Option<&Pin>,
    new: Box<Pin>,
    delta: Delta,
    skipped: Vec<Skipped>,
) -> Step {
    Step {
        alias: spec.alias.clone(),
        variant: Some(spec.variant.clone()),
        action: if old.is_some() {
            Action::Update
        } else {
            Action::Add
        },
        old: old.cloned(),
        new: Some(*new),
        bump: delta.bump,
        tools: delta.changes,
        skipped,
    }
}

/// Every platform of the image must pass; the primary one's inventory is
/// the pin's.
fn gate_all(inspected: &Inspected, spec: &AliasSpec) -> Result<Inventory, Refusal> {
    let mut primary = None;
    for image in &inspected.images {
        let inv = semver_rules::gate(&image.labels, &spec.variant, &spec.owed, &spec.smoke)
            .map_err(|r| {
                if inspected.images.len() > 1 {
                    Refusal::BadCheckRecord(format!("{}: {r}", image.platform))
                } else {
                    r
                }
            })?;
        if Some(image) == inspected.primary(&spec.platforms) {
            primary = Some(inv);
        }
    }
    primary.ok_or(Refusal::NoCheckRecord)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::source::PlatformImage;
    use super::super::source::fake::FakeRegistry;
    use super::*;
    use crate::pins::Digest;
    use futures::executor::block_on;
    use semver::Version;
    use std::collections::BTreeMap;

    pub(crate) const REPO: &str = "127.0.0.1:5000/sunaba/sandbox";

    pub(crate) fn digest_of(s: &str) -> Digest {
        Digest::sha256(s.as_bytes())
    }

    pub(crate) fn record(status: &str, variant: &str, tools: &[(&str, &str)]) -> String {
        let tools: BTreeMap<_, _> = tools.iter().copied().collect();
        serde_json::json!({"schema": 1, "status": status, "variant": variant, "tools": tools})
            .to_string()
    }

    /// An image whose digests derive from its tag and record.
    pub(crate) fn image(tag: &str, record: Option<String>) -> Inspected {
        let mut labels = BTreeMap::new();
        if let Some(r) = &record {
            labels.insert(crate::labels::CHECK.to_string(), r.clone());
        }
        Inspected {
            digest: digest_of(&format!("index {tag} {record:?}")),
            images: vec![PlatformImage {
                platform: "linux/amd64".parse().unwrap(),
                digest: digest_of(&format!("amd64 {tag} {record:?}")),
                labels,
            }],
        }
    }

    pub(crate) fn spec(alias: &str, variant: &str, owed: &[&str]) -> AliasSpec {
        AliasSpec {
            alias: alias.into(),
            variant: variant.into(),
            owed: owed.iter().map(|s| s.to_string()).collect(),
            smoke: Vec::new(),
            platforms: Vec::new(),
        }
    }

    const PY_TOOLS_1_0: &[(&str, &str)] = &[("ruff", "0.12.0"), ("pytest", "8.4.1")];
    const PY_TOOLS_1_1: &[(&str, &str)] = &[("ruff", "0.12.1"), ("pytest", "8.4.1")];
    const PY_TOOLS_2_0: &[(&str, &str)] = &[("ruff", "0.13.0"), ("pytest", "8.4.1")];

    /// The acceptance registry: 1.0.0, 1.1.0, 1.2.0-rc.1, 2.0.0.
    pub(crate) fn acceptance_registry() -> FakeRegistry {
        let reg = FakeRegistry::default();
        for (tag, tools) in [
            ("python-1.0.0", PY_TOOLS_1_0),
            ("python-1.1.0", PY_TOOLS_1_1),
            ("python-1.2.0-rc.1", PY_TOOLS_1_1),
            ("python-2.0.0", PY_TOOLS_2_0),
            ("python-latest", PY_TOOLS_2_0),
        ] {
            reg.push(REPO, tag, image(tag, Some(record("pass", "python", tools))));
        }
        reg
    }

    /// The pin a python tag of the fake registry would become.
    pub(crate) fn pin_of(reg: &FakeRegistry, tag: &str) -> Pin {
        let i = block_on(reg.inspect(REPO, tag)).unwrap();
        let labels = &i.images[0].labels;
        Pin {
            repository: REPO.parse().unwrap(),
            tag: tag.into(),
            version: parse_tag("python", tag).unwrap(),
            digest: i.digest.clone(),
            platforms: i.platforms(),
            tools: semver_rules::gate(labels, "python", &[], &[]).unwrap(),
            referrers: Default::default(),
        }
    }

    fn file_with(pins: &[(&str, Pin)]) -> PinsFile {
        PinsFile {
            images: pins
                .iter()
                .map(|(a, p)| (a.to_string(), p.clone()))
                .collect(),
            extra: Default::default(),
        }
    }

    fn run(
        reg: &FakeRegistry,
        file: &PinsFile,
        specs: &[AliasSpec],
        only: &[&str],
        select: SelectOptions,
        allow_breaking: bool,
    ) -> Result<Plan, PlanErrors> {
        let text = file.to_text();
        let only: Vec<String> = only.iter().map(|s| s.to_string()).collect();
        let repository = REPO.parse().unwrap();
        let req = Request {
            repository: &repository,
            specs,
            only: &only,
            select,
            allow_breaking,
            path: Path::new("image_pins.json"),
            text: &text,
        };
        block_on(plan(&req, file, reg))
    }

    fn opts(pre: bool, allow_major: bool, to: Option<&str>) -> SelectOptions {
        SelectOptions {
            pre,
            allow_major,
            allow_downgrade: false,
            to: to.map(|s| Version::parse(s).unwrap()),
        }
    }

    #[test]
    fn acceptance_selection_from_1_0_0() {
        let reg = acceptance_registry();
        let file = file_with(&[("python", pin_of(&reg, "python-1.0.0"))]);
        let specs = [spec("python", "python", &["ruff", "pytest"])];
        let cases = [
            (opts(false, false, None), "python-1.1.0", Bump::Minor),
            (opts(true, false, None), "python-1.2.0-rc.1", Bump::Minor),
            (opts(false, true, None), "python-2.0.0", Bump::Major),
        ];
        for (o, want, bump) in cases {
            let plan = run(&reg, &file, &specs, &["python"], o.clone(), false).unwrap();
            let step = &plan.steps[0];
            assert_eq!(step.action, Action::Update, "{o:?}");
            let new = step.new.as_ref().unwrap();
            assert_eq!(new.tag, want, "{o:?}");
            assert_eq!(
                new.digest,
                block_on(reg.inspect(REPO, want)).unwrap().digest
            );
            assert_eq!(step.bump, bump);
            assert_eq!(step.tools[0].tool, "ruff");
            let mut applied = file.clone();
            plan.apply(&mut applied);
            assert_eq!(applied.images["python"], *new);
        }
    }

    #[test]
    fn a_plan_is_written_only_when_it_changes_something() {
        let reg = acceptance_registry();
        let file = file_with(&[("python", pin_of(&reg, "python-1.0.0"))]);
        let specs = [spec("python", "python", &["ruff", "pytest"])];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(crate::pins::FILE_NAME);
        let noop = Plan { steps: Vec::new() };
        assert!(!noop.write(&file, &path).unwrap());
        assert!(!path.exists());
        let plan = run(
            &reg,
            &file,
            &specs,
            &["python"],
            opts(false, false, None),
            false,
        )
        .unwrap();
        assert!(plan.write(&file, &path).unwrap());
        let (saved, _) = PinsFile::load(&path).unwrap().unwrap();
        assert_eq!(saved.images["python"].tag, "python-1.1.0");
        let report = serde_json::to_value(Report::new(&plan, &path, true)).unwrap();
        assert_eq!(report["changes"], true);

        assert!(AliasSpec::check_declared(&specs, &["python".into()]).is_ok());
        assert!(AliasSpec::check_declared(&specs, &["rust".into()]).is_err());
    }

    #[test]
    fn nothing_to_do_at_the_highest_eligible_version() {
        let reg = acceptance_registry();
        let file = file_with(&[("python", pin_of(&reg, "python-1.1.0"))]);
        let specs = [spec("python", "python", &["ruff"])];
        let plan = run(&reg, &file, &specs, &[], opts(false, false, None), false).unwrap();
        assert!(plan.is_noop());
        let mut applied = file.clone();
        plan.apply(&mut applied);
        assert_eq!(applied, file);
    }

    #[test]
    fn refused_images_are_never_pinned_and_fall_through() {
        let reg = acceptance_registry();
        let file = file_with(&[("python", pin_of(&reg, "python-1.0.0"))]);
        let specs = [spec("python", "python", &["ruff", "pytest"])];
        // Newer images that must not be pinned, each for its own reason.
        let bad = [
            ("python-1.5.0", None, "never checked"),
            (
                "python-1.4.0",
                Some(record("fail", "python", PY_TOOLS_1_1)),
                "not \"pass\"",
            ),
            (
                "python-1.3.0",
                Some(record("pass", "python", &[("ruff", "0.12.1")])),
                "pytest",
            ),
            (
                "python-1.2.0",
                Some(record("pass", "python", PY_TOOLS_2_0)),
                "mis-versioned",
            ),
        ];
        for (tag, rec, _) in &bad {
            reg.push(REPO, tag, image(tag, rec.clone()));
        }
        let plan = run(&reg, &file, &specs, &[], opts(false, false, None), false).unwrap();
        let step = &plan.steps[0];
        assert_eq!(step.new.as_ref().unwrap().tag, "python-1.1.0");
        assert_eq!(step.skipped.len(), bad.len());
        for ((tag, _, why), s) in bad.iter().zip(&step.skipped) {
            assert_eq!(s.tag, *tag);
            assert!(s.reason.contains(why), "{tag}: {}", s.reason);
        }
        assert!(
            step.skipped[3].reason.contains("ruff"),
            "proving tool named"
        );

        // Named explicitly, a refused version is an error, not a fallback.
        let err = run(
            &reg,
            &file,
            &specs,
            &["python"],
            opts(false, false, Some("1.3.0")),
            false,
        )
        .unwrap_err();
        assert!(err.to_string().contains("python-1.3.0 refused"), "{err}");
        assert!(err.to_string().contains("pytest"), "{err}");

        // No pin yet and nothing passes: error.
        let empty = file_with(&[]);
        let only_bad = FakeRegistry::default();
        only_bad.push(REPO, "python-1.0.0", image("python-1.0.0", None));
        let err = run(
            &only_bad,
            &empty,
            &specs,
            &[],
            opts(false, false, None),
            false,
        )
        .unwrap_err();
        assert!(matches!(err.0[0], PlanError::Refused { .. }), "{err}");
    }

    #[test]
    fn alias_set_is_a_contract() {
        let reg = acceptance_registry();
        let pin = pin_of(&reg, "python-1.1.0");
        let file = file_with(&[("python", pin.clone()), ("py", pin.clone())]);
        let specs = [spec("python", "python", &[])];
        let err = run(&reg, &file, &specs, &[], opts(false, false, None), false).unwrap_err();
        let [PlanError::Breaking { line, alias, .. }] = &err.0[..] else {
            panic!("{err}")
        };
        assert_eq!(alias, "py");
        assert_eq!(*line, 4, "{err}");
        assert!(
            err.to_string().starts_with("image_pins.json:4:5: "),
            "{err}"
        );

        let plan = run(&reg, &file, &specs, &[], opts(false, false, None), true).unwrap();
        assert!(!plan.is_noop());
        let mut applied = file.clone();
        plan.apply(&mut applied);
        assert_eq!(applied.images.keys().collect::<Vec<_>>(), ["python"]);

        // Adding an alias is fine; naming an undeclared one is not.
        let specs = [spec("python", "python", &[]), spec("py3", "python", &[])];
        let file = file_with(&[("python", pin.clone())]);
        let plan = run(&reg, &file, &specs, &[], opts(false, false, None), false).unwrap();
        let added: Vec<_> = plan
            .steps
            .iter()
            .filter(|s| s.action == Action::Add)
            .collect();
        assert_eq!(added.len(), 1);
        assert_eq!(
            added[0].new.as_ref().unwrap().tag,
            "python-2.0.0",
            "new alias: highest"
        );
        let err = run(
            &reg,
            &file,
            &specs,
            &["nope"],
            opts(false, false, None),
            false,
        )
        .unwrap_err();
        assert!(matches!(err.0[0], PlanError::UnknownAlias { .. }), "{err}");

        // An alias re-pointed at another variant is breaking too.
        let specs = [spec("python", "full", &[])];
        reg.push(
            REPO,
            "full-1.0.0",
            image("full-1.0.0", Some(record("pass", "full", &[]))),
        );
        let err = run(&reg, &file, &specs, &[], opts(false, false, None), false).unwrap_err();
        assert!(
            matches!(err.0[0], PlanError::VariantChanged { .. }),
            "{err}"
        );
        let plan = run(&reg, &file, &specs, &[], opts(false, false, None), true).unwrap();
        assert_eq!(plan.steps[0].new.as_ref().unwrap().tag, "full-1.0.0");
    }

    #[test]
    fn explicit_versions_and_missing_tags() {
        let reg = acceptance_registry();
        let file = file_with(&[("python", pin_of(&reg, "python-1.1.0"))]);
        let specs = [spec("python", "python", &[])];
        let err = run(
            &reg,
            &file,
            &specs,
            &[],
            opts(false, false, Some("2.0.0")),
            false,
        )
        .unwrap_err();
        assert!(matches!(
            err.0[0],
            PlanError::Select {
                source: SelectError::NeedsAllowMajor { .. },
                ..
            }
        ));
        let mut down = opts(false, false, Some("1.0.0"));
        let err = run(&reg, &file, &specs, &[], down.clone(), false).unwrap_err();
        assert!(err.to_string().contains("--allow-downgrade"), "{err}");
        down.allow_downgrade = true;
        let plan = run(&reg, &file, &specs, &[], down, false).unwrap();
        assert_eq!(plan.steps[0].new.as_ref().unwrap().tag, "python-1.0.0");

        let go = [spec("go", "go", &[])];
        let err = run(
            &reg,
            &PinsFile::default(),
            &go,
            &[],
            opts(false, false, None),
            false,
        )
        .unwrap_err();
        assert!(err.to_string().contains("no tag go-X.Y.Z"), "{err}");
    }
}
