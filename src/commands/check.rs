//! `sunaba-images check [VARIANT…] [--image REF]`: runs each image's own
//! HEALTHCHECK in a locked-down container, verifies it asserts exactly the
//! tools the variant owes, enforces the size budget, and records a pass on the
//! image as the `dev.sunaba.check` label.

use super::Global;
use crate::check::{self, CheckReport, LABEL_VARIANT};
use crate::cli::EXIT_GATE;
use crate::engine::Engine;
use anyhow::{Context, bail};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Variants to check (their `<repository>:<variant>` images); all when
    /// none are named.
    pub variants: Vec<String>,
    /// Check this image instead (the variant comes from the argument or the
    /// image's `dev.sunaba.variant` label).
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,
    /// Print the reports as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write a JUnit XML report (one testcase per tool per image).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Time limit of each image's healthcheck run.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Do not record a pass on the image.
    #[arg(long)]
    pub no_record: bool,
}

pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let (manifest, settings, family) = super::build::load(global)?;
    let engine = crate::engine::select(settings.engine.as_deref())
        .context("choosing the container engine")?;
    engine.platform().context("reaching the container engine")?;

    let targets: Vec<(String, String)> = match &args.image {
        Some(reference) => {
            if engine.inspect(reference)?.is_none() {
                engine
                    .pull(reference)
                    .with_context(|| format!("pulling {reference}"))?;
            }
            let variant = match args.variants.as_slice() {
                [v] => v.clone(),
                [] => engine
                    .inspect(reference)?
                    .and_then(|i| i.labels.get(LABEL_VARIANT).cloned())
                    .with_context(|| {
                        format!(
                            "{reference} has no {LABEL_VARIANT} label: name the variant it \
                             should be checked as (`check VARIANT --image {reference}`)"
                        )
                    })?,
                _ => bail!("--image checks one image: name at most one variant"),
            };
            vec![(variant, reference.clone())]
        }
        None => {
            let names = if args.variants.is_empty() {
                manifest.build_order()
            } else {
                args.variants.clone()
            };
            names
                .into_iter()
                .map(|v| {
                    let r = family.variant_tag(&v);
                    (v, r)
                })
                .collect()
        }
    };

    let mut reports = Vec::new();
    for (variant, reference) in &targets {
        let expect = family.expectation(variant).with_context(|| {
            format!(
                "unknown variant `{variant}` (images.toml defines: {})",
                manifest.build_order().join(", ")
            )
        })?;
        // An image that cannot be checked (absent, no healthcheck, timed out)
        // is a failed check of that image, reported with the others.
        let mut report = match check::check_image(engine.as_ref(), reference, &expect, args.timeout)
        {
            Ok(r) => r,
            Err(e) => CheckReport {
                variant: variant.clone(),
                image: reference.clone(),
                image_id: String::new(),
                inputs: None,
                size: 0,
                size_budget: expect.size_budget,
                passed: false,
                tools: Vec::new(),
                problems: vec![e.to_string()],
                seconds: 0.0,
                recorded_id: None,
            },
        };
        if report.passed && !args.no_record {
            report.recorded_id = record(engine.as_ref(), &family, reference, &report)?;
        }
        reports.push(report);
    }

    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", check::table(&reports));
    }
    if let Some(path) = &args.junit {
        check::write_junit(path, &reports)
            .with_context(|| format!("writing the JUnit report {}", path.display()))?;
    }
    Ok(if reports.iter().all(|r| r.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_GATE)
    })
}

/// Labels the image with the pass (unless it already carries the same
/// record) and moves this variant's tags (the reference checked, the variant
/// tag and the inputs tag, where they point at the checked image) to the
/// labelled one. Tags of other repositories that share the image stay put.
fn record(
    engine: &dyn Engine,
    family: &crate::build::Family,
    reference: &str,
    report: &CheckReport,
) -> anyhow::Result<Option<String>> {
    let info = engine
        .inspect(&report.image_id)?
        .with_context(|| format!("{} disappeared during the check", report.image))?;
    if check::already_recorded(&info, report) {
        return Ok(Some(info.id));
    }
    let mut tags = vec![reference.to_string(), family.variant_tag(&report.variant)];
    if let Some(inputs) = &report.inputs {
        tags.push(family.inputs_tag(&report.variant, inputs));
    }
    tags.dedup();
    tags.retain(|t| info.repo_tags.contains(t));
    // BuildKit cannot build FROM a bare image ID: start from one of its tags.
    let Some(from) = tags.first() else {
        eprintln!(
            "note: {reference} is not a local tag of this family, so the pass is not recorded on it"
        );
        return Ok(None);
    };
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let id = check::record(engine, report, from, &tags, &now)?;
    Ok(Some(id))
}
