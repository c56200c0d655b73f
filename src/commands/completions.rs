//! `sunaba-images completions SHELL`: the shell completion script, on stdout.

use super::context::Context;
use crate::exit;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images completions bash > ~/.local/share/bash-completion/completions/sunaba-images\n  sunaba-images completions zsh > ~/.zfunc/_sunaba-images"
)]
pub(crate) struct Args {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Prints the completion script of `cli`, the tool's command line (given by
/// the caller: a command does not reach up to the command line).
pub(crate) fn run(_ctx: &Context, args: Args, cli: clap::Command) -> exit::Result {
    let script = crate::clap_gen::completions(args.shell, cli);
    out!("{}", String::from_utf8_lossy(&script))?;
    Ok(())
}
