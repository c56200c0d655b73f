//! `sunaba-images resolve REF…`: tags to digests.

use super::context::{Context, PLATFORM_HELP, PLATFORM_VALUE, Platforms, RegistryOptions};
use crate::exit;
use crate::registry::{Client, Digest, Platform, Reference, ResolveOptions, Resolved};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images resolve 127.0.0.1:5000/sunaba/sandbox:python-1.4.0\n  sunaba-images resolve 127.0.0.1:5000/sunaba/sandbox:python --platform linux/arm64 --json"
)]
pub(crate) struct Args {
    /// Image references, e.g. 127.0.0.1:5000/library/debian:trixie-slim.
    #[arg(value_name = "REF", required = true)]
    pub references: Vec<String>,
    // The image of each platform instead of the top-level (index) digest:
    // one line per reference and platform, `DIGEST<TAB>REF<TAB>PLATFORM`
    // (with one platform named, `DIGEST<TAB>REF` as before).
    #[arg(long, value_name = PLATFORM_VALUE, help = PLATFORM_HELP, value_parser = Platforms::parse)]
    pub platform: Option<Platforms>,
    /// Print JSON with the index digest and per-platform digests (with
    /// --platform: `selected`, each platform asked for and its digest).
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
        .collect::<Result<Vec<_>, _>>()?;
    let client = ctx.registry(&args.registry)?;
    // One platform named: that platform's image is the reference's digest.
    let single = match &args.platform {
        Some(Platforms::Only(list)) if list.len() == 1 => Some(list[0].clone()),
        _ => None,
    };
    let options = ResolveOptions {
        platform: single.clone(),
        list_platforms: args.json || args.platform == Some(Platforms::All),
    };
    let (results, selected) = ctx.block_on(async {
        let results = client.resolve_many(&references, &options).await;
        let selected = match (&args.platform, &single) {
            (None, _) => Vec::new(),
            (Some(_), Some(p)) => results.iter().map(|r| as_selected(r, p)).collect(),
            (Some(platforms), None) => select(&client, &references, &results, platforms).await,
        };
        (results, selected)
    })?;
    if args.json {
        let out: Vec<serde_json::Value> = (results.iter().zip(&references).enumerate())
            .map(|(i, (r, reference))| match r {
                Ok(r) => resolved_json(r, selected.get(i)),
                Err(e) => {
                    serde_json::json!({"reference": reference.to_string(), "error": e.to_string()})
                }
            })
            .collect();
        super::write_json(&serde_json::json!({ "references": out }))?;
    } else {
        print_human(&results, &selected, single.is_some())?;
    }
    let (failures, failed) = failures(&results, &selected);
    for e in &failures {
        eprintln!("error: {e}");
    }
    if failed > 0 {
        return Err(anyhow::anyhow!(
            "{failed} of {} reference(s) could not be resolved",
            references.len()
        ));
    }
    Ok(())
}

/// Each reference's (platform, digest or why not) for `--platform`, in the
/// order asked (`all`: every platform its index lists).
type Selected = Vec<(Platform, Result<Digest, String>)>;

async fn select(
    client: &Client,
    references: &[Reference],
    results: &[Result<Resolved, crate::registry::Error>],
    platforms: &Platforms,
) -> Vec<Selected> {
    let list = match platforms {
        Platforms::All => {
            let listed = |r: &Result<Resolved, _>| match r {
                Ok(r) => (r.platforms.iter())
                    .map(|(p, d)| (p.normalized(), Ok(d.clone())))
                    .collect(),
                Err(_) => Vec::new(),
            };
            return results.iter().map(listed).collect();
        }
        Platforms::Only(list) => list,
    };
    let mut out: Vec<Selected> = vec![Vec::new(); references.len()];
    for platform in list {
        let options = ResolveOptions {
            platform: Some(platform.clone()),
            list_platforms: false,
        };
        let found = client.resolve_many(references, &options).await;
        for (i, r) in found.into_iter().enumerate() {
            let digest = r.map(|r| r.digest).map_err(|e| e.to_string());
            out[i].push((platform.clone(), digest));
        }
    }
    out
}

/// A reference resolved for the one platform named, as [`select`] says it.
fn as_selected(r: &Result<Resolved, crate::registry::Error>, platform: &Platform) -> Selected {
    r.iter()
        .map(|r| (platform.clone(), Ok(r.digest.clone())))
        .collect()
}

/// Why each reference (or one of its platforms) could not be resolved, and
/// how many references that is.
fn failures(
    results: &[Result<Resolved, crate::registry::Error>],
    selected: &[Selected],
) -> (Vec<String>, usize) {
    let mut out = Vec::new();
    let mut failed = 0;
    for (i, r) in results.iter().enumerate() {
        let before = out.len();
        match r {
            Err(e) => out.push(e.to_string()),
            Ok(_) => out.extend(
                selected
                    .get(i)
                    .into_iter()
                    .flatten()
                    .filter_map(|(_, d)| d.clone().err()),
            ),
        }
        failed += usize::from(out.len() > before);
    }
    (out, failed)
}

/// `DIGEST<TAB>REF`, and `<TAB>PLATFORM` after it when several were asked.
fn print_human(
    results: &[Result<Resolved, crate::registry::Error>],
    selected: &[Selected],
    single: bool,
) -> exit::Result {
    for (i, r) in results.iter().enumerate() {
        let Ok(r) = r else { continue };
        match selected.get(i) {
            Some(list) if !single => {
                for (platform, digest) in list {
                    if let Ok(d) = digest {
                        outln!("{d}\t{}\t{platform}", r.reference)?;
                    }
                }
            }
            _ => outln!("{}\t{}", r.digest, r.reference)?,
        }
    }
    Ok(())
}

fn resolved_json(r: &Resolved, selected: Option<&Selected>) -> serde_json::Value {
    let mut out = serde_json::json!({
        "reference": r.reference.to_string(),
        "digest": r.digest.to_string(),
        "media_type": r.media_type,
        "index_digest": r.index_digest.as_ref().map(|d| d.to_string()),
        "platforms": r.platforms.iter().map(|(p, d)| serde_json::json!({
            "platform": p.to_string(),
            "digest": d.to_string(),
        })).collect::<Vec<_>>(),
    });
    if let Some(list) = selected {
        out["selected"] = (list.iter())
            .map(|(p, d)| match d {
                Ok(d) => serde_json::json!({"platform": p.to_string(), "digest": d.to_string()}),
                Err(e) => serde_json::json!({"platform": p.to_string(), "error": e}),
            })
            .collect();
    }
    out
}
