//! `sunaba-images detect` and the coverage gate, through the real binary.

use crate::support::{Cli, Project, Run};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn tree(root: &Path, files: &[&str]) {
    for file in files {
        let path = root.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "").unwrap();
    }
}

/// A copy of the shipped family, its missing fragment scripts stubbed,
/// made once per test process and only read: detect needs `[languages]`
/// only, but loads the validated manifest.
fn manifest_project() -> &'static Project {
    static PROJECT: std::sync::OnceLock<Project> = std::sync::OnceLock::new();
    PROJECT.get_or_init(|| {
        let p = Project::scratch("detect-manifest")
            .copy_of_shipped()
            .stub_missing_fragments();
        // Readable by the unprivileged child of the unreadable-directory test.
        fs::set_permissions(p.path(), fs::Permissions::from_mode(0o755)).unwrap();
        p
    })
}

/// `detect ARGS` in `dir` with the shipped manifest; `expect` declares the
/// outcome.
fn detect(dir: &Path, args: &[&str], expect: impl FnOnce(Cli) -> Cli) -> Run {
    let project = manifest_project();
    let cli = Cli::new(dir)
        .args(["--manifest"])
        .args([project.path().join("images.toml")])
        .args(["detect"])
        .args(args);
    expect(cli).run()
}

fn polyglot() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    tree(
        dir.path(),
        &[
            "backend/go.mod",
            "backend/main.go",
            "web/package.json",
            "web/tsconfig.json",
            "web/node_modules/eslint/package.json",
            "ml/pyproject.toml",
            "vendor/lib/setup.py",
        ],
    );
    let bin = dir.path().join("web/node_modules/.bin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(bin.join("eslint"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(bin.join("eslint"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(bin.join("jest"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(bin.join("jest"), fs::Permissions::from_mode(0o644)).unwrap();
    dir
}

#[test]
fn detect_prints_each_language_with_scope_and_tools() {
    let dir = polyglot();
    detect(dir.path(), &["."], |cli| {
        cli.stdout(
            "go      backend  tools: go (global), gofmt (global)\n\
             js      web      tools: eslint (local), jest (global)\n\
             python  ml       tools: ruff (global), pyright (global), pytest (global)\n\
             ts      web      tools: tsc (global), eslint (local), jest (global)\n",
        )
    });
}

#[test]
fn detect_json_gives_scopes_tools_and_resolution() {
    let dir = polyglot();
    let doc = detect(dir.path(), &["--json", "."], Cli::stdout_json).json();
    let langs = doc["languages"].as_array().unwrap();
    let summary: Vec<(String, String)> = langs
        .iter()
        .map(|l| {
            (
                l["language"].as_str().unwrap().to_string(),
                l["scope"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("go", "backend"),
            ("js", "web"),
            ("python", "ml"),
            ("ts", "web")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(
        langs[1]["tools"],
        serde_json::json!([
            {"tool": "eslint", "resolution": "local", "path": "web/node_modules/.bin/eslint"},
            {"tool": "jest", "resolution": "global"}
        ])
    );
    assert_eq!(
        langs[0]["evidence"],
        serde_json::json!({"rule": "marker", "markers": ["backend/go.mod"]})
    );
    assert_eq!(doc["walk"]["truncated"], false);
    assert_eq!(doc["warnings"], serde_json::json!([]));
    let target = dir.path().canonicalize().unwrap();
    assert_eq!(doc["target"], target.to_str().unwrap());
}

#[test]
fn detect_single_typescript_file_names_its_tsconfig() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["app/tsconfig.json", "app/src/ui/x.tsx"]);
    detect(
        dir.path(),
        &["--workdir", "app", "app/src/ui/x.tsx"],
        |cli| {
            cli.stdout(
                "ts  src/ui/x.tsx  tools: tsc (global), eslint (global), jest (global)  \
             tsconfig: tsconfig.json\n",
            )
        },
    );
}

#[test]
fn detect_unknown_fails_and_asks_for_a_language() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["README.md", "node_modules/x/package.json"]);
    // Every language images.toml declares is offered.
    let known: Vec<&String> = crate::support::shipped_manifest()["languages"]
        .as_table()
        .unwrap()
        .keys()
        .collect();
    let known = regex::escape(
        &known
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    );
    detect(dir.path(), &["."], |cli| {
        cli.status(1).stderr_like(format!(
            r"error: detecting \.: no language detected for .*: no project marker found \(.*\); name the language with --language \(one of: {known}\)",
        ))
    });

    detect(dir.path(), &["--language", "go", "."], |cli| {
        cli.stdout("go  .  tools: go (global), gofmt (global)\n")
    });
}

#[test]
fn detect_bounds_the_walk_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["a/b/c/d/go.mod", "package.json"]);
    detect(dir.path(), &["--max-depth", "3", "."], |cli| {
        cli.stdout("js  .  tools: eslint (global), jest (global)\n")
            .stderr_like(r"warning: depth limit 3 reached: 1 deeper entries not examined \(first: .*/a/b/c/d\); raise --max-depth or name the language")
    });
}

/// Tests run as root, which reads any directory; the unreadable directory is
/// therefore read by an unprivileged child (uid/gid 65534) in that case.
#[test]
fn detect_reports_an_unreadable_directory_and_keeps_going() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    tree(dir.path(), &["ok/go.mod", "locked/package.json"]);
    let locked = dir.path().join("locked");
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    let privileged = fs::read_dir(&locked).is_ok();
    let project = manifest_project();

    let expected = format!(
        "warning: could not read {}",
        dir.path().canonicalize().unwrap().join("locked").display()
    );
    let mut cli = Cli::new(dir.path())
        .args(["--manifest"])
        .args([project.path().join("images.toml")])
        .args(["detect", "."])
        .stdout("go  ok  tools: go (global), gofmt (global)\n")
        .stderr_like(format!("{}.*", regex::escape(&expected)));
    if privileged {
        cli = cli.uid_gid(65534, 65534);
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cli.run()));
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `render --check` runs the coverage gate.
#[test]
fn render_check_fails_when_the_default_image_loses_a_tool() {
    let dir = Project::shipped();
    let manifest = dir.path().join("images.toml");
    let text = fs::read_to_string(&manifest).unwrap();
    let before = "provides = [\"eslint\", \"tsc\", \"jest\"]";
    assert!(
        text.contains(before),
        "the js fragment changed; update this test"
    );

    dir.cli()
        .args(["render", "--check"])
        .stdout_like(r"render --check: \d+ generated file\(s\) up to date")
        .run();

    fs::write(
        &manifest,
        text.replace(before, "provides = [\"eslint\", \"tsc\"]"),
    )
    .unwrap();
    let gap = |language: &str| {
        format!(
            "coverage: default variant `full` does not owe tool `jest`, which language \
             `{language}` needs: add `jest` to the `provides` of a fragment of `full` (or \
             remove it from languages.{language}.tools)"
        )
    };
    dir.cli()
        .args(["render", "--check"])
        .status(2)
        .stderr(format!(
            "{}\n{}\nrender --check: 2 coverage problem(s) in images.toml; nothing was written\n",
            gap("js"),
            gap("ts")
        ))
        .run();
}

/// A family of the test's own whose `[languages]` is `languages`: detection
/// is images.toml data, so a language is lines there and no code.
fn own_family(languages: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("docker")).unwrap();
    fs::write(dir.path().join("docker/install-rust.sh"), "#!/bin/sh\n").unwrap();
    fs::write(
        dir.path().join("images.toml"),
        format!(
            r#"schema = 1
repository = "example.invalid/own"
upstream = "debian:trixie-slim@sha256:{zeros}"
default = "rust"

{languages}
[tools.cargo]
probe = ["cargo", "--version"]
version = 'cargo ([0-9]+\.[0-9]+\.[0-9]+)'

[fragments.rust]
script = "docker/install-rust.sh"
provides = ["cargo"]

[variants.rust]
fragments = ["rust"]
size_budget = "1GiB"
"#,
            zeros = "0".repeat(64)
        ),
    )
    .unwrap();
    dir
}

#[test]
fn a_language_added_in_images_toml_is_detected_by_its_marker_and_extension() {
    let family = own_family(
        "[languages.rust]\ntools = [\"cargo\"]\nmarkers = [\"Cargo.toml\"]\nextensions = [\"rs\"]\n",
    );
    let manifest = family.path().join("images.toml");
    let dir = tempfile::tempdir().unwrap();
    tree(
        dir.path(),
        &["Cargo.toml", "src/main.rs", "crates/util/Cargo.toml"],
    );
    let detect = |target: &str| {
        Cli::new(dir.path())
            .args(["--manifest"])
            .args([&manifest])
            .args(["detect", target])
    };
    // The nested crate folds into the workspace root's scope.
    detect(".").stdout("rust  .  tools: cargo (global)\n").run();
    let json = detect(".").args(["--json"]).stdout_json().run().json();
    assert_eq!(
        json["languages"][0]["evidence"],
        serde_json::json!({"rule": "marker", "markers": ["Cargo.toml", "crates/util/Cargo.toml"]})
    );
    detect("src/main.rs")
        .stdout("rust  main.rs  tools: cargo (global)\n")
        .run();

    // The list form declares tools only: no marker, so detection asks.
    let family = own_family("[languages]\nrust = [\"cargo\"]\n");
    Cli::new(dir.path())
        .args(["--manifest"])
        .args([family.path().join("images.toml")])
        .args(["detect", "."])
        .status(1)
        .stderr_like(
            r"error: detecting \.: no language detected for \S+: no project marker found \(images\.toml \[languages\] declares none\); name the language with --language \(one of: rust\)",
        )
        .run();
}
