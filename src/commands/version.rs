//! `sunaba-images version`: the tool's own version, as `--version` prints
//! it (and as JSON, for a job that records which tool made an artifact).

use super::context::Context;
use crate::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  sunaba-images version\n  sunaba-images version --json")]
pub(crate) struct Args {
    /// Print `{"schema", "name", "version"}`.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn run(_ctx: &Context, args: Args) -> exit::Result {
    let (name, version) = (env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"));
    if args.json {
        return super::write_json(&serde_json::json!({"name": name, "version": version}));
    }
    outln!("{name} {version}")?;
    Ok(())
}
