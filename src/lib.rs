//! sunaba-images: builds, verifies and pins the Sunaba sandbox image family
//! declared in `images.toml`.

pub mod build;
pub mod check;
pub mod cli;
pub mod commands;
pub mod coverage;
pub mod detect;
pub mod engine;
pub mod fsutil;
pub mod manifest;
pub mod pins;
pub mod policy;
pub mod process;
pub mod registry;
pub mod render;

use std::process::ExitCode;

/// Parses the command line, runs the command and maps the outcome to an exit
/// status. Errors are printed once, with their whole context chain.
pub fn main_entry() -> ExitCode {
    use clap::Parser;
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cli::EXIT_FAILURE)
        }
    }
}
