//! `sunaba-images pin [ALIAS…]`: plans which image each alias moves to under
//! the semver rules, shows the plan, and writes it with `--write`.

use super::ArgsError;
use super::context::{Context, PinsOptions, RegistryOptions};
use crate::exit;
use crate::fsutil::FileLock;
use crate::pins::PinsFile;
use crate::pins::plan::{self, Action, AliasSpec, Plan, Request};
use crate::semver_rules::SelectOptions;
use crate::table::{Column, Table};
use anyhow::Context as _;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images pin\n  sunaba-images pin python --to 1.4.0 --write"
)]
pub(crate) struct Args {
    /// Aliases to move (default: every alias in images.toml).
    pub aliases: Vec<String>,
    /// Consider pre-release versions (X.Y.Z-rc.N).
    #[arg(long)]
    pub pre: bool,
    /// Allow moving to another major version (0.x: another minor).
    #[arg(long)]
    pub allow_major: bool,
    /// Allow moving to a lower version.
    #[arg(long)]
    pub allow_downgrade: bool,
    /// Allow dropping pins of aliases images.toml no longer declares.
    #[arg(long)]
    pub allow_breaking: bool,
    /// Pin exactly this version (needs exactly one alias).
    #[arg(long, value_name = "X.Y.Z")]
    pub to: Option<semver::Version>,
    /// Apply the plan to the pins file (default: only show it).
    #[arg(long)]
    pub write: bool,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub file: PinsOptions,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    if args.to.is_some() && args.aliases.len() != 1 {
        return Err(ArgsError::ToWithoutOneAlias.into());
    }
    let settings = ctx.settings()?;
    let specs = ctx.alias_specs()?;
    AliasSpec::check_declared(&specs, &args.aliases)?;
    let source = ctx.image_source(&args.registry)?;
    let path = &ctx.pins_path(&args.file);

    // Planning happens inside the lock when writing, on a fresh read, so a
    // concurrent writer's update is part of what we write back.
    let _lock = if args.write {
        Some(FileLock::acquire(path).context("cannot lock the pins file")?)
    } else {
        None
    };
    let (file, text) = PinsFile::load(path)?.unwrap_or_default();
    let repository = settings
        .repository
        .parse()
        .context("images.toml `repository`")?;
    let req = Request {
        repository: &repository,
        specs: &specs,
        only: &args.aliases,
        select: SelectOptions {
            pre: args.pre,
            allow_major: args.allow_major,
            allow_downgrade: args.allow_downgrade,
            to: args.to.clone(),
        },
        allow_breaking: args.allow_breaking,
        path,
        text: &text,
    };
    let plan = ctx
        .block_on(plan::plan(&req, &file, &source))?
        .context("nothing was written")?;

    let written = args.write && plan.write(&file, path)?;

    if args.json {
        super::write_json(&plan::Report::new(&plan, path, written))?;
    } else {
        print_plan(&plan)?;
        if plan.is_noop() {
            outln!("nothing to do: {} is up to date", path.display())?;
        } else if written {
            outln!("wrote {}", path.display())?;
        } else {
            outln!("dry run: pass --write to update {}", path.display())?;
        }
    }
    Ok(())
}

fn print_plan(plan: &Plan) -> exit::Result {
    let mut table = Table::new([Column::left(); 6]);
    table.row(["ALIAS", "VARIANT", "ACTION", "VERSION", "BUMP", "DIGEST"]);
    for s in &plan.steps {
        let old = s.old.as_ref().map(|p| p.version.to_string());
        let new = s.new.as_ref().map(|p| p.version.to_string());
        let version = match (s.action, &old, &new) {
            (Action::Keep, Some(o), _) => o.clone(),
            (Action::Remove, Some(o), _) => format!("{o} -> (removed)"),
            (_, Some(o), Some(n)) => format!("{o} -> {n}"),
            (_, None, Some(n)) => format!("(none) -> {n}"),
            _ => "-".into(),
        };
        let digest = s
            .new
            .as_ref()
            .or(s.old.as_ref())
            .map(|p| p.digest.to_string())
            .unwrap_or_default();
        let action = match s.action {
            Action::Add => "add",
            Action::Update => "update",
            Action::Remove => "REMOVE",
            Action::Keep => "keep",
        };
        table.row([
            s.alias.clone(),
            s.variant.clone().unwrap_or_else(|| "-".into()),
            action.into(),
            version,
            match s.action {
                Action::Keep => "-".into(),
                Action::Add => "new".into(),
                _ => s.bump.to_string(),
            },
            digest,
        ]);
    }
    for (i, line) in table.lines().iter().enumerate() {
        outln!("{}", line.trim_end())?;
        if i == 0 {
            continue;
        }
        let step = &plan.steps[i - 1];
        for t in &step.tools {
            outln!("    {t}")?;
        }
        for sk in &step.skipped {
            eprintln!(
                "warning: {}: not pinning {}: {}",
                step.alias, sk.tag, sk.reason
            );
        }
    }
    Ok(())
}
