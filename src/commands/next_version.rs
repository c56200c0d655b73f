//! `sunaba-images next-version VARIANT --image REF`: the next version of a variant
//! for a newly built image, tool by tool.

use super::context::{Context, PinsOptions, RegistryOptions};
use crate::exit;
use crate::pins::PinsFile;
use crate::pins::next::next_for_image;
use crate::pins::registry_source::RegistrySource;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images next-version python --image 127.0.0.1:5000/sunaba/sandbox:python\n  sunaba-images next-version python --image 127.0.0.1:5000/sunaba/sandbox:python --json"
)]
pub(crate) struct Args {
    /// The variant the image was built for.
    pub variant: String,
    /// The newly built image (`host/repo:tag` or `host/repo@sha256:…`).
    #[arg(long, value_name = "REF")]
    pub image: String,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub file: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    ctx.manifest()?.variant(&args.variant)?;
    let specs = ctx.alias_specs()?;
    let source = ctx.image_source(&args.registry)?;
    let (repository, reference) = RegistrySource::split_reference(&args.image)?;
    let pins = PinsFile::load(&ctx.pins_path(&args.file))?
        .unwrap_or_default()
        .0;
    let found = ctx.block_on(next_for_image(
        &source,
        &pins,
        &specs,
        &args.variant,
        &repository,
        &reference,
    ))??;
    let next = &found.next;

    if args.json {
        return super::write_json(&found.report(&args.variant, &args.image));
    }
    match (&next.current, &next.next) {
        (None, Some(n)) => outln!(
            "{}: {n} (first version: no alias of {} is pinned yet)",
            args.variant,
            args.variant
        )?,
        (Some(c), Some(n)) => outln!(
            "{}: {c} -> {n} ({} release; pinned as {})",
            args.variant,
            next.bump,
            found.pinned_as.as_deref().unwrap_or("-")
        )?,
        (Some(c), None) => outln!(
            "{}: no new version: inputs and tools unchanged since {c}",
            args.variant
        )?,
        (None, None) => unreachable!("a first image always gets a version"),
    }
    if next.current.is_some() && next.delta.changes.is_empty() && found.inputs_changed {
        outln!("    no tool changed; other inputs did (patch)")?;
    }
    for t in &next.delta.changes {
        outln!("    {t}")?;
    }
    if !found.record.passed() {
        eprintln!(
            "warning: the image's check status is {:?}: it cannot be pinned until it passes",
            found.record.status.as_str()
        );
    }
    Ok(())
}
