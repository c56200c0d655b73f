//! Shell completions and man pages, generated from a clap command (the
//! commands pass the command line's own, so they cannot disagree with the
//! parser): completions with `clap_complete`, one man page per verb with
//! `clap_mangen`, named as git names its pages (`sunaba-images-build.1`; a
//! verb's own verbs too: `sunaba-images-pins-verify.1`), plus
//! `sunaba-images.1` for the whole tool.

use crate::fsutil::{self, FsError};
use std::path::{Path, PathBuf};

/// The program name completions and man pages are written for.
const BIN: &str = "sunaba-images";

#[derive(Debug, thiserror::Error)]
pub(crate) enum ManError {
    #[error("rendering the man page {name}: {source}")]
    Render {
        name: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Write(#[from] FsError),
}

/// The completion script of `shell` for the command line `cli`.
pub(crate) fn completions(shell: clap_complete::Shell, mut cli: clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cli, BIN, &mut out);
    out
}

/// Every man page of `cli`: (file name, roff text), the tool's first, then
/// each verb (and each of a verb's own verbs) in the order `--help` lists
/// them.
pub(crate) fn man_pages(mut root: clap::Command) -> Result<Vec<(String, Vec<u8>)>, ManError> {
    root.build();
    let mut pages = Vec::new();
    page(&root, BIN, BIN, &mut pages)?;
    Ok(pages)
}

/// The page of `cmd` as `name` (`sunaba-images-pins-verify`), its synopsis
/// the command as typed (`bin`: `sunaba-images pins verify`), then its
/// verbs' pages.
fn page(
    cmd: &clap::Command,
    name: &str,
    bin: &str,
    pages: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), ManError> {
    let named = cmd.clone().name(name.to_string()).bin_name(bin.to_string());
    let mut text = Vec::new();
    clap_mangen::Man::new(named)
        .render(&mut text)
        .map_err(|source| ManError::Render {
            name: name.to_string(),
            source,
        })?;
    pages.push((format!("{name}.1"), text));
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let verb = sub.get_name();
        page(
            sub,
            &format!("{name}-{verb}"),
            &format!("{bin} {verb}"),
            pages,
        )?;
    }
    Ok(())
}

/// Writes every man page of `cli` into `dir` (each atomically); returns
/// their paths.
pub(crate) fn write_man_pages(cli: clap::Command, dir: &Path) -> Result<Vec<PathBuf>, ManError> {
    let mut written = Vec::new();
    for (file, text) in man_pages(cli)? {
        let path = dir.join(file);
        fsutil::atomic_write(&path, &text)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction, Command};
    use clap_complete::Shell;

    fn cli() -> Command {
        Command::new(BIN)
            .about("a tool")
            .subcommand(
                Command::new("build")
                    .about("build it")
                    .arg(Arg::new("platform").long("platform").action(ArgAction::Set)),
            )
            .subcommand(
                Command::new("pins")
                    .about("pins")
                    .subcommand(Command::new("verify").about("verify them")),
            )
    }

    #[test]
    fn a_page_for_the_tool_and_each_verb_and_sub_verb_named_as_git_names_them() {
        let pages = man_pages(cli()).unwrap();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "sunaba-images.1",
                "sunaba-images-build.1",
                "sunaba-images-pins.1",
                "sunaba-images-pins-verify.1"
            ]
        );
        let build = String::from_utf8(pages[1].1.clone()).unwrap();
        assert!(build.contains(".TH sunaba-images-build 1"), "{build}");
        assert!(build.contains("\\-\\-platform"), "{build}");
        assert!(build.contains("sunaba\\-images build"), "{build}");

        let dir = tempfile::tempdir().unwrap();
        let written = write_man_pages(cli(), &dir.path().join("man")).unwrap();
        assert_eq!(written.len(), 4);
        assert_eq!(std::fs::read(&written[3]).unwrap(), pages[3].1);
    }

    #[test]
    fn completions_name_the_verbs() {
        let bash = String::from_utf8(completions(Shell::Bash, cli())).unwrap();
        assert!(bash.contains("sunaba__images,build)"), "{bash}");
        let fish = String::from_utf8(completions(Shell::Fish, cli())).unwrap();
        assert!(fish.contains("-a \"pins\""), "{fish}");
    }
}
