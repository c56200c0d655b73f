//! The next version of a variant for a newly built image: its check record's
//! inventory against the pinned one, and whether its inputs changed; what
//! each variant's current release says (for `plan`).

use super::plan::AliasSpec;
use super::source::{ImageSource, SourceError};
use super::{Pin, PinsFile};
use crate::build::needs::Published;
use crate::labels::{self, CheckRecord};
use crate::registry::{Client, Reference};
use crate::semver_rules::{self, NextVersion, parse_tag};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum NextError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(
        "{image}: no {} label, so no tool inventory; run `sunaba-images check` on it first",
        labels::CHECK
    )]
    NoRecord { image: String },
    #[error("{image}: unreadable {} label", labels::CHECK)]
    BadRecord {
        image: String,
        source: serde_json::Error,
    },
    #[error("cannot read the pinned image {reference}: {source}")]
    Pinned {
        reference: String,
        source: SourceError,
    },
}

/// Why what a variant's current release says could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PublishedError {
    #[error(transparent)]
    Reference(#[from] crate::registry::Error),
    #[error("{variant}: reading the pinned image {reference}")]
    Read {
        variant: String,
        reference: String,
        #[source]
        source: Box<crate::registry::Error>,
    },
}

/// The variant's current release: the pin of its first pinned alias whose
/// tag is one of the variant's `<variant>-X.Y.Z`.
pub fn current_pin<'a>(
    pins: &'a PinsFile,
    specs: &[AliasSpec],
    variant: &str,
) -> Option<(&'a String, &'a Pin)> {
    specs
        .iter()
        .filter(|s| s.variant == variant)
        .find_map(|s| pins.images.get_key_value(&s.alias))
        .filter(|(_, p)| parse_tag(variant, &p.tag).is_some())
}

/// What each variant's current release says (its tag and the labels of
/// its config), read from the registry, every variant at once; variants
/// never pinned are absent.
pub async fn published(
    pins: &PinsFile,
    specs: &[AliasSpec],
    variants: &[String],
    client: &Client,
) -> Result<BTreeMap<String, Published>, PublishedError> {
    let reads = variants.iter().filter_map(|v| {
        let (_, pin) = current_pin(pins, specs, v)?;
        Some(async move {
            let reference: Reference = pin
                .reference()
                .parse()
                .map_err(crate::registry::Error::from)?;
            let config = client
                .image_config(&reference, None)
                .await
                .map_err(|source| PublishedError::Read {
                    variant: v.clone(),
                    reference: reference.to_string(),
                    source: Box::new(source),
                })?;
            let published = Published {
                tag: pin.tag.clone(),
                labels: config.labels,
            };
            Ok::<_, PublishedError>((v.clone(), published))
        })
    });
    Ok(crate::registry::in_order(reads, crate::registry::REQUESTS)
        .await?
        .into_iter()
        .collect())
}

/// Whether an image with inputs `new` differs from a pinned one with inputs
/// `old` (the `dev.sunaba.inputs` labels). Without input hashes on both
/// sides, a different image is a change.
pub fn inputs_changed(old: Option<&String>, new: Option<&String>) -> bool {
    old.is_none() || new.is_none() || old != new
}

/// What `version` reports for one image.
#[derive(Debug, Clone)]
pub struct NextForImage {
    /// The alias whose pin is the variant's current version, if any.
    pub pinned_as: Option<String>,
    pub record: CheckRecord,
    pub inputs_changed: bool,
    pub next: NextVersion,
}

/// `version --json`: the image, its check status and its next version.
#[derive(Debug, serde::Serialize)]
pub struct Report<'a> {
    pub variant: &'a str,
    pub image: &'a str,
    pub pinned_as: &'a Option<String>,
    pub check_status: &'a str,
    pub inputs_changed: bool,
    pub current: &'a Option<semver::Version>,
    pub next: &'a Option<semver::Version>,
    pub bump: semver_rules::Bump,
    pub tools: &'a [semver_rules::ToolChange],
}

impl NextForImage {
    /// The `--json` report of `image`, built for `variant`.
    pub fn report<'a>(&'a self, variant: &'a str, image: &'a str) -> Report<'a> {
        Report {
            variant,
            image,
            pinned_as: &self.pinned_as,
            check_status: self.record.status.as_str(),
            inputs_changed: self.inputs_changed,
            current: &self.next.current,
            next: &self.next.next,
            bump: self.next.bump,
            tools: &self.next.delta.changes,
        }
    }
}

/// The next version of `variant` if `image` (`repository`, tag or digest)
/// were released: the current version is the pin of the variant's first
/// pinned alias whose tag is one of the variant's `<variant>-X.Y.Z`.
pub async fn next_for_image(
    source: &impl ImageSource,
    pins: &PinsFile,
    specs: &[AliasSpec],
    variant: &str,
    repository: &str,
    reference: &str,
) -> Result<NextForImage, NextError> {
    let display = format!(
        "{repository}{}{reference}",
        if reference.contains(':') { "@" } else { ":" }
    );
    let image = source.inspect(repository, reference).await?;
    let preferred = specs
        .iter()
        .find(|s| s.variant == variant)
        .map_or(&[][..], |s| &s.platforms[..]);
    let labels = image
        .primary(preferred)
        .map(|i| i.labels.clone())
        .unwrap_or_default();
    let record = CheckRecord::from_labels(&labels)
        .ok_or_else(|| NextError::NoRecord {
            image: display.clone(),
        })?
        .map_err(|source| NextError::BadRecord {
            image: display.clone(),
            source,
        })?;

    let current = current_pin(pins, specs, variant);

    let inputs_changed = match current {
        None => true,
        Some((_, pin)) if pin.digest == image.digest => false,
        Some((_, pin)) => {
            let pinned = source
                .inspect(pin.repository.as_str(), &pin.digest.to_string())
                .await
                .map_err(|source| NextError::Pinned {
                    reference: pin.reference(),
                    source,
                })?;
            let old = pinned
                .primary(preferred)
                .and_then(|i| i.labels.get(labels::INPUTS));
            inputs_changed(old, labels.get(labels::INPUTS))
        }
    };
    let next = semver_rules::next_version(
        current.map(|(_, p)| (&p.version, &p.tools)),
        &record.tools,
        inputs_changed,
    );
    Ok(NextForImage {
        pinned_as: current.map(|(alias, _)| alias.clone()),
        record,
        inputs_changed,
        next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::CheckStatus;
    use crate::semver_rules::{Bump, Delta, ToolChange};
    use semver::Version;

    #[test]
    fn the_json_report_says_the_image_its_status_and_its_next_version() {
        let change = ToolChange {
            tool: "ruff".into(),
            old: Some("0.12.0".into()),
            new: Some("0.12.1".into()),
            bump: Bump::Patch,
            reason: "patch".into(),
        };
        let found = NextForImage {
            pinned_as: Some("python".into()),
            record: CheckRecord {
                schema: 1,
                status: CheckStatus::Pass,
                variant: Some("python".into()),
                inputs: None,
                checked_at: None,
                tools: Default::default(),
                smoke: None,
            },
            inputs_changed: true,
            next: NextVersion {
                current: Some(Version::new(1, 0, 0)),
                next: Some(Version::new(1, 0, 1)),
                bump: Bump::Patch,
                delta: Delta {
                    changes: vec![change.clone()],
                    bump: Bump::Patch,
                },
            },
        };
        let got = serde_json::to_string(&found.report("python", "r/s:python")).unwrap();
        // What `version --json` printed when it shaped the report itself.
        let was = serde_json::json!({
            "variant": "python",
            "image": "r/s:python",
            "pinned_as": found.pinned_as,
            "check_status": "pass",
            "inputs_changed": true,
            "current": found.next.current,
            "next": found.next.next,
            "bump": found.next.bump,
            "tools": found.next.delta.changes,
        });
        assert_eq!(got, was.to_string());
    }
}
