//! `sunaba-images pins show|verify`: print what an alias is pinned to, or
//! check the pins against images.toml and the registry (the CI gate).

use super::context::{Context, PinsOptions, RegistryOptions};
use crate::exit;
use crate::pins::PinsFile;
use crate::pins::verify::{self, Severity};

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
    Verify(VerifyArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    pub alias: Option<String>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub file: PinsOptions,
}

#[derive(Debug, clap::Args)]
pub(crate) struct VerifyArgs {
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub file: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    match args.command {
        Sub::Show(a) => show(ctx, a),
        Sub::Verify(a) => verify(ctx, a),
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
        super::write_json(&map)?;
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
    let source = ctx.image_source(&args.registry)?;
    let findings = verify::verify(&file, &text, &path, &specs, &source);
    let count = |severity| findings.iter().filter(|f| f.severity == severity).count();
    let (problems, errors) = (count(Severity::Problem), count(Severity::Error));
    if args.json {
        let out = serde_json::json!({"ok": problems + errors == 0, "findings": findings});
        super::write_json(&out)?;
    } else {
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
        (0, 0) => Ok(()),
        (problems, 0) => {
            eprintln!("pins verify: {problems} problem(s)");
            Err(exit::Error::gate())
        }
        (problems, errors) => {
            eprintln!(
                "pins verify: {problems} problem(s); {errors} check(s) could not be made (see the error lines)"
            );
            Err(exit::Error::reported(exit::Status::Failure))
        }
    }
}
