//! `sunaba-images sbom --image REF`: an SPDX 2.3 SBOM of a local image.

use super::context::Context;
use crate::exit;
use anyhow::Context as _;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: sunaba-images sbom --image sunaba/sandbox:python --output python.spdx.json"
)]
pub(crate) struct Args {
    /// The local image (a reference or an image ID).
    #[arg(long, value_name = "REF")]
    pub image: String,
    /// The document format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value = "spdx-json")]
    pub format: crate::attest::sbom::Format,
    /// Write the document to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let engine = ctx.engine()?;
    let info = engine.inspect(&args.image)?.with_context(|| {
        format!(
            "{} is not a local image of {}",
            args.image,
            engine.describe()
        )
    })?;
    // The locks are read from the checkout when there is one (a server
    // host may have only the image).
    let arch = info.platform.as_ref().map(|p| p.architecture.to_string());
    let locked = crate::attest::locked::of_image_labels(
        ctx.manifest().ok(),
        &info.labels,
        arch.as_deref().unwrap_or("amd64"),
    );
    let (doc, packages) = crate::attest::sbom::of_local_image(
        engine.as_ref(),
        &args.image,
        &locked,
        args.format,
        env!("CARGO_PKG_VERSION"),
    )?;
    match &args.output {
        Some(path) => {
            crate::fsutil::atomic_write(path, &doc)
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "sbom: {} ({packages} packages) written to {}",
                args.image,
                path.display()
            );
        }
        None => outln!("{}", String::from_utf8_lossy(&doc))?,
    }
    Ok(())
}
