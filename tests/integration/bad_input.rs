//! Bad input never panics: mutated images.toml and image_pins.json text
//! (lines deleted, duplicated or inserted, values swapped, random bytes)
//! through the public parsers and through the CLI. A parser answers with a
//! clean result or an error that says where; the CLI says what the parser
//! said and writes nothing.

use crate::support::{Project, repo_root, snapshot};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::path::Path;
use sunaba_images::manifest::{Manifest, ManifestError};
use sunaba_images::pins::{PinsError, PinsFile};

/// One change to a text, by line (indexes wrap around the line count).
#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Duplicate(usize),
    Insert(usize, String),
    /// Swap what follows the first `=` or `:` of two lines.
    SwapValues(usize, usize),
    /// Overwrite bytes at a position (wrapping around the text's length).
    Bytes(usize, Vec<u8>),
}

fn mutation(pool: &'static [&'static str]) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Duplicate),
        (any::<usize>(), prop::sample::select(pool))
            .prop_map(|(i, l)| Mutation::Insert(i, l.into())),
        (any::<usize>(), "\\PC{0,12}").prop_map(|(i, l)| Mutation::Insert(i, l)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapValues(a, b)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| Mutation::Bytes(i, b)),
    ]
}

fn mutations(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(pool), 1..5)
}

fn apply(text: &str, mutations: &[Mutation]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for m in mutations {
        let n = lines.len().max(1);
        match m {
            Mutation::Delete(i) if !lines.is_empty() => {
                lines.remove(i % n);
            }
            Mutation::Duplicate(i) if !lines.is_empty() => {
                let line = lines[i % n].clone();
                lines.insert(i % n, line);
            }
            Mutation::Insert(i, line) => lines.insert(i % (lines.len() + 1), line.clone()),
            Mutation::SwapValues(a, b) if !lines.is_empty() => {
                let split = |l: &str| {
                    l.find(['=', ':'])
                        .map(|at| (l[..=at].to_string(), l[at + 1..].to_string()))
                };
                let (a, b) = (a % n, b % n);
                if let (Some((ka, va)), Some((kb, vb))) = (split(&lines[a]), split(&lines[b])) {
                    lines[a] = format!("{ka}{vb}");
                    lines[b] = format!("{kb}{va}");
                }
            }
            Mutation::Bytes(i, bytes) => {
                let mut all = lines.join("\n").into_bytes();
                if !all.is_empty() {
                    let at = i % all.len();
                    for (k, b) in bytes.iter().enumerate() {
                        if let Some(slot) = all.get_mut(at + k) {
                            *slot = *b;
                        }
                    }
                }
                lines = String::from_utf8_lossy(&all)
                    .lines()
                    .map(str::to_string)
                    .collect();
            }
            _ => {}
        }
    }
    lines.join("\n") + "\n"
}

const TOML_LINES: &[&str] = &[
    "[variants.extra]",
    "[tools.git]",
    "parent = \"full\"",
    "parent = \"extra\"",
    "fragments = []",
    "fragments = [\"nope\"]",
    "aliases = [\"python\"]",
    "size_budget = \"12 parsecs\"",
    "min = \"not-a-version\"",
    "version = '([unclosed'",
    "probe = []",
    "script = \"/etc/passwd\"",
    "script = \"docker/../../x.sh\"",
    "default = \"minimal\"",
    "schema = 2",
    "provides = [\"git\", \"git\"]",
    "[profiles.local]",
    "x = { = }",
    "\"",
    "[[variants]]",
];

const JSON_LINES: &[&str] = &[
    "{",
    "}",
    "],",
    "\"schema\": 2,",
    "\"images\": [],",
    "\"digest\": \"sha256:00\",",
    "\"version\": \"1.0\",",
    "\"version\": 1,",
    "\"platforms\": {\"linux/amd64\": \"md5:1\"},",
    "\"tools\": null,",
    "\"extra\": {\"a\": [1, 2, {\"b\": null}]},",
    "\"\\ud800\",",
    "null",
];

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        // Report a failing case in the output; write no regression files.
        failure_persistence: None,
        ..Config::default()
    })
}

/// Where a manifest error says the problem is: a line, or a key.
fn manifest_error_names_a_place(e: &ManifestError) -> bool {
    match e {
        ManifestError::Invalid { problems, .. } => problems
            .iter()
            .all(|p| p.line.is_some() || !p.key.is_empty()),
        ManifestError::Parse { message, .. } => {
            regex::Regex::new(r"line \d+").unwrap().is_match(message)
        }
        other => other.to_string().contains('`'),
    }
}

#[test]
fn mutated_manifests_parse_or_name_where_they_are_wrong() {
    let project = Project::shipped();
    let path = project.path().join("images.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    runner(96)
        .run(&mutations(TOML_LINES), |m| {
            let mutated = apply(&text, &m);
            if let Err(e) = Manifest::from_str_at(&mutated, &path) {
                prop_assert!(
                    manifest_error_names_a_place(&e),
                    "no line or key in: {e}\n--- manifest:\n{mutated}"
                );
                prop_assert!(e.to_string().contains("images.toml"), "{e}");
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn render_of_a_mutated_manifest_says_what_the_parser_said_and_writes_nothing() {
    let text = std::fs::read_to_string(repo_root().join("images.toml")).unwrap();
    let rejected = std::cell::Cell::new(0);
    runner(24)
        .run(&mutations(TOML_LINES), |m| {
            let mutated = apply(&text, &m);
            let dir = Project::shipped();
            let path = dir.path().join("images.toml");
            // Only manifests the parser rejects; the others may render.
            let Err(e) = Manifest::from_str_at(&mutated, &path) else {
                return Ok(());
            };
            rejected.set(rejected.get() + 1);
            std::fs::write(&path, &mutated).unwrap();
            // Without one generated file, a write would be visible.
            std::fs::remove_file(dir.path().join("docker/Dockerfile.base")).unwrap();
            let before = snapshot(dir.path());
            dir.cli()
                .args(["render"])
                .status(1)
                .stderr(format!(
                    "error: loading the image family manifest: {}\n",
                    relative(&e.to_string(), dir.path())
                ))
                .run();
            prop_assert!(before == snapshot(dir.path()), "render wrote files");
            Ok(())
        })
        .unwrap();
    assert!(rejected.get() > 0, "no mutation was rejected");
}

/// An error message as the CLI, run in `dir`, words it: the manifest is
/// `images.toml`, and files beside it are under `./`.
fn relative(message: &str, dir: &Path) -> String {
    let dir = dir.display();
    message
        .replace(&format!("{dir}/images.toml"), "images.toml")
        .replace(&format!("{dir}/"), "./")
}

/// A pins file as `pin --write` writes it, with two aliases.
fn pins_text() -> String {
    let pin = |variant: &str, fill: &str| {
        serde_json::json!({
            "repository": "127.0.0.1:5000/sunaba/sandbox",
            "tag": format!("{variant}-1.2.3"),
            "version": "1.2.3",
            "digest": format!("sha256:{}", fill.repeat(64)),
            "platforms": {"linux/amd64": format!("sha256:{}", fill.repeat(64))},
            "tools": {"git": "2.47.3", "ca-certificates": "present"},
        })
    };
    let file = serde_json::json!({
        "schema": 1,
        "images": {"go": pin("go", "a"), "python": pin("python", "b")},
        "comment": "kept",
    });
    serde_json::to_string_pretty(&file).unwrap() + "\n"
}

#[test]
fn mutated_pins_files_parse_or_name_file_line_and_column() {
    let text = pins_text();
    let at = regex::Regex::new(r"^image_pins\.json:\d+:\d+: ").unwrap();
    PinsFile::parse(&text, Path::new("image_pins.json")).unwrap();
    runner(256)
        .run(&mutations(JSON_LINES), |m| {
            let mutated = apply(&text, &m);
            match PinsFile::parse(&mutated, Path::new("image_pins.json")) {
                Ok(_) => {}
                Err(e @ (PinsError::Parse { .. } | PinsError::Repository { .. })) => {
                    prop_assert!(at.is_match(&e.to_string()), "{e}");
                }
                Err(e) => prop_assert!(false, "not a parse error: {e}"),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn pin_write_on_a_mutated_pins_file_says_what_the_parser_said_and_writes_nothing() {
    let text = pins_text();
    // A registry nobody listens on: the file is refused before any request.
    let dir = Project::shipped_publishing_to("127.0.0.1:1/nowhere/sandbox");
    let pins = dir.path().join("image_pins.json");
    let rejected = std::cell::Cell::new(0);
    runner(24)
        .run(&mutations(JSON_LINES), |m| {
            let mutated = apply(&text, &m);
            let Err(e) = PinsFile::parse(&mutated, Path::new("image_pins.json")) else {
                return Ok(());
            };
            rejected.set(rejected.get() + 1);
            std::fs::write(&pins, &mutated).unwrap();
            // A repository that does not parse is bad input (64), said with
            // the parser's reason; a file that is no pins file is a failure.
            let (status, said) = match &e {
                PinsError::Repository { source, .. } => (64, format!("{e}: {source}")),
                _ => (1, e.to_string()),
            };
            dir.cli()
                .args(["--profile", "local", "pin", "--write"])
                .status(status)
                .stderr(format!("error: {said}\n"))
                .run();
            prop_assert!(std::fs::read_to_string(&pins).unwrap() == mutated);
            Ok(())
        })
        .unwrap();
    assert!(rejected.get() > 0, "no mutation was rejected");
}

/// Issue 28: a pins file is what a pull request changes, and its
/// `repository` went onto `docker run`'s command line as it was. Now every
/// command that reads the file refuses a repository that is no repository
/// as bad input (64), naming the file, line and column, the alias and the
/// text, before any engine or registry is asked (neither can be reached
/// here), and writes nothing.
#[test]
fn a_pinned_repository_that_is_no_repository_is_refused_by_every_command_that_reads_the_file() {
    let dir = Project::shipped_publishing_to("127.0.0.1:1/nowhere/sandbox");
    let pins = dir.path().join("image_pins.json");
    let text = pins_text().replacen(
        "\"repository\": \"127.0.0.1:5000/sunaba/sandbox\"",
        "\"repository\": \"-v=/:/host\"",
        2,
    );
    std::fs::write(&pins, &text).unwrap();
    let said = "error: image_pins.json:5:7: at `images.go.repository` (fix the file; nothing was \
                written): invalid image reference \"-v=/:/host\": a name cannot start with '-' \
                (a command line would read it as an option)\n";
    for args in [
        &["run", "go", "--print", "--", "true"][..],
        &["pins", "show"],
        &["pins", "show", "go"],
        &["pins", "verify"],
        &["pin", "--write"],
        &["sbom", "go"],
    ] {
        dir.cli()
            .env("SUNABA_ENGINE", "/nonexistent/bin/docker")
            .args(["--profile", "local"])
            .args(args)
            .status(64)
            .stderr(said)
            .run();
        assert_eq!(std::fs::read_to_string(&pins).unwrap(), text);
    }
}

#[test]
fn a_release_id_that_is_no_id_is_refused_before_it_names_a_journal_file() {
    let dir = Project::shipped_publishing_to("127.0.0.1:1/nowhere/sandbox");
    for (flag, id) in [
        ("--resume", "../../etc/x"),
        ("--rollback", "20261201T000001Z-0001/../../x"),
        ("--resume", "nope"),
    ] {
        dir.cli()
            .env("SUNABA_ENGINE", "/nonexistent/bin/docker")
            .args(["release", flag, id])
            .status(64)
            .stderr(format!(
                "error: invalid value '{id}' for '{flag} <ID>': `{id}` is not a release id (ids \
                 look like 20261202T051500.123Z-1a2b, or 20261202T051500Z-1a2b before \
                 milliseconds; the journals in target/sunaba-release/ are named by them)\n\nFor \
                 more information, try '--help'.\n"
            ))
            .run();
    }
    assert!(!dir.path().join("target/sunaba-release").exists());
}
