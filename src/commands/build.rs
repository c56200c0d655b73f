//! `sunaba-images build [VARIANT…]`: builds the image graph on the engine,
//! parents first, independent variants in parallel, skipping unchanged
//! inputs, and checks every image it builds (unless `--no-check`).

use super::context::{Context, RegistryOptions};
use crate::build::progress::{PlainReporter, Reporter, TtyReporter};
use crate::build::{self, Outcome, Summary};
use crate::exit::{self, WithStatus};
use crate::legs;
use crate::registry::Repository;
use crate::table::{Column, Table};
use anyhow::Context as _;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Progress {
    /// A live view on a terminal, plain lines otherwise.
    Auto,
    Tty,
    Plain,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Variants to build (with their ancestors); all when none are named.
    pub variants: Vec<String>,
    /// How many variants may build at the same time.
    #[arg(long, short = 'j', default_value_t = 4)]
    pub jobs: usize,
    /// Rebuild the named variants (all, when none are named) even when an
    /// image with the same inputs exists, without the engine's layer cache.
    /// Unchanged ancestors are still reused.
    #[arg(long)]
    pub no_cache: bool,
    /// Do not run `check` on the images built.
    #[arg(long)]
    pub no_check: bool,
    /// CA bundle passed as the BuildKit secret `ca_bundle` (overrides the
    /// profile's `ca_bundle`). It never enters an image layer.
    #[arg(long, value_name = "PATH")]
    pub ca_bundle: Option<PathBuf>,
    /// Directory of the per-variant build logs
    /// (default: target/sunaba-build/logs next to images.toml).
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Time limit of each image's check: healthcheck and smoke (e.g. `90s`, `5m`).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub check_timeout: Duration,
    #[arg(long, value_enum, default_value_t = Progress::Auto)]
    pub progress: Progress,
    /// Build for these platforms (`linux/arm64`, comma-separated, or `all`
    /// for the family's `platforms`), one after the other; a platform other
    /// than the engine's own is built and checked under emulation. Default:
    /// the engine's own.
    #[arg(long, value_name = "PLATFORM", value_delimiter = ',')]
    pub platform: Vec<String>,
    /// Push each checked image to REPO by digest (a leg of a multi-platform
    /// release: `release --from REPO --legs FILE` assembles the indexes).
    #[arg(long, value_name = "REPO")]
    pub push_by_digest: Option<String>,
    /// Write the pushed legs (variant, platform, digest) to FILE as JSON.
    #[arg(long, value_name = "FILE", requires = "push_by_digest")]
    pub metadata_file: Option<PathBuf>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub fn run(ctx: &Context, args: Args) -> exit::Result {
    let manifest = ctx.manifest()?;
    let settings = ctx.settings()?;
    let family = ctx.family()?;
    let selected = family.select(&args.variants)?;
    // A lock that no longer matches images.toml would fail deep inside a
    // fragment (or install something else than images.toml says): refuse
    // before any engine work.
    let stale: Vec<_> = crate::locks::check(manifest)
        .into_iter()
        .filter(|p| {
            selected
                .iter()
                .any(|v| manifest.variants[v].fragments.contains(&p.fragment))
        })
        .collect();
    if !stale.is_empty() {
        for p in &stale {
            eprintln!("lock: {p}");
        }
        return Err(anyhow::anyhow!(
            "{} lock problem(s): the locks do not match images.toml; nothing was built",
            stale.len()
        )
        .into());
    }
    let engine = ctx.engine()?;
    let push_to: Option<Repository> = args
        .push_by_digest
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(anyhow::Error::from)
        .status(exit::Status::Usage)?;
    let platforms: Vec<Option<String>> = match args.platform.as_slice() {
        [] => vec![None],
        [all] if all == "all" => {
            if family.platforms.is_empty() {
                vec![None]
            } else {
                family.platforms.iter().cloned().map(Some).collect()
            }
        }
        given => {
            for p in given {
                p.parse::<crate::registry::Platform>()
                    .map_err(|e| anyhow::anyhow!("--platform {p}: {e}"))
                    .status(exit::Status::Usage)?;
            }
            given.iter().cloned().map(Some).collect()
        }
    };
    let base_log_dir = std::path::absolute(
        args.log_dir
            .clone()
            .unwrap_or_else(|| manifest.root.join("target/sunaba-build/logs")),
    )
    .context("resolving the log directory")?;
    eprintln!("engine: {}", engine.describe());
    let native = engine.platform().context("building the image family")?;
    let source_date_epoch = build::source_date_epoch(&manifest.root).map_err(anyhow::Error::msg)?;
    let revision = build::git_revision(&manifest.root);
    let is_foreign = |p: &str| !crate::registry::same_platform(p, &native);
    // One registry client for the run, when it needs one: for another
    // platform's upstream image, and for the pushes.
    let registry = if push_to.is_some() || platforms.iter().flatten().any(|p| is_foreign(p)) {
        Some((ctx.registry(&args.registry)?, super::context::runtime()?))
    } else {
        None
    };
    let tty = match args.progress {
        Progress::Auto => std::io::stderr().is_terminal(),
        Progress::Tty => true,
        Progress::Plain => false,
    };
    let mut summaries = Vec::new();
    for platform in &platforms {
        let foreign = platform.as_deref().filter(|p| is_foreign(p));
        // Another platform builds FROM the pinned index's image for it.
        let upstream_for_platform = match (foreign, &registry) {
            (Some(p), Some((client, rt))) => Some(upstream_for(client, rt, &family, p)?),
            _ => None,
        };
        let opts = build::Options {
            jobs: args.jobs,
            no_cache: args.no_cache,
            check: !args.no_check,
            ca_bundle: args.ca_bundle.clone().or(settings.ca_bundle.clone()),
            // Absolute, so the failure report names a path that works from
            // anywhere; another platform's logs beside, not over, these.
            log_dir: match foreign {
                Some(p) => base_log_dir.join(crate::registry::platform_slug(p)),
                None => base_log_dir.clone(),
            },
            check_timeout: args.check_timeout,
            revision: revision.clone(),
            source_date_epoch,
            platform: platform.clone(),
            upstream_for_platform,
            normalize: true,
        };
        if platforms.len() > 1 || foreign.is_some() {
            eprintln!(
                "platform: {}{}",
                platform.as_deref().unwrap_or(&native),
                if foreign.is_some() { " (emulated)" } else { "" }
            );
        }
        let reporter: Box<dyn Reporter> = if tty {
            Box::new(TtyReporter::new(&selected))
        } else {
            Box::new(PlainReporter::stderr())
        };
        let summary = build::run(
            &family,
            &args.variants,
            engine.as_ref(),
            &opts,
            reporter.as_ref(),
        )
        .context("building the image family")?;
        summaries.push(summary);
    }

    // The same variant must say the same tool versions on every platform.
    let mut mismatches: Vec<(String, Vec<String>)> = Vec::new();
    if summaries.len() > 1 {
        for (variant, by_platform) in legs::records(engine.as_ref(), &summaries)? {
            let tools = by_platform.into_iter().map(|(p, r)| (p, r.tools)).collect();
            let found = legs::tool_mismatches(&tools);
            if !found.is_empty() {
                mismatches.push((variant, found));
            }
        }
    }
    let failed = summaries.iter().any(Summary::any_failed) || !mismatches.is_empty();
    let mut pushed = Vec::new();
    if let (Some(repo), Some((client, rt))) = (&push_to, &registry)
        && !failed
    {
        pushed = legs::push(engine.as_ref(), client, rt, repo, &summaries, &|line| {
            eprintln!("pushed: {line}")
        })?;
        if let Some(path) = &args.metadata_file {
            legs::LegsFile {
                schema: legs::SCHEMA,
                repository: repo.to_string(),
                legs: pushed.clone(),
            }
            .save(path)?;
        }
    }

    let multi = !args.platform.is_empty() || push_to.is_some();
    if args.json {
        if multi {
            super::write_json(&serde_json::json!({
                "platforms": summaries,
                "mismatches": mismatches.iter().map(|(v, m)| serde_json::json!({
                    "variant": v,
                    "tools": m,
                })).collect::<Vec<_>>(),
                "legs": pushed,
            }))?;
        } else {
            super::write_json(&summaries[0])?;
        }
    } else {
        for s in &summaries {
            if summaries.len() > 1 || !crate::registry::same_platform(&s.platform, &native) {
                out!("\n== {} ==", s.platform)?;
            }
            out!("{}", summary_text(s))?;
        }
        for (variant, found) in &mismatches {
            outln!(
                "\n{variant} failed: its tool versions differ between platforms: {}",
                found.join("; ")
            )?;
        }
        if push_to.is_some() && failed {
            outln!("\nnothing pushed: not every image built and checked on every platform")?;
        }
        for leg in &pushed {
            outln!(
                "pushed {} {} {}@{}",
                leg.variant,
                leg.platform,
                push_to.as_ref().expect("pushed to it"),
                leg.digest
            )?;
        }
    }
    // The summary names every failure: nothing is left to print.
    if summaries.iter().any(Summary::build_failed) {
        Err(exit::Error::reported(exit::Status::Failure))
    } else if failed {
        Err(exit::Error::gate())
    } else {
        Ok(())
    }
}

/// The pinned upstream's image for `platform`, by its digest, read from
/// the registry (an upstream that is one image must be of that platform).
fn upstream_for(
    client: &crate::registry::Client,
    rt: &tokio::runtime::Runtime,
    family: &build::Family,
    platform: &str,
) -> anyhow::Result<crate::registry::Reference> {
    let pinned = family.upstream.pinned()?;
    let want: crate::registry::Platform = platform.parse()?;
    // `resolve` picks the index's child, and refuses a single image of
    // another platform.
    let resolved = rt
        .block_on(client.resolve(&pinned, Some(&want)))
        .with_context(|| format!("finding the {platform} image of the upstream {pinned}"))?;
    Ok(pinned.by_digest(resolved.digest))
}

/// The summary for people: one row per variant, then the check tables, then
/// every failure with its log.
pub fn summary_text(s: &Summary) -> String {
    let mut out = String::from("\n");
    let mut rows = Table::new([
        Column::left(),
        Column::left().width(13),
        Column::left().width(12),
        Column::right().width(7),
        Column::right().width(7),
        Column::left(),
    ]);
    rows.row(["variant", "result", "image", "build", "check", "note"]);
    let mut build_sum = 0.0;
    for r in &s.results {
        let check = r
            .outcome
            .check()
            .map(|c| format!("{:.1}s", c.seconds))
            .unwrap_or_else(|| "-".into());
        let (result, image, secs, note) = match &r.outcome {
            Outcome::Built {
                image_id,
                build_seconds,
                check,
                ..
            } => {
                build_sum += build_seconds;
                (
                    "built",
                    build::short_hex(image_id).to_string(),
                    format!("{build_seconds:.1}s"),
                    match check {
                        Some(c) => format!("check passed ({} tools)", c.tools.len()),
                        None => "not checked (--no-check)".to_string(),
                    },
                )
            }
            Outcome::Skipped { image_id, note, .. } => (
                "skipped",
                build::short_hex(image_id).to_string(),
                "-".into(),
                note.clone(),
            ),
            Outcome::Failed { stage, reason, .. } => (
                "FAILED",
                "-".into(),
                "-".into(),
                format!("{stage} failed: {}", reason.lines().next().unwrap_or("")),
            ),
            Outcome::NotAttempted { reason } => {
                ("not attempted", "-".into(), "-".into(), reason.clone())
            }
        };
        rows.row([r.variant.clone(), result.into(), image, secs, check, note]);
    }
    out.push_str(&rows.render());
    let count = |f: fn(&Outcome) -> bool| s.results.iter().filter(|r| f(&r.outcome)).count();
    out.push_str(&format!(
        "\n{} built, {} skipped, {} failed, {} not attempted; wall time {:.1}s \
         (sum of build times {:.1}s); engine builds started: {}\n",
        count(|o| matches!(o, Outcome::Built { .. })),
        count(|o| matches!(o, Outcome::Skipped { .. })),
        count(|o| matches!(o, Outcome::Failed { .. })),
        count(|o| matches!(o, Outcome::NotAttempted { .. })),
        s.wall_seconds,
        build_sum,
        s.engine_builds,
    ));
    let checks: Vec<_> = s
        .results
        .iter()
        .filter_map(|r| r.outcome.check().cloned())
        .collect();
    if !checks.is_empty() {
        out.push_str("\nchecks:\n");
        out.push_str(&crate::check::table(&checks));
    }
    for r in &s.results {
        if let Outcome::Failed {
            stage, reason, log, ..
        } = &r.outcome
        {
            out.push_str(&format!("\n{} failed ({stage}): {reason}\n", r.variant));
            if let Some(log) = log {
                out.push_str(&format!("full log: {}\n", log.display()));
            }
        }
    }
    out
}
