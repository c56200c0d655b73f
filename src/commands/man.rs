//! `sunaba-images man [--out-dir DIR]`: one man page per verb, written.

use super::context::Context;
use crate::exit;
use anyhow::Context as _;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images man\n  sunaba-images man --out-dir target/man && man -l target/man/sunaba-images-build.1"
)]
pub(crate) struct Args {
    /// Where to write the pages (created when missing).
    #[arg(long, value_name = "DIR", default_value = "target/man")]
    pub out_dir: PathBuf,
}

/// Writes the man pages of `cli`, the tool's command line (given by the
/// caller: a command does not reach up to the command line).
pub(crate) fn run(_ctx: &Context, args: Args, cli: clap::Command) -> exit::Result {
    let written = crate::clap_gen::write_man_pages(cli, &args.out_dir)
        .with_context(|| format!("writing the man pages into {}", args.out_dir.display()))?;
    outln!(
        "wrote {} man page(s) into {}",
        written.len(),
        args.out_dir.display()
    )?;
    Ok(())
}
