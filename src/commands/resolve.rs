//! `sunaba-images resolve REF…`: tags to digests.

use super::context::{Context, RegistryOptions, runtime};
use crate::exit::{self, Status, WithStatus};
use crate::registry::{Platform, Reference, ResolveOptions, Resolved};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
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
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let references = args
        .references
        .iter()
        .map(|r| r.parse::<Reference>())
        .collect::<Result<Vec<_>, _>>()
        .status(Status::Usage)?;
    let platform = args
        .platform
        .as_deref()
        .map(str::parse::<Platform>)
        .transpose()
        .status(Status::Usage)?;
    let client = ctx.registry(&args.registry)?;
    let options = ResolveOptions {
        platform,
        list_platforms: args.json,
    };
    let results = runtime()?.block_on(client.resolve_many(&references, &options));
    if args.json {
        let out: Vec<serde_json::Value> = results
            .iter()
            .zip(&references)
            .map(|(r, reference)| match r {
                Ok(r) => resolved_json(r),
                Err(e) => {
                    serde_json::json!({"reference": reference.to_string(), "error": e.to_string()})
                }
            })
            .collect();
        super::write_json(&out)?;
    } else {
        for r in results.iter().flatten() {
            outln!("{}\t{}", r.digest, r.reference)?;
        }
    }
    let failures: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    for e in &failures {
        eprintln!("error: {e}");
    }
    if !failures.is_empty() {
        return Err(anyhow::anyhow!(
            "{} of {} reference(s) could not be resolved",
            failures.len(),
            references.len()
        )
        .into());
    }
    Ok(())
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
