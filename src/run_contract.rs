//! The run contract: what a sandbox container is — its name, labels,
//! workspace mount, posture, resource caps, environment allowlist and
//! runtime directives — and the one argv builder every way of starting one
//! (the `run` command, `check`'s healthcheck and smoke runs, a human pasting
//! `run --print`) is composed from, so they cannot disagree.
//!
//! Everything here is pure: the caller measures (the engine's memory and
//! CPUs, the caller's environment) and passes the facts in.

use crate::engine::{Argv, Engine, EngineError, bind_mount};
use crate::name::Image;
use crate::process::Cmd;
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where the workspace is mounted read-write; also the working directory.
pub(crate) const WORKSPACE: &str = "/workspace";
/// The image's non-root user (`USER` of every rendered image).
pub(crate) const USER: &str = "sandbox";
pub(crate) const UID: u32 = 1000;
pub(crate) const GID: u32 = 1000;
/// The sandbox user's HOME: a tmpfs at run time, where every cache goes.
pub(crate) const HOME: &str = "/home/sandbox";
/// The environment every image sets for the posture (the Dockerfile
/// template's posture block, before any fragment): HOME is the tmpfs the
/// contract mounts and caches go under it, text is UTF-8, and git takes no
/// optional locks (a read-only `git status` would otherwise rewrite
/// `.git/index`). Fragments' `env` may refer to these as `${NAME}`.
pub(crate) fn image_env() -> Vec<(&'static str, String)> {
    vec![
        ("HOME", HOME.to_string()),
        ("XDG_CACHE_HOME", format!("{HOME}/.cache")),
        ("LANG", "C.UTF-8".to_string()),
        ("GIT_OPTIONAL_LOCKS", "0".to_string()),
    ]
}
/// Size caps of the two tmpfs mounts.
pub(crate) const TMP_SIZE: &str = "1g";
pub(crate) const HOME_SIZE: &str = "1g";
/// Processes one sandbox may have: enough for `go test ./...` and jest
/// workers, few enough that a fork bomb stops.
pub(crate) const PIDS_LIMIT: u32 = 4096;
/// Memory the host keeps for itself when the cap is derived.
pub(crate) const HOST_RESERVE_GIB: u64 = 3;
/// No derived or asked memory cap goes below this.
pub(crate) const MEMORY_FLOOR_GIB: u64 = 4;

const GIB: u64 = 1 << 30;

/// Labels every sandbox carries (docs/contracts.md).
pub(crate) const LABEL_ALIAS: &str = "dev.sunaba.sandbox.alias";
pub(crate) const LABEL_IMAGE: &str = "dev.sunaba.sandbox.image";
pub(crate) const LABEL_WORKSPACE: &str = "dev.sunaba.sandbox.workspace";

const NAME_PREFIX: &str = "sunaba-";
const SLUG_MAX: usize = 40;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ContractError {
    #[error(
        "environment variable {name} may not cross into a sandbox: it matches the deny rule \
         `{rule}` (credentials and engine settings stay on the host)"
    )]
    DeniedEnv { name: String, rule: &'static str },
    #[error(
        "{name:?} is not an environment variable name (letters, digits and `_`, not starting with a digit)"
    )]
    BadEnvName { name: String },
    #[error(
        "runtime directive {directive:?} is not allowed in a sandbox (allowed: {allowed}); \
         anything else would widen the posture"
    )]
    DeniedDirective { directive: String, allowed: String },
    #[error("--cpus {asked} is more than the engine has ({available})")]
    TooManyCpus { asked: u32, available: u32 },
    #[error("--cpus must be at least 1")]
    NoCpus,
    #[error("--memory must be at least 1 (GiB)")]
    NoMemory,
    #[error("the workspace path {path:?} is not absolute")]
    RelativeWorkspace { path: PathBuf },
}

// ----------------------------------------------------------------- names ---

/// The container name for a workspace: `sunaba-<slug>-<hash8>`, where the
/// slug is the directory's name made safe and the hash names the exact path,
/// so two checkouts called `app` never share a container.
pub(crate) fn container_name(workspace: &Path) -> String {
    let hash = hex::encode(sha2::Sha256::digest(
        workspace.as_os_str().as_encoded_bytes(),
    ));
    let base = workspace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{NAME_PREFIX}{}-{}", slug(&base), &hash[..8])
}

/// Lower-case ASCII letters and digits, runs of anything else as one `-`,
/// at most 40 characters, `ws` when nothing is left.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let mut out: String = out.trim_end_matches('-').chars().take(SLUG_MAX).collect();
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() { "ws".into() } else { out }
}

/// The parts of a sandbox container's name, or `None` for any name this
/// contract did not compose (never a plausible guess).
// The inverse the server applies to the names this contract composes
// (docs/contracts.md); this tool itself never needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(dead_code)]
pub(crate) struct SandboxName {
    pub slug: String,
    pub hash8: String,
}

#[allow(dead_code)]
pub(crate) fn parse_container_name(name: &str) -> Option<SandboxName> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let (slug, hash8) = rest.rsplit_once('-')?;
    let hash_ok = hash8.len() == 8
        && hash8
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let slug_ok = !slug.is_empty()
        && slug.len() <= SLUG_MAX
        && !slug.starts_with('-')
        && !slug.ends_with('-')
        && !slug.contains("--")
        && slug
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    (hash_ok && slug_ok).then(|| SandboxName {
        slug: slug.to_string(),
        hash8: hash8.to_string(),
    })
}

// ------------------------------------------------------------------ caps ---

/// The memory cap in bytes. Derived: everything the engine has minus the
/// host's reserve, never below the floor. Asked (`--memory N`, whole GiB):
/// the number typed, the floor still holding — the owner may give the
/// sandbox all of their machine, so neither the reserve nor the engine's
/// size applies.
pub(crate) fn memory_cap(
    engine_total_bytes: u64,
    asked_gib: Option<u64>,
) -> Result<u64, ContractError> {
    let gib = match asked_gib {
        Some(0) => return Err(ContractError::NoMemory),
        Some(asked) => asked.max(MEMORY_FLOOR_GIB),
        None => (engine_total_bytes / GIB)
            .saturating_sub(HOST_RESERVE_GIB)
            .max(MEMORY_FLOOR_GIB),
    };
    Ok(gib * GIB)
}

/// CPUs: unbounded unless asked; an ask is whole cores, at most the engine's.
pub(crate) fn cpu_cap(engine_cpus: u32, asked: Option<u32>) -> Result<Option<u32>, ContractError> {
    match asked {
        None => Ok(None),
        Some(0) => Err(ContractError::NoCpus),
        Some(n) if n > engine_cpus => Err(ContractError::TooManyCpus {
            asked: n,
            available: engine_cpus,
        }),
        Some(n) => Ok(Some(n)),
    }
}

// ----------------------------------------------------------- environment ---

/// Names that never cross, whatever the caller asks: credentials, tokens,
/// keys, and settings that would point a tool inside at the host's engine or
/// cloud accounts. Matched case-insensitively; `*` is any run of characters.
pub(crate) const ENV_DENY: &[&str] = &[
    "DOCKER_*",
    "CONTAINER_*",
    "PODMAN_*",
    "BUILDKIT_*",
    "REGISTRY_AUTH_FILE",
    "*_TOKEN",
    "*_TOKENS",
    "*TOKEN_*",
    "*_KEY",
    "*_KEYS",
    "*_KEY_*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*_AUTH",
    "*_AUTH_*",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_*",
    "GCLOUD_*",
    "GH_*",
    "GITHUB_*",
    "GITLAB_*",
    "NPM_CONFIG_*",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "SSH_*",
    "GPG_*",
    "KUBECONFIG",
    "VAULT_*",
    "SUNABA_*",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
];

/// Set in every sandbox by the contract (the image's own ENV carries the rest).
pub(crate) fn fixed_env() -> Vec<(&'static str, String)> {
    vec![("HOME", HOME.to_string())]
}

fn glob_match(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some((b'*', rest)) => (0..=n.len()).any(|i| go(rest, &n[i..])),
            Some((c, rest)) => n
                .split_first()
                .is_some_and(|(d, nrest)| c.eq_ignore_ascii_case(d) && go(rest, nrest)),
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// The deny rule a name matches, if any.
pub(crate) fn denied_by(name: &str) -> Option<&'static str> {
    ENV_DENY.iter().copied().find(|rule| glob_match(rule, name))
}

fn valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Our own environment, the names that are text (what [`allowed_env`]
/// picks from).
pub(crate) fn caller_env() -> BTreeMap<String, OsString> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
        .collect()
}

/// The variables that cross: exactly the names asked for, each allowed and
/// set in `caller_env`. A name on the deny list is an error (said, never
/// silently dropped); a name the caller does not have is skipped.
pub(crate) fn allowed_env(
    asked: &[String],
    caller_env: &BTreeMap<String, OsString>,
) -> Result<Vec<String>, ContractError> {
    let mut out = Vec::new();
    for name in asked {
        if !valid_env_name(name) {
            return Err(ContractError::BadEnvName { name: name.clone() });
        }
        if let Some(rule) = denied_by(name) {
            return Err(ContractError::DeniedEnv {
                name: name.clone(),
                rule,
            });
        }
        if caller_env.contains_key(name) && !out.contains(name) {
            out.push(name.clone());
        }
    }
    Ok(out)
}

// ------------------------------------------------------------ directives ---

/// A runtime directive beyond the posture that an owner may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Directive {
    /// `--gpus=all`: optional, dropped with a warning when the engine has no
    /// GPU runtime.
    GpusAll,
    /// `--shm-size=<n>[kmg]`: a larger /dev/shm for test runners that use it.
    ShmSize(String),
}

pub(crate) const DIRECTIVES_ALLOWED: &str = "--gpus=all, --shm-size=<n>[k|m|g]";

impl Directive {
    pub(crate) fn parse(text: &str) -> Result<Directive, ContractError> {
        let denied = || ContractError::DeniedDirective {
            directive: text.to_string(),
            allowed: DIRECTIVES_ALLOWED.to_string(),
        };
        if text == "--gpus=all" {
            return Ok(Directive::GpusAll);
        }
        if let Some(size) = text.strip_prefix("--shm-size=") {
            let (digits, unit) = size.split_at(
                size.find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(size.len()),
            );
            if !digits.is_empty()
                && digits.len() <= 6
                && matches!(unit, "" | "k" | "m" | "g" | "K" | "M" | "G")
            {
                return Ok(Directive::ShmSize(size.to_string()));
            }
        }
        Err(denied())
    }

    /// Each of `texts`, in order; the first refused one is the error.
    pub(crate) fn parse_all(texts: &[String]) -> Result<Vec<Directive>, ContractError> {
        texts.iter().map(|d| Directive::parse(d)).collect()
    }

    /// Whether the engine must be able to honour it, or it is dropped.
    pub(crate) fn optional(&self) -> bool {
        matches!(self, Directive::GpusAll)
    }

    fn arg(&self) -> String {
        match self {
            Directive::GpusAll => "--gpus=all".into(),
            Directive::ShmSize(s) => format!("--shm-size={s}"),
        }
    }
}

impl fmt::Display for Directive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.arg())
    }
}

// ----------------------------------------------------------------- argv ---

/// One sandbox container, fully decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sandbox {
    /// A pin's `repository@sha256:…`, `run --image`'s reference, or the
    /// ID of the image a check runs.
    pub image: Image,
    /// The alias the image was chosen by (a label), if any.
    pub alias: Option<String>,
    /// Absolute host path, bind-mounted read-write at [`WORKSPACE`].
    pub workspace: PathBuf,
    /// Container name; [`container_name`] of the workspace unless a caller
    /// runs several at once (the smoke suite).
    pub name: String,
    pub network: bool,
    pub memory_bytes: u64,
    pub cpus: Option<u32>,
    /// Variables passed by name (docker reads the value from its own
    /// environment, so no value is ever part of the argv).
    pub env: Vec<String>,
    pub directives: Vec<Directive>,
    /// `--platform` for an emulated run, if any.
    pub platform: Option<crate::name::Platform>,
    /// Replaces the image's entrypoint (the healthcheck's program).
    pub entrypoint: Option<String>,
    /// Keep stdin open (`-i`), and allocate a terminal (`-t`).
    pub interactive: bool,
    pub tty: bool,
    pub command: Vec<String>,
}

impl Sandbox {
    /// A sandbox for `workspace` with the default posture and no command.
    pub(crate) fn new(
        image: Image,
        workspace: &Path,
        memory_bytes: u64,
    ) -> Result<Sandbox, ContractError> {
        if !workspace.is_absolute() {
            return Err(ContractError::RelativeWorkspace {
                path: workspace.to_path_buf(),
            });
        }
        Ok(Sandbox {
            image,
            alias: None,
            workspace: workspace.to_path_buf(),
            name: container_name(workspace),
            network: false,
            memory_bytes,
            cpus: None,
            env: Vec::new(),
            directives: Vec::new(),
            platform: None,
            entrypoint: None,
            interactive: false,
            tty: false,
            command: Vec::new(),
        })
    }

    /// The labels the container carries.
    pub(crate) fn labels(&self) -> BTreeMap<&'static str, String> {
        let mut labels = BTreeMap::from([
            (LABEL_IMAGE, self.image.to_string()),
            (
                LABEL_WORKSPACE,
                self.workspace.to_string_lossy().into_owned(),
            ),
        ]);
        if let Some(alias) = &self.alias {
            labels.insert(LABEL_ALIAS, alias.clone());
        }
        labels
    }

    /// The arguments after the engine program (`run …`), in a fixed order.
    ///
    /// No word made of outside text can be read as an option
    /// (docs/run-contract.md, "What reaches an engine's command line"):
    /// every option is one word with its value (`--label=…`), and the image
    /// comes after `--`, where the engines read no more options (Docker
    /// 20.10 and Podman 4.3 both take it there), then the command.
    pub(crate) fn args(&self) -> Vec<OsString> {
        let mut a = Argv::new("run").flag("--rm");
        if self.interactive {
            a = a.flag("--interactive");
        }
        if self.tty {
            a = a.flag("--tty");
        }
        // The name is the sandbox's identity inside too (a random hostname
        // would make two runs of the same command print differently).
        a = a.opt("--name", &self.name).opt("--hostname", &self.name);
        for (k, v) in self.labels() {
            a = a.opt("--label", format!("{k}={v}"));
        }
        // Posture. `exec` on the tmpfs mounts: the engines mount --tmpfs
        // noexec by default, and `go test` runs the binaries it builds
        // under /tmp.
        a = a
            .flag("--read-only")
            .opt(
                "--tmpfs",
                format!("/tmp:rw,exec,nosuid,nodev,size={TMP_SIZE}"),
            )
            .opt(
                "--tmpfs",
                format!(
                    "{HOME}:rw,exec,nosuid,nodev,size={HOME_SIZE},uid={UID},gid={GID},mode=0700"
                ),
            )
            .opt("--cap-drop", "ALL")
            .opt("--security-opt", "no-new-privileges")
            .opt("--network", if self.network { "bridge" } else { "none" })
            .opt("--pids-limit", PIDS_LIMIT.to_string())
            .flag("--init")
            .opt("--memory", self.memory_bytes.to_string())
            // Swap stays unbounded: a no-swap rule froze real machines.
            .opt("--memory-swap", "-1");
        if let Some(cpus) = self.cpus {
            a = a.opt("--cpus", cpus.to_string());
        }
        if let Some(platform) = &self.platform {
            a = a.opt("--platform", platform.to_string());
        }
        // Workspace: --mount, whose value is CSV, so a path with commas,
        // quotes or newlines is one quoted field (`-v` would split on `:`).
        a = a
            .opt("--mount", bind_mount(&self.workspace, WORKSPACE, false))
            .opt("--workdir", WORKSPACE);
        for (k, v) in fixed_env() {
            a = a.opt("--env", format!("{k}={v}"));
        }
        for name in &self.env {
            a = a.opt("--env", name);
        }
        for d in &self.directives {
            a = a.flag(&d.arg());
        }
        if let Some(entrypoint) = &self.entrypoint {
            a = a.opt("--entrypoint", entrypoint);
        }
        a.operands(std::iter::once(self.image.to_string()).chain(self.command.iter().cloned()))
            .into_args()
    }

    /// The command that starts this sandbox on `engine` (pure): `run`
    /// prints it with `--print`, and runs it attached.
    pub(crate) fn cmd(&self, engine: &dyn Engine) -> Cmd {
        engine.container_cmd(self.args())
    }

    /// Runs this sandbox on `engine` to completion, its output captured
    /// (check's healthcheck and smoke); on timeout the container is removed.
    pub(crate) fn run(
        &self,
        engine: &dyn Engine,
        timeout: std::time::Duration,
    ) -> Result<crate::process::Output, EngineError> {
        engine.run_container(&self.name, self.args(), timeout)
    }
}

// ------------------------------------------------------------ what is asked ---

/// What an owner asks of a sandbox (`run`'s flags), before the engine's
/// resources set the caps.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ask {
    pub alias: Option<String>,
    pub network: bool,
    /// Whole GiB (default: the engine's memory minus 3 GiB; at least 4).
    pub memory_gib: Option<u64>,
    pub cpus: Option<u32>,
    /// Names already allowed ([`allowed_env`]).
    pub env: Vec<String>,
    pub directives: Vec<Directive>,
    pub command: Vec<String>,
    pub interactive: bool,
    pub tty: bool,
}

/// What was asked (an environment variable, a directive, a number) is a
/// usage error; a workspace that is not absolute is the caller's fault,
/// not the asker's.
impl crate::exit::HasStatus for ContractError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            ContractError::DeniedEnv { .. }
            | ContractError::BadEnvName { .. }
            | ContractError::DeniedDirective { .. }
            | ContractError::TooManyCpus { .. }
            | ContractError::NoCpus
            | ContractError::NoMemory => Status::Usage,
            ContractError::RelativeWorkspace { .. } => Status::Failure,
        }
    }
}

/// The sandbox `ask` gets on an engine with `resources`: an optional
/// directive the engine cannot honour is dropped (`dropped` hears of it),
/// memory and CPUs are capped by what the engine has.
pub(crate) fn sandbox(
    image: Image,
    workspace: &Path,
    resources: &crate::engine::Resources,
    ask: Ask,
    dropped: &mut dyn FnMut(&Directive),
) -> Result<Sandbox, ContractError> {
    let mut directives = ask.directives;
    directives.retain(|d| {
        let keep = !d.optional() || resources.gpus;
        if !keep {
            dropped(d);
        }
        keep
    });
    let mut sandbox = Sandbox::new(
        image,
        workspace,
        memory_cap(resources.memory_bytes, ask.memory_gib)?,
    )?;
    sandbox.alias = ask.alias;
    sandbox.network = ask.network;
    sandbox.cpus = cpu_cap(resources.cpus, ask.cpus)?;
    sandbox.env = ask.env;
    sandbox.directives = directives;
    sandbox.command = ask.command;
    sandbox.interactive = ask.interactive;
    sandbox.tty = ask.tty;
    Ok(sandbox)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_asked_is_capped_by_the_engine_and_a_gpu_dropped_without_one() {
        let resources = crate::engine::Resources {
            memory_bytes: 16 * GIB,
            cpus: 8,
            gpus: false,
        };
        let ask = Ask {
            alias: Some("py".into()),
            cpus: Some(2),
            directives: Directive::parse_all(&["--gpus=all".into(), "--shm-size=1g".into()])
                .unwrap(),
            ..Ask::default()
        };
        let mut dropped = Vec::new();
        let s = sandbox(image("img"), Path::new("/w"), &resources, ask, &mut |d| {
            dropped.push(d.to_string())
        })
        .unwrap();
        assert_eq!(dropped, ["--gpus=all"]);
        assert_eq!(s.directives, [Directive::ShmSize("1g".into())]);
        assert_eq!((s.memory_bytes, s.cpus), (13 * GIB, Some(2)));
        assert_eq!(s.alias.as_deref(), Some("py"));

        let too_many = Ask {
            cpus: Some(9),
            ..Ask::default()
        };
        let e = sandbox(
            image("img"),
            Path::new("/w"),
            &resources,
            too_many,
            &mut |_| {},
        )
        .unwrap_err();
        assert!(
            matches!(e, ContractError::TooManyCpus { asked: 9, .. }),
            "{e}"
        );
        let relative = sandbox(
            image("img"),
            Path::new("w"),
            &resources,
            Ask::default(),
            &mut |_| {},
        );
        assert!(matches!(
            relative.unwrap_err(),
            ContractError::RelativeWorkspace { .. }
        ));
    }

    #[test]
    fn what_was_asked_is_a_usage_error_and_a_relative_workspace_is_not() {
        use crate::exit::{HasStatus, Status};
        let usage = [
            ContractError::DeniedEnv {
                name: "AWS_SECRET".into(),
                rule: "*SECRET*",
            },
            ContractError::BadEnvName { name: "1X".into() },
            ContractError::DeniedDirective {
                directive: "--privileged".into(),
                allowed: DIRECTIVES_ALLOWED.into(),
            },
            ContractError::TooManyCpus {
                asked: 9,
                available: 2,
            },
            ContractError::NoCpus,
            ContractError::NoMemory,
        ];
        for e in usage {
            assert_eq!(e.exit_status(), Status::Usage, "{e}");
        }
        let relative = ContractError::RelativeWorkspace { path: "w".into() };
        assert_eq!(relative.exit_status(), Status::Failure);
    }

    #[test]
    fn names_round_trip_and_strangers_are_not_ours() {
        let n = container_name(Path::new("/home/me/My Project (v2)"));
        assert!(n.starts_with("sunaba-my-project-v2-"), "{n}");
        let parsed = parse_container_name(&n).unwrap();
        assert_eq!(parsed.slug, "my-project-v2");
        assert_eq!(parsed.hash8.len(), 8);
        // Same name, other path: other hash.
        assert_ne!(n, container_name(Path::new("/srv/My Project (v2)")));
        assert_eq!(
            container_name(Path::new("/")).split('-').nth(1),
            Some("ws"),
            "a nameless path still gets a slug"
        );
        let long = container_name(Path::new(&format!("/x/{}", "a".repeat(90))));
        assert!(parse_container_name(&long).is_some(), "{long}");
        for stranger in [
            "sunaba-check-go-0000abcd",
            "nginx",
            "sunaba-",
            "sunaba-app-1234567",
            "sunaba-app-123456789",
            "sunaba-App-12345678",
            "sunaba--12345678",
            "sunaba-a--b-12345678",
            "sunaba-app-1234567g",
            "xsunaba-app-12345678",
        ] {
            let verdict = parse_container_name(stranger);
            if stranger == "sunaba-check-go-0000abcd" {
                // Shaped like ours: the check's own names are deliberately so.
                assert!(verdict.is_some());
            } else {
                assert_eq!(verdict, None, "{stranger}");
            }
        }
    }

    #[test]
    fn memory_is_engine_minus_reserve_with_a_floor_and_asks_keep_the_floor() {
        let gib = |n: u64| n * GIB;
        assert_eq!(memory_cap(gib(16), None).unwrap(), gib(13));
        assert_eq!(
            memory_cap(gib(24) + 512 * (1 << 20), None).unwrap(),
            gib(21)
        );
        assert_eq!(memory_cap(gib(6), None).unwrap(), gib(4), "floor");
        assert_eq!(
            memory_cap(gib(2), None).unwrap(),
            gib(4),
            "floor beats a tiny engine"
        );
        assert_eq!(memory_cap(0, None).unwrap(), gib(4));
        assert_eq!(
            memory_cap(gib(16), Some(16)).unwrap(),
            gib(16),
            "asks ignore the reserve"
        );
        assert_eq!(
            memory_cap(gib(16), Some(64)).unwrap(),
            gib(64),
            "and the engine's size"
        );
        assert_eq!(
            memory_cap(gib(16), Some(2)).unwrap(),
            gib(4),
            "but not the floor"
        );
        assert_eq!(memory_cap(gib(16), Some(0)), Err(ContractError::NoMemory));
    }

    #[test]
    fn cpus_are_unbounded_unless_asked_and_never_more_than_the_engine() {
        assert_eq!(cpu_cap(8, None).unwrap(), None);
        assert_eq!(cpu_cap(8, Some(2)).unwrap(), Some(2));
        assert_eq!(cpu_cap(8, Some(8)).unwrap(), Some(8));
        assert_eq!(
            cpu_cap(8, Some(9)),
            Err(ContractError::TooManyCpus {
                asked: 9,
                available: 8
            })
        );
        assert_eq!(cpu_cap(8, Some(0)), Err(ContractError::NoCpus));
    }

    #[test]
    fn env_crosses_only_when_asked_allowed_and_set() {
        let caller: BTreeMap<String, OsString> = [
            "TERM",
            "LANG",
            "GITHUB_TOKEN",
            "DOCKER_HOST",
            "AWS_PROFILE",
            "MY_API_KEY",
            "CI",
        ]
        .iter()
        .map(|k| (k.to_string(), OsString::from("v")))
        .collect();
        let asked = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            allowed_env(&asked(&["TERM", "CI", "TERM", "NOT_SET"]), &caller).unwrap(),
            ["TERM", "CI"]
        );
        assert!(allowed_env(&asked(&[]), &caller).unwrap().is_empty());
        for name in [
            "GITHUB_TOKEN",
            "DOCKER_HOST",
            "AWS_PROFILE",
            "MY_API_KEY",
            "db_password",
            "Client_Secret_Id",
            "GH_HOST",
            "SSH_AUTH_SOCK",
            "NPM_CONFIG__AUTH",
            "SUNABA_PINS",
        ] {
            let rule = denied_by(name).unwrap_or_else(|| panic!("{name} must be denied"));
            assert!(glob_match(rule, name));
            assert_eq!(
                allowed_env(&asked(&[name]), &caller),
                Err(ContractError::DeniedEnv {
                    name: name.into(),
                    rule
                }),
                "{name}"
            );
        }
        assert!(matches!(
            allowed_env(&asked(&["A=B"]), &caller),
            Err(ContractError::BadEnvName { .. })
        ));
        assert!(matches!(
            allowed_env(&asked(&["1X"]), &caller),
            Err(ContractError::BadEnvName { .. })
        ));
        // Benign names that merely contain a deny word elsewhere pass.
        assert_eq!(denied_by("KEYBOARD_LAYOUT"), None);
        assert_eq!(denied_by("TOKENIZERS_PARALLELISM"), None);
    }

    #[test]
    fn directives_come_from_an_allowlist() {
        assert_eq!(Directive::parse("--gpus=all").unwrap(), Directive::GpusAll);
        assert!(Directive::GpusAll.optional());
        assert_eq!(
            Directive::parse("--shm-size=2g").unwrap(),
            Directive::ShmSize("2g".into())
        );
        for bad in [
            "--privileged",
            "--cap-add=SYS_ADMIN",
            "--gpus=0",
            "--shm-size=",
            "--shm-size=2t",
            "--shm-size=1g --privileged",
            "--network=host",
            "-v=/:/host",
        ] {
            let err = Directive::parse(bad).unwrap_err();
            assert!(
                matches!(&err, ContractError::DeniedDirective { directive, .. } if directive == bad),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("--gpus=all"), "{err}");
        }
    }

    const PINNED: &str = "127.0.0.1:5000/sunaba/sandbox@sha256:\
        abababababababababababababababababababababababababababababababab";

    fn image(text: &str) -> Image {
        text.parse().unwrap()
    }

    fn words(s: &Sandbox) -> Vec<String> {
        s.args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn argv_has_the_posture_in_a_fixed_order_and_no_env_values() {
        let mut s = Sandbox::new(image(PINNED), Path::new("/src/app"), 4 * GIB).unwrap();
        s.alias = Some("full".into());
        s.env = vec!["TERM".into()];
        s.command = vec!["go".into(), "test".into(), "./...".into()];
        let joined = words(&s).join(" ");
        for want in [
            "run --rm --name=sunaba-app-",
            "--read-only",
            "--tmpfs=/tmp:rw,exec,nosuid,nodev,size=1g",
            "--tmpfs=/home/sandbox:rw,exec,nosuid,nodev,size=1g,uid=1000,gid=1000,mode=0700",
            "--cap-drop=ALL",
            "--security-opt=no-new-privileges",
            "--network=none",
            "--pids-limit=4096",
            "--init",
            "--memory=4294967296",
            "--memory-swap=-1",
            "--mount=type=bind,source=/src/app,target=/workspace",
            "--workdir=/workspace",
            "--env=HOME=/home/sandbox",
            "--env=TERM --",
            "--label=dev.sunaba.sandbox.alias=full",
            "--label=dev.sunaba.sandbox.workspace=/src/app",
        ] {
            assert!(joined.contains(want), "{want:?} missing in {joined}");
        }
        assert!(!joined.contains("--cpus"), "{joined}");
        assert!(!joined.contains("--privileged"), "{joined}");
        assert!(
            joined.ends_with(&format!(" -- {PINNED} go test ./...")),
            "{joined}"
        );
        s.network = true;
        s.cpus = Some(2);
        let joined = words(&s).join(" ");
        assert!(
            joined.contains("--network=bridge") && joined.contains("--cpus=2"),
            "{joined}"
        );
        assert!(
            Sandbox::new(image("x"), Path::new("rel"), GIB).is_err(),
            "a relative workspace is refused"
        );
    }

    /// Every value made of outside text (the workspace path, the alias, the
    /// image, an entrypoint, the command) is inside its option's word or
    /// after `--`: before `--` each word is one of the contract's own
    /// options, and the image is the word right after it.
    #[test]
    fn no_outside_text_can_be_read_as_an_option() {
        let mut s = Sandbox::new(
            image("127.0.0.1:5000/x:t"),
            Path::new("/w/-v=/:/host --privileged"),
            4 * GIB,
        )
        .unwrap();
        s.alias = Some("--privileged".into());
        s.entrypoint = Some("-v=/:/host".into());
        s.platform = Some("linux/amd64".parse().unwrap());
        s.env = vec!["TERM".into()];
        s.directives = vec![Directive::GpusAll, Directive::ShmSize("1g".into())];
        s.interactive = true;
        s.tty = true;
        s.cpus = Some(1);
        s.command = vec!["--privileged".into(), "-v=/:/host".into()];
        let words = words(&s);
        let dash = words.iter().position(|w| w == "--").unwrap();
        const FLAGS: &[&str] = &[
            "--rm",
            "--interactive",
            "--tty",
            "--read-only",
            "--init",
            "--gpus=all",
        ];
        const WITH_VALUES: &[&str] = &[
            "name",
            "hostname",
            "label",
            "tmpfs",
            "cap-drop",
            "security-opt",
            "network",
            "pids-limit",
            "memory",
            "memory-swap",
            "cpus",
            "platform",
            "mount",
            "workdir",
            "env",
            "shm-size",
            "entrypoint",
        ];
        assert_eq!(words[0], "run");
        for w in &words[1..dash] {
            let ours = FLAGS.contains(&w.as_str())
                || WITH_VALUES
                    .iter()
                    .any(|name| w.starts_with(&format!("--{name}=")));
            assert!(
                ours,
                "{w:?} is not one of the contract's options: {words:?}"
            );
        }
        assert_eq!(
            words[dash + 1..],
            ["127.0.0.1:5000/x:t", "--privileged", "-v=/:/host"]
        );
        assert!(words.contains(&"--label=dev.sunaba.sandbox.alias=--privileged".to_string()));
        assert!(words.contains(&"--entrypoint=-v=/:/host".to_string()));
    }

    #[test]
    fn a_check_runs_its_image_by_id() {
        let id = format!("sha256:{}", "c".repeat(64));
        let s = Sandbox::new(image(&id), Path::new("/w"), 4 * GIB).unwrap();
        let words = words(&s);
        assert_eq!(words[words.len() - 2..], ["--".to_string(), id.clone()]);
        assert!(words.contains(&format!("--label=dev.sunaba.sandbox.image={id}")));
    }

    #[test]
    fn mount_source_is_one_csv_field_whatever_the_path_holds() {
        let v = |p: &str| {
            bind_mount(Path::new(p), WORKSPACE, false)
                .into_string()
                .unwrap()
        };
        assert_eq!(
            v("/a b/$(x)`y`"),
            "type=bind,source=/a b/$(x)`y`,target=/workspace"
        );
        assert_eq!(
            v("/a,b/\"q\"\nz"),
            "type=bind,\"source=/a,b/\"\"q\"\"\nz\",target=/workspace"
        );
        assert_eq!(
            bind_mount(Path::new("/x:/host,ro=false"), "/lock", true),
            "type=bind,\"source=/x:/host,ro=false\",target=/lock,readonly"
        );
    }

    #[test]
    fn a_sandbox_starts_with_its_argv_after_the_engine_program() {
        let engine = crate::engine::fake::FakeEngine::default();
        let mut sandbox =
            Sandbox::new("img:tag".parse().unwrap(), Path::new("/ws"), 4 << 30).unwrap();
        sandbox.command = vec!["true".into()];
        let cmd = sandbox.cmd(&engine);
        assert_eq!(cmd.program(), engine.program().as_os_str());
        assert_eq!(cmd.get_args(), sandbox.args().as_slice());
    }
}
