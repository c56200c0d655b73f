//! `sunaba-images compose VARIANT`: the plan of composing a union variant
//! (`full`) from its members' layers (see `crate::compose`): it reads the
//! parent's and each member's latest build from the engine (their variant
//! tags, checked or not; one `save` each, all at once) and prints the layers the composed image
//! would take, the paths its fragments share and the state files it
//! merges — or the conflict that refuses it, naming both fragments and the
//! path. Reads only; nothing is assembled or tagged.

use super::context::Context;
use crate::compose::{self, ComposeError, Plan};
use crate::exit;
use crate::family::short_hex;
use anyhow::Context as _;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images compose full\n  sunaba-images compose full --json"
)]
pub(crate) struct Args {
    /// The union variant (a parent, and two or more fragments each built
    /// alone by a variant on that parent).
    #[arg(value_name = "VARIANT")]
    pub variant: String,
    /// Print `{"variant", "parent", "parent_layers", "fragment_layers":
    /// [{"fragment", "variant", "diff_id", "paths"}], "shared": {"identical",
    /// "merged"}, "state_files": [{"path", "stanzas", "sha256"}], "dockerfile"}`
    /// (`dockerfile`: the variant's own steps, built over the composed layers).
    #[arg(long)]
    pub json: bool,
    /// Compare the variant's latest build (its variant tag: composed, by
    /// `build`) with IMAGE (the same variant built from its
    /// Dockerfile, e.g. its inputs tag from a plain `build`), path by path:
    /// type, mode, owner, size, content, link target. They may differ only
    /// in the order of the merged state files' stanzas; any other
    /// difference is listed and the exit status is 1. With `--json`:
    /// `{"composed", "built", "paths", "equivalent", "differences": [{"path",
    /// "composed", "built"}], "state_files": [{"path", "same_stanzas",
    /// "same_bytes"}]}`, schema `sunaba-images/compose-compare/v1`.
    #[arg(long, value_name = "IMAGE")]
    pub compare: Option<String>,
}

#[derive(serde::Serialize)]
struct Report<'a> {
    variant: &'a str,
    parent: &'a str,
    parent_layers: &'a [String],
    fragment_layers: Vec<serde_json::Value>,
    shared: serde_json::Value,
    state_files: Vec<serde_json::Value>,
    dockerfile: &'a str,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let recipe = compose::recipe(ctx.manifest()?, &args.variant)?;
    if let Some(built) = &args.compare {
        let composed = ctx.family()?.variant_tag(&recipe.variant);
        return compare(ctx, &composed, built, args.json);
    }
    let rendered = ctx.rendered()?;
    let dockerfile = rendered.variants[&recipe.variant]
        .composed_dockerfile
        .clone()
        .context("internal error: a composable variant has a composed Dockerfile")?;
    let family = ctx.family()?;
    let engine = ctx.engine()?;
    let images: Vec<(String, String)> = std::iter::once(&recipe.parent)
        .chain(recipe.members.iter().map(|m| &m.variant))
        .map(|v| (v.clone(), family.variant_tag(v)))
        .collect();
    let (mut ids, mut missing) = (Vec::new(), Vec::new());
    for (variant, image) in &images {
        match engine.inspect(image)? {
            Some(info) => ids.push(info.id),
            None => missing.push(variant.clone()),
        }
    }
    if !missing.is_empty() {
        return Err(ComposeError::NotBuilt {
            variant: recipe.variant.clone(),
            repository: family.repository.clone(),
            missing,
        }
        .into());
    }
    let shown: Vec<&str> = images.iter().map(|(_, i)| i.as_str()).collect();
    eprintln!("compose: reading {}", shown.join(", "));
    let plan = compose::read_images(&*engine, &images, &ids, None)
        .and_then(|read| compose::plan(&recipe, &family.fragment_scripts, read))
        .with_context(|| format!("planning the composition of `{}`", args.variant))?;
    if args.json {
        return super::write_json(&report(&plan, &dockerfile));
    }
    print(&plan)
}

fn report<'a>(plan: &'a Plan, dockerfile: &'a str) -> Report<'a> {
    Report {
        dockerfile,
        variant: &plan.recipe.variant,
        parent: &plan.recipe.parent,
        parent_layers: &plan.parent_layers,
        fragment_layers: plan
            .fragment_layers
            .iter()
            .map(|l| {
                serde_json::json!({
                    "fragment": l.member.fragment,
                    "variant": l.member.variant,
                    "diff_id": l.diff_id,
                    "paths": l.paths,
                })
            })
            .collect(),
        shared: serde_json::json!({
            "identical": plan.overlap.identical,
            "merged": plan.overlap.merged,
        }),
        state_files: plan
            .state
            .iter()
            .map(|s| {
                serde_json::json!({
                    "path": s.path,
                    "stanzas": s.stanzas,
                    "sha256": crate::registry::Digest::sha256(&s.bytes).to_string(),
                })
            })
            .collect(),
    }
}

fn print(plan: &Plan) -> exit::Result {
    let r = &plan.recipe;
    let names: Vec<&str> = r.members.iter().map(|m| m.fragment.as_str()).collect();
    outln!(
        "compose {}: {} + {} (a plan: nothing assembled)",
        r.variant,
        r.parent,
        names.join(" + ")
    )?;
    outln!("  {} layer(s) of {}", plan.parent_layers.len(), r.parent)?;
    for l in &plan.fragment_layers {
        outln!(
            "  {}'s fragment layer from {}: {} ({} paths)",
            l.member.fragment,
            l.member.variant,
            short_hex(&l.diff_id),
            l.paths
        )?;
    }
    let files: Vec<String> = plan
        .state
        .iter()
        .map(|s| format!("{} ({} stanzas)", s.path, s.stanzas))
        .collect();
    match files.is_empty() {
        true => outln!("  no state layer: no fragment changes dpkg's or apt's state")?,
        false => outln!("  a state layer: {}", files.join(", "))?,
    }
    outln!(
        "  then {}'s own steps: its Dockerfile without the fragments' RUN steps (`--json` \
         gives it)",
        r.variant
    )?;
    outln!(
        "paths the fragments share: {} identical, {} merged ({})",
        plan.overlap.identical.len(),
        plan.overlap.merged.len(),
        plan.overlap.merged.join(", ")
    )?;
    Ok(())
}

#[derive(serde::Serialize)]
struct Facts<'a> {
    kind: &'a str,
    mode: String,
    owner: String,
    size: u64,
    content: &'a str,
}

fn facts(f: &Option<crate::compose::overlap::Facts>) -> Option<Facts<'_>> {
    f.as_ref().map(|f| Facts {
        kind: f.kind,
        mode: format!("{:04o}", f.mode),
        owner: format!("{}:{}", f.uid, f.gid),
        size: f.size,
        content: &f.content,
    })
}

fn shown(f: &Option<crate::compose::overlap::Facts>) -> String {
    match facts(f) {
        None => "absent".into(),
        Some(f) => format!(
            "{} {} {} {} bytes {}",
            f.kind,
            f.mode,
            f.owner,
            f.size,
            crate::image::entries::shown(f.content)
        ),
    }
}

/// `compose VARIANT --compare BUILT`.
fn compare(ctx: &Context, composed: &str, built: &str, json: bool) -> exit::Result {
    eprintln!("compose: reading {composed} and {built}");
    let engine = &*ctx.engine()?;
    // One `save` of both: the layers they share are read once.
    let images = [composed, built].map(|i| (i.to_string(), i.to_string()));
    let ids = compose::image_ids(engine, &[composed, built].map(str::to_string))?;
    let read = compose::read_images(engine, &images, &ids, None)?;
    let [a, b] = [&read[0].1, &read[1].1]
        .map(|saved| compose::compare::filesystem(saved.layers.iter().map(|(_, l)| &**l)));
    let c = compose::compare::compare(&a, &b);
    if json {
        super::write_json_as(
            "compose compare",
            &serde_json::json!({
                "composed": composed,
                "built": built,
                "paths": c.paths,
                "equivalent": c.equivalent(),
                "differences": c.differences.iter().map(|d| serde_json::json!({
                    "path": d.path,
                    "composed": facts(&d.composed),
                    "built": facts(&d.built),
                })).collect::<Vec<_>>(),
                "state_files": c.state_files.iter().map(|s| serde_json::json!({
                    "path": s.path,
                    "same_stanzas": s.same_stanzas,
                    "same_bytes": s.same_bytes,
                })).collect::<Vec<_>>(),
            }),
        )?;
    } else {
        outln!(
            "compose: {} against {}: {} paths, {} differ",
            crate::image::entries::shown(composed),
            crate::image::entries::shown(built),
            c.paths,
            c.differences.len()
        )?;
        for s in &c.state_files {
            outln!(
                "  {}: {}",
                s.path,
                match (s.same_bytes, s.same_stanzas) {
                    (true, _) => "the same bytes",
                    (false, true) => "the same stanzas, in another order",
                    (false, false) => "DIFFERENT stanzas",
                }
            )?;
        }
        for d in c.differences.iter().take(200) {
            outln!(
                "  {}: composed {}; built {}",
                crate::image::entries::shown(&d.path),
                shown(&d.composed),
                shown(&d.built)
            )?;
        }
        if c.differences.len() > 200 {
            outln!(
                "  … and {} more (`--json` lists them all)",
                c.differences.len() - 200
            )?;
        }
    }
    if !c.equivalent() {
        return Err(ComposeError::NotEquivalent {
            composed: composed.to_string(),
            built: built.to_string(),
            paths: c.differences.len(),
            state: c.state_files.iter().any(|s| !s.same_stanzas),
        }
        .into());
    }
    Ok(())
}
