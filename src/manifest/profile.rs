//! Profiles (`[profiles.NAME]`): per-environment overrides of the family's
//! registry, upstream, CA bundle and engine, and the settings they resolve to.

use super::{Manifest, ManifestError};
use serde::Deserialize;
use std::path::PathBuf;

/// Environment overrides (`[profiles.NAME]`). Every key is optional.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub repository: Option<String>,
    pub upstream: Option<String>,
    pub ca_bundle: Option<PathBuf>,
    pub engine: Option<String>,
    #[serde(default)]
    pub insecure_registries: Vec<String>,
}

/// The settings in force once a profile (if any) is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub profile: Option<String>,
    pub repository: String,
    pub upstream: String,
    pub ca_bundle: Option<PathBuf>,
    pub engine: Option<String>,
    pub insecure_registries: Vec<String>,
}

impl Manifest {
    /// Applies a profile to the family's defaults.
    pub fn resolve_profile(&self, profile: Option<&str>) -> Result<Settings, ManifestError> {
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
        Ok(Settings {
            profile: profile.map(str::to_string),
            repository: p.repository.unwrap_or_else(|| self.repository.clone()),
            upstream: p.upstream.unwrap_or_else(|| self.upstream.clone()),
            ca_bundle: p.ca_bundle,
            engine: p.engine,
            insecure_registries: p.insecure_registries,
        })
    }
}
