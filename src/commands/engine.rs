//! `sunaba-images engine`: which container engine the other commands would
//! use and how it builds (the rule lives in `engine::select`; scripts ask
//! this command instead of repeating it).

use super::context::Context;
use crate::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  sunaba-images engine\n  sunaba-images engine --json")]
pub(crate) struct Args {
    /// Print only the engine program's path.
    #[arg(long, conflicts_with = "json")]
    pub path: bool,
    /// Print JSON: program, description and platform.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let engine = ctx.engine()?;
    let program = engine.program().display().to_string();
    if args.path {
        outln!("{program}")?;
    } else if args.json {
        super::write_json(&serde_json::json!({
            "program": program,
            "engine": engine.describe(),
        }))?;
    } else {
        outln!("{}", engine.describe())?;
    }
    Ok(())
}
