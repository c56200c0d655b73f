//! `sunaba-images completions SHELL`: the shell completion script, on stdout.

use super::context::Context;
use crate::exit;
use clap::CommandFactory as _;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  sunaba-images completions bash > ~/.local/share/bash-completion/completions/sunaba-images\n  sunaba-images completions zsh > ~/.zfunc/_sunaba-images"
)]
pub(crate) struct Args {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

pub(crate) fn run(_ctx: &Context, args: Args) -> exit::Result {
    let script = crate::clap_gen::completions(args.shell, crate::cli::Cli::command());
    out!("{}", String::from_utf8_lossy(&script))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap_complete::Shell;

    /// The real command line: every verb completed in each shell, and a
    /// man page for each.
    #[test]
    fn every_verb_is_completed_and_has_a_man_page() {
        let verbs: Vec<String> = crate::cli::Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        assert!(verbs.len() >= 20, "{verbs:?}");
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = crate::clap_gen::completions(shell, crate::cli::Cli::command());
            let text = String::from_utf8(text).unwrap();
            for verb in &verbs {
                let named = match shell {
                    Shell::Bash => format!("sunaba__images,{verb})"),
                    Shell::Zsh => format!("'{verb}:"),
                    _ => format!("-a \"{verb}\""),
                };
                assert!(text.contains(&named), "{shell}: no {named:?}");
            }
        }
        let pages = crate::clap_gen::man_pages(crate::cli::Cli::command()).unwrap();
        for verb in &verbs {
            let file = format!("sunaba-images-{verb}.1");
            assert!(pages.iter().any(|(n, _)| *n == file), "no {file}");
        }
    }
}
