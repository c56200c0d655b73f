//! `sunaba-images update-base [--write] [--json]`: moves the upstream's pin
//! to the tag's current image when the images for the family's platforms
//! changed, editing images.toml in place and re-rendering.

use super::context::{Context, OutputOptions, RegistryOptions};
use crate::base_update::target::{self, Slot, Target};
use crate::base_update::{self, Plan};
use crate::exit;
use crate::fsutil::atomic_write;
use crate::manifest::Manifest;
use crate::manifest::edit::Editor;
use crate::registry::Digest;
use crate::render;
use crate::table::{Column, Table};
use anyhow::Context as _;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images update-base\n  sunaba-images update-base --write"
)]
pub(crate) struct Args {
    /// Write the new pin into images.toml (comments and layout kept) and
    /// re-render the generated files.
    #[arg(long)]
    pub write: bool,
    /// Pin the tag's current image even when the images for the family's
    /// platforms are unchanged, or the pinned one is gone from the registry.
    #[arg(long)]
    pub force: bool,
    /// Print the decision as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub output: OutputOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let path = ctx.manifest_path().to_path_buf();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut editor = Editor::parse(&text)?;
    let target = target::find(&editor, ctx.profile())?;
    let platforms = target::platforms(&editor)?;
    let insecure = ctx
        .profile()
        .map(|p| editor.strings(&["profiles", p, "insecure_registries"]))
        .unwrap_or_default();
    let client = ctx.registry_with(&args.registry, insecure)?;
    let plan = ctx
        .block_on(base_update::plan(
            &client,
            &target.tracked,
            target.pinned.as_ref(),
            &platforms,
            args.force,
        ))?
        .with_context(|| format!("updating the upstream ({})", target.origin()))?;
    let new_text = target::pinned_text(&target.text, &plan.current.digest);

    let mut written = false;
    let mut rendered = 0;
    if plan.changed
        && args.write
        && let Slot::File(key) = &target.slot
    {
        let key: Vec<&str> = key.iter().map(String::as_str).collect();
        editor.set_string(&key, &new_text)?;
        atomic_write(&path, editor.text().as_bytes())?;
        written = true;
        rendered = rerender(&path)?;
    }

    if args.output.github() {
        github(&target, &plan, (&path, &text), written, args.json)?;
    }
    if args.json {
        super::write_json(&target::Report::new(&target, &plan, &new_text, written))?;
    } else {
        report(&target, &plan)?;
    }
    conclude(&target, &plan, written, rendered)
}

/// `--format github`: the pin that should move and was not written as an
/// annotation, and the step summary.
fn github(
    target: &Target,
    plan: &Plan,
    manifest: (&std::path::Path, &str),
    written: bool,
    json: bool,
) -> exit::Result {
    let found: Vec<_> = (plan.changed && !written)
        .then(|| target::annotation(target, plan, manifest))
        .into_iter()
        .collect();
    let ok = match written {
        true => format!("Wrote the new pin ({}).", plan.current.digest),
        false => format!("The upstream is up to date ({}).", unchanged_note(plan)),
    };
    super::report_findings(found, &ok, json)
}

/// The one-line verdict on stderr, and the gate's status when the pin
/// should move and was not written.
fn conclude(target: &Target, plan: &Plan, written: bool, rendered: usize) -> exit::Result {
    let names = changed_platforms(plan);
    match (plan.changed, written, &target.slot) {
        (false, _, _) => {
            eprintln!("update-base: up to date ({})", unchanged_note(plan));
            Ok(())
        }
        (true, true, _) => {
            eprintln!(
                "update-base: the images for {names} changed; wrote the new pin to {} and \
                 re-rendered {rendered} file(s)",
                target.origin()
            );
            Ok(())
        }
        (true, false, Slot::Env(var)) => {
            eprintln!(
                "update-base: the images for {names} changed; the pin is ${var}, which this \
                 command does not write (for the dev environment: `scripts/dev-env up` \
                 re-exports it)"
            );
            Err(exit::Reported::Findings.into())
        }
        (true, false, Slot::File(_)) => {
            eprintln!(
                "update-base: the images for {names} changed; run `sunaba-images update-base --write`"
            );
            Err(exit::Reported::Findings.into())
        }
    }
}

/// Re-renders after the manifest changed; returns how many files changed.
fn rerender(path: &std::path::Path) -> anyhow::Result<usize> {
    let manifest = Manifest::load(path).context("loading the updated manifest")?;
    let rendered = render::render(&manifest)?;
    let plan = render::plan(&rendered, &manifest.root)?;
    Ok(render::apply(&plan, &rendered, &manifest.root)?
        .written
        .len())
}

fn changed_platforms(plan: &Plan) -> String {
    let names: Vec<&str> = plan
        .platforms
        .iter()
        .filter(|p| p.changed)
        .map(|p| p.platform.as_str())
        .collect();
    if names.is_empty() {
        "no platform (forced)".into()
    } else {
        names.join(", ")
    }
}

fn unchanged_note(plan: &Plan) -> String {
    let all: Vec<&str> = plan
        .platforms
        .iter()
        .filter(|p| p.new.is_some())
        .map(|p| p.platform.as_str())
        .collect();
    match &plan.pinned {
        Some(p) if p.digest != plan.current.digest => format!(
            "the tag moved to {}, but not the images for {}",
            plan.current.digest.short(),
            all.join(", ")
        ),
        _ => format!(
            "the tag still points at the pinned image for {}",
            all.join(", ")
        ),
    }
}

fn report(target: &Target, plan: &Plan) -> exit::Result {
    let kind = |index: bool| if index { "index" } else { "manifest" };
    outln!("upstream  {} ({})", plan.tag, target.origin())?;
    match &plan.pinned {
        Some(p) => outln!("pinned    {} ({})", p.digest, kind(p.index))?,
        None => outln!("pinned    - (not pinned by digest)")?,
    }
    outln!(
        "current   {} ({})",
        plan.current.digest,
        kind(plan.current.index)
    )?;
    let mut table = Table::new([Column::left().gap("  "), Column::left(), Column::left()]);
    for p in &plan.platforms {
        let short = |d: &Option<Digest>| d.as_ref().map_or("-".to_string(), Digest::short);
        let (arrow, state) = match (&p.old, &p.new) {
            (None, None) => ("-".to_string(), "not offered"),
            _ if p.changed => (format!("{} -> {}", short(&p.old), short(&p.new)), "changed"),
            _ => (short(&p.new), "unchanged"),
        };
        table.row([p.platform.clone(), arrow, state.to_string()]);
    }
    out!("{}", table.render())?;
    Ok(())
}
