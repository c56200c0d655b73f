//! `sunaba-images run ALIAS [-- CMD…]`: starts the alias's pinned image as a
//! sandbox under the run contract (`run_contract`), or prints the command
//! line (`--print`) or argv (`--json`) that would.

use super::ArgsError;
use super::context::{Context, PinsOptions};
use crate::exit;
use crate::name::Image;
use crate::pins::PinsFile;
use crate::process::Cmd;
use crate::run_contract::{self, Directive};
use anyhow::Context as _;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images run full -- rg -n TODO\n  echo x | sunaba-images run -i python -- cat\n  sunaba-images run python --print"
)]
pub(crate) struct Args {
    /// The alias whose pinned digest runs (image_pins.json). With `--image`,
    /// only a label.
    #[arg(required_unless_present = "image")]
    pub alias: Option<String>,
    /// Run this image instead of a pinned one (an unpinned build, say): a
    /// reference or an image ID, refused unless it parses as one.
    #[arg(long, value_name = "REF")]
    pub image: Option<Image>,
    /// The directory mounted read-write at /workspace (default: the current one).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Give the sandbox a network (default: none).
    #[arg(long)]
    pub network: bool,
    /// Memory cap in whole GiB (default: the engine's memory minus 3 GiB; at least 4).
    #[arg(long, value_name = "GIB")]
    pub memory: Option<u64>,
    /// CPUs (whole cores, at most the engine's; default: unbounded).
    #[arg(long, value_name = "N")]
    pub cpus: Option<u32>,
    /// Pass this variable of your environment into the sandbox (repeatable).
    /// Credentials and engine settings are refused (see docs/run-contract.md).
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// An allowed runtime directive: `--gpus=all`, `--shm-size=<n>[k|m|g]`.
    #[arg(long = "directive", value_name = "D", allow_hyphen_values = true)]
    pub directives: Vec<String>,
    /// Keep stdin open for the command (as `docker run -i`); without it the
    /// sandbox gets stdin only when ours is a terminal, so a script's pipe
    /// is never taken for the command's input.
    #[arg(long, short = 'i')]
    pub interactive: bool,
    /// Allocate a pseudo-terminal (as `docker run -t`); the default when
    /// both our stdin and stdout are terminals.
    #[arg(long, short = 't')]
    pub tty: bool,
    /// Print the engine command line, shell-quoted, instead of running it.
    #[arg(long)]
    pub print: bool,
    /// With --print: print `{"schema", "argv": […]}` instead of the
    /// shell-quoted line.
    #[arg(long, requires = "print")]
    pub json: bool,
    #[command(flatten)]
    pub file: PinsOptions,
    /// The command to run (default: the image's own).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let pin = match (&args.image, &args.alias) {
        (Some(_), _) => None,
        (None, Some(alias)) => Some(pinned(ctx, &args.file, alias)?),
        (None, None) => unreachable!("clap requires an alias or --image"),
    };
    let workspace = workspace(args.workspace.clone())?;

    let env = run_contract::allowed_env(&args.env, &run_contract::caller_env())?;
    for name in args.env.iter().filter(|n| !env.contains(n)) {
        eprintln!("note: {name} is not set here, so it is not passed");
    }
    let directives = Directive::parse_all(&args.directives)?;

    let engine = ctx.engine()?;
    let image = match (&pin, &args.image) {
        (Some(pin), _) => {
            let platform = engine.platform().context("reaching the container engine")?;
            pin.image_for(&platform).map_err(anyhow::Error::msg)?
        }
        (None, Some(image)) => image.clone(),
        (None, None) => unreachable!("clap requires an alias or --image"),
    };
    let resources = engine
        .resources()
        .context("asking the engine for its memory and CPUs")?;
    let terminal = std::io::stdin().is_terminal();
    let ask = run_contract::Ask {
        alias: args.alias.clone(),
        network: args.network,
        memory_gib: args.memory,
        cpus: args.cpus,
        env,
        directives,
        command: args.command.clone(),
        interactive: args.interactive || terminal,
        tty: args.tty || (terminal && std::io::stdout().is_terminal()),
    };
    let sandbox = run_contract::sandbox(image, &workspace, &resources, ask, &mut |d| {
        eprintln!("warning: {d} dropped: the engine has no GPU runtime")
    })?;

    let cmd = sandbox.cmd(engine.as_ref());
    if args.json {
        return super::write_json(&serde_json::json!({"argv": argv(&cmd)?}));
    }
    if args.print {
        let words: Vec<String> = argv(&cmd)?
            .iter()
            .map(|w| crate::process::sh_quote(w))
            .collect();
        outln!("{}", words.join(" "))?;
        return Ok(());
    }
    exit::sandboxed(cmd.interactive()?)
}

/// The workspace directory: `--workspace` or the current one, canonical.
fn workspace(asked: Option<PathBuf>) -> exit::Result<PathBuf> {
    let workspace = asked
        .map_or_else(std::env::current_dir, Ok)
        .context("finding the workspace")?;
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("the workspace {} cannot be used", workspace.display()))?;
    if !workspace.is_dir() {
        return Err(ArgsError::WorkspaceNotADirectory(workspace).into());
    }
    Ok(workspace)
}

/// The pin of an alias (its repository parsed as the file was read).
fn pinned(ctx: &Context, file: &PinsOptions, alias: &str) -> exit::Result<crate::pins::Pin> {
    let path = ctx.pins_path(file);
    let (pins, _) = PinsFile::load(&path)?.with_context(|| {
        format!(
            "{} does not exist; pin the family first (`sunaba-images pin --write`) or name an image with --image",
            path.display()
        )
    })?;
    let pin = pins.pin(alias, &path).map_err(|unknown| {
        unknown.with_hint("name an image with --image to run an unpinned one")
    })?;
    Ok(pin.clone())
}

/// The engine argv, each word as text.
fn argv(cmd: &Cmd) -> anyhow::Result<Vec<String>> {
    std::iter::once(cmd.program())
        .chain(cmd.get_args().iter().map(|a| a.as_os_str()))
        .map(utf8)
        .collect()
}

fn utf8(arg: &std::ffi::OsStr) -> anyhow::Result<String> {
    arg.to_str()
        .map(str::to_string)
        .with_context(|| format!("{arg:?} is not UTF-8, so it cannot be printed as a command line"))
}
