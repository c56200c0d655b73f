//! Building the image family: the errors and options of a build run, and
//! the one door to it ([`run`]).
//!
//! The build graph runs parents before children, independent variants in
//! parallel (bounded), skips unchanged inputs without calling the engine's
//! build, and checks every built image before its children start. By job:
//! `scheduler` (the
//! parallel graph run), `variant` (one variant's build, reuse and check),
//! `outcome` (what a run ends with), `plan` (what `plan` decides from the published images), [`inputs`] (what a build reads and its
//! hash) and [`progress`] (what people see meanwhile).

mod current;
pub(crate) mod definition;
pub(crate) mod github;
pub(crate) mod inputs;
pub(crate) mod needs;
mod outcome;
pub(crate) mod pipeline;
pub(crate) mod plan;
pub(crate) mod progress;
mod scheduler;
mod variant;

pub(crate) use outcome::{Outcome, Stage, Summary, VariantResult};
pub(crate) use pipeline::BuildOptions;
pub(crate) use scheduler::{resolve_upstream, run};

use crate::engine::EngineError;
use crate::family::{Family, VariantPlan};
use crate::manifest::UpstreamError;
use crate::process::Cmd;
use crate::registry::Reference;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The BuildKit secret id the rendered Dockerfiles mount the CA bundle from.
pub(crate) const CA_SECRET_ID: &str = "ca_bundle";

#[derive(Debug, thiserror::Error)]
pub(crate) enum BuildError {
    #[error(transparent)]
    Unknown(#[from] crate::name::Unknown),
    #[error(
        "{path} (used by {variant}) differs from what images.toml and templates/ render; \
         run `sunaba-images render` and commit the result"
    )]
    Stale { path: PathBuf, variant: String },
    #[error("cannot read {path}, which the build of {variant} needs: {source}")]
    ReadInput {
        path: PathBuf,
        variant: String,
        source: std::io::Error,
    },
    #[error("the CA bundle {path} cannot be read: {source}")]
    CaBundle {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The bundle reaches a build as `--secret=id=…,src=PATH`, a list the
    /// engines split on commas (Podman on every one, quoted or not).
    #[error(
        "the CA bundle path {path:?} holds a comma, a quote or a line break, which an engine's          --secret value cannot carry; copy the bundle to a plainer path"
    )]
    CaBundlePath { path: PathBuf },
    #[error(
        "the upstream image {reference} is not available locally and cannot be pulled by its \
         digest: {source}"
    )]
    Upstream {
        reference: String,
        source: EngineError,
    },
    #[error(transparent)]
    UpstreamSetting(#[from] UpstreamError),
    #[error(
        "the engine builds for {engine}, which is not one of the family's platforms ({declared}); \
         add it to `platforms` in images.toml or use another engine"
    )]
    Platform { engine: String, declared: String },
    #[error(
        "--platform {platform} is not one of the family's platforms ({declared}); add it to \
         `platforms` in images.toml"
    )]
    UnknownPlatform { platform: String, declared: String },
    #[error(
        "the engine ({native}) cannot run {platform} images: {detail}; register an emulator \
         (`scripts/dev-env up` sets up qemu-user-static with binfmt_misc's F flag) or build \
         {platform} on a machine of that platform"
    )]
    Emulation {
        platform: String,
        native: String,
        detail: String,
    },
    #[error(
        "a build for {platform} needs the upstream's image for that platform by its digest \
         (resolved from the pinned index in the registry)"
    )]
    NoPlatformUpstream { platform: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("{SOURCE_DATE_EPOCH}={value:?} is not a number of seconds since 1970")]
    SourceDateEpoch { value: String },
}

/// A build that cannot be done is an operational failure; a name or
/// platform the family does not declare, asked for by the caller, is a
/// usage error.
impl crate::exit::HasStatus for BuildError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            BuildError::Unknown(e) => e.exit_status(),
            BuildError::UnknownPlatform { .. } => Status::Usage,
            BuildError::Stale { .. }
            | BuildError::ReadInput { .. }
            | BuildError::CaBundle { .. }
            | BuildError::CaBundlePath { .. }
            | BuildError::Upstream { .. }
            | BuildError::Platform { .. }
            | BuildError::Emulation { .. }
            | BuildError::NoPlatformUpstream { .. }
            | BuildError::Io { .. }
            | BuildError::SourceDateEpoch { .. } => Status::Failure,
            BuildError::UpstreamSetting(e) => e.exit_status(),
            BuildError::Engine(e) => e.exit_status(),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub jobs: usize,
    pub no_cache: bool,
    pub check: bool,
    pub ca_bundle: Option<PathBuf>,
    pub log_dir: PathBuf,
    pub check_timeout: Duration,
    /// `org.opencontainers.image.revision`.
    pub revision: String,
    /// Seconds since the epoch: `org.opencontainers.image.created`, the
    /// staged files' times and the `SOURCE_DATE_EPOCH` build argument (which
    /// fragments clamp file times to). Not part of the inputs hash.
    pub source_date_epoch: u64,
    /// The platform to build for (`linux/arm64`); `None`: the engine's own.
    /// Another platform is built and checked under emulation.
    pub platform: Option<crate::name::Platform>,
    /// For another platform than the engine's own: the pinned upstream's
    /// image for it, by its own digest (the index's child, which the
    /// command resolves in the registry). The build pulls it and builds
    /// FROM it: the engine keeps one image per reference, so the index's
    /// digest names the image of whichever platform it pulled first.
    pub upstream_for_platform: Option<Reference>,
    /// Rewrite every built image deterministically before it is checked
    /// and tagged (src/normalize): the image checked is the image pinned.
    /// Off only where an engine cannot save and load (the unit tests' fake).
    pub normalize: bool,
    /// Compose union variants from their members' layers (their members
    /// join the selection and are built first).
    pub compose: bool,
}

/// The build argument (and environment variable) of reproducible builds.
pub(crate) const SOURCE_DATE_EPOCH: &str = "SOURCE_DATE_EPOCH";

/// `SOURCE_DATE_EPOCH`: the environment's value when set (as
/// reproducible-builds.org defines it), else the commit time of HEAD, else 0
/// (not a git checkout: a fixed time is still better than the clock).
pub(crate) fn source_date_epoch(root: &Path) -> Result<u64, BuildError> {
    if let Some(value) = std::env::var(SOURCE_DATE_EPOCH)
        .ok()
        .filter(|v| !v.is_empty())
    {
        return (value.trim().parse()).map_err(|_| BuildError::SourceDateEpoch { value });
    }
    let out = Cmd::new("git")
        .arg("-C")
        .arg(root)
        .args(["log", "-1", "--format=%ct"])
        .run();
    Ok(out
        .ok()
        .and_then(|o| o.stdout.trim().parse().ok())
        .unwrap_or(0))
}

/// `org.opencontainers.image.revision`: HEAD, `-dirty` with local changes.
pub(crate) fn git_revision(root: &Path) -> String {
    let head = Cmd::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "HEAD"])
        .run();
    match head {
        Ok(out) => {
            let dirty = Cmd::new("git")
                .arg("-C")
                .arg(root)
                .args(["status", "--porcelain"])
                .run()
                .map(|o| !o.stdout.trim().is_empty())
                .unwrap_or(false);
            format!("{}{}", out.stdout.trim(), if dirty { "-dirty" } else { "" })
        }
        Err(_) => "unknown".to_string(),
    }
}
