//! Manifests as received: asking for one by tag or digest, verifying the
//! exact bytes against every digest claimed for them and the body against
//! its media type, and checking that a pinned manifest is still there.

use super::client::Client;
use super::media_type as mt;
use super::transport::bearer::Scope;
use super::transport::limits::Limit;
use super::transport::{Request, Response};
use super::{Algorithm, Digest, Error, ErrorKind, Reference, Result};
use reqwest::Method;
use reqwest::header::{self, HeaderMap, HeaderValue};

/// Every manifest type we can read. Distribution answers 404 for an OCI
/// image when the Accept header lacks the OCI types, so all four are sent.
pub(super) const ACCEPT_MANIFESTS: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json";

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

/// What a HEAD request for a manifest told.
enum Headed {
    Found(Head),
    /// 404.
    Missing,
    /// Another status, or no digest or manifest type: a GET must tell.
    Unclear,
}

/// What a HEAD request for a manifest told, when it told enough.
pub(crate) struct Head {
    pub digest: Digest,
    pub media_type: String,
}

/// The request for a reference's manifest, accepting every manifest type.
fn manifest_request<'a>(
    method: Method,
    reference: &Reference,
    context: &'a str,
    limit: Limit,
) -> Request<'a> {
    let mut headers = HeaderMap::new();
    headers.insert(header::ACCEPT, HeaderValue::from_static(ACCEPT_MANIFESTS));
    Request {
        method,
        target: format!(
            "/v2/{}/manifests/{}",
            reference.repository(),
            reference.manifest_ref()
        ),
        headers,
        body: None,
        scope: Scope::pull(reference.repository()),
        context,
        limit,
    }
}

/// The media type of `Content-Type`, without parameters, lowercased.
fn content_type(resp: &Response) -> Option<String> {
    resp.header(header::CONTENT_TYPE.as_str())
        .map(|v| v.split(';').next().unwrap_or(v).trim().to_ascii_lowercase())
}

impl Client {
    /// A HEAD request for the manifest: its digest and media type when the
    /// registry answers with a `Docker-Content-Digest` and a manifest
    /// Content-Type, else `None` (a GET will give a hashable body or a
    /// clear error). Transport failures, exhausted retries and refused
    /// credentials would fail a GET the same way, so they are errors.
    pub(crate) async fn head_manifest(&self, reference: &Reference) -> Result<Option<Head>> {
        Ok(match self.head(reference).await? {
            Headed::Found(head) => Some(head),
            Headed::Missing | Headed::Unclear => None,
        })
    }

    /// The digest `reference` names now, `None` when the registry has no
    /// such manifest: one HEAD (a 404 is the answer), or a GET of the bytes
    /// when the HEAD says too little.
    pub async fn manifest_digest(&self, reference: &Reference) -> Result<Option<Digest>> {
        match self.head(reference).await? {
            Headed::Found(head) => Ok(Some(head.digest)),
            Headed::Missing => Ok(None),
            Headed::Unclear => match self.fetch_manifest(reference).await {
                Ok(m) => Ok(Some(m.digest)),
                Err(e) if matches!(e.kind(), ErrorKind::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    async fn head(&self, reference: &Reference) -> Result<Headed> {
        let context = reference.to_string();
        let limit = Limit {
            bytes: 0,
            what: "manifest",
            partial: false,
        };
        let resp = self
            .execute(
                reference.registry(),
                manifest_request(Method::HEAD, reference, &context, limit),
            )
            .await?;
        if resp.status.as_u16() == 404 {
            return Ok(Headed::Missing);
        }
        if !resp.status.is_success() {
            return Ok(Headed::Unclear);
        }
        let digest = resp
            .header("docker-content-digest")
            .and_then(|d| d.parse::<Digest>().ok());
        let media_type = content_type(&resp).filter(|t| mt::is_index(t) || mt::is_manifest(t));
        Ok(match digest.zip(media_type) {
            Some((digest, media_type)) => Headed::Found(Head { digest, media_type }),
            None => Headed::Unclear,
        })
    }

    /// GETs the manifest and checks it: the bytes must hash to the
    /// `Docker-Content-Digest` header (with the header's algorithm) and to the
    /// reference's digest, be JSON of a supported manifest type, and agree
    /// with the Content-Type.
    pub async fn fetch_manifest(&self, reference: &Reference) -> Result<Manifest> {
        let context = reference.to_string();
        let registry = reference.registry();
        let limit = Limit {
            bytes: self.settings().limits.manifest,
            what: "manifest",
            partial: false,
        };
        let resp = self
            .execute(
                registry,
                manifest_request(Method::GET, reference, &context, limit),
            )
            .await?;
        if !resp.status.is_success() {
            return Err(Error::status(
                &context,
                registry,
                resp.status.as_u16(),
                &resp.body,
            ));
        }
        let bytes = &resp.body;
        let mut algorithm = Algorithm::Sha256;
        if let Some(h) = resp.header("docker-content-digest") {
            let claimed: Digest = h.parse().map_err(|reason: crate::name::InvalidDigest| {
                Error::malformed(&context, "Docker-Content-Digest header", reason.to_string())
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
            return Err(Error::invalid_reference(
                &reference.to_string(),
                "verification needs a reference with a digest (…@sha256:…)",
            ));
        }
        match self.fetch_manifest(reference).await {
            Ok(m) => Ok(ManifestCheck::Verified {
                media_type: m.media_type,
                size: m.bytes.len(),
            }),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound { .. }) => Ok(ManifestCheck::Missing),
            Err(e) => Err(e),
        }
    }
}

/// Checks a digest claimed for `bytes` (by a header, the reference or a
/// descriptor) against the exact bytes received; a mismatch names both.
pub(crate) fn check_claimed(
    claimed: &Digest,
    bytes: &[u8],
    context: &str,
    from: &'static str,
) -> Result<()> {
    if claimed.matches(bytes) {
        return Ok(());
    }
    let kind = ErrorKind::DigestMismatch {
        expected: claimed.to_string(),
        expected_from: from,
        actual: Digest::compute(claimed.algorithm(), bytes).to_string(),
    };
    Err(Error::new(kind, context, ""))
}

/// Checks that `bytes` are a JSON manifest of a supported type consistent
/// with the Content-Type; returns the media type.
pub(crate) fn check_manifest_body(
    context: &str,
    header: Option<&str>,
    bytes: &[u8],
) -> Result<String> {
    let malformed = |reason: String| Error::malformed(context, "manifest", reason);
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
            let kind = ErrorKind::MediaTypeMismatch {
                header: h.to_string(),
                body: b.clone(),
            };
            return Err(Error::new(kind, context, ""));
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
        assert!(
            matches!(e.kind(), ErrorKind::MediaTypeMismatch { .. }),
            "{e}"
        );
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

    #[test]
    fn claimed_digests_must_match_the_bytes() {
        let d = Digest::sha256(b"abc");
        assert!(check_claimed(&d, b"abc", "r", "the reference").is_ok());
        let e = check_claimed(&d, b"abd", "r", "the reference").unwrap_err();
        let ErrorKind::DigestMismatch {
            expected,
            expected_from,
            actual,
        } = e.kind()
        else {
            panic!("{e}")
        };
        assert_eq!(
            (expected, *expected_from, actual),
            (
                &d.to_string(),
                "the reference",
                &Digest::sha256(b"abd").to_string()
            )
        );
    }
}
