//! `check`: run an image's own HEALTHCHECK and the smoke suite in one
//! sandbox started through the run contract, verify that the healthcheck
//! asserts exactly the tools images.toml says the variant owes and every
//! smoke case does what it must, enforce the size budget, and record a pass
//! on the image as a label. This module holds the errors and what a variant
//! owes ([`Expectation`]); by job: `container` (the one check sandbox),
//! `healthcheck` (judging its output), `pipeline` (the whole command), `record` (the label on the image),
//! `report` (results, the table and JUnit).
//!
//! Healthcheck output and the check record are fixed in docs/contracts.md.

mod container;
pub(crate) mod github;
mod healthcheck;
pub(crate) mod pipeline;
mod record;
pub(crate) mod report;

pub(crate) use container::check_image;
pub(crate) use record::{already_recorded, passing_record, record, smoke_is_current};
pub(crate) use report::{CheckReport, ToolStatus, table, write_junit};

use crate::engine::EngineError;

pub(crate) use crate::labels::{CHECK as LABEL_CHECK, INPUTS as LABEL_INPUTS};

#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
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
    #[error("running the check of {reference}: {source}")]
    Run {
        reference: String,
        source: EngineError,
    },
    #[error(transparent)]
    Smoke(#[from] crate::smoke::workspace::WorkspaceError),
    #[error("the run contract refused the check sandbox: {0}")]
    Contract(#[from] crate::run_contract::ContractError),
    #[error("recording the check result on {reference}: {source}")]
    Record {
        reference: String,
        source: Box<crate::normalize::NormalizeError>,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What a variant owes, from images.toml.
#[derive(Debug, Clone)]
pub(crate) struct Expectation {
    pub variant: String,
    /// In manifest order (parent's tools first).
    pub owed_tools: Vec<String>,
    pub size_budget: u64,
    /// The smoke cases it runs.
    pub smoke: crate::smoke::Plan,
}
