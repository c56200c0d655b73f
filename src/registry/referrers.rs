//! OCI 1.1 referrers: the manifests whose `subject` is a given image.
//! A registry with the referrers API lists them at
//! `GET /v2/<repo>/referrers/<digest>`; one without it (distribution 2.x
//! answers 404) has them listed by whoever wrote them in the fallback tag
//! `<alg>-<hex>` (an OCI image index), which [`fallback_tag`] names.

use super::client::Client;
use super::transport::Request;
use super::transport::bearer::Scope;
use super::transport::limits::Limit;
use super::{Digest, Error, Reference, Repository, Result};
use reqwest::Method;
use reqwest::header::{self, HeaderMap, HeaderValue};

/// The tag an image's referrers are listed under without the API.
pub fn fallback_tag(subject: &Digest) -> String {
    format!("{}-{}", subject.algorithm().name(), subject.hex())
}

/// The fallback tag of `subject` in `repo`, as a reference.
pub fn fallback_reference(repo: &Repository, subject: &Digest) -> Reference {
    Reference::with_tag(repo, &fallback_tag(subject)).expect("an alg-hex tag is valid")
}

impl Client {
    /// The referrers index the registry's API answers for `subject`, or
    /// `None` when it has no referrers API (404, 400 or 405). The answer is
    /// what the registry says; each listed manifest is to be fetched by
    /// digest and checked by the caller.
    pub async fn referrers_api(
        &self,
        repo: &Repository,
        subject: &Digest,
    ) -> Result<Option<Vec<u8>>> {
        let context = format!("the referrers of {repo}@{subject}");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(super::media_type::OCI_INDEX),
        );
        let request = Request {
            method: Method::GET,
            target: format!("/v2/{}/referrers/{subject}", repo.path()),
            headers,
            body: None,
            scope: Scope::pull(repo.path()),
            context: &context,
            limit: Limit {
                bytes: self.settings().limits.manifest,
                what: "referrers index",
                partial: false,
            },
        };
        let resp = self.execute(repo.registry(), request).await?;
        match resp.status.as_u16() {
            400 | 404 | 405 => Ok(None),
            s if (200..300).contains(&s) => {
                let index = super::manifest::check_manifest_body(
                    &context,
                    Some(super::media_type::OCI_INDEX),
                    &resp.body,
                )?;
                if !super::media_type::is_index(&index) {
                    return Err(Error::malformed(
                        &context,
                        "referrers index",
                        "not an index",
                    ));
                }
                Ok(Some(resp.body))
            }
            s => Err(Error::status(&context, repo.registry(), s, &resp.body)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_tag_is_alg_dash_hex() {
        let d = Digest::sha256(b"x");
        assert_eq!(fallback_tag(&d), format!("sha256-{}", d.hex()));
        let repo: Repository = "r.example/a/b".parse().unwrap();
        assert_eq!(
            fallback_reference(&repo, &d).to_string(),
            format!("r.example/a/b:sha256-{}", d.hex())
        );
    }
}
