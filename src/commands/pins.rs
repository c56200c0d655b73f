//! `sunaba-images pins show|verify`: print what an alias is pinned to, or
//! check the pins against images.toml and the registry (the CI gate).

use super::context::{
    Context, OutputOptions, PLATFORM_HELP, PLATFORM_VALUE, PinsOptions, Platforms, RegistryOptions,
};
use crate::exit;
use crate::pins::PinsFile;
use crate::pins::attestations;
use crate::pins::verify::{self, Severity};
use anyhow::Context as _;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Sub {
    /// Print `repository@digest` of an alias (all aliases when none is named).
    Show(ShowArgs),
    /// Check the pins against images.toml and the registry (the CI gate).
    // Boxed: its options are far larger than `show`'s.
    Verify(Box<VerifyArgs>),
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images pins show\n  sunaba-images pins show python --json"
)]
pub(crate) struct ShowArgs {
    pub alias: Option<String>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub file: PinsOptions,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images pins verify\n  sunaba-images pins verify --key keys/release.pub\n  sunaba-images pins verify --rebuild python go"
)]
pub(crate) struct VerifyArgs {
    /// With --rebuild: the aliases to rebuild (all pinned ones when none
    /// are named).
    #[arg(requires = "rebuild")]
    pub aliases: Vec<String>,
    /// Also build the pinned aliases again from this checkout (no cache,
    /// every ancestor too, under the scratch local repository
    /// `<repository>-rebuild`; nothing is pushed) and hold each rebuild's
    /// release digest to its pin, per platform; a difference names the
    /// packages, the first differing layer and its entries.
    #[arg(long)]
    pub rebuild: bool,
    // With --rebuild: the platforms to rebuild.
    #[arg(
        long,
        value_name = PLATFORM_VALUE,
        help = PLATFORM_HELP,
        value_parser = Platforms::parse,
        requires = "rebuild"
    )]
    pub platform: Option<Platforms>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub output: OutputOptions,
    /// Also verify every pin's signed attestations (OCI referrers: a
    /// signature, provenance, test result and SBOM) with the SPKI PEM
    /// public key in PUB; give it again for each trusted key (a key being
    /// rotated in or out).
    #[arg(long, value_name = "PUB")]
    pub key: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub build: crate::build::BuildOptions,
    #[command(flatten)]
    pub file: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    match args.command {
        Sub::Show(a) => show(ctx, a),
        Sub::Verify(a) => verify(ctx, *a),
    }
}

fn load(path: &std::path::Path) -> anyhow::Result<(PinsFile, String)> {
    PinsFile::load(path)?.ok_or_else(|| {
        anyhow::anyhow!(
            "{} does not exist; create it with `sunaba-images pin --write`",
            path.display()
        )
    })
}

fn show(ctx: &Context, args: ShowArgs) -> exit::Result {
    // Only the file is needed; a server host may not have images.toml.
    let path = ctx.pins_path(&args.file);
    let (file, _) = load(&path)?;
    let selected: Vec<_> = match &args.alias {
        Some(alias) => vec![(alias, file.pin(alias, &path)?)],
        None => file.images.iter().collect(),
    };
    if args.json {
        let map: serde_json::Map<String, serde_json::Value> = selected
            .iter()
            .map(|(a, p)| {
                (
                    a.to_string(),
                    serde_json::json!({"reference": p.reference(), "version": p.version, "tag": p.tag}),
                )
            })
            .collect();
        super::write_json(&serde_json::json!({ "pins": map }))?;
    } else if args.alias.is_some() {
        outln!("{}", selected[0].1.reference())?;
    } else {
        for (alias, pin) in selected {
            outln!("{alias}\t{}", pin.reference())?;
        }
    }
    Ok(())
}

fn verify(ctx: &Context, args: VerifyArgs) -> exit::Result {
    let specs = ctx.alias_specs()?;
    let path = ctx.pins_path(&args.file);
    let (file, text) = load(&path)?;
    let keys = (args.key.iter())
        .map(|path| crate::attest::PublicKey::load(path))
        .collect::<Result<Vec<_>, _>>()?;
    let client = ctx.registry(&args.registry)?;
    let source = crate::pins::registry_source::RegistrySource::new(client.clone());
    // The pins and, with --key, every alias's attestations, read at once.
    let attested = (file.images.iter())
        .filter(|_| !keys.is_empty())
        .map(|(alias, pin)| {
            let spec = specs.iter().find(|s| &s.alias == alias);
            let smoke = spec.map(|s| s.smoke.as_slice()).unwrap_or_default();
            attestations::verify_pin(&client, alias, pin, smoke, &keys)
        });
    // Entered once: the pins verified (with their attestations), then
    // with --rebuild the aliases built again and held to their pins.
    let (mut findings, attested, verdicts) = ctx.block_on(async {
        let (findings, attested) = futures::join!(
            verify::verify(&file, &text, &path, &specs, &source),
            futures::future::join_all(attested)
        );
        let verdicts = match args.rebuild {
            true => rebuild(ctx, &args, &file, &specs, &client).await?,
            false => Vec::new(),
        };
        anyhow::Ok((findings, attested, verdicts))
    })??;
    findings.extend(attested.into_iter().flatten());
    findings.extend(verdicts.iter().filter_map(crate::rebuild::Verdict::finding));
    let count = |severity| findings.iter().filter(|f| f.severity == severity).count();
    let (problems, errors) = (count(Severity::Problem), count(Severity::Error));
    if args.output.github() {
        github(ctx, &findings, (&path, &text), &specs, args.json)?;
    }
    if args.json {
        // `rebuild` is empty without --rebuild: one shape whatever the flags.
        super::write_json(&serde_json::json!({
            "ok": problems + errors == 0, "findings": findings, "rebuild": verdicts,
        }))?;
    } else {
        for v in verdicts.iter().filter(|v| v.same) {
            outln!("ok: {} {}", v.alias, v.describe())?;
        }
        for f in &findings {
            outln!("{f}")?;
        }
        if problems + errors == 0 {
            outln!(
                "ok: {} alias(es) pinned and verified in {}",
                file.images.len(),
                path.display()
            )?;
        }
    }
    // Could not check is not the same as found wrong: CI must tell an
    // unreachable registry from broken pins.
    match (problems, errors) {
        (0, 0) => {}
        (problems, 0) => eprintln!("pins verify: {problems} problem(s)"),
        (problems, errors) => eprintln!(
            "pins verify: {problems} problem(s); {errors} check(s) could not be made (see the error lines)"
        ),
    }
    Ok(exit::Reported::verdict(problems, errors)?)
}

/// `--format github`: the findings as annotations and the step summary.
fn github(
    ctx: &Context,
    findings: &[verify::Finding],
    pins: (&std::path::Path, &str),
    specs: &[crate::pins::plan::AliasSpec],
    json: bool,
) -> exit::Result {
    let manifest = ctx.manifest()?;
    let text = std::fs::read_to_string(&manifest.path).unwrap_or_default();
    let files = crate::pins::github::Files {
        pins,
        manifest: Some((&manifest.path, &text, specs)),
    };
    let found = crate::pins::github::annotations("pins verify", findings, &files);
    let ok = "Every alias is pinned and verified.";
    super::report_findings(found, ok, json)
}

/// `--rebuild`: the named (or all pinned) aliases built again and held to
/// their pins, read through verify's `client` (its credentials, tokens and
/// per-registry limit, not a second set).
async fn rebuild(
    ctx: &Context,
    args: &VerifyArgs,
    file: &PinsFile,
    specs: &[crate::pins::plan::AliasSpec],
    client: &crate::registry::Client,
) -> anyhow::Result<Vec<crate::rebuild::Verdict>> {
    let path = ctx.pins_path(&args.file);
    let names: Vec<&String> = match args.aliases.is_empty() {
        true => file.images.keys().collect(),
        false => args.aliases.iter().collect(),
    };
    let mut targets = Vec::new();
    for alias in names {
        let pin = file.pin(alias, &path)?;
        let spec = specs
            .iter()
            .find(|s| &s.alias == alias)
            .with_context(|| format!("{alias} is pinned but not declared in images.toml"))?;
        targets.push(crate::rebuild::Target {
            alias: alias.clone(),
            variant: spec.variant.clone(),
            pin: pin.clone(),
        });
    }
    let family = crate::rebuild::scratch(&ctx.family()?);
    // The engine chosen and asked its platform: programs run, off the
    // async threads.
    let (engine, native) = tokio::task::block_in_place(|| {
        let engine = ctx.engine()?;
        eprintln!("engine: {}", engine.describe());
        let native = engine.platform().context("rebuilding the pinned images")?;
        anyhow::Ok((engine, native))
    })?;
    let platforms = Platforms::of_family(args.platform.as_ref(), &family)?;
    let reporter = || -> Box<dyn crate::build::progress::Reporter> {
        Box::new(crate::build::progress::PlainReporter::stderr())
    };
    let r = crate::rebuild::Rebuild {
        family: &family,
        manifest: ctx.manifest()?,
        settings: ctx.settings()?,
        engine: engine.as_ref(),
        native: &native,
        registry: client,
        build: &args.build,
        reporter: &reporter,
        progress: &|line| eprintln!("{line}"),
    };
    Ok(crate::rebuild::run(&r, &targets, platforms).await?)
}
