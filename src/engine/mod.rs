//! Container engines behind one trait: the Docker CLI (BuildKit through
//! `buildx`, or the classic CLI's built-in BuildKit) and Podman.
//!
//! The engine binary comes from the profile, then `SUNABA_ENGINE`, then PATH
//! (`docker`, then `podman`). `DOCKER_HOST` and Docker contexts are left to the
//! user's environment: nothing here overrides them.

mod argv;
mod docker;
#[cfg(test)]
pub(crate) mod fake;
mod podman;

pub(crate) use argv::{Argv, bind_mount};
pub(crate) use docker::Docker;
#[cfg(test)]
use docker::DockerMode;
pub(crate) use podman::Podman;

use crate::name::Platform;
use crate::process::{Cmd, ProcessError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment variable naming the engine binary (after the profile).
pub(crate) const ENGINE_ENV: &str = "SUNABA_ENGINE";

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(
        "container engine `{program}` ({origin}) was not found; install Docker (with BuildKit) or \
         Podman, or name the binary with the profile's `engine` key or {ENGINE_ENV}"
    )]
    NotFound { program: String, origin: String },
    #[error(
        "no container engine found on PATH (looked for `docker` and `podman`); install one, or \
         name the binary with the profile's `engine` key or {ENGINE_ENV}"
    )]
    NoneOnPath,
    #[error("`{program}` does not look like docker or podman (`--version` said: {said})")]
    Unknown { program: String, said: String },
    #[error(
        "{program} (Docker CLI {version}) cannot build with BuildKit: it has no buildx plugin, and \
         Docker CLIs from 23.0 on no longer carry BuildKit built in. Install the docker-buildx \
         plugin, or {}",
        match alternative {
            Some(alt) => format!("use a CLI that can: {ENGINE_ENV}={alt}"),
            None => format!("point {ENGINE_ENV} at a Docker CLI older than 23.0 (built-in BuildKit)"),
        }
    )]
    NoBuildKit {
        program: String,
        version: String,
        alternative: Option<String>,
    },
    #[error(
        "the container engine is not running or not reachable ({program}, {target}): {stderr}; \
         start it (for development: `scripts/dev-env up` and source its env file)"
    )]
    NotRunning {
        program: String,
        target: String,
        stderr: String,
    },
    #[error("image build failed ({status}): `{command}`")]
    BuildFailed { command: String, status: String },
    #[error("cannot understand the output of `{command}`: {detail}")]
    Parse { command: String, detail: String },
    #[error("cannot understand the platform `{command}` printed")]
    Platform {
        command: String,
        source: Box<crate::name::Invalid>,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Process(#[from] ProcessError),
}

/// An engine that cannot be found, reached or understood, or a build that
/// failed on it, is an operational failure.
impl crate::exit::HasStatus for EngineError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            EngineError::NotFound { .. }
            | EngineError::NoneOnPath
            | EngineError::Unknown { .. }
            | EngineError::NoBuildKit { .. }
            | EngineError::NotRunning { .. }
            | EngineError::BuildFailed { .. }
            | EngineError::Parse { .. }
            // The engine printed it: not the user's text, so not usage.
            | EngineError::Platform { .. }
            | EngineError::Io { .. } => Status::Failure,
            EngineError::Process(e) => e.exit_status(),
        }
    }
}

/// What to build: a staged context directory, its Dockerfile and the
/// arguments, labels, secrets and tags of the result.
#[derive(Debug, Clone, Default)]
pub struct BuildRequest {
    pub context: PathBuf,
    pub dockerfile: PathBuf,
    pub tags: Vec<String>,
    pub build_args: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// BuildKit secrets: id -> source file. Never part of a layer.
    pub secrets: BTreeMap<String, PathBuf>,
    pub no_cache: bool,
    /// Where the engine writes the built image ID.
    pub iidfile: PathBuf,
    /// `--platform`: set only for a platform other than the engine's own
    /// (a build for its own platform stays the command it always was).
    pub platform: Option<Platform>,
}

/// A throw-away container that runs a tool with the network (e.g. a package
/// manager writing a lock): as root, `script` under `/bin/sh -c`, the
/// `mounts` (host path, container path, read-only) and `env` given.
#[derive(Debug, Clone)]
pub struct ToolRun {
    pub image: String,
    pub script: String,
    pub mounts: Vec<(PathBuf, String, bool)>,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
}

/// The parts of an image's config this tool reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageInfo {
    pub id: String,
    pub size: u64,
    pub labels: BTreeMap<String, String>,
    /// `Config.Healthcheck.Test`, e.g. `["CMD", "/bin/sh", "…"]`.
    pub healthcheck: Option<Vec<String>>,
    /// `Config.User` (empty: root).
    pub user: String,
    /// `Config.Env`, `NAME=value` each.
    pub env: Vec<String>,
    pub layers: Vec<String>,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    /// `os/architecture[/variant]` from the image's config, normalised
    /// (`linux/arm64`); `None` when the engine does not say.
    pub platform: Option<Platform>,
}

/// The engine's platform, asked once per process: it cannot change while we
/// run, and a build or check would otherwise spawn `docker version` for
/// every variant (9 times for one `check` of the family). A failure is not
/// kept, so a daemon started meanwhile is found.
#[derive(Debug, Default, Clone)]
pub(crate) struct PlatformOnce(std::sync::OnceLock<Platform>);

impl PlatformOnce {
    pub(crate) fn get_or_ask(
        &self,
        ask: impl FnOnce() -> Result<Platform, EngineError>,
    ) -> Result<Platform, EngineError> {
        if let Some(p) = self.0.get() {
            return Ok(p.clone());
        }
        let p = ask()?;
        Ok(self.0.get_or_init(|| p).clone())
    }
}

/// The engine's own platform from what `command` printed
/// (`linux/aarch64`), parsed and normalised where it enters (`linux/arm64`).
pub(crate) fn parse_platform(command: &str, text: &str) -> Result<Platform, EngineError> {
    text.parse::<Platform>()
        .map(|p| p.normalized())
        .map_err(|source| EngineError::Platform {
            command: command.to_string(),
            source: Box::new(source),
        })
}

/// What the engine's host has to give, for the run contract's caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    pub memory_bytes: u64,
    pub cpus: u32,
    /// The engine can run `--gpus=all` (an NVIDIA runtime is registered).
    pub gpus: bool,
}

impl Resources {
    /// Parses `<MemTotal> <NCPU> [<runtime>,…]`, the format both drivers ask for.
    pub(crate) fn parse(command: &str, text: &str) -> Result<Resources, EngineError> {
        let mut words = text.split_whitespace();
        let bad = || EngineError::Parse {
            command: command.to_string(),
            detail: format!("expected `<memory bytes> <cpus> [runtimes]`, got {text:?}"),
        };
        let memory_bytes = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
        let cpus = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
        let gpus = words
            .next()
            .is_some_and(|r| r.split(',').any(|r| r == "nvidia"));
        Ok(Resources {
            memory_bytes,
            cpus,
            gpus,
        })
    }
}

/// How the engine's build log marks steps (for progress and failure reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// `#7 [2/4] RUN …`, `#7 ERROR: …` (BuildKit `--progress plain`).
    BuildKit,
    /// `STEP 2/4: RUN …` (Podman/Buildah).
    Buildah,
}

pub trait Engine: Send + Sync {
    /// e.g. `docker 20.10.24 at /usr/bin/docker (built-in BuildKit)`.
    fn describe(&self) -> String;
    fn program(&self) -> &Path;
    /// `argv` run by this engine's program (pure).
    fn cmd(&self, argv: Argv) -> Cmd {
        Cmd::new(self.program()).args(argv.into_args())
    }
    fn log_format(&self) -> LogFormat;
    /// Fails with [`EngineError::NotRunning`] when the daemon cannot be reached;
    /// returns the engine's platform (`linux/amd64`).
    fn platform(&self) -> Result<Platform, EngineError>;
    /// Memory, CPUs and GPU support of the engine's host.
    fn resources(&self) -> Result<Resources, EngineError>;
    /// The build command for `req` (pure; exposed for tests and `--dry-run`).
    fn build_cmd(&self, req: &BuildRequest) -> Cmd;
    /// Runs `build_cmd`, streaming its log lines; returns the new image ID.
    fn build(
        &self,
        req: &BuildRequest,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<String, EngineError> {
        let cmd = self.build_cmd(req);
        let out = cmd.stream(on_line)?;
        if !out.success() {
            return Err(EngineError::BuildFailed {
                command: cmd.display(),
                status: out.status.to_string(),
            });
        }
        read_iidfile(&req.iidfile)
    }
    /// `None` when no such image exists locally.
    fn inspect(&self, reference: &str) -> Result<Option<ImageInfo>, EngineError> {
        let cmd = self.cmd(Argv::new("image inspect").operands([reference]));
        let out = cmd.output()?;
        if !out.success() {
            if names_a_missing_image(&out.stderr) {
                return Ok(None);
            }
            return Err(cmd.failed(&out).into());
        }
        parse_inspect(&out.stdout)
            .map(Some)
            .map_err(|detail| EngineError::Parse {
                command: cmd.display(),
                detail,
            })
    }
    /// [`Engine::inspect`] of each of `references`, in order. This one asks
    /// one at a time; an engine whose `inspect` runs its program asks for
    /// them all in one run ([`inspect_in_one_run`]).
    fn inspect_each(&self, references: &[&str]) -> Result<Vec<Option<ImageInfo>>, EngineError> {
        references.iter().map(|r| self.inspect(r)).collect()
    }
    /// `save` of one image as a docker-archive stream on stdout (pure).
    fn save_cmd(&self, image: &str) -> Cmd {
        self.cmd(Argv::new("save").operands([image]))
    }
    /// `save` of several images as one docker-archive stream (a layer
    /// they share is in it once; `manifest.json` lists each image).
    fn save_images_cmd(&self, images: &[String]) -> Cmd {
        self.cmd(Argv::new("save").operands(images))
    }
    /// Whether `load` takes an archive that leaves out the files of layers
    /// the engine already has (Docker looks each layer up by its chain ID
    /// before it opens the file; Podman reads every file). src/normalize's
    /// relabel sends the config alone when it can.
    fn loads_layers_it_has_by_chain_id(&self) -> bool {
        false
    }
    /// `load` of a docker-archive stream from stdin (pure).
    fn load_cmd(&self) -> Cmd {
        Cmd::new(self.program()).arg("load")
    }
    /// Removes a local image by ID or reference (its layers go when no
    /// other image has them).
    fn remove_image(&self, image: &str) -> Result<(), EngineError> {
        self.cmd(Argv::new("rmi").operands([image])).run()?;
        Ok(())
    }
    fn tag(&self, source: &str, target: &str) -> Result<(), EngineError> {
        self.cmd(Argv::new("tag").operands([source, target]))
            .run()?;
        Ok(())
    }
    /// Pulls `reference`; from an index, the image for `platform` (the
    /// engine's own when `None`).
    fn pull(&self, reference: &str, platform: Option<&Platform>) -> Result<(), EngineError> {
        let mut argv = Argv::new("pull").flag("--quiet");
        if let Some(p) = platform {
            argv = argv.opt("--platform", p.to_string());
        }
        self.cmd(argv.operands([reference])).run()?;
        Ok(())
    }
    /// Whether the engine can start a container of `image` for `platform`
    /// (a platform other than its own needs an emulator: binfmt_misc with
    /// qemu-user-static). `Err` says why not, in words.
    fn runs_on(&self, image: &str, platform: &Platform) -> Result<(), String> {
        let cmd = self.cmd(
            Argv::new("run")
                .flag("--rm")
                .opt("--network", "none")
                .opt("--platform", platform.to_string())
                .opt("--entrypoint", "/bin/true")
                .operands([image]),
        );
        let out = cmd.output().map_err(|e| e.to_string())?;
        if out.success() {
            return Ok(());
        }
        let stderr = out.stderr.to_lowercase();
        Err(if stderr.contains("exec format error") {
            format!("no binfmt_misc handler runs {platform} programs (exec format error)")
        } else if stderr.contains("no such file or directory") {
            format!(
                "the binfmt_misc handler for {platform} lacks the F flag, so its interpreter \
                 cannot be found inside containers"
            )
        } else {
            format!(
                "a test container failed: {}",
                crate::process::tail_lines(out.stderr.trim(), 3)
            )
        })
    }
    /// The engine command of `args`, the arguments after the program that
    /// someone above the engine put together (the run contract's
    /// [`Sandbox::args`](crate::run_contract::Sandbox::args)), pure.
    fn container_cmd(&self, args: Vec<std::ffi::OsString>) -> Cmd {
        Cmd::new(self.program()).args(args)
    }
    /// The argv of a tool run (pure; exposed for tests).
    fn tool_run_cmd(&self, run: &ToolRun) -> Cmd {
        let mut argv = Argv::new("run").flag("--rm").opt("--user", "0:0");
        for (host, target, read_only) in &run.mounts {
            // The engine takes only an absolute source for a bind mount.
            let host = std::path::absolute(host).unwrap_or_else(|_| host.clone());
            argv = argv.opt("--mount", bind_mount(&host, target, *read_only));
        }
        for (key, value) in &run.env {
            argv = argv.opt("--env", format!("{key}={value}"));
        }
        let argv =
            argv.opt("--entrypoint", "/bin/sh")
                .operands([run.image.as_str(), "-c", &run.script]);
        self.cmd(argv).timeout(run.timeout)
    }
    /// Runs a tool container to completion; its output whatever its status.
    fn run_tool(&self, run: &ToolRun) -> Result<crate::process::Output, EngineError> {
        Ok(self.tool_run_cmd(run).output()?)
    }
    /// Runs the container `args` start (named `name`) to completion and
    /// captures its output (whatever its exit status); on timeout the
    /// container is removed.
    fn run_container(
        &self,
        name: &str,
        args: Vec<std::ffi::OsString>,
        timeout: Duration,
    ) -> Result<crate::process::Output, EngineError> {
        match self.container_cmd(args).timeout(timeout).output() {
            Err(e @ ProcessError::TimedOut { .. }) => {
                // Killing the client leaves the container running.
                let argv = Argv::new("rm").flag("--force").operands([name]);
                let _ = self.cmd(argv).output();
                Err(e.into())
            }
            other => Ok(other?),
        }
    }
}

/// Chooses the engine: the profile's `engine`, else `$SUNABA_ENGINE`, else
/// the first `docker` on PATH that can build with BuildKit (a working buildx
/// plugin, or a client older than 23.0), else `podman`. A named engine that
/// cannot build is refused with the name of one on PATH that can. This is
/// the one place the rule lives: `scripts/dev-env` asks `sunaba-images
/// engine` rather than repeating it.
pub(crate) fn select(profile_engine: Option<&str>) -> Result<Box<dyn Engine>, EngineError> {
    let env = std::env::var(ENGINE_ENV).ok().filter(|v| !v.is_empty());
    let (name, origin) = match (profile_engine, env) {
        (Some(p), _) => (p.to_string(), "from the profile".to_string()),
        (None, Some(e)) => (e, format!("from {ENGINE_ENV}")),
        (None, None) => return select_from_path(),
    };
    let path = resolve_program(&name).ok_or_else(|| EngineError::NotFound {
        program: name.clone(),
        origin,
    })?;
    open(&path)
}

/// No engine named: every `docker` on PATH in order, then `podman`.
fn select_from_path() -> Result<Box<dyn Engine>, EngineError> {
    let mut refused = None;
    let mut seen = Vec::new();
    for docker in which::which_all("docker").into_iter().flatten() {
        let real = std::fs::canonicalize(&docker).unwrap_or_else(|_| docker.clone());
        if seen.contains(&real) {
            continue;
        }
        seen.push(real);
        match open(&docker) {
            Ok(engine) => return Ok(engine),
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    if let Ok(podman) = which::which("podman") {
        return open(&podman);
    }
    Err(refused.unwrap_or(EngineError::NoneOnPath))
}

fn resolve_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        p.is_file().then_some(p)
    } else {
        which::which(name).ok()
    }
}

/// Opens the engine at `program`, finding out whether it is Docker or Podman
/// and, for Docker, how it can reach BuildKit.
pub(crate) fn open(program: &Path) -> Result<Box<dyn Engine>, EngineError> {
    let out = Cmd::new(program).arg("--version").output()?;
    let said = format!("{}{}", out.stdout, out.stderr);
    let lower = said.to_lowercase();
    if lower.contains("podman") {
        Ok(Box::new(Podman::new(program.to_path_buf())))
    } else if lower.contains("docker") {
        match Docker::probe(program)? {
            Ok(docker) => Ok(Box::new(docker)),
            Err(version) => Err(EngineError::NoBuildKit {
                program: program.display().to_string(),
                version,
                alternative: docker_alternative(program),
            }),
        }
    } else {
        Err(EngineError::Unknown {
            program: program.display().to_string(),
            said: said.trim().to_string(),
        })
    }
}

/// Another `docker` on PATH that can build with BuildKit, if any.
fn docker_alternative(rejected: &Path) -> Option<String> {
    let rejected = std::fs::canonicalize(rejected).ok();
    which::which_all("docker")
        .ok()?
        .filter(|p| std::fs::canonicalize(p).ok() != rejected)
        .find(|p| matches!(Docker::probe(p), Ok(Ok(_))))
        .map(|p| p.display().to_string())
}

pub(crate) fn read_iidfile(path: &Path) -> Result<String, EngineError> {
    let id = std::fs::read_to_string(path).map_err(|source| EngineError::Io {
        context: format!("cannot read the image ID file {}", path.display()),
        source,
    })?;
    image_id(id.trim()).map_err(|detail| EngineError::Parse {
        command: format!("--iidfile {}", path.display()),
        detail,
    })
}

/// An image ID as the engine wrote it (Podman's is the bare hex), with its
/// algorithm, parsed as a digest where it enters: the ID a build wrote and
/// the one `image inspect` answers are each compared with digests later.
fn image_id(text: &str) -> Result<String, String> {
    let id = if text.starts_with("sha256:") {
        text.to_string()
    } else {
        format!("sha256:{text}")
    };
    is_digest(&id, || "Id".to_string())?;
    Ok(id)
}

/// `text` is a digest; else the error names `field` (made only then) and
/// shows `text` escaped.
fn is_digest(text: &str, field: impl FnOnce() -> String) -> Result<(), String> {
    match text.parse::<crate::name::Digest>() {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "{} `{}` is not a digest: {e}",
            field(),
            text.escape_debug()
        )),
    }
}

#[derive(Deserialize)]
struct RawImage {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Size", default)]
    size: u64,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "RepoDigests", default)]
    repo_digests: Option<Vec<String>>,
    #[serde(rename = "Config", default)]
    config: Option<RawConfig>,
    #[serde(rename = "RootFS", default)]
    rootfs: Option<RawRootFs>,
    /// Podman also reports the healthcheck at the top level.
    #[serde(rename = "Healthcheck", default)]
    healthcheck: Option<RawHealthcheck>,
    #[serde(rename = "Os", default)]
    os: String,
    #[serde(rename = "Architecture", default)]
    architecture: String,
    #[serde(rename = "Variant", default)]
    variant: Option<String>,
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(rename = "Labels", default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(rename = "Healthcheck", default)]
    healthcheck: Option<RawHealthcheck>,
    #[serde(rename = "User", default)]
    user: Option<String>,
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RawHealthcheck {
    #[serde(rename = "Test", default)]
    test: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RawRootFs {
    #[serde(rename = "Layers", default)]
    layers: Option<Vec<String>>,
}

/// Whether an engine's stderr says an image it was asked about does not
/// exist (Docker's words, then Podman's).
fn names_a_missing_image(stderr: &str) -> bool {
    let lower = stderr.to_lowercase();
    lower.contains("no such image") || lower.contains("image not known")
}

/// [`Engine::inspect_each`] for an engine whose `inspect` runs its program:
/// one `image inspect` of every reference (the engine's program started
/// once, where each start costs ~30 ms of the release's critical path with
/// the Docker CLI), each answer matched to its reference by place. When one
/// of them does not exist the run fails as a whole, and each is asked
/// alone to tell which.
pub(crate) fn inspect_in_one_run(
    engine: &(impl Engine + ?Sized),
    references: &[&str],
) -> Result<Vec<Option<ImageInfo>>, EngineError> {
    if references.len() < 2 {
        return references.iter().map(|r| engine.inspect(r)).collect();
    }
    let cmd = engine.cmd(Argv::new("image inspect").operands(references.iter().copied()));
    let out = cmd.output()?;
    if !out.success() {
        if names_a_missing_image(&out.stderr) {
            return references.iter().map(|r| engine.inspect(r)).collect();
        }
        return Err(cmd.failed(&out).into());
    }
    let parse_error = |detail| EngineError::Parse {
        command: cmd.display(),
        detail,
    };
    let images = parse_inspect_all(&out.stdout).map_err(parse_error)?;
    if images.len() != references.len() {
        let detail = format!("expected {} images, got {}", references.len(), images.len());
        return Err(parse_error(detail));
    }
    Ok(images.into_iter().map(Some).collect())
}

/// Parses `image inspect` output (a JSON array with one object).
pub(crate) fn parse_inspect(json: &str) -> Result<ImageInfo, String> {
    let mut images = parse_inspect_all(json)?;
    if images.len() != 1 {
        return Err(format!("expected one image, got {}", images.len()));
    }
    Ok(images.remove(0))
}

/// Parses `image inspect` output of any number of images, in its order.
fn parse_inspect_all(json: &str) -> Result<Vec<ImageInfo>, String> {
    let images: Vec<RawImage> = serde_json::from_str(json).map_err(|e| e.to_string())?;
    images.into_iter().map(image_info).collect()
}

/// One image of the engine's answer. Its ID and layer diff_ids are what
/// later steps compare with digests they computed and look layers up by:
/// each is parsed as a digest here, where it enters, so a malformed answer
/// is refused naming the field instead of matching nothing later.
fn image_info(raw: RawImage) -> Result<ImageInfo, String> {
    let config = raw.config;
    let (labels, healthcheck, user, env) = match config {
        Some(c) => (
            c.labels.unwrap_or_default(),
            c.healthcheck.and_then(|h| h.test),
            c.user.unwrap_or_default(),
            c.env.unwrap_or_default(),
        ),
        None => (BTreeMap::new(), None, String::new(), Vec::new()),
    };
    let healthcheck = healthcheck.or(raw.healthcheck.and_then(|h| h.test));
    let id = image_id(&raw.id)?;
    let layers = raw.rootfs.and_then(|r| r.layers).unwrap_or_default();
    for (i, layer) in layers.iter().enumerate() {
        is_digest(layer, || format!("{id}: RootFS.Layers[{i}]"))?;
    }
    Ok(ImageInfo {
        id,
        size: raw.size,
        labels,
        healthcheck,
        user,
        env,
        layers,
        repo_tags: raw.repo_tags.unwrap_or_default(),
        repo_digests: raw.repo_digests.unwrap_or_default(),
        platform: match (
            raw.os.as_str(),
            raw.architecture.as_str(),
            raw.variant.as_deref(),
        ) {
            ("", _, _) | (_, "", _) => None,
            (os, arch, variant) => Some(Platform::new(os, arch, variant).normalized()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_that_cannot_do_the_work_is_an_operational_failure() {
        use crate::exit::{HasStatus, Status};
        let s = String::new;
        for e in [
            EngineError::NotFound {
                program: s(),
                origin: s(),
            },
            EngineError::NoneOnPath,
            EngineError::Unknown {
                program: s(),
                said: s(),
            },
            EngineError::NoBuildKit {
                program: s(),
                version: s(),
                alternative: None,
            },
            EngineError::NotRunning {
                program: s(),
                target: s(),
                stderr: s(),
            },
            EngineError::BuildFailed {
                command: s(),
                status: s(),
            },
            EngineError::Parse {
                command: s(),
                detail: s(),
            },
            EngineError::Platform {
                command: s(),
                source: Box::new(crate::name::Invalid::platform("linux", "x")),
            },
            EngineError::Io {
                context: s(),
                source: std::io::Error::other("x"),
            },
            EngineError::Process(ProcessError::NotFound { program: s() }),
        ] {
            assert_eq!(e.exit_status(), Status::Failure, "{e}");
        }
    }

    fn platform(s: &str) -> Platform {
        s.parse().unwrap()
    }

    #[test]
    fn the_engine_s_platform_is_normalised_where_it_is_read() {
        assert_eq!(
            parse_platform("version", "linux/aarch64").unwrap(),
            platform("linux/arm64")
        );
        assert_eq!(
            parse_platform("version", "linux/arm64/v8").unwrap(),
            platform("linux/arm64")
        );
        let e = parse_platform("version", "linux").unwrap_err();
        assert!(matches!(e, EngineError::Platform { .. }), "{e:?}");
        let e = crate::error_chain::error_chain(&e);
        assert!(e.contains("invalid platform \"linux\""), "{e}");
    }

    #[test]
    fn the_platform_is_asked_once_and_a_failure_is_asked_again() {
        let once = PlatformOnce::default();
        let asked = std::cell::Cell::new(0);
        let down = || {
            asked.set(asked.get() + 1);
            Err(EngineError::Parse {
                command: "version".into(),
                detail: "down".into(),
            })
        };
        assert!(once.get_or_ask(down).is_err());
        let up = || {
            asked.set(asked.get() + 1);
            Ok(platform("linux/arm64"))
        };
        assert_eq!(once.get_or_ask(up).unwrap(), platform("linux/arm64"));
        assert_eq!(once.get_or_ask(up).unwrap(), platform("linux/arm64"));
        assert_eq!(asked.get(), 2, "asked after the failure, then kept");
    }

    #[test]
    fn parses_docker_inspect() {
        let (id, l1, l2) = (hex64('a'), hex64('1'), hex64('2'));
        let json = format!(
            r#"[{{"Id":"sha256:{id}","RepoTags":["r:base"],"RepoDigests":null,
            "Size":1234,"Config":{{"Labels":{{"dev.sunaba.variant":"base"}},
            "Healthcheck":{{"Test":["CMD","/bin/sh","/usr/local/libexec/sunaba/healthcheck"]}}}},
            "RootFS":{{"Type":"layers","Layers":["sha256:{l1}","sha256:{l2}"]}}}}]"#
        );
        let info = parse_inspect(&json).unwrap();
        assert_eq!(info.id, format!("sha256:{id}"));
        assert_eq!(info.size, 1234);
        assert_eq!(info.labels["dev.sunaba.variant"], "base");
        assert_eq!(
            info.healthcheck.unwrap(),
            ["CMD", "/bin/sh", "/usr/local/libexec/sunaba/healthcheck"]
        );
        assert_eq!(
            info.layers,
            [format!("sha256:{l1}"), format!("sha256:{l2}")]
        );
        assert!(info.repo_digests.is_empty());
    }

    /// 64 hex digits, all `c`.
    fn hex64(c: char) -> String {
        c.to_string().repeat(64)
    }

    /// An answer whose ID or a layer is no digest is refused where it is
    /// parsed, naming the field; the text is shown escaped.
    #[test]
    fn an_inspect_answer_whose_id_or_layers_are_no_digests_is_refused() {
        let answer = |id: &str, layer: &str| {
            format!(r#"[{{"Id":"{id}","Size":1,"RootFS":{{"Layers":["{layer}"]}}}}]"#)
        };
        let good = format!("sha256:{}", hex64('b'));
        assert!(
            parse_inspect(&answer(&hex64('a'), &good)).is_ok(),
            "Podman's bare hex"
        );
        let e = parse_inspect(&answer("abc", &good)).unwrap_err();
        assert!(e.starts_with("Id `sha256:abc` is not a digest: "), "{e}");
        let e = parse_inspect(&answer(&hex64('a'), "../../etc\\u001b[2J")).unwrap_err();
        assert_eq!(
            e,
            format!(
                "sha256:{}: RootFS.Layers[0] `../../etc\\u{{1b}}[2J` is not a digest: a digest is \
                 <algorithm>:<hex>, e.g. sha256:<64 hex digits>",
                hex64('a')
            )
        );
    }

    /// The ID a build writes is read like the one `image inspect` answers:
    /// Podman's bare hex gets its algorithm, anything else is refused
    /// naming the file.
    #[test]
    fn a_builds_id_file_is_parsed_as_a_digest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("iid");
        std::fs::write(&path, format!("{}\n", hex64('e'))).unwrap();
        assert_eq!(
            read_iidfile(&path).unwrap(),
            format!("sha256:{}", hex64('e'))
        );
        std::fs::write(&path, "sha256:../x").unwrap();
        let e = read_iidfile(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "cannot understand the output of `--iidfile {}`: Id `sha256:../x` is not a digest",
                path.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn image_without_labels_or_healthcheck() {
        let json = format!(
            r#"[{{"Id":"{}","Size":1,"Config":{{"Labels":null}}}}]"#,
            hex64('d')
        );
        let info = parse_inspect(&json).unwrap();
        assert_eq!(info.id, format!("sha256:{}", hex64('d')));
        assert!(info.labels.is_empty());
        assert!(info.healthcheck.is_none());
    }

    #[test]
    fn podman_top_level_healthcheck() {
        let json = format!(
            r#"[{{"Id":"{}","Size":1,"Config":{{"Labels":{{}}}},
            "Healthcheck":{{"Test":["CMD","/bin/sh","/hc"]}}}}]"#,
            hex64('c')
        );
        assert_eq!(
            parse_inspect(&json).unwrap().healthcheck.unwrap(),
            ["CMD", "/bin/sh", "/hc"]
        );
    }

    /// Several images are inspected in one run of the engine's program,
    /// each answer matched to its reference by place; when one is missing,
    /// each is asked alone and only that one is `None`. (A program that
    /// answers `image inspect` for the images `a` and `b` stands in for the
    /// engine and logs each run.)
    #[test]
    fn images_are_inspected_in_one_run_and_alone_only_when_one_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("runs");
        let program = dir.path().join("engine");
        let script = format!(
            r#"#!/bin/sh
echo "$*" >> '{log}'
shift 3
out='['
for r in "$@"; do
    case $r in
    a|b) out="$out{{\"Id\":\"sha256:$(printf "%064d" 0 | tr 0 "$r")\",\"RootFS\":{{\"Layers\":[\"sha256:$(printf "%064d" 0 | tr 0 "$r" | tr ab 12)\"]}}}}," ;;
    *) echo "Error: No such image: $r" >&2; exit 1 ;;
    esac
done
echo "${{out%,}}]"
"#,
            log = log.display()
        );
        crate::process::write_program(&program, &script);
        let engine = Docker::with_mode(program, DockerMode::Classic);
        // Each answer's ID and layer as the image's name and its layer's
        // digit (`sha256:aaa…` and `sha256:111…` stand for `a` and `la`).
        let ids = |found: Vec<Option<ImageInfo>>| -> Vec<Option<(String, Vec<String>)>> {
            let short = |digest: &str| {
                let hex = digest.strip_prefix("sha256:").unwrap();
                assert!(hex.len() == 64 && hex.bytes().all(|b| b == hex.as_bytes()[0]));
                hex[..1].replace('1', "la").replace('2', "lb")
            };
            (found.into_iter())
                .map(|i| {
                    i.map(|i| {
                        let layers = i
                            .layers
                            .iter()
                            .map(|l| format!("sha256:{}", short(l)))
                            .collect();
                        (format!("sha256:{}", short(&i.id)), layers)
                    })
                })
                .collect()
        };
        let found = engine.inspect_each(&["b", "a", "b"]).unwrap();
        assert_eq!(
            ids(found),
            [
                Some(("sha256:b".into(), vec!["sha256:lb".into()])),
                Some(("sha256:a".into(), vec!["sha256:la".into()])),
                Some(("sha256:b".into(), vec!["sha256:lb".into()])),
            ]
        );
        let runs = |log: &std::path::Path| std::fs::read_to_string(log).unwrap();
        assert_eq!(
            runs(&log),
            "image inspect -- b a b\n",
            "one run for all three"
        );
        std::fs::remove_file(&log).unwrap();

        let found = engine.inspect_each(&["a", "gone"]).unwrap();
        assert_eq!(
            ids(found),
            [Some(("sha256:a".into(), vec!["sha256:la".into()])), None]
        );
        assert_eq!(
            runs(&log),
            "image inspect -- a gone\nimage inspect -- a\nimage inspect -- gone\n",
            "the run for both, then each alone"
        );
    }

    /// Every engine command this module runs, with operands and values an
    /// option parser would take for options: each value stays in its
    /// option's word and each operand comes after `--` (a program that
    /// records its argv stands in for the engine).
    #[test]
    fn no_operand_or_value_can_be_read_as_an_option() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("argv");
        let program = dir.path().join("engine");
        crate::process::write_program(
            &program,
            &format!(
                "#!/bin/sh\nprintf '%s ' \"$@\" >> '{}'; echo >> '{}'\nexit 1\n",
                log.display(),
                log.display()
            ),
        );
        let engine = Docker::with_mode(program, DockerMode::Classic);
        let hostile = "--privileged";
        let _ = engine.inspect(hostile);
        let _ = engine.remove_image(hostile);
        let _ = engine.tag(hostile, "-v=/:/host");
        let _ = engine.pull(hostile, Some(&platform("linux/arm64")));
        let _ = engine.runs_on(hostile, &platform("linux/arm64"));
        let _ = engine.save_cmd(hostile).output();
        let run = ToolRun {
            image: hostile.into(),
            script: "-c".into(),
            mounts: vec![("/a:/b,ro=false".into(), "/lock".into(), true)],
            env: vec![("HOME".into(), "-x".into())],
            timeout: Duration::from_secs(5),
        };
        let _ = engine.run_tool(&run);
        let logged = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            logged.lines().collect::<Vec<_>>(),
            [
                "image inspect -- --privileged ",
                "rmi -- --privileged ",
                "tag -- --privileged -v=/:/host ",
                "pull --quiet --platform=linux/arm64 -- --privileged ",
                "run --rm --network=none --platform=linux/arm64 --entrypoint=/bin/true -- \
                 --privileged ",
                "save -- --privileged ",
                "run --rm --user=0:0 \
                 --mount=type=bind,\"source=/a:/b,ro=false\",target=/lock,readonly \
                 --env=HOME=-x --entrypoint=/bin/sh -- --privileged -c -c ",
            ]
        );
        let podman = Podman::new("/usr/bin/podman".into());
        assert_eq!(
            podman.save_cmd(hostile).get_args(),
            ["save", "--format=docker-archive", "--", "--privileged"]
        );
    }

    #[test]
    fn missing_engine_binary_is_named() {
        let err = match select(Some("/nonexistent/dir/docker")) {
            Err(e) => e,
            Ok(e) => panic!("selected {}", e.describe()),
        };
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/dir/docker"), "{msg}");
        assert!(msg.contains("from the profile"), "{msg}");
    }
}
