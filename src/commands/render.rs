use super::Global;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Render in memory and fail with a diff when committed files differ.
    #[arg(long)]
    pub check: bool,
}

pub fn run(_global: &Global, _args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("render is being written")
}
