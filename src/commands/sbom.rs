//! `sunaba-images sbom ALIAS|--image REF`: an SPDX 2.3 (or CycloneDX 1.6)
//! SBOM of an image — a pinned alias, read from the registry, or a
//! reference, read from the engine when it has the image, else from the
//! registry. Every reading ends in `attest::sbom::of_files`, as the SBOM a
//! release attaches does, so an image known by digest gives the same bytes
//! however it was read (see `attest::image_source`).

use super::context::{Context, PinsOptions, RegistryOptions};
use crate::attest::image_source::{Read, Wanted};
use crate::exit;
use crate::name::Platform;
use crate::pins::PinsFile;
use anyhow::Context as _;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  sunaba-images sbom python --output python.spdx.json
  sunaba-images sbom python --platform linux/arm64 --format cyclonedx-json
  sunaba-images sbom --image sunaba/sandbox:python --output python.spdx.json")]
pub(crate) struct Args {
    /// A pinned alias: its pinned digest, read from the registry.
    #[arg(
        value_name = "ALIAS",
        required_unless_present = "image",
        conflicts_with = "image"
    )]
    pub alias: Option<String>,
    /// An image reference (or a local image ID): the engine's image when it
    /// has it, else the registry's.
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,
    /// The platform image of an index (default: the engine's platform).
    #[arg(long, value_name = "PLATFORM")]
    pub platform: Option<Platform>,
    /// The document format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value = "spdx-json")]
    pub format: crate::attest::sbom::Format,
    /// Write the document to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub pins: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    // The engine is optional: a host with only the pins file and a
    // registry still reads an alias (or a reference) from the registry.
    let engine = ctx.engine().ok();
    let wanted = Wanted {
        platform: args.platform.clone(),
        default_platform: engine.as_ref().and_then(|e| e.platform().ok()),
    };
    let (reference, local) = match (&args.alias, &args.image) {
        (Some(alias), _) => {
            let path = ctx.pins_path(&args.pins);
            let file = PinsFile::load(&path)?
                .with_context(|| format!("there is no pins file {}", path.display()))?
                .0;
            (file.pin(alias, &path)?.reference(), None)
        }
        (None, Some(image)) => (image.clone(), engine.as_deref()),
        (None, None) => unreachable!("clap requires ALIAS or --image"),
    };
    let client = ctx.registry(&args.registry)?;
    let read: Read = ctx.block_on(crate::attest::image_source::read(
        local, &client, &reference, &wanted,
    ))??;
    eprintln!("sbom: read {} from {}", read.subject.name, read.from);
    let locked =
        crate::attest::locked::of_image_labels(ctx.manifest().ok(), &read.labels, &read.arch);
    let (doc, packages) = crate::attest::sbom::of_files(
        &read.subject,
        &read.files,
        &locked,
        args.format,
        env!("CARGO_PKG_VERSION"),
    );
    match &args.output {
        Some(path) => {
            crate::fsutil::atomic_write(path, &doc)
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "sbom: {} ({packages} packages) written to {}",
                args.alias.as_deref().unwrap_or(&reference),
                path.display()
            );
        }
        None => outln!("{}", String::from_utf8_lossy(&doc))?,
    }
    Ok(())
}
