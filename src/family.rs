//! The image family as the build sees it: one plan per variant from the
//! manifest and its render, the selection of what to build and the tags
//! that name a build. `build`, `check` and `locks` all read it, so it sits
//! below them (recording a passing check is `check::record_pass`).

use crate::labels;
use crate::manifest::{Manifest, Settings, Upstream};
use crate::name::Platform;
use crate::render::Rendered;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// What the build of one variant needs, from images.toml and the render.
#[derive(Debug, Clone, Default)]
pub(crate) struct VariantPlan {
    pub name: String,
    pub parent: Option<String>,
    /// Repo-relative rendered Dockerfile.
    pub dockerfile: PathBuf,
    /// Every repo-relative file the build reads from its context.
    pub context_files: Vec<PathBuf>,
    /// `BASE_IMAGE` or `PARENT_IMAGE`.
    pub from_arg: String,
    /// Fragment build arguments with their defaults.
    pub build_args: BTreeMap<String, String>,
    pub owed_tools: Vec<String>,
    pub size_budget: u64,
    /// `org.opencontainers.image.description`.
    pub description: String,
    /// The smoke cases its check runs.
    pub smoke: crate::smoke::Plan,
    /// The platforms it is built for: its own `platforms`, else its
    /// parent's, else the family's (empty: the engine's own).
    pub platforms: Vec<Platform>,
    /// How it is composed from its members' layers, when it is a union of
    /// them (`crate::compose`); a build composes it when asked to.
    pub composition: Option<Composition>,
}

/// A union variant's members and its own steps, built over their layers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Composition {
    pub recipe: crate::compose::Recipe,
    /// The variant's Dockerfile without its fragments' steps.
    pub dockerfile: String,
}

/// The image family as the build sees it.
#[derive(Debug, Clone)]
#[cfg_attr(test, derive(Default))]
pub(crate) struct Family {
    /// Directory of images.toml (fragment paths are relative to it).
    pub root: PathBuf,
    /// Local repository of the built tags (the profile's `repository`).
    pub repository: String,
    /// FROM image of variants without a parent (the profile's `upstream`),
    /// pinned by digest.
    pub upstream: Upstream,
    /// The platforms the family is built for (empty: the engine's own).
    pub platforms: Vec<Platform>,
    pub source: String,
    /// SPDX expression, when images.toml gives one.
    pub licenses: Option<String>,
    /// Parents first.
    pub order: Vec<String>,
    pub variants: BTreeMap<String, VariantPlan>,
    /// Rendered files (repo-relative path -> content).
    pub generated: BTreeMap<PathBuf, String>,
    /// Each fragment's script file name -> the fragment (the normaliser
    /// attributes a layer's packages by the script its step ran).
    pub fragment_scripts: BTreeMap<String, String>,
}

impl Family {
    /// The family as the build sees it: the manifest, its render and the
    /// settings of the active profile.
    pub(crate) fn new(manifest: &Manifest, rendered: &Rendered, settings: &Settings) -> Family {
        Family {
            root: manifest.root.clone(),
            repository: settings.repository.clone(),
            upstream: settings.upstream.clone(),
            platforms: manifest.platforms.clone(),
            source: manifest.source.clone().unwrap_or_default(),
            licenses: manifest.licenses.clone(),
            order: manifest.build_order(),
            variants: rendered
                .variants
                .iter()
                .map(|(name, r)| {
                    let v = &manifest.variants[name];
                    (
                        name.clone(),
                        VariantPlan {
                            name: name.clone(),
                            parent: v.parent.clone(),
                            dockerfile: r.dockerfile.clone(),
                            context_files: r.context_files.clone(),
                            from_arg: r.from_arg.to_string(),
                            build_args: r.build_args.clone(),
                            description: description(name, &manifest.owed_tools(name)),
                            owed_tools: manifest.owed_tools(name),
                            size_budget: v.size_budget,
                            smoke: crate::smoke::plan(manifest, name),
                            platforms: manifest.platforms_of(name).to_vec(),
                            composition: r.composed_dockerfile.as_ref().and_then(|dockerfile| {
                                Some(Composition {
                                    recipe: crate::compose::recipe(manifest, name).ok()?,
                                    dockerfile: dockerfile.clone(),
                                })
                            }),
                        },
                    )
                })
                .collect(),
            generated: rendered.files.clone(),
            fragment_scripts: manifest
                .fragments
                .values()
                .filter_map(|f| {
                    let file = f.script.file_name()?.to_string_lossy().into_owned();
                    Some((file, f.name.clone()))
                })
                .collect(),
        }
    }

    /// The labels every build of `variant` carries that do not change from
    /// build to build (so they are part of its inputs): the OCI title,
    /// description, source, url and licenses docker/metadata-action would
    /// set, and `dev.sunaba.variant`. The version is stamped at release.
    pub(crate) fn static_labels(&self, variant: &str) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            (labels::OCI_TITLE.to_string(), format!("sunaba-{variant}")),
            (labels::OCI_SOURCE.to_string(), self.source.clone()),
            (labels::OCI_URL.to_string(), self.source.clone()),
            (labels::VARIANT.to_string(), variant.to_string()),
        ]);
        if let Some(plan) = self.variants.get(variant) {
            labels.insert(
                labels::OCI_DESCRIPTION.to_string(),
                plan.description.clone(),
            );
        }
        if let Some(l) = &self.licenses {
            labels.insert(labels::OCI_LICENSES.to_string(), l.clone());
        }
        labels
    }

    /// `platform` when it is one of the family's `platforms` (both are
    /// normalised where they were read: `linux/arm64/v8` is `linux/arm64`).
    /// A family without `platforms` is built for the engine's own, whatever
    /// that is, so any platform may be asked for.
    pub(crate) fn check_platform(&self, platform: &Platform) -> Result<(), crate::name::Unknown> {
        if self.platforms.is_empty() || self.platforms.contains(platform) {
            Ok(())
        } else {
            Err(crate::name::Unknown::new(
                "platform",
                platform.to_string(),
                "images.toml `platforms`",
                self.platforms.iter().map(ToString::to_string),
            ))
        }
    }

    /// The error for a variant the family does not have.
    pub(crate) fn unknown_variant(&self, name: &str) -> crate::name::Unknown {
        crate::name::Unknown::new("variant", name, "images.toml", self.variants.keys())
    }

    /// The targets and their ancestors, parents first; all variants when
    /// `targets` is empty.
    pub(crate) fn select(&self, targets: &[String]) -> Result<Vec<String>, crate::name::Unknown> {
        if targets.is_empty() {
            return Ok(self.order.clone());
        }
        let mut wanted = BTreeSet::new();
        for t in targets {
            let mut cur = Some(t.clone());
            while let Some(v) = cur {
                let plan = self
                    .variants
                    .get(&v)
                    .ok_or_else(|| self.unknown_variant(&v))?;
                wanted.insert(v.clone());
                cur = plan.parent.clone();
            }
        }
        Ok(self
            .order
            .iter()
            .filter(|v| wanted.contains(*v))
            .cloned()
            .collect())
    }

    /// [`Family::select`], and when `compose`, each selected union
    /// variant's members with their ancestors: a composed variant is made
    /// of their layers.
    pub(crate) fn select_composing(
        &self,
        targets: &[String],
        compose: bool,
    ) -> Result<Vec<String>, crate::name::Unknown> {
        let selected = self.select(targets)?;
        if !compose {
            return Ok(selected);
        }
        let members: Vec<String> = selected
            .iter()
            .filter_map(|v| self.variants[v].composition.as_ref())
            .flat_map(|c| c.recipe.members.iter().map(|m| m.variant.clone()))
            .collect();
        if members.is_empty() {
            return Ok(selected);
        }
        self.select(&[selected, members].concat())
    }

    /// The tag that names one exact set of inputs; children are built FROM it.
    pub(crate) fn inputs_tag(&self, variant: &str, inputs: &str) -> String {
        format!("{}:{variant}-inputs-{}", self.repository, short_hex(inputs))
    }

    /// The convenience tag of the latest checked build of a variant.
    pub(crate) fn variant_tag(&self, variant: &str) -> String {
        format!("{}:{variant}", self.repository)
    }

    /// The variant tag of a build for `foreign`, a platform other than the
    /// engine's own: `repo:python-arm64` (the engine keeps one image per
    /// tag, so each platform needs its own); [`Self::variant_tag`] for the
    /// engine's own (`None`).
    pub(crate) fn platform_tag(&self, variant: &str, foreign: Option<&Platform>) -> String {
        match foreign {
            None => self.variant_tag(variant),
            Some(p) => {
                let slug = p.slug();
                format!("{}:{variant}-{slug}", self.repository)
            }
        }
    }
}

/// The first 12 hex digits of a `sha256:…` image ID or inputs hash: what
/// tags (`go-inputs-0123456789ab`) and tables show of it.
pub(crate) fn short_hex(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    &hex[..12.min(hex.len())]
}

/// One line for `org.opencontainers.image.description`.
fn description(variant: &str, owed: &[String]) -> String {
    format!(
        "Sunaba sandbox image {variant}: {} tools ({})",
        owed.len(),
        owed.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family() -> Family {
        let plan = |name: &str, parent: Option<&str>| VariantPlan {
            name: name.into(),
            parent: parent.map(String::from),
            ..Default::default()
        };
        Family {
            repository: "127.0.0.1:5000/sunaba/sandbox".into(),
            order: ["base", "python", "go", "minimal"]
                .map(String::from)
                .to_vec(),
            variants: BTreeMap::from([
                ("base".into(), plan("base", None)),
                ("python".into(), plan("python", Some("base"))),
                ("go".into(), plan("go", Some("base"))),
                ("minimal".into(), plan("minimal", None)),
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn selection_adds_ancestors_in_build_order() {
        let f = family();
        assert_eq!(f.select(&[]).unwrap(), f.order);
        assert_eq!(f.select(&["go".into()]).unwrap(), ["base", "go"]);
        assert_eq!(
            f.select(&["minimal".into(), "python".into()]).unwrap(),
            ["base", "python", "minimal"]
        );
        let err = f.select(&["rust".into()]).unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown variant `rust` (images.toml declares: base, go, minimal, python)"
        );
    }

    #[test]
    fn tags() {
        let f = family();
        assert_eq!(
            f.inputs_tag("go", "sha256:0123456789abcdef0123"),
            "127.0.0.1:5000/sunaba/sandbox:go-inputs-0123456789ab"
        );
        assert_eq!(f.variant_tag("go"), "127.0.0.1:5000/sunaba/sandbox:go");
        assert_eq!(f.platform_tag("go", None), f.variant_tag("go"));
        for p in ["linux/arm64", "linux/arm64/v8"] {
            assert_eq!(
                f.platform_tag("go", Some(&p.parse().unwrap())),
                "127.0.0.1:5000/sunaba/sandbox:go-arm64"
            );
        }
        assert_eq!(
            f.platform_tag("go", Some(&"linux/arm/v7".parse().unwrap())),
            "127.0.0.1:5000/sunaba/sandbox:go-armv7"
        );
    }
}
