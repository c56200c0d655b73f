//! Assembling an image index (manifest list) from platform images already
//! in one repository, by digest: each child's manifest and config are read,
//! and the index lists them with the platform each config declares.
//!
//! # The same children give the same bytes
//!
//! Re-assembling from the same children (in any order, repeated or not)
//! gives byte-identical output, so the same digest: a resumed release, or
//! a second machine assembling the same legs, writes nothing new.
//!
//! - Entries are sorted by their platform string (`linux/amd64` before
//!   `linux/arm64`); a digest given twice is listed once.
//! - The document is serialised from fixed structs (no maps), compact, no
//!   trailing newline: `schemaVersion`, `mediaType`, `manifests`; each entry
//!   `mediaType`, `digest`, `size`, `platform`; each platform
//!   `architecture`, `os`, then `os.version`, `os.features` and `variant`
//!   only when the config has them. No annotations (a creation time would
//!   make every assembly differ).
//!
//! # Platforms
//!
//! An entry's platform is the child config's `os`, `architecture` (Go names:
//! `x86_64` is written `amd64`, `aarch64` `arm64`), `variant`, `os.version`
//! and `os.features`, as the config says: an arm64 config without a variant
//! gives an entry without one, a config that says `v8` an entry that says
//! `v8` (the entry describes the image; clients treat both alike). Pins and
//! `resolve` key platforms by [`Platform::normalized`], where `arm64/v8` is
//! `linux/arm64`; so two children of one normalised platform
//! (`linux/arm64` and `linux/arm64/v8`) are an error, not an ambiguous index.
//!
//! # What is refused
//!
//! A digest the repository does not have ([`ErrorKind::MissingChild`],
//! naming digest and repository); a child that is itself an index (give its
//! platform manifests instead, e.g. a leg built with provenance
//! attestations pushes an index); a child whose config says `unknown/unknown`
//! (an attestation: never an entry chosen as a platform); no children.
//!
//! # Media type
//!
//! An OCI image index when any child is an OCI manifest, else a Docker
//! manifest list (Docker schema 2 children only).

use super::client::Client;
use super::media_type as mt;
use super::{Digest, Error, ErrorKind, Platform, Reference, Repository, Result};
use bytes::Bytes;
use serde::Serialize;
use std::collections::BTreeMap;

/// One platform image an index is assembled from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// Its manifest's digest, media type and size, as stored.
    pub digest: Digest,
    pub media_type: String,
    pub size: u64,
    /// From its config.
    pub platform: Platform,
    pub os_version: Option<String>,
    pub os_features: Vec<String>,
}

/// An index, assembled: the exact bytes to PUT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssembledIndex {
    pub bytes: Bytes,
    pub media_type: &'static str,
    /// sha256 of `bytes`.
    pub digest: Digest,
    /// Each entry's platform (normalised, see [`Platform::normalized`]) and
    /// digest, in the index's order.
    pub platforms: Vec<(Platform, Digest)>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct IndexDoc<'a> {
    schema_version: u32,
    media_type: &'a str,
    manifests: Vec<EntryDoc<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EntryDoc<'a> {
    media_type: &'a str,
    digest: String,
    size: u64,
    platform: PlatformDoc<'a>,
}

#[derive(Serialize)]
struct PlatformDoc<'a> {
    architecture: &'a str,
    os: &'a str,
    #[serde(rename = "os.version", skip_serializing_if = "Option::is_none")]
    os_version: Option<&'a str>,
    #[serde(rename = "os.features", skip_serializing_if = "<[String]>::is_empty")]
    os_features: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    variant: Option<&'a str>,
}

fn refused(context: &str, reason: String) -> Error {
    Error::new(ErrorKind::Assembly { reason }, context, "")
}

/// The index of `children` (pure; see the module docs for the rules).
/// `context` (the repository) is for messages.
pub fn assemble(context: &str, children: &[Child]) -> Result<AssembledIndex> {
    let mut by_digest: BTreeMap<&Digest, &Child> = BTreeMap::new();
    for c in children {
        if mt::is_index(&c.media_type) {
            return Err(refused(
                context,
                format!(
                    "{} is itself an index ({}); give its platform images instead",
                    c.digest, c.media_type
                ),
            ));
        }
        if !mt::is_manifest(&c.media_type) {
            return Err(refused(
                context,
                format!("{} is not an image manifest ({})", c.digest, c.media_type),
            ));
        }
        if c.platform.is_unknown() {
            return Err(refused(
                context,
                format!(
                    "{} is for platform {} (an attestation, not a platform image)",
                    c.digest, c.platform
                ),
            ));
        }
        by_digest.insert(&c.digest, c);
    }
    if by_digest.is_empty() {
        return Err(refused(context, "no platform images were given".into()));
    }
    let mut by_platform: BTreeMap<Platform, &Child> = BTreeMap::new();
    for c in by_digest.values() {
        // In digest order, so the message names the two in that order.
        if let Some(other) = by_platform.insert(c.platform.normalized(), c) {
            return Err(refused(
                context,
                format!(
                    "{} ({}) and {} ({}) are images of the same platform",
                    other.digest, other.platform, c.digest, c.platform
                ),
            ));
        }
    }
    let mut entries: Vec<&Child> = by_platform.into_values().collect();
    entries.sort_by_cached_key(|c| (c.platform.to_string(), c.digest.clone()));
    let media_type = if entries.iter().any(|c| c.media_type == mt::OCI_MANIFEST) {
        mt::OCI_INDEX
    } else {
        mt::DOCKER_LIST
    };
    let doc = IndexDoc {
        schema_version: 2,
        media_type,
        manifests: entries
            .iter()
            .map(|c| EntryDoc {
                media_type: &c.media_type,
                digest: c.digest.to_string(),
                size: c.size,
                platform: PlatformDoc {
                    architecture: &c.platform.architecture,
                    os: &c.platform.os,
                    os_version: c.os_version.as_deref(),
                    os_features: &c.os_features,
                    variant: c.platform.variant.as_deref(),
                },
            })
            .collect(),
    };
    let bytes = Bytes::from(serde_json::to_vec(&doc).expect("an index serialises"));
    Ok(AssembledIndex {
        digest: Digest::sha256(&bytes),
        bytes,
        media_type,
        platforms: entries
            .iter()
            .map(|c| (c.platform.normalized(), c.digest.clone()))
            .collect(),
    })
}

impl Client {
    /// Reads each platform image `digests` names in `repo` (its manifest,
    /// verified, and its config), in the order given.
    pub async fn index_children(
        &self,
        repo: &Repository,
        digests: &[Digest],
    ) -> Result<Vec<Child>> {
        let mut out = Vec::with_capacity(digests.len());
        for digest in digests {
            let reference = Reference::in_repo(repo, digest.clone());
            let manifest = match self.fetch_manifest(&reference).await {
                Ok(m) => m,
                Err(e) if matches!(e.kind(), ErrorKind::NotFound { .. }) => {
                    let kind = ErrorKind::MissingChild {
                        digest: digest.to_string(),
                    };
                    return Err(Error::new(kind, repo.to_string(), repo.registry()));
                }
                Err(e) => return Err(e),
            };
            if mt::is_index(&manifest.media_type) {
                return Err(refused(
                    &repo.to_string(),
                    format!(
                        "{digest} is itself an index ({}); give its platform images instead",
                        manifest.media_type
                    ),
                ));
            }
            let config = self.config_of(&reference, &manifest).await?;
            let os_version = config
                .raw
                .get("os.version")
                .and_then(|v| v.as_str())
                .filter(|v| !v.is_empty())
                .map(str::to_string);
            let os_features = config
                .raw
                .get("os.features")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            out.push(Child {
                digest: digest.clone(),
                size: manifest.bytes.len() as u64,
                media_type: manifest.media_type,
                platform: config.platform,
                os_version,
                os_features,
            });
        }
        Ok(out)
    }

    /// The index of the platform images `digests` names in `repo` (read,
    /// not written; see [`assemble`]).
    pub async fn assemble_index(
        &self,
        repo: &Repository,
        digests: &[Digest],
    ) -> Result<AssembledIndex> {
        let children = self.index_children(repo, digests).await?;
        assemble(&repo.to_string(), &children)
    }

    /// PUTs an assembled index under `reference`'s tag, or its digest (which
    /// must be the index's own); returns the digest the registry stored.
    pub async fn put_index(&self, reference: &Reference, index: &AssembledIndex) -> Result<Digest> {
        self.put_manifest(reference, index.media_type, index.bytes.clone())
            .await
    }
}

/// A child of an index as `assemble` names it: a digest, or a tag in the
/// index's repository (read when the index is assembled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildRef {
    Digest(Digest),
    Tag(Reference),
}

/// Why an index could not be put at its target.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    #[error("{0} is not in the registry")]
    NoChild(Reference),
    #[error("{at}: the registry stored the index as {stored}, not {digest}")]
    StoredAs {
        at: Reference,
        stored: Digest,
        digest: Digest,
    },
    #[error(transparent)]
    Registry(#[from] Error),
}

impl Client {
    /// Assembles the index of `children` in `target`'s repository and puts
    /// it at `target` (by its digest when `target` has no tag), unless it
    /// is there already or `dry_run`; returns it and whether it was put.
    pub async fn assemble_at(
        &self,
        target: &Reference,
        children: Vec<ChildRef>,
        dry_run: bool,
    ) -> std::result::Result<(AssembledIndex, bool), AssembleError> {
        let mut digests = Vec::with_capacity(children.len());
        for child in children {
            digests.push(match child {
                ChildRef::Digest(d) => d,
                ChildRef::Tag(r) => match self.manifest_digest(&r).await? {
                    Some(d) => d,
                    None => return Err(AssembleError::NoChild(r)),
                },
            });
        }
        let index = self.assemble_index(target.repo(), &digests).await?;
        let at = if target.tag().is_some() {
            target.clone()
        } else {
            target.by_digest(index.digest.clone())
        };
        let there = self.manifest_digest(&at).await?;
        let put = !dry_run && there.as_ref() != Some(&index.digest);
        if put {
            let stored = self.put_index(&at, &index).await?;
            if stored != index.digest {
                return Err(AssembleError::StoredAs {
                    at,
                    stored,
                    digest: index.digest,
                });
            }
        }
        Ok((index, put))
    }
}

/// `assemble --json`: where the index is, what it is and lists.
#[derive(Debug, Serialize)]
pub struct IndexReport<'a> {
    pub reference: String,
    pub tag: Option<&'a str>,
    pub digest: String,
    pub media_type: &'static str,
    pub written: bool,
    pub platforms: Vec<PlatformEntry>,
}

/// One entry of an [`IndexReport`].
#[derive(Debug, Serialize)]
pub struct PlatformEntry {
    pub platform: String,
    pub digest: String,
}

impl<'a> IndexReport<'a> {
    pub fn new(target: &'a Reference, index: &AssembledIndex, written: bool) -> IndexReport<'a> {
        IndexReport {
            reference: format!("{}@{}", target.repo(), index.digest),
            tag: target.tag(),
            digest: index.digest.to_string(),
            media_type: index.media_type,
            written,
            platforms: index
                .platforms
                .iter()
                .map(|(p, d)| PlatformEntry {
                    platform: p.to_string(),
                    digest: d.to_string(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeRegistry;
    use super::super::index::Index;
    use super::*;

    fn child(n: u8, platform: &str, media_type: &str) -> Child {
        Child {
            digest: Digest::sha256(&[n]),
            media_type: media_type.into(),
            size: 100 + u64::from(n),
            platform: platform.parse().unwrap(),
            os_version: None,
            os_features: Vec::new(),
        }
    }

    #[test]
    fn the_same_children_in_any_order_give_the_same_bytes() {
        let amd = child(1, "linux/amd64", mt::OCI_MANIFEST);
        let arm = child(2, "linux/arm64", mt::OCI_MANIFEST);
        let a = assemble("r", &[amd.clone(), arm.clone()]).unwrap();
        let b = assemble("r", &[arm.clone(), amd.clone(), arm.clone()]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.digest, Digest::sha256(&a.bytes));
        assert_eq!(
            String::from_utf8(a.bytes.to_vec()).unwrap(),
            format!(
                r#"{{"schemaVersion":2,"mediaType":"{oi}","manifests":[{{"mediaType":"{om}","digest":"{d1}","size":101,"platform":{{"architecture":"amd64","os":"linux"}}}},{{"mediaType":"{om}","digest":"{d2}","size":102,"platform":{{"architecture":"arm64","os":"linux"}}}}]}}"#,
                oi = mt::OCI_INDEX,
                om = mt::OCI_MANIFEST,
                d1 = amd.digest,
                d2 = arm.digest,
            )
        );
        let parsed = Index::parse("r", &a.bytes).unwrap();
        assert_eq!(parsed.platforms(), a.platforms);
    }

    #[test]
    fn platforms_come_from_the_config_and_are_sorted_by_their_string() {
        let mut win = child(3, "windows/amd64", mt::OCI_MANIFEST);
        win.os_version = Some("10.0.17763.1".into());
        win.os_features = vec!["win32k".into()];
        let v8 = child(2, "linux/arm64/v8", mt::OCI_MANIFEST);
        let v6 = child(4, "linux/arm/v6", mt::OCI_MANIFEST);
        let amd = child(1, "linux/x86_64", mt::OCI_MANIFEST);
        let a = assemble("r", &[win, v8.clone(), v6, amd]).unwrap();
        let order: Vec<String> = a.platforms.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(
            order,
            [
                "linux/amd64",
                "linux/arm/v6",
                "linux/arm64",
                "windows/amd64"
            ],
            "sorted by the entries' platform strings; arm64/v8 is linux/arm64 for pins"
        );
        let doc: serde_json::Value = serde_json::from_slice(&a.bytes).unwrap();
        assert_eq!(
            doc["manifests"][2]["platform"],
            serde_json::json!({"architecture": "arm64", "os": "linux", "variant": "v8"}),
            "the entry says what the config says"
        );
        assert_eq!(
            doc["manifests"][3]["platform"],
            serde_json::json!({
                "architecture": "amd64", "os": "windows",
                "os.version": "10.0.17763.1", "os.features": ["win32k"],
            })
        );
        assert_eq!(a.platforms[2].1, v8.digest);
    }

    #[test]
    fn an_oci_child_makes_an_oci_index_else_a_docker_list() {
        let docker_amd = child(1, "linux/amd64", mt::DOCKER_MANIFEST);
        let docker_arm = child(2, "linux/arm64", mt::DOCKER_MANIFEST);
        let oci_arm = child(3, "linux/arm64", mt::OCI_MANIFEST);
        let docker = assemble("r", &[docker_amd.clone(), docker_arm]).unwrap();
        assert_eq!(docker.media_type, mt::DOCKER_LIST);
        let doc: serde_json::Value = serde_json::from_slice(&docker.bytes).unwrap();
        assert_eq!(doc["mediaType"], mt::DOCKER_LIST);
        assert_eq!(doc["manifests"][0]["mediaType"], mt::DOCKER_MANIFEST);
        let mixed = assemble("r", &[docker_amd, oci_arm]).unwrap();
        assert_eq!(mixed.media_type, mt::OCI_INDEX);
        let doc: serde_json::Value = serde_json::from_slice(&mixed.bytes).unwrap();
        assert_eq!(
            doc["manifests"][0]["mediaType"],
            mt::DOCKER_MANIFEST,
            "kept"
        );
        assert_eq!(doc["manifests"][1]["mediaType"], mt::OCI_MANIFEST);
    }

    #[test]
    fn what_cannot_make_an_index_is_refused_saying_why() {
        let amd = child(1, "linux/amd64", mt::OCI_MANIFEST);
        let cases = [
            (vec![], "no platform images were given".to_string()),
            (
                vec![amd.clone(), child(2, "unknown/unknown", mt::OCI_MANIFEST)],
                format!(
                    "{} is for platform unknown/unknown (an attestation",
                    Digest::sha256(&[2])
                ),
            ),
            (
                vec![child(3, "linux/amd64", mt::OCI_INDEX)],
                format!("{} is itself an index", Digest::sha256(&[3])),
            ),
            (
                vec![
                    amd.clone(),
                    child(4, "linux/arm64", mt::OCI_MANIFEST),
                    child(5, "linux/arm64/v8", mt::OCI_MANIFEST),
                ],
                {
                    let mut two = [
                        (Digest::sha256(&[4]), "linux/arm64"),
                        (Digest::sha256(&[5]), "linux/arm64/v8"),
                    ];
                    two.sort();
                    format!(
                        "{} ({}) and {} ({}) are images of the same platform",
                        two[0].0, two[0].1, two[1].0, two[1].1
                    )
                },
            ),
        ];
        for (children, want) in cases {
            let err = assemble("reg/repo", &children).unwrap_err();
            assert!(matches!(err.kind(), ErrorKind::Assembly { .. }), "{err}");
            let text = err.to_string();
            assert!(
                text.starts_with("reg/repo: cannot assemble an index: "),
                "{text}"
            );
            assert!(text.contains(&want), "{text} lacks {want}");
        }
    }

    fn push_image(reg: &FakeRegistry, repo: &str, arch: &str, media_type: &str) -> Digest {
        let config = serde_json::json!({"architecture": arch, "os": "linux"});
        reg.put_image(repo, &config, media_type)
    }

    #[tokio::test]
    async fn assembled_from_a_registry_put_and_re_assembled_to_the_same_digest() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let repo: Repository = format!("{}/a/b", reg.authority).parse().unwrap();
        let amd = push_image(&reg, "a/b", "amd64", mt::DOCKER_MANIFEST);
        let arm = push_image(&reg, "a/b", "aarch64", mt::OCI_MANIFEST);
        let index = client
            .assemble_index(&repo, &[arm.clone(), amd.clone()])
            .await
            .unwrap();
        assert_eq!(index.media_type, mt::OCI_INDEX, "one OCI child");
        assert_eq!(
            index.platforms,
            vec![
                ("linux/amd64".parse().unwrap(), amd.clone()),
                ("linux/arm64".parse().unwrap(), arm.clone()),
            ]
        );
        let tag = Reference::with_tag(&repo, "multi").unwrap();
        assert_eq!(client.put_index(&tag, &index).await.unwrap(), index.digest);
        let again = client.assemble_index(&repo, &[amd, arm]).await.unwrap();
        assert_eq!(again.bytes, index.bytes, "byte-identical");
        let by_digest = Reference::in_repo(&repo, again.digest.clone());
        assert_eq!(
            client.put_index(&by_digest, &again).await.unwrap(),
            index.digest
        );
        let stored = client.fetch_manifest(&tag).await.unwrap();
        assert_eq!(stored.bytes, index.bytes.to_vec());
        assert_eq!(stored.media_type, mt::OCI_INDEX);
        let arm64 = client
            .resolve(&tag, Some(&"linux/arm64".parse().unwrap()))
            .await
            .unwrap();
        assert_eq!(arm64.digest, index.platforms[1].1);
    }

    #[tokio::test]
    async fn assembled_at_a_target_once_and_a_missing_tag_named() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let repo: Repository = format!("{}/a/b", reg.authority).parse().unwrap();
        let amd = push_image(&reg, "a/b", "amd64", mt::OCI_MANIFEST);
        let target = Reference::with_tag(&repo, "multi").unwrap();
        let children = || vec![ChildRef::Digest(amd.clone())];
        let (dry, put) = client.assemble_at(&target, children(), true).await.unwrap();
        assert!(!put, "a dry run puts nothing");
        let (index, put) = client
            .assemble_at(&target, children(), false)
            .await
            .unwrap();
        assert!(put);
        assert_eq!(index.digest, dry.digest);
        let (_, put) = client
            .assemble_at(&target, children(), false)
            .await
            .unwrap();
        assert!(!put, "already there");
        let report = IndexReport::new(&target, &index, put);
        assert_eq!(report.reference, format!("{repo}@{}", index.digest));
        assert_eq!(report.tag, Some("multi"));

        let absent = Reference::with_tag(&repo, "absent").unwrap();
        let err = client
            .assemble_at(&target, vec![ChildRef::Tag(absent.clone())], false)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), format!("{absent} is not in the registry"));
    }

    #[tokio::test]
    async fn a_missing_child_names_digest_and_repository() {
        let reg = FakeRegistry::start().await;
        let client = reg.client();
        let repo: Repository = format!("{}/a/b", reg.authority).parse().unwrap();
        let amd = push_image(&reg, "a/b", "amd64", mt::OCI_MANIFEST);
        let missing = Digest::sha256(b"never pushed");
        let err = client
            .assemble_index(&repo, &[amd.clone(), missing.clone()])
            .await
            .unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::MissingChild { .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("{repo}: cannot assemble an index: the platform image {missing} is not in the repository")),
            "{text}"
        );
        // A child that is an index is refused.
        let index = client.assemble_index(&repo, &[amd]).await.unwrap();
        client
            .put_index(&Reference::in_repo(&repo, index.digest.clone()), &index)
            .await
            .unwrap();
        let err = client
            .assemble_index(&repo, std::slice::from_ref(&index.digest))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("{} is itself an index", index.digest)),
            "{err}"
        );
        assert_eq!(
            reg.state().count("GET", "/blobs/"),
            2,
            "configs only, never layers"
        );
    }
}
