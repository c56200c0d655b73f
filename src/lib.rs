//! sunaba-images: builds, verifies and pins the Sunaba sandbox image family
//! declared in `images.toml`. The modules, in pipeline order, and the one
//! dependency rule (commands → library, never the reverse) are described in
//! docs/architecture.md.

pub mod attest;
pub(crate) mod base_update;
pub(crate) mod build;
pub(crate) mod check;
pub(crate) mod clap_gen;
pub(crate) mod cli;
pub(crate) mod commands;
pub(crate) mod compose;
pub(crate) mod detect;
pub(crate) mod duration;
pub(crate) mod engine;
pub(crate) mod error_chain;
pub(crate) mod exit;
pub(crate) mod failpoint;
pub(crate) mod family;
pub(crate) mod fsutil;
pub(crate) mod github;
pub(crate) mod image;
pub(crate) mod labels;
pub(crate) mod locks;
pub mod manifest;
pub(crate) mod name;
pub(crate) mod normalize;
pub(crate) mod outdated;
pub(crate) mod package_indexes;
pub mod pins;
pub(crate) mod process;
pub(crate) mod rebuild;
pub mod registry;
pub(crate) mod release;
pub(crate) mod render;
pub(crate) mod run_contract;
pub(crate) mod scaffold;
pub(crate) mod scratch;
pub(crate) mod semver_rules;
pub(crate) mod smoke;
#[cfg(test)]
mod structure_tests;
pub(crate) mod table;
pub(crate) mod timestamp;
pub(crate) mod versions;

use std::process::ExitCode;

/// Parses the command line, runs the command and maps the outcome to an exit
/// status, once ([`exit::report`]). A usage error exits 64, never the gate's
/// 2; `--help` and `--version` print to stdout and exit 0.
pub fn main_entry() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let parsed = cli::Cli::command()
        .try_get_matches()
        .and_then(|m| Ok((cli::Cli::from_arg_matches(&m)?, verb_path(&m))));
    let (cli, verb) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::Status::Usage.into()
            } else {
                exit::Status::Success.into()
            };
        }
    };
    // Stale scratch of killed runs swept, Ctrl-C handled, this run's
    // scratch removed however the verb ends.
    let _scratch = scratch::Session::start();
    exit::report(cli.run(verb), commands::ERROR_KINDS)
}

/// The verb a command line runs, with its own verbs: `pins verify`.
fn verb_path(matches: &clap::ArgMatches) -> String {
    let mut path = Vec::new();
    let mut at = matches;
    while let Some((name, sub)) = at.subcommand() {
        path.push(name);
        at = sub;
    }
    path.join(" ")
}
