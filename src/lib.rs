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
#[cfg(test)]
mod cli_rules;
pub(crate) mod commands;
pub(crate) mod detect;
pub(crate) mod duration;
pub(crate) mod engine;
pub(crate) mod error_chain;
pub(crate) mod exit;
pub(crate) mod failpoint;
pub(crate) mod feeds;
pub(crate) mod fsutil;
#[cfg(test)]
mod function_length_rule;
pub(crate) mod github;
pub(crate) mod image;
pub(crate) mod labels;
pub(crate) mod locks;
pub mod manifest;
pub(crate) mod name;
pub(crate) mod normalize;
pub(crate) mod outdated;
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
pub(crate) mod table;
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

/// The one rule of dependencies, checked on the source as go-containerregistry's
/// depcheck does: library modules never import `commands` or `cli`, and a
/// command never imports another (what several share is in
/// `commands/context.rs` or `commands/mod.rs`).
#[cfg(test)]
mod dependency_rule {
    use std::path::{Path, PathBuf};

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Code lines only: a comment may name a command.
    fn code(path: &Path) -> Vec<(usize, String)> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim_start().starts_with("//"))
            .map(|(n, l)| (n + 1, l.to_string()))
            .collect()
    }

    /// Where the rule is broken in the tree at `src`: `path:line: text`.
    fn violations(src: &Path) -> Vec<String> {
        let mut files = Vec::new();
        sources(src, &mut files);
        let commands_dir = src.join("commands");
        let commands: Vec<String> = files
            .iter()
            .filter(|f| f.parent() == Some(commands_dir.as_path()))
            .filter_map(|f| f.file_stem()?.to_str().map(str::to_string))
            .filter(|n| n != "mod" && n != "context")
            .collect();
        let mut found = Vec::new();
        for file in &files {
            let rel = file.strip_prefix(src).unwrap().display().to_string();
            let in_commands = file.starts_with(&commands_dir);
            for (line, text) in code(file) {
                let broken = if in_commands {
                    let own = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                    commands.iter().filter(|c| c.as_str() != own).any(|c| {
                        text.contains(&format!("super::{c}::"))
                            || text.contains(&format!("commands::{c}::"))
                            || text.contains(&format!("use super::{c};"))
                    }) && !rel.ends_with("commands/mod.rs")
                } else if ["lib.rs", "main.rs", "cli.rs", "cli_rules.rs"].contains(&rel.as_str()) {
                    false
                } else {
                    text.contains("crate::commands") || text.contains("crate::cli")
                };
                if broken {
                    found.push(format!("src/{rel}:{line}: {}", text.trim()));
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn library_modules_never_import_commands_and_commands_never_import_each_other() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let found = violations(&src);
        assert!(
            found.is_empty(),
            "the dependency rule is broken:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn the_check_sees_a_broken_rule() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::create_dir_all(src.join("commands")).unwrap();
        std::fs::create_dir_all(src.join("build")).unwrap();
        std::fs::write(src.join("commands/build.rs"), "use super::check::Args;\n").unwrap();
        std::fs::write(
            src.join("commands/check.rs"),
            "// super::build:: in a comment\n",
        )
        .unwrap();
        std::fs::write(
            src.join("build/mod.rs"),
            "use crate::commands::context::Context;\n",
        )
        .unwrap();
        assert_eq!(
            violations(src),
            [
                "src/build/mod.rs:1: use crate::commands::context::Context;",
                "src/commands/build.rs:1: use super::check::Args;",
            ]
        );
    }
}
