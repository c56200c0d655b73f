//! `check`: run an image's own HEALTHCHECK in a locked-down container, verify
//! that it asserts exactly the tools images.toml says the variant owes, enforce
//! the size budget, and record the result on the image as a label. This
//! module holds the errors and what a variant owes ([`Expectation`]); by job:
//! `healthcheck` (run and judge), `record` (the label on the image), `report`
//! (results, the table and JUnit).
//!
//! Healthcheck output and the check record are fixed in docs/contracts.md.

pub mod github;
mod healthcheck;
mod record;
mod report;

pub use healthcheck::{check_image, evaluate, healthcheck_argv, parse_output};
pub use record::{already_recorded, check_record, passing_record, record, record_json};
pub use report::{CheckReport, ToolResult, ToolStatus, human_bytes, junit, table, write_junit};

use crate::engine::EngineError;

pub use crate::labels::{CHECK as LABEL_CHECK, INPUTS as LABEL_INPUTS, VARIANT as LABEL_VARIANT};

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(
        "image {reference} not found locally; build it first (`sunaba-images build {variant}`)"
    )]
    NoImage { reference: String, variant: String },
    #[error(
        "image {reference} has no HEALTHCHECK in its config; it was not built from a rendered \
         Dockerfile (rebuild it with `sunaba-images build`)"
    )]
    NoHealthcheck { reference: String },
    #[error("image {reference} has an unusable HEALTHCHECK {test:?}: {why}")]
    BadHealthcheck {
        reference: String,
        test: Vec<String>,
        why: String,
    },
    #[error("running the healthcheck of {reference}: {source}")]
    Run {
        reference: String,
        source: EngineError,
    },
    #[error("recording the check result on {reference}: {source}")]
    Record {
        reference: String,
        source: EngineError,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What a variant owes, from images.toml.
#[derive(Debug, Clone)]
pub struct Expectation {
    pub variant: String,
    /// In manifest order (parent's tools first).
    pub owed_tools: Vec<String>,
    pub size_budget: u64,
}
