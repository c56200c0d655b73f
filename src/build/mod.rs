//! Building the image family: the errors and options of a build run, and
//! the one door to it ([`run`]).
//!
//! The build graph runs parents before children, independent variants in
//! parallel (bounded), skips unchanged inputs without calling the engine's
//! build, and checks every built image before its children start. By job:
//! `family` (what to build and the tags that name it), `scheduler` (the
//! parallel graph run), `variant` (one variant's build, reuse and check),
//! `outcome` (what a run ends with), [`inputs`] (what a build reads and its
//! hash) and [`progress`] (what people see meanwhile).

pub mod definition;
mod family;
pub mod inputs;
pub mod needs;
mod outcome;
pub mod progress;
mod scheduler;
mod variant;

pub use family::{Family, VariantPlan};
pub use outcome::{Outcome, Stage, Summary, VariantResult};
pub use scheduler::run;

use crate::engine::EngineError;
use crate::process::Cmd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The BuildKit secret id the rendered Dockerfiles mount the CA bundle from.
pub const CA_SECRET_ID: &str = "ca_bundle";

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("unknown variant `{variant}` (images.toml defines: {known})")]
    UnknownVariant { variant: String, known: String },
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
    #[error(
        "the upstream image {reference} is not available locally and cannot be pulled: {source}"
    )]
    Upstream {
        reference: String,
        source: EngineError,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub jobs: usize,
    pub no_cache: bool,
    pub check: bool,
    pub ca_bundle: Option<PathBuf>,
    pub log_dir: PathBuf,
    pub check_timeout: Duration,
    /// `org.opencontainers.image.revision`.
    pub revision: String,
}

/// `org.opencontainers.image.revision`: HEAD, `-dirty` with local changes.
pub fn git_revision(root: &Path) -> String {
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

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
