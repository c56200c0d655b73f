//! `sunaba-images plan [--json]`: what needs building and why — inputs
//! changed since the pinned image, the base moved, a new variant, a parent
//! rebuilt — decided from images.toml, the render and the published images'
//! labels, without an engine; `--json` is a GitHub Actions matrix.

use super::context::{Context, OutputOptions, PinsOptions, RegistryOptions};
use crate::build::definition;
use crate::build::needs::{self, BuildPlan, Published};
use crate::exit;
use crate::labels;
use crate::pins::PinsFile;
use crate::pins::next::current_pin;
use crate::registry::Reference;
use crate::table::{Column, Table};
use anyhow::Context as _;
use std::collections::BTreeMap;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print `{"has_work", "matrix": {"include": […]}, "legs": {"include":
    /// [one per platform]}, "variants"}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub output: OutputOptions,
    #[command(flatten)]
    pub file: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub fn run(ctx: &Context, args: Args) -> exit::Result {
    let family = ctx.family()?;
    let definitions = definition::all(&family).context("computing the definitions")?;
    let specs = ctx.alias_specs()?;
    let (pins, _) = PinsFile::load(&ctx.pins_path(&args.file))?.unwrap_or_default();
    let client = ctx.registry(&args.registry)?;
    let rt = super::context::runtime()?;

    let mut published: BTreeMap<String, Published> = BTreeMap::new();
    for v in &family.order {
        let Some((_, pin)) = current_pin(&pins, &specs, v) else {
            continue;
        };
        let reference: Reference = pin.reference().parse()?;
        let config = rt
            .block_on(client.image_config(&reference, None))
            .with_context(|| format!("{v}: reading the pinned image {reference}"))?;
        published.insert(
            v.clone(),
            Published {
                tag: pin.tag.clone(),
                labels: config.labels,
            },
        );
    }
    // The upstream is only looked up when a pinned image says what it was
    // built on.
    let roots_know_their_base = family.order.iter().any(|v| {
        family.variants[v].parent.is_none()
            && published
                .get(v)
                .is_some_and(|p| p.labels.contains_key(labels::OCI_BASE_DIGEST))
    });
    let base_now = if roots_know_their_base {
        // Pinned by digest: what a build uses now, without asking the registry.
        let upstream = family.upstream.pinned()?;
        upstream.digest().map(|d| d.to_string())
    } else {
        None
    };
    let variants: Vec<needs::Variant> = family
        .order
        .iter()
        .map(|v| needs::Variant {
            name: v,
            parent: family.variants[v].parent.as_deref(),
            definition: &definitions[v],
            published: published.get(v),
        })
        .collect();
    // One leg per platform; without `platforms`, the one a runner has.
    let platforms = if family.platforms.is_empty() {
        vec![crate::registry::Platform::host().normalized().to_string()]
    } else {
        family.platforms.clone()
    };
    let plan = BuildPlan::new(needs::needs(&variants, base_now.as_deref()), &platforms);

    let github = args.output.github();
    if github {
        crate::github::set_output("has_work", &plan.has_work.to_string())?;
        crate::github::set_output("matrix", &serde_json::to_string(&plan.matrix)?)?;
        crate::github::set_output("legs", &serde_json::to_string(&plan.legs)?)?;
        crate::github::summary(&summary(&plan))?;
    }
    if args.json {
        return super::write_json(&plan);
    }
    let mut table = Table::new([Column::left(); 3]);
    table.row(["VARIANT", "BUILD", "WHY"]);
    for n in &plan.variants {
        let why = match (&n.pinned, n.reasons.is_empty()) {
            (Some(tag), true) => format!("as published ({tag})"),
            _ => n
                .reasons
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        };
        table.row([n.variant.as_str(), if n.build { "yes" } else { "no" }, &why]);
    }
    out!("{}", table.render())?;
    outln!(
        "{} of {} variant(s) to build",
        plan.matrix.include.len(),
        plan.variants.len()
    )?;
    Ok(())
}

/// The plan as a step summary section.
fn summary(plan: &BuildPlan) -> String {
    let mut out =
        String::from("### What needs building\n\n| variant | build | why |\n| --- | --- | --- |\n");
    for n in &plan.variants {
        let why: Vec<String> = n.reasons.iter().map(ToString::to_string).collect();
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            n.variant,
            if n.build { "yes" } else { "no" },
            if why.is_empty() {
                "as published".to_string()
            } else {
                why.join("; ")
            }
        ));
    }
    out.push('\n');
    out
}
