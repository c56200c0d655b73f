//! `pin`, `pins show`, `pins verify` and `version` against the real loopback
//! registry. Images are small synthetic OCI images (config with labels, one
//! empty tar layer) pushed straight through the distribution API, each test
//! in its own repository.

use crate::support::{self, Cli};
use serde_json::{Value, json};
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// A minimal registry client for the test side (pushing, deleting).
pub struct Registry {
    host: String,
    http: reqwest::Client,
    rt: tokio::runtime::Runtime,
}

impl Registry {
    pub fn new(host: &str) -> Registry {
        Registry {
            host: host.to_string(),
            http: reqwest::Client::new(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}/v2/{path}", self.host)
    }

    pub fn push_blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = sha256(bytes);
        self.rt.block_on(async {
            let start = self
                .http
                .post(self.url(&format!("{repo}/blobs/uploads/")))
                .send()
                .await
                .unwrap();
            assert_eq!(
                start.status(),
                202,
                "start upload: {:?}",
                start.text().await
            );
            let loc = start.headers()["location"].to_str().unwrap().to_string();
            let loc = if loc.starts_with("http") {
                loc
            } else {
                format!("http://{}{loc}", self.host)
            };
            let sep = if loc.contains('?') { '&' } else { '?' };
            let put = self
                .http
                .put(format!("{loc}{sep}digest={digest}"))
                .header("content-type", "application/octet-stream")
                .body(bytes.to_vec())
                .send()
                .await
                .unwrap();
            assert_eq!(put.status(), 201, "finish upload: {:?}", put.text().await);
        });
        digest
    }

    pub fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        body: &[u8],
    ) -> String {
        self.rt.block_on(async {
            let r = self
                .http
                .put(self.url(&format!("{repo}/manifests/{reference}")))
                .header("content-type", media_type)
                .body(body.to_vec())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201, "put manifest: {:?}", r.text().await);
        });
        sha256(body)
    }

    /// Pushes a one-layer image whose config carries `labels`; returns the
    /// manifest digest. `tag` may be None to push by digest only.
    pub fn push_image(
        &self,
        repo: &str,
        tag: Option<&str>,
        labels: &BTreeMap<String, String>,
        arch: &str,
    ) -> String {
        // An empty tar archive: two zero blocks.
        let layer = vec![0u8; 1024];
        let layer_digest = self.push_blob(repo, &layer);
        let config = json!({
            "architecture": arch,
            "os": "linux",
            "config": {"Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        });
        let config = serde_json::to_vec(&config).unwrap();
        let config_digest = self.push_blob(repo, &config);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": layer.len(),
            }],
        });
        let body = serde_json::to_vec(&manifest).unwrap();
        let digest = sha256(&body);
        self.put_manifest(repo, tag.unwrap_or(&digest), OCI_MANIFEST, &body)
    }

    /// Pushes an index of per-architecture images; returns (index digest,
    /// arch -> manifest digest).
    pub fn push_index(
        &self,
        repo: &str,
        tag: &str,
        labels: &BTreeMap<String, String>,
        arches: &[&str],
    ) -> (String, BTreeMap<String, String>) {
        let mut platforms = BTreeMap::new();
        let mut entries = Vec::new();
        for arch in arches {
            let d = self.push_image(repo, None, labels, arch);
            let size = self.manifest_bytes(repo, &d).len();
            entries.push(json!({
                "mediaType": OCI_MANIFEST, "digest": d, "size": size,
                "platform": {"os": "linux", "architecture": arch},
            }));
            platforms.insert(format!("linux/{arch}"), d);
        }
        let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries});
        let body = serde_json::to_vec(&index).unwrap();
        (self.put_manifest(repo, tag, OCI_INDEX, &body), platforms)
    }

    pub fn manifest_bytes(&self, repo: &str, reference: &str) -> Vec<u8> {
        self.rt.block_on(async {
            let r = self
                .http
                .get(self.url(&format!("{repo}/manifests/{reference}")))
                .header("accept", format!("{OCI_MANIFEST}, {OCI_INDEX}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap().to_vec()
        })
    }

    pub fn delete_manifest(&self, repo: &str, digest: &str) {
        self.rt.block_on(async {
            let r = self
                .http
                .delete(self.url(&format!("{repo}/manifests/{digest}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 202, "delete: {:?}", r.text().await);
        });
    }
}

/// Every tool the manifest knows, at a version: a superset of what any
/// variant owes.
fn all_tools() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(support::repo_root().join("images.toml")).unwrap();
    let doc: toml::Table = text.parse().unwrap();
    doc["tools"]
        .as_table()
        .unwrap()
        .iter()
        .map(|(name, t)| {
            let v = if t.get("presence_only").and_then(|p| p.as_bool()) == Some(true) {
                "present"
            } else {
                "1.0.0"
            };
            (name.clone(), v.to_string())
        })
        .collect()
}

fn check_label(
    status: &str,
    variant: &str,
    inputs: &str,
    tools: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let record = json!({
        "schema": 1, "status": status, "variant": variant,
        "inputs": inputs, "checked_at": "2026-11-30T07:00:00Z", "tools": tools,
    });
    [
        ("dev.sunaba.check".to_string(), record.to_string()),
        ("dev.sunaba.inputs".to_string(), inputs.to_string()),
        ("dev.sunaba.variant".to_string(), variant.to_string()),
    ]
    .into()
}

/// A project copy whose `local` profile points at a repository of its own.
pub struct Project {
    pub dir: tempfile::TempDir,
    pub registry: Registry,
    /// Path inside the registry (`<unique>/sandbox`).
    pub repo: String,
}

impl Project {
    pub fn new(test: &str) -> Option<Project> {
        let host = support::registry(test)?;
        let dir = support::project_copy();
        let unique = format!(
            "pins-{}-{}-{}",
            test.replace('_', "-"),
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let repo = format!("{unique}/sandbox");
        let manifest = dir.path().join("images.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let marker = "[profiles.local]\n";
        let at = text.find(marker).expect("images.toml has [profiles.local]");
        let mut text = text.clone();
        text.insert_str(
            at + marker.len(),
            &format!("repository = \"{host}/{repo}\"\n"),
        );
        // Drop the shipped profile's own repository line (now duplicated).
        let shipped = text[at..]
            .lines()
            .skip(2)
            .find(|l| l.starts_with("repository ="))
            .map(|l| format!("{l}\n"));
        if let Some(line) = shipped {
            let pos = at + text[at..].find(&line).unwrap();
            text.replace_range(pos..pos + line.len(), "");
        }
        std::fs::write(&manifest, &text).unwrap();
        // Pinning never reads fragment scripts, but the manifest must name
        // existing files; fill in any this checkout does not have yet.
        let doc: toml::Table = text.parse().unwrap();
        for frag in doc["fragments"].as_table().unwrap().values() {
            let script = dir.path().join(frag["script"].as_str().unwrap());
            if !script.exists() {
                std::fs::create_dir_all(script.parent().unwrap()).unwrap();
                std::fs::write(&script, "#!/bin/sh\n").unwrap();
            }
        }
        // Start every test from an empty pins file.
        std::fs::write(
            dir.path().join("image_pins.json"),
            "{\"schema\": 1, \"images\": {}}\n",
        )
        .unwrap();
        Some(Project {
            dir,
            registry: Registry::new(&host),
            repo,
        })
    }

    pub fn full_repo(&self) -> String {
        format!("{}/{}", self.registry.host, self.repo)
    }

    pub fn cli(&self) -> Cli {
        Cli::new(self.dir.path()).args(["--profile", "local"])
    }

    pub fn run(&self, args: &[&str]) -> support::Run {
        self.cli().args(args).run()
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
        self.registry
            .push_image(&self.repo, Some(tag), labels, "amd64")
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

fn json_out(run: &support::Run) -> Value {
    serde_json::from_str(&run.stdout()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout()))
}

fn planned_tag(plan: &Value, alias: &str) -> Option<String> {
    plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["alias"] == alias)
        .and_then(|s| s["new"]["tag"].as_str().map(str::to_string))
}

/// The acceptance registry: python 1.0.0, 1.1.0, 1.2.0-rc.1, 2.0.0 and noise.
fn acceptance(p: &Project) -> BTreeMap<&'static str, String> {
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
fn pin_selects_by_semver_rules_and_writes_only_with_write() {
    let Some(p) = Project::new("pin_semver") else {
        return;
    };
    let digests = acceptance(&p);

    p.run(&["pin", "python", "--to", "1.0.0", "--write"])
        .success();
    let pins = p.pins();
    assert_eq!(pins["images"]["python"]["version"], "1.0.0");
    assert_eq!(
        pins["images"]["python"]["digest"],
        digests["1.0.0"].as_str()
    );
    assert_eq!(pins["images"]["python"]["tools"]["ruff"], "0.12.0");
    let show = p.run(&["pins", "show", "python"]).success();
    assert_eq!(
        show.stdout(),
        format!("{}@{}\n", p.full_repo(), digests["1.0.0"])
    );

    let before = support::snapshot(p.dir.path());
    let cases: &[(&[&str], &str)] = &[
        (&[], "python-1.1.0"),
        (&["--pre"], "python-1.2.0-rc.1"),
        (&["--allow-major"], "python-2.0.0"),
        (&["--allow-major", "--pre"], "python-2.0.0"),
        (&["--to", "1.2.0-rc.1"], "python-1.2.0-rc.1"),
    ];
    for (flags, want) in cases {
        let mut args = vec!["pin", "python", "--json"];
        args.extend_from_slice(flags);
        let run = p.run(&args).success();
        let plan = json_out(&run);
        assert_eq!(
            planned_tag(&plan, "python").as_deref(),
            Some(*want),
            "{flags:?}"
        );
        assert_eq!(plan["written"], false);
    }
    // The human plan names the move, the bump and the tool.
    let run = p.run(&["pin", "python"]).success();
    let out = run.stdout();
    assert!(out.contains("1.0.0 -> 1.1.0"), "{out}");
    assert!(out.contains(&digests["1.1.0"]), "{out}");
    assert!(out.contains("ruff") && out.contains("minor"), "{out}");
    assert!(out.contains("dry run"), "{out}");
    // Without --write nothing changed.
    assert_eq!(support::snapshot(p.dir.path()), before);

    p.run(&["pin", "python", "--write"]).success();
    assert_eq!(p.pins()["images"]["python"]["version"], "1.1.0");
    let again = p.run(&["pin", "python"]).success();
    assert!(
        again.stdout().contains("nothing to do"),
        "{}",
        again.stdout()
    );

    // Explicit moves that need permission.
    let run = p.run(&["pin", "python", "--to", "2.0.0"]).failure();
    assert!(run.stderr().contains("--allow-major"), "{}", run.stderr());
    let run = p.run(&["pin", "python", "--to", "1.0.0"]).failure();
    assert!(
        run.stderr().contains("--allow-downgrade"),
        "{}",
        run.stderr()
    );
    p.run(&[
        "pin",
        "python",
        "--to",
        "1.0.0",
        "--allow-downgrade",
        "--write",
    ])
    .success();
    assert_eq!(p.pins()["images"]["python"]["version"], "1.0.0");
}

#[test]
fn only_passing_images_covering_owed_tools_are_pinned() {
    let Some(p) = Project::new("pin_gate") else {
        return;
    };
    p.push("python", "1.0.0", &all_tools());
    p.run(&["pin", "python", "--write"]).success();
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

    let run = p.run(&["pin", "python", "--write"]).success();
    assert!(run.stdout().contains("nothing to do"), "{}", run.stdout());
    let err = run.stderr();
    for (tag, why) in [
        ("python-1.4.0", "never checked"),
        ("python-1.3.0", "\"fail\""),
        ("python-1.2.0", "lacks owed tool(s): ruff"),
        ("python-1.1.0", "mis-versioned"),
    ] {
        assert!(
            err.lines().any(|l| l.contains(tag) && l.contains(why)),
            "{tag}: {why}\n{err}"
        );
    }
    assert!(err.contains("ruff 1.0.0 -> 2.0.0"), "proving tool: {err}");
    assert_eq!(p.pins(), pinned);

    for (version, why) in [
        ("1.4.0", "never checked"),
        ("1.2.0", "ruff"),
        ("1.1.0", "mis-versioned"),
    ] {
        let run = p
            .run(&["pin", "python", "--to", version, "--write"])
            .failure();
        assert!(run.stderr().contains(why), "{version}: {}", run.stderr());
        assert!(run.stderr().contains("nothing was written"));
        assert_eq!(p.pins(), pinned);
    }
}

/// Pushes passing images for every variant and pins all aliases.
fn pin_everything(p: &Project) {
    for variant in ["base", "python", "go", "js", "full", "minimal"] {
        p.push(variant, "1.0.0", &all_tools());
    }
    let run = p.run(&["pin", "--write"]).success();
    assert!(run.stdout().contains("wrote"), "{}", run.stdout());
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

#[test]
fn verify_passes_then_catches_each_problem() {
    let Some(p) = Project::new("verify") else {
        return;
    };
    pin_everything(&p);
    let pins = p.pins();
    let aliases: Vec<&String> = pins["images"].as_object().unwrap().keys().collect();
    assert_eq!(
        aliases,
        ["full", "go", "js", "minimal", "neutral", "python"]
    );
    let ok = p.run(&["pins", "verify"]).success();
    assert!(ok.stdout().contains("ok: 6 alias(es)"), "{}", ok.stdout());
    let show = p.run(&["pins", "show"]).success();
    assert_eq!(show.stdout().lines().count(), 6);
    let original = std::fs::read(p.pins_path()).unwrap();

    // A missing alias.
    edit_pins(&p, |v| {
        v["images"].as_object_mut().unwrap().remove("go");
    });
    let run = p.run(&["pins", "verify"]);
    assert_eq!(run.code(), Some(2), "{}", run.stdout());
    assert!(
        run.stdout().contains("problem: go: not pinned"),
        "{}",
        run.stdout()
    );

    // A tampered digest.
    std::fs::write(p.pins_path(), &original).unwrap();
    let fake = sha256(b"tampered");
    edit_pins(&p, |v| v["images"]["js"]["digest"] = json!(fake));
    let run = p.run(&["pins", "verify"]);
    assert_eq!(run.code(), Some(2));
    let line = run
        .stdout()
        .lines()
        .find(|l| l.starts_with("problem: js:"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(
        line.contains(&fake) && line.contains("no longer exists"),
        "{}",
        run.stdout()
    );

    // A deleted manifest.
    std::fs::write(p.pins_path(), &original).unwrap();
    let go_digest = pins["images"]["go"]["digest"].as_str().unwrap().to_string();
    p.registry.delete_manifest(&p.repo, &go_digest);
    let run = p.run(&["pins", "verify"]);
    assert_eq!(run.code(), Some(2));
    assert!(
        run.stdout()
            .lines()
            .any(|l| l.starts_with("problem: go:") && l.contains(&go_digest)),
        "{}",
        run.stdout()
    );
    let problems = run
        .stdout()
        .lines()
        .filter(|l| l.starts_with("problem:"))
        .count();
    assert!(problems >= 1);
    assert!(
        run.stdout()
            .lines()
            .all(|l| !l.starts_with("problem: python"))
    );
}

#[test]
fn verify_warns_on_a_moved_tag_and_an_orphan_is_an_error() {
    let Some(p) = Project::new("verify_moved") else {
        return;
    };
    let old = p.push("python", "1.0.0", &all_tools());
    p.run(&["pin", "python", "--write"]).success();
    // Other aliases are unpinned here (problems of their own); only python's
    // lines matter.
    let new = p.push_labels(
        "python-1.0.0",
        &check_label("pass", "python", "sha256:other", &all_tools()),
    );
    let run = p.run(&["pins", "verify"]);
    let warn = run
        .stdout()
        .lines()
        .find(|l| l.starts_with("warning: python:"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(
        warn.contains(&old) && warn.contains(&new) && warn.contains("moved"),
        "{}",
        run.stdout()
    );
    assert!(
        !run.stdout()
            .lines()
            .any(|l| l.starts_with("problem: python")),
        "{}",
        run.stdout()
    );

    // An orphaned alias: `pin` refuses with line/column, verify reports it.
    edit_pins(&p, |v| {
        let py = v["images"]["python"].clone();
        v["images"]["snake"] = py;
    });
    let before = std::fs::read(p.pins_path()).unwrap();
    let run = p.run(&["pin", "python", "--write"]).failure();
    assert!(
        run.stderr().contains("image_pins.json:"),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("`images.snake`"), "{}", run.stderr());
    assert!(
        run.stderr().contains("--allow-breaking"),
        "{}",
        run.stderr()
    );
    assert_eq!(std::fs::read(p.pins_path()).unwrap(), before);
    let run = p.run(&["pins", "verify"]);
    assert_eq!(run.code(), Some(2));
    assert!(run.stdout().contains("problem: snake:"), "{}", run.stdout());
    p.run(&["pin", "python", "--write", "--allow-breaking"])
        .success();
    assert!(p.pins()["images"].get("snake").is_none());
}

#[test]
fn multi_platform_images_pin_the_index_digest() {
    let Some(p) = Project::new("multiplatform") else {
        return;
    };
    let labels = check_label("pass", "go", "sha256:in", &all_tools());
    let (index, platforms) =
        p.registry
            .push_index(&p.repo, "go-1.0.0", &labels, &["amd64", "arm64"]);
    let run = p.run(&["pin", "go", "--write"]).success();
    let pin = &p.pins()["images"]["go"];
    assert_eq!(pin["digest"], index.as_str(), "{}", run.stdout());
    for (plat, d) in &platforms {
        assert_eq!(pin["platforms"][plat], d.as_str());
    }
    let show = p.run(&["pins", "show", "go"]).success();
    assert_eq!(show.stdout().trim(), format!("{}@{index}", p.full_repo()));
}

#[test]
fn malformed_pins_files_are_reported_and_never_written() {
    let Some(p) = Project::new("malformed") else {
        return;
    };
    p.push("python", "1.0.0", &all_tools());
    p.run(&["pin", "python", "--write"]).success();
    let good = std::fs::read_to_string(p.pins_path()).unwrap();
    let digest = p.pins()["images"]["python"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let cases: Vec<(String, &str)> = vec![
        (
            good.replacen("\"schema\": 1,", "\"schema\": 1", 1),
            "image_pins.json:3:",
        ),
        (
            good.replacen(&digest, "sha256:abc", 1),
            "`images.python.digest`",
        ),
        (
            good.replacen("\"version\": \"1.0.0\"", "\"version\": 1", 1),
            "`images.python.version`",
        ),
        (
            good.replacen("\"tools\"", "\"toolz\"", 1),
            "unknown field `toolz`",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(p.pins_path(), &text).unwrap();
        for args in [
            &["pin", "python", "--write"][..],
            &["pins", "verify"],
            &["pins", "show", "python"],
        ] {
            let run = p.run(args).failure();
            assert!(
                run.stderr().contains(want),
                "{args:?} {want}: {}",
                run.stderr()
            );
            assert!(
                run.stderr().contains("image_pins.json:"),
                "{}",
                run.stderr()
            );
            assert_eq!(std::fs::read_to_string(p.pins_path()).unwrap(), text);
        }
    }
}

#[test]
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
    p.run(&["pin", "python", "--write"]).success();
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
fn version_reports_next_version_tool_by_tool() {
    let Some(p) = Project::new("version") else {
        return;
    };
    let base = tools_with(&[("ruff", Some("0.12.0")), ("rg", Some("14.1.1"))]);
    p.push("python", "1.0.0", &base);
    p.run(&["pin", "python", "--write"]).success();
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
        let run = p
            .run(&["version", "python", "--image", &image, "--json"])
            .success();
        let v = json_out(&run);
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
        let human = p
            .run(&["version", "python", "--image", &image])
            .success()
            .stdout();
        match next {
            Some(n) => assert!(human.contains(&format!("1.0.0 -> {n}")), "{human}"),
            None => assert!(human.contains("no new version"), "{human}"),
        }
        if let Some(t) = tool {
            assert!(
                human.lines().any(|l| l.trim_start().starts_with(t)),
                "{human}"
            );
        }
    }
}

/// Kills `pin --write` at random moments; the file must always parse and be
/// exactly the old or the new content.
#[test]
fn crash_during_write_leaves_old_or_new_file() {
    let Some(p) = Project::new("crash") else {
        return;
    };
    p.push("python", "1.0.0", &all_tools());
    p.push("python", "1.1.0", &tools_with(&[("jq", Some("1.1.0"))]));
    p.run(&["pin", "python", "--to", "1.0.0", "--write"])
        .success();
    // A large unknown field makes the write itself take a while, so kills
    // land before, during and after it.
    edit_pins(&p, |v| {
        v["ballast"] = json!(
            (0..100_000)
                .map(|i| format!("entry-{i}"))
                .collect::<Vec<_>>()
        );
    });
    let old = std::fs::read(p.pins_path()).unwrap();
    let run = p.run(&["pin", "python", "--write"]).success();
    assert!(run.stdout().contains("1.0.0 -> 1.1.0"));
    let new = std::fs::read(p.pins_path()).unwrap();
    assert_ne!(old, new);

    // Time a full run to spread kill moments over it.
    std::fs::write(p.pins_path(), &old).unwrap();
    let t = Instant::now();
    p.run(&["pin", "python", "--write"]).success();
    let full = t.elapsed();

    let trials: usize = std::env::var("SUNABA_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(45);
    // What a writer changes first: a new file in the directory (the temp
    // file) or the target itself (an in-place writer truncating it).
    let state = || {
        let mut names: Vec<String> = std::fs::read_dir(p.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".lock"))
            .collect();
        names.sort();
        let meta = std::fs::metadata(p.pins_path()).ok();
        let target = meta.map(|m| {
            (
                m.len(),
                m.modified().ok(),
                std::os::unix::fs::MetadataExt::ino(&m),
            )
        });
        (names, target)
    };
    let (mut saw_old, mut saw_new, mut mid_write) = (0, 0, 0);
    for i in 0..trials {
        std::fs::write(p.pins_path(), &old).unwrap();
        let before = state();
        let mut child = p
            .cli()
            .args(["pin", "python", "--write"])
            .into_command()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Four ways to pick the moment: anywhere in the run, around its end
        // (where the write is), at the first sign of writing, and a little
        // after it (during the temp file's write, fsync and rename).
        let how = match i % 4 {
            0 => {
                std::thread::sleep(full.mul_f64(rand::random::<f64>() * 1.1));
                "anywhere"
            }
            1 => {
                std::thread::sleep(full.mul_f64(0.8 + rand::random::<f64>() * 0.8));
                "late"
            }
            k => {
                let deadline = Instant::now() + full * 3;
                let mut seen = false;
                while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
                    if state() != before {
                        seen = true;
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
                if seen {
                    mid_write += 1;
                }
                if k == 3 {
                    std::thread::sleep(Duration::from_micros(rand::random_range(0..20_000)));
                }
                "at the first sign of writing"
            }
        };
        let _ = child.kill();
        let _ = child.wait();
        let now = std::fs::read(p.pins_path()).unwrap();
        serde_json::from_slice::<Value>(&now)
            .unwrap_or_else(|e| panic!("trial {i} ({how}): file does not parse: {e}"));
        if now == old {
            saw_old += 1;
        } else if now == new {
            saw_new += 1;
        } else {
            panic!("trial {i} ({how}): file is neither the old nor the new content");
        }
    }
    eprintln!(
        "crash test: {trials} trials (a run takes {full:?}): {saw_old} left the old file, \
         {saw_new} the new; {mid_write} kills aimed at a write in progress"
    );
    assert!(
        saw_old > 0 && saw_new > 0,
        "kills must land on both sides of the rename"
    );
    assert!(
        mid_write > 0,
        "some kills must be aimed at a write in progress"
    );

    // A later run cleans up temp files a killed writer left behind.
    std::fs::write(p.pins_path(), &old).unwrap();
    p.run(&["pin", "python", "--write"]).success();
    let leftovers: Vec<_> = std::fs::read_dir(p.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Parallel writers, each pinning a different alias: no update is lost.
#[test]
fn parallel_writers_lose_no_update() {
    let Some(p) = Project::new("concurrency") else {
        return;
    };
    let variants = ["base", "python", "go", "js", "full", "minimal"];
    for v in variants {
        p.push(v, "1.0.0", &all_tools());
    }
    let aliases = ["neutral", "python", "go", "js", "full", "minimal"];
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
                    .args(["pin", a, "--write"])
                    .into_command()
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let pins = p.pins();
        let got: Vec<&String> = pins["images"].as_object().unwrap().keys().collect();
        let mut want = aliases.to_vec();
        want.sort();
        assert_eq!(got, want, "round {round}: an update was lost");
    }
    eprintln!(
        "concurrency test: {rounds} rounds x {} parallel writers, no update lost",
        aliases.len()
    );
}
