//! Shell completions and man pages from the clap definitions (issue 21):
//! `completions SHELL` prints a script naming every verb; `man --out-dir`
//! writes one page per verb. No engine, no registry.

use crate::support::{Cli, Project};
use std::collections::BTreeSet;

/// The verbs `--help` lists (`  name  about` lines under `Commands:`).
fn verbs(dir: &std::path::Path) -> Vec<String> {
    let run = Cli::new(dir)
        .args(["--help"])
        .stdout_free("parsed below")
        .run();
    run.stdout()
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .map(String::from)
        .collect()
}

#[test]
fn completions_for_bash_zsh_and_fish_name_every_verb() {
    let p = Project::empty();
    let verbs = verbs(p.path());
    assert!(verbs.contains(&"completions".to_string()), "{verbs:?}");
    assert!(verbs.len() >= 20, "{verbs:?}");
    for (shell, first) in [
        ("bash", "_sunaba__images() {"),
        ("zsh", "#compdef sunaba-images"),
        ("fish", "# Print an optspec for argparse"),
    ] {
        let run = Cli::new(p.path())
            .args(["completions", shell])
            .stdout_free("a completion script, checked below")
            .run();
        let text = run.stdout();
        assert!(text.starts_with(first), "{shell}: {}", &text[..80]);
        for verb in &verbs {
            let named = match shell {
                "bash" => format!("sunaba__images,{verb})"),
                "zsh" => format!("'{verb}:"),
                _ => format!("-a \"{verb}\""),
            };
            assert!(text.contains(&named), "{shell}: {verb} not completed");
        }
    }
    Cli::new(p.path())
        .args(["completions", "tcsh"])
        .status(64)
        .stderr_line("error: invalid value 'tcsh' for '<SHELL>'")
        .stderr_may(".*")
        .run();
}

#[test]
fn man_writes_a_page_per_verb() {
    let p = Project::empty();
    let verbs = verbs(p.path());
    let dir = p.join("out/man");
    let expected = 1 + verbs.len();
    let run = Cli::new(p.path())
        .args(["man", "--out-dir"])
        .arg(&dir)
        .stdout_like(format!(
            r"wrote \d+ man page\(s\) into {}",
            regex::escape(&dir.display().to_string())
        ))
        .run();
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(files.len() >= expected, "{files:?}");
    assert!(
        run.stdout()
            .contains(&format!("wrote {} man page(s)", files.len()))
    );
    for page in std::iter::once("sunaba-images".to_string())
        .chain(verbs.iter().map(|v| format!("sunaba-images-{v}")))
    {
        let text = std::fs::read_to_string(dir.join(format!("{page}.1")))
            .unwrap_or_else(|e| panic!("{page}.1: {e} (have {files:?})"));
        assert!(text.contains(&format!(".TH {page} 1")), "{page}: {text}");
    }
    // The default is target/man, relative to where it runs.
    Cli::new(p.path())
        .args(["man"])
        .stdout_like(r"wrote \d+ man page\(s\) into target/man")
        .run();
    assert!(p.join("target/man/sunaba-images-completions.1").is_file());
}

/// docs/cli.md, "Help and version": the verb and the flag print the same,
/// and `--json` has its schema; a bare-number duration is a usage error
/// that says what to write.
#[test]
fn version_is_the_version_flag_and_a_duration_needs_its_unit() {
    let p = Project::empty();
    let line = format!("sunaba-images {}\n", env!("CARGO_PKG_VERSION"));
    Cli::new(p.path()).args(["--version"]).stdout(&line).run();
    Cli::new(p.path()).args(["version"]).stdout(&line).run();
    let run = Cli::new(p.path())
        .args(["version", "--json"])
        .stdout_json()
        .run();
    assert_eq!(
        run.json(),
        serde_json::json!({"schema": "sunaba-images/version/v1", "name": "sunaba-images",
            "version": env!("CARGO_PKG_VERSION")})
    );
    Cli::new(p.path())
        .args(["tags", "127.0.0.1:1/x", "--registry-timeout", "30"])
        .status(64)
        .stderr_like(r"error: invalid value '30' for '--registry-timeout <DURATION>': `30` has no unit: write `30s` or `30m`")
        .stderr_may("")
        .stderr_may(r"For more information, try '--help'\.")
        .run();
}
