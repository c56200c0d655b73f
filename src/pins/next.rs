//! The next version of a variant for a newly built image: its check record's
//! inventory against the pinned one, and whether its inputs changed; what
//! each variant's current release says (for `plan`).

use super::plan::AliasSpec;
use super::source::{ImageSource, SourceError};
use super::{Pin, PinsFile};
use crate::build::needs::Published;
use crate::labels::{self, CheckRecord};
use crate::policy::{self, NextVersion, parse_tag};
use crate::registry::{Client, Reference};
use anyhow::Context as _;
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
    #[error("{image}: unreadable {} label: {reason}", labels::CHECK)]
    BadRecord { image: String, reason: String },
    #[error("cannot read the pinned image {reference}: {source}")]
    Pinned {
        reference: String,
        source: SourceError,
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
/// its config), read from the registry; variants never pinned are absent.
pub fn published(
    pins: &PinsFile,
    specs: &[AliasSpec],
    variants: &[String],
    client: &Client,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<BTreeMap<String, Published>> {
    let mut published: BTreeMap<String, Published> = BTreeMap::new();
    for v in variants {
        let Some((_, pin)) = current_pin(pins, specs, v) else {
            continue;
        };
        let reference: Reference = pin.reference().parse()?;
        let config = rt
            .block_on(client.image_config(&reference, None))
            .with_context(|| format!("{v}: reading the pinned image {reference}"))?;
        published.insert(
            v.clone(),
            Published {
                tag: pin.tag.clone(),
                labels: config.labels,
            },
        );
    }
    Ok(published)
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

/// The next version of `variant` if `image` (`repository`, tag or digest)
/// were released: the current version is the pin of the variant's first
/// pinned alias whose tag is one of the variant's `<variant>-X.Y.Z`.
pub fn next_for_image(
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
    let image = source.inspect(repository, reference)?;
    let labels = image
        .primary()
        .map(|i| i.labels.clone())
        .unwrap_or_default();
    let record = CheckRecord::from_labels(&labels)
        .ok_or_else(|| NextError::NoRecord {
            image: display.clone(),
        })?
        .map_err(|e| NextError::BadRecord {
            image: display.clone(),
            reason: e.to_string(),
        })?;

    let current = current_pin(pins, specs, variant);

    let inputs_changed = match current {
        None => true,
        Some((_, pin)) if pin.digest == image.digest => false,
        Some((_, pin)) => {
            let pinned = source
                .inspect(&pin.repository, &pin.digest.to_string())
                .map_err(|source| NextError::Pinned {
                    reference: pin.reference(),
                    source,
                })?;
            let old = pinned.primary().and_then(|i| i.labels.get(labels::INPUTS));
            inputs_changed(old, labels.get(labels::INPUTS))
        }
    };
    let next = policy::next_version(
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
