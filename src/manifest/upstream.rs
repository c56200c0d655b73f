//! The upstream image every root variant is built FROM: pinned by digest in
//! images.toml (`name:tag@sha256:…`), or, for a base made afresh on each
//! machine, taken from an environment variable that a profile names.
//!
//! A committed digest cannot serve the development environment: its base is
//! debootstrapped and pushed on every fresh machine, so its digest differs
//! from machine to machine. `scripts/dev-env` exports it by digest
//! (`SUNABA_BASE_REF`) and the `local` profile reads it from there
//! (`upstream_env`); the build then treats it exactly like a committed pin.

use crate::registry::{Digest, Reference};

/// Where the upstream in force comes from, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// Pinned in images.toml. `key` says where (`upstream`,
    /// `profiles.NAME.upstream`); `reference` has a tag and a digest.
    Pinned { key: String, reference: Reference },
    /// Named by the environment variable `var` (the profile's
    /// `upstream_env`), read when the profile was applied.
    Env {
        var: String,
        value: Option<String>,
        /// The tag the variable's digest must belong to (the profile's
        /// `upstream`), when the profile names one.
        tracks: Option<Reference>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error(
        "the profile takes its upstream from ${var}, which is not set (for the development \
         environment: `. /var/lib/sunaba-dev/env`, written by `scripts/dev-env up`)"
    )]
    EnvUnset { var: String },
    #[error("${var} is `{value}`: {reason}")]
    EnvInvalid {
        var: String,
        value: String,
        reason: String,
    },
}

/// The environment the upstream is read from is the machine's, not the
/// command line's: an operational failure.
impl crate::exit::HasStatus for UpstreamError {
    fn exit_status(&self) -> crate::exit::Status {
        match self {
            UpstreamError::EnvUnset { .. } | UpstreamError::EnvInvalid { .. } => {
                crate::exit::Status::Failure
            }
        }
    }
}

impl Upstream {
    /// The reference to build FROM: always with a digest, and with the tag
    /// it follows when one is known.
    pub fn pinned(&self) -> Result<Reference, UpstreamError> {
        match self {
            Upstream::Pinned { reference, .. } => Ok(reference.clone()),
            Upstream::Env { var, value, tracks } => {
                let value = value.as_deref().filter(|v| !v.trim().is_empty());
                let value = value.ok_or_else(|| UpstreamError::EnvUnset { var: var.clone() })?;
                from_env(value, tracks.as_ref()).map_err(|reason| UpstreamError::EnvInvalid {
                    var: var.clone(),
                    value: value.to_string(),
                    reason,
                })
            }
        }
    }

    /// Where it is set, for messages: `images.toml upstream`, `$SUNABA_BASE_REF`.
    pub fn origin(&self) -> String {
        match self {
            Upstream::Pinned { key, .. } => format!("images.toml `{key}`"),
            Upstream::Env { var, .. } => format!("${var}"),
        }
    }
}

/// Tests build families without a manifest: a pinned placeholder.
#[cfg(test)]
impl Default for Upstream {
    fn default() -> Upstream {
        Upstream::Pinned {
            key: "upstream".into(),
            reference: format!("up:latest@sha256:{}", "0".repeat(64))
                .parse()
                .unwrap(),
        }
    }
}

/// What a digest-pinned upstream must look like: `name:tag@sha256:…`. The
/// tag says what `update-base` follows; the digest is what is built.
pub fn parse_pinned(text: &str) -> Result<Reference, String> {
    let reference: Reference = text.parse().map_err(|e| format!("{e}"))?;
    match (reference.tag(), reference.digest()) {
        (Some(_), Some(_)) => Ok(reference),
        (None, Some(_)) => Err("has a digest but no tag to follow".into()),
        (_, None) => Err("is a tag only, not pinned by digest".into()),
    }
}

/// The env variable's reference, checked against the tag it should belong
/// to: same repository, same tag if it names one; the result carries that
/// tag and the variable's digest.
fn from_env(value: &str, tracks: Option<&Reference>) -> Result<Reference, String> {
    let reference: Reference = value.parse().map_err(|e| format!("{e}"))?;
    let digest: Digest = reference
        .digest()
        .cloned()
        .ok_or("not a reference by digest (`name[:tag]@sha256:…`)")?;
    let Some(tracks) = tracks else {
        return Ok(reference);
    };
    if reference.repo() != tracks.repo() {
        return Err(format!(
            "names repository {}, but the profile's upstream is {}",
            reference.repo(),
            tracks.repo()
        ));
    }
    if let (Some(a), Some(b)) = (reference.tag(), tracks.tag())
        && a != b
    {
        return Err(format!(
            "has the tag `{a}`, but the profile's upstream follows `{b}`"
        ));
    }
    Ok(tracks.with_digest(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_the_environment_does_not_give_is_an_operational_failure() {
        use crate::exit::{HasStatus, Status};
        let unset = UpstreamError::EnvUnset { var: "X".into() };
        assert_eq!(unset.exit_status(), Status::Failure);
        let invalid = UpstreamError::EnvInvalid {
            var: "X".into(),
            value: "y".into(),
            reason: "no digest".into(),
        };
        assert_eq!(invalid.exit_status(), Status::Failure);
    }

    const D: &str = "sha256:d4ed136e474e8fc338b3e4d2b27a1a3acdfcb8924481e511b02984a6617e084f";

    #[test]
    fn a_pin_needs_tag_and_digest() {
        let r = parse_pinned(&format!("debian:trixie-slim@{D}")).unwrap();
        assert_eq!(r.tag(), Some("trixie-slim"));
        assert!(
            parse_pinned("debian:trixie-slim")
                .unwrap_err()
                .contains("tag only")
        );
        assert!(
            parse_pinned(&format!("debian@{D}"))
                .unwrap_err()
                .contains("no tag")
        );
        assert!(parse_pinned("Debian:x").is_err());
    }

    #[test]
    fn the_environment_supplies_the_digest_of_the_tracked_tag() {
        let tracks: Reference = "127.0.0.1:5000/library/debian:trixie-slim".parse().unwrap();
        let env = |value: Option<&str>| Upstream::Env {
            var: "SUNABA_BASE_REF".into(),
            value: value.map(String::from),
            tracks: Some(tracks.clone()),
        };
        let pinned = env(Some(&format!("127.0.0.1:5000/library/debian@{D}")))
            .pinned()
            .unwrap();
        assert_eq!(
            pinned.to_string(),
            format!("127.0.0.1:5000/library/debian:trixie-slim@{D}")
        );
        let err = env(None).pinned().unwrap_err().to_string();
        assert!(err.contains("$SUNABA_BASE_REF, which is not set"), "{err}");
        let err = env(Some("127.0.0.1:5000/library/debian:trixie-slim"))
            .pinned()
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a reference by digest"), "{err}");
        let err = env(Some(&format!("127.0.0.1:5000/other@{D}")))
            .pinned()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("names repository 127.0.0.1:5000/other"),
            "{err}"
        );
        let err = env(Some(&format!("127.0.0.1:5000/library/debian:sid@{D}")))
            .pinned()
            .unwrap_err()
            .to_string();
        assert!(err.contains("follows `trixie-slim`"), "{err}");
    }
}
