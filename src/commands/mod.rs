//! One module per verb, each with its `Args` and `run()`.

pub mod build;
pub mod check;
pub mod detect;
pub mod pin;
pub mod pins;
pub mod render;
pub mod resolve;
pub mod tags;
pub mod version;

use crate::cli::{Cli, Command};
use std::process::ExitCode;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = Global {
        manifest: cli.manifest,
        profile: cli.profile,
    };
    match cli.command {
        Command::Render(args) => render::run(&global, args),
        Command::Detect(args) => detect::run(&global, args),
        Command::Resolve(args) => resolve::run(&global, args),
        Command::Tags(args) => tags::run(&global, args),
        Command::Build(args) => build::run(&global, args),
        Command::Check(args) => check::run(&global, args),
        Command::Pin(args) => pin::run(&global, args),
        Command::Pins(args) => pins::run(&global, args),
        Command::Version(args) => version::run(&global, args),
    }
}

/// Options every command shares.
#[derive(Debug, Clone)]
pub struct Global {
    pub manifest: std::path::PathBuf,
    pub profile: Option<String>,
}
