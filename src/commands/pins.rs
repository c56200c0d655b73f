use super::Global;
use super::pin::{PinsPath, family};
use crate::cli::{EXIT_FAILURE, EXIT_GATE};
use crate::pins::PinsFile;
use crate::pins::registry_source::RegistrySource;
use crate::pins::verify::{self, Severity};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Print `repository@digest` of an alias (all aliases when none is named).
    Show(ShowArgs),
    /// Check the pins against images.toml and the registry (the CI gate).
    Verify(VerifyArgs),
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    pub alias: Option<String>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub file: PinsPath,
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub file: PinsPath,
}

pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Sub::Show(a) => show(global, a),
        Sub::Verify(a) => verify(global, a),
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

fn show(global: &Global, args: ShowArgs) -> anyhow::Result<ExitCode> {
    // Only the file is needed; a server host may not have images.toml.
    let path = args.file.path.clone().unwrap_or_else(|| {
        global
            .manifest
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join(crate::pins::FILE_NAME)
    });
    let (file, _) = load(&path)?;
    let selected: Vec<_> = match &args.alias {
        Some(alias) => match file.images.get_key_value(alias) {
            Some(kv) => vec![kv],
            None => {
                eprintln!(
                    "error: alias {alias:?} is not pinned in {} (pinned: {})",
                    path.display(),
                    file.images.keys().cloned().collect::<Vec<_>>().join(", ")
                );
                return Ok(ExitCode::from(EXIT_FAILURE));
            }
        },
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
        println!("{}", serde_json::to_string_pretty(&map)?);
    } else if args.alias.is_some() {
        println!("{}", selected[0].1.reference());
    } else {
        for (alias, pin) in selected {
            println!("{alias}\t{}", pin.reference());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn verify(global: &Global, args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let fam = family(global, &args.file)?;
    let (file, text) = load(&fam.pins_path)?;
    let source = RegistrySource::connect(&fam.settings)?;
    let findings = verify::verify(&file, &text, &fam.pins_path, &fam.specs, &source);
    let problems = findings
        .iter()
        .filter(|f| f.severity == Severity::Problem)
        .count();
    if args.json {
        let out = serde_json::json!({"ok": problems == 0, "findings": findings});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for f in &findings {
            println!("{f}");
        }
        if problems == 0 {
            println!(
                "ok: {} alias(es) pinned and verified in {}",
                file.images.len(),
                fam.pins_path.display()
            );
        }
    }
    Ok(if problems == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("pins verify: {problems} problem(s)");
        ExitCode::from(EXIT_GATE)
    })
}
