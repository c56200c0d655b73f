//! `pin`, `pins show`, `pins verify` and `version` against the real loopback
//! registry. Images are small synthetic OCI images (config with labels, one
//! empty tar layer) pushed straight through the distribution API, each test
//! in its own repository.

use crate::support::oci::{Image, Pusher};
use crate::support::{self, Cli, all_tools, check_label, sha256};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;

/// A project copy whose `local` profile points at a repository of its own.
pub struct Project {
    pub dir: support::Project,
    pub registry: Pusher,
    pub host: String,
    /// Path inside the registry (`<unique>/sandbox`).
    pub repo: String,
}

impl Project {
    pub fn new(name: &str) -> Option<Project> {
        let host = support::dev_registry()?;
        let repo = format!("{}/sandbox", support::unique(&format!("pins-{name}")));
        Some(Project {
            dir: support::Project::shipped_publishing_to(&format!("{host}/{repo}")),
            registry: Pusher::plain(&host),
            host,
            repo,
        })
    }

    pub fn full_repo(&self) -> String {
        format!("{}/{}", self.host, self.repo)
    }

    pub fn cli(&self) -> Cli {
        self.dir.cli().args(["--profile", "local"])
    }

    pub fn pins_path(&self) -> PathBuf {
        self.dir.path().join("image_pins.json")
    }

    pub fn pins(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.pins_path()).unwrap()).unwrap()
    }

    /// Pushes `<variant>-<version>` with a passing record over `tools`.
    pub fn push(&self, variant: &str, version: &str, tools: &BTreeMap<String, String>) -> String {
        let inputs = sha256(format!("{variant} {version} {tools:?}").as_bytes());
        self.push_labels(
            &format!("{variant}-{version}"),
            &check_label("pass", variant, &inputs, tools),
        )
    }

    pub fn push_labels(&self, tag: &str, labels: &BTreeMap<String, String>) -> String {
        let image = Image::linux("amd64").labels(labels);
        let r = &self.registry;
        r.wait(r.image(&self.repo, Some(tag), &image)).digest
    }
}

fn tools_with(changes: &[(&str, Option<&str>)]) -> BTreeMap<String, String> {
    let mut t = all_tools();
    for (k, v) in changes {
        match v {
            Some(v) => t.insert(k.to_string(), v.to_string()),
            None => t.remove(*k),
        };
    }
    t
}

fn planned_tag(plan: &Value, alias: &str) -> Option<String> {
    plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["alias"] == alias)
        .and_then(|s| s["new"]["tag"].as_str().map(str::to_string))
}

/// What `pin` prints: the plan table (a header, a row per alias, a row per
/// changed tool), then `last`.
fn plan(cli: Cli, last: &str) -> Cli {
    cli.stdout_like("ALIAS +VARIANT +ACTION +VERSION +BUMP +DIGEST")
        .stdout_may(r"\S+ +\S+ +(add|update|keep|REMOVE) +.* +sha256:[0-9a-f]{64}")
        .stdout_may(r"    \S+ +\S+ -> \S+ +\S+ +.*")
        .stdout_line(last)
}

/// `pin ARGS --write` that writes the pins.
fn pin_write(p: &Project, args: &[&str]) -> crate::support::Run {
    plan(
        p.cli().args(["pin"]).args(args).arg("--write"),
        "wrote image_pins.json",
    )
    .run()
}

/// A release history: python 1.0.0, 1.1.0, 1.2.0-rc.1, 2.0.0 and tags that
/// are not versions.
fn release_history(p: &Project) -> BTreeMap<&'static str, String> {
    let mut d = BTreeMap::new();
    d.insert(
        "1.0.0",
        p.push("python", "1.0.0", &tools_with(&[("ruff", Some("0.12.0"))])),
    );
    d.insert(
        "1.1.0",
        p.push("python", "1.1.0", &tools_with(&[("ruff", Some("0.12.1"))])),
    );
    d.insert(
        "1.2.0-rc.1",
        p.push(
            "python",
            "1.2.0-rc.1",
            &tools_with(&[("ruff", Some("0.12.2"))]),
        ),
    );
    d.insert(
        "2.0.0",
        p.push("python", "2.0.0", &tools_with(&[("ruff", Some("0.13.0"))])),
    );
    p.push_labels("python-latest", &BTreeMap::new());
    p.push_labels("python-1.3", &BTreeMap::new());
    d
}

#[test]
#[ignore = "tier: registry"]
fn pin_selects_by_semver_rules_and_writes_only_with_write() {
    let Some(p) = Project::new("pin_semver") else {
        return;
    };
    let digests = release_history(&p);

    pin_write(&p, &["python", "--to", "1.0.0"]);
    let pins = p.pins();
    assert_eq!(pins["images"]["python"]["version"], "1.0.0");
    assert_eq!(
        pins["images"]["python"]["digest"],
        digests["1.0.0"].as_str()
    );
    assert_eq!(pins["images"]["python"]["tools"]["ruff"], "0.12.0");
    p.cli()
        .args(["pins", "show", "python"])
        .stdout(format!("{}@{}\n", p.full_repo(), digests["1.0.0"]))
        .run();

    let before = support::snapshot(p.dir.path());
    let cases: &[(&[&str], &str)] = &[
        (&[], "python-1.1.0"),
        (&["--pre"], "python-1.2.0-rc.1"),
        (&["--allow-major"], "python-2.0.0"),
        (&["--allow-major", "--pre"], "python-2.0.0"),
        (&["--to", "1.2.0-rc.1"], "python-1.2.0-rc.1"),
    ];
    for (flags, want) in cases {
        let plan = p
            .cli()
            .args(["pin", "python", "--json"])
            .args(*flags)
            .stdout_json()
            .run()
            .json();
        assert_eq!(
            planned_tag(&plan, "python").as_deref(),
            Some(*want),
            "{flags:?}"
        );
        assert_eq!(plan["written"], false);
    }
    // The human plan names the move, the bump and the tool.
    plan(
        p.cli().args(["pin", "python"]),
        "dry run: pass --write to update image_pins.json",
    )
    .stdout_like(format!(
        r"python +python +update +1\.0\.0 -> 1\.1\.0 +minor +{}",
        digests["1.1.0"]
    ))
    .stdout_like(r"    ruff +0\.12\.0 -> 0\.12\.1 +minor +0\.x patch version raised")
    .run();
    // Without --write nothing changed.
    assert_eq!(support::snapshot(p.dir.path()), before);

    pin_write(&p, &["python"]);
    assert_eq!(p.pins()["images"]["python"]["version"], "1.1.0");
    plan(
        p.cli().args(["pin", "python"]),
        "nothing to do: image_pins.json is up to date",
    )
    .stdout_like(r"python +python +keep +1\.1\.0 +- +sha256:[0-9a-f]{64}")
    .run();

    // Explicit moves that need permission.
    p.cli()
        .args(["pin", "python", "--to", "2.0.0"])
        .status(1)
        .stderr(
            "error: nothing was written: python: 2.0.0 leaves the pinned 1.1.0's \
             compatibility line; pass --allow-major\n",
        )
        .run();
    p.cli()
        .args(["pin", "python", "--to", "1.0.0"])
        .status(1)
        .stderr(
            "error: nothing was written: python: 1.0.0 is lower than the pinned 1.1.0; \
             pass --allow-downgrade\n",
        )
        .run();
    pin_write(&p, &["python", "--to", "1.0.0", "--allow-downgrade"]);
    assert_eq!(p.pins()["images"]["python"]["version"], "1.0.0");
}

#[test]
#[ignore = "tier: registry"]
fn only_passing_images_covering_owed_tools_are_pinned() {
    let Some(p) = Project::new("pin_gate") else {
        return;
    };
    p.push("python", "1.0.0", &all_tools());
    pin_write(&p, &["python"]);
    let pinned = p.pins();

    // Newer images that must never be pinned.
    p.push_labels("python-1.4.0", &BTreeMap::new());
    p.push_labels(
        "python-1.3.0",
        &check_label("fail", "python", "sha256:x", &all_tools()),
    );
    p.push("python", "1.2.0", &tools_with(&[("ruff", None)]));
    // Mis-versioned: a major tool raise behind a minor release.
    p.push("python", "1.1.0", &tools_with(&[("ruff", Some("2.0.0"))]));

    let never_checked = "no dev.sunaba.check label: the image was never checked \
                         (run `sunaba-images check`)";
    let lacks_ruff = "inventory lacks owed tool(s): ruff";
    let mis_versioned = "mis-versioned: 1.0.0 -> 1.1.0 is a minor step but the inventory \
                         changed by major: ruff 1.0.0 -> 2.0.0 (major version raised)";
    plan(
        p.cli().args(["pin", "python", "--write"]),
        "nothing to do: image_pins.json is up to date",
    )
    .stdout_like(r"python +python +keep +1\.0\.0 +- +sha256:[0-9a-f]{64}")
    .stderr(format!(
        "warning: python: not pinning python-1.4.0: {never_checked}\n\
         warning: python: not pinning python-1.3.0: check record status is \"fail\", not \"pass\"\n\
         warning: python: not pinning python-1.2.0: {lacks_ruff}\n\
         warning: python: not pinning python-1.1.0: {mis_versioned}\n"
    ))
    .run();
    assert_eq!(p.pins(), pinned);

    for (version, why) in [
        ("1.4.0", never_checked),
        ("1.2.0", lacks_ruff),
        ("1.1.0", mis_versioned),
    ] {
        refuses_to_pin(&p, version, why);
        assert_eq!(p.pins(), pinned);
    }
}

/// `pin python --to VERSION --write` refuses the image for `why`.
fn refuses_to_pin(p: &Project, version: &str, why: &str) {
    p.cli()
        .args(["pin", "python", "--to", version, "--write"])
        .status(1)
        .stderr(format!(
            "error: nothing was written: python: nothing can be pinned: \
             python-{version} refused: {why}\n"
        ))
        .run();
}

/// A pass recorded before the smoke suite existed, or without one of the
/// variant's suites, does not get pinned.
#[test]
#[ignore = "tier: registry"]
fn an_image_without_the_variants_smoke_is_not_pinned() {
    let Some(p) = Project::new("pin_smoke") else {
        return;
    };
    p.push("python", "1.0.0", &all_tools());
    pin_write(&p, &["python"]);
    let pinned = p.pins();
    let with_smoke = |smoke: Option<Value>| {
        let mut labels = check_label("pass", "python", "sha256:s", &all_tools());
        let mut record: Value = serde_json::from_str(&labels["dev.sunaba.check"]).unwrap();
        match smoke {
            Some(s) => record["smoke"] = s,
            None => drop(record.as_object_mut().unwrap().remove("smoke")),
        }
        labels.insert("dev.sunaba.check".into(), record.to_string());
        labels.insert("dev.sunaba.inputs".into(), "sha256:s".into());
        labels
    };
    p.push_labels("python-1.0.1", &with_smoke(None));
    p.push_labels(
        "python-1.0.2",
        &with_smoke(Some(
            json!({"digest": "sha256:x", "suites": {"neutral": 9}}),
        )),
    );
    for (version, why) in [
        (
            "1.0.1",
            "the check record has no smoke results: the image was checked before the smoke \
             suite existed (check it again: `sunaba-images check`)",
        ),
        (
            "1.0.2",
            "the check record lacks the smoke suite(s) the variant runs: python",
        ),
    ] {
        refuses_to_pin(&p, version, why);
        assert_eq!(p.pins(), pinned);
    }
}

/// Pushes passing images for every variant and pins all aliases.
pub fn pin_everything(p: &Project) {
    for variant in support::shipped_variants() {
        p.push(&variant, "1.0.0", &all_tools());
    }
    pin_write(p, &[]);
}

fn edit_pins(p: &Project, f: impl FnOnce(&mut Value)) {
    let mut v = p.pins();
    f(&mut v);
    std::fs::write(
        p.pins_path(),
        serde_json::to_string_pretty(&v).unwrap() + "\n",
    )
    .unwrap();
}

/// `pins verify` that finds `problems` problems.
fn verify_finds(p: &Project, problems: usize) -> Cli {
    p.cli()
        .args(["pins", "verify"])
        .status(2)
        .stderr(format!("pins verify: {problems} problem(s)\n"))
}

#[test]
#[ignore = "tier: registry"]
fn verify_passes_then_catches_each_problem() {
    let Some(p) = Project::new("verify") else {
        return;
    };
    pin_everything(&p);
    let pins = p.pins();
    let aliases: Vec<&String> = pins["images"].as_object().unwrap().keys().collect();
    let declared = support::shipped_aliases();
    assert_eq!(aliases, declared.keys().collect::<Vec<_>>());
    p.cli()
        .args(["pins", "verify"])
        .stdout(format!(
            "ok: {} alias(es) pinned and verified in image_pins.json\n",
            declared.len()
        ))
        .run();
    let show = p.cli().args(["pins", "show"]);
    let show = aliases.iter().fold(show, |cli, alias| {
        cli.stdout_line(format!(
            "{alias}\t{}@{}",
            p.full_repo(),
            pins["images"][alias.as_str()]["digest"].as_str().unwrap()
        ))
    });
    assert_eq!(show.run().lines().len(), declared.len());
    let original = std::fs::read(p.pins_path()).unwrap();

    // A missing alias.
    edit_pins(&p, |v| {
        v["images"].as_object_mut().unwrap().remove("go");
    });
    verify_finds(&p, 1)
        .stdout("problem: go: not pinned (variant go); run `sunaba-images pin go --write`\n")
        .run();
    // Under a workflow: an annotation at the alias's declaration (it has no
    // pin to point at), and the step summary.
    let manifest = p.dir.read("images.toml");
    let header = manifest.lines().position(|l| l == "[variants.go]").unwrap();
    let aliases = header
        + 1
        + (manifest.lines().skip(header))
            .position(|l| l.starts_with("aliases"))
            .unwrap();
    let summary = p.dir.path().join("summary.md");
    verify_finds(&p, 1)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .stdout(format!(
            "::error file=images.toml,line={aliases},title=pins verify%3A go::go: not pinned (variant go); \
             run `sunaba-images pin go --write`\n\
             problem: go: not pinned (variant go); run `sunaba-images pin go --write`\n"
        ))
        .run();
    assert_eq!(
        std::fs::read_to_string(&summary).unwrap(),
        format!(
            "### pins verify\n\n1 error(s), 0 warning(s):\n\n- **error** pins verify: go: go: not \
             pinned (variant go); run `sunaba-images pin go --write` (`images.toml:{aliases}`)\n\n"
        )
    );

    // A tampered digest.
    std::fs::write(p.pins_path(), &original).unwrap();
    let fake = sha256(b"tampered");
    edit_pins(&p, |v| v["images"]["js"]["digest"] = json!(fake));
    let js = pins["images"]["js"]["digest"].as_str().unwrap();
    verify_finds(&p, 1)
        .stdout(format!(
            "problem: js: {}@{fake} no longer exists in the registry\n\
             warning: js: tag js-1.0.0 moved: it now points at {js}, the pin is {fake}\n",
            p.full_repo()
        ))
        .run();
    // With --json the annotations go to stderr, at the pin's line.
    let js_line = std::fs::read_to_string(p.pins_path())
        .unwrap()
        .lines()
        .position(|l| l.trim_start().starts_with("\"js\""))
        .unwrap()
        + 1;
    let run = p
        .cli()
        .args(["pins", "verify", "--json", "--format", "github"])
        .status(2)
        .stdout_json()
        .stderr(format!(
            "::error file=image_pins.json,line={js_line},title=pins verify%3A js::js: {}@{fake} no \
             longer exists in the registry\n\
             ::warning file=image_pins.json,line={js_line},title=pins verify%3A js::js: tag js-1.0.0 \
             moved: it now points at {js}, the pin is {fake}\n\
             pins verify: 1 problem(s)\n",
            p.full_repo()
        ))
        .run();
    assert_eq!(run.json()["ok"], false);

    // A deleted manifest.
    std::fs::write(p.pins_path(), &original).unwrap();
    let go_digest = pins["images"]["go"]["digest"].as_str().unwrap().to_string();
    p.registry
        .wait(p.registry.delete_manifest(&p.repo, &go_digest));
    verify_finds(&p, 1)
        .stdout(format!(
            "problem: go: {}@{go_digest} no longer exists in the registry\n\
             warning: go: tag go-1.0.0 no longer exists (the pinned digest is used)\n",
            p.full_repo()
        ))
        .run();
}

#[test]
#[ignore = "tier: registry"]
fn verify_warns_on_a_moved_tag_and_an_orphan_is_an_error() {
    let Some(p) = Project::new("verify_moved") else {
        return;
    };
    let old = p.push("python", "1.0.0", &all_tools());
    pin_write(&p, &["python"]);
    // Other aliases are unpinned here (problems of their own).
    let others: Vec<String> = support::shipped_aliases()
        .into_keys()
        .filter(|a| a != "python")
        .collect();
    let unpinned = |cli: Cli| {
        others.iter().fold(cli, |cli, alias| {
                cli.stdout_like(format!(
                    r"problem: {alias}: not pinned \(variant \w+\); run `sunaba-images pin {alias} --write`"
                ))
            })
    };
    let new = p.push_labels(
        "python-1.0.0",
        &check_label("pass", "python", "sha256:other", &all_tools()),
    );
    let moved = format!(
        "warning: python: tag python-1.0.0 moved: it now points at {new}, the pin is {old}"
    );
    unpinned(verify_finds(&p, others.len()))
        .stdout_line(&moved)
        .run();

    // An orphaned alias: `pin` refuses with line/column, verify reports it.
    edit_pins(&p, |v| {
        let py = v["images"]["python"].clone();
        v["images"]["snake"] = py;
    });
    let before = std::fs::read(p.pins_path()).unwrap();
    p.cli()
        .args(["pin", "python", "--write"])
        .status(1)
        .stderr_like(
            r#"error: nothing was written: image_pins.json:\d+:\d+: at `images.snake`: alias "snake" is not declared in images.toml; removing or renaming an alias breaks servers that use it \(pass --allow-breaking to drop the pin\)"#,
        )
        .run();
    assert_eq!(std::fs::read(p.pins_path()).unwrap(), before);
    unpinned(verify_finds(&p, others.len() + 1))
        .stdout_like(
            r"problem: snake: image_pins.json:\d+:\d+: pinned but not declared in images.toml \(orphaned pin\)",
        )
        .stdout_line(&moved)
        .run();
    plan(
        p.cli()
            .args(["pin", "python", "--write", "--allow-breaking"]),
        "wrote image_pins.json",
    )
    .stdout_like(r"snake +- +REMOVE +1\.0\.0 -> \(removed\) +major +sha256:[0-9a-f]{64}")
    .run();
    assert!(p.pins()["images"].get("snake").is_none());
}

#[test]
#[ignore = "tier: registry"]
fn multi_platform_images_pin_the_index_digest() {
    let Some(p) = Project::new("multiplatform") else {
        return;
    };
    let labels = check_label("pass", "go", "sha256:in", &all_tools());
    let r = &p.registry;
    let (index, platforms) = r.wait(async {
        let mut platforms = BTreeMap::new();
        let mut children = Vec::new();
        // arm64 as BuildKit writes it (`v8`): pinned as linux/arm64.
        for (arch, variant) in [("amd64", None), ("arm64", Some("v8"))] {
            let mut image = Image::linux(arch).labels(&labels);
            let mut platform = json!({"os": "linux", "architecture": arch});
            if let Some(v) = variant {
                image = image.variant(v);
                platform["variant"] = json!(v);
            }
            let image = r.image(&p.repo, None, &image).await;
            children.push(image.descriptor(platform));
            platforms.insert(format!("linux/{arch}"), image.digest);
        }
        let index = r.index(&p.repo, "go-1.0.0", children).await;
        (index.digest, platforms)
    });
    let run = pin_write(&p, &["go"]);
    let pin = &p.pins()["images"]["go"];
    assert_eq!(pin["digest"], index.as_str(), "{}", run.stdout());
    assert_eq!(pin["platforms"], json!(platforms), "normalised keys");
    p.cli()
        .args(["pins", "show", "go"])
        .stdout(format!("{}@{index}\n", p.full_repo()))
        .run();
}

#[test]
#[ignore = "tier: registry"]
fn malformed_pins_files_are_reported_and_never_written() {
    let Some(p) = Project::new("malformed") else {
        return;
    };
    p.push("python", "1.0.0", &all_tools());
    pin_write(&p, &["python"]);
    let good = std::fs::read_to_string(p.pins_path()).unwrap();
    let digest = p.pins()["images"]["python"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    // (text, where the error is, what it says)
    let cases: Vec<(String, &str, &str)> = vec![
        (
            good.replacen("\"schema\": 1,", "\"schema\": 1", 1),
            r"3:\d+: at `\?`",
            "expected `,` or `}`",
        ),
        (
            good.replacen(&digest, "sha256:abc", 1),
            r"\d+:\d+: at `images\.python\.digest`",
            "bad digest \"sha256:abc\"",
        ),
        (
            good.replacen("\"version\": \"1.0.0\"", "\"version\": 1", 1),
            r"\d+:\d+: at `images\.python\.version`",
            "invalid type: integer `1`",
        ),
        (
            good.replacen("\"tools\"", "\"toolz\"", 1),
            r"\d+:\d+: at `images\.python\.toolz`",
            "unknown field `toolz`",
        ),
    ];
    for (text, at, want) in cases {
        std::fs::write(p.pins_path(), &text).unwrap();
        for args in [
            &["pin", "python", "--write"][..],
            &["pins", "verify"],
            &["pins", "show", "python"],
        ] {
            p.cli()
                .args(args)
                .status(1)
                .stderr_like(format!(
                    r"error: image_pins\.json:{at}: {}.*; fix the file \(nothing was written\)",
                    regex::escape(want)
                ))
                .run();
            assert_eq!(std::fs::read_to_string(p.pins_path()).unwrap(), text);
        }
    }
}

#[test]
#[ignore = "tier: registry"]
fn unknown_top_level_fields_survive_a_write() {
    let Some(p) = Project::new("preserve") else {
        return;
    };
    p.push("python", "1.0.0", &all_tools());
    std::fs::write(
        p.pins_path(),
        "{\"comment\": \"kept\", \"schema\": 1, \"images\": {}, \"owner\": {\"team\": \"x\"}}",
    )
    .unwrap();
    pin_write(&p, &["python"]);
    let text = std::fs::read_to_string(p.pins_path()).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["comment"], "kept");
    assert_eq!(v["owner"]["team"], "x");
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["schema", "images", "comment", "owner"]);
    assert!(
        text.ends_with("}\n") && text.contains("\n  \"images\": {\n"),
        "{text}"
    );
}

#[test]
#[ignore = "tier: registry"]
fn version_reports_next_version_tool_by_tool() {
    let Some(p) = Project::new("version") else {
        return;
    };
    let base = tools_with(&[("ruff", Some("0.12.0")), ("rg", Some("14.1.1"))]);
    p.push("python", "1.0.0", &base);
    pin_write(&p, &["python"]);
    let inputs = sha256(format!("python 1.0.0 {base:?}").as_bytes());

    // (tools, inputs, expected next, expected bump, tool named)
    type Case = (
        BTreeMap<String, String>,
        String,
        Option<&'static str>,
        &'static str,
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (base.clone(), inputs.clone(), None, "none", None),
        (
            base.clone(),
            "sha256:refreshed".into(),
            Some("1.0.1"),
            "patch",
            None,
        ),
        (
            tools_with(&[("ruff", Some("0.12.0")), ("rg", Some("14.1.2"))]),
            "sha256:a".into(),
            Some("1.0.1"),
            "patch",
            Some("rg"),
        ),
        (
            tools_with(&[("ruff", Some("0.12.1")), ("rg", Some("14.1.1"))]),
            "sha256:b".into(),
            Some("1.1.0"),
            "minor",
            Some("ruff"),
        ),
        (
            tools_with(&[("ruff", Some("0.12.0")), ("rg", Some("15.0.0"))]),
            "sha256:c".into(),
            Some("2.0.0"),
            "major",
            Some("rg"),
        ),
        (
            tools_with(&[
                ("ruff", Some("0.12.0")),
                ("rg", Some("14.1.1")),
                ("gh", None),
            ]),
            "sha256:d".into(),
            Some("2.0.0"),
            "major",
            Some("gh"),
        ),
    ];
    for (i, (tools, inputs, next, bump, tool)) in cases.into_iter().enumerate() {
        let tag = format!("candidate-{i}");
        p.push_labels(&tag, &check_label("pass", "python", &inputs, &tools));
        let image = format!("{}:{tag}", p.full_repo());
        let v = p
            .cli()
            .args(["next-version", "python", "--image", &image, "--json"])
            .stdout_json()
            .run()
            .json();
        assert_eq!(v["next"].as_str(), next, "case {i}: {v}");
        assert_eq!(v["bump"], bump, "case {i}");
        assert_eq!(v["current"], "1.0.0");
        let named: Vec<&str> = v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["tool"].as_str().unwrap())
            .collect();
        assert_eq!(named, tool.into_iter().collect::<Vec<_>>(), "case {i}");
        let human = p.cli().args(["next-version", "python", "--image", &image]);
        let human = match (next, tool) {
            (None, _) => {
                human.stdout("python: no new version: inputs and tools unchanged since 1.0.0\n")
            }
            (Some(n), None) => human.stdout(format!(
                "python: 1.0.0 -> {n} ({bump} release; pinned as python)\n    \
                 no tool changed; other inputs did (patch)\n"
            )),
            (Some(n), Some(t)) => human
                .stdout_line(format!(
                    "python: 1.0.0 -> {n} ({bump} release; pinned as python)"
                ))
                .stdout_like(format!(r"    {t} +\S+ -> \S+ +{bump} +.*")),
        };
        human.run();
    }
}

/// Kills `pin --write` at each point of its write (`SUNABA_FAILPOINT`, as a
/// `kill -9` would): before the rename the file is the old one, after it the
/// new one, and it always parses; a later run clears the temp file a killed
/// writer left behind.
#[test]
#[ignore = "tier: registry"]
fn killed_at_each_write_point_pin_leaves_the_old_or_the_new_file() {
    let Some(p) = Project::new("crash") else {
        return;
    };
    p.push("python", "1.0.0", &all_tools());
    p.push("python", "1.1.0", &tools_with(&[("jq", Some("1.1.0"))]));
    pin_write(&p, &["python", "--to", "1.0.0"]);
    let old = std::fs::read(p.pins_path()).unwrap();
    pin_write(&p, &["python"]);
    let new = std::fs::read(p.pins_path()).unwrap();
    assert_ne!(old, new);

    let temp_files = || -> Vec<String> {
        std::fs::read_dir(p.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    };
    for (point, expected, temp_left) in [
        ("atomic-write.before-rename", &old, 1),
        ("atomic-write.after-rename", &new, 0),
    ] {
        std::fs::write(p.pins_path(), &old).unwrap();
        p.cli()
            .env("SUNABA_FAILPOINT", point)
            .args(["pin", "python", "--write"])
            .status(134)
            .stdout_free("the plan, printed before the write it dies in")
            .stderr(format!("failpoint {point}#1: dying here\n"))
            .run();
        let now = std::fs::read(p.pins_path()).unwrap();
        serde_json::from_slice::<Value>(&now)
            .unwrap_or_else(|e| panic!("killed at {point}: the file does not parse: {e}"));
        assert!(
            &now == expected,
            "killed at {point}: not the expected content"
        );
        assert_eq!(temp_files().len(), temp_left, "killed at {point}");
    }
    std::fs::write(p.pins_path(), &old).unwrap();
    pin_write(&p, &["python"]);
    assert_eq!(std::fs::read(p.pins_path()).unwrap(), new);
    assert!(temp_files().is_empty(), "{:?}", temp_files());
}

/// Parallel writers, each pinning a different alias: no update is lost.
#[test]
#[ignore = "tier: registry"]
fn parallel_writers_lose_no_update() {
    let Some(p) = Project::new("concurrency") else {
        return;
    };
    for v in support::shipped_variants() {
        p.push(&v, "1.0.0", &all_tools());
    }
    let aliases: Vec<String> = support::shipped_aliases().into_keys().collect();
    let rounds: usize = std::env::var("SUNABA_CONCURRENCY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    for round in 0..rounds {
        std::fs::write(p.pins_path(), "{\"schema\": 1, \"images\": {}}\n").unwrap();
        let children: Vec<_> = aliases
            .iter()
            .map(|a| {
                p.cli()
                    .args(["pin", a.as_str(), "--write"])
                    .into_command("parallel: the status and stderr are checked below")
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success() && out.stderr.is_empty(),
                "round {round}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let pins = p.pins();
        let got: Vec<&String> = pins["images"].as_object().unwrap().keys().collect();
        let mut want: Vec<&String> = aliases.iter().collect();
        want.sort();
        assert_eq!(got, want, "round {round}: an update was lost");
    }
    eprintln!(
        "concurrency test: {rounds} rounds x {} parallel writers, no update lost",
        aliases.len()
    );
}

/// A one-variant fixture family (`tiny`: beta) published to `repository`.
fn tiny_project(repository: &str) -> support::Project {
    let family = support::Family::new("tiny")
        .repository(repository)
        .tool("beta")
        .fragment("beta", &["beta"])
        .variant(
            support::Variant::new("tiny")
                .fragments(&["beta"])
                .aliased()
                .serves_fake()
                .size_budget("10MiB"),
        );
    support::Project::fixture(&family)
        .fragment("beta", "")
        .file("image_pins.json", support::EMPTY_PINS)
}

/// `pin`, `pins verify` and `version` talk to a TLS registry with basic auth
/// when given its CA with --ca-cert; without it they fail naming the
/// certificate problem and the flag. No secret is printed either way.
#[test]
#[ignore = "tier: registry"]
fn pin_verify_and_version_trust_a_private_ca_given_with_ca_cert() {
    use crate::support::distribution::{self, Auth, PASSWORD, Registry, USER};
    use base64::Engine as _;
    if !distribution::available() {
        return;
    }
    let storage = tempfile::tempdir().unwrap();
    let registry = Registry::start(storage.path(), Auth::TlsHtpasswd);
    let host = registry.authority();
    let ca = &distribution::pki().ca_cert;
    let repo = "tiny/sandbox";
    let pusher = Pusher::tls(&host, &std::fs::read(ca).unwrap(), USER, PASSWORD);
    let tools: BTreeMap<String, String> = [("beta".to_string(), "1.0.0".to_string())].into();
    let suites = BTreeMap::from([("fake".to_string(), 1)]);
    let labels = support::check_label_with("pass", "tiny", "sha256:tiny-inputs", &tools, &suites);
    let digest = pusher
        .wait(pusher.image(
            repo,
            Some("tiny-1.0.0"),
            &Image::linux("amd64").labels(&labels),
        ))
        .digest;

    // The project is HOME too: its docker config holds the credentials.
    let home = tiny_project(&format!("{host}/{repo}"));
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::create_dir_all(home.path().join(".docker")).unwrap();
    std::fs::write(
        home.path().join(".docker/config.json"),
        json!({"auths": {host.clone(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let cli = || support::isolated_cli(home.path());
    let image = format!("{host}/{repo}:tiny-1.0.0");
    let mut runs = Vec::new();

    let ca_arg = ["--ca-cert", ca.to_str().unwrap()];
    let without_ca = |args: &[&str]| {
        cli()
            .args(args)
            .status(1)
            .stderr_like("error: .*invalid peer certificate: UnknownIssuer.*pass it with --ca-cert")
            .run()
    };

    // Without the CA, `pin` fails saying why, and writes nothing.
    let pins_file = home.path().join("image_pins.json");
    let before = std::fs::read(&pins_file).unwrap();
    runs.push(without_ca(&["pin", "--write"]));
    assert_eq!(std::fs::read(&pins_file).unwrap(), before);
    // With it: pinned ...
    runs.push(
        plan(
            cli().args(["pin", "--write"]).args(ca_arg),
            "wrote image_pins.json",
        )
        .stdout_like(format!(
            r"tiny +tiny +add +\(none\) -> 1\.0\.0 +new +{digest}"
        ))
        .run(),
    );
    let pins: Value = serde_json::from_str(&std::fs::read_to_string(&pins_file).unwrap()).unwrap();
    assert_eq!(pins["images"]["tiny"]["digest"], digest.as_str());
    assert_eq!(
        pins["images"]["tiny"]["repository"],
        format!("{host}/{repo}")
    );
    // ... and the same for verifying the pin and versioning an image.
    // `pins verify` could not check the pin: an operational failure (1),
    // not a problem found in the pins (2), naming the certificate and the flag.
    runs.push(
        cli()
            .args(["pins", "verify"])
            .status(1)
            .stdout_like(format!(
                r"error: tiny: cannot check {host}/{repo}@{digest}: .*certificate.*--ca-cert"
            ))
            .stdout_may(r"error: tiny: cannot resolve tag tiny-1\.0\.0: .*")
            .stderr_like(r"pins verify: 0 problem\(s\); \d check\(s\) could not be made \(see the error lines\)")
            .run(),
    );
    runs.push(without_ca(&["next-version", "tiny", "--image", &image]));
    runs.push(
        cli()
            .args(["pins", "verify"])
            .args(ca_arg)
            .stdout("ok: 1 alias(es) pinned and verified in image_pins.json\n")
            .run(),
    );
    runs.push(
        cli()
            .args(["next-version", "tiny", "--image", &image])
            .args(ca_arg)
            .stdout("tiny: no new version: inputs and tools unchanged since 1.0.0\n")
            .run(),
    );
    for run in &runs {
        let all = format!("{}{}", run.stdout(), run.stderr());
        assert!(!all.contains(PASSWORD) && !all.contains(&auth), "{all}");
    }
}
