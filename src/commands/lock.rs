//! `sunaba-images lock [FRAGMENT…]`: (re)writes the committed lock files of
//! `docker/locks/<fragment>/` from the versions images.toml pins.

use super::context::{Context, runtime};
use crate::engine::Engine;
use crate::exit::{self, Status, WithStatus};
use crate::feeds::Feeds;
use crate::locks::generate::{self, Request};
use anyhow::Context as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Fragments to lock; all that install from npm or PyPI when none are named.
    pub fragments: Vec<String>,
    /// CA bundle the lock containers trust (default: the profile's `ca_bundle`).
    #[arg(long, value_name = "PATH")]
    pub ca_bundle: Option<PathBuf>,
    /// Extra trusted root CA (PEM) for reaching the npm registry and PyPI.
    #[arg(long = "ca-cert", value_name = "PEM")]
    pub ca_certs: Vec<PathBuf>,
    /// Bound in seconds on each registry request.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let manifest = ctx.manifest()?;
    let settings = ctx.settings()?;
    let fragments = generate::select(manifest, &args.fragments).status(Status::Usage)?;
    let ca_bundle = args.ca_bundle.clone().or(settings.ca_bundle.clone());
    let mut ca_files = args.ca_certs.clone();
    ca_files.extend(ca_bundle.clone());
    let feeds = Feeds::new(&ca_files, Duration::from_secs(args.timeout.max(1)))?;
    let family = ctx.family()?;
    let mut engine: Option<Box<dyn Engine>> = None;
    let rt = runtime()?;
    for fragment in fragments {
        let image = if generate::needs_image(fragment) {
            let engine = match &engine {
                Some(e) => e,
                None => engine.insert(ctx.engine()?),
            };
            Some(generate::image_for(
                manifest,
                &family,
                engine.as_ref(),
                &fragment.name,
            )?)
        } else {
            None
        };
        eprintln!(
            "lock {}: {}",
            fragment.name,
            image
                .as_deref()
                .map_or("npm registry metadata".to_string(), |i| format!(
                    "resolving in {i}"
                ))
        );
        let report = rt
            .block_on(generate::lock(&Request {
                manifest,
                fragment,
                feeds: &feeds,
                engine: engine.as_deref(),
                image,
                ca_bundle: ca_bundle.clone(),
            }))
            .with_context(|| format!("locking fragment `{}`", fragment.name))?;
        print_report(&fragment.name, &report)?;
    }
    Ok(())
}

/// What locking a fragment did, a line each.
fn print_report(fragment: &str, report: &generate::Report) -> exit::Result {
    for note in &report.notes {
        outln!("{}: {note}", fragment)?;
    }
    if report.written.is_empty() {
        outln!("{}: up to date", fragment)?;
    }
    for path in &report.written {
        outln!("{}: wrote {}", fragment, path.display())?;
    }
    Ok(())
}
