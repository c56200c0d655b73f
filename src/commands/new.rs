//! `sunaba-images new fragment NAME [--tool T,…] [--apt PKG,…] [--variant V]
//! [--parent P] [--language L --marker M,… --extension E,…]`: scaffolds a
//! toolchain (see [`crate::scaffold`]) and prints what to do next.

use super::context::Context;
use crate::engine::ToolRun;
use crate::exit;
use crate::scaffold::{self, Request};
use anyhow::Context as _;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum What {
    /// A toolchain fragment: its install script, its images.toml entries (tools,
    /// fragment, a variant, optionally a language with a smoke suite stub and sample
    /// projects). Refuses to overwrite anything.
    Fragment(FragmentArgs),
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images new fragment rust --tool cargo,rustc --apt cargo --language rust --marker Cargo.toml --extension rs"
)]
pub(crate) struct FragmentArgs {
    /// The fragment's name (also the variant's, unless --variant).
    pub name: String,
    /// The tools it provides [default: NAME].
    #[arg(long, value_delimiter = ',', value_name = "TOOL,…")]
    pub tool: Vec<String>,
    /// Debian packages the script installs (declared `from = "debian"`).
    #[arg(long, value_delimiter = ',', value_name = "PKG,…")]
    pub apt: Vec<String>,
    /// The variant carrying it [default: NAME].
    #[arg(long, value_name = "NAME")]
    pub variant: Option<String>,
    /// The variant's parent [default: the default variant's parent].
    #[arg(long, value_name = "VARIANT")]
    pub parent: Option<String>,
    /// A language verify dispatches to (running the first --tool): its [languages]
    /// entry, a smoke suite stub and sample projects; the fragment joins the default variant.
    #[arg(long, value_name = "L")]
    pub language: Option<String>,
    /// With --language: project marker files (`Cargo.toml`, `requirements*.txt`).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "FILE,…",
        requires = "language"
    )]
    pub marker: Vec<String>,
    /// With --language: single-file extensions, without the dot.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "EXT,…",
        requires = "language"
    )]
    pub extension: Vec<String>,
    /// Install the --apt packages in a throw-away container of the upstream (the
    /// engine, with network): refuse a package apt cannot find, propose each tool's
    /// version pattern and `min` from what it printed, and the budget from the size.
    #[arg(long, requires = "apt")]
    pub probe: bool,
}

/// Runs the probe container on the upstream in force.
fn probe(ctx: &Context, request: &Request) -> anyhow::Result<scaffold::Probe> {
    let image = ctx.settings()?.upstream.pinned()?.to_string();
    let engine = ctx.engine()?;
    let tools = if request.tools.is_empty() {
        vec![request.name.clone()]
    } else {
        request.tools.clone()
    };
    eprintln!(
        "new fragment: probing {} in a container of {image}",
        request.apt.join(", ")
    );
    let run = ToolRun {
        image: image.clone(),
        script: scaffold::probe_script(&request.apt, &tools),
        mounts: Vec::new(),
        env: Vec::new(),
        timeout: Duration::from_secs(900),
    };
    let out = engine.run_tool(&run)?;
    if !out.success() {
        anyhow::bail!(
            "the probe container of {image} failed: {}",
            crate::process::tail_lines(out.stderr.trim(), 3)
        );
    }
    Ok(scaffold::parse_probe(&out.stdout)?)
}

pub(crate) fn run(ctx: &Context, args: Args) -> exit::Result {
    let What::Fragment(args) = args.what;
    let manifest = ctx.manifest()?;
    // A name the command line gives that images.toml lacks is a usage
    // error, as in every command.
    if let Some(parent) = &args.parent {
        manifest.variant(parent)?;
    }
    let path = ctx.manifest_path();
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let request = Request {
        name: args.name,
        tools: args.tool,
        apt: args.apt,
        variant: args.variant,
        parent: args.parent,
        language: args.language,
        markers: args.marker,
        extensions: args.extension,
    };
    let probe = if args.probe {
        Some(probe(ctx, &request).with_context(|| format!("new fragment {}", request.name))?)
    } else {
        None
    };
    let plan = scaffold::plan(manifest, &text, &request, probe.as_ref())
        .with_context(|| format!("new fragment {}", request.name))?;
    let written = scaffold::write(&manifest.root, path, &plan)
        .with_context(|| format!("new fragment {}", request.name))?;
    for file in &written {
        let verb = if file.as_os_str() == "images.toml" {
            "updated"
        } else {
            "created"
        };
        outln!("{verb:<9} {}", file.display())?;
    }
    let name = &request.name;
    outln!("next:")?;
    outln!(
        "  edit docker/install-{name}.sh and the proposals at the end of images.toml \
         (version patterns, size budget){}",
        match &request.language {
            Some(l) => format!(", the smoke commands and tests/smoke/{l}/pass, defect"),
            None => String::new(),
        }
    )?;
    outln!("  sunaba-images render")?;
    outln!("  sunaba-images build {}", plan.variants.join(" "))?;
    if let Some(l) = &request.language {
        outln!("  sunaba-images detect tests/smoke/{l}/pass")?;
    }
    outln!("  (how-to: docs/adding-a-toolchain.md)")?;
    Ok(())
}
