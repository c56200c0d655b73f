use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Exit status for an operational failure (bad input, engine error, ...).
pub const EXIT_FAILURE: u8 = 1;
/// Exit status for a gate that ran and found problems (drift, failed check).
pub const EXIT_GATE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "sunaba-images",
    version,
    about = "Build, verify and pin the Sunaba sandbox images"
)]
pub struct Cli {
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
pub enum Command {
    /// Render docker/Dockerfile.<variant> and healthchecks from templates/.
    Render(crate::commands::render::Args),
    /// Detect the languages of a path and resolve the tools verify would run.
    Detect(crate::commands::detect::Args),
    /// Resolve image references to digests (HEAD first, verified bytes).
    Resolve(crate::commands::resolve::Args),
    /// List every tag of a repository (follows Link pagination).
    Tags(crate::commands::tags::Args),
    /// Build the image graph (parents first, in parallel, skipping unchanged inputs) and check it.
    Build(crate::commands::build::Args),
    /// Run each image's own HEALTHCHECK locked down; verify owed tools and size budget.
    Check(crate::commands::check::Args),
    /// Move aliases in image_pins.json to the newest eligible images (a plan; --write applies it).
    Pin(crate::commands::pin::Args),
    /// Show or verify image_pins.json.
    Pins(crate::commands::pins::Args),
    /// Print the next version of a variant for a built image, tool by tool.
    Version(crate::commands::version::Args),
}
