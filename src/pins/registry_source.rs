//! [`ImageSource`] on the real registry client.

use super::Digest;
use super::source::{DigestCheck, ImageSource, Inspected, PlatformImage, SourceError};
use crate::registry::{
    self, Client, ErrorKind, Index, ManifestCheck, Reference, Repository, ResolveOptions,
};

/// The registry client as pinning reads it.
pub struct RegistrySource {
    client: Client,
}

fn err(reference: &str, e: registry::Error) -> SourceError {
    // The SourceError names the reference once already; the registry's
    // message about that same reference does not repeat it.
    let message = if e.context() == reference {
        e.without_context()
    } else {
        e.to_string()
    };
    SourceError {
        reference: reference.to_string(),
        not_found: matches!(e.kind(), ErrorKind::NotFound { .. }),
        message,
    }
}

impl RegistrySource {
    /// Reads through `client` (configured by the caller, with the registry
    /// options every command shares).
    pub fn new(client: Client) -> RegistrySource {
        RegistrySource { client }
    }

    /// Splits `host/repo:tag` or `host/repo@digest` into the repository and
    /// the tag or digest.
    pub fn split_reference(input: &str) -> Result<(String, String), registry::Error> {
        let r: Reference = input.parse()?;
        let what = match (r.digest(), r.tag()) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.to_string(),
            (None, None) => "latest".to_string(),
        };
        Ok((format!("{}/{}", r.registry(), r.repository()), what))
    }

    fn reference(repository: &str, reference: &str) -> Result<Reference, SourceError> {
        let sep = if reference.contains(':') { '@' } else { ':' };
        let text = format!("{repository}{sep}{reference}");
        text.parse()
            .map_err(|e: crate::name::Invalid| err(&text, e.into()))
    }
}

impl ImageSource for RegistrySource {
    async fn tags(&self, repository: &str) -> Result<Vec<String>, SourceError> {
        let repo: Repository = repository
            .parse()
            .map_err(|e: crate::name::Invalid| err(repository, e.into()))?;
        self.client
            .list_tags(&repo)
            .await
            .map_err(|e| err(repository, e))
    }

    async fn inspect(&self, repository: &str, reference: &str) -> Result<Inspected, SourceError> {
        let r = Self::reference(repository, reference)?;
        let name = r.to_string();
        // The manifest is read once: an index's entries name the platform
        // images, an image's manifest names its config.
        let manifest = (self.client.fetch_manifest(&r).await).map_err(|e| err(&name, e))?;
        let images = if registry::media_type::is_index(&manifest.media_type) {
            let index = Index::parse(&name, &manifest.bytes).map_err(|e| err(&name, e))?;
            // Each platform's config at once, in the index's order.
            let platforms = index.platforms();
            let configs = platforms.iter().map(|(platform, d)| async {
                let child = r.by_digest(d.clone());
                let config = self.client.image_config(&child, Some(platform)).await;
                config.map(|config| PlatformImage {
                    platform: platform.normalized(),
                    digest: d.clone(),
                    labels: config.labels,
                })
            });
            registry::in_order(configs, registry::REQUESTS)
                .await
                .map_err(|e| err(&name, e))?
        } else {
            let config = (self.client.config_of(&r, &manifest).await).map_err(|e| err(&name, e))?;
            vec![PlatformImage {
                platform: config.platform.normalized(),
                digest: manifest.digest.clone(),
                labels: config.labels,
            }]
        };
        Ok(Inspected {
            digest: manifest.digest,
            images,
        })
    }

    async fn tag_digest(&self, repository: &str, tag: &str) -> Result<Option<Digest>, SourceError> {
        let r = Self::reference(repository, tag)?;
        let name = r.to_string();
        match self
            .client
            .resolve_with(&r, &ResolveOptions::default())
            .await
        {
            Ok(resolved) => {
                let d = resolved.index_digest.as_ref().unwrap_or(&resolved.digest);
                Ok(Some(d.clone()))
            }
            Err(e) if matches!(e.kind(), ErrorKind::NotFound { .. }) => Ok(None),
            Err(e) => Err(err(&name, e)),
        }
    }

    async fn check_digest(&self, repository: &str, d: &Digest) -> Result<DigestCheck, SourceError> {
        let r = Self::reference(repository, &d.to_string())?;
        let name = r.to_string();
        match self.client.verify_manifest(&r).await {
            Ok(ManifestCheck::Verified { .. }) => Ok(DigestCheck::Intact),
            Ok(ManifestCheck::Missing) => Ok(DigestCheck::Missing),
            Err(e) => match e.kind() {
                ErrorKind::DigestMismatch { actual, .. } => Ok(DigestCheck::Mismatch {
                    actual: actual.parse().map_err(|why: crate::name::InvalidDigest| {
                        SourceError {
                            reference: name.clone(),
                            message: format!("bad digest {actual:?}: {why}"),
                            not_found: false,
                        }
                    })?,
                }),
                _ => Err(err(&name, e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_is_named_once() {
        let e = err(
            "r.io/a:1",
            registry::Error::status("r.io/a:1", "r.io", 404, b""),
        );
        assert_eq!(e.message, "not found in registry r.io (HTTP 404)");
        assert!(e.not_found);
        // An error about another reference (a child) keeps its own.
        let e = err(
            "r.io/a:1",
            registry::Error::status("r.io/a@sha256:x", "r.io", 503, b""),
        );
        assert_eq!(
            e.message,
            "r.io/a@sha256:x: registry r.io answered HTTP 503"
        );
        assert!(!e.not_found);
    }
}
