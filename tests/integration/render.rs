//! Rendering, the drift gate, manifest errors, and the generated
//! healthcheck's behaviour (run for real on the host with stand-in tools).

use crate::support::{self, Cli, Project, repo_root, snapshot};
use std::path::Path;

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.contains(from),
        "{} does not contain {from:?}",
        path.display()
    );
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// The `check` lines' tool names in a generated healthcheck.
fn healthcheck_tools(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("check "))
        .map(|rest| {
            rest.split_whitespace()
                .next()
                .unwrap()
                .trim_matches('\'')
                .to_string()
        })
        .collect()
}

#[test]
fn committed_tree_is_up_to_date_and_render_is_idempotent() {
    let root = repo_root();
    Cli::new(&root)
        .args(["render", "--check"])
        .stdout_like(r"render --check: \d+ generated file\(s\) up to date")
        .run();

    let dir = Project::shipped();
    let before = snapshot(dir.path());
    for _ in 0..2 {
        dir.cli()
            .args(["render"])
            .stdout_like(r"render: 0 file\(s\) written, 0 removed, \d+ unchanged")
            .run();
    }
    assert_eq!(
        before,
        snapshot(dir.path()),
        "rendering the committed tree twice changed files"
    );
}

#[test]
fn hand_edit_is_drift_with_a_diff_and_check_writes_nothing() {
    let dir = Project::shipped();
    let dockerfile = dir.path().join("docker/Dockerfile.python");
    edit(
        &dockerfile,
        "FROM ${PARENT_IMAGE}",
        "FROM ${PARENT_IMAGE}\nRUN echo hand-edit",
    );
    let before = snapshot(dir.path());
    dir.cli()
        .args(["render", "--check"])
        .status(2)
        .stdout_line("--- a/docker/Dockerfile.python (committed)")
        .stdout_line("+++ b/docker/Dockerfile.python (rendered)")
        .stdout_like(r"@@ -\d+,\d+ \+\d+,\d+ @@")
        .stdout_line("-RUN echo hand-edit")
        .stdout_may(" .*")
        .stderr(
            "render --check: 1 drifted, 0 missing, 0 stray; \
             run `sunaba-images render` and commit the result\n",
        )
        .run();
    assert_eq!(before, snapshot(dir.path()), "--check must not write");

    // A plain render repairs it.
    dir.cli()
        .args(["render"])
        .stdout_line("updated   docker/Dockerfile.python")
        .stdout_like(r"render: 1 file\(s\) written, 0 removed, \d+ unchanged")
        .run();
    dir.cli()
        .args(["render", "--check"])
        .stdout_like(r"render --check: \d+ generated file\(s\) up to date")
        .run();
}

#[test]
fn deleted_variant_names_the_stray_files() {
    let dir = Project::shipped();
    let manifest = dir.path().join("images.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let start = text.find("[variants.minimal]").unwrap();
    let end = start + text[start..].find("\n\n").unwrap();
    std::fs::write(&manifest, format!("{}{}", &text[..start], &text[end..])).unwrap();

    let stray = |file: &str| {
        format!(
            "stray: {file} is not produced by any variant in the manifest; \
             delete it (or run `sunaba-images render`)"
        )
    };
    dir.cli()
        .args(["render", "--check"])
        .status(2)
        .stdout_line(stray("docker/Dockerfile.minimal"))
        .stdout_line(stray("docker/healthcheck/minimal.sh"))
        .stderr(
            "render --check: 0 drifted, 0 missing, 2 stray; \
             run `sunaba-images render` and commit the result\n",
        )
        .run();

    let v = dir
        .cli()
        .args(["render", "--check", "--json"])
        .status(2)
        .stdout_json()
        .run()
        .json();
    assert_eq!(v["up_to_date"], false);
    assert_eq!(
        v["stray"],
        serde_json::json!(["docker/Dockerfile.minimal", "docker/healthcheck/minimal.sh"])
    );

    // render removes generated strays, but never a hand-made file.
    std::fs::write(
        dir.path().join("docker/Dockerfile.handmade"),
        "FROM scratch\n",
    )
    .unwrap();
    dir.cli()
        .args(["render"])
        .stdout_line("removed   docker/Dockerfile.minimal (no variant produces it any more)")
        .stdout_line("removed   docker/healthcheck/minimal.sh (no variant produces it any more)")
        .stdout_line(
            "kept      docker/Dockerfile.handmade (looks generated but has no \
             sunaba-images header; remove it by hand)",
        )
        .stdout_like(r"render: 0 file\(s\) written, 2 removed, \d+ unchanged")
        .run();
    assert!(!dir.path().join("docker/Dockerfile.minimal").exists());
    assert!(dir.path().join("docker/Dockerfile.handmade").exists());
}

/// Each manifest error: exact message shape (the file, the line, the key),
/// exit 1, and nothing written.
#[test]
fn manifest_errors_name_key_and_write_nothing() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "[tools.rg]\nprobe",
            "[tools.rg]\nprobez = []\nprobe",
            &[
                "images.toml: TOML parse error at line",
                "unknown field `probez`",
            ],
        ),
        (
            "provides = [\"eslint\", \"tsc\", \"jest\"]",
            "provides = [\"eslint\", \"tsc\", \"jest\", \"mocha\"]",
            &[
                "fragments.js.provides: unknown tool `mocha`",
                "hint: declare [tools.mocha]",
            ],
        ),
        (
            "fragments = [\"go\"]",
            "fragments = [\"go\", \"golang\"]",
            &[
                "variants.go.fragments: unknown fragment `golang`",
                "hint: declare [fragments.golang]",
            ],
        ),
        (
            "[variants.base]\n",
            "[variants.base]\nparent = \"full\"\n",
            &["variants.base.parent: parent cycle: base -> full -> base"],
        ),
        (
            "script = \"docker/install-go.sh\"",
            "script = \"scripts/install-go.sh\"",
            &["fragments.go.script: `scripts/install-go.sh` is outside docker/"],
        ),
        (
            "script = \"docker/install-go.sh\"",
            "script = \"docker/install-golang.sh\"",
            &["fragments.go.script: `docker/install-golang.sh` does not exist"],
        ),
        (
            "aliases = [\"go\"]",
            "aliases = [\"go\", \"python\"]",
            &["variants.go.aliases: duplicate alias `python` (also declared by variant `python`)"],
        ),
        (
            "markers = [\"go.mod\"]",
            "markers = [\"go.mod\", \"package.json\"]",
            &[
                "languages.js.markers: marker `package.json` is also claimed by language `go`",
                "hint: a marker file selects one language",
            ],
        ),
        (
            "[variants.minimal]\nfragments = [\"minimal\"]",
            "[variants.minimal]\nfragments = []",
            &["variants.minimal: owes no tools"],
        ),
    ];
    for (from, to, expected) in cases {
        let dir = Project::shipped();
        edit(&dir.path().join("images.toml"), from, to);
        // Remove one generated file so a write would be visible.
        std::fs::remove_file(dir.path().join("docker/Dockerfile.base")).unwrap();
        let before = snapshot(dir.path());
        // The expected fragments, in order, on one line.
        let fragments = expected
            .iter()
            .map(|e| regex::escape(e))
            .collect::<Vec<_>>()
            .join(".*");
        let cli = dir.cli().args(["render"]).status(1);
        let cli = if expected[0].contains("TOML parse error") {
            // toml's own report: the position, a source excerpt, the reason.
            cli.stderr_like(
                r"error: loading the image family manifest: images.toml: TOML parse error at line \d+, column \d+",
            )
            .stderr_may(r" *\d* \|.*")
            .stderr_like(format!("{}.*", regex::escape(expected[1])))
        } else {
            // Validation errors carry a line.
            cli.stderr_line("error: loading the image family manifest: images.toml: 1 problem(s):")
                .stderr_like(format!(r"  - line \d+: {fragments}.*"))
        };
        cli.run();
        assert_eq!(
            before,
            snapshot(dir.path()),
            "case {to:?}: something was written"
        );
    }
}

#[test]
fn template_error_names_template_and_line_and_writes_nothing() {
    let dir = Project::shipped();
    edit(
        &dir.path().join("templates/Dockerfile.hbs"),
        "FROM ${BASE_IMAGE}",
        "FROM ${BASE_IMAGE}\n# {{no_such_variable}}",
    );
    std::fs::remove_file(dir.path().join("docker/Dockerfile.base")).unwrap();
    let before = snapshot(dir.path());
    dir.cli()
        .args(["render"])
        .status(1)
        .stderr_like(
            r"error: rendering the generated files: .*templates/Dockerfile.hbs: template error at line \d+: .*no_such_variable.*",
        )
        .run();
    assert_eq!(before, snapshot(dir.path()));
}

/// A new toolchain needs only a fragment script and images.toml lines. The
/// toolchain is made up (`quux`: no real fragment will ever collide with it)
/// and joins the default variant, as a real one would.
#[test]
fn adding_a_made_up_fragment_needs_only_a_script_and_manifest_lines() {
    let dir = Project::shipped();
    let root = dir.path();
    let shipped = support::shipped_manifest();
    let default = shipped["default"].as_str().unwrap();
    let parent = shipped["variants"][default]
        .get("parent")
        .map(|p| format!("parent = {p}\n"))
        .unwrap_or_default();
    std::fs::write(
        root.join("docker/install-quux.sh"),
        "#!/bin/sh\nset -eu\necho installing quux\n",
    )
    .unwrap();
    let manifest = root.join("images.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut text = support::edit_manifest_list(&text, &["variants", default, "fragments"], |f| {
        f.push("quux".into())
    });
    text.push_str(&format!(
        r#"
[tools.quuxc]
probe = ["quuxc", "--version"]
version = 'quuxc ([0-9]+\.[0-9]+\.[0-9]+)'

[tools.quuxfmt]
probe = ["quuxfmt", "--version"]
version = 'quuxfmt ([0-9]+\.[0-9]+\.[0-9]+)'
min = "1.80"

[fragments.quux]
script = "docker/install-quux.sh"
provides = ["quuxc", "quuxfmt"]
[fragments.quux.args]
QUUX_CHANNEL = "stable"
[fragments.quux.env]
QUUX_HOME = "${{HOME}}/.quux"

[variants.quux]
{parent}fragments = ["quux"]
aliases = ["quux"]
size_budget = "2GiB"
"#
    ));
    std::fs::write(&manifest, text).unwrap();
    Cli::new(root)
        .args(["render"])
        .stdout_line("created   docker/Dockerfile.quux")
        .stdout_line("created   docker/healthcheck/quux.sh")
        .stdout_line(format!("updated   docker/Dockerfile.{default}"))
        .stdout_line(format!("updated   docker/healthcheck/{default}.sh"))
        .stdout_like(r"render: 4 file\(s\) written, 0 removed, \d+ unchanged")
        .run();

    let dockerfile = std::fs::read_to_string(root.join("docker/Dockerfile.quux")).unwrap();
    if !parent.is_empty() {
        assert!(
            dockerfile.contains("ARG PARENT_IMAGE\nFROM ${PARENT_IMAGE}"),
            "{dockerfile}"
        );
    }
    assert!(
        dockerfile.contains("ARG QUUX_CHANNEL=stable"),
        "{dockerfile}"
    );
    assert!(
        dockerfile.contains("source=docker/install-quux.sh,target=/run/sunaba/install-quux.sh"),
        "{dockerfile}"
    );
    assert!(
        dockerfile
            .contains("COPY docker/healthcheck/quux.sh /usr/local/libexec/sunaba/healthcheck"),
        "{dockerfile}"
    );
    let quux_tools = healthcheck_tools(&root.join("docker/healthcheck/quux.sh"));
    let mut expected = match shipped["variants"][default].get("parent") {
        Some(p) => {
            healthcheck_tools(&root.join(format!("docker/healthcheck/{}.sh", p.as_str().unwrap())))
        }
        None => Vec::new(),
    };
    expected.extend(["quuxc".to_string(), "quuxfmt".to_string()]);
    assert_eq!(quux_tools, expected);

    let dflt = std::fs::read_to_string(root.join(format!("docker/Dockerfile.{default}"))).unwrap();
    assert!(dflt.contains("sh /run/sunaba/install-quux.sh"), "{dflt}");
    let default_tools = healthcheck_tools(&root.join(format!("docker/healthcheck/{default}.sh")));
    assert!(
        default_tools.ends_with(&["quuxc".to_string(), "quuxfmt".to_string()]),
        "{default_tools:?}"
    );
    // Nothing else was needed: the gate agrees with the new tree.
    Cli::new(root)
        .args(["render", "--check"])
        .stdout_like(r"render --check: \d+ generated file\(s\) up to date")
        .run();
}

/// Each shipped variant's healthcheck asserts its parent's tools, then what
/// its own fragments provide, each once; the default one asserts every tool
/// of every language (all read from images.toml).
#[test]
fn each_healthcheck_is_its_parents_tools_then_its_fragments() {
    let root = repo_root();
    let shipped = support::shipped_manifest();
    let tools = |v: &str| healthcheck_tools(&root.join(format!("docker/healthcheck/{v}.sh")));
    let strings = |v: &toml::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    for (name, variant) in shipped["variants"].as_table().unwrap() {
        let mut expected = match variant.get("parent") {
            Some(p) => tools(p.as_str().unwrap()),
            None => Vec::new(),
        };
        for fragment in strings(&variant["fragments"]) {
            for tool in strings(&shipped["fragments"][&fragment]["provides"]) {
                if !expected.contains(&tool) {
                    expected.push(tool);
                }
            }
        }
        assert_eq!(tools(name), expected, "docker/healthcheck/{name}.sh");
    }
    let default = tools(shipped["default"].as_str().unwrap());
    for (language, entry) in shipped["languages"].as_table().unwrap() {
        let list = entry.get("tools").unwrap_or(entry);
        for tool in strings(list) {
            assert!(
                default.contains(&tool),
                "{tool} of {language} missing from the default: {default:?}"
            );
        }
    }
}

fn fake_tool(dir: &Path, name: &str, script: &str) {
    support::write_program(&dir.join(name), &format!("#!/bin/sh\n{script}\n"));
}

/// The generated healthcheck catches the known traps: a wrong program under
/// the tool's name, Exuberant instead of Universal ctags, an old version, a
/// missing tool, and a probe that fails.
#[test]
fn generated_healthcheck_catches_the_traps() {
    let bin = tempfile::tempdir().unwrap();
    let b = bin.path();
    fake_tool(b, "git", "echo 'git version 2.47.3'");
    fake_tool(b, "gh", "echo 'gh version 2.46.0 (2025-01-01)'");
    fake_tool(b, "rg", "echo 'ripgrep 14.1.1'; echo '+SIMD'");
    // Debian's `login` ships /usr/bin/sg: the name is right, the program is not.
    fake_tool(
        b,
        "ast-grep",
        "echo 'sg: unrecognized option'; echo 'Usage: sg group [[-c] command]'",
    );
    // login's own sg (newgrp) under the name the design note gives ast-grep,
    // as on Debian without the link: it takes no --version.
    fake_tool(b, "sg", "echo 'Usage: sg group [[-c] command]' >&2; exit 1");
    fake_tool(b, "sd", "echo 'sd 1.0.0'");
    fake_tool(
        b,
        "ctags",
        "echo 'Exuberant Ctags 5.9~svn20110310, Copyright (C) 1996-2009 Darren Hiebert'",
    );
    fake_tool(b, "jq", "echo 'jq-1.6'");
    fake_tool(b, "node", "echo v20.19.2");
    fake_tool(b, "npm", "echo 'npm ERR! broken' >&2; exit 3");
    // fd is absent (Debian names it fdfind).
    fake_tool(b, "fdfind", "echo 'fdfind 9.0.0'");

    let script = repo_root().join("docker/healthcheck/base.sh");
    let out = std::process::Command::new("/bin/sh")
        .arg(&script)
        .env("PATH", format!("{}:/usr/bin:/bin", b.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let status: std::collections::BTreeMap<String, (String, String)> = stdout
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 4, "bad line {l:?}");
            (f[1].to_string(), (f[0].to_string(), f[2].to_string()))
        })
        .collect();
    let st = |t: &str| {
        status
            .get(t)
            .map(|(s, v)| (s.as_str(), v.as_str()))
            .unwrap_or_else(|| panic!("{t} not reported:\n{stdout}"))
    };
    assert_eq!(st("git"), ("ok", "2.47.3"));
    assert_eq!(st("rg"), ("ok", "14.1.1"));
    assert_eq!(st("ast-grep").0, "mismatch");
    assert_eq!(st("sg").0, "failed");
    assert_eq!(st("ctags").0, "mismatch");
    assert_eq!(st("jq"), ("too-old", "1.6"));
    assert_eq!(st("fd").0, "missing");
    assert_eq!(st("npm").0, "failed");
    // Node below the Active LTS line the contract asks for.
    assert_eq!(st("node"), ("too-old", "20.19.2"));
    assert_eq!(st("ca-certificates"), ("ok", "present"));

    // With every tool right, it passes.
    fake_tool(b, "ast-grep", "echo 'ast-grep 0.39.5'");
    fake_tool(b, "sg", "echo 'ast-grep 0.39.5'");
    fake_tool(
        b,
        "ctags",
        "echo 'Universal Ctags 6.1.0(v6.1.0), Copyright (C) 2015-2023 Universal Ctags Team'",
    );
    fake_tool(b, "jq", "echo 'jq-1.7.1'");
    fake_tool(b, "node", "echo v26.12.1");
    fake_tool(b, "npm", "echo 12.2.2");
    fake_tool(b, "fd", "echo 'fd 10.2.0'");
    let out = std::process::Command::new("/bin/sh")
        .arg(&script)
        .env("PATH", format!("{}:/usr/bin:/bin", b.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.lines().all(|l| l.starts_with("ok\t")), "{stdout}");
}
