//! The command line: global options and one subcommand per verb (each verb's
//! own options live beside its code in `commands/`), and the dispatch to the
//! verb's command. The top of the library: nothing below imports it.

use crate::commands;
use crate::exit;
use clap::{CommandFactory as _, Parser, Subcommand};
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
    /// Plan a union variant (full) from its members' layers: the layers it takes, the state it merges, any conflict.
    Compose(crate::commands::compose::Args),
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

impl Cli {
    /// Runs the parsed command line's verb (`verb`: its path, `pins verify`).
    pub(crate) fn run(self, verb: String) -> exit::Result {
        let ctx = commands::begin(verb, self.manifest, self.profile);
        match self.command {
            Command::Render(args) => commands::render::run(&ctx, args),
            Command::Detect(args) => commands::detect::run(&ctx, args),
            Command::Engine(args) => commands::engine::run(&ctx, args),
            Command::Resolve(args) => commands::resolve::run(&ctx, args),
            Command::Assemble(args) => commands::assemble::run(&ctx, args),
            Command::Tags(args) => commands::tags::run(&ctx, args),
            Command::Build(args) => commands::build::run(&ctx, args),
            Command::Compose(args) => commands::compose::run(&ctx, args),
            Command::Check(args) => commands::check::run(&ctx, args),
            Command::Pin(args) => commands::pin::run(&ctx, args),
            Command::Pins(args) => commands::pins::run(&ctx, args),
            Command::Version(args) => commands::version::run(&ctx, args),
            Command::NextVersion(args) => commands::next_version::run(&ctx, args),
            Command::Plan(args) => commands::plan::run(&ctx, args),
            Command::Release(args) => commands::release::run(&ctx, args),
            Command::UpdateBase(args) => commands::update_base::run(&ctx, args),
            Command::Lock(args) => commands::lock::run(&ctx, args),
            Command::Outdated(args) => commands::outdated::run(&ctx, args),
            Command::Run(args) => commands::run::run(&ctx, args),
            Command::New(args) => commands::new::run(&ctx, args),
            Command::Key(args) => commands::key::run(&ctx, args),
            Command::Sbom(args) => commands::sbom::run(&ctx, args),
            Command::VerifyAttestations(args) => commands::verify_attestations::run(&ctx, args),
            Command::Completions(args) => commands::completions::run(&ctx, args, Cli::command()),
            Command::Man(args) => commands::man::run(&ctx, args, Cli::command()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap_complete::Shell;

    /// The real command line: every verb completed in each shell, and a
    /// man page for each.
    #[test]
    fn every_verb_is_completed_and_has_a_man_page() {
        let verbs: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        assert!(verbs.len() >= 20, "{verbs:?}");
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = crate::clap_gen::completions(shell, Cli::command());
            let text = String::from_utf8(text).unwrap();
            for verb in &verbs {
                let named = match shell {
                    Shell::Bash => format!("sunaba__images,{verb})"),
                    Shell::Zsh => format!("'{verb}:"),
                    _ => format!("-a \"{verb}\""),
                };
                assert!(text.contains(&named), "{shell}: no {named:?}");
            }
        }
        let pages = crate::clap_gen::man_pages(Cli::command()).unwrap();
        for verb in &verbs {
            let file = format!("sunaba-images-{verb}.1");
            assert!(pages.iter().any(|(n, _)| *n == file), "no {file}");
        }
    }
}
