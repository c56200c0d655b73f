//! Tag -> digest resolution, manifest verification and image configs.

use super::client::{Client, Req, Resp, error_detail};
use super::media_type as mt;
use super::platform::best_match;
use super::{Algorithm, Digest, Error, Platform, Reference, Result};
use futures::StreamExt as _;
use reqwest::Method;
use reqwest::header;
use std::collections::BTreeMap;

/// Every manifest type we can read. Distribution answers 404 for an OCI
/// image when the Accept header lacks the OCI types, so all four are sent.
pub const ACCEPT_MANIFESTS: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json";

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

/// A manifest as received: the exact bytes, verified.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub bytes: Vec<u8>,
    pub media_type: String,
    /// The digest of `bytes` (with the algorithm the registry or the
    /// reference used; sha256 otherwise).
    pub digest: Digest,
}

/// Result of [`Client::verify_manifest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestCheck {
    /// The registry has the manifest and its bytes hash to the digest.
    Verified { media_type: String, size: usize },
    /// The registry does not have it (HTTP 404).
    Missing,
}

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

fn scope(r: &Reference) -> String {
    format!("repository:{}:pull", r.repository())
}

fn header_str<'a>(resp: &'a Resp, name: &str) -> Option<&'a str> {
    resp.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

fn content_type(resp: &Resp) -> Option<String> {
    header_str(resp, header::CONTENT_TYPE.as_str())
        .map(|v| v.split(';').next().unwrap_or(v).trim().to_ascii_lowercase())
}

/// Maps a final non-success response to an error.
pub(crate) fn status_error_pub(context: &str, registry: &str, resp: &Resp) -> Error {
    if resp.status.as_u16() == 404 {
        Error::NotFound {
            context: context.to_string(),
            registry: registry.to_string(),
            detail: error_detail(&resp.body),
        }
    } else {
        Error::Status {
            context: context.to_string(),
            registry: registry.to_string(),
            status: resp.status.as_u16(),
            detail: error_detail(&resp.body),
        }
    }
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
            .buffered(256)
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
        let needs_body =
            reference.digest().is_some() || options.platform.is_some() || options.list_platforms;
        if !needs_body {
            let resp = self
                .execute(
                    reference.registry(),
                    manifest_req(Method::HEAD, reference, &context, (0, "manifest")),
                )
                .await;
            // Transport failures, exhausted retries and refused credentials
            // would fail a GET the same way; only an unhelpful answer falls back.
            let resp = resp?;
            if resp.status.is_success()
                && let Some(digest) = header_str(&resp, "docker-content-digest")
                    .and_then(|d| d.parse::<Digest>().ok())
                && let Some(media_type) =
                    content_type(&resp).filter(|t| mt::is_index(t) || mt::is_manifest(t))
            {
                return Ok(Resolved {
                    reference: reference.clone(),
                    index_digest: mt::is_index(&media_type).then(|| digest.clone()),
                    digest,
                    media_type,
                    platforms: Vec::new(),
                });
            }
            // Anything else: GET gives a hashable body or a clear error.
        }
        let manifest = self.fetch_manifest(reference).await?;
        let doc: serde_json::Value =
            serde_json::from_slice(&manifest.bytes).expect("checked in fetch_manifest");
        if mt::is_index(&manifest.media_type) {
            let index = parse_index(&context, &doc)?;
            let platforms: Vec<(Platform, Digest)> = index
                .iter()
                .filter_map(|e| Some((e.platform.clone()?, e.digest.clone())))
                .filter(|(p, _)| !p.is_unknown())
                .collect();
            let (digest, media_type) = match &options.platform {
                Some(wanted) => {
                    let candidates: Vec<Option<Platform>> =
                        index.iter().map(|e| e.platform.clone()).collect();
                    let i = best_match(wanted, &candidates).ok_or_else(|| {
                        Error::NoMatchingPlatform {
                            context: context.clone(),
                            wanted: wanted.to_string(),
                            available: platform_list(&platforms),
                        }
                    })?;
                    (index[i].digest.clone(), index[i].media_type.clone())
                }
                None => (manifest.digest.clone(), manifest.media_type.clone()),
            };
            return Ok(Resolved {
                reference: reference.clone(),
                digest,
                media_type,
                index_digest: Some(manifest.digest),
                platforms: if options.list_platforms || options.platform.is_some() {
                    platforms
                } else {
                    Vec::new()
                },
            });
        }
        // A single-platform image: its platform is in the config blob.
        let mut platforms = Vec::new();
        if options.platform.is_some() || options.list_platforms {
            let config = self.config_of(reference, &manifest).await?;
            if let Some(wanted) = &options.platform
                && best_match(wanted, &[Some(config.platform.clone())]).is_none()
            {
                return Err(Error::NoMatchingPlatform {
                    context,
                    wanted: wanted.to_string(),
                    available: config.platform.to_string(),
                });
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

    /// GETs the manifest and checks it: the bytes must hash to the
    /// `Docker-Content-Digest` header (with the header's algorithm) and to the
    /// reference's digest, be JSON of a supported manifest type, and agree
    /// with the Content-Type.
    pub async fn fetch_manifest(&self, reference: &Reference) -> Result<Manifest> {
        let context = reference.to_string();
        let registry = reference.registry();
        let resp = self
            .execute(
                registry,
                manifest_req(
                    Method::GET,
                    reference,
                    &context,
                    (self.inner.cfg.max_manifest_bytes, "manifest"),
                ),
            )
            .await?;
        if !resp.status.is_success() {
            return Err(status_error_pub(&context, registry, &resp));
        }
        let bytes = &resp.body;
        let mut algorithm = Algorithm::Sha256;
        if let Some(h) = header_str(&resp, "docker-content-digest") {
            let claimed: Digest = h.parse().map_err(|reason| Error::Malformed {
                context: context.clone(),
                what: "Docker-Content-Digest header",
                reason,
            })?;
            check_claimed(&claimed, bytes, &context, "Docker-Content-Digest header")?;
            algorithm = claimed.algorithm();
        }
        if let Some(wanted) = reference.digest() {
            check_claimed(wanted, bytes, &context, "the reference")?;
            algorithm = wanted.algorithm();
        }
        let media_type = check_manifest_body(&context, content_type(&resp).as_deref(), bytes)?;
        Ok(Manifest {
            digest: Digest::compute(algorithm, bytes),
            bytes: resp.body,
            media_type,
        })
    }

    /// Whether the registry holds the manifest `reference` (which must carry
    /// a digest) names, with bytes that hash to that digest. A mismatch is an
    /// error, not `Missing`.
    pub async fn verify_manifest(&self, reference: &Reference) -> Result<ManifestCheck> {
        if reference.digest().is_none() {
            return Err(Error::InvalidReference {
                input: reference.to_string(),
                reason: "verification needs a reference with a digest (…@sha256:…)".into(),
            });
        }
        match self.fetch_manifest(reference).await {
            Ok(m) => Ok(ManifestCheck::Verified {
                media_type: m.media_type,
                size: m.bytes.len(),
            }),
            Err(Error::NotFound { .. }) => Ok(ManifestCheck::Missing),
            Err(e) => Err(e),
        }
    }

    /// The config of the image `reference` names, for `platform` (default:
    /// this machine's) when it is an index. Reads only manifests and the
    /// config blob, never layers.
    pub async fn image_config(
        &self,
        reference: &Reference,
        platform: Option<&Platform>,
    ) -> Result<ImageConfig> {
        let mut manifest = self.fetch_manifest(reference).await?;
        if mt::is_index(&manifest.media_type) {
            let wanted = platform.cloned().unwrap_or_else(Platform::host);
            let doc: serde_json::Value =
                serde_json::from_slice(&manifest.bytes).expect("checked in fetch_manifest");
            let index = parse_index(&reference.to_string(), &doc)?;
            let candidates: Vec<Option<Platform>> =
                index.iter().map(|e| e.platform.clone()).collect();
            let i = best_match(&wanted, &candidates).ok_or_else(|| {
                let platforms: Vec<(Platform, Digest)> = index
                    .iter()
                    .filter_map(|e| Some((e.platform.clone()?, e.digest.clone())))
                    .filter(|(p, _)| !p.is_unknown())
                    .collect();
                Error::NoMatchingPlatform {
                    context: reference.to_string(),
                    wanted: wanted.to_string(),
                    available: platform_list(&platforms),
                }
            })?;
            manifest = self
                .fetch_manifest(&reference.by_digest(index[i].digest.clone()))
                .await?;
        }
        let config = self.config_of(reference, &manifest).await?;
        if let Some(wanted) = platform
            && best_match(wanted, &[Some(config.platform.clone())]).is_none()
        {
            return Err(Error::NoMatchingPlatform {
                context: reference.to_string(),
                wanted: wanted.to_string(),
                available: config.platform.to_string(),
            });
        }
        Ok(config)
    }

    async fn config_of(&self, reference: &Reference, manifest: &Manifest) -> Result<ImageConfig> {
        let context = reference.to_string();
        let registry = reference.registry();
        if !mt::is_manifest(&manifest.media_type) {
            return Err(Error::Malformed {
                context,
                what: "manifest",
                reason: format!("expected an image manifest, got {}", manifest.media_type),
            });
        }
        let parsed = oci_spec::image::ImageManifest::from_reader(manifest.bytes.as_slice())
            .map_err(|e| Error::Malformed {
                context: context.clone(),
                what: "manifest",
                reason: e.to_string(),
            })?;
        let desc = parsed.config();
        let digest: Digest =
            desc.digest()
                .to_string()
                .parse()
                .map_err(|reason| Error::Malformed {
                    context: context.clone(),
                    what: "manifest",
                    reason: format!("config digest: {reason}"),
                })?;
        let resp = self
            .execute(
                registry,
                Req {
                    method: Method::GET,
                    target: format!("/v2/{}/blobs/{digest}", reference.repository()),
                    accept: None,
                    scope: scope(reference),
                    context: &context,
                    limit: (self.inner.cfg.max_config_bytes, "config blob"),
                },
            )
            .await?;
        if !resp.status.is_success() {
            return Err(status_error_pub(
                &format!("{context} (config {digest})"),
                registry,
                &resp,
            ));
        }
        check_claimed(
            &digest,
            &resp.body,
            &format!("{context} (config blob)"),
            "the manifest's config descriptor",
        )?;
        if resp.body.len() as u64 != desc.size() {
            return Err(Error::Malformed {
                context,
                what: "config blob",
                reason: format!(
                    "{} bytes, but the manifest says {}",
                    resp.body.len(),
                    desc.size()
                ),
            });
        }
        let config = oci_spec::image::ImageConfiguration::from_reader(resp.body.as_slice())
            .map_err(|e| Error::Malformed {
                context: context.clone(),
                what: "config blob",
                reason: e.to_string(),
            })?;
        let raw: serde_json::Value =
            serde_json::from_slice(&resp.body).map_err(|e| Error::Malformed {
                context: context.clone(),
                what: "config blob",
                reason: e.to_string(),
            })?;
        Ok(ImageConfig {
            manifest_digest: manifest.digest.clone(),
            digest,
            platform: Platform::new(
                &config.os().to_string(),
                &config.architecture().to_string(),
                config.variant().as_deref(),
            ),
            labels: config
                .labels_of_config()
                .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            created: config.created().clone(),
            raw,
        })
    }
}

fn platform_list(platforms: &[(Platform, Digest)]) -> String {
    if platforms.is_empty() {
        return "no runnable platforms".into();
    }
    platforms
        .iter()
        .map(|(p, _)| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks that `bytes` are a JSON manifest of a supported type consistent
/// with the Content-Type; returns the media type.
fn check_manifest_body(context: &str, header: Option<&str>, bytes: &[u8]) -> Result<String> {
    let malformed = |reason: String| Error::Malformed {
        context: context.to_string(),
        what: "manifest",
        reason,
    };
    let doc: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        let start: String = String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        malformed(format!(
            "the body is not JSON ({e}); it starts with {start:?}"
        ))
    })?;
    let obj = doc
        .as_object()
        .ok_or_else(|| malformed("the body is not a JSON object".into()))?;
    match obj.get("schemaVersion").and_then(|v| v.as_u64()) {
        Some(2) => {}
        Some(1) => return Err(malformed("schema 1 manifests are not supported".into())),
        other => return Err(malformed(format!("schemaVersion is {other:?}, expected 2"))),
    }
    let known = |t: &str| mt::is_index(t) || mt::is_manifest(t);
    let body_type = match obj.get("mediaType") {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(malformed("mediaType is not a string".into())),
    };
    let header = header.filter(|h| known(h));
    let media_type = match (&body_type, header) {
        (Some(b), Some(h)) if b != h => {
            return Err(Error::MediaTypeMismatch {
                context: context.to_string(),
                header: h.to_string(),
                body: b.clone(),
            });
        }
        (Some(b), _) => b.clone(),
        (None, Some(h)) => h.to_string(),
        // OCI makes mediaType optional; tell index and manifest apart by shape.
        (None, None) if obj.contains_key("manifests") => mt::OCI_INDEX.to_string(),
        (None, None) if obj.contains_key("config") => mt::OCI_MANIFEST.to_string(),
        (None, None) => {
            return Err(malformed(
                "neither mediaType nor a recognisable structure".into(),
            ));
        }
    };
    if !known(&media_type) {
        return Err(malformed(format!(
            "unsupported manifest media type {media_type:?}"
        )));
    }
    let shape_ok = if mt::is_index(&media_type) {
        obj.get("manifests").is_some_and(|m| m.is_array())
    } else {
        obj.get("config").is_some_and(|c| c.is_object())
            && obj.get("layers").is_some_and(|l| l.is_array())
    };
    if !shape_ok {
        return Err(malformed(format!(
            "the body does not have the structure of {media_type}"
        )));
    }
    Ok(media_type)
}

struct IndexEntry {
    digest: Digest,
    media_type: String,
    platform: Option<Platform>,
}

fn parse_index(context: &str, doc: &serde_json::Value) -> Result<Vec<IndexEntry>> {
    let index: oci_spec::image::ImageIndex =
        serde_json::from_value(doc.clone()).map_err(|e| Error::Malformed {
            context: context.to_string(),
            what: "index",
            reason: e.to_string(),
        })?;
    index
        .manifests()
        .iter()
        .map(|d| {
            let digest = d
                .digest()
                .to_string()
                .parse()
                .map_err(|reason| Error::Malformed {
                    context: context.to_string(),
                    what: "index",
                    reason: format!("entry digest: {reason}"),
                })?;
            Ok(IndexEntry {
                digest,
                media_type: d.media_type().to_string(),
                platform: d.platform().as_ref().map(|p| {
                    Platform::new(
                        &p.os().to_string(),
                        &p.architecture().to_string(),
                        p.variant().as_deref(),
                    )
                }),
            })
        })
        .collect()
}

/// The request for a reference's manifest, accepting every manifest type.
fn manifest_req<'a>(
    method: Method,
    reference: &Reference,
    context: &'a str,
    limit: (usize, &'static str),
) -> Req<'a> {
    Req {
        method,
        target: format!(
            "/v2/{}/manifests/{}",
            reference.repository(),
            reference.manifest_ref()
        ),
        accept: Some(ACCEPT_MANIFESTS),
        scope: scope(reference),
        context,
        limit,
    }
}

/// Checks a digest claimed for `bytes` (by a header, the reference or a
/// descriptor) against the exact bytes received; a mismatch names both.
fn check_claimed(
    claimed: &Digest,
    bytes: &[u8],
    context: &str,
    from: &'static str,
) -> Result<(), Error> {
    if claimed.matches(bytes) {
        return Ok(());
    }
    Err(Error::DigestMismatch {
        context: context.to_string(),
        expected: claimed.to_string(),
        expected_from: from,
        actual: Digest::compute(claimed.algorithm(), bytes).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_body_checks() {
        let ctx = "r";
        let m = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}"#;
        assert_eq!(
            check_manifest_body(ctx, Some(mt::OCI_MANIFEST), m).unwrap(),
            mt::OCI_MANIFEST
        );
        let e = check_manifest_body(ctx, Some(mt::OCI_INDEX), m).unwrap_err();
        assert!(matches!(e, Error::MediaTypeMismatch { .. }), "{e}");
        let no_type = br#"{"schemaVersion":2,"manifests":[]}"#;
        assert_eq!(
            check_manifest_body(ctx, Some("application/json"), no_type).unwrap(),
            mt::OCI_INDEX
        );
        assert!(
            check_manifest_body(ctx, None, b"<html>oops</html>")
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
        assert!(
            check_manifest_body(ctx, None, br#"{"schemaVersion":1}"#)
                .unwrap_err()
                .to_string()
                .contains("schema 1")
        );
        let wrong_shape = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","config":{}}"#;
        assert!(
            check_manifest_body(ctx, None, wrong_shape)
                .unwrap_err()
                .to_string()
                .contains("structure")
        );
        let helm = br#"{"schemaVersion":2,"mediaType":"application/vnd.cncf.helm.chart","config":{},"layers":[]}"#;
        assert!(
            check_manifest_body(ctx, None, helm)
                .unwrap_err()
                .to_string()
                .contains("unsupported")
        );
    }
}
