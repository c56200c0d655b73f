//! The serde shape of `images.toml`: what the file may say, before any
//! cross-reference is checked. Spans are kept so validation can name lines.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawManifest {
    pub(super) schema: Spanned<u32>,
    pub(super) repository: String,
    pub(super) upstream: Spanned<String>,
    /// The platforms the family is built for (`os/arch[/variant]`).
    #[serde(default)]
    pub(super) platforms: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) default: Spanned<String>,
    pub(super) source: Option<String>,
    /// SPDX expression for `org.opencontainers.image.licenses`.
    pub(super) licenses: Option<String>,
    /// Validated in `languages`.
    #[serde(default)]
    pub(super) languages: BTreeMap<String, Spanned<super::languages::RawLanguage>>,
    /// Build arguments that several fragments take: declared once here.
    #[serde(default)]
    pub(super) args: BTreeMap<String, String>,
    pub(super) tools: BTreeMap<String, RawTool>,
    pub(super) fragments: BTreeMap<String, RawFragment>,
    pub(super) variants: BTreeMap<String, RawVariant>,
    #[serde(default)]
    pub(super) profiles: BTreeMap<String, RawProfile>,
    /// Smoke suites (`[smoke.NAME]`), validated in `smoke`.
    #[serde(default)]
    pub(super) smoke: BTreeMap<String, RawSuite>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    pub(super) repository: Option<String>,
    pub(super) upstream: Option<Spanned<String>>,
    pub(super) upstream_env: Option<Spanned<String>>,
    pub(super) ca_bundle: Option<PathBuf>,
    pub(super) engine: Option<String>,
    #[serde(default)]
    pub(super) insecure_registries: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTool {
    pub(super) probe: Spanned<Vec<String>>,
    pub(super) version: Option<Spanned<String>>,
    pub(super) min: Option<Spanned<String>>,
    /// A version series the tool must stay in (`3.13` = 3.13.x).
    pub(super) series: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) presence_only: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFragment {
    pub(super) script: Spanned<String>,
    pub(super) provides: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) args: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) shared_args: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    /// What the fragment installs from a package registry, and from which.
    #[serde(default)]
    pub(super) packages: BTreeMap<String, RawPackage>,
    /// npm packages of the lock whose install scripts may run.
    #[serde(default)]
    pub(super) allow_scripts: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPackage {
    /// `npm`, `pypi`, `npm-tarball` or `debian`.
    pub(super) from: Spanned<String>,
    /// The build argument that pins the version (a series for `debian`).
    pub(super) arg: Option<Spanned<String>>,
    /// The registry's name when it differs from the key; `${ARG}` is replaced.
    pub(super) name: Option<Spanned<String>>,
    /// `npm-tarball`: the registry package per platform.
    #[serde(default)]
    pub(super) platforms: BTreeMap<String, String>,
    /// `debian`: the suite the package comes from (e.g. `trixie-backports`).
    pub(super) suite: Option<String>,
    /// The release line to stay on (`5`, `5.9`): `outdated` proposes only these.
    pub(super) track: Option<Spanned<String>>,
    /// Why it is held on `track` (shown by `outdated`).
    pub(super) reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVariant {
    pub(super) parent: Option<Spanned<String>>,
    pub(super) fragments: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) aliases: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) serves: Vec<Spanned<String>>,
    pub(super) size_budget: Spanned<String>,
    /// Narrows the family's `platforms` for this variant (and its children).
    #[serde(default)]
    pub(super) platforms: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSuite {
    pub(super) languages: Option<Vec<Spanned<String>>>,
    pub(super) dir: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) git: bool,
    pub(super) commands: Spanned<Vec<RawSmokeCommand>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSmokeCommand {
    pub(super) name: Option<Spanned<String>>,
    pub(super) run: Spanned<Vec<String>>,
    pub(super) tools: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(super) writes: bool,
    pub(super) expect: Spanned<BTreeMap<String, Spanned<RawExpect>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExpect {
    pub(super) exit: Option<Spanned<i64>>,
    pub(super) output: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) no_output: bool,
}
