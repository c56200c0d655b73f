//! What commands share: the options several of them take (registry, pins
//! file) and the project they load — manifest, profile settings, render,
//! build family, alias specs, engine, registry client — each loaded once, on
//! first use, with one wording for its failure.

use crate::engine::Engine;
use crate::family::Family;
use crate::manifest::{Manifest, Settings};
use crate::pins::plan::AliasSpec;
use crate::pins::registry_source::RegistrySource;
use crate::registry::{CaCert, Client, RetryPolicy};
use crate::render::Rendered;
use anyhow::Context as _;
use std::cell::OnceCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options for every command that talks to a registry.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Registry options")]
pub(crate) struct RegistryOptions {
    /// Extra root CA (PEM) this tool's own HTTPS connections trust, on top of
    /// the system roots: `PEM` for every host, `HOST=PEM` for the registry
    /// HOST (host[:port]) only, as a `certs.d/HOST/ca.crt` would.
    #[arg(long = "ca-cert", value_name = "[HOST=]PEM")]
    pub ca_certs: Vec<CaCert>,
    /// Registry (host[:port]) that may be spoken to over plain http; the
    /// profile's `insecure_registries` are added. Loopback registries always may.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure: Vec<String>,
    /// Requests in flight per registry.
    #[arg(long = "registry-concurrency", value_name = "N", default_value_t = 16)]
    pub concurrency: usize,
    /// Budget of each registry request, retries included (`30s`, `2m`):
    /// the time it may spend waiting — for a connection, an answer, between
    /// attempts. A body that keeps moving is never cut, however long it takes.
    #[arg(long = "registry-timeout", value_name = "DURATION", default_value = "2m",
          value_parser = crate::duration::parse)]
    pub timeout: Duration,
    /// A registry transfer (upload or download) that moves no byte for this
    /// long fails, naming the registry, what it was moving and how far it got.
    #[arg(long = "registry-idle-timeout", value_name = "DURATION", default_value = "30s",
          value_parser = crate::duration::parse)]
    pub idle_timeout: Duration,
}

impl RegistryOptions {
    /// The `--ca-cert` files trusted for every host (not those given for
    /// one registry): what clients other than the registry's trust.
    pub(crate) fn global_ca_files(&self) -> Vec<PathBuf> {
        global_ca_files(&self.ca_certs)
    }
}

/// The files of the `--ca-cert` values given for every host.
pub(crate) fn global_ca_files(ca_certs: &[CaCert]) -> Vec<PathBuf> {
    ca_certs
        .iter()
        .filter(|c| c.registry.is_none())
        .map(|c| c.path.clone())
        .collect()
}

/// How a command reports: for people, or also for a GitHub Actions runner.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OutputOptions {
    /// `github` adds `::error` annotations, a step summary and step outputs
    /// to the usual output; `auto` means github when GITHUB_ACTIONS=true.
    #[arg(long, value_enum, default_value_t = crate::github::Format::Auto)]
    pub format: crate::github::Format,
}

impl OutputOptions {
    pub(crate) fn github(&self) -> bool {
        self.format.github()
    }
}

/// `--platform`'s value name, the same on every verb that has it.
pub(crate) const PLATFORM_VALUE: &str = "LIST|all";

/// `--platform`'s help, the same on every verb that has it.
pub(crate) const PLATFORM_HELP: &str = "Platforms (OS/ARCH[/VARIANT], e.g. linux/arm64), \
    comma-separated, or `all`: every platform of the family (images.toml `platforms`; for \
    `resolve`, every platform the index lists). Default: the engine's own (for `resolve`, the \
    top-level digest)";

/// `--platform LIST|all` as given: the platforms named, each parsed and
/// normalised, in the order given without repeats, or `all` (which each verb
/// resolves: the family's platforms, or an index's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Platforms {
    All,
    Only(Vec<crate::name::Platform>),
}

impl Platforms {
    /// `--platform`'s parser (clap's `value_parser`).
    pub(crate) fn parse(text: &str) -> Result<Platforms, String> {
        if text.trim() == "all" {
            return Ok(Platforms::All);
        }
        let mut out = Vec::new();
        for item in text.split(',').map(str::trim) {
            if item == "all" {
                return Err("`all` stands alone, not in a list".into());
            }
            let p = crate::name::Platform::parse_normalized(item).map_err(|e| e.to_string())?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
        Ok(Platforms::Only(out))
    }

    /// The platforms, `all` being `every` (none: the one default run).
    pub(crate) fn resolve(
        given: Option<&Platforms>,
        every: &[crate::name::Platform],
    ) -> Vec<Option<crate::name::Platform>> {
        match given {
            None => vec![None],
            Some(Platforms::All) if every.is_empty() => vec![None],
            Some(Platforms::All) => every.iter().cloned().map(Some).collect(),
            Some(Platforms::Only(list)) => list.iter().cloned().map(Some).collect(),
        }
    }

    /// The platforms of a run over the family's images: `all` is the
    /// family's `platforms`, and each named one must be among them.
    pub(crate) fn of_family(
        given: Option<&Platforms>,
        family: &crate::family::Family,
    ) -> Result<Vec<Option<crate::name::Platform>>, crate::name::Unknown> {
        let out = Platforms::resolve(given, &family.platforms);
        for p in out.iter().flatten() {
            family.check_platform(p)?;
        }
        Ok(out)
    }
}

/// Where the pins file is.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PinsOptions {
    /// The pins file (default: image_pins.json beside images.toml).
    #[arg(long = "pins", value_name = "PATH", env = "SUNABA_PINS")]
    pub path: Option<PathBuf>,
}

/// The project as commands see it. Nothing is read until a command asks.
pub(crate) struct Context {
    manifest_path: PathBuf,
    profile: Option<String>,
    manifest: OnceCell<Manifest>,
    settings: OnceCell<Settings>,
    rendered: OnceCell<Rendered>,
    /// The process's one async runtime, built when a command first enters
    /// the registry-facing library ([`Context::block_on`]).
    runtime: OnceCell<tokio::runtime::Runtime>,
}

impl Context {
    pub(crate) fn new(manifest_path: PathBuf, profile: Option<String>) -> Context {
        Context {
            manifest_path,
            // `SUNABA_PROFILE=` (empty) selects no profile.
            profile: profile.filter(|p| !p.is_empty()),
            manifest: OnceCell::new(),
            settings: OnceCell::new(),
            rendered: OnceCell::new(),
            runtime: OnceCell::new(),
        }
    }

    /// Runs `work` (a command's async part) to completion on the process's
    /// one runtime. The one place synchronous command code enters the async
    /// library (docs/architecture.md, "One async boundary"): each command
    /// calls it once, around everything it asks of a registry.
    pub(crate) fn block_on<F: std::future::Future>(&self, work: F) -> anyhow::Result<F::Output> {
        Ok(self.runtime()?.block_on(work))
    }

    /// The process's one runtime, built on first use: multi-thread, so
    /// library code can hand a worker's queue over while it blocks
    /// (`tokio::task::block_in_place`, docs/architecture.md).
    fn runtime(&self) -> anyhow::Result<&tokio::runtime::Runtime> {
        if let Some(rt) = self.runtime.get() {
            return Ok(rt);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(self.runtime.get_or_init(|| rt))
    }

    /// images.toml, parsed and validated.
    pub(crate) fn manifest(&self) -> anyhow::Result<&Manifest> {
        if let Some(m) = self.manifest.get() {
            return Ok(m);
        }
        let m = Manifest::load(&self.manifest_path).context("loading the image family manifest")?;
        Ok(self.manifest.get_or_init(|| m))
    }

    /// The manifest's defaults with the selected profile applied.
    pub(crate) fn settings(&self) -> anyhow::Result<&Settings> {
        if let Some(s) = self.settings.get() {
            return Ok(s);
        }
        let s = self
            .manifest()?
            .resolve_profile(self.profile.as_deref())
            .context("applying the profile")?;
        Ok(self.settings.get_or_init(|| s))
    }

    /// Every generated file, rendered in memory (once: the templates, the
    /// lib files and the lock directories are read once a run).
    pub(crate) fn rendered(&self) -> anyhow::Result<&Rendered> {
        if let Some(r) = self.rendered.get() {
            return Ok(r);
        }
        let r = crate::render::render(self.manifest()?).context("rendering the generated files")?;
        Ok(self.rendered.get_or_init(|| r))
    }

    /// The family as the build sees it (manifest + render + profile).
    pub(crate) fn family(&self) -> anyhow::Result<Family> {
        Ok(Family::new(
            self.manifest()?,
            self.rendered()?,
            self.settings()?,
        ))
    }

    /// Every alias images.toml declares, with what its variant owes.
    pub(crate) fn alias_specs(&self) -> anyhow::Result<Vec<AliasSpec>> {
        Ok(AliasSpec::all(self.manifest()?))
    }

    /// The pins file: `--pins`, else image_pins.json beside images.toml. Needs
    /// no manifest (a server host may only have the pins file).
    pub(crate) fn pins_path(&self, options: &PinsOptions) -> PathBuf {
        options.path.clone().unwrap_or_else(|| {
            self.manifest_path
                .parent()
                .unwrap_or(Path::new("."))
                .join(crate::pins::FILE_NAME)
        })
    }

    /// The container engine of the profile (or `$SUNABA_ENGINE`, or PATH).
    /// Outside a project (no manifest file, no profile) there is no profile.
    pub(crate) fn engine(&self) -> anyhow::Result<Box<dyn Engine>> {
        let profile_engine = match self.project_settings()? {
            Some(settings) => settings.engine.clone(),
            None => None,
        };
        crate::engine::select(profile_engine.as_deref()).context("choosing the container engine")
    }

    /// The manifest file as given (`--manifest`), whether or not it loads.
    pub(crate) fn manifest_path(&self) -> &Path {
        &self.manifest_path
    }

    /// The selected profile's name.
    pub(crate) fn profile(&self) -> Option<&str> {
        self.profile.as_deref()
    }

    /// A registry client configured from `options` and the profile.
    pub(crate) fn registry(&self, options: &RegistryOptions) -> anyhow::Result<Client> {
        self.registry_with(options, self.profile_insecure_registries()?)
    }

    /// A registry client from `options` and the given plain-http registries
    /// (for commands that read the profile without validating the manifest).
    pub(crate) fn registry_with(
        &self,
        options: &RegistryOptions,
        insecure: Vec<String>,
    ) -> anyhow::Result<Client> {
        let total = options.timeout.max(Duration::from_secs(1));
        // No bound on an exchange as a whole: its waits are cut to the
        // budget (`total`), its bodies only by the idle timeout.
        let mut builder = Client::builder()
            .insecure_registries(options.insecure.iter().cloned())
            .insecure_registries(insecure)
            .per_registry_limit(options.concurrency)
            .idle_timeout(options.idle_timeout.max(Duration::from_millis(100)))
            .retry(RetryPolicy {
                total,
                ..RetryPolicy::default()
            });
        for ca in &options.ca_certs {
            builder = builder.ca_cert(ca.clone());
        }
        builder.build().context("configuring the registry client")
    }

    /// The registry as the pin commands read it.
    pub(crate) fn image_source(&self, options: &RegistryOptions) -> anyhow::Result<RegistrySource> {
        Ok(RegistrySource::new(self.registry(options)?))
    }

    /// `insecure_registries` of the selected profile. Commands that only
    /// talk to a registry do not otherwise need the manifest, so without a
    /// manifest file (run outside a project with `SUNABA_PROFILE` exported)
    /// there are none.
    fn profile_insecure_registries(&self) -> anyhow::Result<Vec<String>> {
        if self.profile.is_none() {
            return Ok(Vec::new());
        }
        Ok(self
            .project_settings()?
            .map(|s| s.insecure_registries.clone())
            .unwrap_or_default())
    }

    /// The settings, when there is a project to take them from: `None` when
    /// the manifest file does not exist (a command run outside a project).
    fn project_settings(&self) -> anyhow::Result<Option<&Settings>> {
        if self.manifest.get().is_none() && !self.manifest_path.exists() {
            return Ok(None);
        }
        self.settings().map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::Platforms;

    fn p(s: &str) -> crate::name::Platform {
        s.parse().unwrap()
    }

    #[test]
    fn platforms_are_a_list_or_all_normalised_without_repeats() {
        assert_eq!(Platforms::parse("all"), Ok(Platforms::All));
        assert_eq!(
            Platforms::parse("linux/amd64, linux/arm64/v8,linux/arm64"),
            Ok(Platforms::Only(vec![p("linux/amd64"), p("linux/arm64")]))
        );
        assert_eq!(
            Platforms::parse("linux/arm/v7"),
            Ok(Platforms::Only(vec![p("linux/arm/v7")]))
        );
        assert_eq!(
            Platforms::parse("linux/amd64,all"),
            Err("`all` stands alone, not in a list".to_string())
        );
        for bad in ["", "linux", "linux/amd64,", "linux//amd64"] {
            assert!(Platforms::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn all_is_what_the_verb_says_every_is_and_none_the_default_run() {
        let every = [p("linux/amd64"), p("linux/arm64")];
        let all = Platforms::resolve(Some(&Platforms::All), &every);
        assert_eq!(all, [Some(every[0].clone()), Some(every[1].clone())]);
        assert_eq!(Platforms::resolve(Some(&Platforms::All), &[]), [None]);
        assert_eq!(Platforms::resolve(None, &every), [None]);
        let one = Platforms::Only(vec![p("linux/arm64")]);
        assert_eq!(
            Platforms::resolve(Some(&one), &[]),
            [Some(every[1].clone())]
        );
    }
}
