//! `sunaba-images tags REPO`: every tag of a repository.

use super::Global;
use super::resolve::{RegistryArgs, runtime};
use crate::registry::Repository;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Repository, e.g. 127.0.0.1:5000/sunaba/sandbox (no tag).
    #[arg(value_name = "REPO")]
    pub repository: String,
    /// Print a JSON array.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

pub fn run(global: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let repo: Repository = args.repository.parse()?;
    let client = args.registry.client(global)?;
    let tags = runtime()?.block_on(client.list_tags(&repo))?;
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&tags)?)?;
    } else {
        for t in &tags {
            writeln!(out, "{t}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
