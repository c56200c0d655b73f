//! Image configs: the config blob an image manifest names, fetched and
//! verified against its descriptor, and what is read from it (platform,
//! labels, creation time). Never layers.

use super::client::Client;
use super::index::{Index, check_platform};
use super::manifest::{Manifest, check_claimed};
use super::media_type as mt;
use super::transport::Request;
use super::transport::bearer::Scope;
use super::transport::limits::Limit;
use super::{Digest, Error, Platform, Reference, Result};
use reqwest::Method;
use reqwest::header::HeaderMap;
use std::collections::BTreeMap;

/// An image's config blob, verified against its digest.
#[derive(Debug, Clone)]
pub struct ImageConfig {
    /// The platform manifest the config belongs to.
    pub manifest_digest: Digest,
    /// The config blob's digest.
    pub digest: Digest,
    pub platform: Platform,
    /// `config.Labels` (empty when there are none).
    pub labels: BTreeMap<String, String>,
    pub created: Option<String>,
    /// The whole config document.
    pub raw: serde_json::Value,
}

/// The config descriptor of an image manifest: digest and size.
pub fn config_descriptor(context: &str, manifest: &[u8]) -> Result<(Digest, u64)> {
    let parsed = oci_spec::image::ImageManifest::from_reader(manifest)
        .map_err(|e| Error::malformed(context, "manifest", e.to_string()))?;
    let desc = parsed.config();
    let digest = desc.digest().to_string().parse().map_err(|reason| {
        Error::malformed(context, "manifest", format!("config digest: {reason}"))
    })?;
    Ok((digest, desc.size()))
}

/// Reads a config blob's bytes (already verified against `digest`).
pub(crate) fn parse_config(
    context: &str,
    manifest_digest: &Digest,
    digest: Digest,
    bytes: &[u8],
) -> Result<ImageConfig> {
    let malformed = |e: String| Error::malformed(context, "config blob", e);
    let config = oci_spec::image::ImageConfiguration::from_reader(bytes)
        .map_err(|e| malformed(e.to_string()))?;
    let raw: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
    let platform = Platform::from_parts(
        &config.os().to_string(),
        &config.architecture().to_string(),
        config.variant().as_deref(),
    )
    .map_err(|e| malformed(e.to_string()))?;
    Ok(ImageConfig {
        manifest_digest: manifest_digest.clone(),
        digest,
        platform,
        labels: config
            .labels_of_config()
            .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
        created: config.created().clone(),
        raw,
    })
}

impl Client {
    /// The config of the image `reference` names, for `platform` (default:
    /// this machine's) when it is an index. Reads only manifests and the
    /// config blob, never layers.
    pub async fn image_config(
        &self,
        reference: &Reference,
        platform: Option<&Platform>,
    ) -> Result<ImageConfig> {
        let wanted = platform.cloned().unwrap_or_else(Platform::host);
        let (_, config) = self
            .platform_image(reference, &wanted, platform.is_some())
            .await?;
        Ok(config)
    }

    /// The image manifest and config `reference` names: for an index, its
    /// entry for `wanted` (an error naming the platforms it has when none
    /// runs there); a single-platform image must be of `wanted` when
    /// `strict`. Reads only manifests and the config blob, never layers.
    pub async fn platform_image(
        &self,
        reference: &Reference,
        wanted: &Platform,
        strict: bool,
    ) -> Result<(Manifest, ImageConfig)> {
        let context = reference.to_string();
        let mut manifest = self.fetch_manifest(reference).await?;
        if mt::is_index(&manifest.media_type) {
            let index = Index::parse(&context, &manifest.bytes)?;
            let child = index.choose(&context, wanted)?.digest.clone();
            manifest = self.fetch_manifest(&reference.by_digest(child)).await?;
        }
        let config = self.config_of(reference, &manifest).await?;
        if strict {
            check_platform(&context, wanted, &config.platform)?;
        }
        Ok((manifest, config))
    }

    /// The config blob of an image manifest, verified against its
    /// descriptor's digest and size.
    pub async fn config_of(
        &self,
        reference: &Reference,
        manifest: &Manifest,
    ) -> Result<ImageConfig> {
        let context = reference.to_string();
        let registry = reference.registry();
        if !mt::is_manifest(&manifest.media_type) {
            return Err(Error::malformed(
                &context,
                "manifest",
                format!("expected an image manifest, got {}", manifest.media_type),
            ));
        }
        let (digest, size) = config_descriptor(&context, &manifest.bytes)?;
        let request = Request {
            method: Method::GET,
            target: format!("/v2/{}/blobs/{digest}", reference.repository()),
            headers: HeaderMap::new(),
            body: None,
            scope: Scope::pull(reference.repository()),
            context: &context,
            limit: Limit {
                bytes: self.settings().limits.config,
                what: "config blob",
                partial: false,
            },
        };
        let resp = self.execute(registry, request).await?;
        if !resp.status.is_success() {
            let context = format!("{context} (config {digest})");
            let status = resp.status.as_u16();
            return Err(Error::status(&context, registry, status, &resp.body));
        }
        check_claimed(
            &digest,
            &resp.body,
            &format!("{context} (config blob)"),
            "the manifest's config descriptor",
        )?;
        if resp.body.len() as u64 != size {
            let reason = format!("{} bytes, but the manifest says {size}", resp.body.len());
            return Err(Error::malformed(&context, "config blob", reason));
        }
        parse_config(&context, &manifest.digest, digest, &resp.body)
    }
}
