//! The command line: global options and one subcommand per verb (each verb's
//! own options live beside its code in `commands/`), and what a verb refuses
//! on a command line clap accepts ([`ArgsError`]).

use crate::exit;
use crate::name::{Reference, Repository};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "sunaba-images",
    version,
    about = "Build, verify and pin the Sunaba sandbox images",
    after_help = "Exit status: 0 ok, 1 operational failure, 2 a gate found problems, 64 usage error."
)]
pub(crate) struct Cli {
    /// Path to the image family manifest.
    #[arg(
        long,
        global = true,
        default_value = "images.toml",
        env = "SUNABA_MANIFEST"
    )]
    pub manifest: PathBuf,
    /// Environment profile from images.toml (e.g. `local`).
    #[arg(long, global = true, env = "SUNABA_PROFILE")]
    pub profile: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Render docker/Dockerfile.<variant> and healthchecks from templates/.
    Render(crate::commands::render::Args),
    /// Detect the languages of a path and resolve the tools verify would run.
    Detect(crate::commands::detect::Args),
    /// Print the container engine the other commands use (and how it builds).
    Engine(crate::commands::engine::Args),
    /// Resolve image references to digests (HEAD first, verified bytes).
    Resolve(crate::commands::resolve::Args),
    /// Assemble the index of platform images already in a repository and put it at a tag.
    Assemble(crate::commands::assemble::Args),
    /// List every tag of a repository (follows Link pagination).
    Tags(crate::commands::tags::Args),
    /// Build the image graph (parents first, in parallel, skipping unchanged inputs) and check it.
    Build(crate::commands::build::Args),
    /// Run each image's HEALTHCHECK and the smoke suite under the run contract; verify owed tools, smoke and size budget (--image: whether a custom image would serve as VARIANT).
    Check(crate::commands::check::Args),
    /// Move aliases in image_pins.json to the newest eligible images (a plan; --write applies it).
    Pin(crate::commands::pin::Args),
    /// Show or verify image_pins.json.
    Pins(crate::commands::pins::Args),
    /// Print this tool's version (as `--version`).
    Version(crate::commands::version::Args),
    /// Print the next version of a variant for a built image, tool by tool.
    NextVersion(crate::commands::next_version::Args),
    /// What needs building and why, without an engine (--json: a GitHub Actions matrix).
    Plan(crate::commands::plan::Args),
    /// Publish the family as one transaction: stage, verify, promote tags, pin last (a plan; --write carries it out).
    Release(crate::commands::release::Args),
    /// Move the upstream's digest pin when the tag's images for the family's platforms changed.
    UpdateBase(crate::commands::update_base::Args),
    /// Write the lock files of docker/locks/<fragment>/ for the versions images.toml pins.
    Lock(crate::commands::lock::Args),
    /// Compare every pinned version with the newest in its registry (exit 2 when behind).
    Outdated(crate::commands::outdated::Args),
    /// Start a sandbox of a pinned alias under the run contract (or print its command line).
    Run(crate::commands::run::Args),
    /// Scaffold a toolchain: `new fragment NAME` writes its script, images.toml entries and smoke stubs.
    New(crate::commands::new::Args),
    /// Signing keys for release attestations: `key generate` writes a P-256 key pair.
    Key(crate::commands::key::Args),
    /// An SPDX 2.3 SBOM of a local image, from dpkg's status read from its layers.
    Sbom(crate::commands::sbom::Args),
    /// Check an alias's (or image's) signed referrers with a public key (exit 2 when missing or wrong).
    VerifyAttestations(crate::commands::verify_attestations::Args),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(crate::commands::completions::Args),
    /// Write one man page per verb (into target/man unless --out-dir).
    Man(crate::commands::man::Args),
}

/// A command line clap accepts but the verb cannot carry out as asked (a
/// combination clap cannot express): a usage error, found before anything
/// is loaded, built or asked of a registry.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArgsError {
    /// `pin --to` with other than one alias.
    #[error("--to picks one version of one variant: name exactly one alias")]
    ToWithoutOneAlias,
    /// `check --image` with several variants.
    #[error("--image checks one image: name at most one variant")]
    ImageWithVariants,
    /// `assemble` to a digest: the index's digest is what assembling makes.
    #[error(
        "{0}: name a tag (or just the repository), not a digest: the index's digest is known \
         once it is assembled"
    )]
    DigestTarget(Reference),
    /// `assemble` of a child in another repository than the target's.
    #[error(
        "{child}: not in {repo}; push it there first (an index names images of its own \
         repository)"
    )]
    ChildElsewhere { child: String, repo: Repository },
    /// `run --workspace` of something that is not a directory.
    #[error("the workspace {} is not a directory", .0.display())]
    WorkspaceNotADirectory(PathBuf),
    /// Text given as a name that is no name.
    #[error(transparent)]
    Invalid(#[from] crate::name::Invalid),
}

impl exit::HasStatus for ArgsError {
    fn exit_status(&self) -> exit::Status {
        match self {
            ArgsError::ToWithoutOneAlias
            | ArgsError::ImageWithVariants
            | ArgsError::DigestTarget(_)
            | ArgsError::ChildElsewhere { .. }
            | ArgsError::WorkspaceNotADirectory(_) => exit::Status::Usage,
            ArgsError::Invalid(e) => e.exit_status(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exit::{HasStatus, Status};

    #[test]
    fn every_refusal_of_a_command_line_is_a_usage_error() {
        let repo: Repository = "r.io/a/b".parse().unwrap();
        let invalid = "-v".parse::<Reference>().unwrap_err();
        for e in [
            ArgsError::ToWithoutOneAlias,
            ArgsError::ImageWithVariants,
            ArgsError::DigestTarget(Reference::in_repo(&repo, crate::name::Digest::sha256(b""))),
            ArgsError::ChildElsewhere {
                child: "r.io/c/d:x".into(),
                repo,
            },
            ArgsError::WorkspaceNotADirectory("/etc/hosts".into()),
            ArgsError::Invalid(invalid),
        ] {
            assert_eq!(e.exit_status(), Status::Usage, "{e}");
        }
    }
}
