//! `sunaba-images outdated [--json]`: every version images.toml pins against
//! the newest release in its registry; exit 0 when all are current, 2 when
//! something is behind, 1 when a registry could not be asked.

use super::context::{Context, OutputOptions, RegistryOptions};
use crate::base_update;
use crate::build::resolve_upstream;
use crate::exit;
use crate::outdated::{self, Row, Status, debian};
use crate::package_indexes::PackageIndexes;
use crate::registry::{Platform, Reference};
use crate::render::LIB_DIR;
use crate::table::{Column, Table};
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  sunaba-images outdated\n  sunaba-images outdated --json")]
pub(crate) struct Args {
    /// Print the rows as JSON (for a scheduled job or a bot).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub output: OutputOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let manifest = ctx.manifest()?;
    let settings = ctx.settings()?;
    let mut ca_files = args.registry.global_ca_files();
    ca_files.extend(settings.ca_bundle.clone());
    let indexes =
        PackageIndexes::new(&ca_files, args.registry.timeout.max(Duration::from_secs(1)))?;
    // The upstream's row and the package indexes' rows, read at once.
    let (base, registry_rows) = ctx.block_on(async {
        futures::join!(
            base(ctx, &args),
            outdated::registry_rows(manifest, &indexes)
        )
    })?;
    let mut rows = vec![base?];
    rows.extend(registry_rows);
    rows.extend(debian_rows(ctx)?);
    rows.sort_by_key(|r| (r.fragment != "-", r.fragment.clone(), r.package.clone()));

    let behind = rows.iter().filter(|r| r.status == Status::Behind).count();
    let errors = rows.iter().filter(|r| r.status == Status::Error).count();
    if args.output.github() {
        let text = std::fs::read_to_string(&manifest.path).unwrap_or_default();
        let found = outdated::github::annotations(&rows, (&manifest.path, &text), ctx.profile());
        let ok = "Every pinned version is the newest on its track.";
        super::report_findings(found, ok, args.json)?;
    }
    if args.json {
        super::write_json(&serde_json::json!({
            "packages": rows,
            "behind": behind,
            "errors": errors,
        }))?;
    } else {
        out!("{}", table(&rows))?;
    }
    eprintln!(
        "outdated: {} pinned, {behind} behind, {errors} could not be checked",
        rows.len()
    );
    // A registry that could not be asked is not a version found behind.
    Ok(exit::Reported::verdict(behind, errors)?)
}

/// The upstream's row: has the tag's image for the family's platforms moved?
async fn base(ctx: &Context, args: &Args) -> anyhow::Result<Row> {
    let manifest = ctx.manifest()?;
    let upstream = &ctx.settings()?.upstream;
    let pinned = match upstream.pinned() {
        Ok(p) => p,
        Err(e) => return Ok(outdated::base_row(&upstream.origin(), Err(e.to_string()))),
    };
    let platforms: Vec<Platform> = if manifest.platforms.is_empty() {
        vec![Platform::host()]
    } else {
        manifest.platforms.clone()
    };
    let result = async {
        let tag = pinned.tag().unwrap_or("latest");
        let tracked = Reference::with_tag(pinned.repo(), tag)?;
        let client = ctx.registry(&args.registry)?;
        let plan = base_update::plan(&client, &tracked, pinned.digest(), &platforms, false);
        anyhow::Ok(plan.await?)
    }
    .await;
    Ok(outdated::base_row(
        &pinned.to_string(),
        result.map_err(|e| format!("{e:#}")),
    ))
}

/// Debian candidates, from a container of the pinned upstream.
fn debian_rows(ctx: &Context) -> anyhow::Result<Vec<Row>> {
    let manifest = ctx.manifest()?;
    let failed = |why: String| Ok(debian::rows_failed(manifest, &why));
    let pinned = match ctx.settings()?.upstream.pinned() {
        Ok(p) => p,
        Err(e) => return failed(e.to_string()),
    };
    let engine = match ctx.engine() {
        Ok(e) => e,
        Err(e) => return failed(format!("{e:#}")),
    };
    if let Err(e) = resolve_upstream(engine.as_ref(), &pinned, None) {
        return failed(e.to_string());
    }
    let lib = manifest.root.join(LIB_DIR);
    Ok(debian::rows(
        manifest,
        engine.as_ref(),
        &pinned.to_string(),
        &lib,
    ))
}

/// A version, or a digest (alone or ending a reference) shortened.
fn show(value: &Option<String>) -> String {
    let Some(v) = value.as_deref() else {
        return "-".into();
    };
    let digest = v.rsplit_once('@').map_or(v, |(_, d)| d);
    match digest.parse::<crate::registry::Digest>() {
        Ok(d) => d.short(),
        Err(_) => v.to_string(),
    }
}

fn table(rows: &[Row]) -> String {
    let mut t = Table::new([Column::left(); 9]);
    t.row([
        "fragment", "package", "from", "pinned", "wanted", "latest", "bump", "status", "note",
    ]);
    for r in rows {
        let status = match r.status {
            Status::Current => "current",
            Status::Behind => "BEHIND",
            Status::Info => "info",
            Status::Error => "ERROR",
        };
        t.row([
            r.fragment.clone(),
            r.package.clone(),
            r.registry.clone(),
            show(&r.pinned),
            show(&r.wanted),
            show(&r.latest),
            r.bump.clone(),
            status.to_string(),
            r.note.clone(),
        ]);
    }
    t.render()
}
