//! `sunaba-images lock [FRAGMENT…]`: (re)writes the committed lock files of
//! `docker/locks/<fragment>/` from the versions images.toml pins.

use super::context::{Context, OutputOptions};
use crate::engine::Engine;
use crate::exit;
use crate::locks::generate::{self, Request};
use crate::package_indexes::PackageIndexes;
use anyhow::Context as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  sunaba-images lock\n  sunaba-images lock python --check")]
pub(crate) struct Args {
    /// Fragments to lock; all that install from npm or PyPI when none are named.
    pub fragments: Vec<String>,
    /// The CA bundle the containers that build or lock trust, mounted
    /// read-only (a BuildKit secret in builds); never in a layer. Default:
    /// the profile's `ca_bundle`.
    #[arg(long = "container-ca-bundle", value_name = "PATH")]
    pub ca_bundle: Option<PathBuf>,
    /// Extra root CA (PEM) this tool's own HTTPS connections trust, on top of
    /// the system roots: `PEM` for every host, `HOST=PEM` for the registry
    /// HOST (host[:port]) only, as a `certs.d/HOST/ca.crt` would.
    #[arg(long = "ca-cert", value_name = "[HOST=]PEM")]
    pub ca_certs: Vec<crate::registry::CaCert>,
    /// Bound on each registry request, retries included (`30s`, `2m`).
    #[arg(long = "registry-timeout", value_name = "DURATION", default_value = "2m",
          value_parser = crate::duration::parse)]
    pub timeout: Duration,
    /// Write nothing; exit 2 when a lock file is not what locking writes.
    #[arg(long)]
    pub check: bool,
    /// Print `{"schema", "check", "stale", "fragments": [{"fragment", "changed", "notes"}]}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub output: OutputOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let manifest = ctx.manifest()?;
    let settings = ctx.settings()?;
    let fragments = generate::select(manifest, &args.fragments)?;
    let ca_bundle = args.ca_bundle.clone().or(settings.ca_bundle.clone());
    // lock talks to npm and PyPI, no registry: only the CAs for every host.
    let mut ca_files = super::context::global_ca_files(&args.ca_certs);
    ca_files.extend(ca_bundle.clone());
    let indexes = PackageIndexes::new(&ca_files, args.timeout.max(Duration::from_secs(1)))?;
    let family = ctx.family()?;
    let mut engine: Option<Box<dyn Engine>> = None;
    // One fragment after another: each may run a tool in the engine.
    let reports = ctx.block_on(async {
        let mut reports = Vec::new();
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
            let report = generate::lock(&Request {
                manifest,
                fragment,
                indexes: &indexes,
                engine: engine.as_deref(),
                image,
                ca_bundle: ca_bundle.clone(),
                check: args.check,
            })
            .await
            .with_context(|| format!("locking fragment `{}`", fragment.name))?;
            if !args.json {
                print_report(&fragment.name, &report, args.check)?;
            }
            reports.push((fragment.name.clone(), report));
        }
        Ok::<_, exit::Error>(reports)
    })??;
    finish(&reports, &args)
}

/// The JSON report and annotations; checking, exit 2 when a file is stale.
fn finish(reports: &[(String, generate::Report)], args: &Args) -> exit::Result {
    let stale = args.check && reports.iter().any(|(_, r)| !r.changed.is_empty());
    if args.json {
        let fragments: Vec<_> = reports
            .iter()
            .map(|(name, r)| serde_json::json!({"fragment": name, "changed": r.changed, "notes": r.notes}))
            .collect();
        super::write_json(
            &serde_json::json!({"check": args.check, "stale": stale, "fragments": fragments}),
        )?;
    }
    if args.output.github() {
        // Only a check finds anything: a written lock file is the work done.
        let found: Vec<_> = reports
            .iter()
            .filter(|_| args.check)
            .flat_map(|(name, r)| r.changed.iter().map(move |path| (name, path)))
            .map(|(name, path)| {
                crate::github::Annotation::error(
                    0,
                    format!(
                        "not what `sunaba-images lock {name}` writes: run it and commit the result"
                    ),
                )
                .at(path, None)
                .title(format!("lock {name}: stale lock file"))
            })
            .collect();
        super::report_findings(found, "Every lock file is up to date.", args.json)?;
    }
    if stale {
        return Err(exit::Reported::Findings.into());
    }
    Ok(())
}

/// What locking a fragment did (or, checking, would do), a line each.
fn print_report(fragment: &str, report: &generate::Report, check: bool) -> exit::Result {
    for note in &report.notes {
        outln!("{}: {note}", fragment)?;
    }
    if report.changed.is_empty() {
        outln!("{}: up to date", fragment)?;
    }
    let verb = if check { "stale" } else { "wrote" };
    for path in &report.changed {
        outln!("{}: {verb} {}", fragment, path.display())?;
    }
    Ok(())
}
