//! What a build run ends with: each variant's outcome (built, skipped,
//! failed at a stage, not attempted) and the summary of the run.

use crate::check::CheckReport;
use serde::Serialize;
use std::path::PathBuf;

/// Where in one variant's pipeline a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Stage {
    /// Collecting, hashing or staging the inputs; the log; the engine's view.
    Prepare,
    /// Assembling a union variant from its members' layers (src/compose).
    Compose,
    /// The engine's build.
    Build,
    /// Rewriting the built image deterministically (src/normalize).
    Normalize,
    /// Moving a tag onto an existing image.
    Tag,
    /// The image was built but failed (or could not run) its check.
    Check,
    /// A bug: the worker panicked.
    Internal,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stage::Prepare => "prepare",
            Stage::Compose => "compose",
            Stage::Build => "build",
            Stage::Normalize => "normalize",
            Stage::Tag => "tag",
            Stage::Check => "check",
            Stage::Internal => "internal",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub(crate) enum Outcome {
    Built {
        image_id: String,
        reference: String,
        inputs: String,
        build_seconds: f64,
        /// The normalisation's share after the engine's build (absent when
        /// normalisation is off).
        #[serde(skip_serializing_if = "Option::is_none")]
        normalize_seconds: Option<f64>,
        check: Option<CheckReport>,
    },
    Skipped {
        image_id: String,
        reference: String,
        inputs: String,
        note: String,
        check: Option<CheckReport>,
    },
    Failed {
        stage: Stage,
        reason: String,
        log: Option<PathBuf>,
        check: Option<CheckReport>,
    },
    NotAttempted {
        reason: String,
    },
}

impl Outcome {
    /// The (reference, image ID) a built or skipped variant ended with.
    pub(crate) fn image(&self) -> Option<(&str, &str)> {
        match self {
            Outcome::Built {
                image_id,
                reference,
                ..
            }
            | Outcome::Skipped {
                image_id,
                reference,
                ..
            } => Some((reference, image_id)),
            _ => None,
        }
    }
    pub(crate) fn is_failure(&self) -> bool {
        matches!(self, Outcome::Failed { .. } | Outcome::NotAttempted { .. })
    }
    pub(crate) fn check(&self) -> Option<&CheckReport> {
        match self {
            Outcome::Built { check, .. }
            | Outcome::Skipped { check, .. }
            | Outcome::Failed { check, .. } => check.as_ref(),
            Outcome::NotAttempted { .. } => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct VariantResult {
    pub variant: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub engine: String,
    pub platform: crate::name::Platform,
    pub results: Vec<VariantResult>,
    pub wall_seconds: f64,
    /// Image builds the engine was asked to run (0 for a no-op build).
    pub engine_builds: usize,
}

impl Summary {
    /// A variant failed before or outside its check (an operational failure,
    /// not a gate finding).
    pub(crate) fn build_failed(&self) -> bool {
        self.results
            .iter()
            .any(|r| matches!(&r.outcome, Outcome::Failed { stage, .. } if *stage != Stage::Check))
    }

    /// Some variant did not end built or skipped.
    pub(crate) fn any_failed(&self) -> bool {
        self.results.iter().any(|r| r.outcome.is_failure())
    }
}
