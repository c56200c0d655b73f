//! The whole of `build` as a library function (the lock gate before it is
//! `locks::stale_for`, which the command calls): the platforms asked for,
//! each platform's graph run (another platform FROM the pinned index's
//! image for it, under emulation), the rule that a variant's tools answer
//! alike on every platform. Pushing the legs of a multi-platform release is
//! `release::legs::push`, after it. `release` builds through the same
//! [`BuildOptions`]. Commands parse, call [`run`], and print what it
//! returns.

use super::progress::Reporter;
use super::{BuildError, Family, Options, Summary};
use crate::engine::{Engine, EngineError};
use crate::labels::{CheckRecord, Inventory};
use crate::manifest::{Manifest, Settings, UpstreamError};
use crate::name::Platform;
use crate::registry::{self, Client, Reference, Repository};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a run of `build` (every platform asked) stopped before its outcome.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PipelineError {
    #[error("resolving the log directory")]
    LogDir(#[source] std::io::Error),
    #[error("building the image family")]
    Build(#[source] BuildError),
    /// The build options cannot be made (`SOURCE_DATE_EPOCH`).
    #[error(transparent)]
    Options(BuildError),
    #[error("{reference} vanished after the build")]
    Vanished { reference: String },
    #[error("finding the {platform} image of the upstream {pinned}")]
    UpstreamImage {
        platform: String,
        pinned: String,
        #[source]
        source: Box<registry::Error>,
    },
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A build run that stops is an operational failure, but for the errors
/// it carries that say their own.
impl crate::exit::HasStatus for PipelineError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            PipelineError::LogDir(_)
            | PipelineError::Vanished { .. }
            | PipelineError::UpstreamImage { .. } => Status::Failure,
            PipelineError::Build(e) | PipelineError::Options(e) => e.exit_status(),
            PipelineError::Upstream(e) => e.exit_status(),
            PipelineError::Engine(e) => e.exit_status(),
        }
    }
}

/// The options every command that builds takes (`build`, `release`): one
/// definition, one set of defaults.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Build options")]
pub(crate) struct BuildOptions {
    /// How many variants may build at the same time.
    #[arg(long, short = 'j', default_value_t = 4)]
    pub jobs: usize,
    /// The CA bundle the containers that build or lock trust, mounted
    /// read-only (a BuildKit secret in builds); never in a layer. Default:
    /// the profile's `ca_bundle`.
    #[arg(long = "container-ca-bundle", value_name = "PATH")]
    pub ca_bundle: Option<PathBuf>,
    /// Directory of the per-variant build logs
    /// (default: target/sunaba-build/logs next to images.toml).
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Time limit of each image's check: its healthcheck and smoke, in one
    /// container (`90s`, `10m`); each smoke case also stops after 2 minutes.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = crate::duration::parse)]
    pub check_timeout: Duration,
    /// Build each union variant (`full`) from its Dockerfile, running its
    /// fragments again, instead of assembling it from the layers its
    /// members' builds made plus a merged state layer (the default:
    /// docs/building.md, "Composing a union variant", which also says how
    /// the two are proved equal). `pins verify --rebuild` without it
    /// rebuilds a union variant the way its pin was made.
    #[arg(long)]
    pub from_dockerfile: bool,
}

impl BuildOptions {
    /// The options of one graph run on the engine's own platform; the
    /// times and revision are read from the checkout.
    pub(crate) fn options(
        &self,
        manifest: &Manifest,
        settings: &Settings,
    ) -> Result<Options, PipelineError> {
        Ok(Options {
            jobs: self.jobs,
            no_cache: false,
            check: true,
            ca_bundle: self.ca_bundle.clone().or(settings.ca_bundle.clone()),
            // Absolute, so a failure report names a path that works from
            // anywhere.
            log_dir: self.log_dir(&manifest.root)?,
            check_timeout: self.check_timeout,
            revision: super::git_revision(&manifest.root),
            source_date_epoch: super::source_date_epoch(&manifest.root)
                .map_err(PipelineError::Options)?,
            platform: None,
            upstream_for_platform: None,
            normalize: true,
            compose: !self.from_dockerfile,
        })
    }

    fn log_dir(&self, root: &Path) -> Result<PathBuf, PipelineError> {
        std::path::absolute(
            self.log_dir
                .clone()
                .unwrap_or_else(|| root.join("target/sunaba-build/logs")),
        )
        .map_err(PipelineError::LogDir)
    }
}

/// What `build` is asked for.
pub(crate) struct Request<'a> {
    pub variants: &'a [String],
    /// `None`: the engine's own platform.
    pub platforms: Vec<Option<Platform>>,
    pub build: &'a BuildOptions,
    pub no_cache: bool,
    pub check: bool,
    /// Every checked image is to be pushed here by digest afterwards (a
    /// release's legs), which needs a registry client.
    pub push_to: Option<&'a Repository>,
}

/// What a run ended with, for the command to print.
pub(crate) struct Outcome {
    /// The engine's own platform.
    pub native: Platform,
    /// One per platform, in the order asked.
    pub summaries: Vec<Summary>,
    /// Variants whose tools answered differently on two platforms, with
    /// what differed.
    pub mismatches: Vec<(String, Vec<String>)>,
}

impl Outcome {
    /// A build, a check or the tool rule failed somewhere.
    pub(crate) fn failed(&self) -> bool {
        self.summaries.iter().any(Summary::any_failed) || !self.mismatches.is_empty()
    }

    /// A build itself failed (not only a check).
    pub(crate) fn build_failed(&self) -> bool {
        self.summaries.iter().any(Summary::build_failed)
    }
}

/// What a run talks to besides the engine.
pub(crate) struct Services<'a> {
    /// For another platform's upstream image.
    pub registry: Option<&'a Client>,
    /// A new reporter for the variants of one platform's run.
    pub reporter: &'a dyn Fn() -> Box<dyn Reporter>,
    /// One line per thing done (a platform started).
    pub progress: &'a dyn Fn(String),
}

/// Whether the run needs a registry client: for the pushes of `push_to`,
/// or for the upstream's image of a platform the engine only emulates.
pub(crate) fn needs_registry(request: &Request, native: &Platform) -> bool {
    request.push_to.is_some() || request.platforms.iter().flatten().any(|p| p != native)
}

/// Builds (and checks) the family on every platform asked, then holds the
/// variants to the same tools everywhere.
pub(crate) async fn run(
    family: &Family,
    manifest: &Manifest,
    settings: &Settings,
    engine: &dyn Engine,
    native: &Platform,
    request: &Request<'_>,
    services: &Services<'_>,
) -> Result<Outcome, PipelineError> {
    let base = request.build.options(manifest, settings)?;
    let mut summaries = Vec::new();
    for platform in &request.platforms {
        let foreign = platform.as_ref().filter(|p| *p != native);
        // Another platform builds FROM the pinned index's image for it.
        let upstream_for_platform = match (foreign, services.registry) {
            (Some(p), Some(client)) => Some(upstream_for(client, family, p).await?),
            _ => None,
        };
        let options = Options {
            no_cache: request.no_cache,
            check: request.check,
            // Another platform's logs beside, not over, the native ones.
            log_dir: match foreign {
                Some(p) => base.log_dir.join(p.slug()),
                None => base.log_dir.clone(),
            },
            platform: platform.clone(),
            upstream_for_platform,
            ..base.clone()
        };
        if request.platforms.len() > 1 || foreign.is_some() {
            (services.progress)(format!(
                "platform: {}{}",
                platform.as_ref().unwrap_or(native),
                if foreign.is_some() { " (emulated)" } else { "" }
            ));
        }
        let reporter = (services.reporter)();
        // The builds and checks: engine work for minutes on borrowed
        // parts, and the next platform waits for this one.
        let summary = tokio::task::block_in_place(|| {
            super::run(
                family,
                request.variants,
                engine,
                &options,
                reporter.as_ref(),
            )
        })
        .map_err(PipelineError::Build)?;
        summaries.push(summary);
    }

    // The same variant must say the same tool versions on every platform.
    let mut mismatches = Vec::new();
    if summaries.len() > 1 {
        let records = tokio::task::block_in_place(|| records(engine, &summaries))?;
        for (variant, by_platform) in records {
            let tools = by_platform.into_iter().map(|(p, r)| (p, r.tools)).collect();
            let found = tool_mismatches(&tools);
            if !found.is_empty() {
                mismatches.push((variant, found));
            }
        }
    }
    Ok(Outcome {
        native: native.clone(),
        summaries,
        mismatches,
    })
}

/// Where a tool's version differs between platforms (or a platform lacks
/// it): one line per tool, `ruff 0.17.6 on linux/amd64, 0.17.5 on
/// linux/arm64`. Empty when every platform agrees.
pub(crate) fn tool_mismatches<P: std::fmt::Display>(
    by_platform: &BTreeMap<P, Inventory>,
) -> Vec<String> {
    let tools: std::collections::BTreeSet<&String> =
        by_platform.values().flat_map(|inv| inv.keys()).collect();
    let mut out = Vec::new();
    for tool in tools {
        let seen: Vec<(&P, Option<&String>)> = by_platform
            .iter()
            .map(|(p, inv)| (p, inv.get(tool)))
            .collect();
        let first = seen[0].1;
        if seen.iter().all(|(_, v)| *v == first) {
            continue;
        }
        let parts: Vec<String> = seen
            .iter()
            .map(|(p, v)| match v {
                Some(v) => format!("{v} on {p}"),
                None => format!("missing on {p}"),
            })
            .collect();
        out.push(format!("{tool} {}", parts.join(", ")));
    }
    out
}

/// Each variant's passing check record per platform, read from the images
/// the builds of `summaries` ended with (one summary per platform).
pub(crate) fn records(
    engine: &dyn Engine,
    summaries: &[Summary],
) -> Result<BTreeMap<String, BTreeMap<Platform, CheckRecord>>, PipelineError> {
    let mut out: BTreeMap<String, BTreeMap<Platform, CheckRecord>> = BTreeMap::new();
    for summary in summaries {
        for r in &summary.results {
            let Some((reference, _)) = r.outcome.image() else {
                continue;
            };
            let info = engine
                .inspect(reference)?
                .ok_or_else(|| PipelineError::Vanished {
                    reference: reference.to_string(),
                })?;
            if let Some(record) = crate::check::passing_record(&info) {
                out.entry(r.variant.clone())
                    .or_default()
                    .insert(summary.platform.clone(), record);
            }
        }
    }
    Ok(out)
}

/// The pinned upstream's image for `platform`, by its digest, read from
/// the registry (an upstream that is one image must be of that platform).
async fn upstream_for(
    client: &Client,
    family: &Family,
    want: &Platform,
) -> Result<Reference, PipelineError> {
    let pinned = family.upstream.pinned()?;
    // `resolve` picks the index's child, and refuses a single image of
    // another platform.
    let resolved = (client.resolve(&pinned, Some(want)).await).map_err(|source| {
        PipelineError::UpstreamImage {
            platform: want.to_string(),
            pinned: pinned.to_string(),
            source: Box::new(source),
        }
    })?;
    Ok(pinned.by_digest(resolved.digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(pairs: &[(&str, &str)]) -> Inventory {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn tool_versions_that_differ_between_platforms_are_named_with_both() {
        let same = BTreeMap::from([
            (
                "linux/amd64".to_string(),
                inv(&[("ruff", "0.17.6"), ("uv", "0.13.9")]),
            ),
            (
                "linux/arm64".to_string(),
                inv(&[("ruff", "0.17.6"), ("uv", "0.13.9")]),
            ),
        ]);
        assert!(tool_mismatches(&same).is_empty());
        let differ = BTreeMap::from([
            (
                "linux/amd64".to_string(),
                inv(&[("ruff", "0.17.6"), ("uv", "0.13.9"), ("go", "1.27.4")]),
            ),
            (
                "linux/arm64".to_string(),
                inv(&[("ruff", "0.17.5"), ("uv", "0.13.9")]),
            ),
        ]);
        assert_eq!(
            tool_mismatches(&differ),
            [
                "go 1.27.4 on linux/amd64, missing on linux/arm64",
                "ruff 0.17.6 on linux/amd64, 0.17.5 on linux/arm64",
            ]
        );
        let one = BTreeMap::from([("linux/amd64".to_string(), inv(&[("ruff", "1")]))]);
        assert!(tool_mismatches(&one).is_empty());
    }
}
