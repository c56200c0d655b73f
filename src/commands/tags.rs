//! `sunaba-images tags REPO`: every tag of a repository.

use super::context::{Context, RegistryOptions};
use crate::exit;
use crate::registry::Repository;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images tags 127.0.0.1:5000/sunaba/sandbox\n  sunaba-images tags 127.0.0.1:5000/sunaba/sandbox --json"
)]
pub(crate) struct Args {
    /// Repository, e.g. 127.0.0.1:5000/sunaba/sandbox (no tag).
    #[arg(value_name = "REPO")]
    pub repository: String,
    /// Print a JSON array.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub registry: RegistryOptions,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let repo: Repository = args.repository.parse()?;
    let client = ctx.registry(&args.registry)?;
    let tags = ctx.block_on(client.list_tags(&repo))??;
    if args.json {
        super::write_json(&serde_json::json!({"repository": repo.to_string(), "tags": tags}))?;
    } else {
        for t in &tags {
            outln!("{t}")?;
        }
    }
    Ok(())
}
