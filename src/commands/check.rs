//! `sunaba-images check [VARIANT…] [--image REF]`: runs each image's own
//! HEALTHCHECK and the variant's smoke suite in one sandbox under the run
//! contract, verifies the tools the variant owes and what each smoke case
//! did, enforces the size budget, and records a pass on the image as the
//! `dev.sunaba.check` label. `check VARIANT --image REF` of a custom image
//! runs the project's rendered healthcheck instead (see `check`'s module
//! docs) and exits 0 when the image would serve as VARIANT.

use super::ArgsError;
use super::context::{Context, OutputOptions, PLATFORM_HELP, PLATFORM_VALUE, Platforms};
use crate::check;
use crate::exit;
use anyhow::Context as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images check python\n  sunaba-images check --suite go go\n  sunaba-images check python --image registry.example/team/custom:1"
)]
pub(crate) struct Args {
    /// Variants to check (their `<repository>:<variant>` images); all when
    /// none are named.
    pub variants: Vec<String>,
    /// Check this image instead (the variant comes from the argument or the
    /// image's `dev.sunaba.variant` label). An image that is not this
    /// family's VARIANT is a custom one: the project's rendered healthcheck
    /// of VARIANT is mounted and run (the image needs no HEALTHCHECK), the
    /// smoke runs under the run contract, its size and own HEALTHCHECK are
    /// information; exit 0 when it would serve as VARIANT.
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,
    // The variants' images of each platform (`linux/arm64`: the
    // `<repository>:<variant>-arm64` images `build --platform` tags), under
    // emulation when it is not the engine's own; a report per platform.
    #[arg(
        long,
        value_name = PLATFORM_VALUE,
        help = PLATFORM_HELP,
        value_parser = Platforms::parse,
        conflicts_with = "image"
    )]
    pub platform: Option<Platforms>,
    /// Print the reports as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write a JUnit XML report (a testcase per tool, per smoke case).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Time limit of each image's check: its healthcheck and smoke, in one
    /// container (`90s`, `10m`); each smoke case also stops after 2 minutes.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = crate::duration::parse)]
    pub check_timeout: Duration,
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

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    // Before anything is loaded or pulled.
    if args.image.is_some() && args.variants.len() > 1 {
        return Err(ArgsError::ImageWithVariants.into());
    }
    let request = |platform| check::pipeline::Request {
        variants: &args.variants,
        image: args.image.as_deref(),
        platform,
        suites: &args.suites,
        timeout: args.check_timeout,
        record: !args.no_record,
    };
    let manifest = ctx.manifest()?;
    check::pipeline::validate(manifest, &request(None))?;
    let family = ctx.family()?;
    let platforms = Platforms::of_family(args.platform.as_ref(), &family)?;
    let engine = ctx.engine()?;
    // A report per image per platform, one platform after the other.
    let mut reports = Vec::new();
    for platform in &platforms {
        let request = request(platform.as_ref());
        let note = &mut |n| eprintln!("{n}");
        reports.extend(check::pipeline::run(
            manifest,
            &family,
            engine.as_ref(),
            &request,
            note,
        )?);
    }

    if args.output.github() {
        let (found, summary) = check::github::output(&reports, manifest);
        super::report_gate(found, &summary, args.json)?;
    }
    if args.json {
        super::write_json(&serde_json::json!({ "reports": reports }))?;
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
        Err(exit::Reported::Findings.into())
    }
}
