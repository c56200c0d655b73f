//! `sunaba-images plan [--json]`: what needs building and why — inputs
//! changed since the pinned image, the base moved, a new variant, a parent
//! rebuilt — decided from images.toml, the render and the published images'
//! labels, without an engine; `--json` is a GitHub Actions matrix.

use super::context::{Context, OutputOptions, PinsOptions, RegistryOptions};
use crate::build::{self, definition};
use crate::exit;
use crate::pins::{PinsFile, next};
use anyhow::Context as _;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  sunaba-images plan\n  sunaba-images plan --json")]
pub(crate) struct Args {
    /// Print `{"has_work", "matrix": {"include": […]}, "legs": {"include":
    /// [one per platform]}, "variants"}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub output: OutputOptions,
    #[command(flatten)]
    pub file: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let family = ctx.family()?;
    let definitions = definition::all(&family).context("computing the definitions")?;
    let specs = ctx.alias_specs()?;
    let (pins, _) = PinsFile::load(&ctx.pins_path(&args.file))?.unwrap_or_default();
    let client = ctx.registry(&args.registry)?;
    let published = ctx.block_on(next::published(&pins, &specs, &family.order, &client))??;
    let plan = build::plan::plan(&family, &definitions, &published)?;

    let github = args.output.github();
    if github {
        crate::github::set_output("has_work", &plan.has_work.to_string())?;
        crate::github::set_output("matrix", &serde_json::to_string(&plan.matrix)?)?;
        crate::github::set_output("legs", &serde_json::to_string(&plan.legs)?)?;
        crate::github::summary(&build::plan::summary(&plan))?;
    }
    if args.json {
        return super::write_json(&plan);
    }
    out!("{}", build::plan::table(&plan))?;
    outln!(
        "{} of {} variant(s) to build",
        plan.matrix.include.len(),
        plan.variants.len()
    )?;
    Ok(())
}
