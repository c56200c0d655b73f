//! `sunaba-images build [VARIANT…]`: builds the image graph on the engine,
//! parents first, independent variants in parallel, skipping unchanged
//! inputs, and checks every image it builds (unless `--no-check`).

use super::context::{
    Context, OutputOptions, PLATFORM_HELP, PLATFORM_VALUE, Platforms, RegistryOptions,
};
use crate::build::progress::{PlainReporter, Reporter, TtyReporter};
use crate::build::{self, BuildOptions, Outcome, Summary, pipeline};
use crate::exit;
use crate::registry::Repository;
use crate::release::legs;
use crate::table::{Column, Table};
use anyhow::Context as _;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Progress {
    /// A live view on a terminal, plain lines otherwise.
    Auto,
    Tty,
    Plain,
}

impl Progress {
    /// A new reporter for each platform's run of `selected`.
    fn reporter(self, selected: &[String]) -> impl Fn() -> Box<dyn Reporter> + '_ {
        let tty = match self {
            Progress::Auto => std::io::stderr().is_terminal(),
            Progress::Tty => true,
            Progress::Plain => false,
        };
        move || -> Box<dyn Reporter> {
            match tty {
                true => Box::new(TtyReporter::new(selected)),
                false => Box::new(PlainReporter::stderr()),
            }
        }
    }
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images build\n  sunaba-images build python --no-cache\n  sunaba-images build --platform all --push-by-digest 127.0.0.1:5000/sunaba/sandbox --metadata-file legs.json"
)]
pub(crate) struct Args {
    /// Variants to build (with their ancestors); all when none are named.
    pub variants: Vec<String>,
    /// Rebuild the named variants (all, when none are named) even when an
    /// image with the same inputs exists, without the engine's layer cache.
    /// Unchanged ancestors are still reused.
    #[arg(long)]
    pub no_cache: bool,
    /// Do not run `check` on the images built.
    #[arg(long)]
    pub no_check: bool,
    #[arg(long, value_enum, default_value_t = Progress::Auto)]
    pub progress: Progress,
    // One after the other; a platform other than the engine's own is built
    // and checked under emulation.
    #[arg(long, value_name = PLATFORM_VALUE, help = PLATFORM_HELP, value_parser = Platforms::parse)]
    pub platform: Option<Platforms>,
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
    pub output: OutputOptions,
    #[command(flatten)]
    pub build: BuildOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let (manifest, settings, family) = (ctx.manifest()?, ctx.settings()?, ctx.family()?);
    let selected = family.select(&args.variants)?;
    refuse_stale_locks(manifest, &selected)?;
    let push_to: Option<Repository> =
        (args.push_by_digest.as_deref().map(str::parse)).transpose()?;
    let request = pipeline::Request {
        variants: &args.variants,
        platforms: Platforms::of_family(args.platform.as_ref(), &family)?,
        build: &args.build,
        no_cache: args.no_cache,
        check: !args.no_check,
        push_to: push_to.as_ref(),
    };
    let engine = ctx.engine()?;
    eprintln!("engine: {}", engine.describe());
    let native = engine.platform().context("building the image family")?;
    // One registry client for the run, made before any build when it needs
    // one, so a bad registry option fails before an hour of building.
    let registry = match pipeline::needs_registry(&request, &native) {
        true => Some(ctx.registry(&args.registry)?),
        false => None,
    };
    let reporter = args.progress.reporter(&selected);
    let services = pipeline::Services {
        registry: registry.as_ref(),
        reporter: &reporter,
        progress: &|line| eprintln!("{line}"),
    };
    // Entered once: the builds (an upstream image read from the registry
    // for an emulated platform) and then the pushes of the legs.
    let (outcome, pushed) = ctx.block_on(async {
        let outcome = pipeline::run(
            &family,
            manifest,
            settings,
            engine.as_ref(),
            &native,
            &request,
            &services,
        )
        .await?;
        let pushed = match (&push_to, &registry) {
            (Some(repo), Some(client)) if !outcome.failed() => {
                push_legs(engine.as_ref(), client, repo, &outcome, &args.metadata_file).await?
            }
            _ => Vec::new(),
        };
        anyhow::Ok((outcome, pushed))
    })??;
    if args.output.github() {
        github(&outcome, manifest, args.json)?;
    }
    print_outcome(&outcome, &pushed, push_to.as_ref(), args.json)?;
    // The summary names every failure: nothing is left to print. A build
    // that failed is work not done; an image that only failed its check
    // (or whose tools differ between platforms) is a finding.
    if outcome.build_failed() {
        Err(exit::Reported::Failures.into())
    } else if outcome.failed() {
        Err(exit::Reported::Findings.into())
    } else {
        Ok(())
    }
}

/// `--format github`: the run's findings as annotations, and the summary.
fn github(
    outcome: &pipeline::Outcome,
    manifest: &crate::manifest::Manifest,
    json: bool,
) -> exit::Result {
    let found = build::github::annotations(outcome, manifest);
    let ok = "Every variant built (or unchanged), and nothing failed its check.";
    super::report_findings(found, ok, json)
}

/// The lock gate: a selected fragment whose locks do not match images.toml
/// stops the build before anything is built, each problem printed.
fn refuse_stale_locks(manifest: &crate::manifest::Manifest, selected: &[String]) -> exit::Result {
    let stale = crate::locks::stale_for(manifest, selected);
    if stale.is_empty() {
        return Ok(());
    }
    stale.iter().for_each(|p| eprintln!("lock: {p}"));
    let n = stale.len();
    let why = "the locks do not match images.toml; nothing was built";
    Err(anyhow::anyhow!("{n} lock problem(s): {why}"))
}

/// Pushes every checked platform image to `repo` by digest and writes the
/// legs file when asked.
async fn push_legs(
    engine: &dyn crate::engine::Engine,
    client: &crate::registry::Client,
    repo: &Repository,
    outcome: &pipeline::Outcome,
    metadata_file: &Option<PathBuf>,
) -> anyhow::Result<Vec<legs::Leg>> {
    let progress = |line| eprintln!("pushed: {line}");
    let pushed = legs::push(engine, client, repo, &outcome.summaries, &progress).await?;
    if let Some(path) = metadata_file {
        legs::LegsFile::new(repo, pushed.clone()).save(path)?;
    }
    Ok(pushed)
}

/// The run's summaries (a JSON document, or the tables), the tool
/// mismatches and the legs pushed.
fn print_outcome(
    outcome: &pipeline::Outcome,
    pushed: &[legs::Leg],
    push_to: Option<&Repository>,
    json: bool,
) -> exit::Result {
    let summaries = &outcome.summaries;
    if json {
        // One shape whatever the flags: a single platform is a list of one.
        let mismatches: Vec<_> = outcome
            .mismatches
            .iter()
            .map(|(v, m)| serde_json::json!({"variant": v, "tools": m}))
            .collect();
        let doc =
            serde_json::json!({"platforms": summaries, "mismatches": mismatches, "legs": pushed});
        return super::write_json(&doc);
    }
    for s in summaries {
        if summaries.len() > 1 || s.platform != outcome.native {
            out!("\n== {} ==", s.platform)?;
        }
        out!("{}", summary_text(s))?;
    }
    for (variant, found) in &outcome.mismatches {
        let found = found.join("; ");
        outln!("\n{variant} failed: its tool versions differ between platforms: {found}")?;
    }
    if push_to.is_some() && outcome.failed() {
        outln!("\nnothing pushed: not every image built and checked on every platform")?;
    }
    for leg in pushed {
        let repo = push_to.expect("pushed to it");
        outln!(
            "pushed {} {} {repo}@{}",
            leg.variant,
            leg.platform,
            leg.digest
        )?;
    }
    Ok(())
}

/// The summary for people: one row per variant, then the check tables, then
/// every failure with its log.
pub(crate) fn summary_text(s: &Summary) -> String {
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
                    crate::family::short_hex(image_id).to_string(),
                    format!("{build_seconds:.1}s"),
                    match check {
                        Some(c) => format!("check passed ({} tools)", c.tools.len()),
                        None => "not checked (--no-check)".to_string(),
                    },
                )
            }
            Outcome::Skipped { image_id, note, .. } => (
                "skipped",
                crate::family::short_hex(image_id).to_string(),
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
