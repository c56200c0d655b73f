//! `sunaba-images resolve REF…`: tags to digests.

use super::Global;
use crate::registry::{Client, Platform, Reference, ResolveOptions, Resolved, RetryPolicy};
use anyhow::Context as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Registry connection options shared by `resolve` and `tags`.
#[derive(Debug, Clone, clap::Args)]
pub struct RegistryArgs {
    /// Extra trusted root CA certificate (PEM), on top of the system roots.
    #[arg(long = "ca-cert", value_name = "PEM")]
    pub ca_certs: Vec<PathBuf>,
    /// Registry (host[:port]) that may be spoken to over plain http; the
    /// profile's `insecure_registries` are added. Loopback registries always may.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure: Vec<String>,
    /// Requests in flight per registry.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Bound in seconds on each reference, retries included.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

impl RegistryArgs {
    /// A client configured from these options and the profile.
    pub fn client(&self, global: &Global) -> anyhow::Result<Client> {
        let total = Duration::from_secs(self.timeout.max(1));
        let mut builder = Client::builder()
            .insecure_registries(self.insecure.iter().cloned())
            .insecure_registries(profile_insecure_registries(global)?)
            .per_registry_limit(self.concurrency)
            .request_timeout(total.min(Duration::from_secs(60)))
            .retry(RetryPolicy {
                total,
                ..RetryPolicy::default()
            });
        for ca in &self.ca_certs {
            builder = builder.root_ca_file(ca);
        }
        Ok(builder.build()?)
    }
}

/// `insecure_registries` of the selected profile. `resolve` and `tags` do
/// not otherwise need the manifest, so without a manifest file (e.g. run
/// outside a project with `SUNABA_PROFILE` exported) there are none.
fn profile_insecure_registries(global: &Global) -> anyhow::Result<Vec<String>> {
    let Some(profile) = &global.profile else {
        return Ok(Vec::new());
    };
    if !global.manifest.exists() {
        return Ok(Vec::new());
    }
    let manifest = crate::manifest::Manifest::load(&global.manifest)?;
    Ok(manifest.resolve_profile(Some(profile))?.insecure_registries)
}

/// A runtime for the async registry client, from synchronous command code.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Image references, e.g. 127.0.0.1:5000/library/debian:trixie-slim.
    #[arg(value_name = "REF", required = true)]
    pub references: Vec<String>,
    /// Resolve to the image for this platform (OS/ARCH[/VARIANT]) instead of
    /// the top-level (index) digest.
    #[arg(long)]
    pub platform: Option<String>,
    /// Print JSON with the index digest and per-platform digests.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let references = args
        .references
        .iter()
        .map(|r| r.parse::<Reference>())
        .collect::<Result<Vec<_>, _>>()?;
    let platform = args
        .platform
        .as_deref()
        .map(str::parse::<Platform>)
        .transpose()?;
    let client = args.registry.client(global)?;
    let options = ResolveOptions {
        platform,
        list_platforms: args.json,
    };
    let results = runtime()?.block_on(client.resolve_many(&references, &options));
    let mut failed = 0;
    if args.json {
        let out: Vec<serde_json::Value> = results
            .iter()
            .zip(&references)
            .map(|(r, reference)| match r {
                Ok(r) => resolved_json(r),
                Err(e) => {
                    failed += 1;
                    serde_json::json!({"reference": reference.to_string(), "error": e.to_string()})
                }
            })
            .collect();
        use std::io::Write as _;
        writeln!(
            std::io::stdout().lock(),
            "{}",
            serde_json::to_string_pretty(&out)?
        )?;
    } else {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        for result in &results {
            match result {
                Ok(r) => writeln!(stdout, "{}\t{}", r.digest, r.reference)?,
                Err(_) => failed += 1,
            }
        }
    }
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        eprintln!("error: {e}");
    }
    if failed > 0 {
        eprintln!(
            "error: {failed} of {} reference(s) could not be resolved",
            references.len()
        );
        return Ok(ExitCode::from(crate::cli::EXIT_FAILURE));
    }
    Ok(ExitCode::SUCCESS)
}

fn resolved_json(r: &Resolved) -> serde_json::Value {
    serde_json::json!({
        "reference": r.reference.to_string(),
        "digest": r.digest.to_string(),
        "media_type": r.media_type,
        "index_digest": r.index_digest.as_ref().map(|d| d.to_string()),
        "platforms": r.platforms.iter().map(|(p, d)| serde_json::json!({
            "platform": p.to_string(),
            "digest": d.to_string(),
        })).collect::<Vec<_>>(),
    })
}
