//! `new fragment`: a made-up toolchain scaffolded into a copy of the project
//! renders, passes the gate and is detected; bad input fails clearly and
//! writes nothing.

use crate::support::{Cli, Project, shipped_manifest, snapshot};
use std::path::PathBuf;

#[test]
fn a_scaffolded_toolchain_renders_passes_the_gate_and_is_detected() {
    let dir = Project::shipped();
    let root = dir.path();
    let before = snapshot(root);
    let original = std::fs::read_to_string(root.join("images.toml")).unwrap();
    let default = shipped_manifest()["default"].as_str().unwrap();
    Cli::new(root)
        .args(["new", "fragment", "quux", "--tool", "quuxc,quuxfmt"])
        .args(["--apt", "quux-tools", "--language", "quuxlang"])
        .args(["--marker", "quux.toml,Quuxfile", "--extension", "qx"])
        .stdout(format!(
            "created   docker/install-quux.sh\n\
             created   tests/smoke/quuxlang/pass/README.md\n\
             created   tests/smoke/quuxlang/defect/README.md\n\
             updated   images.toml\n\
             next:\n  \
             edit docker/install-quux.sh and the proposals at the end of images.toml (version \
             patterns, size budget), the smoke commands and tests/smoke/quuxlang/pass, defect\n  \
             sunaba-images render\n  \
             sunaba-images build quux {default}\n  \
             sunaba-images detect tests/smoke/quuxlang/pass\n  \
             (how-to: docs/adding-a-toolchain.md)\n"
        ))
        .run();
    let after = snapshot(root);
    let changed: Vec<&PathBuf> = after
        .iter()
        .filter(|(p, bytes)| before.get(*p) != Some(*bytes))
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        changed,
        [
            "docker/install-quux.sh",
            "images.toml",
            "tests/smoke/quuxlang/defect/README.md",
            "tests/smoke/quuxlang/pass/README.md",
        ]
        .map(PathBuf::from)
        .iter()
        .collect::<Vec<_>>()
    );
    // Every line of the old images.toml is still there, comments included,
    // in order (the default variant's two lists gained an entry).
    let text = std::fs::read_to_string(root.join("images.toml")).unwrap();
    let mut lines = text.lines();
    for line in original.lines() {
        if line.starts_with("fragments = ") || line.starts_with("serves = ") {
            continue;
        }
        assert!(lines.any(|l| l == line), "lost or moved: {line:?}");
    }
    let script = std::fs::read_to_string(root.join("docker/install-quux.sh")).unwrap();
    assert!(script.contains("\napt_install quux-tools\n"), "{script}");
    assert!(
        text.contains("quux-tools = { from = \"debian\" }"),
        "{text}"
    );

    Cli::new(root)
        .args(["render"])
        .stdout_line("created   docker/Dockerfile.quux")
        .stdout_line("created   docker/healthcheck/quux.sh")
        .stdout_line(format!("updated   docker/Dockerfile.{default}"))
        .stdout_line(format!("updated   docker/healthcheck/{default}.sh"))
        .stdout_like(r"render: 4 file\(s\) written, 0 removed, \d+ unchanged")
        .run();
    Cli::new(root)
        .args(["render", "--check"])
        .stdout_like(r"render --check: \d+ generated file\(s\) up to date")
        .run();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("Quuxfile"), "").unwrap();
    Cli::new(project.path())
        .args(["--manifest"])
        .args([root.join("images.toml")])
        .args(["detect", "."])
        .stdout("quuxlang  .  tools: quuxc (global)\n")
        .run();
}

#[test]
fn bad_input_to_the_scaffold_fails_clearly_and_writes_nothing() {
    let known = crate::support::shipped_variants().join(", ");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["go"],
            "error: new fragment go: fragment `go` already exists in images.toml; pick another \
             name (nothing is overwritten)"
                .into(),
        ),
        (
            vec!["quux", "--variant", "base"],
            "error: new fragment quux: variant `base` already exists in images.toml; pick \
             another name (nothing is overwritten)"
                .into(),
        ),
        (
            vec!["Quux"],
            "error: new fragment Quux: invalid fragment name `Quux`: use lowercase letters, \
             digits, `-` and `_`"
                .into(),
        ),
    ];
    for (args, stderr) in cases {
        let dir = Project::shipped();
        let before = snapshot(dir.path());
        dir.cli()
            .args(["new", "fragment"])
            .args(&args)
            .status(1)
            .stderr(format!("{stderr}\n"))
            .run();
        assert_eq!(before, snapshot(dir.path()), "{args:?} wrote something");
    }
    // A parent that is not a variant: a usage error, as everywhere.
    let dir = Project::shipped();
    let before = snapshot(dir.path());
    dir.cli()
        .args(["new", "fragment", "quux", "--parent", "no-such"])
        .status(64)
        .stderr(format!(
            "error: unknown variant `no-such` (images.toml declares: {known})\n"
        ))
        .run();
    assert_eq!(
        before,
        snapshot(dir.path()),
        "an unknown parent wrote something"
    );
    // A marker another language claims: the whole is validated first, and
    // the files already written are taken back.
    let dir = Project::shipped();
    let before = snapshot(dir.path());
    dir.cli()
        .args(["new", "fragment", "quux", "--language", "quuxlang"])
        .args(["--marker", "package.json"])
        .status(1)
        .stderr_line(
            "error: new fragment quux: the scaffolded images.toml would not be valid, so \
             nothing was written: images.toml: 1 problem(s):",
        )
        .stderr_like(
            r"  - line \d+: languages\.quuxlang\.markers: marker `package\.json` is also claimed by language `\w+` .*",
        )
        .run();
    assert_eq!(before, snapshot(dir.path()), "a file was left behind");
    assert!(!dir.path().join("tests/smoke/quuxlang").exists());
}

/// `--probe` on the dev engine (it installs from Debian's archive: network):
/// a real package's tool gets a pattern and `min` from what it printed, and
/// a package apt cannot find is refused with nothing written.
#[test]
#[ignore = "tier: engine"]
fn a_probe_proposes_the_pattern_from_what_the_tool_printed_and_refuses_a_missing_package() {
    let Some(s) = crate::support::services() else {
        return;
    };
    let dir = Project::shipped();
    let root = dir.path();
    let cli = |args: &[&str]| {
        Cli::new(root)
            .env("SUNABA_ENGINE", &s.engine)
            .env("SUNABA_BASE_REF", &s.base_ref)
            .args(["--profile", "local", "new", "fragment"])
            .args(args)
            .stderr_like("new fragment: probing .* in a container of .*")
    };
    cli(&["calc", "--tool", "bc", "--apt", "bc", "--probe"])
        .stdout_like("(created|updated) .*")
        .stdout_may("(next:|  .*)")
        .run();
    let text = std::fs::read_to_string(root.join("images.toml")).unwrap();
    let block = &text[text.find("[tools.bc]").expect("tools.bc written")..];
    let printed = regex::Regex::new(r"# the probe printed: (bc [0-9][^\n]*)\n")
        .unwrap()
        .captures(block)
        .unwrap_or_else(|| panic!("{block}"));
    assert!(
        block.contains("version = 'bc ([0-9]+\\.[0-9]+\\.[0-9]+)'\nmin = \""),
        "{block}"
    );
    let version = regex::Regex::new(r"bc ([0-9]+\.[0-9]+\.[0-9]+)").unwrap();
    let found = &version.captures(&printed[1]).unwrap()[1];
    assert!(block.contains(&format!("min = \"{found}\"")), "{block}");
    Cli::new(root)
        .args(["render"])
        .stdout_like("(created|updated) +docker/.*")
        .stdout_like(r"render: \d+ file\(s\) written, 0 removed, \d+ unchanged")
        .run();

    let dir = Project::shipped();
    let root = dir.path();
    let before_missing = snapshot(root);
    Cli::new(root)
        .env("SUNABA_ENGINE", &s.engine)
        .env("SUNABA_BASE_REF", &s.base_ref)
        .args(["--profile", "local", "new", "fragment", "zz"])
        .args(["--apt", "bc,no-such-package-sunaba", "--probe"])
        .status(1)
        .stderr_like("new fragment: probing .* in a container of .*")
        .stderr_line(
            "error: new fragment zz: apt cannot find no-such-package-sunaba in the upstream's \
             suites: check the name(s) (`apt-cache search`)",
        )
        .run();
    assert_eq!(
        before_missing,
        snapshot(root),
        "the refusal wrote something"
    );
}
