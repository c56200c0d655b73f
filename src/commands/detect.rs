//! `sunaba-images detect PATH`: the languages verify would run for PATH, and
//! which tools (local or the image's).

use super::context::Context;
use crate::detect::{self, Detection, Evidence, Limits, Options};
use crate::exit;
use crate::table::{Column, Table};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images detect .\n  sunaba-images detect src/app.py --json"
)]
pub(crate) struct Args {
    /// File or directory verify would run on.
    pub path: PathBuf,
    /// Skip detection and use this language (a key of images.toml [languages]).
    #[arg(long, value_name = "L")]
    pub language: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The verify working directory: scopes are shown relative to it and a
    /// single file's local tools are looked up in it [default: PATH if it is
    /// a directory, else PATH's directory].
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Deepest directory level examined below PATH.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_depth)]
    pub max_depth: usize,
    /// Entries examined before the walk stops.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_entries)]
    pub max_entries: usize,
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let manifest = ctx.manifest()?;
    if let Some(language) = &args.language {
        let known = manifest.languages.keys().map(String::as_str);
        let unknown =
            crate::name::Unknown::check("language", language, "images.toml [languages]", known);
        unknown.map_err(|e| e.with_hint("name one of those, or add it to images.toml"))?;
    }
    let options = Options {
        language: args.language,
        workdir: args.workdir,
        limits: Limits {
            max_depth: args.max_depth,
            max_entries: args.max_entries,
        },
    };
    let detection = match detect::detect(&args.path, &options, &manifest.languages) {
        Ok(detection) => detection,
        Err(err) => {
            if let detect::DetectError::Unknown { warnings, .. } = &err {
                for warning in warnings {
                    eprintln!("warning: {warning}");
                }
            }
            return Err(
                anyhow::Error::new(err).context(format!("detecting {}", args.path.display()))
            );
        }
    };
    if args.json {
        super::write_json(&detection)?;
    } else {
        for warning in &detection.warnings {
            eprintln!("warning: {warning}");
        }
        out!("{}", human(&detection))?;
    }
    Ok(())
}

/// One line per language: `go  backend  tools: go (global), gofmt (global)`.
pub(crate) fn human(detection: &Detection) -> String {
    let mut table = Table::new([Column::left(), Column::left(), Column::left()]);
    for l in &detection.languages {
        let tools = l
            .tools
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let mut rest = format!("tools: {tools}");
        if let Evidence::TypescriptFile { tsconfig, .. } = &l.evidence {
            let found = tsconfig
                .as_ref()
                .map_or("none".to_string(), |p| p.display().to_string());
            rest.push_str(&format!("  tsconfig: {found}"));
        }
        table.row([l.language.clone(), l.scope.display().to_string(), rest]);
    }
    table.render()
}
