//! What the plan is computed from, read from the engine and the registry:
//! each variant's checked image (the engine's, built where missing, or a
//! registry's), its current release, and the repository's tags.

use super::legs::LegsError;
use super::plan::{Candidate, Current, PlanErrors, Source};
use crate::build::progress::Reporter;
use crate::build::{self, BuildError, Outcome};
use crate::engine::{Engine, EngineError};
use crate::family::Family;
use crate::labels;
use crate::pins::PinsFile;
use crate::pins::next::current_pin;
use crate::pins::plan::AliasSpec;
use crate::registry::{
    self, Client, Digest, ErrorKind, Index, Platform, Reference, Repository, media_type,
};
use std::collections::BTreeMap;

/// Why the candidates of a release, or its plan, could not be gathered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GatherError {
    #[error("the legs are in {legs}, not in --from {from}")]
    LegsElsewhere { legs: Repository, from: Repository },
    #[error("building what is missing")]
    Build(#[source] BuildError),
    /// A variant's build or check failed: each, as the build said it.
    #[error("{}; nothing was released", .0.join("; "))]
    NotBuilt(Vec<String>),
    #[error("{reference} vanished after the build")]
    Vanished { reference: String },
    /// No checked image at `REPO:<variant>` (`--from`).
    #[error(
        "{variant}: no checked image at {reference} (build, check and push it there, or release \
         from the engine without --from)"
    )]
    NoCheckedImage {
        variant: String,
        reference: String,
        #[source]
        source: Box<registry::Error>,
    },
    #[error("{variant}: no leg in the legs files (each leg builds every variant)")]
    NoLeg { variant: String },
    #[error("{variant}: no leg for {missing} (the legs give {given}); it is released for {wanted}")]
    MissingLegs {
        variant: String,
        missing: String,
        given: String,
        wanted: String,
    },
    #[error("{variant}: a leg for {extra}, which is not one of its platforms ({wanted})")]
    ExtraLeg {
        variant: String,
        extra: String,
        wanted: String,
    },
    #[error("{variant} {platform}: reading the leg's image {at}")]
    ReadLeg {
        variant: String,
        platform: String,
        at: String,
        #[source]
        source: Box<registry::Error>,
    },
    #[error("{variant}: the {platform} leg {at} is an image for {found}")]
    LegPlatform {
        variant: String,
        platform: String,
        at: String,
        found: String,
    },
    /// The gate of a leg: its image carries no passing check record.
    #[error("{variant} {platform}: {at} has no passing check record for its inputs")]
    LegUnchecked {
        variant: String,
        platform: String,
        at: String,
    },
    #[error("{variant}: its tool versions differ between platforms: {}; nothing was released", .differ.join("; "))]
    ToolsDiffer {
        variant: String,
        differ: Vec<String>,
    },
    #[error("{variant}: reading the pinned image {reference}")]
    ReadPinned {
        variant: String,
        reference: String,
        #[source]
        source: Box<registry::Error>,
    },
    /// The plan refused the candidates (every refusal at once).
    #[error(transparent)]
    Plan(#[from] PlanErrors),
    /// A repository or reference that is no name (the settings', a pin's).
    #[error(transparent)]
    Name(#[from] crate::name::Invalid),
    #[error(transparent)]
    Legs(Box<LegsError>),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Registry(#[from] registry::Error),
}

/// Candidates that cannot be gathered, or refused by the plan, are an
/// operational failure, but for the errors they carry that say their own.
// Boxed: a registry error inside makes a legs error 128 bytes, too large to
// return by value (clippy's `result_large_err`).
impl From<LegsError> for GatherError {
    fn from(e: LegsError) -> GatherError {
        GatherError::Legs(Box::new(e))
    }
}

impl crate::exit::HasStatus for GatherError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            GatherError::LegsElsewhere { .. }
            | GatherError::NotBuilt(_)
            | GatherError::Vanished { .. }
            | GatherError::NoCheckedImage { .. }
            | GatherError::NoLeg { .. }
            | GatherError::MissingLegs { .. }
            | GatherError::ExtraLeg { .. }
            | GatherError::ReadLeg { .. }
            | GatherError::LegPlatform { .. }
            | GatherError::LegUnchecked { .. }
            | GatherError::ToolsDiffer { .. }
            | GatherError::ReadPinned { .. } => Status::Failure,
            GatherError::Build(e) => e.exit_status(),
            GatherError::Plan(e) => e.exit_status(),
            GatherError::Name(e) => e.exit_status(),
            GatherError::Legs(e) => e.exit_status(),
            GatherError::Engine(e) => e.exit_status(),
            GatherError::Registry(e) => e.exit_status(),
        }
    }
}

/// Where a release takes each variant's checked image from.
pub(crate) enum Origin<'a> {
    /// The engine's images, built (and checked) where missing, on the
    /// engine's own platform.
    Engine {
        engine: &'a dyn Engine,
        options: Box<build::Options>,
        reporter: &'a dyn Reporter,
    },
    /// `REPO:<variant>` in a registry (pushed there by a build job).
    Registry(&'a Repository),
    /// Each variant's index assembled in `repo` from the legs files of
    /// `build --push-by-digest` (put there only when `write`). `host` is
    /// the platform a family without `platforms` is built for.
    Legs {
        repo: &'a Repository,
        files: &'a [std::path::PathBuf],
        host: Option<Platform>,
        write: bool,
    },
}

/// Each variant's candidate image, from `origin`.
pub(crate) async fn candidates(
    client: &Client,
    family: &Family,
    variants: &[Releasable],
    origin: Origin<'_>,
) -> Result<Vec<Candidate>, GatherError> {
    match origin {
        Origin::Engine {
            engine,
            options,
            reporter,
        } => {
            // Building (or finding built) and inspecting: engine work for
            // minutes, on borrowed parts, before which nothing can go on.
            tokio::task::block_in_place(|| {
                from_engine(family, engine, &options, reporter, variants)
            })
        }
        Origin::Registry(from) => from_registry(client, from, variants).await,
        Origin::Legs {
            repo,
            files,
            host,
            write,
        } => {
            let files = files
                .iter()
                .map(|p| Ok((p.display().to_string(), super::legs::LegsFile::load(p)?)))
                .collect::<Result<Vec<_>, LegsError>>()?;
            let (in_repo, legs) = super::legs::merge(&files)?;
            if in_repo != *repo {
                return Err(GatherError::LegsElsewhere {
                    legs: in_repo,
                    from: (*repo).clone(),
                });
            }
            // Each variant's own platforms (a variant may narrow the family's).
            let platforms = family
                .variants
                .iter()
                .map(|(v, plan)| {
                    let ps = match (&host, plan.platforms.is_empty()) {
                        (Some(host), true) => vec![host.clone()],
                        _ => plan.platforms.clone(),
                    };
                    (v.clone(), ps)
                })
                .collect();
            from_legs(client, repo, &legs, &platforms, variants, write).await
        }
    }
}

/// The release plan of `candidates`: each variant's current release (the
/// pins, else the repository's newest), the repository's tags, a new id.
pub(crate) async fn plan_release(
    client: &Client,
    repository: &str,
    family: &Family,
    pins: &PinsFile,
    specs: &[AliasSpec],
    candidates: Vec<Candidate>,
) -> Result<super::plan::Plan, GatherError> {
    let repo: Repository = repository.parse()?;
    let (currents, tags) = futures::join!(
        currents(client, pins, specs, &candidates),
        tags(client, &repo)
    );
    let (currents, tags) = (currents?, tags?);
    let id = super::new_id(std::time::SystemTime::now());
    Ok(super::plan::plan(super::plan::Input {
        id: &id,
        repository,
        candidates: candidates.into_iter().zip(currents).collect(),
        tags: &tags,
        variants: &family.order,
        pins,
    })?)
}

/// The variants `named` (all with an alias when none are), each a name
/// the family declares with an alias.
pub(crate) fn select_releasable(
    family_order: &[String],
    specs: &[AliasSpec],
    named: &[String],
) -> Result<Vec<Releasable>, crate::name::Unknown> {
    let mut variants = releasable(family_order, specs);
    let known = variants.iter().map(|r| r.variant.as_str());
    for name in named {
        crate::name::Unknown::check("releasable variant", name, "images.toml", known.clone())?;
    }
    if !named.is_empty() {
        variants.retain(|r| named.contains(&r.variant));
    }
    Ok(variants)
}

/// A variant a release publishes, with what its image must prove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Releasable {
    pub variant: String,
    pub aliases: Vec<String>,
    /// The tools it owes today.
    pub owed: Vec<String>,
    /// The smoke suites it runs today: its check record must have passed each.
    pub smoke: Vec<String>,
}

impl Releasable {
    /// The plan's candidate of this variant: its image's labels, platform(s)
    /// and where it comes from.
    fn candidate(
        &self,
        labels: BTreeMap<String, String>,
        platforms: Vec<Platform>,
        source: Source,
    ) -> Candidate {
        Candidate {
            variant: self.variant.clone(),
            aliases: self.aliases.clone(),
            owed: self.owed.clone(),
            smoke: self.smoke.clone(),
            labels,
            platforms,
            source,
        }
    }
}

/// The variants a release publishes: those with aliases, in build order
/// (a variant without one is never pinned, so it has no version line).
pub(crate) fn releasable(family_order: &[String], specs: &[AliasSpec]) -> Vec<Releasable> {
    family_order
        .iter()
        .filter_map(|v| {
            let mine: Vec<&AliasSpec> = specs.iter().filter(|s| &s.variant == v).collect();
            let first = mine.first()?;
            Some(Releasable {
                variant: v.clone(),
                aliases: mine.iter().map(|s| s.alias.clone()).collect(),
                owed: first.owed.clone(),
                smoke: first.smoke.clone(),
            })
        })
        .collect()
}

/// The engine's checked images: `build` first, which skips what is built
/// and checked already (no engine build then) and builds and checks the
/// rest; a failed build or check stops the release naming the variant.
pub(crate) fn from_engine(
    family: &Family,
    engine: &dyn Engine,
    options: &build::Options,
    reporter: &dyn Reporter,
    variants: &[Releasable],
) -> Result<Vec<Candidate>, GatherError> {
    let names: Vec<String> = variants.iter().map(|r| r.variant.clone()).collect();
    let summary =
        build::run(family, &names, engine, options, reporter).map_err(GatherError::Build)?;
    let failed: Vec<String> = summary
        .results
        .iter()
        .filter(|r| r.outcome.is_failure())
        .map(|r| match &r.outcome {
            Outcome::Failed { stage, reason, .. } => format!(
                "{}: {stage} failed: {}",
                r.variant,
                reason.lines().next().unwrap_or_default()
            ),
            Outcome::NotAttempted { reason } => format!("{}: not built: {reason}", r.variant),
            _ => unreachable!("only failures are kept"),
        })
        .collect();
    if !failed.is_empty() {
        return Err(GatherError::NotBuilt(failed));
    }
    let references: BTreeMap<&str, &str> = summary
        .results
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Built { reference, .. } | Outcome::Skipped { reference, .. } => {
                Some((r.variant.as_str(), reference.as_str()))
            }
            _ => None,
        })
        .collect();
    let asked: Vec<&str> = (variants.iter())
        .map(|r| references[r.variant.as_str()])
        .collect();
    let mut out = Vec::new();
    for ((r, reference), info) in variants
        .iter()
        .zip(&asked)
        .zip(engine.inspect_each(&asked)?)
    {
        let info = info.ok_or_else(|| GatherError::Vanished {
            reference: reference.to_string(),
        })?;
        out.push(r.candidate(
            info.labels,
            vec![summary.platform.clone()],
            Source::Engine {
                reference: reference.to_string(),
                image_id: info.id,
            },
        ));
    }
    Ok(out)
}

/// Checked images already in a registry: `<from>:<variant>`, each pinned
/// by digest for the rest of the release. A tag naming an index is
/// released as an index (every platform image staged, see `stage`); its
/// labels, which the plan gates, are those of the image for this machine's
/// platform, and staging's verify gates every platform image before any
/// release tag moves.
pub(crate) async fn from_registry(
    client: &Client,
    from: &Repository,
    variants: &[Releasable],
) -> Result<Vec<Candidate>, GatherError> {
    // Every variant at once, in their order.
    let each = variants
        .iter()
        .map(|r| checked_in_registry(client, from, r));
    registry::in_order(each, registry::REQUESTS).await
}

/// `<from>:<variant>` as [`from_registry`] reads it.
async fn checked_in_registry(
    client: &Client,
    from: &Repository,
    r: &Releasable,
) -> Result<Candidate, GatherError> {
    let variant = &r.variant;
    let reference = Reference::with_tag(from, variant)?;
    let not_there = |source| GatherError::NoCheckedImage {
        variant: variant.clone(),
        reference: reference.to_string(),
        source: Box::new(source),
    };
    let top = client.fetch_manifest(&reference).await.map_err(not_there)?;
    let (manifest, platform) = if media_type::is_index(&top.media_type) {
        let index = Index::parse(&reference.to_string(), &top.bytes)?;
        let child = index
            .choose(&reference.to_string(), &Platform::host())
            .map_err(not_there)?
            .digest
            .clone();
        let platforms: Vec<Platform> = index
            .platforms()
            .iter()
            .map(|(p, _)| p.normalized())
            .collect();
        let child = client
            .fetch_manifest(&reference.by_digest(child))
            .await
            .map_err(not_there)?;
        (child, platforms)
    } else {
        (top.clone(), Vec::new())
    };
    let config = client
        .config_of(&reference, &manifest)
        .await
        .map_err(not_there)?;
    Ok(r.candidate(
        config.labels,
        if platform.is_empty() {
            vec![config.platform.normalized()]
        } else {
            platform
        },
        Source::Registry {
            reference: reference.by_digest(top.digest).to_string(),
        },
    ))
}

/// Checked images pushed by digest in legs (`build --push-by-digest`, one
/// leg per platform, see `crate::release::legs`): each variant's index assembled in
/// `from` from its legs' images, one per platform of `platforms` (every
/// one must have a leg; extra legs are refused), and put there by digest
/// when `write` (a dry run puts nothing; the plan names the index it
/// would). Every child must carry a passing check record, and the records
/// must agree on every tool's version. The labels the plan gates are the
/// image's for this machine's platform (else the first), as for an index
/// in a registry; staging's verify gates every child. `platforms` are each
/// variant's (a variant may narrow the family's).
pub(crate) async fn from_legs(
    client: &Client,
    from: &Repository,
    legs: &crate::release::legs::LegsByVariant,
    platforms: &BTreeMap<String, Vec<Platform>>,
    variants: &[Releasable],
    write: bool,
) -> Result<Vec<Candidate>, GatherError> {
    let mut out = Vec::new();
    for r in variants {
        let variant = &r.variant;
        let want: Vec<Platform> = platforms.get(variant).cloned().unwrap_or_default();
        let mine = legs.get(variant).ok_or_else(|| GatherError::NoLeg {
            variant: variant.clone(),
        })?;
        let list = |ps: &mut dyn Iterator<Item = &Platform>| {
            ps.map(ToString::to_string).collect::<Vec<_>>().join(", ")
        };
        let missing: Vec<&Platform> = want.iter().filter(|p| !mine.contains_key(*p)).collect();
        if !missing.is_empty() {
            return Err(GatherError::MissingLegs {
                variant: variant.clone(),
                missing: list(&mut missing.into_iter()),
                given: list(&mut mine.keys()),
                wanted: list(&mut want.iter()),
            });
        }
        if let Some(extra) = mine.keys().find(|p| !want.contains(p)) {
            return Err(GatherError::ExtraLeg {
                variant: variant.clone(),
                extra: extra.to_string(),
                wanted: list(&mut want.iter()),
            });
        }
        let mut labels_by_platform = BTreeMap::new();
        let mut tools = BTreeMap::new();
        for (platform, leg) in mine {
            let at = Reference::in_repo(from, leg.digest.clone());
            let manifest =
                (client.fetch_manifest(&at).await).map_err(|source| GatherError::ReadLeg {
                    variant: variant.clone(),
                    platform: platform.to_string(),
                    at: at.to_string(),
                    source: Box::new(source),
                })?;
            let config = client.config_of(&at, &manifest).await?;
            if config.platform.normalized() != *platform {
                return Err(GatherError::LegPlatform {
                    variant: variant.clone(),
                    platform: platform.to_string(),
                    at: at.to_string(),
                    found: config.platform.to_string(),
                });
            }
            let record =
                crate::labels::CheckRecord::passing_for(&config.labels).ok_or_else(|| {
                    GatherError::LegUnchecked {
                        variant: variant.clone(),
                        platform: platform.to_string(),
                        at: at.to_string(),
                    }
                })?;
            tools.insert(platform.clone(), record.tools);
            labels_by_platform.insert(platform.clone(), config.labels);
        }
        let differ = crate::release::legs::tool_mismatches(&tools);
        if !differ.is_empty() {
            return Err(GatherError::ToolsDiffer {
                variant: variant.clone(),
                differ,
            });
        }
        let digests: Vec<Digest> = mine.values().map(|l| l.digest.clone()).collect();
        let index = client.assemble_index(from, &digests).await?;
        let at = Reference::in_repo(from, index.digest.clone());
        if write && client.manifest_digest(&at).await?.as_ref() != Some(&index.digest) {
            client.put_index(&at, &index).await?;
        }
        let host = Platform::host().normalized();
        let labels = labels_by_platform
            .get(&host)
            .or_else(|| labels_by_platform.values().next())
            .cloned()
            .unwrap_or_default();
        out.push(r.candidate(
            labels,
            want,
            Source::Registry {
                reference: at.to_string(),
            },
        ));
    }
    Ok(out)
}

/// Each candidate's current release, with the pinned image's inputs (read
/// from the registry unless the candidate is that very image).
pub(crate) async fn currents(
    client: &Client,
    pins: &PinsFile,
    specs: &[AliasSpec],
    candidates: &[Candidate],
) -> Result<Vec<Option<Current>>, GatherError> {
    // Every candidate's at once, in their order.
    let each = candidates.iter().map(|c| current(client, pins, specs, c));
    registry::in_order(each, registry::REQUESTS).await
}

/// One candidate's current release, as [`currents`] reads it.
async fn current(
    client: &Client,
    pins: &PinsFile,
    specs: &[AliasSpec],
    c: &Candidate,
) -> Result<Option<Current>, GatherError> {
    let Some((_, pin)) = current_pin(pins, specs, &c.variant) else {
        return Ok(None);
    };
    let same_image = matches!(&c.source, Source::Registry { reference }
        if reference.ends_with(&format!("@{}", pin.digest)));
    let inputs = if same_image {
        c.labels.get(labels::INPUTS).cloned()
    } else {
        let pinned: Reference = pin.reference().parse()?;
        let config = (client.image_config(&pinned, None).await).map_err(|source| {
            GatherError::ReadPinned {
                variant: c.variant.clone(),
                reference: pin.reference(),
                source: Box::new(source),
            }
        })?;
        config.labels.get(labels::INPUTS).cloned()
    };
    Ok(Some(Current {
        pin: pin.clone(),
        inputs,
    }))
}

/// Every tag of the release repository (none when it does not exist yet).
pub(crate) async fn tags(client: &Client, repo: &Repository) -> Result<Vec<String>, GatherError> {
    match client.list_tags(repo).await {
        Ok(tags) => Ok(tags),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound { .. }) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}
