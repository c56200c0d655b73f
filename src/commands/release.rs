//! `sunaba-images release [--write] [--from REPO] [--resume ID | --rollback ID]`:
//! plans the release of the whole family and, with `--write`, carries it out
//! as one transaction (stage, verify, promote, pin last), printing the
//! release notes. See `crate::release` for the steps and the journal.

use super::context::{Context, OutputOptions, PinsOptions, RegistryOptions};
use crate::build::progress::PlainReporter;
use crate::exit;
use crate::pins::PinsFile;
use crate::registry::Repository;
use crate::release::journal::{self, Journal};
use crate::release::plan::Plan;
use crate::release::run::Releaser;
use crate::release::{gather, notes};
use crate::table::{Column, Table};
use anyhow::Context as _;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images release\n  sunaba-images release --write --signing-key-env SUNABA_SIGNING_KEY\n  sunaba-images release --resume 20261202T051500.123Z-1a2b"
)]
pub(crate) struct Args {
    /// Variants to release (default: every variant with an alias).
    pub variants: Vec<String>,
    /// Carry the plan out (default: print it and change nothing).
    #[arg(long)]
    pub write: bool,
    /// Take each variant's checked image from `REPO:<variant>` in a registry
    /// (e.g. pushed there by a build job) instead of the engine.
    #[arg(long, value_name = "REPO", conflicts_with_all = ["resume", "rollback"])]
    pub from: Option<String>,
    /// With --from: the legs files of `build --push-by-digest --metadata-file`
    /// (one per platform, or one for all): each variant's index is
    /// assembled in REPO from its legs' images, one per family platform.
    #[arg(long, value_name = "FILE", requires = "from")]
    pub legs: Vec<PathBuf>,
    /// Continue release ID from where it stopped (no finished write is repeated).
    #[arg(long, value_name = "ID", conflicts_with = "rollback", value_parser = crate::release::parse_id)]
    pub resume: Option<String>,
    /// Put the moving tags of release ID back where they were (and the pins
    /// it wrote). Immutable tags stay; nothing is deleted.
    #[arg(long, value_name = "ID", value_parser = crate::release::parse_id)]
    pub rollback: Option<String>,
    /// Sign an SBOM, provenance, test result and signature of every
    /// released image with the PKCS#8 PEM private key in FILE, attached as
    /// OCI referrers (without a key, nothing is attached).
    #[arg(long, value_name = "FILE", conflicts_with = "signing_key_env")]
    pub signing_key: Option<PathBuf>,
    /// As --signing-key, the PEM read from the environment variable NAME
    /// (a CI secret).
    #[arg(long, value_name = "NAME")]
    pub signing_key_env: Option<String>,
    /// Write the release notes (Markdown) to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub notes: Option<PathBuf>,
    /// Print the plan (dry run) or the journal (after a run) as JSON.
    #[arg(long)]
    pub json: bool,
    /// How images missing from the engine are built (as `build` does).
    #[command(flatten)]
    pub build: crate::build::BuildOptions,
    #[command(flatten)]
    pub output: OutputOptions,
    #[command(flatten)]
    pub file: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let manifest = ctx.manifest()?;
    let dir = journal::dir(&manifest.root);
    let pins_path = ctx.pins_path(&args.file);
    let client = ctx.registry(&args.registry)?;
    let progress = |line: String| eprintln!("release: {line}");
    let key = signing_key(&args)?;
    // One release at a time on this machine.
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let _lock = journal::lock(&dir).context("locking the releases")?;
    let job = Job::of(ctx, &args, &dir)?;
    let engine = match &job {
        Job::RollBack(_) => None,
        // The engine only for images it has still to push.
        Job::Resume(journal) => journal.needs_engine().then(|| ctx.engine()).transpose()?,
        Job::Release(_) => args.from.is_none().then(|| ctx.engine()).transpose()?,
    };
    // Opened once for the whole release: staging's pushes and the attach
    // step share it (what staging read of a layer, attaching reads there).
    let layer_cache = crate::image::layer_cache::LayerCache::for_user().ok();
    let releaser = Releaser {
        client: &client,
        engine: engine.as_deref(),
        pins_path: &pins_path,
        key: key.as_ref(),
        manifest: ctx.manifest().ok(),
        layer_cache: layer_cache.as_ref(),
        progress: &progress,
    };
    let reporter = PlainReporter::stderr();
    let (pins, from) = match &job {
        Job::Release(_) => (
            PinsFile::load(&pins_path)?.unwrap_or_default().0,
            args.from.as_deref().map(str::parse).transpose()?,
        ),
        _ => Default::default(),
    };
    let origin = match &job {
        Job::Release(new) => {
            let engine = engine.as_deref();
            Some(origin(
                ctx,
                &args,
                from.as_ref(),
                &new.family,
                engine,
                &reporter,
            )?)
        }
        _ => None,
    };
    // The registry-facing part, entered once.
    let done = ctx.block_on(async {
        match job {
            Job::RollBack(mut journal) => {
                let lines = releaser.roll_back(&mut journal).await?;
                Ok(Done::RolledBack(journal.id, lines))
            }
            Job::Resume(mut journal) => {
                carry_out(&releaser, &mut journal).await?;
                Ok(Done::Carried(journal))
            }
            Job::Release(new) => {
                let origin = origin.expect("made for a new release");
                new_release(ctx, &args, &releaser, &dir, &new, origin, &pins).await
            }
        }
    })??;
    match done {
        Done::RolledBack(id, lines) => print_rollback(&id, &lines),
        Done::Planned(plan) => show_plan(&plan, &args, key.as_ref()),
        Done::Carried(journal) => report(&releaser, &journal, &args),
    }
}

/// Plans the release of `new` and, with `--write`, carries it out under a
/// new journal in `dir`.
async fn new_release(
    ctx: &Context,
    args: &Args,
    releaser: &Releaser<'_>,
    dir: &std::path::Path,
    new: &NewRelease,
    origin: gather::Origin<'_>,
    pins: &PinsFile,
) -> anyhow::Result<Done> {
    let client = releaser.client;
    let candidates = gather::candidates(client, &new.family, &new.variants, origin).await?;
    let repository = &ctx.settings()?.repository;
    let (family, specs) = (&new.family, &new.specs);
    let plan = gather::plan_release(client, repository, family, pins, specs, candidates).await?;
    if !args.write || plan.is_noop() {
        return Ok(Done::Planned(plan));
    }
    let hint = releaser.key.map(|k| k.public().hint());
    if hint.is_none() {
        (releaser.progress)("attestations: none (no --signing-key)".into());
    }
    let mut journal = Journal::start(dir, plan, hint)?;
    (releaser.progress)(format!(
        "{} planned ({})",
        journal.id,
        journal.path().display()
    ));
    carry_out(releaser, &mut journal).await?;
    Ok(Done::Carried(journal))
}

/// What a run of `release` does.
enum Job {
    /// `--rollback ID`: the moving tags (and pins) of that release put back.
    RollBack(Journal),
    /// `--resume ID`: that release carried on from where it stopped.
    Resume(Journal),
    /// A new release of the variants selected: planned, and carried out
    /// with `--write`.
    Release(Box<NewRelease>),
}

/// What a new release is planned from.
struct NewRelease {
    specs: Vec<crate::pins::plan::AliasSpec>,
    family: crate::family::Family,
    variants: Vec<gather::Releasable>,
}

impl Job {
    /// The job the options ask for: its journal read, or the variants to
    /// release selected (an unknown one is refused before the engine is
    /// chosen).
    fn of(ctx: &Context, args: &Args, dir: &std::path::Path) -> anyhow::Result<Job> {
        if let Some(id) = &args.rollback {
            return Ok(Job::RollBack(Journal::load(dir, id)?));
        }
        if let Some(id) = &args.resume {
            return Ok(Job::Resume(Journal::load_resumable(dir, id)?));
        }
        let (specs, family) = (ctx.alias_specs()?, ctx.family()?);
        let variants = gather::select_releasable(&family.order, &specs, &args.variants)?;
        Ok(Job::Release(Box::new(NewRelease {
            specs,
            family,
            variants,
        })))
    }
}

/// How far a run went.
enum Done {
    /// The release rolled back, a line per thing put back.
    RolledBack(String, Vec<String>),
    /// A dry run, or a plan with nothing to do.
    Planned(Plan),
    /// The release carried out, as its journal says.
    Carried(Journal),
}

/// The signing key the options name, if any.
fn signing_key(args: &Args) -> anyhow::Result<Option<crate::attest::PrivateKey>> {
    let source = match (&args.signing_key, &args.signing_key_env) {
        (Some(path), _) => crate::attest::KeySource::File(path.clone()),
        (None, Some(name)) => crate::attest::KeySource::Env(name.clone()),
        (None, None) => return Ok(None),
    };
    let key = crate::attest::PrivateKey::load(&source).context("reading the signing key")?;
    Ok(Some(key))
}

/// Where the release's candidates come from: `--from`, `--legs` or the
/// engine (which builds what is missing).
fn origin<'a>(
    ctx: &Context,
    args: &'a Args,
    from: Option<&'a Repository>,
    family: &crate::family::Family,
    engine: Option<&'a dyn crate::engine::Engine>,
    reporter: &'a PlainReporter,
) -> anyhow::Result<gather::Origin<'a>> {
    Ok(match (from, engine) {
        (Some(repo), _) if args.legs.is_empty() => gather::Origin::Registry(repo),
        (Some(repo), _) => gather::Origin::Legs {
            repo,
            files: &args.legs,
            // A family without `platforms` is built for the engine's own.
            host: match family.platforms.is_empty() {
                true => Some(ctx.engine()?.platform()?),
                false => None,
            },
            write: args.write,
        },
        // The engine's own platform: a multi-platform release is
        // assembled from legs (`--from REPO --legs FILE`).
        (None, engine) => gather::Origin::Engine {
            engine: engine.expect("an engine without --from"),
            options: Box::new(args.build.options(ctx.manifest()?, ctx.settings()?)?),
            reporter,
        },
    })
}

/// What `--rollback` did, a line each.
fn print_rollback(id: &str, done: &[String]) -> exit::Result {
    if done.is_empty() {
        outln!("release {id}: nothing to roll back (it moved no tag)")?;
    }
    for line in done {
        outln!("{line}")?;
    }
    Ok(())
}

/// A dry run (the plan, its notes, `--json`), or a plan with nothing to do.
fn show_plan(plan: &Plan, args: &Args, key: Option<&crate::attest::PrivateKey>) -> exit::Result {
    let text = notes::markdown(plan, &Default::default());
    if args.output.github() {
        crate::github::summary(&text).context("writing the step summary")?;
    }
    if args.write {
        outln!("nothing to release: every image is as pinned")?;
        return Ok(());
    }
    if let Some(path) = &args.notes {
        write_notes(path, &text)?;
    }
    if args.json {
        return write_report(plan, None);
    }
    print_plan(plan)?;
    match key {
        Some(k) => outln!(
            "attestations: signed with key {} (SBOM, provenance, test result, signature per image)",
            k.public().hint()
        )?,
        None => outln!("attestations: none (no --signing-key)")?,
    }
    outln!("dry run: pass --write to publish")?;
    Ok(())
}

/// Carries `journal` out; a release that stopped says how to continue it.
async fn carry_out(releaser: &Releaser<'_>, journal: &mut Journal) -> anyhow::Result<()> {
    let id = journal.id.clone();
    releaser.carry_out(journal).await.with_context(|| {
        format!(
            "release {id} stopped (image_pins.json is untouched); `sunaba-images release \
             --resume {id}` continues it"
        )
    })
}

/// The outcome of a release carried out: progress, notes, outputs, JSON.
fn report(releaser: &Releaser, journal: &Journal, args: &Args) -> exit::Result {
    let id = &journal.id;
    let written = journal.tags.len();
    (releaser.progress)(format!(
        "{id} done: {} image(s), {written} release tag(s) at their images",
        journal.plan.variants.len()
    ));
    let text = notes::of_journal(journal);
    if let Some(path) = &args.notes {
        write_notes(path, &text)?;
    }
    if args.output.github() {
        crate::github::summary(&text).context("writing the step summary")?;
        crate::github::set_output("release_id", id).context("writing the step outputs")?;
    }
    if args.json {
        write_report(&journal.plan, Some(journal))
    } else if args.notes.is_none() {
        out!("{text}")?;
        Ok(())
    } else {
        Ok(())
    }
}

/// `--json`, one shape for a plan and a release carried out: the plan, and
/// the journal (docs/contracts.md) once the release ran, else null.
fn write_report(plan: &Plan, journal: Option<&Journal>) -> exit::Result {
    super::write_json(&serde_json::json!({
        "id": journal.map(|j| &j.id),
        "step": journal.map(|j| &j.step),
        "plan": plan,
        "journal": journal,
    }))
}

fn write_notes(path: &std::path::Path, text: &str) -> exit::Result {
    crate::fsutil::atomic_write(path, text.as_bytes())
        .with_context(|| format!("writing the release notes {}", path.display()))?;
    Ok(())
}

/// The plan for people: one row per variant.
fn print_plan(plan: &Plan) -> exit::Result {
    outln!("release plan {} for {}", plan.id, plan.repository)?;
    let mut table = Table::new([Column::left(); 5]);
    table.row(["VARIANT", "VERSION", "BUMP", "TAGS", "WHY"]);
    for v in &plan.variants {
        let version = match &v.previous {
            Some(p) => format!("{p} -> {}", v.version),
            None => format!("(none) -> {}", v.version),
        };
        let mut tags = vec![v.immutable.clone()];
        tags.extend(v.moving.iter().cloned());
        table.row([
            v.variant.clone(),
            version,
            v.bump.to_string(),
            tags.join(","),
            v.why.clone(),
        ]);
    }
    for u in &plan.unchanged {
        table.row([
            u.variant.clone(),
            u.version.as_ref().map_or("-".into(), ToString::to_string),
            "-".into(),
            "-".into(),
            format!("unchanged: {}", u.reason),
        ]);
    }
    out!("{}", table.render())?;
    Ok(())
}
