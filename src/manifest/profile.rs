//! Profiles (`[profiles.NAME]`): per-environment overrides of the family's
//! registry, upstream, CA bundle and engine, their validation, and the
//! settings they resolve to.

use super::problems::Problems;
use super::raw::RawProfile;
use super::upstream::{Upstream, parse_pinned};
use super::{Manifest, ManifestError};
use crate::registry::Reference;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Environment overrides (`[profiles.NAME]`). Every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    pub repository: Option<String>,
    /// `name:tag@sha256:…`; with `upstream_env`, the tag (no digest) that
    /// the variable's digest must belong to.
    pub upstream: Option<String>,
    /// An environment variable holding the upstream by digest
    /// (`name[:tag]@sha256:…`), for bases made afresh on each machine.
    pub upstream_env: Option<String>,
    pub ca_bundle: Option<PathBuf>,
    pub engine: Option<String>,
    pub insecure_registries: Vec<String>,
}

/// The settings in force once a profile (if any) is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub profile: Option<String>,
    pub repository: String,
    /// The upstream in force; [`Upstream::pinned`] gives the reference to
    /// build FROM (an unset `upstream_env` variable is an error only there,
    /// so commands that never build do not need it).
    pub upstream: Upstream,
    pub ca_bundle: Option<PathBuf>,
    pub engine: Option<String>,
    pub insecure_registries: Vec<String>,
}

impl Manifest {
    /// Applies a profile to the family's defaults, reading `upstream_env`
    /// from the process environment.
    pub fn resolve_profile(&self, profile: Option<&str>) -> Result<Settings, ManifestError> {
        self.resolve_profile_with(profile, |var| std::env::var(var).ok())
    }

    /// [`Manifest::resolve_profile`] with the environment given.
    pub fn resolve_profile_with(
        &self,
        profile: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, ManifestError> {
        let p =
            match profile {
                None => Profile::default(),
                Some(name) => self.profiles.get(name).cloned().ok_or_else(|| {
                    ManifestError::UnknownProfile {
                        path: self.path.clone(),
                        name: name.to_string(),
                        known: if self.profiles.is_empty() {
                            "none".to_string()
                        } else {
                            self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                        },
                    }
                })?,
            };
        // Validation made sure these parse.
        let upstream = match (&p.upstream_env, &p.upstream) {
            (Some(var), tracks) => Upstream::Env {
                var: var.clone(),
                value: env(var),
                tracks: tracks.as_deref().and_then(|t| t.parse().ok()),
            },
            (None, Some(pinned)) => Upstream::Pinned {
                key: format!("profiles.{}.upstream", profile.unwrap_or_default()),
                reference: pinned.parse().expect("validated"),
            },
            (None, None) => Upstream::Pinned {
                key: "upstream".into(),
                reference: self.upstream.parse().expect("validated"),
            },
        };
        Ok(Settings {
            profile: profile.map(str::to_string),
            repository: p.repository.unwrap_or_else(|| self.repository.clone()),
            upstream,
            ca_bundle: p.ca_bundle,
            engine: p.engine,
            insecure_registries: p.insecure_registries,
        })
    }
}

/// Checks every profile: its upstream is pinned by digest, or names the tag
/// an `upstream_env` variable's digest must belong to.
pub(super) fn validate(
    raw: BTreeMap<String, RawProfile>,
    p: &mut Problems,
) -> BTreeMap<String, Profile> {
    let mut out = BTreeMap::new();
    for (name, r) in raw {
        let key = format!("profiles.{name}");
        if let Some(var) = &r.upstream_env
            && !valid_env_name(var.get_ref())
        {
            p.at(
                var,
                format!("{key}.upstream_env"),
                format!("`{}` is not an environment variable name", var.get_ref()),
                "use letters, digits and `_`, e.g. SUNABA_BASE_REF",
            );
        }
        if let Some(up) = &r.upstream {
            let text = up.get_ref();
            if r.upstream_env.is_some() {
                match text.parse::<Reference>() {
                    Ok(reference) if reference.digest().is_some() => p.at(
                        up,
                        format!("{key}.upstream"),
                        "has a digest, but the digest comes from `upstream_env`",
                        "name only the tag here (name:tag), or drop `upstream_env`",
                    ),
                    Ok(_) => {}
                    Err(e) => p.at(up, format!("{key}.upstream"), format!("{e}"), ""),
                }
            } else if let Err(why) = parse_pinned(text) {
                p.at(
                    up,
                    format!("{key}.upstream"),
                    format!("`{text}` {why}"),
                    format!(
                        "pin it as name:tag@sha256:<index digest> (`sunaba-images --profile \
                         {name} update-base --write`), or take it from the environment with \
                         `upstream_env`"
                    ),
                );
            }
        }
        out.insert(
            name,
            Profile {
                repository: r.repository,
                upstream: r.upstream.map(|u| u.into_inner()),
                upstream_env: r.upstream_env.map(|u| u.into_inner()),
                ca_bundle: r.ca_bundle,
                engine: r.engine,
                insecure_registries: r.insecure_registries,
            },
        );
    }
    out
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
