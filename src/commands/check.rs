//! `sunaba-images check [VARIANT…] [--image REF]`: runs each image's own
//! HEALTHCHECK and the variant's smoke suite in one sandbox under the run
//! contract, verifies the tools the variant owes and what each smoke case
//! did, enforces the size budget, and records a pass on the image as the
//! `dev.sunaba.check` label.

use super::context::{Context, OutputOptions};
use crate::check::{self, CheckReport};
use crate::exit;
use crate::labels;
use crate::name::Unknown;
use anyhow::Context as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Variants to check (their `<repository>:<variant>` images); all when
    /// none are named.
    pub variants: Vec<String>,
    /// Check this image instead, with the same healthcheck rules and smoke
    /// (the variant comes from the argument or the image's
    /// `dev.sunaba.variant` label): how a custom image proves it behaves
    /// like the family's.
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,
    /// Check the variants' images of this platform (`linux/arm64`: the
    /// `<repository>:<variant>-arm64` images `build --platform` tags), under
    /// emulation when it is not the engine's own.
    #[arg(long, value_name = "PLATFORM", conflicts_with = "image")]
    pub platform: Option<String>,
    /// Print the reports as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write a JUnit XML report (a testcase per tool, per smoke case).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Time limit of each image's check (its healthcheck and smoke, in one
    /// container; each smoke case also stops after 2 minutes).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Do not record a pass on the image.
    #[arg(long)]
    pub no_record: bool,
    #[command(flatten)]
    pub output: OutputOptions,
    /// Run only this smoke suite (repeatable; e.g. `--suite go` while
    /// working on the go fragment). A partial smoke is never recorded.
    #[arg(long = "suite", value_name = "NAME")]
    pub suites: Vec<String>,
}

pub fn run(ctx: &Context, args: Args) -> exit::Result {
    // Before anything is loaded or pulled.
    if args.image.is_some() && args.variants.len() > 1 {
        return Err(exit::Error::usage(
            "--image checks one image: name at most one variant",
        ));
    }
    if let Some(p) = &args.platform
        && let Err(e) = p.parse::<crate::registry::Platform>()
    {
        return Err(exit::Error::usage(format!("--platform {p}: {e}")));
    }
    let manifest = ctx.manifest()?;
    for suite in &args.suites {
        Unknown::check(
            "smoke suite",
            suite,
            "images.toml [smoke]",
            manifest.smoke.keys().map(String::as_str),
        )?;
    }
    for variant in &args.variants {
        manifest.variant(variant)?;
    }
    let family = ctx.family()?;
    if let Some(p) = &args.platform {
        family.check_platform(p)?;
    }
    let engine = ctx.engine()?;
    let native = engine.platform().context("reaching the container engine")?;

    let targets: Vec<(String, String)> = match &args.image {
        Some(reference) => {
            if engine.inspect(reference)?.is_none() {
                engine
                    .pull(reference, None)
                    .with_context(|| format!("pulling {reference}"))?;
            }
            let variant = match args.variants.as_slice() {
                [v] => v.clone(),
                _ => engine
                    .inspect(reference)?
                    .and_then(|i| i.labels.get(labels::VARIANT).cloned())
                    .with_context(|| {
                        format!(
                            "{reference} has no {} label: name the variant it \
                             should be checked as (`check VARIANT --image {reference}`)",
                            labels::VARIANT
                        )
                    })?,
            };
            vec![(variant, reference.clone())]
        }
        None => {
            let names = if args.variants.is_empty() {
                manifest.build_order()
            } else {
                args.variants.clone()
            };
            let foreign = args
                .platform
                .as_deref()
                .filter(|p| !crate::registry::same_platform(p, &native));
            names
                .into_iter()
                .map(|v| {
                    let r = family.platform_tag(&v, foreign);
                    (v, r)
                })
                .collect()
        }
    };

    let mut reports = Vec::new();
    for (variant, reference) in &targets {
        // Names from the command line are known by now; this one came
        // from the image's label (not a usage error: the image is wrong).
        let mut expect = family.expectation(variant).with_context(|| {
            format!(
                "{reference} is labelled as variant `{variant}`, which images.toml does not \
                 declare (declares: {}); name the variant to check it as",
                family.order.join(", ")
            )
        })?;
        if !args.suites.is_empty() {
            expect.smoke = expect.smoke.only(&args.suites);
        }
        // An image that cannot be checked (absent, no healthcheck, timed out)
        // is a failed check of that image, reported with the others.
        let mut report = match check::check_image(engine.as_ref(), reference, &expect, args.timeout)
        {
            Ok(r) => r,
            Err(e) => CheckReport::unchecked(variant, reference, expect.size_budget, e.to_string()),
        };
        if !args.suites.is_empty() {
            report.notes.push(format!(
                "only the smoke suite(s) {} ran: a partial smoke is not recorded",
                args.suites.join(", ")
            ));
        }
        if report.passed && !args.no_record && args.suites.is_empty() {
            report.recorded_id = family
                .record_pass(engine.as_ref(), reference, &report)
                .with_context(|| format!("recording the pass on {reference}"))?;
            if report.recorded_id.is_none() {
                eprintln!(
                    "note: {reference} is not a local tag of this family, so the pass is not recorded on it"
                );
            }
        }
        reports.push(report);
    }

    if args.output.github() {
        let text = std::fs::read_to_string(&manifest.path).unwrap_or_default();
        let found =
            check::github::annotations(&reports, (&manifest.path, &text), &manifest.default);
        // Workflow commands are read from both streams; stdout holds JSON.
        for a in found {
            if args.json {
                eprintln!("{a}");
            } else {
                outln!("{a}")?;
            }
        }
        crate::github::summary(&check::github::summary(&reports))
            .context("writing the step summary")?;
    }
    if args.json {
        super::write_json(&reports)?;
    } else {
        out!("{}", check::table(&reports))?;
    }
    if let Some(path) = &args.junit {
        check::write_junit(path, &reports)
            .with_context(|| format!("writing the JUnit report {}", path.display()))?;
    }
    if reports.iter().all(|r| r.passed) {
        Ok(())
    } else {
        Err(exit::Error::gate())
    }
}
