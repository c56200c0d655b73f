//! The Podman driver (Buildah underneath; BuildKit-style `RUN --mount`
//! secrets and bind mounts are supported natively).

use super::docker::common_build_args;
use super::{Argv, BuildRequest, Engine, EngineError, LogFormat, Resources};
use crate::name::Platform;
use crate::process::Cmd;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub(crate) struct Podman {
    program: PathBuf,
    platform: super::PlatformOnce,
}

impl Podman {
    pub(crate) fn new(program: PathBuf) -> Podman {
        Podman {
            program,
            platform: Default::default(),
        }
    }
}

impl Engine for Podman {
    fn inspect_each(
        &self,
        references: &[&str],
    ) -> Result<Vec<Option<super::ImageInfo>>, EngineError> {
        super::inspect_in_one_run(self, references)
    }
    fn describe(&self) -> String {
        format!("podman at {}", self.program.display())
    }

    fn program(&self) -> &Path {
        &self.program
    }

    fn log_format(&self) -> LogFormat {
        LogFormat::Buildah
    }

    fn platform(&self) -> Result<Platform, EngineError> {
        self.platform.get_or_ask(|| {
            let argv = Argv::new("info").opt("--format", "{{.Host.OS}}/{{.Host.Arch}}");
            let out = self.cmd(argv).output()?;
            let platform = out.stdout.trim().to_string();
            if !out.success() || platform.is_empty() {
                return Err(EngineError::NotRunning {
                    program: self.program.display().to_string(),
                    target: std::env::var("CONTAINER_HOST")
                        .map(|h| format!("CONTAINER_HOST={h}"))
                        .unwrap_or_else(|_| "the local Podman".to_string()),
                    stderr: out.stderr.trim().to_string(),
                });
            }
            super::parse_platform("info", &platform)
        })
    }

    fn resources(&self) -> Result<Resources, EngineError> {
        // GPUs reach Podman through CDI devices, which the contract does
        // not emit: `--gpus=all` is dropped with a warning there.
        let argv = Argv::new("info").opt("--format", "{{.Host.MemTotal}} {{.Host.CPUs}}");
        let cmd = self.cmd(argv);
        let out = cmd.run()?;
        Resources::parse(&cmd.display(), &out.stdout)
    }

    /// Podman's default is its own format: the docker-archive is the one
    /// both engines load (src/normalize).
    fn save_cmd(&self, image: &str) -> Cmd {
        self.cmd(
            Argv::new("save")
                .opt("--format", "docker-archive")
                .operands([image]),
        )
    }

    /// Podman saves one image unless asked for a multi-image archive.
    fn save_images_cmd(&self, images: &[String]) -> Cmd {
        self.cmd(
            Argv::new("save")
                .opt("--format", "docker-archive")
                .flag("--multi-image-archive")
                .operands(images),
        )
    }

    fn build_cmd(&self, req: &BuildRequest) -> Cmd {
        // The OCI image format has no HEALTHCHECK; `check` reads it from the
        // config, so images must be built in Docker format.
        let argv = Argv::new("build")
            .opt("--format", "docker")
            .flag("--layers");
        self.cmd(common_build_args(argv, req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(cmd: &Cmd) -> Vec<String> {
        cmd.get_args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn builds_in_docker_format_so_the_healthcheck_survives() {
        let p = Podman::new("/usr/bin/podman".into());
        let cmd = p.build_cmd(&BuildRequest {
            context: "/ctx".into(),
            dockerfile: "/ctx/Dockerfile".into(),
            iidfile: "/tmp/iid".into(),
            ..Default::default()
        });
        assert_eq!(
            argv(&cmd),
            [
                "build",
                "--format=docker",
                "--layers",
                "--file=/ctx/Dockerfile",
                "--iidfile=/tmp/iid",
                "--",
                "/ctx"
            ]
        );
        assert_eq!(p.log_format(), LogFormat::Buildah);
    }

    #[test]
    fn several_images_are_saved_as_one_docker_archive() {
        let p = Podman::new("/usr/bin/podman".into());
        let cmd = p.save_images_cmd(&["sha256:a".into(), "sha256:b".into()]);
        assert_eq!(
            argv(&cmd),
            [
                "save",
                "--format=docker-archive",
                "--multi-image-archive",
                "--",
                "sha256:a",
                "sha256:b"
            ]
        );
    }
}
