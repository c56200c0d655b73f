//! Where `sbom` reads an image from: the engine when it has the image,
//! else the registry (for an index, its platform image).
//!
//! One image, one document: an image known by digest (`REPO@sha256:…`, a
//! pinned alias, an index's platform image) is named `REPO@DIGEST` and
//! described by that manifest digest whichever side it was read from — as
//! the SBOM a release attaches names it — and its files and config are the
//! same bytes on both sides (an engine's pulled image keeps the config; its
//! layers hold the same files). An image the engine knows only by a tag or
//! an ID has no manifest digest the engine can vouch for: it is named as
//! given and described by its image ID.

use super::AttestError;
use super::sbom::Subject;
use crate::engine::Engine;
use crate::registry::{Client, Platform, Reference, best_match};
use std::collections::BTreeMap;

/// Which platform image of an index to read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wanted {
    /// Asked for: an index must have it, a single image must be of it.
    pub platform: Option<Platform>,
    /// Otherwise (the engine's platform), else this machine's.
    pub default_platform: Option<Platform>,
}

/// What was read of an image.
#[derive(Debug)]
pub(crate) struct Read {
    pub subject: Subject,
    /// The wanted files ([`super::sbom::WANTED`]) the image has.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Its config's labels and architecture (the locked components follow).
    pub labels: BTreeMap<String, String>,
    pub arch: String,
    /// Where it was read from, for people.
    pub from: String,
}

/// Reads `reference` from `engine` when it has the image (of the wanted
/// platform, when one is asked for), else from the registry.
pub(crate) async fn read(
    engine: Option<&dyn Engine>,
    client: &Client,
    reference: &str,
    wanted: &Wanted,
) -> Result<Read, AttestError> {
    let parsed = reference.parse::<Reference>();
    if let Some(engine) = engine
        && let Some(info) = engine.inspect(reference).ok().flatten()
    {
        let fits = match (&wanted.platform, &info.platform) {
            (Some(w), Some(p)) => best_match(w, &[Some(p.clone())]).is_some(),
            _ => true,
        };
        if fits {
            let read = super::sbom::local_files(engine, &info.id)?;
            let created = read.config["created"].as_str().unwrap_or_default();
            let subject = match parsed.as_ref().ok().and_then(|r| Some((r, r.digest()?))) {
                Some((r, digest)) => {
                    Subject::by_digest(&r.repo().to_string(), &digest.to_string(), created)
                }
                None => Subject {
                    name: reference.to_string(),
                    digest: info.id.clone(),
                    created: created.to_string(),
                },
            };
            let arch = info.platform.as_ref().map(|p| p.architecture.to_string());
            return Ok(Read {
                subject,
                files: read.files,
                labels: info.labels,
                arch: arch.unwrap_or_else(|| "amd64".into()),
                from: format!("the engine ({}, image {})", engine.describe(), info.id),
            });
        }
    }
    let reference = parsed.map_err(|source| AttestError::NoImage {
        reference: reference.to_string(),
        source,
    })?;
    let platform = wanted
        .platform
        .clone()
        .or_else(|| wanted.default_platform.clone())
        .unwrap_or_else(Platform::host);
    let (manifest, config) = client
        .platform_image(&reference, &platform, wanted.platform.is_some())
        .await?;
    let subject = Subject::by_digest(
        &reference.repo().to_string(),
        &manifest.digest.to_string(),
        config.created.as_deref().unwrap_or_default(),
    );
    let files = super::registry_image::LayerReader::default()
        .files(client, reference.repo(), &subject.name, &manifest.bytes)
        .await?;
    Ok(Read {
        subject,
        files,
        labels: config.labels,
        arch: config.platform.architecture.to_string(),
        from: format!("the registry ({})", config.platform),
    })
}
