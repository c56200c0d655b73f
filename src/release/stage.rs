//! Staging: each planned image put in the release repository by digest,
//! stamped with its version, before any release tag moves. Staging writes
//! no tag: a manifest PUT by digest (`PUT /v2/<name>/manifests/sha256:…`)
//! stores the manifest untagged, so the repository's tag list only ever
//! holds the release and moving tags (issue 21); the journal records the
//! staged digest, which is all verify, promote and a resumed release read.
//!
//! # The client pushes local images, stamps and copies
//!
//! A local image is pushed by this client, by digest
//! ([`super::publish`]): each layer compressed here with one pinned
//! compressor at fixed settings ([`crate::image::compress`]), so the staged digest
//! is a function of the image, not of the engine that pushed it or of what
//! that engine pushed before (issue 18). Before, the engine's own `push`
//! did this, for the reason the engine gave: only it knew which compressed
//! forms it had uploaded, so it could HEAD and mount them instead of
//! compressing and sending them again. This client keeps that map itself
//! ([`crate::image::layer_cache`]: uncompressed digest -> compressed digest), so
//! releasing an unchanged family compresses nothing and sends HEADs and
//! manifests only. The manifest PUT names the checked image's config
//! byte for byte (whose digest is the local image ID).
//!
//! The version label (`org.opencontainers.image.version`) is then stamped by
//! this client ([`crate::image::stamp`]), as `crane mutate --label` would: the config gets the label,
//! the manifest the new config descriptor, every layer stays as it is. The
//! version can only be known at release time (it follows from
//! image_pins.json then), and the check record stays valid: it is bound to
//! `dev.sunaba.inputs`, which the stamp does not touch. The stamped bytes
//! are a pure function of the source manifest and the version, so a resumed
//! release stages the same digest again (and finds it there: one HEAD).
//!
//! An image already in a registry (`release --from`) is copied by the
//! client alone: each layer HEAD first, then a cross-repository mount, then
//! (mount refused, or another registry) its bytes; the planned digest is
//! known before anything is written.
//!
//! # An index
//!
//! A multi-platform source (an index in a registry) is staged platform by
//! platform: each platform image is copied and stamped as above and put by
//! its (new) digest, then the index of the stamped images is assembled
//! ([`registry::assemble`]) and put by its digest too. The source index's
//! own bytes cannot be kept: the stamp changes every child's digest. The
//! staged index is as deterministic as the stamp (children sorted by
//! platform, fixed serialisation), so a resumed release stages the same
//! digest, and promotion then PUTs those exact bytes. Entries of the source
//! that are not platform images — no platform, or `unknown/unknown`
//! (attestations) — are left out: they describe the unstamped images. The
//! stamped images must be of the platforms the source index names.

use super::journal::Staged;
use super::plan::{Planned, Source};
use super::publish::PublishError;
use crate::engine::Engine;
use crate::image::stamp::{StampError, Stamped, pointed_at, stamp};
use crate::name::{InvalidDigest, Platform};
use crate::registry::{self, Client, Digest, Index, Manifest, Reference, Repository};
use semver::Version;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// How many layers of one image are copied at once between repositories.
const COPIES_AT_ONCE: usize = 4;

/// Why an image could not be stamped or staged.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StageError {
    #[error("the manifest is not JSON")]
    ManifestNotJson(#[source] serde_json::Error),
    #[error("{digest} is not an image manifest ({media_type})")]
    NotAnImage { digest: Digest, media_type: String },
    #[error("the manifest has no layers")]
    NoLayers,
    #[error("layer digest {text:?}: {source}")]
    LayerDigest { text: String, source: InvalidDigest },
    #[error("the plan stages from the engine, but none is configured")]
    NoEngine,
    #[error("the index {context} lists no platform images")]
    NoPlatforms { context: String },
    #[error("reading the {platform} image of {context}")]
    ReadChild {
        platform: Platform,
        context: String,
        #[source]
        source: Box<registry::Error>,
    },
    #[error("stamping the {platform} image {digest}")]
    StampChild {
        platform: Platform,
        digest: Digest,
        #[source]
        source: Box<StageError>,
    },
    /// The stamped images' configs name other platforms than the index.
    #[error(
        "the index {context} names the platforms {named}, but its images' configs say {configs}"
    )]
    PlatformsDiffer {
        context: String,
        named: String,
        configs: String,
    },
    #[error("reading the checked config")]
    ReadConfig(#[source] registry::Error),
    /// The plan's source reference is no reference.
    #[error(transparent)]
    Source(#[from] crate::name::Invalid),
    /// The version could not be stamped on the config.
    #[error(transparent)]
    Stamp(#[from] StampError),
    #[error(transparent)]
    Push(#[from] PublishError),
    #[error(transparent)]
    Registry(#[from] registry::Error),
}

/// Staging fails operationally, but for the errors it carries that say
/// their own.
impl crate::exit::HasStatus for StageError {
    fn exit_status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            StageError::ManifestNotJson(_)
            | StageError::Stamp(_)
            | StageError::NotAnImage { .. }
            | StageError::NoLayers
            | StageError::LayerDigest { .. }
            | StageError::NoEngine
            | StageError::NoPlatforms { .. }
            | StageError::ReadChild { .. }
            | StageError::PlatformsDiffer { .. }
            | StageError::ReadConfig(_) => Status::Failure,
            StageError::StampChild { source, .. } => source.exit_status(),
            StageError::Source(e) => e.exit_status(),
            StageError::Push(e) => e.exit_status(),
            StageError::Registry(e) => e.exit_status(),
        }
    }
}

/// The layer digests of an image manifest.
fn layers(manifest: &Manifest) -> Result<Vec<Digest>, StageError> {
    if !registry::media_type::is_manifest(&manifest.media_type) {
        return Err(StageError::NotAnImage {
            digest: manifest.digest.clone(),
            media_type: manifest.media_type.clone(),
        });
    }
    let doc: Value =
        serde_json::from_slice(&manifest.bytes).map_err(StageError::ManifestNotJson)?;
    doc.get("layers")
        .and_then(Value::as_array)
        .ok_or(StageError::NoLayers)?
        .iter()
        .map(|l| {
            let d = l.get("digest").and_then(Value::as_str).unwrap_or_default();
            d.parse::<Digest>()
                .map_err(|source| StageError::LayerDigest {
                    text: d.to_string(),
                    source,
                })
        })
        .collect()
}

/// What staging one variant needs.
pub(crate) struct Stager<'a> {
    pub client: &'a Client,
    pub engine: Option<&'a dyn Engine>,
    /// The release repository.
    pub repository: &'a Repository,
    /// The layer cache an engine image is pushed with (and its layers
    /// noted in, for the attach step); `None`: this user's, opened then.
    pub cache: Option<&'a crate::image::layer_cache::LayerCache>,
    /// Which image sends each shared layer (see [`super::claims`]).
    pub claims: super::claims::LayerClaims,
}

impl Stager<'_> {
    /// What the engine says of each of `planned`'s images (one `docker
    /// inspect` run for them all): its layers are then known before it is
    /// staged, for staging images sharing none at once. `None` for a
    /// registry source or an image the engine lacks (staging says so).
    pub(crate) fn engine_images(
        &self,
        planned: &[Planned],
    ) -> Result<Vec<Option<crate::engine::ImageInfo>>, Box<StageError>> {
        let ids: Vec<(usize, &str)> = (planned.iter().enumerate())
            .filter_map(|(i, p)| match &p.source {
                Source::Engine { image_id, .. } => Some((i, image_id.as_str())),
                Source::Registry { .. } => None,
            })
            .collect();
        let mut images = vec![None; planned.len()];
        if ids.is_empty() {
            return Ok(images);
        }
        let engine = self.engine.ok_or(StageError::NoEngine)?;
        let asked: Vec<&str> = ids.iter().map(|(_, id)| *id).collect();
        let found =
            (engine.inspect_each(&asked)).map_err(|e| StageError::Push(PublishError::Engine(e)))?;
        for ((i, _), info) in ids.into_iter().zip(found) {
            images[i] = info;
        }
        Ok(images)
    }

    /// Puts `planned` in the release repository by digest, stamped (no tag
    /// is written); returns what is there.
    pub(crate) async fn stage(&self, planned: &Planned) -> Result<Staged, StageError> {
        let (from, manifest, pushed, config) = match &planned.source {
            Source::Engine {
                reference,
                image_id,
            } => {
                let engine = self.engine.ok_or(StageError::NoEngine)?;
                let target = crate::release::publish::Target::Digest(self.repository);
                // The stamped config goes up with the image's own, and is
                // kept for the stamp (not made again).
                let kept = std::sync::OnceLock::new();
                let stamped_config = |config: &[u8]| {
                    let stamped = crate::image::stamp::stamp_config(config, &planned.version)
                        .ok()
                        .map(bytes::Bytes::from);
                    if let Some(stamped) = &stamped {
                        let _ = kept.set(stamped.clone());
                    }
                    stamped
                };
                let (manifest, config) = match self.cache {
                    Some(cache) => {
                        let pushing = crate::release::publish::push_image(
                            engine,
                            self.client,
                            reference,
                            target,
                            image_id,
                            cache,
                            &self.claims,
                            &stamped_config,
                        );
                        let manifest = pushing.await?.0;
                        (manifest, kept.into_inner())
                    }
                    None => {
                        let pushing = crate::release::publish::push_checked(
                            engine,
                            self.client,
                            reference,
                            target,
                            image_id,
                        );
                        (pushing.await?, None)
                    }
                };
                let pushed = manifest.digest.clone();
                (self.repository.clone(), manifest, Some(pushed), config)
            }
            Source::Registry { reference } => {
                let source: Reference = reference.parse()?;
                let manifest = self.client.fetch_manifest(&source).await?;
                if registry::media_type::is_index(&manifest.media_type) {
                    return self.stamp_index(source.repo(), &manifest, planned).await;
                }
                (source.repo().clone(), manifest, None, None)
            }
        };
        let mut staged = self.stamp(&from, &manifest, planned, config).await?;
        staged.pushed = pushed;
        Ok(staged)
    }

    /// Stamps the version on `manifest` (of repository `from`) and puts the
    /// result by its digest, copying the layers when `from` is elsewhere.
    /// `stamped_config`: of an image this release pushed, the stamped config
    /// that went up with it.
    async fn stamp(
        &self,
        from: &Repository,
        manifest: &Manifest,
        planned: &Planned,
        stamped_config: Option<bytes::Bytes>,
    ) -> Result<Staged, StageError> {
        let stamped = match stamped_config {
            Some(config) => pointed_at(&manifest.bytes, &config)?,
            None => self.stamp_image(from, manifest, &planned.version).await?,
        };
        let at = Reference::in_repo(self.repository, stamped.digest.clone());
        if self.client.manifest_digest(&at).await?.is_none() {
            self.client
                .put_manifest(&at, &manifest.media_type, stamped.bytes)
                .await?;
        }
        Ok(Staged {
            digest: stamped.digest,
            media_type: manifest.media_type.clone(),
            config: Some(stamped.config),
            pushed: None,
            platforms: BTreeMap::new(),
        })
    }

    /// Stamps each platform image of the index `index` (of repository
    /// `from`), puts each by digest, and then the index of the stamped
    /// images by its digest (see the module docs).
    async fn stamp_index(
        &self,
        from: &Repository,
        index: &Manifest,
        planned: &Planned,
    ) -> Result<Staged, StageError> {
        let context = format!("{from}@{}", index.digest);
        let client = self.client;
        let to = self.repository;
        let children = Index::parse(&context, &index.bytes)?.platforms();
        if children.is_empty() {
            return Err(StageError::NoPlatforms { context });
        }
        let mut stamped = Vec::new();
        for (platform, digest) in &children {
            let child = (client
                .fetch_manifest(&Reference::in_repo(from, digest.clone()))
                .await)
                .map_err(|source| StageError::ReadChild {
                    platform: platform.clone(),
                    context: context.clone(),
                    source: Box::new(source),
                })?;
            let image =
                (self.stamp_image(from, &child, &planned.version).await).map_err(|source| {
                    StageError::StampChild {
                        platform: platform.clone(),
                        digest: digest.clone(),
                        source: Box::new(source),
                    }
                })?;
            let at = Reference::in_repo(to, image.digest.clone());
            if client.manifest_digest(&at).await?.is_none() {
                client
                    .put_manifest(&at, &child.media_type, image.bytes)
                    .await?;
            }
            stamped.push(image.digest);
        }
        let assembled = client.assemble_index(to, &stamped).await?;
        let named: BTreeSet<Platform> = children.iter().map(|(p, _)| p.normalized()).collect();
        let platforms: BTreeMap<Platform, Digest> = assembled.platforms.iter().cloned().collect();
        if platforms.keys().cloned().collect::<BTreeSet<_>>() != named {
            let list = |ps: &mut dyn Iterator<Item = &Platform>| {
                ps.map(ToString::to_string).collect::<Vec<_>>().join(", ")
            };
            return Err(StageError::PlatformsDiffer {
                context,
                named: list(&mut named.iter()),
                configs: list(&mut platforms.keys()),
            });
        }
        let at = Reference::in_repo(to, assembled.digest.clone());
        if client.manifest_digest(&at).await?.is_none() {
            client.put_index(&at, &assembled).await?;
        }
        Ok(Staged {
            digest: assembled.digest,
            media_type: assembled.media_type.to_string(),
            config: None,
            pushed: None,
            platforms,
        })
    }

    /// The image `manifest` (of repository `from`) with the version stamped:
    /// its layers made blobs of the release repository, the stamped config
    /// uploaded; the manifest is not put anywhere yet.
    async fn stamp_image(
        &self,
        from: &Repository,
        manifest: &Manifest,
        version: &Version,
    ) -> Result<Stamped, StageError> {
        let context = format!("{from}@{}", manifest.digest);
        let client = self.client;
        let to = self.repository;
        let layers = layers(manifest)?;
        if from != to {
            // A few layers at once (HEAD, mount or bytes each): a copy the
            // target will not mount holds its whole blob in memory, so the
            // count bounds memory, not only requests.
            let copies = layers.iter().map(|layer| client.copy_blob(from, to, layer));
            registry::in_order(copies, COPIES_AT_ONCE).await?;
        }
        let source_config = registry::config_descriptor(&context, &manifest.bytes)?.0;
        let config = (client.fetch_blob(from, &source_config, 16 << 20).await)
            .map_err(StageError::ReadConfig)?;
        let (stamped, config) = stamp(&manifest.bytes, &config, version)?;
        if client.blob_size(to, &stamped.config).await?.is_none() {
            client.upload_blob(to, config).await?;
        }
        Ok(stamped)
    }
}
