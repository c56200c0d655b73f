//! sunaba-images: builds, verifies and pins the Sunaba sandbox image family
//! declared in `images.toml`. The modules, in pipeline order, and the one
//! dependency rule (commands → library, never the reverse) are described in
//! README.md ("Architecture").

pub mod base_update;
pub mod build;
pub mod check;
pub mod cli;
pub mod commands;
pub mod detect;
pub mod engine;
pub mod exit;
pub mod feeds;
pub mod fsutil;
pub mod github;
pub mod labels;
pub mod legs;
pub mod locks;
pub mod manifest;
pub mod normalize;
pub mod outdated;
pub mod pins;
pub mod policy;
pub mod process;
pub mod publish;
pub mod registry;
pub mod release;
pub mod render;
pub mod run_contract;
pub mod smoke;
pub mod table;

use std::process::ExitCode;

/// Parses the command line, runs the command and maps the outcome to an exit
/// status, once ([`exit::report`]). A usage error exits 64, never the gate's
/// 2; `--help` and `--version` print to stdout and exit 0.
pub fn main_entry() -> ExitCode {
    use clap::Parser;
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::Status::Usage.into()
            } else {
                exit::Status::Success.into()
            };
        }
    };
    exit::report(commands::run(cli))
}
