//! The serde shape of `images.toml`: what the file may say, before any
//! cross-reference is checked. Spans are kept so validation can name lines.

use super::Profile;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawManifest {
    pub(super) schema: Spanned<u32>,
    pub(super) repository: String,
    pub(super) upstream: String,
    pub(super) default: Spanned<String>,
    pub(super) source: Option<String>,
    /// SPDX expression for `org.opencontainers.image.licenses`.
    pub(super) licenses: Option<String>,
    #[serde(default)]
    pub(super) languages: BTreeMap<String, Vec<Spanned<String>>>,
    /// Build arguments that several fragments take: declared once here.
    #[serde(default)]
    pub(super) args: BTreeMap<String, String>,
    pub(super) tools: BTreeMap<String, RawTool>,
    pub(super) fragments: BTreeMap<String, RawFragment>,
    pub(super) variants: BTreeMap<String, RawVariant>,
    #[serde(default)]
    pub(super) profiles: BTreeMap<String, Profile>,
    /// Smoke suites (`[smoke.NAME]`), validated in `smoke`.
    #[serde(default)]
    pub(super) smoke: BTreeMap<String, RawSuite>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTool {
    pub(super) probe: Spanned<Vec<String>>,
    pub(super) version: Option<Spanned<String>>,
    pub(super) min: Option<Spanned<String>>,
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
