//! `sunaba-images update-base [--write] [--json]`: moves the upstream's pin
//! to the tag's current image when the images for the family's platforms
//! changed, editing images.toml in place and re-rendering.

use super::context::{Context, RegistryOptions, runtime};
use crate::base_update::{self, Plan};
use crate::exit;
use crate::fsutil::atomic_write;
use crate::manifest::Manifest;
use crate::manifest::edit::Editor;
use crate::registry::{Digest, Platform, Reference};
use crate::render;
use crate::table::{Column, Table};
use anyhow::{Context as _, anyhow};

#[derive(Debug, clap::Args)]
pub struct Args {
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
    pub registry: RegistryOptions,
}

/// Where the pin in force is kept.
enum Slot {
    /// A string in images.toml at this key path.
    File(Vec<String>),
    /// An environment variable (a profile's `upstream_env`): not ours to write.
    Env(String),
}

/// The pin in force, read leniently from images.toml (a tag-only upstream
/// is what this command exists to pin).
struct Target {
    slot: Slot,
    /// The text of the pin as written (`debian:trixie-slim@sha256:…`).
    text: String,
    /// The tag followed (a reference without digest).
    tracked: Reference,
    pinned: Option<Digest>,
}

impl Target {
    fn origin(&self) -> String {
        match &self.slot {
            Slot::File(path) => format!("images.toml `{}`", path.join(".")),
            Slot::Env(var) => format!("${var}"),
        }
    }
}

fn find_target(editor: &Editor, profile: Option<&str>) -> anyhow::Result<Target> {
    let in_profile = |key: &str| profile.and_then(|p| editor.string(&["profiles", p, key]));
    let (slot, text, tracks) = match (in_profile("upstream_env"), in_profile("upstream")) {
        (Some(var), tracks) => {
            let value = std::env::var(&var)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    anyhow!("the profile takes its upstream from ${var}, which is not set")
                })?;
            (Slot::Env(var), value, tracks)
        }
        (None, Some(text)) => (
            Slot::File(vec![
                "profiles".into(),
                profile.unwrap_or_default().into(),
                "upstream".into(),
            ]),
            text,
            None,
        ),
        (None, None) => {
            let text = editor
                .string(&["upstream"])
                .ok_or_else(|| anyhow!("images.toml has no `upstream`"))?;
            (Slot::File(vec!["upstream".into()]), text, None)
        }
    };
    let reference: Reference = text.parse()?;
    let tracked: Reference = match tracks {
        Some(t) => t.parse()?,
        None => match reference.tag() {
            Some(tag) => Reference::with_tag(reference.repo(), tag)?,
            None => anyhow::bail!("the upstream `{text}` names no tag to follow"),
        },
    };
    Ok(Target {
        slot,
        pinned: reference.digest().cloned(),
        text,
        tracked,
    })
}

/// The new text of the pin: the name as written, the new digest.
fn pinned_text(text: &str, digest: &Digest) -> String {
    let name = text.split_once('@').map_or(text, |(name, _)| name);
    format!("{name}@{digest}")
}

pub fn run(ctx: &Context, args: Args) -> exit::Result {
    let path = ctx.manifest_path().to_path_buf();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut editor = Editor::parse(&text)?;
    let target = find_target(&editor, ctx.profile())?;
    let declared = editor.strings(&["platforms"]);
    let platforms: Vec<Platform> = if declared.is_empty() {
        vec![Platform::host()]
    } else {
        declared
            .iter()
            .map(|p| p.parse())
            .collect::<Result<_, _>>()?
    };
    let insecure = ctx
        .profile()
        .map(|p| editor.strings(&["profiles", p, "insecure_registries"]))
        .unwrap_or_default();
    let client = ctx.registry_with(&args.registry, insecure)?;
    let plan = runtime()?
        .block_on(base_update::plan(
            &client,
            &target.tracked,
            target.pinned.as_ref(),
            &platforms,
            args.force,
        ))
        .with_context(|| format!("updating the upstream ({})", target.origin()))?;
    let new_text = pinned_text(&target.text, &plan.current.digest);

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

    if args.json {
        super::write_json(&serde_json::json!({
            "origin": target.origin(),
            "tag": plan.tag,
            "reference": target.text,
            "new_reference": new_text,
            "pinned": plan.pinned,
            "current": plan.current,
            "platforms": plan.platforms,
            "changed": plan.changed,
            "written": written,
        }))?;
    } else {
        report(&target, &plan)?;
    }
    let names = changed_platforms(&plan);
    match (plan.changed, written, &target.slot) {
        (false, _, _) => {
            eprintln!("update-base: up to date ({})", unchanged_note(&plan));
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
            Err(exit::Error::gate())
        }
        (true, false, Slot::File(_)) => {
            eprintln!(
                "update-base: the images for {names} changed; run `sunaba-images update-base --write`"
            );
            Err(exit::Error::gate())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_kept_as_written() {
        let d = Digest::sha256(b"x");
        assert_eq!(
            pinned_text("debian:trixie-slim@sha256:00", &d),
            format!("debian:trixie-slim@{d}")
        );
        assert_eq!(
            pinned_text("debian:trixie-slim", &d),
            format!("debian:trixie-slim@{d}")
        );
    }
}
