//! What pinning needs from a registry, behind a small trait so the planning
//! and verification rules are testable with an in-memory registry.

use super::Digest;
use crate::name::Platform;
use std::collections::BTreeMap;

/// One platform image of a tag or digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformImage {
    /// Normalised (`linux/arm64`, never `linux/arm64/v8`: see
    /// [`Platform::normalized`]).
    pub platform: Platform,
    pub digest: Digest,
    /// Config labels (read from a config blob whose digest was verified).
    pub labels: BTreeMap<String, String>,
}

/// A resolved tag or digest: the digest to run and its platform images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    pub digest: Digest,
    pub images: Vec<PlatformImage>,
}

impl Inspected {
    /// The image whose labels stand for the whole tag: the image of the
    /// first of `preferred` it has, otherwise its first. `preferred` is the
    /// variant's `platforms` in images.toml, whose first is the one the
    /// family is built for first (what the servers run); every platform's
    /// record passed the gate and a release refuses platforms whose tools
    /// differ, so this picks whose labels are quoted, not what is allowed.
    pub fn primary(&self, preferred: &[Platform]) -> Option<&PlatformImage> {
        preferred
            .iter()
            .find_map(|p| self.images.iter().find(|i| i.platform == *p))
            .or_else(|| self.images.first())
    }
    pub fn platforms(&self) -> BTreeMap<Platform, Digest> {
        self.images
            .iter()
            .map(|i| (i.platform.clone(), i.digest.clone()))
            .collect()
    }
}

/// Whether a pinned digest is still what it claims to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestCheck {
    /// Present, and its bytes hash to the digest.
    Intact,
    Missing,
    /// The registry served bytes hashing to something else.
    Mismatch {
        actual: Digest,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference}: {message}")]
pub struct SourceError {
    pub reference: String,
    pub message: String,
    pub not_found: bool,
}

/// Async: a caller asks for several images at once (`pins verify` checks
/// every alias concurrently) and joins the futures on its own task; they are
/// never spawned, so no `Send` bound is promised.
#[allow(async_fn_in_trait)]
pub trait ImageSource {
    /// All tags of a repository (`host/path`).
    async fn tags(&self, repository: &str) -> Result<Vec<String>, SourceError>;
    /// Resolves a tag or digest and reads each platform's config labels.
    async fn inspect(&self, repository: &str, reference: &str) -> Result<Inspected, SourceError>;
    /// The digest a tag points at now, `None` when the tag is gone.
    async fn tag_digest(&self, repository: &str, tag: &str) -> Result<Option<Digest>, SourceError>;
    /// Fetches a manifest by digest and hashes its bytes.
    async fn check_digest(
        &self,
        repository: &str,
        digest: &Digest,
    ) -> Result<DigestCheck, SourceError>;
}

#[cfg(test)]
pub mod fake {
    //! An in-memory registry: tags pointing at images with labels.
    use super::*;
    use std::cell::{Cell, RefCell};

    #[derive(Default)]
    pub struct FakeRegistry {
        /// (repository, tag) -> image.
        pub tags: RefCell<BTreeMap<(String, String), Inspected>>,
        /// Digests whose bytes were tampered with: digest -> what they hash to.
        pub tampered: RefCell<BTreeMap<Digest, Digest>>,
        pub deleted: RefCell<Vec<Digest>>,
        /// Every image ever pushed, by digest (a moved tag leaves it behind).
        pub manifests: RefCell<BTreeMap<Digest, Inspected>>,
        /// Digest checks under way now, and the most at once.
        pub in_flight: Cell<usize>,
        pub max_in_flight: Cell<usize>,
    }

    fn not_found(reference: String) -> SourceError {
        SourceError {
            reference,
            message: "not found".into(),
            not_found: true,
        }
    }

    impl FakeRegistry {
        pub fn push(&self, repo: &str, tag: &str, image: Inspected) {
            self.manifests
                .borrow_mut()
                .insert(image.digest.clone(), image.clone());
            self.tags
                .borrow_mut()
                .insert((repo.to_string(), tag.to_string()), image);
        }
        fn all(&self) -> Vec<Inspected> {
            self.manifests.borrow().values().cloned().collect()
        }
    }

    impl ImageSource for FakeRegistry {
        async fn tags(&self, repository: &str) -> Result<Vec<String>, SourceError> {
            Ok(self
                .tags
                .borrow()
                .keys()
                .filter(|(r, _)| r == repository)
                .map(|(_, t)| t.clone())
                .collect())
        }
        async fn inspect(
            &self,
            repository: &str,
            reference: &str,
        ) -> Result<Inspected, SourceError> {
            let found = if reference.contains(':') {
                self.all()
                    .into_iter()
                    .find(|i| i.digest.to_string() == reference)
            } else {
                self.tags
                    .borrow()
                    .get(&(repository.to_string(), reference.to_string()))
                    .cloned()
            };
            found
                .filter(|i| !self.deleted.borrow().contains(&i.digest))
                .ok_or_else(|| not_found(format!("{repository}:{reference}")))
        }
        async fn tag_digest(
            &self,
            repository: &str,
            tag: &str,
        ) -> Result<Option<Digest>, SourceError> {
            Ok(self
                .tags
                .borrow()
                .get(&(repository.to_string(), tag.to_string()))
                .map(|i| i.digest.clone()))
        }
        async fn check_digest(
            &self,
            _repository: &str,
            digest: &Digest,
        ) -> Result<DigestCheck, SourceError> {
            // Counted across a yield, so checks made at once overlap here.
            let now = self.in_flight.get() + 1;
            self.in_flight.set(now);
            self.max_in_flight.set(self.max_in_flight.get().max(now));
            tokio::task::yield_now().await;
            self.in_flight.set(self.in_flight.get() - 1);
            if self.deleted.borrow().contains(digest) {
                return Ok(DigestCheck::Missing);
            }
            if let Some(actual) = self.tampered.borrow().get(digest) {
                return Ok(DigestCheck::Mismatch {
                    actual: actual.clone(),
                });
            }
            let known = self
                .all()
                .into_iter()
                .any(|i| i.digest == *digest || i.images.iter().any(|p| p.digest == *digest));
            Ok(if known {
                DigestCheck::Intact
            } else {
                DigestCheck::Missing
            })
        }
    }
}
