//! Writing manifests: `PUT /v2/<repo>/manifests/<tag or digest>` with the
//! exact bytes and their media type, and the registry held to the digest of
//! what was sent. A PUT by tag or digest is idempotent, so a 5xx is retried
//! (by the retry layer, like any request).

use super::client::Client;
use super::transport::Request;
use super::transport::bearer::Scope;
use super::transport::limits::Limit;
use super::{Digest, Error, ErrorKind, Reference, Result};
use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{self, HeaderMap, HeaderValue};

impl Client {
    /// Puts `bytes` (a manifest of `media_type`) under `reference`'s tag, or
    /// its digest when it has one (which must be the bytes' own). Returns the
    /// sha256 digest of the bytes, which the registry's `Docker-Content-Digest`
    /// must equal; a registry that sends none is asked with a HEAD by digest.
    pub async fn put_manifest(
        &self,
        reference: &Reference,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<Digest> {
        Ok(self
            .put_manifest_answered(reference, media_type, bytes)
            .await?
            .0)
    }

    /// [`Client::put_manifest`], also telling whether the registry answered
    /// with an `OCI-Subject` header: it processed the manifest's `subject`
    /// (OCI distribution 1.1), so no referrers tag needs maintaining.
    pub async fn put_manifest_answered(
        &self,
        reference: &Reference,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<(Digest, bool)> {
        let context = reference.to_string();
        let registry = reference.registry();
        let sent = Digest::sha256(&bytes);
        if let Some(wanted) = reference.digest() {
            super::manifest::check_claimed(wanted, &bytes, &context, "the reference")?;
        }
        let limit = self.settings().limits.manifest;
        if bytes.len() > limit {
            let kind = ErrorKind::TooLarge {
                what: "manifest",
                limit,
            };
            return Err(Error::new(kind, &context, registry));
        }
        let mut headers = HeaderMap::new();
        let content_type = HeaderValue::from_str(media_type).map_err(|_| {
            Error::malformed(
                &context,
                "media type",
                format!("{media_type:?} is not a header value"),
            )
        })?;
        headers.insert(header::CONTENT_TYPE, content_type);
        let request = Request {
            method: Method::PUT,
            target: format!(
                "/v2/{}/manifests/{}",
                reference.repository(),
                reference.manifest_ref()
            ),
            headers,
            body: Some(bytes.clone()),
            scope: Scope::push(reference.repository()),
            context: &context,
            limit: Limit {
                bytes: 64 << 10,
                what: "manifest answer",
                partial: false,
            },
        };
        let resp = self.execute(registry, request).await?;
        if !resp.status.is_success() {
            let status = resp.status.as_u16();
            return Err(Error::status(&context, registry, status, &resp.body));
        }
        let subject = resp.header("oci-subject").is_some();
        match resp.header("docker-content-digest") {
            Some(answered) => {
                let matches = answered
                    .parse::<Digest>()
                    .is_ok_and(|claimed| claimed.matches(&bytes));
                if !matches {
                    let kind = ErrorKind::AnsweredDigest {
                        sent: sent.to_string(),
                        answered: answered.to_string(),
                    };
                    return Err(Error::new(kind, &context, registry));
                }
            }
            None => {
                let stored = self
                    .head_manifest(&reference.by_digest(sent.clone()))
                    .await?;
                if stored.as_ref().map(|h| &h.digest) != Some(&sent) {
                    let kind = ErrorKind::AnsweredDigest {
                        sent: sent.to_string(),
                        answered: stored.map_or("nothing".into(), |h| h.digest.to_string()),
                    };
                    return Err(Error::new(kind, &context, registry));
                }
            }
        }
        Ok((sent, subject))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeRegistry;
    use super::*;

    const MT: &str = "application/vnd.oci.image.manifest.v1+json";

    fn reference(reg: &FakeRegistry, s: &str) -> Reference {
        format!("{}/{s}", reg.authority).parse().unwrap()
    }

    #[tokio::test]
    async fn exact_bytes_under_a_tag_and_by_digest() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        // Not canonical JSON: what is stored is what was sent.
        let bytes =
            Bytes::from_static(b"{ \"schemaVersion\": 2,\n  \"config\": {}, \"layers\": [] }\n");
        let digest = client
            .put_manifest(&reference(&reg, "a/b:v1"), MT, bytes.clone())
            .await
            .unwrap();
        assert_eq!(digest, Digest::sha256(&bytes));
        let by_digest = reference(&reg, "a/b").by_digest(digest.clone());
        assert_eq!(
            client
                .put_manifest(&by_digest, MT, bytes.clone())
                .await
                .unwrap(),
            digest
        );
        let s = reg.state();
        assert_eq!(s.tags[&("a/b".into(), "v1".into())], digest.to_string());
        let stored = &s.manifests[&("a/b".into(), digest.to_string())];
        assert_eq!((stored.0.as_str(), stored.1.as_slice()), (MT, &bytes[..]));
    }

    #[tokio::test]
    async fn a_5xx_is_retried_and_a_wrong_answer_fails() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let bytes = Bytes::from_static(b"{}");
        reg.state()
            .faults
            .push(("PUT", "/manifests/v1".into(), 502));
        client
            .put_manifest(&reference(&reg, "a/b:v1"), MT, bytes.clone())
            .await
            .unwrap();
        assert_eq!(reg.state().count("PUT", "/manifests/v1"), 2);

        let other = Digest::sha256(b"something else").to_string();
        reg.state().answer_digest = Some(other.clone());
        let err = client
            .put_manifest(&reference(&reg, "a/b:v2"), MT, bytes.clone())
            .await
            .unwrap_err();
        let ErrorKind::AnsweredDigest { sent, answered } = err.kind() else {
            panic!("{err}")
        };
        assert_eq!(
            (sent.as_str(), answered.as_str()),
            (Digest::sha256(&bytes).to_string().as_str(), other.as_str())
        );
        assert!(
            err.to_string().contains("did not store what was sent"),
            "{err}"
        );

        // No Docker-Content-Digest: a HEAD by digest confirms instead.
        reg.state().answer_digest = None;
        reg.state().omit_digest = true;
        client
            .put_manifest(&reference(&reg, "a/b:v3"), MT, bytes.clone())
            .await
            .unwrap();
        assert_eq!(reg.state().count("HEAD", "/manifests/sha256:"), 1);
    }

    #[tokio::test]
    async fn a_reference_digest_must_be_the_bytes_own() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let wrong = reference(&reg, "a/b").by_digest(Digest::sha256(b"x"));
        let err = client
            .put_manifest(&wrong, MT, Bytes::from_static(b"{}"))
            .await
            .unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::DigestMismatch { .. }),
            "{err}"
        );
        assert!(reg.state().log.is_empty(), "nothing sent");
    }
}
