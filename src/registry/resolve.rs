//! Resolving references to the digests to run: a HEAD when that is enough,
//! else the verified manifest, and for an index the child for a platform.

use super::client::Client;
use super::index::{Index, check_platform};
use super::media_type as mt;
use super::{Digest, Platform, Reference, Result};
use futures::StreamExt as _;

/// What to resolve to.
#[derive(Debug, Clone, Default)]
pub struct ResolveOptions {
    /// Pick the best child of an index for this platform; `None` keeps the
    /// top-level (index) digest.
    pub platform: Option<Platform>,
    /// Fill [`Resolved::platforms`] (needs the manifest body; without it a
    /// tag resolves with one HEAD request).
    pub list_platforms: bool,
}

/// The outcome of resolving one reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The reference as given (parsed).
    pub reference: Reference,
    /// The digest to run: the platform child when a platform was asked for,
    /// else the top-level digest.
    pub digest: Digest,
    /// Media type of the manifest `digest` names.
    pub media_type: String,
    /// The index (manifest list) digest, when the reference names one.
    pub index_digest: Option<Digest>,
    /// Runnable platforms and their manifest digests (no attestations);
    /// filled when listing was asked for.
    pub platforms: Vec<(Platform, Digest)>,
}

impl Client {
    /// Resolves `reference` to the digest to run, listing the platforms of
    /// an index. See [`Client::resolve_with`].
    pub async fn resolve(
        &self,
        reference: &Reference,
        platform: Option<&Platform>,
    ) -> Result<Resolved> {
        self.resolve_with(
            reference,
            &ResolveOptions {
                platform: platform.cloned(),
                list_platforms: true,
            },
        )
        .await
    }

    /// Resolves many references concurrently (bounded per registry); the
    /// results are in input order.
    pub async fn resolve_many(
        &self,
        references: &[Reference],
        options: &ResolveOptions,
    ) -> Vec<Result<Resolved>> {
        futures::stream::iter(references)
            .map(|r| self.resolve_with(r, options))
            .buffered(super::REQUESTS)
            .collect()
            .await
    }

    /// Resolves one reference.
    ///
    /// A tag without a platform is answered by a HEAD request (Accept: all
    /// four manifest types) when the registry returns `Docker-Content-Digest`;
    /// otherwise — HEAD failed, the header is missing or empty, a platform or
    /// the platform list is wanted, or the reference carries a digest that
    /// must be verified — the manifest is fetched and hashed.
    pub async fn resolve_with(
        &self,
        reference: &Reference,
        options: &ResolveOptions,
    ) -> Result<Resolved> {
        let context = reference.to_string();
        let wants_platforms = options.platform.is_some() || options.list_platforms;
        if reference.digest().is_none()
            && !wants_platforms
            && let Some(head) = self.head_manifest(reference).await?
        {
            return Ok(Resolved {
                reference: reference.clone(),
                index_digest: mt::is_index(&head.media_type).then(|| head.digest.clone()),
                digest: head.digest,
                media_type: head.media_type,
                platforms: Vec::new(),
            });
        }
        let manifest = self.fetch_manifest(reference).await?;
        if mt::is_index(&manifest.media_type) {
            let index = Index::parse(&context, &manifest.bytes)?;
            let (digest, media_type) = match &options.platform {
                Some(wanted) => {
                    let child = index.choose(&context, wanted)?;
                    (child.digest.clone(), child.media_type.clone())
                }
                None => (manifest.digest.clone(), manifest.media_type.clone()),
            };
            return Ok(Resolved {
                reference: reference.clone(),
                digest,
                media_type,
                index_digest: Some(manifest.digest),
                platforms: if wants_platforms {
                    index.platforms()
                } else {
                    Vec::new()
                },
            });
        }
        // A single-platform image: its platform is in the config blob.
        let mut platforms = Vec::new();
        if wants_platforms {
            let config = self.config_of(reference, &manifest).await?;
            if let Some(wanted) = &options.platform {
                check_platform(&context, wanted, &config.platform)?;
            }
            platforms.push((config.platform, manifest.digest.clone()));
        }
        Ok(Resolved {
            reference: reference.clone(),
            digest: manifest.digest,
            media_type: manifest.media_type,
            index_digest: None,
            platforms,
        })
    }
}
