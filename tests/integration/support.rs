//! Shared test harness: the strict CLI builder (`cli`), the project builder
//! (`project`), the one gate for services a test needs (skip locally, fail
//! under CI), snapshots and `sha256`; the OCI test pusher (`oci`); and the registry
//! test servers: real `docker-registry` instances (`distribution`), a raw
//! HTTP server (`server`), a fault-injection proxy (`proxy`), a token
//! issuer (`issuer`) and the shaped link program (`link`: bandwidth,
//! latency and faults, the `sunaba-link` binary).
#![allow(dead_code)]

mod cli;
pub mod distribution;
pub mod issuer;
pub mod link;
pub mod oci;
mod project;
pub mod proxy;
pub mod server;

pub use cli::{Cli, Run};
pub use project::{EMPTY_PINS, Family, Project, Variant, fake_tool};

use sha2::Digest as _;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The repository root (where images.toml, templates/ and docker/ live).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `sha256:<hex>` of `bytes`, as OCI digests are written.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// The repository's images.toml as plain TOML, read and parsed once. Tests
/// about the shipped family read its variants, aliases and tools from here
/// (never a list of their own), so adding a toolchain breaks none of them.
pub fn shipped_manifest() -> &'static toml::Table {
    static DOC: std::sync::OnceLock<toml::Table> = std::sync::OnceLock::new();
    DOC.get_or_init(|| {
        std::fs::read_to_string(repo_root().join("images.toml"))
            .unwrap()
            .parse()
            .unwrap()
    })
}

/// The shipped family's variant names, sorted.
pub fn shipped_variants() -> Vec<String> {
    shipped_manifest()["variants"]
        .as_table()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

/// The shipped family's aliases (alias -> variant), sorted by alias.
pub fn shipped_aliases() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (variant, v) in shipped_manifest()["variants"].as_table().unwrap() {
        for alias in v
            .get("aliases")
            .and_then(|a| a.as_array())
            .into_iter()
            .flatten()
        {
            out.insert(alias.as_str().unwrap().to_string(), variant.clone());
        }
    }
    out
}

/// The smoke suites the shipped manifest says `variant` runs: `neutral`,
/// and each suite serving one of the languages the variant serves (a
/// suite's `languages`, else its own name).
pub fn shipped_smoke_suites(variant: &str) -> std::collections::BTreeSet<String> {
    let doc = shipped_manifest();
    let strings = |v: Option<&toml::Value>| -> Vec<String> {
        v.and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let serves = strings(doc["variants"][variant].get("serves"));
    doc["smoke"]
        .as_table()
        .unwrap()
        .iter()
        .filter(|(name, suite)| {
            if *name == "neutral" {
                return true;
            }
            let mut langs = strings(suite.get("languages"));
            if langs.is_empty() {
                langs.push(name.to_string());
            }
            langs.iter().any(|l| serves.contains(l))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// `text` (an images.toml) with the string list at `path` (e.g.
/// `["variants", "full", "fragments"]`) replaced by `f` of it; everything
/// else, comments and layout included, as it was.
pub fn edit_manifest_list(text: &str, path: &[&str], f: impl FnOnce(&mut Vec<String>)) -> String {
    let mut doc: toml_edit::DocumentMut = text.parse().unwrap();
    let (last, tables) = path.split_last().unwrap();
    let mut item = doc.as_item_mut();
    for key in tables {
        item = &mut item[*key];
    }
    let array = item[*last]
        .as_array_mut()
        .unwrap_or_else(|| panic!("images.toml has no list at {}", path.join(".")));
    let mut list: Vec<String> = array
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    f(&mut list);
    let decor = array.decor().clone();
    *array = list.iter().map(String::as_str).collect();
    *array.decor_mut() = decor;
    doc.to_string()
}

/// Every tool the manifest knows, at a version: a superset of what any
/// variant owes.
pub fn all_tools() -> BTreeMap<String, String> {
    shipped_manifest()["tools"]
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

/// Every smoke suite the manifest declares, each with one passed case: a
/// record that satisfies any variant's smoke requirement.
fn all_smoke_suites() -> BTreeMap<String, usize> {
    shipped_manifest()["smoke"]
        .as_table()
        .unwrap()
        .keys()
        .map(|suite| (suite.clone(), 1))
        .collect()
}

/// The labels a build of the shipped family writes: a check record of
/// `status` with `tools` and every shipped smoke suite passed.
pub fn check_label(
    status: &str,
    variant: &str,
    inputs: &str,
    tools: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    check_label_with(status, variant, inputs, tools, &all_smoke_suites())
}

/// [`check_label`] with the smoke suites (suite -> passed cases) given, for
/// a family of the test's own.
pub fn check_label_with(
    status: &str,
    variant: &str,
    inputs: &str,
    tools: &BTreeMap<String, String>,
    suites: &BTreeMap<String, usize>,
) -> BTreeMap<String, String> {
    let record = serde_json::json!({
        "schema": 1, "status": status, "variant": variant,
        "inputs": inputs, "checked_at": "2026-11-30T07:00:00Z", "tools": tools,
        "smoke": {"digest": "sha256:smoke", "suites": suites},
    });
    [
        ("dev.sunaba.check".to_string(), record.to_string()),
        ("dev.sunaba.inputs".to_string(), inputs.to_string()),
        ("dev.sunaba.variant".to_string(), variant.to_string()),
    ]
    .into()
}

/// The fixture families' smoke suite, `[smoke.fake]`: `beta check DIR`
/// reports a file holding DEFECT (see [`checker_tool`]); its projects are
/// written by [`write_fake_smoke_projects`].
pub const FAKE_SMOKE: &str = r#"# beta's smoke: `beta check DIR` reports a file holding DEFECT.
[smoke.fake]
[[smoke.fake.commands]]
run = ["beta", "check", "."]
expect.pass = { exit = 0, output = "^beta: clean" }
expect.defect = { exit = 1, output = "DEFECT in ./a.txt" }
"#;

/// A shell snippet installing `/usr/local/bin/<name>`: `<name> check DIR`
/// reports a file holding DEFECT (exit 1) or says it is clean; anything
/// else prints `output`.
pub fn checker_tool(name: &str, output: &str) -> String {
    format!(
        "cat > /usr/local/bin/{name} <<'EOF'\n#!/bin/sh\nif [ \"$1\" = check ]; then\n  \
         found=$(grep -rl DEFECT \"$2\") && {{ echo \"{name}: DEFECT in $found\"; exit 1; }}\n  \
         echo '{name}: clean'; exit 0\nfi\necho \"{output}\"\nEOF\nchmod +x /usr/local/bin/{name}\n"
    )
}

/// The `[smoke.fake]` projects under `root`: `pass` (clean) and `defect`.
pub fn write_fake_smoke_projects(root: &Path) {
    for (project, text) in [("pass", "fine\n"), ("defect", "a DEFECT\n")] {
        let dir = root.join("tests/smoke/fake").join(project);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), text).unwrap();
    }
}

/// `skopeo [global…] inspect --tls-verify=false --no-creds [args…] docker://image`.
pub fn skopeo(global: &[&str], args: &[&str], image: &str) -> Vec<u8> {
    let out = std::process::Command::new("skopeo")
        .args(global)
        .args(["inspect", "--tls-verify=false", "--no-creds"])
        .args(args)
        .arg(format!("docker://{image}"))
        .output()
        .expect("run skopeo (apt-get install skopeo)");
    assert!(
        out.status.success(),
        "skopeo {global:?} inspect {args:?} {image}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The config digest of the image skopeo chooses for linux/`arch` (its
/// `Digest` field is the index's, so the child is told by its config,
/// which differs per child here).
pub fn skopeo_config_for_arch(arch: &str, image: &str) -> String {
    let global = ["--override-os", "linux", "--override-arch", arch];
    sha256(&skopeo(&global, &["--config", "--raw"], image))
}

/// A CLI run in `home` as its HOME, with no credential files of the
/// machine in sight (docker config, podman auth files).
pub fn isolated_cli(home: &Path) -> Cli {
    Cli::new(home)
        .env("HOME", home)
        .env_remove("DOCKER_CONFIG")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("SUNABA_CERTS_D")
}

/// Held by the tests that load the whole machine (real builds, gigabytes
/// pushed through a proxy) and by the ones that time a run to aim a kill at
/// it, so the two never overlap: a timing measured on an idle machine is
/// useless on a busy one.
pub fn machine_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Removes `repository`'s images from the engine, a fixture's cleanup:
/// its tags, then the images themselves unless something else still uses
/// them.
pub fn remove_images(engine: &str, repository: &str) {
    let docker = |args: &[&str]| {
        std::process::Command::new(engine)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
    };
    let list = |format: &[&str]| -> Vec<String> {
        let filter = format!("reference={repository}");
        let mut args = vec!["image", "ls"];
        args.extend(format);
        args.extend(["--filter", &filter]);
        let Ok(out) = docker(&args) else {
            return Vec::new();
        };
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        lines.sort();
        lines.dedup();
        lines
    };
    let tags = list(&["--format", "{{.Repository}}:{{.Tag}}"]);
    let ids = list(&["--quiet", "--no-trunc"]);
    if !tags.is_empty() {
        let mut args = vec!["image", "rm", "--force"];
        args.extend(tags.iter().map(String::as_str));
        let _ = docker(&args);
    }
    if !ids.is_empty() {
        let mut args = vec!["image", "rm"];
        args.extend(ids.iter().map(String::as_str));
        let _ = docker(&args);
    }
}

/// A name no other test (or earlier run) uses: `<prefix>-<pid>-<nanos>`.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Writes `script` to `path` as a program (mode 0755) for the CLI or a test
/// to run, from a child process. Had this process opened it for writing, a
/// child forked meanwhile on another test thread would hold that
/// descriptor until its own exec, and running the program then fails with
/// ETXTBSY ("Text file busy").
pub fn write_program(path: &Path, script: &str) {
    let mut child = std::process::Command::new("/bin/sh")
        .args(["-c", r#"cat > "$0" && chmod 755 "$0""#])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("/bin/sh writing a test program");
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, script.as_bytes()).unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "writing {}: {status}", path.display());
}

pub fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else if from.exists() {
        std::fs::copy(from, to).unwrap();
    }
}

/// Snapshot of every file under `dir` (path -> bytes), to prove nothing changed.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                out.insert(
                    path.strip_prefix(base).unwrap().to_path_buf(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The one gate for something a test needs from the machine: `Some` when it
/// is there; otherwise the test is skipped with a note, except under CI
/// (`CI` set), where a missing service is a failure, never a silent pass.
#[track_caller]
pub fn require<T>(found: Result<T, String>) -> Option<T> {
    assert_marked_tiered(None);
    match found {
        Ok(t) => Some(t),
        Err(missing) => {
            let test = current_test();
            let msg = format!("{test}: {missing}");
            if std::env::var_os("CI").is_some() {
                panic!("{msg}; CI is set, so this is a failure");
            }
            eprintln!("SKIPPED {msg}");
            record_skip(&msg);
            None
        }
    }
}

/// A test that needs a tier is marked `#[ignore = "tier: T"]`, so that a
/// plain `cargo test` lists it as ignored with its tier instead of running
/// it into an early return that libtest would print as `ok`; the gate runs
/// the marked tests with `--ignored` (scripts/test). A test that reaches a
/// tier's gate while libtest was not asked for ignored tests is unmarked:
/// it fails here, naming the attribute to add.
#[track_caller]
fn assert_marked_tiered(tier: Option<Tier>) {
    let asked_for_ignored = std::env::args().any(|a| a == "--ignored" || a == "--include-ignored");
    if !asked_for_ignored {
        let test = current_test();
        let tier = tier.map_or("registry|engine|emulation", Tier::name);
        panic!(
            "{test} needs a service (the {tier} tier) but is not marked: add \
             `#[ignore = \"tier: {tier}\"]` above it (the gate runs marked tests with --ignored)"
        );
    }
}

/// The running test's name (libtest names each test's thread after it).
fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}

/// Appends a skipped test to `$SUNABA_TEST_SKIP_LOG` (scripts/test sets it
/// and prints what was skipped and why): libtest shows a test that returned
/// early as passed and swallows its stderr, so the file is what makes a
/// skip visible.
fn record_skip(msg: &str) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("SUNABA_TEST_SKIP_LOG") else {
        return;
    };
    let line = format!("{}\n", msg.replace('\n', " "));
    // One write of one line in append mode: lines of parallel tests do not mix.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!(
            "cannot record a skipped test in {}: {e}",
            Path::new(&path).display()
        );
    }
}

fn env_var(key: &str) -> Result<String, String> {
    std::env::var(key)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            format!(
                "{key} is not set: the development services are not available (run \
             `scripts/dev-env up` and source the env file it prints)"
            )
        })
}

/// The development services, read from the environment that
/// `scripts/dev-env up` writes (`$SUNABA_DEV_HOME/env`, sourced by scripts/test).
#[derive(Debug, Clone)]
pub struct Services {
    pub docker_host: String,
    pub engine: String,
    pub registry: String,
    pub base_image: String,
    pub base_ref: String,
}

impl Services {
    /// The dev base as images.toml pins an upstream: `name:tag@sha256:…`.
    pub fn pinned_base(&self) -> String {
        let digest = self
            .base_ref
            .rsplit_once('@')
            .expect("SUNABA_BASE_REF has a digest")
            .1;
        format!("{}@{digest}", self.base_image)
    }
}

/// The engine and the registry of the development services (see [`require`]),
/// with the dev base image (`base_image`) in the engine: a test that runs it
/// must not depend on another having pulled it first (the engine would pull
/// it on first use and print its progress on stderr).
pub fn services() -> Option<Services> {
    if !selected(Tier::Engine) {
        return None;
    }
    engine_services()
}

fn engine_services() -> Option<Services> {
    require((|| {
        let services = Services {
            docker_host: env_var("DOCKER_HOST")?,
            engine: env_var("SUNABA_ENGINE")?,
            registry: env_var("SUNABA_REGISTRY")?,
            base_image: env_var("SUNABA_BASE_IMAGE")?,
            base_ref: env_var("SUNABA_BASE_REF")?,
        };
        static BASE_PRESENT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        BASE_PRESENT
            .get_or_init(|| ensure_image(&services, &services.base_image))
            .clone()?;
        Ok(services)
    })())
}

/// The development services with Podman as the engine (`SUNABA_PODMAN`,
/// which `scripts/dev-env up` installs, reaching the dev registry through
/// the registries.conf it names in `CONTAINERS_REGISTRIES_CONF`) and the
/// dev base in Podman's store. Podman builds here; it cannot run a container
/// in every sandbox, so its tests build and read images, never start them.
pub fn podman_services() -> Option<Services> {
    if !selected(Tier::Engine) {
        return None;
    }
    let docker = engine_services()?;
    require((|| {
        env_var("CONTAINERS_REGISTRIES_CONF")?;
        let services = Services {
            engine: env_var("SUNABA_PODMAN")?,
            ..docker
        };
        ensure_image(&services, &services.base_image)?;
        Ok(services)
    })())
}

/// `image` is in the engine: inspected, else pulled (quietly).
fn ensure_image(services: &Services, image: &str) -> Result<(), String> {
    let docker = |args: &[&str]| {
        std::process::Command::new(&services.engine)
            .args(args)
            .env("DOCKER_HOST", &services.docker_host)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", services.engine))
    };
    if docker(&["image", "inspect", "--format", "{{.Id}}", image])?
        .status
        .success()
    {
        return Ok(());
    }
    let pulled = docker(&["pull", "--quiet", image])?;
    if pulled.status.success() {
        Ok(())
    } else {
        Err(format!(
            "the dev base {image} is not in the engine and cannot be pulled: {}",
            String::from_utf8_lossy(&pulled.stderr).trim()
        ))
    }
}

/// The development services with a base for linux/amd64 and linux/arm64
/// (an index) and an engine that runs arm64 under emulation, as `scripts/dev-env
/// up` provisions by default (`SUNABA_PLATFORMS`; see [`require`]).
pub fn two_platform_services() -> Option<Services> {
    if !selected(Tier::Emulation) {
        return None;
    }
    let services = engine_services()?;
    require((|| {
        let platforms = env_var("SUNABA_PLATFORMS")?;
        if !platforms.split(',').any(|p| p == "linux/arm64") {
            return Err(format!(
                "SUNABA_PLATFORMS={platforms}: the development services have no linux/arm64 \
                 (run `scripts/dev-env up` without SUNABA_DEV_PLATFORMS=host)"
            ));
        }
        Ok(services)
    })())
}

/// Only the development registry, `host:port` (for tests that need no engine).
pub fn dev_registry() -> Option<String> {
    if !selected(Tier::Registry) {
        return None;
    }
    require(env_var("SUNABA_REGISTRY"))
}

/// The tiers of the suite, by what a test needs from the machine, each
/// needing more than the one before: `fast` (the CLI on files; always runs),
/// `registry`, `engine`, `emulation`. `scripts/test --tier T` runs T and the
/// tiers below it (`SUNABA_TEST_TIER`; unset: all, as CI runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// Real `docker-registry` instances and the dev registry: no engine.
    Registry,
    /// The dev engine (builds, checks, runs) and its registry.
    Engine,
    /// The engine running linux/arm64 under qemu.
    Emulation,
}

impl Tier {
    fn name(self) -> &'static str {
        match self {
            Tier::Registry => "registry",
            Tier::Engine => "engine",
            Tier::Emulation => "emulation",
        }
    }
}

/// Whether `tier` is selected; a test outside the selection returns early
/// and is logged as deselected (never counted as a skip for want of a
/// service, which fails under CI).
pub fn selected(tier: Tier) -> bool {
    assert_marked_tiered(Some(tier));
    let Ok(top) = std::env::var("SUNABA_TEST_TIER") else {
        return true;
    };
    let top = match top.as_str() {
        "fast" => None,
        "registry" => Some(Tier::Registry),
        "engine" => Some(Tier::Engine),
        "emulation" | "all" => Some(Tier::Emulation),
        other => {
            panic!("SUNABA_TEST_TIER={other}: not a tier (fast, registry, engine, emulation)")
        }
    };
    if top.is_some_and(|top| tier <= top) {
        return true;
    }
    let test = current_test();
    record_skip(&format!(
        "DESELECTED {test}: needs the {} tier",
        tier.name()
    ));
    false
}
