//! Shared test harness: a builder that runs the real binary in a temp dir,
//! and access to the development services (engine, registry).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (where images.toml, templates/ and docker/ live).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the real `sunaba-images` binary.
pub struct Cli {
    cmd: Command,
}

impl Cli {
    pub fn new(dir: &Path) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sunaba-images"));
        cmd.current_dir(dir);
        // Tests choose their own profile and manifest explicitly.
        cmd.env_remove("SUNABA_PROFILE")
            .env_remove("SUNABA_MANIFEST");
        Cli { cmd }
    }
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.args(args);
        self
    }
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }
    pub fn env_remove(mut self, key: &str) -> Self {
        self.cmd.env_remove(key);
        self
    }
    /// The configured command, to spawn it yourself (e.g. to kill it).
    pub fn into_command(self) -> Command {
        self.cmd
    }
    pub fn run(mut self) -> Run {
        let output = self.cmd.output().expect("spawn sunaba-images");
        Run { output }
    }
}

pub struct Run {
    pub output: Output,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }
    #[track_caller]
    pub fn success(self) -> Self {
        assert!(
            self.output.status.success(),
            "expected success, got {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.output.status,
            self.stdout(),
            self.stderr()
        );
        self
    }
    #[track_caller]
    pub fn failure(self) -> Self {
        assert!(
            !self.output.status.success(),
            "expected failure, got success\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout(),
            self.stderr()
        );
        self
    }
}

/// A temp copy of the project's image-family inputs (images.toml,
/// image_pins.json, templates/, docker/), to mutate freely.
pub fn project_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = repo_root();
    for item in ["images.toml", "image_pins.json", "templates", "docker"] {
        copy_tree(&root.join(item), &dir.path().join(item));
    }
    dir
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

/// Returns the services, or `None` (with a note) when they are absent outside
/// CI. Under CI a missing service is a failure, never a silent pass.
pub fn services(test: &str) -> Option<Services> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        get("DOCKER_HOST"),
        get("SUNABA_ENGINE"),
        get("SUNABA_REGISTRY"),
        get("SUNABA_BASE_IMAGE"),
        get("SUNABA_BASE_REF"),
    ) {
        (Some(docker_host), Some(engine), Some(registry), Some(base_image), Some(base_ref)) => {
            Some(Services {
                docker_host,
                engine,
                registry,
                base_image,
                base_ref,
            })
        }
        _ => {
            let msg = format!(
                "{test}: development services are not available (run `scripts/dev-env up` \
                 and source the env file it prints)"
            );
            if std::env::var_os("CI").is_some() {
                panic!("{msg}; CI is set, so this is a failure");
            }
            eprintln!("SKIPPED {msg}");
            None
        }
    }
}

/// Only the registry (for registry tests that need no engine).
pub fn registry(test: &str) -> Option<String> {
    match std::env::var("SUNABA_REGISTRY")
        .ok()
        .filter(|v| !v.is_empty())
    {
        Some(r) => Some(r),
        None => {
            let msg = format!("{test}: SUNABA_REGISTRY is not set (run `scripts/dev-env up`)");
            if std::env::var_os("CI").is_some() {
                panic!("{msg}; CI is set, so this is a failure");
            }
            eprintln!("SKIPPED {msg}");
            None
        }
    }
}
