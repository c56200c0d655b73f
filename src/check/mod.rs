//! `check`: run an image's own HEALTHCHECK and the smoke suite in one
//! sandbox started through the run contract, verify that the healthcheck
//! asserts exactly the tools images.toml says the variant owes and every
//! smoke case does what it must, enforce the size budget, and record a pass
//! on the image as a label. This module holds the errors and what a variant
//! owes ([`Expectation`]); by job: `container` (the one check sandbox),
//! `healthcheck` (judging its output), `pipeline` (the whole command), `record` (the label on the image),
//! `report` (results, the table and JUnit).
//!
//! A custom image (`check VARIANT --image REF` of an image that is not this
//! family's VARIANT, e.g. a user's own) is checked by the same contract
//! without being held to how the family builds: the project's rendered
//! healthcheck of VARIANT is mounted into the sandbox and run instead of
//! the image's HEALTHCHECK (which it need not have), the smoke suites run
//! under the same posture, and the size budget and the image's own
//! HEALTHCHECK are notes, not failures. What the posture needs that the
//! image lacks (a non-root default user 1000:1000 owning the HOME tmpfs) is
//! said as a problem; it passes when it would serve as VARIANT ([`Healthcheck`]).
//!
//! Healthcheck output and the check record are fixed in docs/contracts.md.

mod container;
pub(crate) mod github;
mod healthcheck;
pub(crate) mod pipeline;
mod record;
pub(crate) mod report;

pub(crate) use container::check_image;
pub(crate) use record::{passing_record, record_pass, smoke_is_current};
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
         Dockerfile (rebuild it with `sunaba-images build`, or check an image of your own with \
         `sunaba-images check VARIANT --image REF`)"
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

/// A check that cannot be made is an operational failure, whatever the
/// reason: even the run contract refusing the check's own sandbox is about
/// the image or the project, not about what was asked.
impl crate::exit::HasStatus for CheckError {
    fn exit_status(&self) -> crate::exit::Status {
        match self {
            CheckError::NoImage { .. }
            | CheckError::NoHealthcheck { .. }
            | CheckError::BadHealthcheck { .. }
            | CheckError::Run { .. }
            | CheckError::Smoke(_)
            | CheckError::Contract(_)
            | CheckError::Record { .. }
            | CheckError::Engine(_) => crate::exit::Status::Failure,
        }
    }
}

/// Which healthcheck a check runs, and what it holds the image to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Healthcheck<'a> {
    /// The image's own HEALTHCHECK: an image of this family's variant,
    /// built from a render, held to the size budget.
    Image,
    /// The project's rendered healthcheck script of the variant (its text),
    /// mounted into the sandbox: a custom image (`check VARIANT --image
    /// REF`), which need not have a HEALTHCHECK of its own. Its size budget
    /// and its own HEALTHCHECK are reported as information.
    Rendered(&'a str),
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

impl Expectation {
    /// What `variant` of `family` owes, if the family has it.
    pub(crate) fn of(family: &crate::family::Family, variant: &str) -> Option<Expectation> {
        family.variants.get(variant).map(|p| Expectation {
            variant: variant.to_string(),
            owed_tools: p.owed_tools.clone(),
            size_budget: p.size_budget,
            smoke: p.smoke.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{HasStatus, Status};

    #[test]
    fn a_check_that_cannot_be_made_is_a_failure_even_when_the_contract_refuses_it() {
        let refused = crate::run_contract::ContractError::RelativeWorkspace { path: "w".into() };
        let denied = crate::run_contract::ContractError::NoCpus;
        assert_eq!(denied.exit_status(), Status::Usage, "as `run` asks it");
        for e in [
            CheckError::NoImage {
                reference: "r".into(),
                variant: "v".into(),
            },
            CheckError::NoHealthcheck {
                reference: "r".into(),
            },
            CheckError::BadHealthcheck {
                reference: "r".into(),
                test: Vec::new(),
                why: "empty".into(),
            },
            CheckError::Contract(refused),
            CheckError::Contract(denied),
            CheckError::Engine(EngineError::NoneOnPath),
        ] {
            assert_eq!(e.exit_status(), Status::Failure, "{e}");
        }
    }
}
