//! `sunaba-images lock [FRAGMENT…]`: (re)writes the committed lock files of
//! `docker/locks/<fragment>/` from the versions images.toml pins.

use super::context::{Context, runtime};
use crate::build::resolve_upstream;
use crate::engine::Engine;
use crate::exit;
use crate::feeds::Feeds;
use crate::locks::generate::{self, Base, Request};
use crate::name::Unknown;
use anyhow::{Context as _, anyhow};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
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

pub fn run(ctx: &Context, args: Args) -> exit::Result {
    let manifest = ctx.manifest()?;
    let settings = ctx.settings()?;
    let names: Vec<String> = if args.fragments.is_empty() {
        manifest
            .fragments
            .values()
            .filter(|f| f.lock_dir().is_some())
            .map(|f| f.name.clone())
            .collect()
    } else {
        args.fragments.clone()
    };
    let mut fragments = Vec::new();
    for name in &names {
        let f = manifest.fragments.get(name).ok_or_else(|| {
            Unknown::new("fragment", name, "images.toml", manifest.fragments.keys())
        })?;
        if f.lock_dir().is_none() {
            return Err(exit::Error::usage(format!(
                "fragment `{name}` installs nothing from npm or PyPI: there is nothing to lock"
            )));
        }
        fragments.push(f);
    }
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
            Some(match generate::base_of(manifest, &fragment.name) {
                Some(Base::Variant(v)) => match family.current_image(engine.as_ref(), &v)? {
                    // The image of exactly the current inputs: a plain
                    // variant tag may be another checkout's build.
                    Some((tag, _)) => tag,
                    None => {
                        return Err(anyhow!(
                            "locking `{}` runs its package manager in the `{v}` image, which is \
                             not built for the current inputs: run `sunaba-images build {v}` first",
                            fragment.name
                        )
                        .into());
                    }
                },
                Some(Base::Upstream) | None => {
                    let pinned = family.upstream.pinned()?;
                    resolve_upstream(engine.as_ref(), &pinned, None)?;
                    pinned.to_string()
                }
            })
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
        for note in &report.notes {
            outln!("{}: {note}", fragment.name)?;
        }
        if report.written.is_empty() {
            outln!("{}: up to date", fragment.name)?;
        }
        for path in &report.written {
            outln!("{}: wrote {}", fragment.name, path.display())?;
        }
    }
    Ok(())
}
