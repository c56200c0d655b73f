//! The Docker CLI driver.

use super::{Argv, BuildRequest, Engine, EngineError, LogFormat, Resources};
use crate::name::Platform;
use crate::process::Cmd;
use std::path::{Path, PathBuf};

/// How this Docker CLI reaches BuildKit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DockerMode {
    /// `docker buildx build --load` (the buildx plugin is installed).
    Buildx,
    /// `DOCKER_BUILDKIT=1 docker build`: CLIs before 23.0 carry BuildKit.
    Classic,
}

#[derive(Debug, Clone)]
pub(crate) struct Docker {
    program: PathBuf,
    mode: DockerMode,
    version: String,
    platform: super::PlatformOnce,
}

/// The first Docker CLI release whose `docker build` needs the buildx plugin
/// for BuildKit.
const BUILDX_REQUIRED_FROM: u64 = 23;

impl Docker {
    #[cfg(test)]
    pub(crate) fn with_mode(program: PathBuf, mode: DockerMode) -> Docker {
        Docker {
            program,
            mode,
            version: String::new(),
            platform: Default::default(),
        }
    }

    /// Finds out how `program` can build with BuildKit. `Ok(Err(version))`
    /// means it cannot (no buildx, and too new for built-in BuildKit).
    pub(crate) fn probe(program: &Path) -> Result<Result<Docker, String>, EngineError> {
        let version = client_version(program)?;
        let buildx = Cmd::new(program)
            .args(Argv::new("buildx version").into_args())
            .output()?;
        let mode = if buildx.success() {
            DockerMode::Buildx
        } else if major(&version).is_some_and(|m| m < BUILDX_REQUIRED_FROM) {
            DockerMode::Classic
        } else {
            return Ok(Err(version));
        };
        Ok(Ok(Docker {
            program: program.to_path_buf(),
            mode,
            version,
            platform: Default::default(),
        }))
    }
}

/// The client version; works while the daemon is down (the CLI prints the
/// client part, then fails on the server part).
fn client_version(program: &Path) -> Result<String, EngineError> {
    let argv = Argv::new("version").opt("--format", "{{.Client.Version}}");
    let out = Cmd::new(program).args(argv.into_args()).output()?;
    Ok(out.stdout.lines().next().unwrap_or("").trim().to_string())
}

fn major(version: &str) -> Option<u64> {
    version.split('.').next()?.trim().parse().ok()
}

/// Where the CLI is pointed, for messages (it is the user's choice, not ours).
pub(super) fn docker_target() -> String {
    for key in ["DOCKER_HOST", "DOCKER_CONTEXT"] {
        if let Some(v) = std::env::var(key).ok().filter(|v| !v.is_empty()) {
            return format!("{key}={v}");
        }
    }
    "the current Docker context".to_string()
}

impl Engine for Docker {
    fn inspect_each(
        &self,
        references: &[&str],
    ) -> Result<Vec<Option<super::ImageInfo>>, EngineError> {
        super::inspect_in_one_run(self, references)
    }
    // moby's image/tarexport load: `lss.Get(chainID)` before `loadLayer`.
    fn loads_layers_it_has_by_chain_id(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        let how = match self.mode {
            DockerMode::Buildx => "buildx",
            DockerMode::Classic => "built-in BuildKit",
        };
        format!(
            "docker {} at {} ({how})",
            self.version,
            self.program.display()
        )
    }

    fn program(&self) -> &Path {
        &self.program
    }

    fn log_format(&self) -> LogFormat {
        LogFormat::BuildKit
    }

    fn platform(&self) -> Result<Platform, EngineError> {
        self.platform.get_or_ask(|| {
            let argv = Argv::new("version").opt("--format", "{{.Server.Os}}/{{.Server.Arch}}");
            let out = self.cmd(argv).output()?;
            let platform = out.stdout.trim().to_string();
            if !out.success() || platform.is_empty() || platform.contains("<no value>") {
                return Err(EngineError::NotRunning {
                    program: self.program.display().to_string(),
                    target: docker_target(),
                    stderr: out.stderr.trim().to_string(),
                });
            }
            super::parse_platform("version", &platform)
        })
    }

    fn resources(&self) -> Result<Resources, EngineError> {
        let argv = Argv::new("info").opt(
            "--format",
            "{{.MemTotal}} {{.NCPU}} {{range $k, $v := .Runtimes}}{{$k}},{{end}}",
        );
        let cmd = self.cmd(argv);
        let out = cmd.run()?;
        Resources::parse(&cmd.display(), &out.stdout)
    }

    fn build_cmd(&self, req: &BuildRequest) -> Cmd {
        let argv = match self.mode {
            DockerMode::Buildx => Argv::new("buildx build").flag("--load"),
            DockerMode::Classic => Argv::new("build"),
        };
        let cmd = self.cmd(common_build_args(argv.opt("--progress", "plain"), req));
        match self.mode {
            DockerMode::Buildx => cmd,
            DockerMode::Classic => cmd.env("DOCKER_BUILDKIT", "1"),
        }
    }
}

/// Build flags Docker and Podman share, then the context after `--`.
/// A secret's `src` is the one value inside another's syntax (`id=…,src=…`,
/// which Podman splits on every comma): the build refuses a path with a
/// comma, quote or line break before it gets here (`build::scheduler`).
pub(super) fn common_build_args(mut argv: Argv, req: &BuildRequest) -> Argv {
    argv = argv
        .opt("--file", &req.dockerfile)
        .opt("--iidfile", &req.iidfile);
    for tag in &req.tags {
        argv = argv.opt("--tag", tag);
    }
    for (k, v) in &req.labels {
        argv = argv.opt("--label", format!("{k}={v}"));
    }
    for (k, v) in &req.build_args {
        argv = argv.opt("--build-arg", format!("{k}={v}"));
    }
    for (id, src) in &req.secrets {
        let mut value = std::ffi::OsString::from(format!("id={id},src="));
        value.push(src);
        argv = argv.opt("--secret", value);
    }
    if req.no_cache {
        argv = argv.flag("--no-cache");
    }
    if let Some(p) = &req.platform {
        argv = argv.opt("--platform", p.to_string());
    }
    argv.operands([&req.context])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn request() -> BuildRequest {
        BuildRequest {
            context: "/ctx".into(),
            dockerfile: "/ctx/docker/Dockerfile.base".into(),
            tags: vec!["r:base-inputs-0123".into(), "r:base".into()],
            build_args: BTreeMap::from([("BASE_IMAGE".into(), "debian:trixie-slim".into())]),
            labels: BTreeMap::from([("dev.sunaba.variant".into(), "base".into())]),
            secrets: BTreeMap::from([("ca_bundle".into(), "/etc/ca.crt".into())]),
            no_cache: true,
            iidfile: "/tmp/iid".into(),
            platform: None,
        }
    }

    fn argv(cmd: &Cmd) -> String {
        cmd.get_args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn buildx_loads_into_the_image_store() {
        let d = Docker::with_mode("/usr/bin/docker".into(), DockerMode::Buildx);
        let cmd = d.build_cmd(&request());
        assert_eq!(
            argv(&cmd),
            "buildx build --load --progress=plain --file=/ctx/docker/Dockerfile.base \
             --iidfile=/tmp/iid --tag=r:base-inputs-0123 --tag=r:base \
             --label=dev.sunaba.variant=base --build-arg=BASE_IMAGE=debian:trixie-slim \
             --secret=id=ca_bundle,src=/etc/ca.crt --no-cache -- /ctx"
        );
        assert!(cmd.get_env().is_empty());
    }

    #[test]
    fn classic_cli_turns_buildkit_on() {
        let d = Docker::with_mode("/usr/bin/docker".into(), DockerMode::Classic);
        let cmd = d.build_cmd(&request());
        assert!(argv(&cmd).starts_with("build --progress=plain --file="));
        assert_eq!(cmd.get_env(), &[("DOCKER_BUILDKIT".into(), "1".into())][..]);
    }

    #[test]
    fn major_version() {
        assert_eq!(major("20.10.24+dfsg1"), Some(20));
        assert_eq!(major("28.2.2"), Some(28));
        assert_eq!(major(""), None);
    }
}
