//! `sunaba-images release [--write] [--from REPO] [--resume ID | --rollback ID]`:
//! plans the release of the whole family and, with `--write`, carries it out
//! as one transaction (stage, verify, promote, pin last), printing the
//! release notes. See `crate::release` for the steps and the journal.

use super::context::{Context, OutputOptions, PinsOptions, RegistryOptions};
use crate::build::progress::PlainReporter;
use crate::exit;
use crate::fsutil::FileLock;
use crate::pins::PinsFile;
use crate::registry::Repository;
use crate::release::journal::{self, Journal, Step};
use crate::release::plan::{self, Plan};
use crate::release::run::Releaser;
use crate::release::{gather, new_id, notes};
use crate::table::{Column, Table};
use anyhow::Context as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
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
    #[arg(long, value_name = "ID", conflicts_with = "rollback")]
    pub resume: Option<String>,
    /// Put the moving tags of release ID back where they were (and the pins
    /// it wrote). Immutable tags stay; nothing is deleted.
    #[arg(long, value_name = "ID")]
    pub rollback: Option<String>,
    /// Write the release notes (Markdown) to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub notes: Option<PathBuf>,
    /// Print the plan (dry run) or the journal (after a run) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Variants built at the same time when images are missing.
    #[arg(long, short = 'j', default_value_t = 4)]
    pub jobs: usize,
    /// CA bundle for builds of missing images (see `build --ca-bundle`).
    #[arg(long, value_name = "PATH")]
    pub ca_bundle: Option<PathBuf>,
    /// Time limit of each image's check, for images built now.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub check_timeout: Duration,
    #[command(flatten)]
    pub output: OutputOptions,
    #[command(flatten)]
    pub file: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub fn run(ctx: &Context, args: Args) -> exit::Result {
    let manifest = ctx.manifest()?;
    let dir = journal::dir(&manifest.root);
    let pins_path = ctx.pins_path(&args.file);
    let client = ctx.registry(&args.registry)?;
    let rt = super::context::runtime()?;
    let progress = |line: String| eprintln!("release: {line}");
    // One release at a time on this machine.
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let _lock = FileLock::acquire(&dir.join("release")).context("locking the releases")?;
    let releaser = |engine| Releaser {
        client: &client,
        rt: &rt,
        engine,
        pins_path: &pins_path,
        progress: &progress,
    };

    if let Some(id) = &args.rollback {
        let mut journal = Journal::load(&dir, id)?;
        let done = releaser(None::<&dyn crate::engine::Engine>).roll_back(&mut journal)?;
        if done.is_empty() {
            outln!("release {id}: nothing to roll back (it moved no tag)")?;
        }
        for line in done {
            outln!("{line}")?;
        }
        return Ok(());
    }
    if let Some(id) = &args.resume {
        let mut journal = Journal::load(&dir, id)?;
        if journal.step == Step::RolledBack {
            return Err(anyhow::anyhow!("release {id} was rolled back; plan a new release").into());
        }
        // The engine only for images it has still to push.
        let engine = if journal.needs_engine() {
            Some(ctx.engine()?)
        } else {
            None
        };
        return finish(&releaser(engine.as_deref()), &mut journal, &args);
    }

    let engine = if args.from.is_some() {
        None
    } else {
        Some(ctx.engine()?)
    };
    let releaser = releaser(engine.as_deref());
    let settings = ctx.settings()?;
    let repository: Repository = settings.repository.parse()?;
    let specs = ctx.alias_specs()?;
    let (pins, _) = PinsFile::load(&pins_path)?.unwrap_or_default();
    let family = ctx.family()?;
    let mut variants = gather::releasable(&family.order, &specs);
    if let Some(unknown) = args
        .variants
        .iter()
        .find(|v| !variants.iter().any(|r| &r.variant == *v))
    {
        let known: Vec<&str> = variants.iter().map(|r| r.variant.as_str()).collect();
        return Err(exit::Error::usage(format!(
            "`{unknown}` is not a variant with an alias (releasable: {})",
            known.join(", ")
        )));
    }
    if !args.variants.is_empty() {
        variants.retain(|r| args.variants.contains(&r.variant));
    }
    let candidates = match &args.from {
        Some(from) => {
            let from: Repository = from.parse()?;
            if args.legs.is_empty() {
                rt.block_on(gather::from_registry(&client, &from, &variants))?
            } else {
                let files = args
                    .legs
                    .iter()
                    .map(|p| Ok((p.display().to_string(), crate::legs::LegsFile::load(p)?)))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let (repo, legs) = crate::legs::merge(&files)?;
                if repo != from.to_string() {
                    return Err(
                        anyhow::anyhow!("the legs are in {repo}, not in --from {from}").into(),
                    );
                }
                let host = if family.platforms.is_empty() {
                    vec![ctx.engine()?.platform()?]
                } else {
                    Vec::new()
                };
                let platforms = family
                    .variants
                    .iter()
                    .map(|(v, plan)| {
                        let ps = if plan.platforms.is_empty() {
                            host.clone()
                        } else {
                            plan.platforms.clone()
                        };
                        (v.clone(), ps)
                    })
                    .collect();
                rt.block_on(gather::from_legs(
                    &client, &from, &legs, &platforms, &variants, args.write,
                ))?
            }
        }
        None => {
            let engine = engine.as_deref().expect("an engine without --from");
            let options = crate::build::Options {
                jobs: args.jobs,
                no_cache: false,
                check: true,
                ca_bundle: args.ca_bundle.clone().or(settings.ca_bundle.clone()),
                log_dir: std::path::absolute(manifest.root.join("target/sunaba-build/logs"))
                    .context("resolving the log directory")?,
                check_timeout: args.check_timeout,
                revision: crate::build::git_revision(&manifest.root),
                source_date_epoch: crate::build::source_date_epoch(&manifest.root)
                    .map_err(anyhow::Error::msg)?,
                // The engine's own: a multi-platform release is assembled
                // from legs (`--from REPO --legs FILE`).
                platform: None,
                upstream_for_platform: None,
                normalize: true,
            };
            gather::from_engine(
                &family,
                engine,
                &options,
                &PlainReporter::stderr(),
                &variants,
            )?
        }
    };
    let currents = rt.block_on(gather::currents(&client, &pins, &specs, &candidates))?;
    let tags = rt.block_on(gather::tags(&client, &repository))?;
    let id = new_id(std::time::SystemTime::now());
    let plan = plan::plan(plan::Input {
        id: &id,
        repository: &settings.repository,
        candidates: candidates.into_iter().zip(currents).collect(),
        tags: &tags,
        variants: &family.order,
        pins: &pins,
    })?;

    if !args.write {
        let text = notes::markdown(&plan, &Default::default());
        if let Some(path) = &args.notes {
            write_notes(path, &text)?;
        }
        if args.output.github() {
            crate::github::summary(&text).context("writing the step summary")?;
        }
        return if args.json {
            super::write_json(&plan)
        } else {
            print_plan(&plan)?;
            outln!("dry run: pass --write to publish")?;
            Ok(())
        };
    }
    if plan.is_noop() {
        if args.output.github() {
            let text = notes::markdown(&plan, &Default::default());
            crate::github::summary(&text).context("writing the step summary")?;
        }
        outln!("nothing to release: every image is as pinned")?;
        return Ok(());
    }
    let unfinished = journal::unfinished(&dir);
    if !unfinished.is_empty() {
        return Err(anyhow::anyhow!(
            "release {} wrote tags and did not finish: resume it (`--resume ID`) or roll it \
             back (`--rollback ID`) first",
            unfinished.join(", ")
        )
        .into());
    }
    let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let mut journal = Journal::new(&dir, plan, created);
    journal.save()?;
    progress(format!(
        "{} planned ({})",
        journal.id,
        journal.path().display()
    ));
    finish(&releaser, &mut journal, &args)
}

/// Carries `journal` out and reports the outcome.
fn finish(releaser: &Releaser, journal: &mut Journal, args: &Args) -> exit::Result {
    let id = journal.id.clone();
    releaser.carry_out(journal).with_context(|| {
        format!(
            "release {id} stopped (image_pins.json is untouched); `sunaba-images release \
             --resume {id}` continues it"
        )
    })?;
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
        crate::github::set_output("release_id", &id).context("writing the step outputs")?;
    }
    if args.json {
        super::write_json(&*journal)
    } else if args.notes.is_none() {
        out!("{text}")?;
        Ok(())
    } else {
        Ok(())
    }
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
